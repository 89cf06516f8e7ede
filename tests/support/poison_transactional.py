"""A transactional topology whose first transaction fails on every attempt, for the stop tests
(a file TARGET of `squall run`).

`spout` (a `MemoryTransactionalSpout` of two words) -> `boom` (a batch bolt raising on every
tuple). With Storm's default (no `squall.transactional.max.attempts`) the transaction is tried
again for ever, so only a stop or a limit ends the run.
"""

from __future__ import annotations

from squall import Fields
from squall.transactional import BatchBolt, MemoryTransactionalSpout, TransactionalTopologyBuilder


class Boom(BatchBolt):
    def prepare(self, conf, context, collector, attempt):
        self.collector = collector

    def execute(self, tup):
        raise RuntimeError(f"cannot handle {tup['word']!r}")

    def finish_batch(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def build():
    spout = MemoryTransactionalSpout({0: [["a"], ["b"]]}, Fields("word"), 10)
    b = TransactionalTopologyBuilder("poison-tx", "spout", spout, 1)
    b.set_bolt("boom", Boom()).shuffle_grouping("spout")
    return b.create_topology()
