"""The windowed-operator engine (squall.panes.engine), pure: windows, triggers, accumulation
modes, lateness, sessions with retractions, watermarks, snapshots. Exact expected panes.

Panes are (key, window_start, window_end, value, timing, pane_index, is_retraction).
"""

from __future__ import annotations

import pickle
import random

import pytest

from squall import Duration
from squall.windows import (
    GLOBAL_WINDOW,
    MAX_TIMESTAMP,
    GlobalWindow,
    InputWatermarks,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    WindowedEngine,
    accumulations,
)

AT_WM = TriggerOption.at_watermark()


def run(engine: WindowedEngine, events) -> list[tuple]:
    """Feed events: (key, ts, value[, now]) tuples, ("W", watermark[, now]), ("B", now) batch
    ends, "END"."""
    for ev in events:
        if ev == "END":
            engine.end_of_input(0)
        elif ev[0] == "W":
            engine.advance(ev[1], ev[2] if len(ev) > 2 else 0)
        elif ev[0] == "B":
            engine.batch_end(ev[1])
        else:
            engine.process(ev[0], ev[1], ev[2], now=ev[3] if len(ev) > 3 else 0)
    return engine.take()


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


def test_global_window_fires_only_at_end_of_input():
    e = eng(GlobalWindow())
    assert run(e, [("k", 5, 1), ("k", 10**12, 2), ("W", 10**15)]) == []
    assert run(e, ["END"]) == [("k", *GLOBAL_WINDOW, 3, "ON_TIME", 0, False)]
    assert e.watermark == MAX_TIMESTAMP


# ---- on time, lateness, purge -------------------------------------------------------------------

def test_on_time_fires_when_the_watermark_reaches_the_end_in_window_order():
    e = eng()
    run(e, [("a", 1500, 1), ("a", 100, 2), ("b", 900, 3)])
    assert run(e, [("W", 999)]) == []
    assert run(e, [("W", 1000)]) == [("a", 0, 1000, 2, "ON_TIME", 0, False),
                                     ("b", 0, 1000, 3, "ON_TIME", 0, False)]
    assert run(e, [("W", 5000)]) == [("a", 1000, 2000, 1, "ON_TIME", 0, False)]


def test_drop_uses_the_tuple_timestamp_against_watermark_minus_lateness():
    e = eng(lateness=1000)
    run(e, [("k", 100, 1), ("W", 1500)])
    assert e.process("k", 499, 5, 0) is False  # 499 < 1500 - 1000, though [0,1000) is alive
    assert e.process("k", 500, 7, 0) is True
    assert e.dropped == 1
    # late data in the horizon: no late trigger, so it is emitted by the window's final pane
    assert run(e, [("W", 2000)]) == [("k", 0, 1000, 7, "LATE", 1, False)]
    assert e.windows == {}  # purged: end 1000 <= 2000 - 1000
    assert e.process("k", 999, 1, 0) is False


def test_zero_lateness_drops_everything_behind_the_watermark_and_purges_after_on_time():
    e = eng(lateness=0)
    out = run(e, [("k", 100, 1), ("W", 1000)])
    assert out == [("k", 0, 1000, 1, "ON_TIME", 0, False)]
    assert e.windows == {} and e.purge_heap == []
    assert e.process("k", 999, 1, 0) is False
    assert e.process("k", 1000, 1, 0) is True


def test_no_lateness_never_drops_nor_purges():
    e = eng(trigger=AT_WM.with_late_firings_at_every(1).accumulating_fired_panes())
    out = run(e, [("k", 100, 1), ("W", 10**9), ("k", 200, 2)])
    assert out == [("k", 0, 1000, 1, "ON_TIME", 0, False), ("k", 0, 1000, 3, "LATE", 1, False)]
    assert e.dropped == 0 and (0, 1000) in e.windows


def test_on_time_then_purge_in_the_same_watermark_step():
    e = eng(lateness=500)
    assert run(e, [("k", 10, 4), ("W", 9000)]) == [("k", 0, 1000, 4, "ON_TIME", 0, False)]
    assert e.windows == {}


def test_window_first_seen_behind_the_watermark_has_no_on_time_pane_only_late_ones():
    e = eng(trigger=AT_WM.with_late_firings_at_every(2), lateness=5000)
    out = run(e, [("W", 3000), ("k", 100, 1), ("k", 200, 2), ("k", 300, 4)])
    assert out == [("k", 0, 1000, 3, "LATE", 0, False)]
    assert run(e, [("W", 6000)]) == [("k", 0, 1000, 4, "LATE", 1, False)]  # final pane


# ---- triggers and modes --------------------------------------------------------------------------

@pytest.mark.parametrize("mode,expected", [
    ("discarding", [5, 9]),
    ("accumulating", [5, 14]),
    ("accumulating_and_retracting", [5, -5, 14]),
])
def test_apex_trigger_example_in_each_mode(mode, expected):
    trigger = getattr(TriggerOption(), f"{mode}_fired_panes")().with_early_firings_at_every(2)
    e = eng(trigger=trigger)
    out = run(e, [("k", 1, 2), ("k", 2, 3), ("k", 3, 4), ("k", 4, 5)])
    assert [p[3] for p in out] == expected
    assert [p[5] for p in out] == ([0, 1] if len(expected) == 2 else [0, 0, 1])
    assert [p[6] for p in out] == ([False, True, False] if mode.endswith("retracting")
                                   else [False, False])


def test_keyed_retractions_per_key_precede_each_new_pane():
    trigger = TriggerOption.at_watermark().accumulating_and_retracting_fired_panes()
    trigger = trigger.with_early_firings_at_every(2)
    e = eng(trigger=trigger)
    out = run(e, [("a", 1, 2), ("b", 1, 3), ("a", 2, 4), ("b", 2, 5), ("a", 3, 8), ("b", 3, 9),
                  ("W", 1000)])
    assert out == [
        ("a", 0, 1000, 6, "EARLY", 0, False),
        ("b", 0, 1000, 8, "EARLY", 0, False),
        ("a", 0, 1000, -6, "ON_TIME", 0, True), ("a", 0, 1000, 14, "ON_TIME", 1, False),
        ("b", 0, 1000, -8, "ON_TIME", 0, True), ("b", 0, 1000, 17, "ON_TIME", 1, False),
    ]


def test_count_triggers_count_since_the_last_firing_per_key_and_window():
    e = eng(trigger=AT_WM.with_early_firings_at_every(3).with_late_firings_at_every(2),
            lateness=10_000)
    events = [("a", 1, 1), ("a", 2, 1), ("b", 3, 1), ("a", 4, 1), ("a", 1500, 1), ("a", 5, 1),
              ("W", 1000), ("a", 6, 1), ("a", 7, 1), ("a", 8, 1)]
    assert run(e, events) == [
        ("a", 0, 1000, 3, "EARLY", 0, False),
        ("a", 0, 1000, 1, "ON_TIME", 1, False),  # the on-time pane resets the count
        ("b", 0, 1000, 1, "ON_TIME", 0, False),
        ("a", 0, 1000, 2, "LATE", 2, False),
    ]


def test_fire_only_updated_panes_suppresses_unchanged_values_and_their_retractions():
    trigger = (AT_WM.with_early_firings_at_every(2).accumulating_and_retracting_fired_panes()
               .fire_only_updated_panes())
    e = eng(trigger=trigger)
    out = run(e, [("k", 1, 1), ("k", 2, 1), ("W", 1000)])
    assert out == [("k", 0, 1000, 2, "EARLY", 0, False)]  # on-time value unchanged: suppressed
    e = eng(trigger=trigger)
    out = run(e, [("k", 1, 1), ("k", 2, 1), ("k", 3, 5), ("W", 1000)])
    assert out == [("k", 0, 1000, 2, "EARLY", 0, False), ("k", 0, 1000, -2, "ON_TIME", 0, True),
                   ("k", 0, 1000, 7, "ON_TIME", 1, False)]
    e = eng(trigger=AT_WM.with_early_firings_at_every(2).accumulating_fired_panes()
            .fire_only_updated_panes())
    out = run(e, [("k", 1, 1), ("k", 2, -1), ("k", 3, 1), ("k", 4, -1), ("W", 1000)])
    assert out == [("k", 0, 1000, 0, "EARLY", 0, False)]


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


def test_time_triggers_fire_at_batch_ends_per_key_and_window():
    trigger = AT_WM.with_early_firings_at_every(Duration(1000)).accumulating_fired_panes()
    e = eng(trigger=trigger)
    run(e, [("a", 1, 1, 0), ("b", 2, 1, 500)])
    assert run(e, [("B", 999)]) == []
    assert run(e, [("B", 1000)]) == [("a", 0, 1000, 1, "EARLY", 0, False)]
    assert run(e, [("B", 1500)]) == [("b", 0, 1000, 1, "EARLY", 0, False)]
    # accumulating: an unchanged window repeats its pane each period (Apex)
    assert run(e, [("a", 3, 2, 1600), ("B", 2000)]) == [("a", 0, 1000, 3, "EARLY", 1, False)]
    assert run(e, [("B", 2500)]) == [("b", 0, 1000, 1, "EARLY", 1, False)]


def test_time_triggers_in_discarding_mode_emit_nothing_for_an_unchanged_key():
    trigger = (AT_WM.with_early_firings_at_every(Duration(1000))
               .with_late_firings_at_every(Duration(1000)))
    e = eng(trigger=trigger, lateness=10_000)
    assert run(e, [("a", 1, 1, 0), ("B", 1000), ("B", 2000)]) == [
        ("a", 0, 1000, 1, "EARLY", 0, False)]
    out = run(e, [("a", 2, 5, 2100), ("W", 1000, 2100)])
    assert out == [("a", 0, 1000, 5, "ON_TIME", 1, False)]
    assert run(e, [("a", 3, 7, 2200), ("B", 3000)]) == []  # 1000 ms after the on-time pane
    assert run(e, [("B", 3100)]) == [("a", 0, 1000, 7, "LATE", 2, False)]
    assert run(e, [("B", 4100), ("B", 9000)]) == []


def test_end_of_input_fires_final_panes_for_data_no_pane_emitted():
    e = eng(trigger=TriggerOption().with_early_firings_at_every(2))  # no on-time pane
    out = run(e, [("k", 1, 1), ("k", 2, 1), ("k", 3, 5), "END"])
    assert out == [("k", 0, 1000, 2, "EARLY", 0, False), ("k", 0, 1000, 5, "LATE", 1, False)]


# ---- sessions -----------------------------------------------------------------------------------

def sessions_engine(trigger, lateness=None, acc=None):
    return eng(SessionWindows(Duration(30)), acc, trigger, lateness)


def test_sessions_touching_stay_apart_overlapping_merge():
    e = sessions_engine(AT_WM.accumulating_fired_panes())
    run(e, [("k", 0, 1), ("k", 30, 2), ("k", 100, 4), ("k", 129, 8)])
    assert e.sessions["k"] == [(0, 30), (30, 60), (100, 159)]
    assert run(e, ["END"]) == [("k", 0, 30, 1, "ON_TIME", 0, False),
                               ("k", 30, 60, 2, "ON_TIME", 0, False),
                               ("k", 100, 159, 12, "ON_TIME", 0, False)]


def test_session_merge_of_two_retracts_both_and_restarts_the_pane_index():
    trigger = AT_WM.with_early_firings_at_every(1).accumulating_and_retracting_fired_panes()
    e = sessions_engine(trigger)
    out = run(e, [("k", 0, 1), ("k", 50, 2), ("k", 25, 4)])
    assert out == [
        ("k", 0, 30, 1, "EARLY", 0, False),
        ("k", 50, 80, 2, "EARLY", 0, False),
        ("k", 0, 30, -1, "EARLY", 0, True),   # merged away: retracted
        ("k", 50, 80, -2, "EARLY", 0, True),
        ("k", 0, 80, 7, "EARLY", 0, False),  # the merged session: a new window, index 0
    ]
    assert e.sessions["k"] == [(0, 80)]
    assert set(e.windows) == {(0, 80)}
    assert run(e, [("k", 79, 1), ("W", 200)]) == [
        ("k", 0, 80, -7, "EARLY", 0, True),  # extended to [0, 109): retracted again
        ("k", 0, 109, 8, "EARLY", 0, False),
        ("k", 0, 109, -8, "ON_TIME", 0, True), ("k", 0, 109, 8, "ON_TIME", 1, False)]


def test_session_extension_behind_the_watermark_fires_the_merged_window_at_once():
    trigger = AT_WM.accumulating_and_retracting_fired_panes()
    e = sessions_engine(trigger, lateness=1000, acc=accumulations.Count())
    assert run(e, [("u", 0, None), ("u", 10, None), ("W", 40)]) == [
        ("u", 0, 40, 2, "ON_TIME", 0, False)]
    # 35 extends [0, 40) to [0, 65): ahead of the watermark, so it waits for its on-time pane
    assert run(e, [("u", 35, None)]) == [("u", 0, 40, -2, "LATE", 0, True)]
    assert run(e, [("W", 70)]) == [("u", 0, 65, 3, "ON_TIME", 0, False)]
    # 60 extends [0, 65) to [0, 90), already behind watermark 100: fired at once
    run(e, [("W", 100)])
    assert run(e, [("u", 60, None)]) == [("u", 0, 65, -3, "LATE", 0, True),
                                         ("u", 0, 90, 4, "LATE", 0, False)]


def test_sessions_in_discarding_mode_keep_merging():
    e = sessions_engine(AT_WM.with_early_firings_at_every(1))
    out = run(e, [("k", 0, 1), ("k", 20, 2), ("k", 40, 4), "END"])
    assert e.sessions["k"] == [(0, 70)]
    assert out == [("k", 0, 30, 1, "EARLY", 0, False), ("k", 0, 50, 2, "EARLY", 0, False),
                   ("k", 0, 70, 4, "EARLY", 0, False)]


def test_sessions_per_key_and_purge():
    e = sessions_engine(AT_WM, lateness=0, acc=accumulations.ToList())
    out = run(e, [("a", 0, "x"), ("b", 10, "y"), ("a", 29, "z"), ("W", 59)])
    assert out == [("b", 10, 40, ["y"], "ON_TIME", 0, False),
                   ("a", 0, 59, ["x", "z"], "ON_TIME", 0, False)]
    assert e.sessions == {} and e.windows == {}


def test_session_merges_agree_with_a_brute_force_model():
    """Random arrival orders: final sessions equal the connected components of the proto
    sessions under strict overlap, whatever the order."""
    rnd = random.Random(7)
    for _ in range(200):
        stamps = [rnd.randrange(0, 400) for _ in range(rnd.randrange(1, 25))]
        e = sessions_engine(AT_WM, acc=accumulations.ToList())
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
        out = run(e, ["END"])
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


# ---- snapshots -----------------------------------------------------------------------------------

def test_engine_pickles_mid_stream_and_continues_identically():
    trigger = AT_WM.with_early_firings_at_every(2).accumulating_and_retracting_fired_panes()
    events = [("a", 0, 1), ("a", 50, 2), ("b", 10, 1), ("a", 25, 4), ("b", 31, 1), ("W", 60),
              ("a", 70, 3), ("b", 200, 5), "END"]
    full = run(sessions_engine(trigger, lateness=100), events)
    e = sessions_engine(trigger, lateness=100)
    first = run(e, events[:5])
    restored = pickle.loads(pickle.dumps(e))
    assert first + run(restored, events[5:]) == full


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
