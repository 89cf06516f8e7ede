"""Beam's trigger model and pane info (squall.panes.beam_triggers, squall.panes.pane_info): what
is not a scenario.

The scenarios (each trigger, the on-time and closing behaviours, output timestamps, sessions,
retractions, Apex's option expressed in the model) are transcripts in
`tests/transcripts/beam_*.json` and `panes_*.json`, run by `tests/runners/test_transcripts.py` on
the engine, on both runners and on Spark with one tuple per micro-batch. Here: validation, the rules
every pane must follow over random trigger trees and inputs (pane info, conservation of data,
snapshots, batch boundaries), compatibility with older snapshots, and pane info downstream of an
operator on the runners.

Panes are (key, window_start, window_end, value, timing, pane_index, is_retraction, is_first,
is_last, on_time_index, timestamp).
"""

from __future__ import annotations

import pickle
import random
from collections import defaultdict
from typing import Any

import pytest

from squall import Bolt, Duration, Fields, TopologyBuilder
from squall.panes.beam_triggers import processing_delays
from squall.panes.state_mapping import StateSessions, StateWindowStore
from squall.state import MemoryKeyValueState
from squall.testing import FixedTupleSpout, complete_topology
from squall.windows import (
    AccumulationMode,
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    ClosingBehavior,
    GlobalWindow,
    Never,
    OnTimeBehavior,
    OrFinally,
    PaneInfo,
    PaneState,
    Repeatedly,
    SessionWindows,
    TimestampCombiner,
    TimeWindows,
    Trigger,
    TriggerOption,
    WindowedEngine,
    WindowedOperator,
    accumulations,
)

# ---- validation ----------------------------------------------------------------------------------


def test_triggers_are_checked_when_built():
    with pytest.raises(ValueError, match="count >= 1"):
        AfterCount(0)
    with pytest.raises(ValueError, match="delay >= 0"):
        AfterProcessingTime(-1)
    with pytest.raises(ValueError, match="at least two"):
        AfterAny(AfterCount(1))
    with pytest.raises(TypeError, match="not a trigger"):
        Repeatedly(TriggerOption.at_watermark())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a trigger"):
        AfterWatermark(early=3)  # type: ignore[arg-type]


def test_engine_and_operator_validate_trigger_mode_and_behaviours():
    sum_ = accumulations.Sum()
    with pytest.raises(ValueError, match="carries its accumulation mode"):
        WindowedEngine(TimeWindows(1000), sum_, TriggerOption.at_watermark(),
                       mode=AccumulationMode.ACCUMULATING)
    with pytest.raises(ValueError, match="no real retraction"):
        WindowedEngine(TimeWindows(1000), accumulations.Max(), AfterWatermark(),
                       mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
    with pytest.raises(TypeError, match="TriggerOption or a trigger"):
        WindowedEngine(TimeWindows(1000), sum_, "AfterWatermark()")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_time_behavior must be"):
        WindowedEngine(TimeWindows(1000), sum_, AfterWatermark(),
                       on_time_behavior="fire_always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="carries its accumulation mode"):
        WindowedOperator(window=TimeWindows(1000), accumulation=sum_,
                         accumulation_mode=AccumulationMode.DISCARDING,
                         trigger=TriggerOption.at_watermark().accumulating_fired_panes())
    # A Beam trigger's mode is the operator's; discarding by default.
    op = WindowedOperator(window=TimeWindows(1000), accumulation=sum_,
                          trigger=AfterWatermark(early=AfterCount(2)))
    assert WindowedEngine(op.window, sum_, op.trigger, **op.engine_options()).mode \
        is AccumulationMode.DISCARDING


def test_triggers_print_as_written_and_compare_by_value():
    t = OrFinally(Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(Duration.seconds(2)))),
                  AfterWatermark(late=AfterAll(AfterCount(1), Never())))
    assert repr(t) == ("OrFinally(Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(2000))),"
                       " AfterWatermark(late=AfterAll(AfterCount(1), Never())))")
    assert t == Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(2000))).or_finally(
        AfterWatermark(late=AfterAll(AfterCount(1), Never())))
    assert processing_delays(t) == [2000]
    assert t.uses_processing_time and t.has_on_time_pane
    assert not AfterCount(2).has_on_time_pane
    assert TriggerOption().as_trigger().has_on_time_pane is False


def test_pane_info_reads_engine_panes_and_operator_rows():
    pane = ("k", 0, 1000, 3, "LATE", 2, False, False, True, 1, 999)
    info = PaneInfo(timing="LATE", index=2, on_time_index=1, is_first=False, is_last=True,
                    timestamp=999)
    assert PaneInfo.of(pane) == info
    assert PaneInfo.of(pane[1:]) == info  # a non-keyed operator's row


# ---- the rules of every pane, over random triggers and input ---------------------------------

def random_trigger(rnd: random.Random, depth: int = 0) -> Trigger:
    leaves = [lambda: AfterCount(rnd.randrange(1, 4)),
              lambda: AfterProcessingTime(rnd.choice([0, 300, 1000])),
              Never, Always, AfterWatermark]
    if depth >= 2:
        return rnd.choice(leaves)()
    kind = rnd.randrange(8)
    if kind == 0:
        return Repeatedly(random_trigger(rnd, depth + 1))
    if kind == 1:
        return AfterAny(random_trigger(rnd, depth + 1), random_trigger(rnd, depth + 1))
    if kind == 2:
        return AfterAll(random_trigger(rnd, depth + 1), random_trigger(rnd, depth + 1))
    if kind == 3:
        return AfterEach(random_trigger(rnd, depth + 1), random_trigger(rnd, depth + 1))
    if kind == 4:
        return OrFinally(random_trigger(rnd, depth + 1), random_trigger(rnd, depth + 1))
    if kind == 5:
        return AfterWatermark(early=rnd.choice([None, random_trigger(rnd, depth + 1)]),
                              late=rnd.choice([None, random_trigger(rnd, depth + 1)]))
    return rnd.choice(leaves)()


def random_steps(rnd: random.Random, n: int) -> list[tuple]:
    """("t", key, ts, now) tuples, ("w", watermark, now) and ("b", now) steps, time rising."""
    steps: list[tuple] = []
    now, watermark = 0, -1
    for _ in range(n):
        now += rnd.randrange(0, 400)
        r = rnd.random()
        if r < 0.7:
            steps.append(("t", rnd.choice("ab"), rnd.randrange(0, 6000), now))
        elif r < 0.85:
            watermark += rnd.randrange(1, 900)
            steps.append(("w", watermark, now))
        else:
            steps.append(("b", now))
    steps.append(("e", now + 1))
    return steps


def run(engine: WindowedEngine, steps: list[tuple], snapshots: bool = False
        ) -> tuple[list[tuple], list[int], int]:
    """Panes, the watermark at each pane, and the (tuple, window)s accepted."""
    panes: list[tuple] = []
    marks: list[int] = []
    accepted = 0
    for step in steps:
        if step[0] == "t":
            _, key, ts, now = step
            if engine.process(key, ts, 1, now):
                window = engine.window
                accepted += len(window.assign(ts)) if isinstance(window, TimeWindows) else 1
        elif step[0] == "w":
            engine.advance(step[1], step[2])
        elif step[0] == "b":
            engine.batch_end(step[1])
        else:
            engine.end_of_input(step[1])
        out = engine.take()
        panes += out
        marks += [engine.watermark] * len(out)
        if snapshots:
            engine = pickle.loads(pickle.dumps(engine))
    return panes, marks, accepted - engine.closed_drops - engine.expired_drops


def check_pane_rules(panes: list[tuple], marks: list[int], combiner: TimestampCombiner,
                     sessions: bool) -> None:
    by_window: dict[Any, list[tuple]] = defaultdict(list)
    for pane, watermark in zip(panes, marks, strict=True):
        (key, start, end, _v, timing, index, retraction, is_first, _last, on_time_index,
         stamp) = pane
        assert is_first == (index == 0), pane
        assert (timing == "EARLY") == (watermark < end), (pane, watermark)
        if combiner is TimestampCombiner.OUTPUT_AT_EOW:
            assert stamp == end - 1, pane
        else:
            assert start <= stamp < end, pane
        if retraction:
            # The retracted pane's index, on-time index and timestamp (the new pane's timing).
            previous = by_window[key, start, end][-1]
            assert (index, on_time_index, stamp) == (previous[5], previous[9], previous[10])
            assert not pane[8], pane
        else:
            assert (on_time_index == -1) == (timing == "EARLY"), pane
            by_window[key, start, end].append(pane)
    for panes_of in by_window.values():
        assert not any(p[8] for p in panes_of[:-1]), panes_of  # nothing after the last pane
        if not sessions:  # (a session may be re-created with the same bounds)
            assert [p[5] for p in panes_of] == list(range(len(panes_of))), panes_of
        non_early = [p for p in panes_of if p[4] != "EARLY"]
        assert [p[9] for p in non_early] == list(range(len(non_early))), panes_of
        assert all(p[4] != "ON_TIME" or p[9] == 0 for p in panes_of), panes_of


WINDOWS = [TimeWindows(1000), TimeWindows(1000).slide_by(500), SessionWindows(Duration(150)),
           GlobalWindow()]


@pytest.mark.parametrize("seed", range(60))
def test_random_triggers_keep_the_pane_rules_and_lose_no_data(seed: int) -> None:
    """Any trigger tree, window kind, lateness, behaviours: pane info is consistent; in
    discarding mode every accepted tuple is in exactly one pane (or counted as dropped by a
    closed window); a pickle round trip after every step (the Spark snapshots) changes
    nothing."""
    rnd = random.Random(seed)
    trigger = random_trigger(rnd)
    window = rnd.choice(WINDOWS)
    lateness = rnd.choice([None, 0, 500, 3000])
    options = {"on_time_behavior": rnd.choice(list(OnTimeBehavior)),
               "closing_behavior": rnd.choice(list(ClosingBehavior)),
               "timestamp_combiner": rnd.choice(list(TimestampCombiner))}
    steps = random_steps(rnd, 120)
    for mode in AccumulationMode:
        def engine(mode: AccumulationMode = mode) -> WindowedEngine:
            return WindowedEngine(window, accumulations.Sum(), trigger, lateness, mode=mode,
                                  **options)

        panes, marks, kept = run(engine(), steps)
        assert (panes, marks, kept) == run(engine(), steps, snapshots=True), trigger
        check_pane_rules(panes, marks, options["timestamp_combiner"],
                         isinstance(window, SessionWindows))
        if mode is AccumulationMode.DISCARDING:
            assert sum(p[3] for p in panes) == kept, (trigger, window, lateness)


@pytest.mark.parametrize("seed", range(20))
def test_batch_ends_do_not_change_event_time_triggers(seed: int) -> None:
    """Each tuple is its own bundle: without processing-time triggers, where batches end (on
    Spark, how input is cut into micro-batches) does not change a single pane."""
    rnd = random.Random(100 + seed)
    trigger = random_trigger(rnd)
    while trigger.uses_processing_time:
        trigger = random_trigger(rnd)
    window = rnd.choice(WINDOWS)
    steps = [s for s in random_steps(rnd, 120) if s[0] != "b"]
    cut = [s for step in steps for s in ([step, ("b", step[-1])] if rnd.random() < 0.5
                                         else [step])]

    def engine() -> WindowedEngine:
        return WindowedEngine(window, accumulations.ToList(), trigger, 1000,
                              mode=AccumulationMode.ACCUMULATING)

    assert run(engine(), steps)[0] == run(engine(), cut)[0]


@pytest.mark.parametrize("seed", range(20))
def test_trigger_state_in_the_state_provider(seed: int) -> None:
    """`stateful=True` keeps panes, with their trigger state, pickled in the task's state,
    written back and forgotten at every checkpoint: the same panes as in memory."""
    rnd = random.Random(300 + seed)
    trigger = random_trigger(rnd)
    window = rnd.choice(WINDOWS)
    steps = random_steps(rnd, 100)

    def engine(store: Any = None, sessions: Any = None) -> WindowedEngine:
        return WindowedEngine(window, accumulations.ToList(), trigger, 2000, store, sessions,
                              mode=AccumulationMode.ACCUMULATING,
                              timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)

    state = MemoryKeyValueState()
    store, sessions = StateWindowStore(state), StateSessions(state)
    stored = engine(store, sessions)
    panes: list[tuple] = []
    for step in steps:
        panes += run(stored, [step])[0]
        store.flush()
        sessions.flush()
    assert panes == run(engine(), steps)[0], trigger


# ---- older snapshots -----------------------------------------------------------------------------

def test_state_written_before_pane_info_still_loads():
    st = PaneState.__new__(PaneState)
    st.__setstate__((5, 1, True, None, 2, 100, False))  # as pickled before `ext`
    assert (st.acc, st.index, st.ext) == (5, 2, None)
    e = WindowedEngine(TimeWindows(1000), accumulations.Sum(), TriggerOption.at_watermark())
    e.process("k", 10, 3, 0)
    old = e.__getstate__()
    for name in ("_root", "mode", "closed_drops", "on_time_behavior", "closing_behavior",
                 "timestamp_combiner"):
        old.pop(name)
    restored = WindowedEngine.__new__(WindowedEngine)
    restored.__setstate__(old)
    # An engine snapshot from before keeps the on-time behaviour it was written under.
    assert restored.on_time_behavior is OnTimeBehavior.FIRE_IF_NON_EMPTY
    restored.end_of_input(0)
    assert restored.take() == [("k", 0, 1000, 3, "ON_TIME", 0, False, True, True, 0, 999)]


# ---- pane info downstream, on the runners --------------------------------------------------------

class CompleteWindows(Bolt):
    """Reads the pane info of the operator's panes: emits a window's total once it is complete
    (its on-time pane), and says whether that pane was the last."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.totals: dict[int, int] = defaultdict(int)

    def execute(self, tup) -> None:
        info = PaneInfo.of_tuple(tup)
        self.totals[tup["window_start"]] += tup["value"]
        if info.timing == "ON_TIME":
            self.collector.emit([tup["window_start"], self.totals[tup["window_start"]],
                                 info.is_last, info.timestamp])
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("window_start", "total", "last", "timestamp"))


@pytest.mark.runners("local", "spark-1tuple")
def test_a_consumer_knows_when_a_window_is_complete(runner, runner_conf):
    """A non-keyed operator with early panes in discarding mode: every window's on-time pane
    reaches the consumer, also when the early panes took everything (Beam's FIRE_ALWAYS), with
    its pane info (10 fields without the key)."""
    rows = [[v, ts] for v, ts in [(1, 100), (2, 200), (4, 1100), (8, 1900), (16, 2500),
                                  (32, 4000)]]
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(rows, Fields("amount", "ts")))
    b.set_bolt("totals", WindowedOperator(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AfterWatermark(early=AfterCount(2)), pane_info=True,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST,
        watermark_delay=Duration(0), allowed_lateness=Duration(0),
        timestamp_field="ts", value_field="amount")).shuffle_grouping("events")
    b.set_bolt("complete", CompleteWindows()).shuffle_grouping("totals")
    result = complete_topology(b.create_topology(),
                               {"topology.message.timeout.secs": 120, **runner_conf},
                               runner=runner)
    assert result.errors == []
    assert [list(r) for r in result.tuples("totals")] == [
        [0, 1000, 3, "EARLY", 0, False, True, False, -1, 200],
        [0, 1000, 0, "ON_TIME", 1, False, False, True, 0, 999],  # empty: FIRE_ALWAYS
        [1000, 2000, 12, "EARLY", 0, False, True, False, -1, 1900],
        [1000, 2000, 0, "ON_TIME", 1, False, False, True, 0, 1999],
        [2000, 3000, 16, "ON_TIME", 0, False, True, True, 0, 2500],
        [4000, 5000, 32, "ON_TIME", 0, False, True, True, 0, 4000],
    ]
    assert [list(r) for r in result.tuples("complete")] == [
        [0, 3, True, 999], [1000, 12, True, 1999], [2000, 16, True, 2500],
        [4000, 32, True, 4000]]
