"""W2 and W3 (docs/benchmarks.md) with squall.windows operators, on the local and the Spark runner.

    .venv/bin/python benchmarks/w2_w3_operators.py [--sentences 200000] [--runs 3] [--spark]
        [--spark-batches all,100000] [--no-local] [--stateful]
        [--workloads W2,W3,W3t,W2dict,W2dictemit]

W2: per-word count in 10 s tumbling event-time windows (`KeyedWindowedOperator`, `Count`, on-time
trigger, discarding, allowed lateness 0, watermark = largest timestamp). W3: windows of 60 s sliding
by 10 s with an early firing every 100,000 input words, as squall.windows' count trigger:
`with_early_firings_at_every(100_000)`, which counts per (key, window). A (word, window) never gets
near 100,000 tuples (a 60 s window holds 60,000 words in all), so W3 fires no early pane and
measures sliding windows plus the trigger's per-tuple check; Apex's rule (one counter per window for
all keys) would not fire either, for the same reason. The sink counts early panes, and the script
prints them. W3t: W3 with an early firing every second of processing time instead (a time trigger,
which visits every live (word, window) at each batch end). All modes discard, so the panes of a
(word, window) add up to its count. Topology: list spout (sentence, ts) -> split x1 -> operator x2
(fields grouping by word) -> sink x2 that adds the panes up per (window, word); every run is checked
against the plain-Python reference, which is also the ratio's baseline (the per-word dict loop, in
the same process). W2dictemit: W2 as a hand-written windowed count in a bolt (`DictCountEmit`: the
dict count that emits each (window, word) count to the same sink when the largest timestamp seen
reaches the window's end, as the operator fires it). W2dict: W2's topology with the operator
replaced by a bolt that counts per (window start, word) in a dict and emits nothing (same spout,
split and fields grouping; its counts are checked against W2's reference): what W2 costs without the
windowing, the baseline of the windowing's share. `--stateful`: the operators keep their windows in
the state provider (`stateful=True`; memory on the local runner, durable SQLite under the checkpoint
on Spark). Prints words/s: on the local runner the median of the runs after a warm-up; on Spark the
second of two runs (warm Python workers) per micro-batch size of `--spark-batches`, with how many
micro-batches carried rows and the last one's seconds (a topology with windows ends its input in a
batch of its own: squall.task.end_of_input).
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

from workloads import w1_sentences

from squall import BasicBolt, Bolt, Config, Duration, Fields, Spout, TopologyBuilder
from squall.panes import accumulations as acc
from squall.runtime.gc_pause import full_collections_deferred
from squall.runtime.local.engine import LocalEngine
from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption


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
        self.early = 0

    def execute(self, tup) -> None:
        word, start, _end, value, timing = tup.values[:5]
        key = (start, word)
        self.counts[key] = self.counts.get(key, 0) + value
        self.panes += 1
        if timing == "EARLY":
            self.early += 1
        self.collector.ack(tup)


class DictCount(Bolt):
    """W2 without windows: counts per (10 s window start, word) in a dict, emits nothing."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[tuple[int, str], int] = {}

    def execute(self, tup) -> None:
        word, ts = tup.values
        key = (ts - ts % 10_000, word)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "start", "end", "count", "timing"))


class DictCountEmit(Bolt):
    """W2 as a hand-written windowed count: counts per (10 s window start, word) in a dict and,
    when the largest timestamp seen reaches a window's end (the operator's watermark rule,
    delay 0), emits each of its (word, count)s as the operator's pane row (key, start, end,
    count, "ON_TIME", 0, False) to the same sink and forgets the window. A plain bolt is not
    told that input ended, so the windows still open at the end stay in its dict (the
    benchmark adds them to the sink's counts)."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.windows: dict[int, dict[str, int]] = {}  # window start -> word -> count
        self.watermark = -(2**63)
        self.next_end = 2**63  # the smallest end of an open window

    def execute(self, tup) -> None:
        word, ts = tup.values
        start = ts - ts % 10_000
        words = self.windows.get(start)
        if words is None:
            words = self.windows[start] = {}
            if start + 10_000 < self.next_end:
                self.next_end = start + 10_000
        words[word] = words.get(word, 0) + 1
        self.collector.ack(tup)
        if ts > self.watermark:
            self.watermark = ts
            if ts >= self.next_end:
                self._close(ts)

    def _close(self, watermark: int) -> None:
        emit = self.collector.emit
        for start in sorted(s for s in self.windows if s + 10_000 <= watermark):
            end = start + 10_000
            for word, n in self.windows.pop(start).items():
                emit([word, start, end, n, "ON_TIME", 0, False])
        self.next_end = min(self.windows, default=2**63 - 10_000) + 10_000

    @property
    def counts(self) -> dict[tuple[int, str], int]:
        """The open windows' counts (the ones not emitted), for the benchmark's check."""
        return {(s, w): n for s, words in self.windows.items() for w, n in words.items()}

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("key", "window_start", "window_end", "value", "timing",
                                "pane_index", "is_retraction"))


STATEFUL = False


def operator(workload: str) -> Any:
    if workload == "W2dict":
        return DictCount()
    if workload == "W2dictemit":
        return DictCountEmit()
    if workload == "W2":
        window = TimeWindows(Duration.seconds(10))
        trigger = TriggerOption.at_watermark()
    else:
        window = TimeWindows(Duration.seconds(60)).slide_by(Duration.seconds(10))
        every = 100_000 if workload == "W3" else Duration.seconds(1)
        trigger = TriggerOption.at_watermark().with_early_firings_at_every(every)
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
    if workload in ("W2", "W2dict", "W2dictemit"):
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


def sink_totals(tasks: Any) -> tuple[dict, int, int]:
    """The sinks' counts summed over their tasks (a (window, word) may reach both), the number
    of panes and of early panes."""
    counts: dict = {}
    panes = early = 0
    for task in tasks:
        if isinstance(task.instance, (DictCount, DictCountEmit)):
            for k, v in task.instance.counts.items():
                counts[k] = counts.get(k, 0) + v
        if task.component_id == "sink":
            for k, v in task.instance.counts.items():
                counts[k] = counts.get(k, 0) + v
            panes += task.instance.panes
            early += task.instance.early
    return counts, panes, early


def run_local(sentences: list[str], workload: str) -> tuple[float, dict, int, int]:
    conf = Config({"topology.state.provider": "memory"} if STATEFUL else {})
    engine = LocalEngine(topology(sentences, workload), conf)
    t0 = time.perf_counter()
    engine.run(until_complete=True)
    elapsed = time.perf_counter() - t0
    return (elapsed, *sink_totals(engine.bolts))


def run_spark(spark: Any, sentences: list[str], workload: str, per_batch: int
              ) -> tuple[float, dict, int, int]:
    from squall.runtime.spark.driver import SparkRunner

    conf = Config({"squall.spark.batch.max.tuples": per_batch})
    runner = SparkRunner(topology(sentences, workload), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="w2-spark-"))
    result = runner.run(until_complete=True)
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    elapsed = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    global SPARK_BATCHES
    SPARK_BATCHES = (len(batches), batches[-1]["durationMs"]["triggerExecution"] / 1000)
    return (elapsed, *sink_totals(runner.restored_bolts()))


SPARK_BATCHES = (0, 0.0)  # the last Spark run's micro-batches with rows, the last one's seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also run on the Spark runner")
    parser.add_argument("--spark-batches", default="all,100000",
                        help="sentences per Spark micro-batch, comma-separated ('all': the "
                             "whole input in one)")
    parser.add_argument("--no-local", action="store_true", help="skip the local runner")
    parser.add_argument("--workloads", default="W2,W3",
                        help="W2, W3, W3t, W2dict, W2dictemit, comma-separated")
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
        with full_collections_deferred():  # the collector settings of the local runner's runs
            base_s, expected = reference(sentences, workload)
        print(f"{workload}: {len(expected):,} (window, word) counts; plain-Python loop "
              f"{words / base_s / 1e6:.3f} M words/s", flush=True)

        def report(where: str, elapsed: float, panes: int, early: int,
                   base_s: float = base_s) -> None:
            print(f"  {where}: {words / elapsed / 1e6:.3f} M words/s ({panes:,} panes, {early:,} "
                  f"early), ratio to the plain loop {base_s / elapsed:.1%}", flush=True)

        if not args.no_local:
            times = []
            for run in range(args.runs + 1):
                elapsed, counts, panes, early = run_local(sentences, workload)
                if counts != expected:
                    raise AssertionError(f"{workload} local: counts differ from the reference")
                if run:  # the first run is the warm-up
                    times.append(elapsed)
            report(f"local runner (median of {len(times)})", statistics.median(times), panes,
                   early)
        if spark is not None:
            for size in args.spark_batches.split(","):
                per_batch = args.sentences + 1 if size == "all" else int(size)
                for _ in range(2):  # the first warms the Python workers up
                    elapsed, counts, panes, early = run_spark(spark, sentences, workload,
                                                              per_batch)
                    if counts != expected:
                        raise AssertionError(f"{workload} spark: counts differ")
                report(f"spark runner, {min(per_batch, args.sentences):,} sentences per batch "
                       f"({SPARK_BATCHES[0]} batches, the last {SPARK_BATCHES[1]:.2f} s)",
                       elapsed, panes, early)


if __name__ == "__main__":
    main()
