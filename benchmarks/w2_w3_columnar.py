"""W2's and W3's window work for one operator task, tuple by tuple and column-wise, in process.

    .venv/bin/python benchmarks/w2_w3_columnar.py [--sentences 200000] [--runs 5]
        [--batches 1,10] [--workloads W2,W3] [--role]

The input of one of W2's and W3's two operator tasks (benchmarks/w2_w3_operators.py: the words
of `w1_sentences`, a sentence every 10 ms; here the words whose CRC-32 is even, half of them as
a fields grouping gives each task) goes into a fresh pane engine with the operators' settings
(W2: 10 s tumbling windows, `Count`, on-time trigger, discarding, allowed lateness 0, watermark
= largest timestamp; W3: 60 s windows sliding by 10 s with an early firing every 100,000 tuples
of a (word, window)) two ways: tuple by tuple (`squall.panes.columnar.per_tuple`: the
operator's per-tuple path, `process` with the generated watermark and `advance` where it is
due) and as columns (`process_columns`), cut into `--batches` equal batches. No Spark, no
routing, no acking: the window work alone. Each run's panes and final snapshot are checked
equal between the two; prints microseconds per word, the median of the runs (the columns are
built before the clock starts: keys and values a list, timestamps an int64 array, as a
batch's Arrow columns give them). `--role`: the same through the operator's task role instead
(the operator's task built by the local runner, not run), `OperatorRole.execute` per tuple
against `OperatorRole.execute_columns` per batch (given the tuples' values, as a Spark stage
gives it a packet's rows), with a collector that only counts what it is given (tuples and rows
built before the clock starts): the window work plus the role's per-tuple work
(field extraction, the hot path's checks, an ack per tuple), still without routing.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import w1_sentences

from squall import Bolt, Config, Duration, Fields, Spout, TopologyBuilder
from squall.panes.accumulations import Count
from squall.panes.columnar import per_tuple, process_columns
from squall.panes.engine import WindowedEngine
from squall.panes.triggers import TriggerOption
from squall.panes.windows import TimeWindows
from squall.runtime.gc_pause import full_collections_deferred
from squall.runtime.local.engine import LocalEngine
from squall.topology.tuple import Tuple
from squall.windows import KeyedWindowedOperator


def engine(workload: str) -> WindowedEngine:
    if workload == "W2":
        window, trigger = TimeWindows(10_000), TriggerOption.at_watermark()
    else:
        window = TimeWindows(60_000, 10_000)
        trigger = TriggerOption.at_watermark().with_early_firings_at_every(100_000)
    return WindowedEngine(window, Count(), trigger, allowed_lateness_ms=0)


def task_input(sentences: list[str]) -> tuple[list[str], list[int]]:
    """The words (and their timestamps) of task 0 of two under a fields grouping by word."""
    words: list[str] = []
    tss: list[int] = []
    for i, line in enumerate(sentences):
        for w in line.split():
            if zlib.crc32(w.encode()) % 2 == 0:
                words.append(w)
                tss.append(i * 10)
    return words, tss


class _Words(Spout):
    def next_tuple(self) -> None:
        """Never called: the benchmark drives the operator's role itself."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "ts"))


class _Sink(Bolt):
    def execute(self, tup: Any) -> None:
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: Any) -> None:
        """Declares nothing."""


class _Counting:
    """A collector that counts what it is given."""

    def __init__(self) -> None:
        self.emitted = 0
        self.acked = 0

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> None:
        self.emitted += 1

    def emit_many(self, rows: Any, stream: str = "default") -> None:
        self.emitted += len(rows)

    def ack(self, tup: Any) -> None:
        self.acked += 1

    def ack_unanchored(self, n: int) -> None:
        self.acked += n


def role_run(workload: str, words: list[str], tss: list[int], batches: int, columnar: bool
             ) -> tuple[float, list[Any], bytes]:
    e = engine(workload)
    op = KeyedWindowedOperator(window=e.window, accumulation=Count(), trigger=e.trigger,
                               allowed_lateness=Duration(0), watermark_delay=Duration(0),
                               timestamp_field="ts", key_field="word", value_field="word")
    b = TopologyBuilder()
    b.set_spout("words", _Words())
    b.set_bolt("windows", op).fields_grouping("words", Fields("word"))
    b.set_bolt("sink", _Sink()).shuffle_grouping("windows")
    local = LocalEngine(b.create_topology(), Config({}))
    local.start()
    try:
        role = next(t for t in local.bolts if t.component_id == "windows").window
        out = role._out = role._bulk = _Counting()
        fields = Fields("word", "ts")
        tuples = [Tuple([w, t], fields, "words", "default", 0)
                  for w, t in zip(words, tss, strict=True)]
        rows = [t.values for t in tuples]  # what a Spark stage gives `execute_columns`
        origin = tuples[0]._origin
        n = len(tuples)
        cuts = [n * b // batches for b in range(batches + 1)]

        def failed(tup: Any, exc: Exception) -> None:
            raise exc

        with full_collections_deferred():
            t0 = time.perf_counter()
            for now, (lo, hi) in enumerate(itertools.pairwise(cuts)):
                if columnar:
                    role.execute_columns(rows[lo:hi], origin, now, failed)
                else:
                    execute = role.execute
                    for tup in tuples[lo:hi]:
                        execute(tup, now)
                role.end_batch(now, now)
            elapsed = time.perf_counter() - t0
        return elapsed, [out.emitted, out.acked], pickle.dumps(role.engine)
    finally:
        local.stop()


def run(workload: str, words: list[str], tss: list[int], batches: int, columnar: bool
        ) -> tuple[float, list[Any], bytes]:
    e = engine(workload)
    n = len(words)
    cuts = [n * b // batches for b in range(batches + 1)]
    parts = [(words[lo:hi], tss[lo:hi], np.asarray(tss[lo:hi], dtype=np.int64))
             for lo, hi in itertools.pairwise(cuts)]
    panes: list[Any] = []
    with full_collections_deferred():
        t0 = time.perf_counter()
        for now, (keys, ts_list, ts_array) in enumerate(parts):
            if columnar:
                result = process_columns(e, keys, ts_array, keys, now, 0)
            else:
                result = per_tuple(e, keys, ts_list, keys, now, 0)
            panes.extend(result.steps)
            e.batch_end(now)
        elapsed = time.perf_counter() - t0
    return elapsed, panes, pickle.dumps(e)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", default="1,10", help="batches per input, comma-separated")
    parser.add_argument("--workloads", default="W2,W3")
    parser.add_argument("--role", action="store_true",
                        help="through the operator's task role (execute, execute_columns)")
    args = parser.parse_args()
    measure = role_run if args.role else run
    words, tss = task_input(w1_sentences(args.sentences))
    print(f"{len(words):,} words for the task", flush=True)
    for workload in args.workloads.split(","):
        for batches in (int(b) for b in args.batches.split(",")):
            times: dict[bool, list[float]] = {False: [], True: []}
            outputs: dict[bool, tuple[list[Any], bytes]] = {}
            for _ in range(args.runs):  # interleaved, so both see the same machine
                for columnar in (False, True):
                    elapsed, panes, snap = measure(workload, words, tss, batches, columnar)
                    times[columnar].append(elapsed)
                    outputs[columnar] = (panes, snap)
            if outputs[False] != outputs[True]:
                raise AssertionError(f"{workload}: the column-wise panes or snapshot differ")
            tuple_us, col_us = (statistics.median(times[c]) / len(words) * 1e6
                                for c in (False, True))
            panes = (outputs[True][0][0] if args.role
                     else sum(len(x) for _i, _k, x in outputs[True][0]))
            where = "role" if args.role else "engine"
            print(f"{workload} ({where}), {batches} batch(es), {panes:,} panes: tuple by tuple "
                  f"{tuple_us:.3f} us/word, column-wise {col_us:.3f} us/word "
                  f"({tuple_us / col_us:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
