"""Windowed operators (squall.windows) as bolts, on both runners: identical results, also with
one-tuple micro-batches and with input reordered within the watermark delay.

One rich topology per concern, run once per runner and cut (`_cached`), several tests reading it.
The expected panes of the hand-traced operators are exact; the others are compared across runners
and cuts. Panes are (key, window_start, window_end, value, timing, pane_index, is_retraction).
"""

from __future__ import annotations

import json
import logging
import random

import pytest
from support.runs import ONE_TUPLE, RUN_CACHE, complete_cached

from squall import Duration, Fields, Spout, TopologyBuilder
from squall.testing import FixedTupleSpout, complete_topology
from squall.windows import (
    MAX_TIMESTAMP,
    WATERMARK_STREAM,
    AccumulationMode,
    AfterCount,
    AfterWatermark,
    GlobalWindow,
    KeyedWindowedOperator,
    LatenessRule,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    WindowedMergeOperator,
    WindowedOperator,
    accumulations,
)

BASE_CONF = {"topology.message.timeout.secs": 120, "spark.sql.shuffle.partitions": 2}
AT_WM = TriggerOption.at_watermark()
FIELDS = Fields("user", "amount", "ts")

# Traced by hand below (watermark delay 500 ms): 7 arrives late but within the lateness of the
# fixed operator, 9 is beyond it (dropped), 5 extends nothing (touching session), 7 and 9 merge
# sessions.
EVENTS = [["a", 1, 100], ["b", 2, 300], ["a", 3, 700], ["a", 4, 1200], ["b", 5, 600],
          ["a", 6, 1600], ["a", 7, 900], ["b", 8, 2600], ["a", 9, 50], ["a", 10, 3700],
          ["b", 11, 3100]]


def _jittered() -> tuple[list[list], list[list]]:
    """Events with ts rising by 100 plus jitter, and the same events reordered within 400 ms."""
    rnd = random.Random(11)
    events = [[f"u{rnd.randrange(3)}", rnd.randrange(1, 20), i * 100 + rnd.randrange(150)]
              for i in range(24)]
    shuffled = list(events)
    for i in range(len(shuffled) - 1):
        if abs(shuffled[i + 1][2] - shuffled[i][2]) < 400 and rnd.random() < 0.6:
            shuffled[i], shuffled[i + 1] = shuffled[i + 1], shuffled[i]
    assert shuffled != events
    return events, shuffled


def keyed(**kw):
    kw.setdefault("timestamp_field", "ts")
    kw.setdefault("key_field", "user")
    kw.setdefault("value_field", "amount")
    kw.setdefault("watermark_delay", Duration(500))
    return KeyedWindowedOperator(**kw)


def operators_topology(reordering=True):
    """`reordering`: with the two spouts of jittered events and their operators (48 tuples
    more: with one tuple per Spark micro-batch, most of the run)."""
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(EVENTS, FIELDS))
    b.set_bolt("fixed", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_early_firings_at_every(2).with_late_firings_at_every(1)
        .accumulating_fired_panes(),
        allowed_lateness=Duration.seconds(2), late_stream="late",
    )).fields_grouping("events", Fields("user"))
    b.set_bolt("sessions", keyed(
        window=SessionWindows(Duration(300)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_early_firings_at_every(1).accumulating_and_retracting_fired_panes()
        .fire_only_updated_panes(),
        allowed_lateness=Duration.seconds(5),
    )).fields_grouping("events", Fields("user"))
    b.set_bolt("discarding", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_late_firings_at_every(1), allowed_lateness=Duration.seconds(2),
    )).fields_grouping("events", Fields("user"))
    # Window propagation: the windows of the upstream panes, the upstream's watermark.
    b.set_bolt("per_window", WindowedOperator(
        accumulation=accumulations.Sum(), value_field="value",
        trigger=AT_WM.with_late_firings_at_every(1).accumulating_fired_panes(),
    )).shuffle_grouping("discarding")
    b.set_bolt("sliding", keyed(
        window=TimeWindows(Duration.seconds(2)).slide_by(Duration.seconds(1)),
        accumulation=accumulations.Count(), trigger=AT_WM, allowed_lateness=Duration(0),
    ), 2).fields_grouping("events", Fields("user"))
    b.set_bolt("global", WindowedOperator(
        window=GlobalWindow(), accumulation=accumulations.ToList(), value_field="amount",
        trigger=AT_WM.with_early_firings_at_every(5),
    )).shuffle_grouping("events")
    b.set_bolt("top", keyed(
        window=TimeWindows(Duration.seconds(2)), accumulation=accumulations.Max(),
        trigger=AT_WM.with_early_firings_at_every(1).accumulating_fired_panes()
        .fire_only_updated_panes(), allowed_lateness=Duration.seconds(10),
    )).fields_grouping("events", Fields("user"))
    # Time triggers: which early panes fire depends on batch boundaries, but discarding panes
    # always add up to the window's total.
    b.set_bolt("timed", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_early_firings_at_every(Duration(1)), allowed_lateness=None,
    ), 2).fields_grouping("events", Fields("user"))
    events, shuffled = _jittered()
    for name, data in (("ordered", events), ("reordered", shuffled)) if reordering else ():
        b.set_spout(name, FixedTupleSpout(data, FIELDS))
        b.set_bolt(f"{name}_fixed", keyed(
            window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
            trigger=AT_WM, allowed_lateness=Duration(0),
        )).fields_grouping(name, Fields("user"))
        b.set_bolt(f"{name}_sliding", keyed(
            window=TimeWindows(Duration.seconds(1)).slide_by(Duration(250)),
            accumulation=accumulations.ToSet(), trigger=AT_WM.accumulating_fired_panes(),
            allowed_lateness=Duration(0), value_field="ts",
        ), 2).fields_grouping(name, Fields("user"))
        b.set_bolt(f"{name}_sessions", keyed(
            window=SessionWindows(Duration(120)), accumulation=accumulations.Count(),
            trigger=AT_WM.accumulating_and_retracting_fired_panes(),
            allowed_lateness=Duration(0),
        )).fields_grouping(name, Fields("user"))
    return b.create_topology()


def _cached(request, key, runner, build, conf=None):
    return complete_cached(request, key, runner, build, {**BASE_CONF, **(conf or {})})


def panes(result, component, stream="default"):
    return [tuple(r) for r in result.tuples(component, stream)]


# Each runner as it is and given the one-tuple conf (on Spark: one tuple per micro-batch). The
# Spark one-tuple cut runs in CI's second run (`extended`); the default run keeps Spark's
# one-tuple cut of windowed operators in the merge operator's tests below and, with Beam's
# triggers, in test_beam_triggers.py.
operator_runners = pytest.mark.parametrize("runner", [
    "local", "local-1tuple", pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("spark-1tuple", marks=[pytest.mark.spark, pytest.mark.extended])], indirect=True)


def ops(request, runner, conf):
    # Spark with one tuple per micro-batch runs without the reordering operators (a minute and
    # a half with them); test_reordered_within_the_delay_gives_the_same_panes runs them on
    # Spark with whole batches and on the local runner.
    reordering = not (runner == "spark" and conf == ONE_TUPLE)
    return _cached(request, ("operators", json.dumps(conf)), runner,
                   lambda: operators_topology(reordering), conf)


EXPECTED_FIXED = [
    ("a", 0, 1000, 4, "EARLY", 0, False),
    ("b", 0, 1000, 7, "EARLY", 0, False),
    ("a", 1000, 2000, 10, "EARLY", 0, False),
    ("a", 0, 1000, 4, "ON_TIME", 1, False),  # watermark 1600 - 500 reaches 1000
    ("b", 0, 1000, 7, "ON_TIME", 1, False),
    ("a", 0, 1000, 11, "LATE", 2, False),  # 7 @ 900: late, within the lateness
    ("a", 1000, 2000, 10, "ON_TIME", 1, False),
    ("b", 2000, 3000, 8, "ON_TIME", 0, False),
    ("a", 3000, 4000, 10, "ON_TIME", 0, False),  # end of input
    ("b", 3000, 4000, 11, "ON_TIME", 0, False),
]

EXPECTED_SESSIONS = [  # unchanged on-time panes are suppressed (fire_only_updated_panes)
    ("a", 100, 400, 1, "EARLY", 0, False),
    ("b", 300, 600, 2, "EARLY", 0, False),
    ("a", 700, 1000, 3, "EARLY", 0, False),
    ("a", 1200, 1500, 4, "EARLY", 0, False),
    ("b", 600, 900, 5, "EARLY", 0, False),  # [600, 900) only touches [300, 600): apart
    ("a", 1600, 1900, 6, "EARLY", 0, False),
    ("a", 700, 1000, -3, "LATE", 0, True),  # 7 @ 900 extends [700, 1000) to [700, 1200)
    ("a", 700, 1200, 10, "EARLY", 0, False),
    ("b", 2600, 2900, 8, "EARLY", 0, False),
    ("a", 100, 400, -1, "LATE", 0, True),  # 9 @ 50 extends [100, 400), behind the watermark:
    ("a", 50, 400, 10, "LATE", 0, False),  # the merged session fires at once
    ("a", 3700, 4000, 10, "EARLY", 0, False),
    ("b", 3100, 3400, 11, "EARLY", 0, False),
]


@operator_runners
def test_fixed_windows_early_on_time_late_and_dropped(request, runner, runner_conf):
    result = ops(request, runner, runner_conf)
    assert panes(result, "fixed") == EXPECTED_FIXED
    [late] = result.tuples("fixed", "late")
    assert late[:5] == ["a", 9, 50, "events", "default"] and late[6:] == [50, 2100, "late"]
    assert sorted(result.acked("events")) == list(range(len(EVENTS)))
    assert result.failed("events") == [] and result.errors == []


@operator_runners
def test_sessions_merge_with_retractions(request, runner, runner_conf):
    assert panes(ops(request, runner, runner_conf), "sessions") == EXPECTED_SESSIONS


@operator_runners
def test_discarding_panes_and_window_propagation_with_upstream_watermark(request, runner,
                                                                         runner_conf):
    result = ops(request, runner, runner_conf)
    assert panes(result, "discarding") == [
        ("a", 0, 1000, 4, "ON_TIME", 0, False), ("b", 0, 1000, 7, "ON_TIME", 0, False),
        ("a", 0, 1000, 7, "LATE", 1, False),  # discarding: only the late tuple
        ("a", 1000, 2000, 10, "ON_TIME", 0, False), ("b", 2000, 3000, 8, "ON_TIME", 0, False),
        ("a", 3000, 4000, 10, "ON_TIME", 0, False), ("b", 3000, 4000, 11, "ON_TIME", 0, False),
    ]
    # Downstream: the same windows; its on-time pane waits for the upstream watermark, so the
    # upstream's late pane arrives late here too.
    assert panes(result, "per_window") == [
        (0, 1000, 11, "ON_TIME", 0, False), (0, 1000, 18, "LATE", 1, False),
        (1000, 2000, 10, "ON_TIME", 0, False), (2000, 3000, 8, "ON_TIME", 0, False),
        (3000, 4000, 21, "ON_TIME", 0, False),
    ]
    wms = [w for [w] in result.tuples("discarding", WATERMARK_STREAM)]
    assert wms == sorted(wms) and wms[-1] == MAX_TIMESTAMP and 1100 in wms


@operator_runners
def test_sliding_global_and_fire_only_updated(request, runner, runner_conf):
    result = ops(request, runner, runner_conf)
    sliding = sorted(panes(result, "sliding"))
    # Both users hash to the same one of the two tasks, so they share its watermark (largest
    # ts - 500); lateness 0 drops 5 @ 600 (W 700), 7 @ 900 (W 1100), 9 @ 50, 11 @ 3100.
    assert sorted(len(rows) for rows in result.tuples_by_task("sliding").values()) == [0, 9]
    counts = {(k, s): v for k, s, _e, v, timing, _i, _r in sliding if timing == "ON_TIME"}
    assert counts == {("a", -1000): 2, ("a", 0): 4, ("a", 1000): 2, ("a", 2000): 1,
                      ("a", 3000): 1, ("b", -1000): 1, ("b", 0): 1, ("b", 1000): 1,
                      ("b", 2000): 1}
    assert all(p[4] == "ON_TIME" and p[5] == 0 for p in sliding)
    assert {p[2] - p[1] for p in sliding} == {2000}
    assert panes(result, "global") == [
        (-(2**63), MAX_TIMESTAMP, [1, 2, 3, 4, 5], "EARLY", 0, False),
        (-(2**63), MAX_TIMESTAMP, [6, 7, 8, 9, 10], "EARLY", 1, False),
        (-(2**63), MAX_TIMESTAMP, [11], "ON_TIME", 2, False),
    ]
    top = panes(result, "top")
    assert top == [("a", 0, 2000, 1, "EARLY", 0, False), ("b", 0, 2000, 2, "EARLY", 0, False),
                   ("a", 0, 2000, 3, "EARLY", 1, False), ("a", 0, 2000, 4, "EARLY", 2, False),
                   ("b", 0, 2000, 5, "EARLY", 1, False), ("a", 0, 2000, 6, "EARLY", 3, False),
                   ("a", 0, 2000, 7, "EARLY", 4, False), ("b", 2000, 4000, 8, "EARLY", 0, False),
                   ("a", 2000, 4000, 10, "EARLY", 0, False),
                   ("b", 2000, 4000, 11, "EARLY", 1, False),
                   # 9 @ 50 arrived after the (suppressed, unchanged) on-time pane of [0, 2000);
                   # no late trigger: the window's final pane at its purge carries it
                   ("a", 0, 2000, 9, "LATE", 5, False)]


@operator_runners
def test_time_triggered_discarding_panes_add_up(request, runner, runner_conf):
    result = ops(request, runner, runner_conf)
    totals: dict = {}
    on_time = set()
    for k, s, _e, v, timing, _i, retraction in panes(result, "timed"):
        # LATE: the final panes of 7 @ 900 and 9 @ 50, accepted (no lateness limit) after
        # their window's on-time pane
        assert not retraction and timing in ("EARLY", "ON_TIME", "LATE")
        totals[(k, s)] = totals.get((k, s), 0) + v
        if timing == "ON_TIME":
            on_time.add((k, s))
    expected: dict = {}
    for user, amount, ts in EVENTS:
        expected[(user, ts - ts % 1000)] = expected.get((user, ts - ts % 1000), 0) + amount
    assert totals == expected


@pytest.mark.runners("local", "local-1tuple", "spark")
def test_reordered_within_the_delay_gives_the_same_panes(request, runner, runner_conf):
    result = ops(request, runner, runner_conf)
    for op in ("fixed", "sliding", "sessions"):
        ordered = sorted(panes(result, f"ordered_{op}"))
        assert ordered, op
        assert sorted(panes(result, f"reordered_{op}")) == ordered, op
    events, _ = _jittered()
    sums: dict = {}
    for user, amount, ts in events:
        sums[(user, ts - ts % 1000)] = sums.get((user, ts - ts % 1000), 0) + amount
    assert {(k, s): v for k, s, _e, v, *_ in panes(result, "ordered_fixed")} == sums


def test_every_run_gives_the_same_panes(request):
    """Local whole-input vs local with the one-tuple conf (and, when Spark ran, Spark too)."""
    runs = [ops(request, "local", {}), ops(request, "local", ONE_TUPLE)]
    # Spark's runs join the comparison when the Spark tests above ran in this session.
    runs += [r for (mod, key, runner), r in RUN_CACHE.items()
             if mod == __name__ and runner == "spark" and key[0] == "operators"]
    first = runs[0]
    for r in runs[1:]:
        for c in ("fixed", "sessions", "discarding", "per_window", "global", "top"):
            assert panes(r, c) == panes(first, c), c
        assert sorted(panes(r, "sliding")) == sorted(panes(first, "sliding"))
        if "ordered_fixed" in r.topology.components:  # a run with the reordering operators
            for c in ("ordered_sliding", "reordered_sessions"):
                assert sorted(panes(r, c)) == sorted(panes(first, c)), c


# ---- the merge operator ------------------------------------------------------------------

ORDERS = [["o1", "book", 100], ["o2", "pen", 400], ["o3", "ink", 1500], ["o4", "cup", 2600],
          ["o5", "mug", 5200]]
PAYMENTS = [["o1", 12, 300], ["o2", 3, 900], ["o1", 1, 950], ["o3", 7, 1100],
            ["o4", 9, 2300]]  # payments stop at 2300; orders go on to 5200


def merge_topology():
    b = TopologyBuilder()
    b.set_spout("orders", FixedTupleSpout(ORDERS, Fields("order", "item", "ts")))
    b.set_spout("payments", FixedTupleSpout(PAYMENTS, Fields("order", "amount", "ts")))
    join = WindowedMergeOperator(
        input1="orders", input2="payments", window=TimeWindows(Duration.seconds(1)),
        accumulation=accumulations.InnerJoin(), trigger=AT_WM, allowed_lateness=Duration(0),
        watermark_delay=Duration(100), timestamp_field="ts", key_field="order",
        value_field="item", value_field2="amount")
    (b.set_bolt("join", join, 2).fields_grouping("orders", Fields("order"))
     .fields_grouping("payments", Fields("order")))
    cogroup = WindowedMergeOperator(
        input1="orders", input2="payments", window=TimeWindows(Duration.seconds(2)),
        accumulation=accumulations.CoGroup(), trigger=AT_WM, watermark_delay=Duration(100),
        timestamp_field="ts", value_extractor=lambda t: t["order"],
        value_extractor2=lambda t: t["amount"])
    b.set_bolt("cogroup", cogroup).shuffle_grouping("orders").shuffle_grouping("payments")
    b.set_bolt("after", WindowedOperator(accumulation=accumulations.Count())
               ).shuffle_grouping("cogroup")
    return b.create_topology()


merge_runners = pytest.mark.runners("local", "spark-1tuple")


@merge_runners
def test_merge_operator_joins_and_cogroups_per_window(request, runner, runner_conf):
    result = _cached(request, ("merge", json.dumps(runner_conf)), runner, merge_topology,
                     runner_conf)
    joined = {(k, s): v for k, s, _e, v, *_ in panes(result, "join")}
    assert joined == {("o1", 0): [["book", 12], ["book", 1]], ("o2", 0): [["pen", 3]],
                      ("o3", 1000): [["ink", 7]], ("o4", 2000): [["cup", 9]],
                      ("o5", 5000): []}  # one side only: an empty list, not nothing
    assert panes(result, "cogroup") == [
        (0, 2000, [["o1", "o2", "o3"], [12, 3, 1, 7]], "ON_TIME", 0, False),
        (2000, 4000, [["o4"], [9]], "ON_TIME", 0, False),
        (4000, 6000, [["o5"], []], "ON_TIME", 0, False),
    ]


@merge_runners
def test_merge_operator_watermark_is_the_min_of_its_inputs(request, runner, runner_conf):
    result = _cached(request, ("merge", json.dumps(runner_conf)), runner, merge_topology,
                     runner_conf)
    wms = [w for [w] in result.tuples("cogroup", WATERMARK_STREAM)]
    # payments stop at 2300: until input ends the watermark never passes 2300 - 100, although
    # orders alone would have taken it to 5100
    assert wms[-1] == MAX_TIMESTAMP
    assert max(wms[:-1]) == 2200


# ---- which late tuples count: Beam's rule and Apex's -------------------------------------------

# Windows of 10 s, allowed lateness 5 s, the watermark at the largest timestamp: 6 s arrives when
# the watermark is 12 s, 6 s behind it. Its window [0, 10 s) has not expired (10 + 5 > 12).
LATE_EVENTS = [["a", 1, 1000], ["a", 2, 12000], ["a", 3, 6000]]


def lateness_topology():
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(LATE_EVENTS, FIELDS))
    common = {"window": TimeWindows(Duration.seconds(10)), "accumulation": accumulations.Sum(),
              "allowed_lateness": Duration.seconds(5), "watermark_delay": Duration(0),
              "late_stream": "late"}
    beam = AfterWatermark(late=AfterCount(1))
    b.set_bolt("beam", keyed(trigger=beam, accumulation_mode=AccumulationMode.ACCUMULATING,
                             **common)).fields_grouping("events", Fields("user"))
    b.set_bolt("beam_apex_rule", keyed(trigger=beam,
                                       accumulation_mode=AccumulationMode.ACCUMULATING,
                                       lateness_rule=LatenessRule.BEHIND_WATERMARK, **common)
               ).fields_grouping("events", Fields("user"))
    b.set_bolt("apex", keyed(trigger=AT_WM.with_late_firings_at_every(1)
                             .accumulating_fired_panes(), **common)
               ).fields_grouping("events", Fields("user"))
    return b.create_topology()


@pytest.mark.runners("local", "spark")
def test_beam_triggers_drop_a_late_tuple_only_once_its_window_expired(request, runner):
    result = _cached(request, "lateness", runner, lateness_topology)
    # Beam's rule, the default with Beam's triggers: 6 s goes into a LATE pane of [0, 10 s).
    assert panes(result, "beam") == [
        ("a", 0, 10000, 1, "ON_TIME", 0, False),
        ("a", 0, 10000, 4, "LATE", 1, False),
        ("a", 10000, 20000, 2, "ON_TIME", 0, False),  # end of input
    ]
    assert result.tuples("beam", "late") == []
    # Apex's rule, the default with TriggerOption and a choice with Beam's triggers: 6 s is
    # more than 5 s behind the watermark, so it is dropped to the late stream.
    for component in ("beam_apex_rule", "apex"):
        assert panes(result, component) == [
            ("a", 0, 10000, 1, "ON_TIME", 0, False),
            ("a", 10000, 20000, 2, "ON_TIME", 0, False),
        ], component
        [late] = result.tuples(component, "late")
        assert late[:3] == ["a", 3, 6000], (component, late)
    assert result.errors == []


def test_a_value_of_another_type_names_the_component_field_and_value(runner, caplog):
    """A string price among ints fails its tuple with an error naming the operator, the field,
    the value and what to do (not a bare `'>' not supported between 'str' and 'int'`); a
    tuple without a numeric timestamp goes to `window_errors`, logged once, the next counted."""
    b = TopologyBuilder()
    b.set_spout("trades", FixedTupleSpout(
        [["a", 10, 100], ["a", "12", 200], ["a", 3, "abc"], ["a", 4, "def"]],
        Fields("sym", "price", "ts")))
    b.set_bolt("high", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Max(),
        trigger=AT_WM, key_field="sym", value_field="price",
    )).fields_grouping("trades", Fields("sym"))
    caplog.set_level(logging.WARNING, logger="squall")
    result = complete_topology(b.create_topology(), dict(BASE_CONF), runner=runner)
    assert [(e.component, str(e.error)) for e in result.errors] == [(
        "high", "component 'high' cannot accumulate value field 'price' = '12' (str) of tuple "
        "['a', '12', 200] with Max ('>' not supported between instances of 'str' and 'int'); "
        "give 'price' one type in every tuple (convert it in the component that emits it)")]
    assert isinstance(result.errors[0].error, TypeError)
    assert panes(result, "high") == [("a", 0, 1000, 10, "ON_TIME", 0, False)]
    assert sorted(r[2] for r in result.tuples("high", "window_errors")) == ["abc", "def"]
    if runner == "local":  # on Spark the line is in the executor's log
        lines = [r.getMessage() for r in caplog.records if "window_errors" in r.getMessage()]
        assert lines == [
            "high: tuple ['a', 3, 'abc'] routed to 'window_errors': no valid timestamp "
            "(TypeError: timestamp must be a number of ms since epoch, got 'abc'); give every "
            "tuple an integer timestamp in milliseconds (later ones are counted in the "
            "component's window_errors)"]


class Untracked(Spout):
    """Emits its rows without message ids: no tuple tree, nothing that could be replayed."""

    def __init__(self, rows: list[list]) -> None:
        self.rows = rows

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(self.rows):
            self.collector.emit(self.rows[self.i])
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(FIELDS)


@pytest.mark.runners("local", "spark")
def test_untracked_input_ends_in_its_own_batch_with_the_same_panes(runner):
    """With no tuple tree pending when the input ends, nothing can be replayed, so on Spark the
    windows hear of the end in the batch that carries the last input (one batch for the whole
    input, not two); the panes, the end of input's included, are those of the local runner.
    A tracked input keeps its end in a batch of its own (the tests above)."""
    rows = [["a", 1, 100], ["b", 2, 400], ["a", 3, 1500], ["a", 4, 2600], ["b", 5, 3100]]
    b = TopologyBuilder()
    b.set_spout("events", Untracked(rows))
    b.set_bolt("sum", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM, key_field="user", value_field="amount",
    ), 2).fields_grouping("events", Fields("user"))
    result = complete_topology(b.create_topology(), dict(BASE_CONF), runner=runner)
    assert sorted(panes(result, "sum")) == [
        ("a", 0, 1000, 1, "ON_TIME", 0, False),
        ("a", 1000, 2000, 3, "ON_TIME", 0, False),
        ("a", 2000, 3000, 4, "ON_TIME", 0, False),  # end of input
        ("b", 0, 1000, 2, "ON_TIME", 0, False),
        ("b", 3000, 4000, 5, "ON_TIME", 0, False),  # end of input
    ]
    assert result.errors == []
    if runner == "spark":
        assert result.extra["batches"] == 1
