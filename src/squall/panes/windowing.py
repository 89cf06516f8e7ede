"""A windowed operator's windowing strategy as one value (Beam's `WindowingStrategy`).

Which windows a tuple falls in, when their panes fire and what a pane holds after earlier ones,
how long a window waits for late data and when a tuple is too late, and the pane's output
timestamp: what an operator is configured with (`squall.components.operators`) and what its
task's pane engine is built from (`squall.panes.engine.WindowedEngine.of`), passed as one object
instead of a keyword argument each. It is checked when built; `check(accumulation)` adds what
depends on the accumulation.

>>> from squall.panes.beam_triggers import AfterCount, AfterWatermark
>>> from squall.panes.windows import TimeWindows
>>> w = Windowing(TimeWindows(1000), AfterWatermark(early=AfterCount(2)), allowed_lateness_ms=0)
>>> w.accumulation_mode.value, w.rule.value
('discarding', 'window_expired')
>>> apex = Windowing(TimeWindows(1000), TriggerOption.at_watermark().accumulating_fired_panes())
>>> apex.accumulation_mode.value, apex.rule.value
('accumulating', 'behind_watermark')
>>> Windowing(TimeWindows(1000), on_time_behavior="fire_always")
Traceback (most recent call last):
...
TypeError: on_time_behavior must be a OnTimeBehavior, got 'fire_always'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squall.panes.beam_triggers import Trigger
from squall.panes.pane_info import ClosingBehavior, LatenessRule, OnTimeBehavior, TimestampCombiner
from squall.panes.triggers import AccumulationMode, ApexTrigger, TriggerOption, validate_mode
from squall.panes.windows import WindowOption


@dataclass(frozen=True)
class Windowing:
    """The windowing strategy of one windowed operator (see the module doc).

    `window`: None takes the windows of the upstream operator's panes (window propagation).
    `trigger`: Apex's `TriggerOption` (it carries the accumulation mode) or a trigger of Beam's
    model with `mode` (discarding by default). `allowed_lateness_ms`: None never drops nor
    purges. `on_time_behavior`, `closing_behavior`: whether the on-time pane and a window's final
    pane fire with nothing new since the previous pane. `timestamp_combiner`: the panes' output
    timestamp. `lateness_rule`: None takes the trigger model's own (`rule`).
    """

    window: WindowOption | None = None
    trigger: TriggerOption | Trigger = field(default_factory=TriggerOption.at_watermark)
    allowed_lateness_ms: int | None = None
    mode: AccumulationMode | None = None
    on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS
    closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY
    timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW
    lateness_rule: LatenessRule | None = None

    def __post_init__(self) -> None:
        trigger, mode = self.trigger, self.mode
        option = self.apex_option
        if option is None and not isinstance(trigger, Trigger):
            raise TypeError(f"trigger must be a TriggerOption or a trigger (AfterWatermark, "
                            f"AfterCount, ...), got {trigger!r}")
        if option is not None and mode is not None and mode is not option.mode:
            raise ValueError(
                "a TriggerOption carries its accumulation mode: set it with its "
                "discarding/accumulating methods, not mode=" if isinstance(trigger, TriggerOption)
                else "an ApexTrigger carries its TriggerOption's accumulation mode")
        for name, value, kind in (("on_time_behavior", self.on_time_behavior, OnTimeBehavior),
                                  ("closing_behavior", self.closing_behavior, ClosingBehavior),
                                  ("timestamp_combiner", self.timestamp_combiner,
                                   TimestampCombiner),
                                  ("lateness_rule", self.rule, LatenessRule)):
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {value!r}")

    @property
    def apex_option(self) -> TriggerOption | None:
        """Apex's `TriggerOption` when the trigger is one (or `TriggerOption.as_trigger()`)."""
        trigger = self.trigger
        if isinstance(trigger, TriggerOption):
            return trigger
        return trigger.option if isinstance(trigger, ApexTrigger) else None

    @property
    def accumulation_mode(self) -> AccumulationMode:
        """The panes' accumulation mode: a `TriggerOption`'s own, else `mode` (discarding by
        default)."""
        option = self.apex_option
        if option is not None:
            return option.mode
        return AccumulationMode.DISCARDING if self.mode is None else self.mode

    @property
    def rule(self) -> LatenessRule:
        """The lateness rule: `lateness_rule`, else the trigger model's own (Apex's for a
        `TriggerOption` and its `as_trigger()`, Beam's for Beam's triggers)."""
        if self.lateness_rule is not None:
            return self.lateness_rule
        if self.apex_option is None:
            return LatenessRule.WINDOW_EXPIRED
        return LatenessRule.BEHIND_WATERMARK

    def check(self, accumulation: Any) -> None:
        """What depends on the accumulation: a retracting mode needs a real retraction (and
        Apex's checks of its option)."""
        retractable = getattr(accumulation, "retractable", False)
        what = type(accumulation).__name__
        option = self.apex_option
        if option is not None:
            option.validate(retractable, what)
        else:
            validate_mode(self.accumulation_mode, retractable, what)

    def engine_options(self) -> dict[str, Any]:
        """The pane engine's keyword arguments besides window, accumulation, trigger and
        lateness (`WindowedEngine(window, accumulation, trigger, lateness, **options)`)."""
        return {"mode": self.mode, "on_time_behavior": self.on_time_behavior,
                "closing_behavior": self.closing_behavior,
                "timestamp_combiner": self.timestamp_combiner,
                "lateness_rule": self.lateness_rule}
