"""The windowed-operator engine (squall.panes.engine): what is not a scenario.

The pane scenarios (on-time, early and late firings, the accumulation modes with retractions,
allowed lateness and dropped data, sessions merging, the global window, fire-only-updated, time
triggers, end of input, and snapshots after every step) are transcripts in
`tests/transcripts/panes_*.json`, run on this engine and on both runners by
`tests/runners/test_transcripts.py`. Here: window assignment, build-time validation, properties over
random input (session merges, reordering within the watermark delay), input watermarks, and the
stock accumulations.

Panes are (key, window_start, window_end, value, timing, pane_index, is_retraction).
"""

from __future__ import annotations

import random

import pytest

from squall import Duration
from squall.windows import (
    InputWatermarks,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    WindowedEngine,
    accumulations,
)

AT_WM = TriggerOption.at_watermark()


def eng(window=None, acc=None, trigger=AT_WM, lateness=None):
    return WindowedEngine(window if window is not None else TimeWindows(1000),
                          acc if acc is not None else accumulations.Sum(), trigger, lateness)


# ---- windows -----------------------------------------------------------------------------------

def test_fixed_windows_are_half_open_and_floor_negative_timestamps():
    w = TimeWindows(Duration.seconds(1))
    assert w.assign(0) == [(0, 1000)]
    assert w.assign(999) == [(0, 1000)]
    assert w.assign(1000) == [(1000, 2000)]
    assert w.assign(-1) == [(-1000, 0)]
    assert w.assign(-1000) == [(-1000, 0)]


def test_sliding_windows_each_tuple_in_duration_over_slide_windows_ordered_by_end():
    w = TimeWindows(Duration.minutes(10)).slide_by(Duration.minutes(2))
    ws = w.assign(125_000)
    assert len(ws) == 5
    assert ws == [(b, b + 600_000) for b in (-360_000, -240_000, -120_000, 0, 120_000)]
    assert all(s <= 125_000 < e for s, e in ws)
    assert TimeWindows(1000).slide_by(500).assign(100) == [(-500, 500), (0, 1000)]
    assert TimeWindows(1000).slide_by(500).assign(500) == [(0, 1000), (500, 1500)]
    with pytest.raises(ValueError, match="must divide"):
        TimeWindows(1000).slide_by(400)
    with pytest.raises(ValueError, match="at least 1 ms"):
        TimeWindows(0)


# ---- triggers and modes --------------------------------------------------------------------------

def test_build_time_validation():
    with pytest.raises(ValueError, match="no real retraction"):
        eng(acc=accumulations.Max(), trigger=AT_WM.accumulating_and_retracting_fired_panes())
    for acc in (accumulations.Min(), accumulations.Average(), accumulations.TopN(3),
                accumulations.ToList(), accumulations.ToSet(), accumulations.InnerJoin()):
        with pytest.raises(ValueError, match="no real retraction"):
            eng(acc=acc, trigger=AT_WM.accumulating_and_retracting_fired_panes())
    with pytest.raises(ValueError, match="accumulating mode"):
        eng(trigger=AT_WM.fire_only_updated_panes())
    eng(acc=accumulations.Count(), trigger=AT_WM.accumulating_and_retracting_fired_panes())


# ---- sessions -----------------------------------------------------------------------------------

def test_session_merges_agree_with_a_brute_force_model():
    """Random arrival orders: final sessions equal the connected components of the proto
    sessions under strict overlap, whatever the order."""
    rnd = random.Random(7)
    for _ in range(200):
        stamps = [rnd.randrange(0, 400) for _ in range(rnd.randrange(1, 25))]
        e = eng(SessionWindows(Duration(30)), accumulations.ToList())
        for ts in stamps:
            e.process("k", ts, ts, 0)
        protos = sorted((ts, ts + 30) for ts in stamps)
        expected: list[list[int]] = []
        for s, t in protos:
            if expected and s < expected[-1][1]:
                expected[-1][1] = max(expected[-1][1], t)
            else:
                expected.append([s, t])
        assert e.sessions["k"] == [tuple(w) for w in expected]
        e.end_of_input(0)
        out = e.take()
        assert sorted(v for p in out for v in p[3]) == sorted(stamps)


# ---- reordering and batch cuts -------------------------------------------------------------------

def test_reordering_within_the_watermark_delay_gives_the_same_panes():
    rnd = random.Random(3)
    events = [(f"u{rnd.randrange(4)}", i * 37, rnd.randrange(1, 9)) for i in range(300)]
    delay = 400

    def panes(order):
        e = WindowedEngine(TimeWindows(1000).slide_by(500), accumulations.Sum(),
                           AT_WM.with_late_firings_at_every(1), 0)
        w = InputWatermarks([frozenset()], delay)
        for key, ts, v in order:
            assert e.process(key, ts, v, 0)
            wm = w.observe(0, ts)
            if wm is not None:
                e.advance(wm, 0)
        e.end_of_input(0)
        return e.take()

    reference = panes(events)
    for seed in range(5):
        shuffled = list(events)
        r = random.Random(seed)
        for i in range(len(shuffled) - 1):  # swaps of neighbours less than `delay` apart
            j = i + 1
            if shuffled[j][1] - shuffled[i][1] < delay and r.random() < 0.5:
                shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
        assert shuffled != events
        assert sorted(panes(shuffled)) == sorted(reference)
    assert all(p[4] == "ON_TIME" for p in reference)


# ---- watermarks from inputs ----------------------------------------------------------------

def test_input_watermark_is_the_min_over_sources_and_inputs():
    w = InputWatermarks([frozenset({1, 2}), frozenset({3})], None)
    assert w.upstream(0, 1, 100) is None
    assert w.upstream(0, 2, 50) is None  # input 2 has not reported
    assert w.upstream(1, 3, 70) == 50
    assert w.upstream(0, 2, 200) == 70
    assert w.upstream(0, 2, 150) is None  # not monotone: ignored
    assert w.upstream(1, 3, 500) == 100
    assert w.current() == 100


def test_generated_watermark_with_upstream_takes_the_larger():
    w = InputWatermarks([frozenset({1})], 100)
    assert w.observe(0, 1000) == 900
    assert w.upstream(0, 1, 500) is None  # 500 < generated 900
    assert w.upstream(0, 1, 2000) == 2000


# ---- accumulations ------------------------------------------------------------------------------

def fold(acc, values):
    a = acc.default_accumulated_value()
    for v in values:
        a = acc.accumulate(a, v)
    return a


def test_stock_accumulations():
    A = accumulations
    assert A.Sum().get_output(fold(A.Sum(), [1.5, 2])) == 3.5
    assert A.Count().get_output(fold(A.Count(), "xyz")) == 3
    assert A.Min(key=lambda s: -s).get_output(fold(A.Min(key=lambda s: -s), [1, 5, 3])) == 5
    assert A.Max(key=len).get_output(fold(A.Max(key=len), ["aa", "b", "ccc"])) == "ccc"
    assert A.Min().get_output(A.Min().default_accumulated_value()) is None
    avg = A.Average()
    assert avg.get_output(fold(avg, range(1, 11))) == 5.5
    # merge weights each side by its count (Apex's precedence bug is not copied)
    assert avg.get_output(avg.merge(fold(avg, [1]), fold(avg, [2, 3, 4]))) == 2.5
    top = A.TopN(3)
    assert top.get_output(fold(top, [5, 1, 9, 3, 7, 2, 8])) == [9, 8, 7]
    assert top.get_output(top.merge(fold(top, [1, 2]), fold(top, [3, 4]))) == [4, 3, 2]
    tl = A.ToList()
    acc = fold(tl, [3, 1])
    out = tl.get_output(acc)
    tl.accumulate(acc, 2)
    assert out == [3, 1]  # the emitted value does not change with the accumulator
    ts = A.ToSet()
    assert ts.get_output(ts.merge(fold(ts, "ab"), fold(ts, "bc"))) == ["a", "b", "c"]
    j = A.InnerJoin()
    acc = fold(j, [1, 2, 3])
    for v in "xyz":
        acc = j.accumulate2(acc, v)
    assert len(j.get_output(acc)) == 9
    assert j.get_output(fold(j, [1])) == []  # one side only: an empty list
    cg = A.CoGroup()
    assert cg.get_output(cg.accumulate2(fold(cg, [1]), "x")) == [[1], ["x"]]
    for a in (A.Sum(), A.Count(), A.Min(), A.Max(), A.Average(), A.TopN(2), A.ToList(),
              A.ToSet(), A.InnerJoin(), A.CoGroup()):
        assert isinstance(a, A.Accumulation)
