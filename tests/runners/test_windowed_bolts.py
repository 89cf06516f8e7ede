"""Windowed bolts on both runners: same windows, same acks, whatever the micro-batch cuts.

Event-time and count windows must give identical results on the local and the Spark runner, also
with one-tuple micro-batches. Processing-time duration windows are checked exactly on the local
runner's simulated clock; on Spark, where time is the micro-batch planning time, only what does not
depend on timing is checked (every tuple in a window, every tuple acked).
"""

from __future__ import annotations

import json

import pytest
from support.bolts import Describe
from support.runs import complete_cached

from squall import (
    Bolt,
    Count,
    Duration,
    Fields,
    InvalidTopologyError,
    Spout,
    TopologyBuilder,
    Values,
    WindowedBolt,
)
from squall.components.windowed import ERROR_STREAM
from squall.runtime.local.engine import LocalEngine
from squall.testing import FixedTupleSpout, complete_topology, current_clock, simulated_time

BASE_CONF = {"topology.message.timeout.secs": 120, "spark.sql.shuffle.partitions": 2}


FORMS = {  # name -> (length, slide) in ms for durations; the same shapes as test_windowing
    "tumbling_duration": (Duration(5000), Duration(5000)),
    "duration_duration": (Duration(10000), Duration(5000)),
    "duration": (Duration(5000), None),
    "duration_count": (Duration(6000), Count(2)),
    "count_count": (Count(3), Count(2)),
    "count": (Count(2), None),
    "count_duration": (Count(3), Duration(5000)),
    "tumbling_count": (Count(3), Count(3)),
}


def _s(a, b):
    return None if a is None else a * 1000, b * 1000


EXPECTED_EVENT_TIME = {
    "tumbling_duration": [(*_s(0, 5), [1, 2, 4, 5], [1, 2, 4, 5], []),
                          (*_s(5, 10), [7, 8], [7, 8], [1, 2, 4, 5]),
                          (*_s(10, 15), [11], [11], [7, 8])],
    "duration_duration": [(*_s(-5, 5), [1, 2, 4, 5], [1, 2, 4, 5], []),
                          (*_s(0, 10), [1, 2, 4, 5, 7, 8], [7, 8], []),
                          (*_s(5, 15), [7, 8, 11], [11], [1, 2, 4, 5]),
                          (*_s(10, 20), [11], [], [7, 8])],
    "duration": [(*_s(-4, 1), [1], [1], []), (*_s(-3, 2), [1, 2], [2], []),
                 (*_s(-1, 4), [1, 2, 4], [4], []), (*_s(0, 5), [1, 2, 4, 5], [5], []),
                 (*_s(2, 7), [4, 5, 7], [7], [1, 2]), (*_s(3, 8), [4, 5, 7, 8], [8], []),
                 (*_s(6, 11), [7, 8, 11], [11], [4, 5])],
    "duration_count": [(*_s(-4, 2), [1, 2], [1, 2], []), (*_s(-1, 5), [1, 2, 4, 5], [4, 5], []),
                       (*_s(2, 8), [4, 5, 7, 8], [7, 8], [1, 2]),
                       (*_s(5, 11), [7, 8, 11], [11], [4, 5])],
    "count_count": [(*_s(None, 2), [1, 2], [1, 2], []), (*_s(None, 5), [2, 4, 5], [4, 5], [1]),
                    (*_s(None, 8), [5, 7, 8], [7, 8], [2, 4]),
                    (*_s(None, 11), [8, 11], [11], [5, 7])],
    "count": [(*_s(None, 1), [1], [1], []), (*_s(None, 2), [1, 2], [2], []),
              (*_s(None, 4), [2, 4], [4], [1]), (*_s(None, 5), [4, 5], [5], [2]),
              (*_s(None, 7), [5, 7], [7], [4]), (*_s(None, 8), [7, 8], [8], [5]),
              (*_s(None, 11), [8, 11], [11], [7])],
    "count_duration": [(*_s(None, 5), [2, 4, 5], [2, 4, 5], [1]),
                       (*_s(None, 10), [5, 7, 8], [7, 8], [2, 4]),
                       (*_s(None, 15), [7, 8, 11], [11], [5])],
    "tumbling_count": [(*_s(None, 4), [1, 2, 4], [1, 2, 4], []),
                       (*_s(None, 8), [5, 7, 8], [5, 7, 8], [1, 2, 4]),
                       (*_s(None, 11), [11], [11], [5, 7, 8])],
}
# "late" arrives after ts 5000 with ts 3000 (lag 0): late. "bad" has no valid timestamp.
EVENTS = [[1, 1000], [2, 2000], [4, 4000], [5, 5000], ["late", 3000], [7, 7000], [8, 8000],
          ["bad", None], [11, 11000]]


def _bolt(form, **kw):
    length, slide = FORMS[form]
    bolt = Describe()
    return bolt.with_window(length, slide) if slide is not None else bolt.with_window(length)


def event_time_topology():
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(EVENTS, Fields("v", "ts")))
    for form in FORMS:
        bolt = _bolt(form).with_timestamp_field("ts")
        if form == "tumbling_duration":
            bolt = bolt.with_late_tuple_stream("late")
        b.set_bolt(f"et_{form}", bolt).shuffle_grouping("events")
    return b.create_topology()


def _cached(request, key, runner, build, conf=None):
    return complete_cached(request, key, runner, build, {**BASE_CONF, **(conf or {})})


def rows(result, component, stream="default"):
    return [tuple(r) for r in result.tuples(component, stream)]


# Spark's one-tuple cut in CI's second run (`extended`); the default run keeps this scenario on
# both runners and the one-tuple cut of a windowed bolt on Spark in
# test_disorder_within_the_watermark_interval_is_not_late.
@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark),
                                    pytest.param("spark-1tuple", marks=[pytest.mark.spark,
                                                                        pytest.mark.extended])],
                         indirect=True)
def test_event_time_forms_late_and_error_streams(request, runner, runner_conf):
    result = _cached(request, ("event-time", json.dumps(runner_conf)), runner,
                     event_time_topology, runner_conf)
    for form, expected in EXPECTED_EVENT_TIME.items():
        assert rows(result, f"et_{form}") == expected, form
    # Side streams are records a sink writes as columns: the tuple's fields, its origin, its
    # event time, the watermark it was judged against and why it left the window.
    fields = ["v", "ts", "source_component", "source_stream", "source_task", "event_time",
              "watermark", "reason"]
    [late] = result.tuples("et_tumbling_duration", "late")
    task = late[4]
    # The watermark lags the largest timestamp (5000) by the watermark interval (1 s).
    assert late == ["late", 3000, "events", "default", task, 3000, 4000, "late"]
    assert task in result.topology.component_tasks("events")
    for form in FORMS:
        [bad] = result.tuples(f"et_{form}", ERROR_STREAM)
        assert bad[:5] == ["bad", None, "events", "default", task] and bad[5] is None
        assert bad[7].startswith("no valid timestamp: ")
        spec = result.topology.components[f"et_{form}"].streams[ERROR_STREAM]
        assert spec.fields.to_list() == fields
    # Every input tuple (late and bad ones too) was acked; none failed.
    assert sorted(result.acked("events")) == list(range(len(EVENTS)))
    assert result.failed("events") == [] and result.errors == []


def test_a_late_stream_set_through_storms_key_is_declared_and_used(runner):
    # Storm's key on the component, not with_late_tuple_stream: before, create_topology passed
    # and the first late tuple failed to emit on an undeclared stream.
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout([[1, 5000], ["late", 3000]], Fields("v", "ts")))
    bolt = Describe().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
    b.set_bolt("w", bolt).shuffle_grouping("events").add_configuration(
        "topology.bolts.late.tuple.stream", "too_late")
    result = complete_topology(b.create_topology(), runner=runner)
    [late] = result.tuples("w", "too_late")
    assert late[:4] == ["late", 3000, "events", "default"] and late[5:] == [3000, 4000, "late"]
    assert sorted(result.acked("events")) == [0, 1] and result.errors == []


def test_a_late_stream_named_only_in_the_topology_configuration_is_refused_at_the_start(
        runner):
    # The key in the run's configuration, not on the component: the bolt declares no such
    # stream. Storm refuses it at prepare; here the runner refuses it before any work, naming
    # the bolt, the stream and the builder method (it was a bare KeyError in the task).
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout([[1, 5000]], Fields("v", "ts")))
    bolt = Describe().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
    b.set_bolt("w", bolt).shuffle_grouping("events")
    with pytest.raises(InvalidTopologyError) as caught:
        complete_topology(b.create_topology(), {"topology.bolts.late.tuple.stream": "late"},
                          runner=runner)
    message = str(caught.value)
    assert "windowed bolt 'w'" in message and "'late'" in message, message
    assert "with_late_tuple_stream('late')" in message, message


@pytest.mark.runners("local", "spark", "spark-1tuple")
@pytest.mark.parametrize("interval_ms, late", [(None, []), (0, ["b"])])
def test_disorder_within_the_watermark_interval_is_not_late(runner, runner_conf, interval_ms,
                                                             late):
    # Storm judges lateness against the watermark emitted every interval (1 s by default), so
    # a tuple a few hundred ms out of order is not late with the default lag of 0; squall's
    # per-tuple watermark lags by the interval for the same tolerance, whatever the batch cuts.
    # An interval of 0 (a watermark with every tuple) keeps the strict rule.
    rows_ = [["a", 1000], ["c", 2000], ["b", 1500], ["d", 2600], ["e", 9000]]
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(rows_, Fields("v", "ts")))
    bolt = (Describe().with_tumbling_window(Duration.seconds(2)).with_timestamp_field("ts")
            .with_late_tuple_stream("late"))
    if interval_ms is not None:
        bolt = bolt.with_watermark_interval(Duration(interval_ms))
    b.set_bolt("w", bolt).shuffle_grouping("events")
    result = complete_topology(b.create_topology(), runner_conf, runner=runner)
    assert [r[0] for r in result.tuples("w", "late")] == late
    windowed = sorted(v for *_, new, _x in rows(result, "w") for v in new)
    assert windowed == sorted({"a", "b", "c", "d", "e"} - set(late))


@pytest.mark.runners("local", "spark", "spark-1tuple")
def test_a_tuple_not_late_behind_the_next_aligned_end_is_in_its_windows(runner, runner_conf):
    # Lag 30 s, a watermark with every tuple. Sliding (20 s every 10 s): "b" (200 s) closes
    # a's windows and finds only itself after them; "c" (175 s) is not late (watermark 170 s)
    # and belongs to the windows ending 180 s and 190 s, which b's aligned end had skipped
    # (c was acked without ever being in a window). Tumbling (10 s): "y" (75 s) is not late
    # (watermark 70 s) and sorts before the first tuple's aligned end (100 s). The windows are
    # Storm's: its trigger jumps only to events at or below the watermark.
    b = TopologyBuilder()
    b.set_spout("sliding_in", FixedTupleSpout([["a", 100_000], ["b", 200_000], ["c", 175_000]],
                                              Fields("v", "ts")))
    b.set_spout("tumbling_in", FixedTupleSpout([["x", 100_000], ["y", 75_000], ["z", 200_000]],
                                               Fields("v", "ts")))
    for name, length, slide in [("sliding", 20, 10), ("tumbling", 10, 10)]:
        bolt = (Describe().with_window(Duration.seconds(length), Duration.seconds(slide))
                .with_timestamp_field("ts").with_lag(Duration.seconds(30))
                .with_watermark_interval(Duration(0)).with_late_tuple_stream("late"))
        b.set_bolt(name, bolt).shuffle_grouping(f"{name}_in")
    result = complete_topology(b.create_topology(), {**BASE_CONF, **runner_conf}, runner=runner)
    assert [(end // 1000, values) for _s, end, values, _n, _x in rows(result, "sliding")] == [
        (100, ["a"]), (110, ["a"]), (180, ["c"]), (190, ["c"]), (200, ["b"]), (210, ["b"])]
    assert [(end // 1000, values) for _s, end, values, _n, _x in rows(result, "tumbling")] == [
        (80, ["y"]), (100, ["x"]), (200, ["z"])]
    assert result.tuples("sliding", "late") == result.tuples("tumbling", "late") == []
    assert sorted(result.acked("sliding_in")) == sorted(result.acked("tumbling_in")) == [0, 1, 2]
    assert result.errors == []


# ---- processing-time count windows, several input streams, out of order within the lag -------

class Sum(WindowedBolt):
    def execute(self, window):
        self.collector.emit(Values(sum(t["v"] for t in window.get())))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("sum"))


class FailSum(Bolt):
    """Fails the tuples whose sum is 15 (the second window), acks the rest."""

    def execute(self, tup):
        if tup["sum"] == 15:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def mixed_topology():
    b = TopologyBuilder()
    b.set_spout("plain", FixedTupleSpout([[v] for v in [1, 2, 4, 5, 7, 8, 11]], Fields("v")))
    for form in ("count_count", "count", "tumbling_count"):
        b.set_bolt(f"pt_{form}", _bolt(form)).shuffle_grouping("plain")
    # Two input streams: the watermark is the smaller of their latest timestamps.
    b.set_spout("left", FixedTupleSpout([["l1", 1000], ["l4", 4000], ["l12", 12000],
                                         ["l21", 21000]], Fields("v", "ts")))
    b.set_spout("right", FixedTupleSpout([["r2", 2000], ["r11", 11000], ["r13", 13000],
                                          ["r22", 22000]], Fields("v", "ts")))
    (b.set_bolt("two_streams", Describe().with_tumbling_window(Duration.seconds(10))
                .with_timestamp_field("ts"))
     .shuffle_grouping("left").shuffle_grouping("right"))
    # Out of order, but within the lag: same windows as in order.
    b.set_spout("shuffled", FixedTupleSpout([[v, v * 1000] for v in [5, 2, 11, 1, 8, 4, 7]],
                                            Fields("v", "ts")))
    b.set_bolt("out_of_order", Describe().with_tumbling_window(Duration.seconds(5))
               .with_timestamp_field("ts").with_lag(Duration.seconds(10))
               ).shuffle_grouping("shuffled")
    # A processing-time duration window: exact results only on the local runner.
    b.set_bolt("pt_sliding", Describe().with_window(Duration.seconds(2), Duration.seconds(1))
               ).shuffle_grouping("plain")
    return b.create_topology()


def test_processing_time_count_windows(request, runner):
    result = _cached(request, "mixed", runner, mixed_topology)
    for form in ("count_count", "count", "tumbling_count"):
        expected = [(None, v, items, new, exp)
                    for _s0, _e, items, new, exp in EXPECTED_EVENT_TIME[form]
                    for v in [None]]
        got = [(s, None, items, new, exp) for s, _end, items, new, exp in rows(result,
                                                                               f"pt_{form}")]
        assert got == [(s, None, i, n, x) for s, _v, i, n, x in expected], form
    assert sorted(result.acked("plain")) == list(range(7))


def test_watermark_is_the_minimum_over_input_streams(request, runner):
    result = _cached(request, "mixed", runner, mixed_topology)
    assert rows(result, "two_streams") == [
        (0, 10000, ["l1", "r2", "l4"], ["l1", "r2", "l4"], []),
        (10000, 20000, ["r11", "l12", "r13"], ["r11", "l12", "r13"], ["l1", "r2", "l4"]),
        (20000, 30000, ["l21", "r22"], ["l21", "r22"], ["r11", "l12", "r13"]),
    ]
    assert rows(result, "two_streams", "window_errors") == []


def test_out_of_order_tuples_within_the_lag_are_not_late(request, runner):
    result = _cached(request, "mixed", runner, mixed_topology)
    assert rows(result, "out_of_order") == EXPECTED_EVENT_TIME["tumbling_duration"]


def failing_topology():
    # Anchoring: a failed downstream tuple fails the spout trees of its window's tuples.
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout([[v] for v in range(1, 7)], Fields("v")))
    b.set_bolt("sum", Sum().with_tumbling_window(Count(3))).shuffle_grouping("nums")
    b.set_bolt("fail15", FailSum()).shuffle_grouping("sum")
    return b.create_topology()


def test_window_emits_are_anchored_to_the_window_and_inputs_acked_when_they_leave(
        request, runner):
    result = _cached(request, "failing", runner, failing_topology)
    assert result.tuples("sum") == [[6], [15]]
    # The second window's emit failed downstream: its three inputs' trees failed.
    assert sorted(result.acked("nums")) == [0, 1, 2]
    assert sorted(result.failed("nums")) == [3, 4, 5]


def test_processing_time_duration_window_covers_every_tuple(request, runner):
    result = _cached(request, "mixed", runner, mixed_topology)
    windows = rows(result, "pt_sliding")
    seen = [v for _s, _e, _items, new, _x in windows for v in new]
    assert sorted(seen) == [1, 2, 4, 5, 7, 8, 11]  # each tuple new in exactly one window
    for start, end, items, _new, _exp in windows:
        assert end - start == 2000 and items


# ---- processing time on the simulated clock (local runner) -----------------------------------

class TimedSpout(Spout):
    """Emits each (at_ms, values) once the simulated clock reaches at_ms (tests only)."""

    def __init__(self, rows):
        self.rows = list(rows)

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked: list[int] = []

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def next_tuple(self):
        if self.i < len(self.rows) and current_clock().now_ms() >= self.rows[self.i][0]:
            self.collector.emit(self.rows[self.i][1], msg_id=self.i)
            self.i += 1

    def is_exhausted(self):
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("v"))


TIMED = [(0, ["a"]), (0, ["b"]), (1200, ["c"]), (1500, ["d"]), (3300, ["e"])]


@pytest.mark.parametrize("form,expected", [
    # Fired by the timer every second at reference (firing - 1 ms); "e" is never reached by a
    # timer firing before input ends, so it gets the last window at end of input (3300).
    ("tumbling_duration_1s", [(-1, 999, ["a", "b"], ["a", "b"], []),
                              (999, 1999, ["c", "d"], ["c", "d"], ["a", "b"]),
                              (2300, 3300, ["e"], ["e"], ["c", "d"])]),
    ("duration_duration", [(-1001, 999, ["a", "b"], ["a", "b"], []),
                           (-1, 1999, ["a", "b", "c", "d"], ["c", "d"], []),
                           (999, 2999, ["c", "d"], [], ["a", "b"]),
                           (1300, 3300, ["d", "e"], ["e"], ["c"])]),
    # Fired by every second tuple, at its arrival time; the odd one out at end of input.
    ("duration_count", [(-4000, 0, ["a", "b"], ["a", "b"], []),
                        (-2500, 1500, ["a", "b", "c", "d"], ["c", "d"], []),
                        (-700, 3300, ["a", "b", "c", "d", "e"], ["e"], [])]),
    ("count_duration", [(None, 999, ["a", "b"], ["a", "b"], []),
                        (None, 1999, ["b", "c", "d"], ["c", "d"], ["a"]),
                        (None, 2999, ["b", "c", "d"], [], []),
                        (None, 3300, ["c", "d", "e"], ["e"], ["b"])]),
])
def test_processing_time_duration_forms_on_the_simulated_clock(form, expected):
    windows_of = {
        "tumbling_duration_1s": lambda b: b.with_tumbling_window(Duration.seconds(1)),
        "duration_duration": lambda b: b.with_window(Duration.seconds(2), Duration.seconds(1)),
        "duration_count": lambda b: b.with_window(Duration.seconds(4), Count(2)),
        "count_duration": lambda b: b.with_window(Count(3), Duration.seconds(1)),
    }
    b = TopologyBuilder()
    b.set_spout("timed", TimedSpout(TIMED))
    b.set_bolt("w", windows_of[form](Describe())).shuffle_grouping("timed")
    with simulated_time():
        result = complete_topology(b.create_topology(), {"squall.local.batch.ms": 100})
    assert rows(result, "w") == expected
    assert sorted(result.acked("timed")) == list(range(len(TIMED)))


@pytest.mark.parametrize("window, length", [
    (lambda b: b.with_tumbling_window(Duration.seconds(10)), 10_000),
    (lambda b: b.with_window(Duration.seconds(10), Duration.seconds(4)), 10_000),
])
def test_late_timer_firings_leave_no_gap_between_processing_time_windows(window, length):
    # Tuples far apart, so the timer's firings are noticed late. Windows
    # follow one fixed schedule from the timer's start (Storm's fixed-rate TimeTriggerPolicy):
    # they tile the time line, and every tuple is in a window.
    timed = [(1000, ["a"]), (9999, ["b"]), (25_000, ["c"]), (60_000, ["d"])]
    b = TopologyBuilder()
    b.set_spout("timed", TimedSpout(timed))
    b.set_bolt("w", window(Describe())).shuffle_grouping("timed")
    with simulated_time():
        result = complete_topology(b.create_topology(), {"squall.local.batch.ms": 100,
                                                         "topology.message.timeout.secs": 60})
    windows = rows(result, "w")
    assert sorted(v for *_, new, _x in windows for v in new) == ["a", "b", "c", "d"]
    for start, end, *_ in windows:
        assert end - start == length
    # Before the end of input, every window's end is on the timer's grid.
    grid = [end + 1 for _s, end, *_ in windows[:-1]]
    slide = grid[1] - grid[0] if len(grid) > 1 else None
    assert slide is None or all((g - grid[0]) % slide == 0 for g in grid)
    assert sorted(result.acked("timed")) == [0, 1, 2, 3]


# ---- validation and counters -------------------------------------------------------------------

def _one_bolt(bolt, conf=None):
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[1, 1]], Fields("v", "ts")))
    b.set_bolt("win", bolt).shuffle_grouping("s")
    return b.create_topology()


def test_limits_are_checked_against_message_timeout_and_max_spout_pending():
    long = _one_bolt(Describe().with_window(Duration.seconds(40), Duration.seconds(10)))
    with pytest.raises(InvalidTopologyError, match=r"'win'.*50000 ms.*message.timeout"):
        LocalEngine(long, {"topology.message.timeout.secs": 45})
    LocalEngine(long, {"topology.message.timeout.secs": 50})  # equality is allowed
    LocalEngine(long, {"topology.enable.message.timeouts": False})
    counts = _one_bolt(Describe().with_window(Count(30), Count(10)))
    with pytest.raises(InvalidTopologyError, match=r"'win'.*40 tuples.*max.spout.pending"):
        LocalEngine(counts, {"topology.max.spout.pending": 39})
    LocalEngine(counts, {"topology.max.spout.pending": 40})
    one = _one_bolt(Describe().with_window(Count(30), Duration.seconds(40)))
    with pytest.raises(InvalidTopologyError, match="sliding interval"):
        LocalEngine(one, {"topology.message.timeout.secs": 30})


def test_build_time_checks_name_the_component():
    with pytest.raises(InvalidTopologyError, match="window length is not specified") as info:
        _one_bolt(Describe())
    assert info.value.component == "win"
    with pytest.raises(InvalidTopologyError, match="late tuple stream"):
        _one_bolt(Describe().with_window(Count(2)).with_late_tuple_stream("late"))


def test_late_and_invalid_tuples_are_counted(runner):
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(EVENTS, Fields("v", "ts")))
    b.set_bolt("w", Describe().with_tumbling_window(Duration.seconds(5))
               .with_timestamp_extractor(lambda t: t["ts"])).shuffle_grouping("events")
    if runner == "local":
        with simulated_time() as clock:
            engine = LocalEngine(b.create_topology(), clock=clock, capture=True)
            engine.run()
        task = engine.bolts[0]
        emitted = [v for s, v in engine.captures[task.task_id] if s == "default"]
    else:
        from squall.runtime.spark.driver import SparkRunner

        spark = SparkRunner(b.create_topology(), BASE_CONF, capture=True)
        spark.run(until_complete=True, duration_ms=120_000)
        assert spark.completed
        (task,) = [t for t in spark.restored_bolts() if t.component_id == "w"]
        emitted = [v for _at, s, v in sorted(spark.captures[task.task_id]) if s == "default"]
    # Without a late-tuple stream the late tuple is counted (and logged), not lost silently.
    # The window is the framework's (the task's role adapter); the bolt reads its counter.
    bolt = task.instance
    assert task.window.manager.late_count == 1 and bolt.window_errors == 1
    assert emitted == [list(w) for w in EXPECTED_EVENT_TIME["tumbling_duration"]]


def test_the_per_origin_cache_stays_bounded_when_origins_are_new_every_batch():
    """A Spark stage makes new tuple origins for every batch while a windowed task lives on in
    its worker; the window's per-origin entries (how it reads the timestamp) must not pile up,
    and every tuple still lands in its window."""
    from squall.task.roles.windowed import _MAX_ENTRIES
    from squall.topology.tuple import Origin, _RuntimeTuple

    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout([], Fields("v", "ts")))
    b.set_bolt("w", Describe().with_tumbling_window(Duration.seconds(5))
               .with_timestamp_field("ts")).shuffle_grouping("events")
    with simulated_time() as clock:
        engine = LocalEngine(b.create_topology(), clock=clock, capture=True)
        engine.start()  # prepares the bolt: its window
        (task,) = engine.bolts
        (src,) = engine.topology.component_tasks("events")
        role = task.window
        n = 3 * _MAX_ENTRIES
        for i in range(n):  # each tuple with an origin of its own, as across many batches
            origin = Origin(Fields("v", "ts"), "events", "default", src)
            role.execute(_RuntimeTuple([i, i], origin, None, task.task_id), 0)
            assert len(role._entries) <= _MAX_ENTRIES
        role.end_of_input(0)
    rows = [v for s, v in engine.captures[task.task_id] if s == "default"]
    windows: dict[int, list[int]] = {}  # Storm's (end - 5 s, end]: 0, then 1-5000, ...
    for i in range(n):
        windows.setdefault(-(-i // 5000) * 5000, []).append(i)
    assert [r[2] for r in rows] == list(windows.values())
