"""W2 and W3 (benchmarks.md) with squall.windows operators, on the local and the Spark runner.

    .venv/bin/python benchmarks/w2_w3_operators.py [--sentences 200000] [--runs 3] [--spark]
        [--stateful]

W2: per-word count in 10 s tumbling event-time windows (`KeyedWindowedOperator`, `Count`, on-time
trigger, discarding, allowed lateness 0, watermark = largest timestamp); W3: windows of 60 s
sliding by 10 s with early firings every second of processing time (discarding, so the panes of a
(word, window) add up to its count). Topology: list spout (sentence, ts) -> split x1 -> operator
x2 (fields grouping by word) -> sink x2 that adds the panes up per (window, word); every run is
checked against the plain-Python reference, which is also the ratio's baseline (the per-word dict
loop, in the same process). `--stateful`: the operators keep their windows in the state provider
(`stateful=True`; memory on the local runner, durable SQLite under the checkpoint on Spark).
Prints words/s (median of the runs after a warm-up on the local
runner; on Spark the last run, warm Python workers, whole input in one micro-batch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import w1_sentences  # noqa: E402

from squall import BasicBolt, Bolt, Config, Duration, Fields, Spout, TopologyBuilder  # noqa: E402
from squall.runtime.local.engine import LocalEngine  # noqa: E402
from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption  # noqa: E402
from squall.windows import accumulations as acc  # noqa: E402


class ListSpout(Spout):
    def __init__(self, sentences: list[str]) -> None:
        self.sentences = sentences

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self) -> None:
        i = self.i
        if i < len(self.sentences):
            self.i = i + 1
            self.collector.emit([self.sentences[i], i * 10])

    def is_exhausted(self) -> bool:
        return self.i >= len(self.sentences)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence", "ts"))


class Split(BasicBolt):
    def execute(self, tup, collector) -> None:
        emit = collector.emit
        sentence, ts = tup.values
        for w in sentence.split():
            emit([w, ts])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "ts"))


class Sink(Bolt):
    """Adds the panes up per (window start, word)."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[tuple[int, str], int] = {}
        self.panes = 0

    def execute(self, tup) -> None:
        word, start, _end, value = tup.values[:4]
        key = (start, word)
        self.counts[key] = self.counts.get(key, 0) + value
        self.panes += 1
        self.collector.ack(tup)


STATEFUL = False


def operator(workload: str) -> KeyedWindowedOperator:
    if workload == "W2":
        window = TimeWindows(Duration.seconds(10))
        trigger = TriggerOption.at_watermark()
    else:
        window = TimeWindows(Duration.seconds(60)).slide_by(Duration.seconds(10))
        trigger = TriggerOption.at_watermark().with_early_firings_at_every(Duration.seconds(1))
    return KeyedWindowedOperator(window=window, accumulation=acc.Count(), trigger=trigger,
                                 allowed_lateness=Duration(0), watermark_delay=Duration(0),
                                 timestamp_field="ts", key_field="word", value_field="word",
                                 stateful=STATEFUL)


def topology(sentences: list[str], workload: str) -> Any:
    b = TopologyBuilder()
    b.set_spout("sentences", ListSpout(sentences))
    b.set_bolt("split", Split()).shuffle_grouping("sentences")
    b.set_bolt("windows", operator(workload), 2).fields_grouping("split", Fields("word"))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("windows")
    return b.create_topology()


def reference(sentences: list[str], workload: str) -> tuple[float, dict[tuple[int, str], int]]:
    """The plain-Python per-word loop over the same windows."""
    t0 = time.perf_counter()
    counts: dict[tuple[int, str], int] = {}
    if workload == "W2":
        for i, line in enumerate(sentences):
            ts = i * 10
            start = ts - ts % 10_000
            for w in line.split():
                k = (start, w)
                counts[k] = counts.get(k, 0) + 1
    else:
        for i, line in enumerate(sentences):
            ts = i * 10
            last = ts - ts % 10_000
            for w in line.split():
                for start in range(last - 50_000, last + 1, 10_000):
                    k = (start, w)
                    counts[k] = counts.get(k, 0) + 1
    return time.perf_counter() - t0, counts


def run_local(sentences: list[str], workload: str) -> tuple[float, dict, int]:
    conf = Config({"topology.state.provider": "memory"} if STATEFUL else {})
    engine = LocalEngine(topology(sentences, workload), conf)
    t0 = time.perf_counter()
    engine.run(until_complete=True)
    elapsed = time.perf_counter() - t0
    counts: dict = {}
    panes = 0
    for task in engine.bolts:
        if task.component_id == "sink":
            for k, v in task.instance.counts.items():  # a (window, word) may reach both
                counts[k] = counts.get(k, 0) + v
            panes += task.instance.panes
    return elapsed, counts, panes


def run_spark(spark: Any, sentences: list[str], workload: str, per_batch: int
              ) -> tuple[float, dict, int]:
    from squall.runtime.spark.driver import SparkRunner

    conf = Config({"squall.spark.batch.max.tuples": per_batch})
    runner = SparkRunner(topology(sentences, workload), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="w2-spark-"))
    result = runner.run(until_complete=True)
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    elapsed = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    counts: dict = {}
    panes = 0
    for task in runner.restored_bolts():
        if task.component_id == "sink":
            for k, v in task.instance.counts.items():  # a (window, word) may reach both
                counts[k] = counts.get(k, 0) + v
            panes += task.instance.panes
    return elapsed, counts, panes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also run on the Spark runner")
    parser.add_argument("--workloads", default="W2,W3")
    parser.add_argument("--stateful", action="store_true",
                        help="windows in the state provider (stateful=True)")
    args = parser.parse_args()
    global STATEFUL
    STATEFUL = args.stateful
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    spark = None
    if args.spark:
        from squall.runtime.spark.session import get_session

        spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    for workload in args.workloads.split(","):
        base_s, expected = reference(sentences, workload)
        print(f"{workload}: {len(expected):,} (window, word) counts; plain-Python loop "
              f"{words / base_s / 1e6:.3f} M words/s", flush=True)
        times = []
        for run in range(args.runs + 1):
            elapsed, counts, panes = run_local(sentences, workload)
            if counts != expected:
                raise AssertionError(f"{workload} local: counts differ from the reference")
            if run:  # the first run is the warm-up
                times.append(elapsed)
        t = statistics.median(times)
        print(f"  local runner: {words / t / 1e6:.3f} M words/s ({panes:,} panes), ratio to the "
              f"plain loop {base_s / t:.1%}", flush=True)
        if spark is not None:
            for per_batch in (args.sentences + 1, 100_000):
                last = None
                for _ in range(2):
                    last = run_spark(spark, sentences, workload, per_batch)
                    if last[1] != expected:
                        raise AssertionError(f"{workload} spark: counts differ")
                elapsed, _, panes = last  # type: ignore[misc]
                print(f"  spark runner, {per_batch:,} sentences per batch: "
                      f"{words / elapsed / 1e6:.3f} M words/s ({panes:,} panes), ratio to "
                      f"the plain loop {base_s / elapsed:.1%}", flush=True)


if __name__ == "__main__":
    main()
