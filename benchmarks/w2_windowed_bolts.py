"""W2 (docs/benchmarks.md) with Storm's windowed bolt, on the local and the Spark runner.

    .venv/bin/python benchmarks/w2_windowed_bolts.py [--sentences 200000] [--runs 3] [--spark]
        [--no-local] [--per-batch 100000] [--parts] [--role]

W2: per-word count in 10 s tumbling event-time windows. Topology: list spout (sentence, ts) ->
split x1 -> `WindowedBolt` x2 (`with_tumbling_window(10 s)`, event time from "ts", lag 0,
fields grouping by word) whose `execute(window)` counts the window's words and emits
`(window_start, word, count)` -> sink x2 that keeps the rows. Every run is checked against the
plain-Python per-word loop over the same windows, which is also the ratio's baseline, measured in
the same process. Prints words/s: the median of the runs after a warm-up on the local runner; on
Spark the last of two runs (warm Python workers), the whole input as one micro-batch and 100,000
sentences per batch (`--per-batch`), timed by the query's own trigger-execution durations;
`--no-local` skips the floor and the local runner (the plain loop still checks the counts).
`--parts` also times
the topology with the windowed bolt replaced by a bolt that only acks, and with windows that do
not count or do not emit, to show where the time per word goes. `--role` times the windowed
bolt's window bookkeeping alone in process (its task role, an empty `execute(window)`, a collector
that only counts): `execute` per word (a tuple made per word, as a host makes it) against
`execute_columns` per batch of rows (100,000 sentences' words a batch), the same windows and acks.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import _Tup
from w2_w3_operators import ListSpout, Split, reference
from workloads import w1_sentences

from squall import Bolt, Config, Duration, Fields, TopologyBuilder, WindowedBolt
from squall.runtime.gc_pause import full_collections_deferred
from squall.runtime.local.engine import LocalEngine
from squall.topology.tuple import Origin, _RuntimeTuple


class WindowWordCount(WindowedBolt):
    """Counts the words of each tumbling window; one row per (window, word)."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, window) -> None:
        counts: dict[str, int] = {}
        for tup in window.get():
            w = tup.values[0]
            counts[w] = counts.get(w, 0) + 1
        start = window.start_timestamp
        emit = self.collector.emit
        for w, n in counts.items():
            emit([start, w, n])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("window_start", "word", "count"))


class Sink(Bolt):
    """Keeps the rows as {(window start, word): count}."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[tuple[int, str], int] = {}

    def execute(self, tup) -> None:
        start, word, n = tup.values
        key = (start, word)
        self.counts[key] = self.counts.get(key, 0) + n
        self.collector.ack(tup)


def start_inclusive_ts(tup: Any) -> int:
    """Storm's event-time windows hold (end - length, end]; W2's hold [start, start + length).

    Shifting every timestamp by 1 ms makes the first the second, so `window.start_timestamp`
    is W2's window start.
    """
    return tup.values[1] + 1


def topology(sentences: list[str]) -> Any:
    b = TopologyBuilder()
    b.set_spout("sentences", ListSpout(sentences))
    b.set_bolt("split", Split()).shuffle_grouping("sentences")
    bolt = WindowWordCount().with_tumbling_window(Duration.seconds(10))
    bolt = bolt.with_timestamp_extractor(start_inclusive_ts)
    b.set_bolt("windows", bolt, 2).fields_grouping("split", Fields("word"))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("windows")
    return b.create_topology()


def sink_counts(tasks: Any) -> dict:
    counts: dict = {}
    for task in tasks:
        if task.component_id == "sink":
            for k, v in task.instance.counts.items():
                counts[k] = counts.get(k, 0) + v
    return counts


def storm_shaped_floor(sentences: list[str]) -> tuple[float, dict]:
    """The least any engine with Storm's windowed-bolt API must do for W2, with no framework.

    The same user code as the topology above (split's emit per word, the windowed bolt's
    `execute(window)` counting the window's tuples and emitting a row per word, the sink's
    execute and ack per row), a tuple object per delivered tuple, and a tumbling event-time
    window that keeps its tuples and acks them when it fires; no routing, no watermark across
    tasks, no validation, no counting: an upper bound for any framework.
    """
    counts: dict[tuple[int, str], int] = {}

    class Collector:
        def emit(self, values) -> None:
            sink(_Tup(values, None, None, 3))

        def ack(self, tup) -> None:
            tup.state = 1

    collector = Collector()

    def sink(tup) -> None:
        start, word, n = tup.values
        key = (start, word)
        counts[key] = counts.get(key, 0) + n
        collector.ack(tup)

    class Window:
        def __init__(self) -> None:
            self.tuples: list = []
            self.end = None

        def add(self, tup) -> None:
            ts = tup.values[1] + 1  # start_inclusive_ts
            end = ((ts - 1) // 10_000 + 1) * 10_000
            if end != self.end:
                self.fire()
                self.end = end
            self.tuples.append(tup)

        def fire(self) -> None:
            if not self.tuples:
                return
            words: dict[str, int] = {}
            for tup in self.tuples:
                w = tup.values[0]
                words[w] = words.get(w, 0) + 1
            start = self.end - 10_000
            emit = collector.emit
            for w, n in words.items():
                emit([start, w, n])
            for tup in self.tuples:
                collector.ack(tup)
            self.tuples = []

    window = Window()

    class SplitCollector:
        def emit(self, values) -> None:
            window.add(_Tup(values, None, None, 2))

    split_collector = SplitCollector()
    t0 = time.perf_counter()
    for i, sentence in enumerate(sentences):
        tup = _Tup([sentence, i * 10], None, None, 1)
        emit = split_collector.emit
        text, ts = tup.values
        for w in text.split():
            emit([w, ts])
        collector.ack(tup)
    window.fire()
    return time.perf_counter() - t0, counts


def run_local(sentences: list[str], **run: Any) -> tuple[float, dict]:
    """W2 on the local runner; `run` goes to `LocalEngine.run` (e.g. `on_progress`)."""
    engine = LocalEngine(topology(sentences), Config())
    t0 = time.perf_counter()
    engine.run(until_complete=True, **run)
    elapsed = time.perf_counter() - t0
    return elapsed, sink_counts(engine.bolts)


class EmptyWindow(WindowWordCount):
    """`--parts`: the window's bookkeeping alone (no counting, no rows)."""

    def execute(self, window) -> None:
        pass


class CountingWindow(WindowWordCount):
    """`--parts`: the windows counted, no rows emitted."""

    def execute(self, window) -> None:
        counts: dict[str, int] = {}
        for tup in window.get():
            w = tup.values[0]
            counts[w] = counts.get(w, 0) + 1


class AckOnly(Bolt):
    """`--parts`: in the windowed bolt's place, a bolt that only acks (squall's routing alone)."""

    def execute(self, tup) -> None:
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("window_start", "word", "count"))


def run_part(sentences: list[str], bolt: Any) -> float:
    """The W2 topology with `bolt` where the windowed bolt is; seconds for the whole input."""
    b = TopologyBuilder()
    b.set_spout("sentences", ListSpout(sentences))
    b.set_bolt("split", Split()).shuffle_grouping("sentences")
    if isinstance(bolt, WindowedBolt):
        bolt = bolt.with_tumbling_window(Duration.seconds(10))
        bolt = bolt.with_timestamp_extractor(start_inclusive_ts)
    b.set_bolt("windows", bolt, 2).fields_grouping("split", Fields("word"))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("windows")
    engine = LocalEngine(b.create_topology(), Config())
    t0 = time.perf_counter()
    engine.run(until_complete=True)
    return time.perf_counter() - t0


def parts(sentences: list[str], words: int, runs: int) -> None:
    """Where the local runner's time per word goes: routing alone (a bolt that only acks), the
    window's bookkeeping, the counting, the rows to the sink (each the median of `runs`)."""
    variants = {"routing alone (a bolt that only acks)": AckOnly,
                "window, empty execute": EmptyWindow,
                "window, counted, no rows": CountingWindow,
                "window, counted, rows to the sink (W2)": WindowWordCount}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs + 1):  # the first round is a warm-up
        for name, cls in variants.items():
            times[name].append(run_part(sentences, cls()))
    for name, ts in times.items():
        t = statistics.median(ts[1:])
        print(f"  {name}: {t / words * 1e6:.2f} us per word", flush=True)


class CountingOut:
    """`--role`: the role's collector, counting what it acks and emits."""

    def __init__(self) -> None:
        self.acks = 0
        self.emits = 0

    def ack(self, tup) -> None:
        self.acks += 1

    def emit(self, values, anchors=None, stream="default") -> list[int]:
        self.emits += 1
        return []


class CountedWindows(WindowWordCount):
    """`--role`: an empty `execute(window)` that counts the windows."""

    def execute(self, window) -> None:
        self.windows = getattr(self, "windows", 0) + 1


def role_bookkeeping(sentences: list[str], runs: int, per_batch: int = 100_000) -> None:
    """The windowed bolt's window bookkeeping per word, per tuple (`execute`) and column-wise
    (`execute_columns`), in process on the role of one task of W2's windowed bolt."""
    rows = [[w, i * 10] for i, s in enumerate(sentences) for w in s.split()]
    bounds = [0]  # batches of `per_batch` sentences' words
    words_per = [len(s.split()) for s in sentences]
    for lo in range(0, len(sentences), per_batch):
        bounds.append(bounds[-1] + sum(words_per[lo:lo + per_batch]))
    origin = Origin(Fields("word", "ts"), "split", "default", 1)

    def role():
        b = TopologyBuilder()
        b.set_spout("sentences", ListSpout([]))
        b.set_bolt("split", Split()).shuffle_grouping("sentences")
        bolt = CountedWindows().with_tumbling_window(Duration.seconds(10))
        bolt = bolt.with_timestamp_extractor(start_inclusive_ts)
        b.set_bolt("windows", bolt).fields_grouping("split", Fields("word"))
        engine = LocalEngine(b.create_topology(), Config())
        engine.start()
        r = next(t for t in engine.bolts if t.component_id == "windows").window
        r.out = r.collector._out = CountingOut()
        return engine, r

    def per_tuple() -> tuple[float, Any]:
        engine, r = role()
        t0 = time.perf_counter()
        for lo, hi in itertools.pairwise(bounds):
            execute = r.execute
            for row in rows[lo:hi]:
                execute(_RuntimeTuple(row, origin, None, 1), 0)
        r.end_of_input(1)
        elapsed = time.perf_counter() - t0
        engine.stop()
        return elapsed, r

    def columnar() -> tuple[float, Any]:
        engine, r = role()
        t0 = time.perf_counter()
        for lo, hi in itertools.pairwise(bounds):
            r.execute_columns(rows[lo:hi], origin, 0, lambda tup, exc: None, task_id=1)
        r.end_of_input(1)
        elapsed = time.perf_counter() - t0
        engine.stop()
        return elapsed, r

    times: dict[str, list[float]] = {"execute per word": [], "execute_columns per batch": []}
    for _ in range(runs + 1):  # the first round is a warm-up
        for name, f in (("execute per word", per_tuple), ("execute_columns per batch", columnar)):
            with full_collections_deferred():
                elapsed, r = f()
            times[name].append(elapsed)
            if r.out.acks != len(rows) or r.instance.windows != -(-len(sentences) // 1000):
                raise AssertionError(f"{name}: {r.out.acks} acks, {r.instance.windows} windows")
    print(f"  window bookkeeping in process ({len(rows):,} words, {per_batch:,} sentences a "
          "batch, one task, empty execute):", flush=True)
    for name, ts in times.items():
        print(f"    {name}: {statistics.median(ts[1:]) / len(rows) * 1e6:.3f} us per word",
              flush=True)


def run_spark(spark: Any, sentences: list[str], per_batch: int) -> tuple[float, dict]:
    from squall.runtime.spark.driver import SparkRunner

    conf = Config({"squall.spark.batch.max.tuples": per_batch})
    runner = SparkRunner(topology(sentences), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="w2-bolts-"))
    result = runner.run(until_complete=True)
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    elapsed = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return elapsed, sink_counts(runner.restored_bolts())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also run on the Spark runner")
    parser.add_argument("--no-local", action="store_true",
                        help="skip the floor and the local runner (with --spark)")
    parser.add_argument("--per-batch", type=int, default=100_000,
                        help="sentences per micro-batch of the second Spark configuration")
    parser.add_argument("--parts", action="store_true",
                        help="also time the topology's parts on the local runner (per word)")
    parser.add_argument("--role", action="store_true",
                        help="only time the window bookkeeping in process, per tuple against "
                             "column-wise (the windowed bolt's role)")
    args = parser.parse_args()
    if args.role:
        role_bookkeeping(w1_sentences(args.sentences), args.runs)
        return
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    # The plain loop and the floor run under the collector settings of the local runner's runs
    # (squall.runtime.gc_pause.full_collections_deferred): all three keep millions of objects
    # alive, and default full collections would slow the baselines down, not just squall.
    with full_collections_deferred():
        base_s, expected = reference(sentences, "W2")
    print(f"W2 windowed bolt: {len(expected):,} (window, word) counts; plain-Python loop "
          f"{words / base_s / 1e6:.3f} M words/s", flush=True)
    if not args.no_local:
        local(sentences, words, base_s, expected, args)
    if args.spark:
        from squall.runtime.spark.session import get_session

        spark = get_session("local[2]", {"spark.ui.enabled": "false"})
        for per_batch in (args.sentences + 1, args.per_batch):
            elapsed = 0.0
            for _ in range(2):
                elapsed, counts = run_spark(spark, sentences, per_batch)
                if counts != expected:
                    raise AssertionError("spark: counts differ from the reference")
            print(f"  spark runner, {per_batch:,} sentences per batch: "
                  f"{words / elapsed / 1e6:.3f} M words/s, ratio to the plain loop "
                  f"{base_s / elapsed:.1%}", flush=True)


def local(sentences: list[str], words: int, base_s: float, expected: dict,
          args: argparse.Namespace) -> None:
    """The Storm-shaped floor and the local runner (with `--parts`, its parts)."""
    floors = []
    for _ in range(args.runs):
        with full_collections_deferred():
            elapsed, counts = storm_shaped_floor(sentences)
        if counts != expected:
            raise AssertionError("floor: counts differ from the reference")
        floors.append(elapsed)
    floor = statistics.median(floors)
    print(f"  Storm-shaped floor, no framework: {words / floor / 1e6:.3f} M words/s, ratio to the "
          f"plain loop {base_s / floor:.1%}", flush=True)
    times = []
    for run in range(args.runs + 1):
        elapsed, counts = run_local(sentences)
        if counts != expected:
            raise AssertionError("local: counts differ from the reference")
        if run:  # the first run is the warm-up
            times.append(elapsed)
    t = statistics.median(times)
    print(f"  local runner: {words / t / 1e6:.3f} M words/s, ratio to the plain loop "
          f"{base_s / t:.1%} ({floor / t:.0%} of the floor)", flush=True)
    if args.parts:
        print(f"  floor: {floor / words * 1e6:.2f} us per word; local runner "
              f"{t / words * 1e6:.2f}", flush=True)
        parts(sentences, words, args.runs)


if __name__ == "__main__":
    main()
