"""Storm's TransactionalGlobalCount: how many tuples were ever emitted, counted exactly once.

    squall run examples/transactional_global_count.py:topology --checkpoint /tmp/tgc
    squall run examples/transactional_global_count.py:topology --runner local

A `MemoryTransactionalSpout` (three partitions, at most 3 tuples of each per batch) feeds
`partial-count` (3 tasks), which counts the tuples of its share of a batch and emits the count in
`finish_batch`. `sum` is a committer: it adds the partial counts and, in the commit phase (one
transaction at a time, in id order), adds the batch's total to the global count, stored with the
transaction id in a transactional map, so a transaction committed twice (after a crash) counts
once. The map lives in `global_count.db`: `{"provider": "durable", "dir": ...}` (default: a
directory under the system's temporary directory) or `{"provider": "redis", "host": ...}`.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from squall import Config, Fields
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    open_map,
)

DATA = {
    0: [["cat"], ["dog"], ["chicken"], ["cat"], ["dog"], ["apple"]],
    1: [["cat"], ["dog"], ["apple"], ["banana"]],
    2: [["cat"], ["cat"], ["cat"], ["cat"], ["cat"], ["dog"], ["dog"], ["dog"], ["dog"]],
}
GLOBAL = "GLOBAL-COUNT"


def open_db(conf: Any, name: str = "global-count"):
    spec = dict(conf.get("global_count.db") or {
        "provider": "durable", "dir": os.path.join(tempfile.gettempdir(), "squall-tgc")})
    provider = spec.pop("provider", "durable")
    return open_map(name, provider=provider, config=spec)


class BatchCount(BatchBolt):
    """Counts the tuples of this task's share of one batch."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.collector, self.attempt, self.count = collector, attempt, 0

    def execute(self, tup) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.attempt, self.count])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BatchBolt, Committer):
    """Adds a batch's count to the stored global count, once per transaction."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.collector, self.attempt, self.sum = collector, attempt, 0
        self.db = open_db(conf)

    def execute(self, tup) -> None:
        self.sum += tup["count"]

    def finish_batch(self) -> None:
        entry = self.db.update(self.attempt.transaction_id,
                               {GLOBAL: lambda n: n + self.sum}, initial=0)[GLOBAL]
        self.db.close()
        self.collector.emit([self.attempt, entry.value])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "sum"))


def build(data: dict[int, list[list[Any]]] | None = None, max_batch: int = 3,
          tx_id: str = "global-count") -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(data or DATA, Fields("word"), max_batch)
    builder = TransactionalTopologyBuilder(tx_id, "spout", spout, 3)
    builder.set_bolt("partial-count", BatchCount(), 3).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return builder


def topology():
    # A fresh store per run: the coordinator starts again at transaction 1 in a new run (or a
    # new checkpoint), and opaque values written by an earlier run's later transactions would
    # rightly refuse it. To resume a run, pass the same --checkpoint and
    # -c global_count.db='{"provider": "durable", "dir": ...}' again.
    return build().create_topology(), Config({
        "global_count.db": {"provider": "durable", "dir": tempfile.mkdtemp(prefix="squall-tgc-")}})
