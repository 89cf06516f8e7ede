"""`WindowedRole.execute_columns`: a run of a windowed bolt task's input as rows of one origin,
through the window manager column-wise, with exactly what `execute` on each tuple sends (the
bolt's window emits with their contents, late records, error records, acks, in order) and the
same window state, at every cut into batches.

Each case builds the windowed bolt's task on the local runner (not run: its role is driven
directly) twice, gives one role the tuples one by one (`execute`) and the other each batch's
rows at once (`execute_columns`), with a tick after some batches, then the end of input; a
recording collector takes what each role sends. Among the rows: late ones, float timestamps,
timestamps that are not numbers (error records), in event time (timestamp field or extractor,
with and without a late stream, with the fatal switch) and in processing time.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import Config, Duration, Fields, TopologyBuilder, WindowedBolt
from squall.components.windowed import TIMESTAMP_ERRORS_FATAL
from squall.runtime.local.engine import LocalEngine
from squall.task.roles import windowed
from squall.testing.fixed import FixedTupleSpout
from squall.topology.tuple import Origin, Tuple, _RuntimeTuple, tick_tuple
from squall.tuple_windows.manager import WindowManager
from squall.tuple_windows.spec import Count

WORDS = Fields("word", "ts")
ORIGIN = Origin(WORDS, "src", "default", 0)


class Windows(WindowedBolt):
    """Emits each window: its bounds and the words in it, new and expired."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, window: Any) -> None:
        def words(tuples: list) -> list:
            return [t.values[0] for t in tuples]

        self.collector.emit([window.start_timestamp, window.end_timestamp,
                             words(window.get()), words(window.get_new()),
                             words(window.get_expired())])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("start", "end", "words", "new", "expired"))


class Recorder:
    """The role's collector: what it emits, acks and fails, in order (tuples by row number)."""

    def __init__(self, numbers: dict[int, int]) -> None:
        self.numbers = numbers
        self.events: list[Any] = []

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        self.events.append(("emit", stream, list(values)))
        return []

    def ack(self, tup: Tuple) -> None:
        self.events.append(("ack", self.numbers.get(id(tup.values), "tick")))

    def fail(self, tup: Tuple) -> None:
        self.events.append(("fail", self.numbers[id(tup.values)]))

    def report_error(self, exc: Exception) -> None:
        self.events.append(("error", type(exc).__name__))


def role_of(bolt: WindowedBolt, numbers: dict[int, int], fatal: bool) -> tuple[Any, Any]:
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([], fields=WORDS))  # (never run)
    b.set_bolt("win", bolt).fields_grouping("src", Fields("word"))
    engine = LocalEngine(b.create_topology(), Config({TIMESTAMP_ERRORS_FATAL: fatal}))
    engine.start()
    role = next(t for t in engine.bolts if t.component_id == "win").window
    recorder = Recorder(numbers)
    role.out = recorder
    role.collector._out = recorder
    return engine, role


def measure(draw: Any, counts: tuple[int, int], millis: tuple[int, int]) -> Any:
    if draw(st.booleans()):
        return Count(draw(st.integers(*counts)))
    return Duration(draw(st.integers(*millis)))


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 40))
    rows, t = [], 0
    for _ in range(n):
        t += draw(st.integers(0, 12))
        ts: Any = t - draw(st.sampled_from([0, 0, 0, 3, 40]))
        kind = draw(st.sampled_from(["int"] * 10 + ["float", "text"]))
        ts = float(ts) + 0.5 if kind == "float" else "x" if kind == "text" else ts
        rows.append([draw(st.sampled_from("abc")), ts])
    length = measure(draw, (1, 4), (5, 40))
    slide = length if draw(st.booleans()) else measure(draw, (1, 3), (3, 30))
    return {"rows": rows, "length": length, "slide": slide,
            "time": draw(st.sampled_from(["field", "extractor", "processing"])),
            "lag": draw(st.sampled_from([0, 5])),
            "interval": draw(st.sampled_from([0, 10])),
            "late_stream": draw(st.sampled_from([None, "late"])),
            "fatal": draw(st.booleans()),
            "cuts": sorted(set(draw(st.lists(st.integers(0, n), max_size=4)))),
            "ticks": draw(st.lists(st.booleans(), min_size=6, max_size=6))}


def bolt_of(case: dict[str, Any]) -> WindowedBolt:
    bolt = Windows().with_window(case["length"], case["slide"])
    if case["time"] == "processing":
        return bolt
    if case["time"] == "field":
        bolt = bolt.with_timestamp_field("ts")
    else:
        bolt = bolt.with_timestamp_extractor(lambda tup: tup.values[1])
    bolt = bolt.with_lag(Duration(case["lag"])).with_watermark_interval(
        Duration(case["interval"]))
    if case["late_stream"] is not None:
        bolt = bolt.with_late_tuple_stream(case["late_stream"])
    return bolt


def failed(role: Any, tup: Tuple, exc: Exception) -> None:
    """What the task does with a tuple its role raised for: fails it (here: records it)."""
    role.out.events.append(("failed", role.out.numbers[id(tup.values)], type(exc).__name__))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_execute_columns_sends_what_execute_sends_at_every_cut(case):
    rows = case["rows"]
    numbers = {id(r): i for i, r in enumerate(rows)}
    one, by_tuple = role_of(bolt_of(case), numbers, case["fatal"])
    other, by_batch = role_of(bolt_of(case), numbers, case["fatal"])
    try:
        assert by_batch.columns_reason() is None
        bounds = [0, *case["cuts"], len(rows)]
        now = 0
        for batch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            now += 7
            for row in rows[lo:hi]:
                tup = _RuntimeTuple(row, ORIGIN, None, 1)
                try:
                    by_tuple.execute(tup, now)
                except Exception as exc:
                    failed(by_tuple, tup, exc)
            by_batch.execute_columns(rows[lo:hi], ORIGIN, now,
                                     lambda tup, exc: failed(by_batch, tup, exc), task_id=1)
            assert by_batch.out.events == by_tuple.out.events
            if case["ticks"][batch]:
                now += 11
                by_tuple.execute(tick_tuple(1, 1), now)
                by_batch.execute_columns([[1]], tick_tuple(1, 1)._origin, now,
                                         lambda tup, exc: failed(by_batch, tup, exc))
            assert by_batch.out.events == by_tuple.out.events
        by_tuple.end_of_input(now + 100)
        by_batch.end_of_input(now + 100)
        assert by_batch.out.events == by_tuple.out.events
        assert by_batch.manager.late_count == by_tuple.manager.late_count
        assert by_batch.window_errors == by_tuple.window_errors
        assert by_batch.manager.seq == by_tuple.manager.seq
    finally:
        one.stop()
        other.stop()


def test_the_cases_reach_windows_late_and_error_records():
    """The property's cases are not vacuous: a fixed one sends windows, a late record, an error
    record and acks through `execute_columns`."""
    rows = [["a", 1], ["b", 4], ["c", "x"], ["a", 30], ["b", 2], ["c", 31.5], ["a", 55]]
    numbers = {id(r): i for i, r in enumerate(rows)}
    case = {"length": Duration(10), "slide": Duration(10), "time": "field", "lag": 0,
            "interval": 0, "late_stream": "late", "fatal": False}
    engine, role = role_of(bolt_of(case), numbers, False)
    try:
        role.execute_columns(rows, ORIGIN, 0, lambda tup, exc: None, task_id=1)
        streams = [e[1] for e in role.out.events if e[0] == "emit"]
        assert {"default", "late", "window_errors"} <= set(streams)
        assert ("emit", "default", [0, 10, ["a", "b"], ["a", "b"], []]) in role.out.events
        assert ("ack", 0) in role.out.events
    finally:
        engine.stop()


def test_a_manager_that_cannot_goes_tuple_by_tuple_and_says_so_once(caplog, monkeypatch):
    """Source watermarks are not column-wise: `execute_columns` gives each row to `execute`, with
    the same result, and logs why once."""
    rows = [["a", 1], ["b", 40], ["c", 2], ["a", 70]]
    numbers = {id(r): i for i, r in enumerate(rows)}
    case = {"length": Duration(10), "slide": Duration(10), "time": "field", "lag": 0,
            "interval": 0, "late_stream": None, "fatal": False}
    one, by_tuple = role_of(bolt_of(case), numbers, False)
    other, by_batch = role_of(bolt_of(case), numbers, False)
    try:
        for role in (by_tuple, by_batch):
            role.manager = WindowManager(role.manager.spec, role.manager.tracker.streams,
                                         {0: "src"})
        assert "source watermarks" in (by_batch.columns_reason() or "")
        monkeypatch.setattr(windowed, "_reported", set())
        for row in rows:
            by_tuple.execute(_RuntimeTuple(row, ORIGIN, None, 1), 0)
        with caplog.at_level("INFO", logger="squall"):
            by_batch.execute_columns(rows[:2], ORIGIN, 0, lambda tup, exc: None, task_id=1)
            by_batch.execute_columns(rows[2:], ORIGIN, 0, lambda tup, exc: None, task_id=1)
        by_tuple.end_of_input(1)
        by_batch.end_of_input(1)
        assert by_batch.out.events == by_tuple.out.events
        assert any(e[0] == "emit" for e in by_batch.out.events)
        said = [r for r in caplog.records if "source watermarks" in r.getMessage()]
        assert len(said) == 1
    finally:
        one.stop()
        other.stop()
