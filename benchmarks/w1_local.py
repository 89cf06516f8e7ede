"""W1 (word count) on the local runner, acking off and on, against the plain-Python loop.

    .venv/bin/python benchmarks/w1_local.py [--sentences 200000] [--runs 3] [--cpu]

Prints words/s (median of the runs after one warm-up) and the ratio to the per-word dict loop
measured in the same process, and checks every run's counts against the reference. `--cpu`
times in this process's CPU time instead of wall time, which other processes on a shared
machine disturb less.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import reference_counts, w1_sentences

from squall import BasicBolt, Bolt, Config, Fields, Spout, TopologyBuilder, Values
from squall.runtime.local.engine import LocalEngine

clock = time.perf_counter  # time.process_time with --cpu


class ListSpout(Spout):
    """Emits the sentences handed to it; tracked (with a message id) when `reliable`."""

    def __init__(self, sentences: list[str], reliable: bool) -> None:
        self.sentences = sentences
        self.reliable = reliable

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self) -> None:
        i = self.i
        if i < len(self.sentences):
            self.i = i + 1
            self.collector.emit(Values(self.sentences[i]), msg_id=i if self.reliable else None)

    def fail(self, msg_id: Any) -> None:
        raise AssertionError(f"sentence {msg_id} failed")

    def is_exhausted(self) -> bool:
        return self.i >= len(self.sentences)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence"))


class Split(BasicBolt):
    def execute(self, tup, collector) -> None:
        emit = collector.emit
        for w in tup.values[0].split():
            emit(Values(w))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word"))


class Count(Bolt):
    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup) -> None:
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


def plain_loop(sentences: list[str]) -> tuple[float, dict[str, int]]:
    t0 = clock()
    counts = reference_counts(sentences)
    return clock() - t0, counts


def function_chain(sentences: list[str]) -> tuple[float, dict[str, int]]:
    """Per-word function calls spout -> split -> count, with no framework."""
    counts: dict[str, int] = {}

    def count(word: str) -> None:
        counts[word] = counts.get(word, 0) + 1

    def split(sentence: str) -> None:
        for w in sentence.split():
            count(w)

    def spout() -> None:
        for s in sentences:
            split(s)

    t0 = clock()
    spout()
    return clock() - t0, counts


class _Tup:
    __slots__ = ("ack_val", "anchors", "origin", "state", "task", "values")

    def __init__(self, values, origin, anchors, task) -> None:
        self.values = values
        self.origin = origin
        self.anchors = anchors
        self.task = task
        self.ack_val = 0
        self.state = 0


def storm_shaped_floor(sentences: list[str], acking: bool) -> tuple[float, dict[str, int]]:
    """The least any engine with Storm's API must do per word, with no framework around it.

    The user code is the same as squall's benchmark bolts (`Values`, an emit call, an execute
    call, an ack call) and each delivered word is a tuple object; with acking, each word gets a
    random edge id XORed into its sentence's ack value and into one ledger entry per sentence.
    There is no routing, no validation, no counting: an upper bound for any framework.
    """
    import random as _random

    counts: dict[str, int] = {}
    rand = _random.Random(1).getrandbits
    ledger: dict[int, int] = {}

    class CountBolt:
        def execute(self, tup) -> None:
            w = tup.values[0]
            counts[w] = counts.get(w, 0) + 1
            collector.ack(tup)

    class Collector:
        def __init__(self) -> None:
            self.input = None

        def emit(self, values) -> None:
            anchor = self.input
            if acking:
                edge = rand(64)
                anchor.ack_val ^= edge
                root = next(iter(anchor.anchors))
                execute(_Tup(values, None, {root: edge}, 1))
            else:
                execute(_Tup(values, None, None, 1))

        def ack(self, tup) -> None:
            tup.state = 1
            if tup.anchors:
                for root, edge in tup.anchors.items():
                    v = ledger[root] ^ edge ^ tup.ack_val
                    if v:
                        ledger[root] = v
                    else:
                        del ledger[root]

    execute = CountBolt().execute
    collector = Collector()
    t0 = clock()
    for sentence in sentences:
        if acking:
            root, edge = rand(64), rand(64)
            ledger[root] = edge
            tup = _Tup(Values(sentence), None, {root: edge}, 0)
        else:
            tup = _Tup(Values(sentence), None, None, 0)
        collector.input = tup
        for w in tup.values[0].split():
            collector.emit(Values(w))
        collector.ack(tup)
    elapsed = clock() - t0
    assert not ledger, "every tree completes"
    return elapsed, counts


def squall_run(sentences: list[str], acking: bool, **run: Any) -> tuple[float, dict[str, int]]:
    """W1 on the local runner; `run` goes to `LocalEngine.run` (e.g. `on_progress`)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", ListSpout(sentences, reliable=acking))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    conf = Config()
    conf.set_num_ackers(1 if acking else 0)
    conf.set_max_spout_pending(1000)
    engine = LocalEngine(builder.create_topology(), conf)
    t0 = clock()
    result = engine.run(until_complete=True, **run)
    elapsed = clock() - t0
    if result.errors:
        raise AssertionError(f"errors: {result.errors[:3]}")
    counts: dict[str, int] = {}
    for task in engine.bolts:
        if task.component_id == "count":
            counts.update(task.instance.counts)
    return elapsed, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    args = parser.parse_args()
    global clock
    if args.cpu:
        clock = time.process_time
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    assert sum(expected.values()) == words

    figures: dict[str, list[float]] = {
        name: [] for name in ("plain", "calls", "floor, off", "floor, on", "acking off",
                              "acking on")
    }
    for run in range(args.runs + 1):  # run 0 is the warm-up
        for name, fn in (
            ("plain", plain_loop),
            ("calls", function_chain),
            ("floor, off", lambda s: storm_shaped_floor(s, acking=False)),
            ("floor, on", lambda s: storm_shaped_floor(s, acking=True)),
            ("acking off", lambda s: squall_run(s, acking=False)),
            ("acking on", lambda s: squall_run(s, acking=True)),
        ):
            elapsed, counts = fn(sentences)
            if counts != expected:
                raise AssertionError(f"{name}: counts differ from the reference")
            if run:
                figures[name].append(words / elapsed)
    plain = statistics.median(figures["plain"])
    med = {name: statistics.median(values) for name, values in figures.items()}
    print(f"W1 local runner, {words:,} words, median of {args.runs} runs after a warm-up"
          f"{', CPU time' if args.cpu else ''}")
    print("  plain: per-word dict loop; calls: spout->split->count function calls, no framework;")
    print("  floor: Storm-shaped user code and tuple objects, no framework (an upper bound)")
    for name, values in figures.items():
        print(f"  {name:<11} {med[name] / 1e6:6.3f} M words/s   ratio to plain loop "
              f"{med[name] / plain:6.1%}   (min {min(values) / 1e6:.3f}, "
              f"max {max(values) / 1e6:.3f})")
    for mode in ("off", "on"):
        print(f"  squall acking {mode} reaches {med['acking ' + mode] / med['floor, ' + mode]:.0%} "
              f"of the acking-{mode} floor")


if __name__ == "__main__":
    main()
