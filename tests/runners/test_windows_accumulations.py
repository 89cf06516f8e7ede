"""The composite, reduce/fold, sort, top-N-by-key and outer-join accumulations (squall.windows):
each accumulation's operations against plain Python, bad arguments, the operators' build-time
checks, and every one through operators on both runners, against answers computed here from
the input (fixed windows, sessions that merge, joins with one side missing).
"""

from __future__ import annotations

import json
import operator
import random
from collections import defaultdict
from typing import Any

import pytest
from support.runs import complete_cached

from squall import Duration, Fields, TopologyBuilder
from squall.testing import FixedTupleSpout
from squall.windows import (
    AccumulationMode,
    AfterCount,
    AfterWatermark,
    Composite,
    Fold,
    FullOuterJoin,
    KeyedWindowedOperator,
    LeftOuterJoin,
    Reduce,
    RightOuterJoin,
    SessionWindows,
    Sorted,
    TimeWindows,
    TopNByKey,
    TriggerOption,
    WindowedMergeOperator,
    WindowedOperator,
    accumulations,
)

A = accumulations


def fold(acc: Any, values: Any) -> Any:
    a = acc.default_accumulated_value()
    for v in values:
        a = acc.accumulate(a, v)
    return a


def out(acc: Any, values: Any) -> Any:
    return acc.get_output(fold(acc, values))


def merged(acc: Any, *groups: Any) -> Any:
    """The output of the groups accumulated apart and merged as the engine merges sessions."""
    a = acc.default_accumulated_value()
    for g in groups:
        a = acc.merge(a, fold(acc, g))
    return acc.get_output(a)


# ---- the accumulations alone ------------------------------------------------------------------

def test_composite_named_positional_and_extractors():
    c = Composite(count=A.Count(), total=A.Sum(), top=A.TopN(2), low=A.Min())
    assert out(c, [4, 8, 1, 6]) == {"count": 4, "total": 19, "top": [8, 6], "low": 1}
    assert merged(c, [4, 8], [1], [6]) == out(c, [4, 8, 1, 6])
    p = Composite(A.Count(), A.Max())
    assert out(p, [3, 7]) == (2, 7)
    assert out(p, []) == (0, None)
    # Beam's compose().with(extract, fn, tag): each part its own view of the value
    e = Composite(amount=(operator.itemgetter(1), A.Sum()),
                  users=(operator.itemgetter(0), A.ToSet()), n=A.Count())
    rows = [("a", 2), ("b", 5), ("a", 1)]
    assert out(e, rows) == {"amount": 8, "users": ["a", "b"], "n": 3}
    assert merged(e, rows[:1], rows[1:]) == out(e, rows)


def test_composite_retraction_iff_every_part_retracts():
    named = Composite(n=A.Count(), total=A.Sum())
    assert named.retractable and named.mergeable
    assert named.get_retraction({"n": 2, "total": 9}) == {"n": -2, "total": -9}
    assert Composite(A.Count(), A.Sum()).get_retraction((2, 9)) == (-2, -9)
    mixed = Composite(A.Count(), A.Max())
    assert not mixed.retractable
    with pytest.raises(TypeError, match="no retraction"):
        mixed.get_retraction((1, 1))
    # accumulating-and-retracting: accepted with retractable parts, refused otherwise
    a_r = TriggerOption.at_watermark().accumulating_and_retracting_fired_panes()
    KeyedWindowedOperator(accumulation=named, trigger=a_r, key_field="k")
    with pytest.raises(ValueError, match="Composite has no real retraction"):
        KeyedWindowedOperator(accumulation=mixed, trigger=a_r, key_field="k")


def test_composite_bad_parts():
    with pytest.raises(TypeError, match="not both"):
        Composite(A.Sum(), n=A.Count())
    with pytest.raises(TypeError, match="at least one part"):
        Composite()
    with pytest.raises(TypeError, match=r"Composite part 'x': 3 has no default_accumulated"):
        Composite(x=3)
    with pytest.raises(TypeError, match=r"Composite part 0: extract must be a function"):
        Composite(("amount", A.Sum()))
    with pytest.raises(TypeError, match="pair"):
        Composite(x=(len, A.Sum(), "tag"))


def test_reduce():
    r = Reduce(operator.mul)
    assert out(r, [2, 3, 4]) == 24
    assert merged(r, [2], [], [3, 4]) == 24
    assert out(r, []) is None  # an empty pane
    assert out(Reduce(lambda a, b: b), [None]) is None and fold(Reduce(max), [None]) == [None]
    assert not r.retractable
    with pytest.raises(TypeError, match="Reduce: fn must be a function, got 3"):
        Reduce(3)  # type: ignore[arg-type]


def test_fold_copies_its_initial_value_and_its_output():
    def add(acc, v):
        acc.setdefault(v % 2, []).append(v)  # in place, as Apex's accumulate may
        return acc

    f = Fold({}, add, merge=lambda a, b: {k: a.get(k, []) + b.get(k, [])
                                          for k in sorted({*a, *b})})
    acc = fold(f, [1, 2, 3])
    emitted = f.get_output(acc)
    f.accumulate(acc, 5)
    assert emitted == {1: [1, 3], 0: [2]}  # the emitted value does not change
    assert f.initial == {} and f.default_accumulated_value() == {}
    assert merged(f, [1, 2], [3]) == {0: [2], 1: [1, 3]}
    assert f.mergeable and not Fold(0, operator.add).mergeable
    with pytest.raises(TypeError, match="merge="):
        Fold(0, operator.add).merge(1, 2)
    with pytest.raises(TypeError, match="Fold: add must be a function, got None"):
        Fold(0, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Fold: merge must be a function or None, got 'sum'"):
        Fold(0, operator.add, merge="sum")  # type: ignore[arg-type]


def test_sorted_is_sorted_and_stable_with_merges():
    rnd = random.Random(3)
    values = [(rnd.randrange(5), i) for i in range(60)]  # many ties on the first item
    for key in (None, operator.itemgetter(0)):
        for reverse in (False, True):
            s = Sorted(key=key, reverse=reverse)
            expected = sorted(values, key=key, reverse=reverse)
            assert out(s, values) == expected, (key, reverse)
            # sessions merged in the order of their starts: their values in that order
            assert merged(s, values[:7], values[7:30], [], values[30:]) == expected
    s = Sorted()
    acc = fold(s, [3, 1])
    emitted = s.get_output(acc)
    s.accumulate(acc, 2)
    assert emitted == [1, 3]
    with pytest.raises(TypeError, match="Sorted: key must be a function or None"):
        Sorted(key="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reverse must be True or False"):
        Sorted(reverse=1)  # type: ignore[arg-type]


def test_outer_joins():
    both = [[1, 2], ["x"]]
    ones, twos, neither = [[1, 2], []], [[], ["x", "y"]], [[], []]
    inner = [[1, "x"], [2, "x"]]
    cases = {  # accumulation: outputs for both, input 1 only, input 2 only, neither
        A.InnerJoin(): (inner, [], [], []),
        LeftOuterJoin(): (inner, [[1, None], [2, None]], [], []),
        RightOuterJoin(): (inner, [], [[None, "x"], [None, "y"]], []),
        FullOuterJoin(): (inner, [[1, None], [2, None]], [[None, "x"], [None, "y"]], []),
        FullOuterJoin(null="-"): (inner, [[1, "-"], [2, "-"]], [["-", "x"], ["-", "y"]], []),
    }
    for j, expected in cases.items():
        assert tuple(j.get_output(acc) for acc in (both, ones, twos, neither)) == expected
        acc = j.accumulate2(fold(j, [1, 2]), "x")
        assert j.get_output(acc) == inner and isinstance(j, A.MergeAccumulation)
        assert j.get_output(j.merge(fold(j, [1]), j.accumulate2(fold(j, []), "x"))) == [[1, "x"]]
        assert not j.retractable


def _top_by_key(pairs, n, combine=None):
    """Plain Python: per key the latest value (or the values combined), the n largest."""
    per: dict = {}
    for k, v in pairs:
        per[k] = combine(per[k], v) if combine and k in per else v
    ranked = sorted(per.items(), key=lambda kv: kv[1], reverse=True)  # ties: arrival order
    return [[k, v] for k, v in ranked[:n]]


def test_top_n_by_key():
    rnd = random.Random(5)
    pairs = [(f"k{rnd.randrange(8)}", rnd.randrange(10)) for _ in range(50)]
    for n in (1, 3, 20):
        assert out(TopNByKey(n), pairs) == _top_by_key(pairs, n)
        assert out(TopNByKey(n, combine=operator.add), pairs) == _top_by_key(pairs, n,
                                                                             operator.add)
        summed = TopNByKey(n, combine=operator.add)
        assert merged(summed, pairs[:10], pairs[10:]) == _top_by_key(pairs, n, operator.add)
    # Apex's example: [3, 1], then [3, 2, 1], then [5, 4, 3] (the values of keys)
    t = TopNByKey(3)
    acc = fold(t, [("a", 3), ("b", 1)])
    assert [v for _, v in t.get_output(acc)] == [3, 1]
    t.accumulate(acc, ("c", 2))
    assert [v for _, v in t.get_output(acc)] == [3, 2, 1]
    for pair in (("d", 4), ("e", 5)):
        t.accumulate(acc, pair)
    assert [v for _, v in t.get_output(acc)] == [5, 4, 3]
    # a merge without combine keeps each key's larger value (Apex); key= ranks by a function
    assert merged(TopNByKey(5), [("a", 1), ("b", 9)], [("a", 4), ("b", 2)]) == [["b", 9],
                                                                              ["a", 4]]
    assert out(TopNByKey(1, key=lambda v: -v), [("a", 3), ("b", 1)]) == [["b", 1]]
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"TopNByKey needs n >= 1 \(how many to keep\)"):
            TopNByKey(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TopN needs n >= 1"):
        A.TopN(0)
    with pytest.raises(TypeError, match=r"\(key, value\) pairs, got 7: .*value_extractor"):
        TopNByKey(2).accumulate({}, 7)
    with pytest.raises(TypeError, match="TopNByKey: combine must be a function or None"):
        TopNByKey(2, combine=1)  # type: ignore[arg-type]


def test_every_built_in_is_an_accumulation():
    for a in (Composite(A.Sum()), Reduce(max), Fold(0, max), Sorted(), TopNByKey(2),
              LeftOuterJoin(), RightOuterJoin(), FullOuterJoin()):
        assert isinstance(a, A.Accumulation), a


# ---- the operators' build-time checks ---------------------------------------------------------

def test_sessions_refuse_an_accumulation_that_cannot_merge():
    no_merge = Fold(0, operator.add)
    sessions = SessionWindows(Duration(100))
    builds = {
        "KeyedWindowedOperator": lambda acc: KeyedWindowedOperator(
            window=sessions, accumulation=acc, key_field="k"),
        "WindowedOperator": lambda acc: WindowedOperator(window=sessions, accumulation=acc),
    }
    for name, build in builds.items():
        for acc in (no_merge, Composite(n=A.Count(), f=no_merge)):
            with pytest.raises(ValueError, match=rf"^{name}: SessionWindows merge .* this "
                               rf"{type(acc).__name__} has none: .*merge=fn"):
                build(acc)
        build(Fold(0, operator.add, merge=operator.add))  # with merge: fine
    # windows that never merge need no merge
    KeyedWindowedOperator(window=TimeWindows(Duration(100)), accumulation=no_merge,
                          key_field="k")
    with pytest.raises(TypeError, match="accumulate2"):
        WindowedMergeOperator(input1="a", input2="b", accumulation=Sorted())
    WindowedMergeOperator(input1="a", input2="b", window=sessions,
                          accumulation=FullOuterJoin())


# ---- through operators, on both runners --------------------------------------------------------

BASE_CONF = {"topology.message.timeout.secs": 120, "spark.sql.shuffle.partitions": 2}
AT_WM = TriggerOption.at_watermark()
FIELDS = Fields("user", "amount", "ts")
DELAY = 1000  # no tuple arrives later than this behind the largest timestamp: none is late
GAP = 300
ALL_GAP = 180  # sessions over all users' tuples (about 110 ms apart)


def _events() -> list[list]:
    """Three users, ts rising by ~110 ms with jitter, a quarter of them delayed by up to four
    places (at most 600 ms behind the largest timestamp); distinct amounts."""
    rnd = random.Random(18)
    events = [[f"u{rnd.randrange(3)}", i + 1, i * 110 + rnd.randrange(200)] for i in range(40)]
    for i in range(len(events) - 1, 0, -1):
        if rnd.random() < 0.25:
            events.insert(min(len(events) - 1, i + rnd.randrange(1, 5)), events.pop(i))
    return events


EVENTS = _events()


def fixed_groups(events, size: int, keyed: bool = True) -> dict:
    """(key, start, end) (or (start, end)) -> the values in arrival order."""
    groups: dict = defaultdict(list)
    for user, amount, ts in events:
        w = (ts - ts % size, ts - ts % size + size)
        groups[(user, *w) if keyed else w].append((user, amount))
    return groups


def session_groups(events, gap: int) -> dict:
    """(key, start, end) -> the values of each session: [ts, ts + gap) per tuple, merged when
    they strictly overlap (touching sessions stay apart)."""
    by_user: dict = defaultdict(list)
    for user, amount, ts in events:
        by_user[user].append((ts, amount))
    groups: dict = {}
    for user, rows in by_user.items():
        rows.sort()
        cur: list = []
        start = end = None
        for ts, amount in rows:
            if end is not None and ts < end:
                cur.append(amount)
                end = max(end, ts + gap)
                continue
            if cur:
                groups[(user, start, end)] = cur
            cur, start, end = [amount], ts, ts + gap
        groups[(user, start, end)] = cur
    return groups


def bridging_tuples(events, gap: int) -> int:
    """How many tuples, on arrival, overlap two sessions of their key seen so far (a merge)."""
    seen: dict = defaultdict(list)
    n = 0
    for user, _amount, ts in events:
        hits = [s for s in session_groups([[user, 0, t] for t in seen[user]], gap)
                if s[1] < ts + gap and ts < s[2]]
        n += len(hits) >= 2
        seen[user].append(ts)
    return n


def keyed(**kw):
    return KeyedWindowedOperator(timestamp_field="ts", key_field="user", value_field="amount",
                                 watermark_delay=Duration(DELAY), **kw)


def single_topology():
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(EVENTS, FIELDS))
    second = TimeWindows(Duration.seconds(1))
    sessions = SessionWindows(Duration(GAP))
    bolts = {
        "composite": keyed(window=second, accumulation=Composite(
            n=A.Count(), total=A.Sum(), top=A.TopN(2), sorted=Sorted(),
            odd=(lambda v: v % 2, A.Sum()))),
        # retractable parts: accumulating-and-retracting, an early pane per tuple, sessions
        "composite_ar": keyed(window=sessions, accumulation=Composite(A.Count(), A.Sum()),
                              trigger=AT_WM.with_early_firings_at_every(1)
                              .accumulating_and_retracting_fired_panes()),
        "reduce": keyed(window=sessions, accumulation=Reduce(operator.mul)),
        "fold": keyed(window=sessions, accumulation=Fold(
            [0, 0], lambda acc, v: [acc[0] + v, max(acc[1], v)],
            merge=lambda a, b: [a[0] + b[0], max(a[1], b[1])])),
        "fold_fixed": keyed(window=second, accumulation=Fold("", lambda acc, v: f"{acc}{v},")),
        "sorted": keyed(window=sessions, accumulation=Sorted(reverse=True)),
    }
    for name, op in bolts.items():
        b.set_bolt(name, op).fields_grouping("events", Fields("user"))
    pair = lambda t: (t["user"], t["amount"])  # noqa: E731
    for name, acc in (("top_latest", TopNByKey(2)),
                      ("top_summed", TopNByKey(2, combine=operator.add))):
        b.set_bolt(name, WindowedOperator(
            window=second, accumulation=acc, timestamp_field="ts", value_extractor=pair,
            watermark_delay=Duration(DELAY))).global_grouping("events")
    b.set_bolt("top_sessions", WindowedOperator(
        window=SessionWindows(Duration(ALL_GAP)), accumulation=TopNByKey(2, combine=operator.add),
        timestamp_field="ts", value_extractor=pair, watermark_delay=Duration(DELAY)),
    ).global_grouping("events")
    b.set_bolt("sorted_all", WindowedOperator(
        window=TimeWindows(Duration.seconds(2)), accumulation=Sorted(key=operator.itemgetter(1)),
        timestamp_field="ts", value_extractor=lambda t: (t["user"], t["amount"] % 7),
        watermark_delay=Duration(DELAY))).global_grouping("events")
    return b.create_topology()


both_runners = pytest.mark.runners("local", "local-1tuple", "spark")


def run_single(request, runner, conf):
    return complete_cached(request, ("single", json.dumps(conf)), runner, single_topology,
                           {**BASE_CONF, **conf})


def on_time(result, component: str, keyed: bool = True) -> dict:
    """(key, start, end) -> value of the panes, which must be one ON_TIME pane per window."""
    rows = [tuple(r) for r in result.tuples(component)]
    n = 3 if keyed else 2
    assert all(r[n + 1:] == ("ON_TIME", 0, False) for r in rows), rows
    windows = [r[:n] for r in rows]
    assert len(set(windows)) == len(windows), component
    return {r[:n]: r[n] for r in rows}


def test_the_input_has_merging_sessions_and_no_late_tuple():
    assert bridging_tuples(EVENTS, GAP) >= 2
    largest = max(ts for _, _, ts in EVENTS[:1])
    for _user, _amount, ts in EVENTS:
        largest = max(largest, ts)
        assert largest - ts < DELAY - GAP  # W = largest - DELAY: before every window's end


@both_runners
def test_composite_per_key_and_window(request, runner, runner_conf):
    result = run_single(request, runner, runner_conf)
    expected = {w: {"n": len(vs), "total": sum(a for _, a in vs),
                    "top": sorted((a for _, a in vs), reverse=True)[:2],
                    "sorted": sorted(a for _, a in vs), "odd": sum(a % 2 for _, a in vs)}
                for w, vs in fixed_groups(EVENTS, 1000).items()}
    assert on_time(result, "composite") == expected
    assert result.errors == [] and result.failed("events") == []


@both_runners
def test_retractable_composite_on_merging_sessions(request, runner, runner_conf):
    result = run_single(request, runner, runner_conf)
    live: dict = {}
    for user, start, end, value, _timing, _index, is_retraction in result.tuples("composite_ar"):
        w = (user, start, end)
        if is_retraction:
            assert live.pop(w) == tuple(-x for x in value)  # takes back the last pane
        else:
            live[w] = tuple(value)
    expected = {w: (len(vs), sum(vs)) for w, vs in session_groups(EVENTS, GAP).items()}
    assert live == expected


@both_runners
def test_reduce_fold_and_sorted_on_merging_sessions(request, runner, runner_conf):
    result = run_single(request, runner, runner_conf)
    sessions = session_groups(EVENTS, GAP)
    products = {}
    for w, vs in sessions.items():
        p = 1
        for v in vs:
            p *= v
        products[w] = p
    assert on_time(result, "reduce") == products
    assert on_time(result, "fold") == {w: [sum(vs), max(vs)] for w, vs in sessions.items()}
    assert on_time(result, "sorted") == {w: sorted(vs, reverse=True)
                                         for w, vs in sessions.items()}
    assert on_time(result, "fold_fixed") == {
        w: "".join(f"{a}," for _, a in vs) for w, vs in fixed_groups(EVENTS, 1000).items()}


@both_runners
def test_top_n_by_key_and_sorted_over_all_keys(request, runner, runner_conf):
    result = run_single(request, runner, runner_conf)
    groups = fixed_groups(EVENTS, 1000, keyed=False)
    assert on_time(result, "top_latest", keyed=False) == {
        w: _top_by_key(vs, 2) for w, vs in groups.items()}
    assert on_time(result, "top_summed", keyed=False) == {
        w: _top_by_key(vs, 2, operator.add) for w, vs in groups.items()}
    # sessions over all keys (one state per session), merged as tuples bridge them
    all_sessions = session_groups([["all", (u, a), ts] for u, a, ts in EVENTS], ALL_GAP)
    assert len(all_sessions) > 5
    assert bridging_tuples([["all", 0, ts] for _, _, ts in EVENTS], ALL_GAP) >= 2
    assert on_time(result, "top_sessions", keyed=False) == {
        (s, e): _top_by_key(vs, 2, operator.add) for (_, s, e), vs in all_sessions.items()}
    assert on_time(result, "sorted_all", keyed=False) == {
        w: sorted(((u, a % 7) for u, a in vs), key=lambda p: p[1])
        for w, vs in fixed_groups(EVENTS, 2000, keyed=False).items()}


# Orders and payments per order; per one-second window some orders have no payment, some
# payments no order, some both (o1 twice).
ORDERS = [["o1", "book", 100], ["o2", "pen", 400], ["o1", "lamp", 700], ["o3", "ink", 1500],
          ["o4", "cup", 2600], ["o6", "mug", 3050], ["o6", "jar", 3400], ["o7", "bag", 5200]]
PAYMENTS = [["o1", 12, 300], ["o5", 4, 800], ["o1", 1, 950], ["o3", 7, 1100],
            ["o4", 9, 3300], ["o6", 5, 3500], ["o8", 2, 4100]]


def join_topology():
    b = TopologyBuilder()
    b.set_spout("orders", FixedTupleSpout(ORDERS, Fields("order", "item", "ts")))
    b.set_spout("payments", FixedTupleSpout(PAYMENTS, Fields("order", "amount", "ts")))

    def join(accumulation, window=None, **kw):
        return WindowedMergeOperator(
            input1="orders", input2="payments", accumulation=accumulation,
            window=window or TimeWindows(Duration.seconds(1)), watermark_delay=Duration(100),
            timestamp_field="ts", key_field="order", value_field="item",
            value_field2="amount", **kw)

    bolts = {"left": join(LeftOuterJoin()), "right": join(RightOuterJoin()),
             "full": join(FullOuterJoin(null="-")),
             "full_sessions": join(FullOuterJoin(), window=SessionWindows(Duration(400))),
             # discarding, a pane per tuple: the on-time panes find both sides empty
             "full_discarding": join(FullOuterJoin(), trigger=AfterWatermark(
                 early=AfterCount(1)), accumulation_mode=AccumulationMode.DISCARDING)}
    for name, op in bolts.items():
        (b.set_bolt(name, op, 2).fields_grouping("orders", Fields("order"))
         .fields_grouping("payments", Fields("order")))
    return b.create_topology()


def _join_expected(groups1: dict, groups2: dict, keep1: bool, keep2: bool, null=None) -> dict:
    expected = {}
    for w in sorted({*groups1, *groups2}):
        ones, twos = groups1.get(w, []), groups2.get(w, [])
        if ones and twos:
            expected[w] = [[a, b] for a in ones for b in twos]
        elif ones:
            expected[w] = [[a, null] for a in ones] if keep1 else []
        else:
            expected[w] = [[null, b] for b in twos] if keep2 else []
    return expected


def _join_groups(window) -> tuple[dict, dict]:
    return tuple({w: [v for _, v in vs] for w, vs in window(rows).items()}  # type: ignore
                 for rows in (ORDERS, PAYMENTS))


# On Spark with whole input; its one-tuple cut runs in CI's second run (`extended`): the
# default run keeps Spark's one-tuple cut of windowed operators in test_windows_operators.py's
# merge operator tests (two inputs joined and cogrouped per window) and, with Beam's triggers,
# in test_beam_triggers.py (early panes in discarding mode, then the on-time pane).
@pytest.mark.parametrize("runner", [
    "local", pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("spark-1tuple", marks=[pytest.mark.spark, pytest.mark.extended])], indirect=True)
def test_outer_joins_per_window(request, runner, runner_conf):
    result = complete_cached(request, ("join", json.dumps(runner_conf)), runner, join_topology,
                             {**BASE_CONF, **runner_conf})
    fixed = _join_groups(lambda rows: fixed_groups(rows, 1000))
    # each side missing somewhere: o2 and o7 have no payment, o5 and o8 no order, o4 both
    # but in different windows
    assert set(fixed[0]) - set(fixed[1]) and set(fixed[1]) - set(fixed[0])
    assert on_time(result, "left") == _join_expected(*fixed, keep1=True, keep2=False)
    assert on_time(result, "right") == _join_expected(*fixed, keep1=False, keep2=True)
    assert on_time(result, "full") == _join_expected(*fixed, True, True, null="-")
    # sessions over both inputs: o4's order and payment stay apart, o6's merge into one
    sessions = session_groups(
        [[k, ("1", v), ts] for k, v, ts in ORDERS] + [[k, ("2", v), ts] for k, v, ts in PAYMENTS],
        400)
    ones = {w: [v for side, v in vs if side == "1"] for w, vs in sessions.items()}
    twos = {w: [v for side, v in vs if side == "2"] for w, vs in sessions.items()}
    got = on_time(result, "full_sessions")
    expected = _join_expected(ones, twos, True, True)
    assert ("o6", 3050, 3900) in expected and len(expected[("o6", 3050, 3900)]) == 2
    # a merged session holds its parts' values in the order of the parts, not of arrival
    assert {w: sorted(v, key=repr) for w, v in got.items()} == {
        w: sorted(v, key=repr) for w, v in expected.items()}
    # discarding: every tuple fired alone (with None for the other side), then nothing is
    # left for the on-time pane, which fires empty
    rows = [tuple(r) for r in result.tuples("full_discarding")]
    assert {r[:3]: r[3] for r in rows if r[4] == "ON_TIME"} == {
        w: [] for w in _join_expected(*fixed, True, True)}
    early = [(r[:3], p) for r in rows if r[4] == "EARLY" for p in r[3]]
    assert len(early) == len(ORDERS) + len(PAYMENTS)
    assert sorted(early, key=repr) == sorted(
        [((k, ts - ts % 1000, ts - ts % 1000 + 1000), [v, None]) for k, v, ts in ORDERS]
        + [((k, ts - ts % 1000, ts - ts % 1000 + 1000), [None, v]) for k, v, ts in PAYMENTS],
        key=repr)
