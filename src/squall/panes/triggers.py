"""`TriggerOption`: when panes fire, and what a pane holds after earlier ones.

>>> t = (TriggerOption.at_watermark().with_early_firings_at_every(Duration.seconds(10))
...      .with_late_firings_at_every(1).accumulating_fired_panes())
>>> t.on_time, t.early_ms, t.late_count, t.mode.value
(True, 10000, 1, 'accumulating')
>>> TriggerOption().with_early_firings_at_every(0)
Traceback (most recent call last):
...
ValueError: a count trigger needs a count >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from dataclasses import dataclass

from squall.duration import Duration, to_millis
from squall.panes.beam_triggers import (
    BATCH_END,
    ELEMENT,
    WATERMARK,
    Node,
    Trigger,
    TriggerContext,
)
from squall.panes.pane_info import EARLY, LATE, ON_TIME
from squall.panes.windows import MAX_TIMESTAMP

__all__ = ["EARLY", "LATE", "ON_TIME", "AccumulationMode", "ApexTrigger", "TriggerOption",
           "validate_mode"]


class AccumulationMode(enum.Enum):
    DISCARDING = "discarding"
    """A pane holds only what arrived since the previous pane of its (key, window)."""
    ACCUMULATING = "accumulating"
    """A pane holds everything its (key, window) received so far."""
    ACCUMULATING_AND_RETRACTING = "accumulating_and_retracting"
    """As ACCUMULATING, and each pane is preceded by the retraction of the previous one."""


@dataclass(frozen=True)
class TriggerOption:
    """Immutable: every `with_*` method returns a new option.

    `TriggerOption()` fires no on-time pane; `TriggerOption.at_watermark()` does. Early and late
    firings are every N tuples (an int: at exactly the N-th tuple of the key and window since its
    last firing) or every duration of processing time (at a batch boundary, once that much time
    has passed since the last firing). Both kinds may be combined.
    """

    on_time: bool = False
    early_count: int | None = None
    early_ms: int | None = None
    late_count: int | None = None
    late_ms: int | None = None
    mode: AccumulationMode = AccumulationMode.DISCARDING
    only_updated: bool = False

    @classmethod
    def at_watermark(cls) -> TriggerOption:
        return cls(on_time=True)

    def with_early_firings_at_every(self, every: int | Duration | datetime.timedelta
                                    ) -> TriggerOption:
        if isinstance(every, int):
            return dataclasses.replace(self, early_count=_count(every))
        return dataclasses.replace(self, early_ms=_period(every))

    def with_late_firings_at_every(self, every: int | Duration | datetime.timedelta
                                   ) -> TriggerOption:
        if isinstance(every, int):
            return dataclasses.replace(self, late_count=_count(every))
        return dataclasses.replace(self, late_ms=_period(every))

    def discarding_fired_panes(self) -> TriggerOption:
        return dataclasses.replace(self, mode=AccumulationMode.DISCARDING)

    def accumulating_fired_panes(self) -> TriggerOption:
        return dataclasses.replace(self, mode=AccumulationMode.ACCUMULATING)

    def accumulating_and_retracting_fired_panes(self) -> TriggerOption:
        return dataclasses.replace(self, mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)

    def fire_only_updated_panes(self) -> TriggerOption:
        """Suppress a pane (and its retraction) whose value equals the last one emitted."""
        return dataclasses.replace(self, only_updated=True)

    @property
    def time_ms(self) -> int | None:
        """The shortest time-trigger period, or None: how often the operator must be woken."""
        periods = [p for p in (self.early_ms, self.late_ms) if p]
        return min(periods) if periods else None

    @property
    def has_late_firings(self) -> bool:
        return bool(self.late_count or self.late_ms)

    def as_trigger(self) -> ApexTrigger:
        """This option as a trigger of Beam's model (`squall.panes.beam_triggers`).

        The engine runs a `TriggerOption` with these rules inlined (the operators' hot path);
        `as_trigger()` runs them through the general trigger driver instead, with the same
        panes (tests/runners/test_transcripts.py checks every Apex transcript both ways).
        """
        return ApexTrigger(self)

    def validate(self, retractable: bool, what: str) -> None:
        """Build-time checks (Apex's `validate`)."""
        if self.only_updated and self.mode is AccumulationMode.DISCARDING:
            raise ValueError("fire_only_updated_panes needs an accumulating mode: a discarding "
                             "pane never repeats a value, so there is nothing to suppress")
        validate_mode(self.mode, retractable, what)


def validate_mode(mode: AccumulationMode, retractable: bool, what: str) -> None:
    """Accumulating-and-retracting needs an accumulation with a real retraction."""
    if not isinstance(mode, AccumulationMode):
        raise TypeError(f"accumulation mode must be an AccumulationMode, got {mode!r}")
    if mode is AccumulationMode.ACCUMULATING_AND_RETRACTING and not retractable:
        raise ValueError(f"{what} has no real retraction: use accumulating or discarding "
                         "panes, or an accumulation such as Sum or Count")


def _count(n: int) -> int:
    if isinstance(n, bool) or n < 1:
        raise ValueError(f"a count trigger needs a count >= 1, got {n}")
    return n


def _period(every: Duration | datetime.timedelta) -> int:
    ms = to_millis(every)
    if ms < 1:
        raise ValueError(f"a time trigger needs a period of at least 1 ms, got {ms} ms")
    return ms


# The state of an ApexTrigger (a bit set): the window's on-time moment has passed (its on-time pane
# fired, or the window was created behind the watermark); it fired a pane; it is a merged
# session behind the watermark whose parts had fired, so it must fire at once.
_DONE, _EMITTED, _SUPERSEDED = 1, 2, 4


class ApexTrigger(Trigger):
    """Apex's `TriggerOption` in Beam's trigger model.

    Apex counts tuples and processing time since the last pane of any kind (early, on-time,
    late), one counter shared by early and late firings, which the engine keeps for every pane
    (`TriggerContext.count`, `.last_fired`, `.fresh`); Apex's rules are conditions on them:

    - on-time pane: when the watermark reaches the window end, if `option.on_time`, and never
      for a window created behind the watermark;
    - count: after a tuple, at the N-th since the last pane (`early_count` before the window
      end, `late_count` after);
    - time: at a batch end, once the period has passed since the last pane (or the window's
      creation), for every live window, repeating unchanged panes in accumulating modes, never
      an empty discarding pane, and only changed panes once input has ended;
    - a merged session behind the watermark whose parts had fired fires at once.

    It never finishes; the window's data that no pane emitted comes out in its final LATE pane
    when the window is purged or input ends.
    """

    fires_empty_panes = True

    def __init__(self, option: TriggerOption) -> None:
        if not isinstance(option, TriggerOption):
            raise TypeError(f"ApexTrigger takes a TriggerOption, got {option!r}")
        self.option = option

    @property
    def only_updated(self) -> bool:
        return self.option.only_updated

    @property
    def uses_processing_time(self) -> bool:
        return bool(self.option.early_ms or self.option.late_ms)

    @property
    def has_on_time_pane(self) -> bool:
        return self.option.on_time

    def on_element(self, n: Node, c: TriggerContext) -> None:
        state = c.get(n) or 0
        if c.end_reached and not state & _DONE:  # created behind the watermark: no on-time pane
            c.put(n, state | _DONE)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        # A merged session is a new window (its count and last firing the engine merges).
        if c.end_reached:
            emitted = any(v is not None and v & _EMITTED for v in c.part_values(n))
            c.put(n, _DONE | (_SUPERSEDED if emitted else 0))

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        o = self.option
        state = c.get(n) or 0
        late = c.end_reached
        if o.on_time and late and not state & _DONE:
            return c.kind == WATERMARK  # the on-time pane
        if c.kind == ELEMENT:
            if state & _SUPERSEDED:
                return True
            count = o.late_count if late else o.early_count
            return count is not None and c.count >= count
        if c.kind == BATCH_END:
            period = o.late_ms if late else o.early_ms
            if not period or c.now - c.last_fired < period:
                return False
            # Nothing new: no discarding pane, and no repeats once input has ended.
            return c.fresh or (o.mode is not AccumulationMode.DISCARDING
                               and c.watermark != MAX_TIMESTAMP)
        return False

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        state = (c.get(n) or 0) | _EMITTED
        if c.end_reached:
            state |= _DONE
        c.put(n, state & ~_SUPERSEDED)

    def __repr__(self) -> str:
        return f"ApexTrigger({self.option!r})"
