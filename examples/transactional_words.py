"""Storm's TransactionalWords: word counts and counts of counts, two stores, one transaction.

    squall run examples/transactional_words.py:topology --checkpoint /tmp/tw
    squall run examples/transactional_words.py:topology --runner local

`count` (a committer, fields-grouped by word) counts the words of a batch and, in the commit
phase, adds them to the word-count map; each entry is an `OpaqueValue` (count, count before this
transaction, txid), so a replayed commit neither double-counts nor loses the previous count. It
emits (word, count, previous count); `bucketize` turns that into +1 for the word's new bucket
(`count // 10`) and -1 for its old one when it moved; `buckets` adds those to the bucket map,
also in the commit phase (it is downstream of a committer). Both maps live in
`transactional_words.db` (`{"provider": "durable", "dir": ...}` by default under the system's
temporary directory, or `{"provider": "redis", ...}`), so after any number of failures and
restarts the buckets are exactly the histogram of the word counts.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Any

from squall import Config, Fields
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    TransactionalSpout,
    TransactionalTopologyBuilder,
    open_map,
)

BUCKET_SIZE = 10
SENTENCES = {
    0: "the cow jumped over the moon the man went to the store and bought some candy",
    1: "four score and seven years ago the cow and the moon",
    2: "an apple a day keeps the doctor away the doctor said",
}
DATA = {partition: [[w] for w in text.split()] for partition, text in SENTENCES.items()}


def open_db(conf: Any, name: str):
    spec = dict(conf.get("transactional_words.db") or {
        "provider": "durable", "dir": os.path.join(tempfile.gettempdir(), "squall-tw")})
    provider = spec.pop("provider", "durable")
    return open_map(name, provider=provider, config=spec, opaque=True)


class KeyedCountUpdater(BatchBolt, Committer):
    """Counts its words of a batch; adds them to the word map in the commit phase."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.conf, self.collector, self.attempt = conf, collector, attempt
        self.counts: Counter[str] = Counter()

    def execute(self, tup) -> None:
        self.counts[tup["word"]] += 1

    def finish_batch(self) -> None:
        db = open_db(self.conf, "word-counts")
        changes = {w: (lambda n, c=c: (n or 0) + c) for w, c in self.counts.items()}
        entries = db.update(self.attempt.transaction_id, changes, initial=None)
        db.close()
        for word, entry in entries.items():
            self.collector.emit([self.attempt, word, entry.current, entry.previous])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "word", "count", "prev_count"))


class Bucketize(BatchBolt):
    """+1 for the bucket a word's count is now in, -1 for the bucket it left."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.collector, self.attempt = collector, attempt

    def execute(self, tup) -> None:
        bucket = tup["count"] // BUCKET_SIZE
        prev = tup["prev_count"]
        if prev is None:
            self.collector.emit([self.attempt, bucket, 1])
        elif prev // BUCKET_SIZE != bucket:
            self.collector.emit([self.attempt, bucket, 1])
            self.collector.emit([self.attempt, prev // BUCKET_SIZE, -1])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "bucket", "delta"))


class BucketCountUpdater(BatchBolt):
    """Adds the deltas to the bucket map (in the commit phase: downstream of a committer)."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.conf, self.attempt = conf, attempt
        self.deltas: Counter[int] = Counter()

    def execute(self, tup) -> None:
        self.deltas[tup["bucket"]] += tup["delta"]

    def finish_batch(self) -> None:
        db = open_db(self.conf, "bucket-counts")
        db.update(self.attempt.transaction_id,
                  {b: (lambda n, d=d: n + d) for b, d in self.deltas.items()}, initial=0)
        db.close()


def build(spout: TransactionalSpout | None = None, emitters: int = 3, counters: int = 5,
          tx_id: str = "transactional-words") -> TransactionalTopologyBuilder:
    spout = spout or MemoryTransactionalSpout(DATA, Fields("word"), max_batch=3)
    builder = TransactionalTopologyBuilder(tx_id, "spout", spout, emitters)
    builder.set_bolt("count", KeyedCountUpdater(), counters).fields_grouping(
        "spout", Fields("word"))
    builder.set_bolt("bucketize", Bucketize()).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), counters).fields_grouping(
        "bucketize", Fields("bucket"))
    return builder


def histogram(word_counts: dict[str, int]) -> dict[int, int]:
    """What the bucket map must hold for these word counts (buckets that are empty omitted)."""
    return dict(Counter(c // BUCKET_SIZE for c in word_counts.values()))


def topology():
    # A fresh store per run: the coordinator starts again at transaction 1 in a new run (or a
    # new checkpoint), and opaque values written by an earlier run's later transactions would
    # rightly refuse it. To resume a run, pass the same --checkpoint and
    # -c transactional_words.db='{"provider": "durable", "dir": ...}' again.
    return build().create_topology(), Config({
        "transactional_words.db": {"provider": "durable",
                                   "dir": tempfile.mkdtemp(prefix="squall-tw-")}})
