"""Column-wise windows (squall.panes.columnar) against the per-tuple pane engine.

A property over generated input: keys, timestamps with disorder and tuples behind the watermark,
tumbling and sliding windows, Apex's triggers (on-time, early and late count firings, none, and
time triggers), the three accumulation modes, allowed lateness (none, zero, more), several
accumulations, and a cut of the input into batches. Each batch goes through `process_columns`
on one engine and tuple by tuple through another, as the operator's per-tuple path drives it
(`process` with the generated watermark, `advance` where it is due, `batch_end` between
batches); the panes, the late tuples with the watermark they were judged against, the order of
both, and the engines' snapshots after every batch and after the end of input are the same.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import Duration
from squall.panes import accumulations
from squall.panes import columnar as columnar_mod
from squall.panes import engine as engine_mod
from squall.panes.accumulations import Average, Count, Max, Min, Sum, ToList, TopN
from squall.panes.beam_triggers import AfterWatermark
from squall.panes.columnar import (
    LATE_TUPLE,
    ON_TIME_ROWS,
    per_tuple,
    process_columns,
    unsupported,
)
from squall.panes.engine import WindowedEngine
from squall.panes.pane_info import TimestampCombiner
from squall.panes.state_mapping import StateWindowStore
from squall.panes.triggers import TriggerOption
from squall.panes.windows import SessionWindows, TimeWindows
from squall.state.base import MemoryKeyValueState


class MeanOfSquares:
    """A user accumulation with add, merge and extract (Beam's CombineFn shape)."""

    retractable = False

    def default_accumulated_value(self) -> list:
        return [0, 0]

    def accumulate(self, acc: list, value: Any) -> list:
        return [acc[0] + value * value, acc[1] + 1]

    def merge(self, a: list, b: list) -> list:
        return [a[0] + b[0], a[1] + b[1]]

    def get_output(self, acc: list) -> float | None:
        return acc[0] / acc[1] if acc[1] else None

    def get_retraction(self, output: Any) -> Any:
        raise TypeError("no retraction")


ACCUMULATIONS = {"count": Count, "sum": Sum, "min": Min, "max": Max, "mean": Average,
                 "top2": lambda: TopN(2), "list": ToList, "user": MeanOfSquares}
RETRACTABLE = ("count", "sum")


def reference(e: WindowedEngine, keys, tss, values, now: int, delay: int) -> list:
    """The operator's per-tuple path (`OperatorRole.execute`'s generated-watermark branch:
    `process` with the delay, `advance` where the generated watermark is due)."""
    return per_tuple(e, keys, tss, values, now, delay).steps


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(0, 60))
    n_keys = draw(st.integers(1, 4))
    base = draw(st.integers(-3_000, 3_000))
    # Mostly advancing time with jitter, some tuples far behind (late), some ahead.
    steps = draw(st.lists(st.integers(-2_500, 900), min_size=n, max_size=n))
    tss, t = [], base
    for step in steps:
        t += max(step, 0) if step > -1_500 else 0
        tss.append(t + (step if step < 0 else 0))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", 7][:n_keys]), min_size=n, max_size=n))
    acc = draw(st.sampled_from(sorted(ACCUMULATIONS)))
    values = draw(st.lists(st.integers(-5, 9) if acc != "mean" or draw(st.booleans())
                           else st.floats(-4, 4, allow_nan=False), min_size=n, max_size=n))
    duration = draw(st.sampled_from([1_000, 2_000]))
    slide = draw(st.sampled_from([duration, duration // 2, duration // 4]))
    option = TriggerOption.at_watermark() if draw(st.booleans()) else TriggerOption()
    early = draw(st.sampled_from([None, 1, 2, 3]))
    late = draw(st.sampled_from([None, 1, 2]))
    if early:
        option = option.with_early_firings_at_every(early)
    if late:
        option = option.with_late_firings_at_every(late)
    # Time triggers (at batch ends, a second of processing time apart: a batch each).
    every = draw(st.sampled_from([None, "early", "late"]))
    if every is not None:
        period = Duration.seconds(1)
        option = (option.with_early_firings_at_every(period) if every == "early"
                  else option.with_late_firings_at_every(period))
    modes = ["discarding", "accumulating"]
    if acc in RETRACTABLE:
        modes.append("retracting")
    mode = draw(st.sampled_from(modes))
    option = (option.discarding_fired_panes() if mode == "discarding"
              else option.accumulating_fired_panes() if mode == "accumulating"
              else option.accumulating_and_retracting_fired_panes())
    if mode != "discarding" and draw(st.booleans()):
        option = option.fire_only_updated_panes()
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=4))))
    return {"keys": keys, "tss": tss, "values": values, "acc": acc, "duration": duration,
            "slide": slide, "option": option,
            "lateness": draw(st.sampled_from([None, 0, 500, 3_000])),
            "delay": draw(st.sampled_from([0, 300])), "cuts": cuts}


def engine_of(case: dict[str, Any]) -> WindowedEngine:
    return WindowedEngine(TimeWindows(case["duration"], case["slide"]),
                          ACCUMULATIONS[case["acc"]](), case["option"],
                          allowed_lateness_ms=case["lateness"])


def snapshot(e: WindowedEngine) -> bytes:
    """The engine as a task snapshot holds it: every window, key and pane state in order, the
    heaps, the counters (with the accumulators' types: a numpy scalar would show)."""
    return pickle.dumps(e)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_columnar_batches_equal_the_per_tuple_engine_at_every_cut(case):
    columnar, per_tuple = engine_of(case), engine_of(case)
    assert unsupported(columnar) is None
    n = len(case["tss"])
    bounds = [0, *case["cuts"], n]
    for batch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        now = 1_000 * batch
        cols = [case["keys"][lo:hi], case["tss"][lo:hi], case["values"][lo:hi]]
        expected = reference(per_tuple, *cols, now, case["delay"])
        result = process_columns(columnar, *cols, now, case["delay"])
        assert result.columnar
        assert result.steps == expected
        per_tuple.batch_end(now)
        columnar.batch_end(now)
        assert columnar.take() == per_tuple.take()
        assert snapshot(columnar) == snapshot(per_tuple)
    columnar.end_of_input(10_000)
    per_tuple.end_of_input(10_000)
    assert columnar.take() == per_tuple.take()
    assert snapshot(columnar) == snapshot(per_tuple)


def test_a_long_in_order_batch_fires_every_window_once_in_order():
    """W2's shape at a larger size than the property reaches: many windows in one batch, a
    few late tuples, each found by the boundary search across its chunks."""
    keys = [f"w{i % 37}" for i in range(20_000)]
    tss = [i * 3 - (5_000 if i % 997 == 0 else 0) for i in range(20_000)]
    values = [i % 5 for i in range(20_000)]
    for acc in (Count, Sum):
        for lateness in (0, 2_000):
            option = TriggerOption.at_watermark().with_late_firings_at_every(1)
            a = WindowedEngine(TimeWindows(1_000), acc(), option, allowed_lateness_ms=lateness)
            b = WindowedEngine(TimeWindows(1_000), acc(), option, allowed_lateness_ms=lateness)
            result = process_columns(a, keys, tss, values, 0, 0)
            assert result.steps == reference(b, keys, tss, values, 0, 0)
            assert len(result.panes) > 37 * 50 and result.late
            assert snapshot(a) == snapshot(b)


def test_sliding_windows_with_an_early_count_trigger_fire_at_the_nth_tuple():
    """W3's shape: sliding windows, an early pane at exactly the N-th tuple of a (key, window)."""
    keys = [f"w{i % 5}" for i in range(5_000)]
    tss = list(range(0, 50_000, 10))
    option = TriggerOption.at_watermark().with_early_firings_at_every(40)
    a = WindowedEngine(TimeWindows(6_000, 1_000), Count(), option, allowed_lateness_ms=0)
    b = WindowedEngine(TimeWindows(6_000, 1_000), Count(), option, allowed_lateness_ms=0)
    result = process_columns(a, keys, tss, [None] * len(keys), 0, 0)
    assert result.steps == reference(b, keys, tss, [None] * len(keys), 0, 0)
    assert sum(p[4] == "EARLY" for p in result.panes) > 100
    assert snapshot(a) == snapshot(b)


@st.composite
def on_time_cases(draw: Any) -> dict[str, Any]:
    """W2's shape, small: time mostly advancing, so that windows are made, fired on time and
    purged within a batch (the panes made straight from a window's pending tuples), with some
    disorder, tuples behind the watermark, windows left open across a cut, and early counts,
    retractions or a lateness that keep a window's state (the engine's own firing)."""
    n = draw(st.integers(1, 80))
    tss, t = [], draw(st.integers(-2_000, 2_000))
    for step in draw(st.lists(st.integers(-1_200, 400), min_size=n, max_size=n)):
        t += max(step, 0)
        tss.append(t + (step if step < -1_000 else 0))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", 7]), min_size=n, max_size=n))
    acc = draw(st.sampled_from(sorted(ACCUMULATIONS)))
    values = draw(st.lists(st.integers(-5, 9), min_size=n, max_size=n))
    duration = draw(st.sampled_from([1_000, 2_000]))
    option = TriggerOption.at_watermark()
    early = draw(st.sampled_from([None, None, 2]))
    if early:
        option = option.with_early_firings_at_every(early)
    mode = draw(st.sampled_from(["discarding", "accumulating"]
                                + (["retracting"] if acc in RETRACTABLE else [])))
    option = (option.discarding_fired_panes() if mode == "discarding"
              else option.accumulating_fired_panes() if mode == "accumulating"
              else option.accumulating_and_retracting_fired_panes())
    return {"keys": keys, "tss": tss, "values": values, "acc": acc, "duration": duration,
            "slide": draw(st.sampled_from([duration, duration // 2])), "option": option,
            "lateness": draw(st.sampled_from([0, 0, 500])),
            "delay": draw(st.sampled_from([0, 300])),
            "cuts": sorted(set(draw(st.lists(st.integers(0, n), max_size=3))))}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(on_time_cases())
def test_windows_fired_and_purged_in_a_batch_equal_the_per_tuple_engine(case):
    test_columnar_batches_equal_the_per_tuple_engine_at_every_cut.hypothesis.inner_test(case)


def as_rows(steps: list, width: int, keyed: bool) -> list:
    """`steps` with every pane as the output row it gives (the operator's `_emit_panes`), runs
    of panes of one tuple joined: what an operator sends, in order."""
    out: list = []
    for i, kind, x in steps:
        if kind == LATE_TUPLE:
            out.append((i, kind, x))
            continue
        rows = x if kind == ON_TIME_ROWS else [list(p[:width] if keyed else p[1:width])
                                                for p in x]
        if out and out[-1][0] == i and out[-1][1] == "rows":
            out[-1][2].extend(rows)
        else:
            out.append((i, "rows", list(rows)))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(on_time_cases(), st.sampled_from([(7, True), (11, True), (7, False), (11, False)]))
def test_on_time_panes_as_output_rows_are_the_panes_rows(case, shape):
    """`process_columns(..., rows=(width, keyed))` makes the panes of windows fired and purged
    straight from their tuples as output rows: the same rows, in the same place among the other
    panes and late tuples, as the panes give, and the same engine, at every cut."""
    width, keyed = shape
    with_rows, with_panes = engine_of(case), engine_of(case)
    n = len(case["tss"])
    for batch, (lo, hi) in enumerate(itertools.pairwise([0, *case["cuts"], n])):
        cols = [case["keys"][lo:hi], case["tss"][lo:hi], case["values"][lo:hi]]
        got = process_columns(with_rows, *cols, 1_000 * batch, case["delay"], rows=shape)
        expected = process_columns(with_panes, *cols, 1_000 * batch, case["delay"])
        assert as_rows(got.steps, width, keyed) == as_rows(expected.steps, width, keyed)
        assert snapshot(with_rows) == snapshot(with_panes)


def test_w2_windows_give_their_output_rows_without_panes():
    """W2's shape: every window but the last is fired and purged in the batch, its panes made
    as output rows (`ON_TIME_ROWS`), none as pane tuples."""
    keys = [f"w{i % 23}" for i in range(5_000)]
    tss = [i * 7 for i in range(5_000)]
    e = WindowedEngine(TimeWindows(1_000), Count(), TriggerOption.at_watermark(),
                       allowed_lateness_ms=0)
    result = process_columns(e, keys, tss, [None] * 5_000, 0, 0, rows=(7, True))
    kinds = {kind for _i, kind, _x in result.steps}
    assert kinds == {ON_TIME_ROWS}
    rows = [row for _i, _kind, x in result.steps for row in x]
    assert len(rows) == 23 * 34
    assert rows[0] == ["w0", 0, 1_000, 7, "ON_TIME", 0, False]  # 143 tuples: w0 has 7


def test_a_window_fired_and_purged_in_its_batch_keeps_no_pane_state(monkeypatch):
    """W2's windows (tumbling, on time, allowed lateness 0) go from their tuples to their panes
    without a pane state per key; the panes and the snapshot are the per-tuple engine's."""
    made = []
    monkeypatch.setattr(columnar_mod, "PaneState",
                        lambda *a: made.append(a) or engine_mod.PaneState(*a))
    keys = [f"w{i % 23}" for i in range(5_000)]
    tss = [i * 7 for i in range(5_000)]
    values = [i % 11 for i in range(5_000)]
    for acc in (Count, Sum, Average):  # a count, a numpy reduction, a fold
        made.clear()
        a = WindowedEngine(TimeWindows(1_000), acc(), TriggerOption.at_watermark(),
                           allowed_lateness_ms=0)
        b = WindowedEngine(TimeWindows(1_000), acc(), TriggerOption.at_watermark(),
                           allowed_lateness_ms=0)
        result = process_columns(a, keys, tss, values, 0, 0)
        assert result.steps == reference(b, keys, tss, values, 0, 0)
        assert len(result.panes) == 23 * 34
        assert len(made) == 23  # the last window's keys only: it is still open
        assert snapshot(a) == snapshot(b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_columnar_batches_over_a_state_store_equal_the_per_tuple_engine(case):
    """The windows in a state provider (`stateful=True`), written back and forgotten between
    batches as at a checkpoint: the same panes and late tuples, and the same windows read back."""
    state = MemoryKeyValueState()
    store = StateWindowStore(state)
    columnar = WindowedEngine(TimeWindows(case["duration"], case["slide"]),
                              ACCUMULATIONS[case["acc"]](), case["option"],
                              allowed_lateness_ms=case["lateness"], store=store)
    per_tuple_engine = engine_of(case)
    bounds = [0, *case["cuts"], len(case["tss"])]
    for batch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        cols = [case["keys"][lo:hi], case["tss"][lo:hi], case["values"][lo:hi]]
        result = process_columns(columnar, *cols, 1_000 * batch, case["delay"])
        assert result.steps == reference(per_tuple_engine, *cols, 1_000 * batch, case["delay"])
        columnar.batch_end(1_000 * batch)
        per_tuple_engine.batch_end(1_000 * batch)
        assert columnar.take() == per_tuple_engine.take()
        store.flush()
        read_back = {w: {k: st.__getstate__() for k, st in store[w].items()} for w in store}
        assert read_back == {w: {k: st.__getstate__() for k, st in keys.items()}
                             for w, keys in per_tuple_engine.windows.items()}
        assert columnar.progress() == per_tuple_engine.progress()


@pytest.mark.parametrize("build, reason", [
    (lambda: WindowedEngine(SessionWindows(1_000), Count(), TriggerOption.at_watermark()),
     "window"),
    (lambda: WindowedEngine(TimeWindows(1_000), Count(), AfterWatermark()), "trigger"),
    (lambda: WindowedEngine(TimeWindows(1_000), Count(), TriggerOption.at_watermark(),
                            timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST),
     "timestamp combiner"),
])
def test_what_is_not_column_wise_goes_tuple_by_tuple_with_the_same_result(build, reason):
    engine, reference_engine = build(), build()
    assert reason in (unsupported(engine) or "")
    keys, tss = ["a", "b", "a", "a"], [100, 1_500, 200, 2_600]
    result = process_columns(engine, keys, tss, [1] * 4, 0, 0)
    assert not result.columnar and reason in (result.reason or "")
    assert result.steps == reference(reference_engine, keys, tss, [1] * 4, 0, 0)
    assert result.panes
    assert snapshot(engine) == snapshot(reference_engine)


def test_columns_of_different_lengths_are_refused():
    e = WindowedEngine(TimeWindows(1_000), accumulations.Count(), TriggerOption.at_watermark())
    with pytest.raises(ValueError, match="different lengths"):
        process_columns(e, ["a"], [1, 2], [1, 2], 0, 0)

