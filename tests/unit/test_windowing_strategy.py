"""`squall.panes.windowing.Windowing`: a windowed operator's windowing strategy as one value.

The engine built from it (`WindowedEngine.of`) must be the engine built from the keywords, an
operator holds one and reads its settings from it, and an operator pickled while its settings
were attributes of its own loads with the same strategy.
"""

from __future__ import annotations

import pickle

import pytest

from squall import Duration
from squall.panes.engine import WindowedEngine
from squall.windows import (
    AccumulationMode,
    AfterCount,
    AfterWatermark,
    ClosingBehavior,
    KeyedWindowedOperator,
    LatenessRule,
    OnTimeBehavior,
    SessionWindows,
    TimestampCombiner,
    TimeWindows,
    TriggerOption,
    WindowedMergeOperator,
    WindowedOperator,
    Windowing,
    accumulations,
)


def test_the_strategy_checks_its_settings_when_built():
    with pytest.raises(TypeError, match="TriggerOption or a trigger"):
        Windowing(TimeWindows(1000), "AfterWatermark()")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="carries its accumulation mode"):
        Windowing(TimeWindows(1000), TriggerOption.at_watermark(),
                  mode=AccumulationMode.ACCUMULATING)
    with pytest.raises(ValueError, match="ApexTrigger carries"):
        Windowing(TimeWindows(1000), TriggerOption.at_watermark().as_trigger(),
                  mode=AccumulationMode.ACCUMULATING)
    with pytest.raises(TypeError, match="closing_behavior must be"):
        Windowing(TimeWindows(1000), closing_behavior="fire_always")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lateness_rule must be"):
        Windowing(TimeWindows(1000), lateness_rule="window_expired")  # type: ignore[arg-type]
    retracting = Windowing(TimeWindows(1000), AfterWatermark(),
                           mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
    retracting.check(accumulations.Sum())
    with pytest.raises(ValueError, match="no real retraction"):
        retracting.check(accumulations.Max())


def test_the_mode_and_the_lateness_rule_follow_the_trigger_model():
    option = TriggerOption.at_watermark().accumulating_fired_panes()
    for trigger in (option, option.as_trigger()):
        w = Windowing(TimeWindows(1000), trigger)
        assert w.apex_option == option
        assert w.accumulation_mode is AccumulationMode.ACCUMULATING
        assert w.rule is LatenessRule.BEHIND_WATERMARK
    beam = Windowing(TimeWindows(1000), AfterWatermark(early=AfterCount(2)))
    assert beam.apex_option is None
    assert beam.accumulation_mode is AccumulationMode.DISCARDING
    assert beam.rule is LatenessRule.WINDOW_EXPIRED
    chosen = Windowing(TimeWindows(1000), AfterWatermark(),
                       lateness_rule=LatenessRule.BEHIND_WATERMARK)
    assert chosen.rule is LatenessRule.BEHIND_WATERMARK


def test_an_engine_of_the_strategy_is_the_engine_of_its_keywords():
    w = Windowing(SessionWindows(Duration(500)), AfterWatermark(late=AfterCount(1)), 1000,
                  AccumulationMode.ACCUMULATING_AND_RETRACTING, OnTimeBehavior.FIRE_IF_NON_EMPTY,
                  ClosingBehavior.FIRE_ALWAYS, TimestampCombiner.OUTPUT_AT_LATEST)
    of = WindowedEngine.of(w, accumulations.Sum())
    keywords = WindowedEngine(w.window, accumulations.Sum(), w.trigger, w.allowed_lateness_ms,
                              **w.engine_options())
    for name in ("window", "trigger", "mode", "lateness", "on_time_behavior", "closing_behavior",
                 "timestamp_combiner", "lateness_rule"):
        assert getattr(of, name) == getattr(keywords, name), name
    for e in (of, keywords):
        for ts, v in [(100, 1), (300, 2), (2000, 4), (200, 8)]:
            e.process("k", ts, v, now=0)
        e.advance(1500, now=0)
        e.process("k", 400, 16, now=0)
        e.end_of_input(0)
    assert of.take() == keywords.take()


def test_an_operator_holds_one_strategy_and_reads_its_settings_from_it():
    op = KeyedWindowedOperator(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AfterWatermark(early=AfterCount(2)), allowed_lateness=Duration(500),
        accumulation_mode=AccumulationMode.ACCUMULATING,
        closing_behavior=ClosingBehavior.FIRE_ALWAYS, key_field="k", value_field="v",
        timestamp_field="ts")
    assert op.windowing == Windowing(TimeWindows(1000), AfterWatermark(early=AfterCount(2)), 500,
                                     AccumulationMode.ACCUMULATING,
                                     closing_behavior=ClosingBehavior.FIRE_ALWAYS)
    assert (op.window, op.trigger, op.allowed_lateness_ms, op.accumulation_mode) == (
        TimeWindows(1000), AfterWatermark(early=AfterCount(2)), 500, AccumulationMode.ACCUMULATING)
    assert op.closing_behavior is ClosingBehavior.FIRE_ALWAYS
    assert op.lateness_rule is None  # the trigger model's own, resolved by the engine
    assert op.engine_options()["mode"] is AccumulationMode.ACCUMULATING
    with pytest.raises(AttributeError, match="windowing strategy"):
        op.trigger = TriggerOption.at_watermark()  # type: ignore[misc]
    assert WindowedOperator(accumulation=accumulations.Sum()).trigger == (
        TriggerOption.at_watermark())
    merge = WindowedMergeOperator(accumulation=accumulations.InnerJoin(), input1="a", input2="b",
                                  window=TimeWindows(1000), allowed_lateness=0)
    assert merge.windowing.allowed_lateness_ms == 0


def test_an_operator_pickled_with_its_settings_as_attributes_loads_with_one_strategy():
    op = WindowedOperator(window=TimeWindows(1000), accumulation=accumulations.Sum(),
                          trigger=AfterWatermark(), allowed_lateness=Duration(200),
                          timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
    state = dict(vars(op))
    w = state.pop("windowing")
    # As written before: the settings as attributes, the later ones absent from the oldest.
    state.update(window=w.window, trigger=w.trigger, allowed_lateness_ms=200,
                 timestamp_combiner=w.timestamp_combiner)
    old = WindowedOperator.__new__(WindowedOperator)
    old.__setstate__(state)
    assert old.windowing == Windowing(TimeWindows(1000), AfterWatermark(), 200,
                                      timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
    assert old.on_time_behavior is OnTimeBehavior.FIRE_ALWAYS
    restored = pickle.loads(pickle.dumps(old))
    assert restored.windowing == old.windowing
    assert "window" not in vars(restored)
