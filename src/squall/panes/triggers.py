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
from squall.panes.pane_info import EARLY, LATE, ON_TIME

__all__ = ["EARLY", "LATE", "ON_TIME", "AccumulationMode", "TriggerOption", "validate_mode"]


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
