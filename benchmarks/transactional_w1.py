"""TransactionalWords on W1, on both runners, against the at-least-once word count.

    .venv/bin/python benchmarks/transactional_w1.py [--sentences 200000] [--runner both]
        [--per-batch N]

Workload: W1's sentences in a `MemoryTransactionalSpout` (two partitions), `split` (BatchBolt,
2 tasks) -> `count` (committer, 2 tasks, fields grouping on the word; word counts as
`OpaqueValue`s in a durable map) -> `bucketize` -> `buckets` (bucket counts in a second durable
map), i.e. TransactionalWords with a split stage in front. Baseline in the same process: the
at-least-once W1 topology of benchmarks/w1_local.py / w1_spark.py with acking on. Local: whole
run, 10,000 sentences per partition per transaction, max spout pending 2. Spark: the whole input
as one transaction (one micro-batch), as the at-least-once figure is the whole input as one
micro-batch; timed is the data batch (the at-least-once `triggerExecution`, the transactional
driver's time for the transaction). Counts are checked against the reference every run.
`--per-batch N` (Spark only): the transactional topology alone, N sentences per partition per
transaction, the median of its transactions' times (what a transaction costs besides its data).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import transactional_words as tw
from workloads import reference_counts, w1_sentences

from squall import Fields
from squall.transactional import (
    BatchBolt,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)


class SplitBatch(BatchBolt):
    def prepare(self, conf, context, collector, attempt) -> None:
        self.emit, self.attempt = collector.emit, attempt

    def execute(self, tup) -> None:
        emit, attempt = self.emit, self.attempt
        for word in tup[1].split():
            emit([attempt, word])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "word"))


def topology(sentences: list[str], per_batch: int):
    half = len(sentences) // 2
    data = {0: [[s] for s in sentences[:half]], 1: [[s] for s in sentences[half:]]}
    spout = MemoryTransactionalSpout(data, Fields("sentence"), per_batch)
    b = TransactionalTopologyBuilder("tw-w1", "spout", spout, 2)
    b.set_bolt("split", SplitBatch(), 2).shuffle_grouping("spout")
    b.set_bolt("count", tw.KeyedCountUpdater(), 2).fields_grouping("split", Fields("word"))
    b.set_bolt("bucketize", tw.Bucketize()).none_grouping("count")
    b.set_bolt("buckets", tw.BucketCountUpdater(), 2).fields_grouping("bucketize",
                                                                       Fields("bucket"))
    return b.create_topology()


def check(conf: dict, expected: dict[str, int]) -> None:
    counts = tw.open_db(conf, "word-counts").values()
    if counts != expected:
        raise AssertionError("transactional word counts differ from the reference")
    buckets = {k: v for k, v in tw.open_db(conf, "bucket-counts").values().items() if v}
    if buckets != dict(Counter(c // tw.BUCKET_SIZE for c in counts.values())):
        raise AssertionError("bucket counts differ from the histogram of the word counts")


def local(sentences: list[str], words: int, expected: dict[str, int]) -> None:
    from w1_local import squall_run

    from squall.runtime.local.engine import LocalEngine

    base_s, base_counts = squall_run(sentences, acking=True)
    assert base_counts == expected
    conf = {"transactional_words.db": {"provider": "durable", "dir": tempfile.mkdtemp()},
            "topology.max.spout.pending": 2}
    t0 = time.perf_counter()
    result = LocalEngine(topology(sentences, 10_000), conf).run()
    tx_s = time.perf_counter() - t0
    assert not result.errors, result.errors[:3]
    check(conf, expected)
    print(f"local: at-least-once (acking on) {words / base_s / 1e6:.3f} M words/s; "
          f"transactional {words / tx_s / 1e6:.3f} M words/s; ratio {base_s / tx_s:.1%}")


def spark(sentences: list[str], words: int, expected: dict[str, int]) -> None:
    from w1_spark import squall_run

    from squall.runtime.spark.session import get_session
    from squall.runtime.spark.transactional import TransactionalSparkRunner

    session = get_session("local[2]", {"spark.ui.enabled": "false"})
    for run in range(2):  # the second run is reported: warm Python workers, as w1_spark.py
        spout_s, _, counts = squall_run(session, sentences, True, "spout")
        assert counts == expected
        source_s, _, counts = squall_run(session, sentences, True, "source")
        assert counts == expected
        conf = {"transactional_words.db": {"provider": "durable", "dir": tempfile.mkdtemp()}}
        runner = TransactionalSparkRunner(topology(sentences, len(sentences)), conf,
                                          session=session,
                                          checkpoint_location=tempfile.mkdtemp())
        result = runner.run()
        assert not result.errors, result.errors[:3]
        check(conf, expected)
        tx_s = runner.batch_seconds[0]
        print(f"spark run {run + 1}: at-least-once user spout {words / spout_s / 1e6:.3f}, "
              f"MemorySource {words / source_s / 1e6:.3f}, transactional "
              f"{words / tx_s / 1e6:.3f} M words/s; ratio to the spout {spout_s / tx_s:.1%}, "
              f"to MemorySource {source_s / tx_s:.1%}", flush=True)


def spark_small(sentences: list[str], per_batch: int) -> None:
    """The transactional topology on Spark in transactions of `per_batch` sentences per
    partition: the median transaction's seconds, of the second of two runs."""
    import statistics

    from squall.runtime.spark.session import get_session
    from squall.runtime.spark.transactional import TransactionalSparkRunner

    session = get_session("local[2]", {"spark.ui.enabled": "false"})
    expected = reference_counts(sentences)
    for run in range(2):
        conf = {"transactional_words.db": {"provider": "durable", "dir": tempfile.mkdtemp()}}
        runner = TransactionalSparkRunner(topology(sentences, per_batch), conf, session=session,
                                          checkpoint_location=tempfile.mkdtemp())
        result = runner.run()
        assert not result.errors, result.errors[:3]
        check(conf, expected)
        times = runner.batch_seconds
        print(f"spark run {run + 1}: {len(times)} transactions of {per_batch:,} sentences a "
              f"partition, median {statistics.median(times) * 1000:.0f} ms "
              f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runner", choices=("local", "spark", "both"), default="both")
    parser.add_argument("--per-batch", type=int, default=0)
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    if args.per_batch:
        spark_small(sentences, args.per_batch)
        return
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    print(f"W1: {len(sentences):,} sentences, {words:,} words, {len(expected):,} distinct")
    if args.runner in ("local", "both"):
        local(sentences, words, expected)
    if args.runner in ("spark", "both"):
        spark(sentences, words, expected)


if __name__ == "__main__":
    main()
