"""W1 with a `local_or_shuffle` stage on the Spark runner, fused stages on and off, interleaved.

    .venv/bin/python benchmarks/w1_fusion.py [--sentences 100000] [--runs 3] [--acking]

The topology: a user spout over the sentences -> normalise(2) (the sentence stripped and
lower-cased, unanchored) -local_or_shuffle-> split(2) -fields(word)-> count(2), the bolts of
benchmarks/w1_local.py. With `squall.spark.fusion` true (the default) split runs in normalise's
Spark stage, its input executed where it is emitted; false: a stage each. Each run is the whole
input as one micro-batch; reported per run, alternating on and off in one Spark session after a
warm-up of each: the data batch's time (`triggerExecution` of the query's progress), its
Spark stages, and the ratio of the medians (off / on). Counts are checked every run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import Count, ListSpout, Split
from workloads import reference_counts, w1_sentences

from squall import BasicBolt, Config, Fields, TopologyBuilder, Values
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.session import get_session


class Normalise(BasicBolt):
    def execute(self, tup, collector) -> None:
        collector.emit(Values(tup.values[0].strip().lower()))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence"))


def fusion_run(spark, sentences: list[str], fusion: bool, acking: bool
               ) -> tuple[float, int, dict[str, int]]:
    """(data batch's seconds, Spark stages of its job, counts)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", ListSpout(sentences, reliable=acking))
    builder.set_bolt("normalise", Normalise(), 2).shuffle_grouping("sentences")
    builder.set_bolt("split", Split(), 2).local_or_shuffle_grouping("normalise")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    conf = Config({"squall.spark.batch.max.tuples": len(sentences) + 1,
                   "squall.spark.fusion": fusion})
    conf.set_num_ackers(1 if acking else 0)
    runner = SparkRunner(builder.create_topology(), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="w1-fusion-"))
    result = runner.run(until_complete=True)
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(runner.query.runId))
    stages = max(len(tracker.getJobInfo(j).stageIds) for j in jobs)
    counts: dict[str, int] = {}
    for task in runner.restored_bolts():
        if task.component_id == "count":
            counts.update(task.instance.counts)
    return batch_s, stages, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternated")
    parser.add_argument("--acking", action="store_true", help="acking on (default off)")
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    expected = reference_counts(sentences)
    words = sum(expected.values())
    spark = get_session("local[2]", {"spark.sql.shuffle.partitions": "2",
                                     "spark.ui.enabled": "false"})
    for fusion in (True, False):  # warm-up: Python workers, the JVM's code
        fusion_run(spark, sentences[:2_000], fusion, args.acking)
    times: dict[bool, list[float]] = {True: [], False: []}
    began = time.perf_counter()
    for r in range(args.runs):
        for fusion in ((True, False) if r % 2 == 0 else (False, True)):
            batch_s, stages, counts = fusion_run(spark, sentences, fusion, args.acking)
            if counts != expected:
                raise AssertionError(f"fusion {fusion}: wrong counts")
            times[fusion].append(batch_s)
            print(f"run {r + 1} fusion {'on ' if fusion else 'off'}: data batch {batch_s:.2f} s "
                  f"({words / batch_s / 1e6:.3f} M words/s), {stages} Spark stages", flush=True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{args.sentences} sentences, {words} words, acking {'on' if args.acking else 'off'}, "
          f"{args.runs} runs each in {time.perf_counter() - began:.0f} s: median data batch "
          f"fusion on {on:.2f} s, off {off:.2f} s, off/on {off / on:.2f}")


if __name__ == "__main__":
    main()
