"""`OperatorRole.execute_columns`: a batch of an operator task's input column-wise, with exactly
what `execute` on each tuple sends (panes, late records, error records, watermarks, in order, and
an ack per tuple), at every cut into batches.

Each case builds the operator's task on the local runner (not run: its role is driven directly)
twice, gives one role the tuples one by one (`execute`) and the other each batch at once
(`execute_columns`, as a Spark stage does: the values of each run of one origin, no tuple
objects), with a batch end after each, then the end of input; a recording collector takes what
each role sends (a tuple known by its values list, which the column path's tuples share). Among
the tuples: late ones, some whose timestamp is not an int (the general path), some without the
key field (an error record), some whose value a `Sum` cannot add (the tuple fails: the batch
goes tuple by tuple), and accumulations that go column-wise (`Count`,
`Sum` of ints) and one that does not (`ToList`); panes with and without Beam's pane info.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import Bolt, Config, Duration, Fields, Spout, TopologyBuilder
from squall.panes import accumulations
from squall.runtime.local.engine import LocalEngine
from squall.topology.tuple import Origin, Tuple
from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption

WORDS = Fields("word", "ts", "n")
OTHER = Fields("ts", "n")  # no key field: an error record
WORDS_ORIGIN = Origin(WORDS, "src", "default", 0)
OTHER_ORIGIN = Origin(OTHER, "src", "default", 0)


class Source(Spout):
    def next_tuple(self) -> None:
        """Never called: the test drives the operator's role itself."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(WORDS)


class Sink(Bolt):
    def execute(self, tup: Tuple) -> None:
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: Any) -> None:
        """Declares nothing."""


class Recorder:
    """The role's collector: what it emits and acks, in order (acks by tuple number, a tuple
    known by its values list)."""

    def __init__(self, numbers: dict[int, int]) -> None:
        self.numbers = numbers
        self.events: list[Any] = []

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> None:
        anchor = None if anchors is None else self.numbers[id(anchors.values)]
        self.events.append(("emit", stream, list(values), anchor))

    def ack(self, tup: Tuple) -> None:
        self.events.append(("ack", self.numbers[id(tup.values)]))


def role_of(operator: KeyedWindowedOperator, numbers: dict[int, int]) -> tuple[Any, Any]:
    b = TopologyBuilder()
    b.set_spout("src", Source())
    b.set_bolt("win", operator).fields_grouping("src", Fields("word"))
    sink = b.set_bolt("sink", Sink()).shuffle_grouping("win")
    if operator.late_stream is not None:
        sink.shuffle_grouping("win", operator.late_stream)
    engine = LocalEngine(b.create_topology(), Config({}))
    engine.start()
    role = next(t for t in engine.bolts if t.component_id == "win").window
    recorder = Recorder(numbers)
    role._out, role._bulk = recorder, None
    role._sends_wm = True  # the watermarks it would send downstream, recorded too
    return engine, role


def failed(role: Any, tup: Tuple, exc: Exception) -> None:
    """What the task does with a tuple its role raised for: fails it (here: records it)."""
    role._out.events.append(("failed", role._out.numbers[id(tup.values)], type(exc).__name__))


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 40))
    rows = []
    t = 0
    for _ in range(n):
        t += draw(st.integers(0, 400))
        ts: Any = t - draw(st.sampled_from([0, 0, 0, 900, 2_500]))
        kind = draw(st.sampled_from(["word"] * 12 + ["float", "nokey", "text"]))
        if kind == "float":
            ts = float(ts)
        value: Any = "x" if kind == "text" else draw(st.integers(0, 5))
        rows.append((kind, draw(st.sampled_from("abc")), ts, value))
    option = TriggerOption.at_watermark()
    if draw(st.booleans()):
        option = option.with_early_firings_at_every(2)
    if draw(st.booleans()):
        option = option.with_late_firings_at_every(1)
    if draw(st.booleans()):
        option = option.accumulating_and_retracting_fired_panes()
    acc = draw(st.sampled_from(["count", "sum", "list"]))
    if acc == "list":
        option = option.discarding_fired_panes()
    return {"rows": rows, "option": option, "acc": acc,
            "lateness": draw(st.sampled_from([0, 1_000])),
            "late_stream": draw(st.sampled_from([None, "late"])),
            "pane_info": draw(st.booleans()),
            "cuts": sorted(set(draw(st.lists(st.integers(0, n), max_size=3))))}


def operator_of(case: dict[str, Any]) -> KeyedWindowedOperator:
    acc = {"count": accumulations.Count, "sum": accumulations.Sum,
           "list": accumulations.ToList}[case["acc"]]()
    return KeyedWindowedOperator(
        window=TimeWindows(Duration(1_000)), accumulation=acc, trigger=case["option"],
        allowed_lateness=Duration(case["lateness"]), watermark_delay=Duration(0),
        timestamp_field="ts", key_field="word", value_field="n",
        late_stream=case["late_stream"], pane_info=case["pane_info"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_execute_columns_sends_what_execute_sends_at_every_cut(case):
    tuples = [Tuple([word, ts, n], WORDS_ORIGIN) if kind != "nokey"
              else Tuple([ts, n], OTHER_ORIGIN)
              for kind, word, ts, n in case["rows"]]
    numbers = {id(t.values): i for i, t in enumerate(tuples)}
    one, by_tuple = role_of(operator_of(case), numbers)
    other, by_batch = role_of(operator_of(case), numbers)
    try:
        bounds = [0, *case["cuts"], len(tuples)]
        for batch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            for tup in tuples[lo:hi]:
                try:
                    by_tuple.execute(tup, batch)
                except TypeError as exc:
                    failed(by_tuple, tup, exc)
            for origin, run in itertools.groupby(tuples[lo:hi], key=lambda t: t._origin):
                by_batch.execute_columns([t.values for t in run], origin, batch,
                                         lambda tup, exc: failed(by_batch, tup, exc))
            by_tuple.end_batch(batch, batch)
            by_batch.end_batch(batch, batch)
            assert by_batch._out.events == by_tuple._out.events
        by_tuple.end_of_input(99)
        by_batch.end_of_input(99)
        assert by_batch._out.events == by_tuple._out.events
        assert by_batch.late_tuples == by_tuple.late_tuples
        assert by_batch.window_errors == by_tuple.window_errors
    finally:
        one.stop()
        other.stop()
