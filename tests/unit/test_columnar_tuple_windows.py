"""Column-wise windows of Storm's windowed bolt (squall.tuple_windows.columnar) against the
per-tuple window manager.

A property over generated input: timestamps with disorder and rows far behind the watermark,
one or two input streams from several upstream tasks, windows with a count or a duration as
length and slide (tumbling and sliding), event time with a lag and a watermark interval (0 or
not) and processing time, and a cut of the input into batches, each at its own time, with a
tick between some. Each batch goes through `process_columns` on one manager and row by row
(`add_event` or `add`) through another; the expiries, the windows (contents, new, expired, start
and end), the late rows with the watermark they were judged against, their order, and the
managers' state after every batch and after the end of input are the same.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall.duration import Duration
from squall.tuple_windows.columnar import per_tuple, process_columns, unsupported
from squall.tuple_windows.manager import Activation, Expired, Late, WindowManager
from squall.tuple_windows.spec import Count, WindowSpec

SOURCES = [(("split", "default"), 1), (("split", "default"), 2), (("other", "default"), 3)]


def flat(actions: list) -> list:
    """Actions as the windowed role carries them out: an ack per expired row, a window, a late
    row (how expiries are grouped into actions is not seen)."""
    out: list = []
    for a in actions:
        if isinstance(a, Expired):
            out.extend(("expired", e) for e in a.events)
        elif isinstance(a, Activation):
            w = a.window
            out.append(("window", w.get(), w.get_new(), w.get_expired(), w.start_timestamp,
                        w.end_timestamp))
        else:
            assert isinstance(a, Late)
            out.append(("late", a.event, a.ts, a.watermark))
    return out


def state(m: WindowManager) -> dict:
    """What a task snapshot holds of the manager."""
    s = dict(vars(m))
    s.pop("_out")
    s["eviction"] = (type(m.eviction), m.eviction.__slots__ and getattr(
        m.eviction, m.eviction.__slots__[0]))
    s["tracker"] = None if m.tracker is None else dict(vars(m.tracker))
    s["partitions"] = None if m.partitions is None else dict(vars(m.partitions))
    return s


def measure(draw: Any, counts: tuple[int, int], millis: tuple[int, int]) -> Count | Duration:
    if draw(st.booleans()):
        return Count(draw(st.integers(*counts)))
    return Duration(draw(st.integers(*millis)))


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    event_time = draw(st.booleans())
    length = measure(draw, (1, 5), (5, 60))
    slide = draw(st.one_of(st.just(length), st.builds(lambda: None)))
    if slide is None:
        slide = measure(draw, (1, 4), (3, 40))
    spec = WindowSpec(length, slide, event_time=event_time,
                      lag_ms=draw(st.sampled_from([0, 0, 3, 15])),
                      watermark_interval_ms=draw(st.sampled_from([0, 0, 10, 25])))
    n = draw(st.integers(0, 50))
    two_streams = draw(st.booleans())
    codes = draw(st.lists(st.integers(0, 2 if two_streams else 1), min_size=n, max_size=n))
    base = draw(st.integers(-40, 200))
    steps = draw(st.lists(st.integers(-60, 12), min_size=n, max_size=n))
    tss, t = [], base
    for step in steps:  # mostly advancing, with jitter and some rows far behind
        t += max(step, 0) if step > -30 else 0
        tss.append(t + (step if step < 0 else 0))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    gaps = draw(st.lists(st.integers(0, 30), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    ticks = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    streams = {s[0] for s in SOURCES[:3 if two_streams else 2]}
    return {"spec": spec, "tss": tss, "codes": codes, "cuts": cuts, "gaps": gaps,
            "ticks": ticks, "streams": streams}


def run_both(case: dict[str, Any]) -> tuple[WindowManager, WindowManager, list, list]:
    columnar = WindowManager(case["spec"], case["streams"])
    reference = WindowManager(case["spec"], case["streams"])
    assert unsupported(columnar) is None
    n = len(case["tss"])
    rows = [f"r{i}" for i in range(n)]
    bounds = [0, *case["cuts"], n]
    now, got, want = 0, [], []
    for batch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        now += case["gaps"][batch]
        cols = (rows[lo:hi], case["tss"][lo:hi], case["codes"][lo:hi], SOURCES, now)
        if not case["spec"].event_time:
            cols = (rows[lo:hi], None, None, SOURCES, now)
        result = process_columns(columnar, *cols)
        assert result.columnar, result.reason
        expected = per_tuple(reference, *cols)
        assert [i for i, _ in result.actions] == sorted(i for i, _ in result.actions)
        got += flat([a for _, a in result.actions])
        want += flat([a for _, a in expected.actions])
        assert got == want
        assert state(columnar) == state(reference)
        if case["ticks"][batch]:
            now += 7
            got += flat(columnar.tick(now))
            want += flat(reference.tick(now))
    got += flat(columnar.end_of_input(now + 1))
    want += flat(reference.end_of_input(now + 1))
    assert got == want
    assert state(columnar) == state(reference)
    return columnar, reference, got, want


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_columnar_batches_equal_the_per_tuple_manager_at_every_cut(case):
    run_both(case)


def test_the_property_reaches_windows_expiries_and_late_rows():
    """The generated cases are not vacuous: a fixed case of each kind fires windows, expires
    rows and (event time) reports late rows."""
    for spec in (WindowSpec(Duration(20), Duration(10), event_time=True, lag_ms=3,
                            watermark_interval_ms=0),
                 WindowSpec(Count(3), Count(2), event_time=True, watermark_interval_ms=10),
                 WindowSpec(Duration(20), Count(2)), WindowSpec(Count(3), Count(3))):
        tss = [i * 4 - (40 if i % 7 == 6 else 0) for i in range(60)]
        case = {"spec": spec, "tss": tss, "codes": [i % 2 for i in range(60)],
                "cuts": [5, 17, 17, 40], "gaps": [0, 12, 30, 4, 11],
                "ticks": [True, False, True, False, True], "streams": {SOURCES[0][0]}}
        *_, got = run_both(case)
        kinds = {g[0] for g in got}
        assert {"window", "expired"} <= kinds
        assert ("late" in kinds) == spec.event_time


def test_a_long_in_order_batch_is_w2s_shape():
    """W2's shape at a larger size than the property reaches: a 10 s tumbling event-time window,
    words of a sentence sharing its timestamp, one batch and then the end of input."""
    spec = WindowSpec(Duration.seconds(10), Duration.seconds(10), event_time=True)
    tss = [(i // 7) * 100 + 1 for i in range(30_000)]
    case = {"spec": spec, "tss": tss, "codes": [0] * len(tss), "cuts": [12_000],
            "gaps": [0, 1_500], "ticks": [False, True], "streams": {SOURCES[0][0]}}
    *_, got = run_both(case)
    assert sum(g[0] == "window" for g in got) == 43


class Other(WindowManager):
    """A manager keeping its queue its own way (as the stateful windowed bolts' do)."""

    def _insert(self, event: Any, ts: int, source: Any) -> None:
        super()._insert(event, ts, source)


@pytest.mark.parametrize("build, reason", [
    (lambda: Other(WindowSpec(Duration(10), event_time=True), ["s"]), "window manager Other"),
    (lambda: WindowManager(WindowSpec(Duration(10), event_time=True), ["s"], {1: "src"}),
     "source watermarks"),
])
def test_what_is_not_column_wise_goes_row_by_row_with_the_same_result(build, reason):
    manager, reference = build(), build()
    assert reason in (unsupported(manager) or "")
    cols = (["a", "b", "c"], [5, 3_000, 1], [0, 0, 0], [("s", 1)], 0)
    result = process_columns(manager, *cols)
    assert not result.columnar and reason in (result.reason or "")
    assert flat([a for _, a in result.actions]) == flat(
        [a for _, a in per_tuple(reference, *cols).actions])
    assert state(manager) == state(reference)


@pytest.mark.parametrize("tss, sources, reason", [
    ([1, 2.5], [("s", 1)], "not an int"),
    ([1, 2**62], [("s", 1)], "not an int"),
    ([1, 2], [("t", 1)], "stream the watermark does not follow"),
])
def test_a_batch_the_columns_cannot_take_goes_row_by_row(tss, sources, reason):
    spec = WindowSpec(Duration(10), event_time=True, watermark_interval_ms=0)
    manager, reference = WindowManager(spec, ["s"]), WindowManager(spec, ["s"])
    cols = (["a", "b"], tss, [0, 0], sources, 0)
    result = process_columns(manager, *cols)
    assert not result.columnar and reason in (result.reason or "")
    per_tuple(reference, *cols)
    assert state(manager) == state(reference)


def test_columns_of_different_lengths_are_refused():
    m = WindowManager(WindowSpec(Duration(10), event_time=True), ["s"])
    with pytest.raises(ValueError, match="different lengths"):
        process_columns(m, ["a"], [1, 2], [0], [("s", 1)], 0)


def uncovered(tss: list[int], got: list) -> list[str]:
    """The rows neither late nor in a window whose (start, end] holds their timestamp."""
    late = {g[1] for g in got if g[0] == "late"}
    covered = {row for g in got if g[0] == "window" for row in g[1]
               if g[4] < tss[int(row[1:])] <= g[5]}
    return [f"r{i}" for i in range(len(tss)) if f"r{i}" not in late | covered]


@st.composite
def covering_cases(draw: Any) -> dict[str, Any]:
    """Event-time windows with a duration as length and slide, sliding by at most the length;
    rows out of order by up to twice the lag, and jumps ahead (gaps between windows)."""
    slide = draw(st.integers(3, 30))
    length = slide * draw(st.integers(1, 3)) if draw(st.booleans()) else draw(
        st.integers(slide, 60))
    lag = draw(st.sampled_from([3, 15, 40]))
    spec = WindowSpec(Duration(length), Duration(slide), event_time=True, lag_ms=lag,
                      watermark_interval_ms=draw(st.sampled_from([0, 0, 10])))
    n = draw(st.integers(1, 30))
    tss, t = [], draw(st.integers(-40, 200))
    for _ in range(n):
        move = draw(st.sampled_from(["ahead", "ahead", "behind", "jump"]))
        if move == "jump":
            t += draw(st.integers(length, 4 * length + lag))
            tss.append(t)
        elif move == "ahead":
            t += draw(st.integers(0, slide))
            tss.append(t)
        else:
            tss.append(t - draw(st.integers(1, 2 * lag)))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return {"spec": spec, "tss": tss, "codes": [0] * n, "cuts": cuts,
            "gaps": draw(st.lists(st.integers(0, 30), min_size=len(cuts) + 1,
                                  max_size=len(cuts) + 1)),
            "ticks": draw(st.lists(st.booleans(), min_size=len(cuts) + 1,
                                   max_size=len(cuts) + 1)),
            "streams": {SOURCES[0][0]}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(covering_cases())
def test_every_row_not_late_is_in_a_window_that_covers_its_timestamp(case):
    """Each row is late or in a window over its timestamp, on both paths: a window end behind
    the watermark must not jump past a window that a later row, not late, still belongs to."""
    *_, got = run_both(case)
    assert uncovered(case["tss"], got) == []


def test_a_row_behind_a_later_rows_aligned_end_but_not_late_is_in_its_windows():
    """Lag 30, a watermark with every row: "c" (175) is not late (watermark 170) but sorts
    before "b" (200), whose arrival moved the next window end past the closed windows; c is in
    the windows ending 180 and 190, as in Storm (whose trigger jumps only to events at or
    below the watermark). Tumbling: "b" (75) sorts before the first row's aligned end (100)."""
    sliding = WindowSpec(Duration(20), Duration(10), event_time=True, lag_ms=30,
                         watermark_interval_ms=0)
    tumbling = WindowSpec(Duration(10), Duration(10), event_time=True, lag_ms=30,
                          watermark_interval_ms=0)
    for spec, tss, windows in [
            (sliding, [100, 200, 175], [(100, ["r0"]), (110, ["r0"]), (180, ["r2"]),
                                        (190, ["r2"]), (200, ["r1"]), (210, ["r1"])]),
            (tumbling, [100, 75, 200], [(80, ["r1"]), (100, ["r0"]), (200, ["r2"])])]:
        for cuts in ([], [1], [2], [1, 2]):
            case = {"spec": spec, "tss": tss, "codes": [0] * len(tss), "cuts": cuts,
                    "gaps": [0] * (len(cuts) + 1), "ticks": [False] * (len(cuts) + 1),
                    "streams": {SOURCES[0][0]}}
            *_, got = run_both(case)
            assert [(g[5], g[1]) for g in got if g[0] == "window"] == windows
            assert uncovered(tss, got) == []
