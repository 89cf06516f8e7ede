"""The pure window core (`squall.tuple_windows`): time is injected, so every case is exact."""

from __future__ import annotations

import pickle

import pytest

from squall import Count, Duration
from squall.tuple_windows import Activation, Expired, Late, WindowManager, WindowSpec

S = ("spout", "default")


def windows(actions):
    """(start, end, items, new, expired) of each activation, in order."""
    return [(a.window.start_timestamp, a.window.end_timestamp, a.window.get(),
             a.window.get_new(), a.window.get_expired())
            for a in actions if isinstance(a, Activation)]


def expired(actions):
    return [e for a in actions if isinstance(a, Expired) for e in a.events]


# ---- Storm's worked example (docs/Windowing.md "Watermarks"; WindowManagerTest) -------------

T6 = 6 * 3_600_000  # 06:00:00 in ms
T8 = 8 * 3_600_000


def at(base: int, sec: int) -> int:
    return base + sec * 1000


FIRST = [("e1", at(T6, 3)), ("e2", at(T6, 5)), ("e3", at(T6, 7)), ("e4", at(T6, 18)),
         ("e5", at(T6, 26)), ("e6", at(T6, 36))]
SECOND = [("e7", at(T8, 25)), ("e8", at(T8, 26)), ("e9", at(T8, 27)), ("e10", at(T8, 39))]


def worked_manager(interval_ms: int = 1000) -> WindowManager:
    spec = WindowSpec(Duration.seconds(20), Duration.seconds(10), event_time=True,
                      lag_ms=5000, watermark_interval_ms=interval_ms)
    return WindowManager(spec, streams=[S])


def test_storm_worked_example_two_watermarks_six_windows():
    m = worked_manager()
    for name, ts in FIRST:
        assert m.add(name, now_ms=0, ts=ts, stream=S) == []  # no watermark evaluated yet
    w1 = m.tick(now_ms=1000)
    assert m.watermark == at(T6, 31)
    assert windows(w1) == [
        (at(T6, -10), at(T6, 10), ["e1", "e2", "e3"], ["e1", "e2", "e3"], []),
        (at(T6, 0), at(T6, 20), ["e1", "e2", "e3", "e4"], ["e4"], []),
        (at(T6, 10), at(T6, 30), ["e4", "e5"], ["e5"], ["e1", "e2", "e3"]),
    ]
    for name, ts in SECOND:
        assert m.add(name, now_ms=1500, ts=ts, stream=S) == []
    w2 = m.tick(now_ms=2000)
    assert m.watermark == at(T8, 34)
    assert windows(w2) == [
        (at(T6, 20), at(T6, 40), ["e5", "e6"], ["e6"], ["e4"]),
        (at(T6, 30), at(T6, 50), ["e6"], [], ["e5"]),
        # 06:01:00 is empty: e6 expires there (acked), then the trigger jumps to the aligned end
        # of e7. Unlike Storm, e6 is not lost from get_expired() (architecture.md).
        (at(T8, 10), at(T8, 30), ["e7", "e8", "e9"], ["e7", "e8", "e9"], ["e6"]),
    ]
    assert expired(w2) == ["e4", "e5", "e6"]  # each acked as it leaves, in order
    # e7..e9 stay for the next window; e10, beyond the watermark, waits for a later one.
    assert m.events == ["e7", "e8", "e9", "e10"]


def test_worked_example_windows_do_not_depend_on_when_watermarks_are_evaluated():
    eager = worked_manager(interval_ms=0)  # evaluated on every tuple
    out = []
    for name, ts in FIRST + SECOND:
        out += eager.add(name, now_ms=0, ts=ts, stream=S)
    lazy = worked_manager()
    for name, ts in FIRST + SECOND:
        lazy.add(name, now_ms=0, ts=ts, stream=S)
    assert windows(out) == windows(lazy.tick(now_ms=1000))
    assert len(windows(out)) == 6
    # End of input: the watermark goes to infinity and the rest fires, then all is acked.
    rest = eager.end_of_input(now_ms=5)
    assert windows(rest) == [
        (at(T8, 20), at(T8, 40), ["e7", "e8", "e9", "e10"], ["e10"], []),
        (at(T8, 30), at(T8, 50), ["e10"], [], ["e7", "e8", "e9"]),
    ]
    assert expired(rest) == ["e7", "e8", "e9", "e10"] and eager.events == []


# ---- the eight forms, event time ----------------------------------------------------------

TS = [1, 2, 4, 5, 7, 8, 11]


def run_event_time(length, slide, final=True):
    m = WindowManager(WindowSpec(length, slide, event_time=True, watermark_interval_ms=0),
                      streams=[S])
    out = []
    for ts in TS:
        out += m.add(ts, now_ms=0, ts=ts, stream=S)
    if final:
        out += m.end_of_input(now_ms=0)
    return out


EVENT_TIME_FORMS = {
    "tumbling duration": (Duration(5), Duration(5), [
        (0, 5, [1, 2, 4, 5], [1, 2, 4, 5], []),
        (5, 10, [7, 8], [7, 8], [1, 2, 4, 5]),
        (10, 15, [11], [11], [7, 8])]),
    "duration, duration": (Duration(10), Duration(5), [
        (-5, 5, [1, 2, 4, 5], [1, 2, 4, 5], []),
        (0, 10, [1, 2, 4, 5, 7, 8], [7, 8], []),
        (5, 15, [7, 8, 11], [11], [1, 2, 4, 5]),
        (10, 20, [11], [], [7, 8])]),
    "duration": (Duration(5), None, [
        (-4, 1, [1], [1], []), (-3, 2, [1, 2], [2], []), (-1, 4, [1, 2, 4], [4], []),
        (0, 5, [1, 2, 4, 5], [5], []), (2, 7, [4, 5, 7], [7], [1, 2]),
        (3, 8, [4, 5, 7, 8], [8], []), (6, 11, [7, 8, 11], [11], [4, 5])]),
    "duration, count": (Duration(6), Count(2), [
        (-4, 2, [1, 2], [1, 2], []), (-1, 5, [1, 2, 4, 5], [4, 5], []),
        (2, 8, [4, 5, 7, 8], [7, 8], [1, 2]),
        (5, 11, [7, 8, 11], [11], [4, 5])]),  # the partial window at end of input
    "count, count": (Count(3), Count(2), [
        (None, 2, [1, 2], [1, 2], []), (None, 5, [2, 4, 5], [4, 5], [1]),
        (None, 8, [5, 7, 8], [7, 8], [2, 4]),
        (None, 11, [8, 11], [11], [5, 7])]),  # partial: the next window, less one tuple
    "count": (Count(2), None, [
        (None, 1, [1], [1], []), (None, 2, [1, 2], [2], []), (None, 4, [2, 4], [4], [1]),
        (None, 5, [4, 5], [5], [2]), (None, 7, [5, 7], [7], [4]), (None, 8, [7, 8], [8], [5]),
        (None, 11, [8, 11], [11], [7])]),
    "count, duration": (Count(3), Duration(5), [
        (None, 5, [2, 4, 5], [2, 4, 5], [1]), (None, 10, [5, 7, 8], [7, 8], [2, 4]),
        (None, 15, [7, 8, 11], [11], [5])]),
    "tumbling count": (Count(3), Count(3), [
        (None, 4, [1, 2, 4], [1, 2, 4], []), (None, 8, [5, 7, 8], [5, 7, 8], [1, 2, 4]),
        (None, 11, [11], [11], [5, 7, 8])]),  # the left-over tuple alone
}


@pytest.mark.parametrize("form", EVENT_TIME_FORMS)
def test_each_form_in_event_time(form):
    length, slide, expected = EVENT_TIME_FORMS[form]
    out = run_event_time(length, slide if slide is not None else Count(1))
    assert windows(out) == expected
    assert sorted(expired(out)) == TS  # every tuple leaves (is acked) exactly once


@pytest.mark.parametrize("form", EVENT_TIME_FORMS)
def test_event_time_results_do_not_depend_on_arrival_order_within_the_lag(form):
    length, slide, expected = EVENT_TIME_FORMS[form]
    m = WindowManager(WindowSpec(length, slide or Count(1), event_time=True, lag_ms=100,
                                 watermark_interval_ms=0), streams=[S])
    out = []
    for ts in [5, 2, 11, 1, 8, 4, 7]:  # shuffled, all within the lag
        out += m.add(ts, now_ms=0, ts=ts, stream=S)
    out += m.end_of_input(now_ms=0)
    assert windows(out) == expected


def test_processing_time_count_forms_match_their_event_time_counterparts():
    # Arrival order is timestamp order here, so count windows are the same in both domains.
    for form in ("count, count", "count", "tumbling count"):
        length, slide, expected = EVENT_TIME_FORMS[form]
        m = WindowManager(WindowSpec(length, slide or Count(1)))
        out = []
        for ts in TS:
            out += m.add(ts, now_ms=ts)
        out += m.end_of_input(now_ms=20)
        assert [(w[0], w[2], w[3], w[4]) for w in windows(out)] == [
            (w[0], w[2], w[3], w[4]) for w in expected], form


def test_processing_time_duration_windows_fire_on_the_timer():
    m = WindowManager(WindowSpec(Duration(10), Duration(5)))
    out = []
    out += m.add("a", now_ms=0)  # starts the timer: first firing at 5
    out += m.add("b", now_ms=3)
    out += m.tick(now_ms=5)  # reference 4: (-6, 4]
    out += m.add("c", now_ms=5)  # arrives in the firing's ms: next window
    out += m.add("d", now_ms=9)
    out += m.tick(now_ms=10)  # reference 9: (-1, 9]
    out += m.tick(now_ms=15)  # reference 14: (4, 14]; a, b expired
    out += m.tick(now_ms=20)  # reference 19: (9, 19] is empty: no activation, c, d acked
    assert [(w[0], w[1], w[2], w[3], w[4]) for w in windows(out)] == [
        (-6, 4, ["a", "b"], ["a", "b"], []),
        (-1, 9, ["a", "b", "c", "d"], ["c", "d"], []),
        (4, 14, ["c", "d"], [], ["a", "b"]),
    ]
    assert expired(out) == ["a", "b", "c", "d"]
    assert m.end_of_input(now_ms=21) == []  # nothing left that was never in a window


def test_processing_time_events_never_windowed_get_a_last_window_at_end_of_input():
    m = WindowManager(WindowSpec(Duration(10), Duration(10)))
    m.add("a", now_ms=0)
    m.tick(now_ms=10)
    m.add("b", now_ms=12)
    out = m.end_of_input(now_ms=13)
    assert windows(out) == [(3, 13, ["b"], ["b"], ["a"])]


def test_late_tuples_are_reported_and_join_no_window():
    m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True, lag_ms=2,
                                 watermark_interval_ms=0), streams=[S])
    assert m.add("a", 0, ts=100, stream=S) == []
    assert m.add("b", 0, ts=98, stream=S) == []  # within the lag: watermark is 98
    late = m.add("c", 0, ts=97, stream=S)
    assert len(late) == 1 and isinstance(late[0], Late)
    assert (late[0].event, late[0].ts, late[0].watermark) == ("c", 97, 98)
    assert m.late_count == 1
    assert m.events == ["b", "a"]  # sorted by timestamp


def test_watermark_is_the_minimum_over_input_streams():
    a, b = ("a", "default"), ("b", "default")
    m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True,
                                 watermark_interval_ms=0), streams=[a, b])
    out = m.add("a1", 0, ts=5, stream=a) + m.add("a2", 0, ts=25, stream=a)
    assert m.watermark is None and windows(out) == []  # stream b has not spoken yet
    out = m.add("b1", 0, ts=12, stream=b)
    assert m.watermark == 12
    assert windows(out) == [(0, 10, ["a1"], ["a1"], [])]
    assert m.add("b-late", 0, ts=11, stream=b)[0].event == "b-late"
    out = m.add("b2", 0, ts=30, stream=b)
    assert m.watermark == 25
    assert windows(out) == [(10, 20, ["b1"], ["b1"], ["a1"])]


def test_state_survives_pickling_mid_stream():
    spec = WindowSpec(Duration(10), Duration(5), event_time=True, watermark_interval_ms=0)
    whole = WindowManager(spec, streams=[S])
    out_whole = []
    for ts in TS:
        out_whole += whole.add(ts, 0, ts=ts, stream=S)
    out_whole += whole.end_of_input(0)
    m = WindowManager(spec, streams=[S])
    out = []
    for ts in TS:
        out += m.add(ts, 0, ts=ts, stream=S)
        m = pickle.loads(pickle.dumps(m))  # as the Spark runner snapshots after every batch
    out += m.end_of_input(0)
    assert windows(out) == windows(out_whole)
