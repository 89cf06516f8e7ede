"""What every pane says about itself (Beam's `PaneInfo`), and the windowing choices around it.

A pane fired by `squall.panes.engine.WindowedEngine` is the tuple
`(key, window_start, window_end, value, timing, pane_index, is_retraction, is_first, is_last,
on_time_index, timestamp)`; `PaneInfo.of(pane)` reads its pane info as a typed value:

- `timing`: `EARLY` (the watermark had not reached the window end), `ON_TIME` (the first pane
  at or after it, fired by the watermark), `LATE` (any later one);
- `index`: 0, 1, 2, ... per (key, window); `is_first` is `index == 0`;
- `on_time_index`: Beam's non-speculative index: -1 for an early pane, 0 for the on-time pane
  (or the first late one when there was none), then 1, 2, ...;
- `is_last`: no pane of this (key, window) follows: its trigger finished, or the window is
  purged (end + allowed lateness reached) or input ended;
- `timestamp`: the pane's output timestamp (`TimestampCombiner`).

>>> pane = ("k", 0, 1000, 5, "ON_TIME", 1, False, False, True, 0, 999)
>>> PaneInfo.of(pane)
PaneInfo(timing='ON_TIME', index=1, on_time_index=0, is_first=False, is_last=True, timestamp=999)
>>> TimestampCombiner.OUTPUT_AT_EOW.value, OnTimeBehavior.FIRE_ALWAYS.value
('end_of_window', 'fire_always')
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EARLY, ON_TIME, LATE = "EARLY", "ON_TIME", "LATE"
"""Pane timings: before the watermark reaches the window end, at it, after it."""

PANE_INFO_FIELDS = ("is_first", "is_last", "on_time_index", "timestamp")
"""The fields an operator built with `pane_info=True` adds after `is_retraction`."""


@dataclass(frozen=True, slots=True)
class PaneInfo:
    """The pane info of one pane (Beam's `PaneInfo`, plus the pane's output timestamp)."""

    timing: str
    index: int
    on_time_index: int
    is_first: bool
    is_last: bool
    timestamp: int

    @classmethod
    def of(cls, pane: Sequence[Any]) -> PaneInfo:
        """The pane info of an engine pane (the 11-tuple of the module doc), or of an operator's
        output row with `pane_info=True` (with `key` first, or without it: non-keyed)."""
        if len(pane) == 10:  # a non-keyed operator's row: no key
            pane = (None, *pane)
        (_k, _s, _e, _v, timing, index, _r, is_first, is_last, on_time_index,
         timestamp) = pane
        return cls(timing, index, on_time_index, is_first, is_last, timestamp)

    @classmethod
    def of_tuple(cls, tup: Any) -> PaneInfo:
        """The pane info of a pane as a downstream component receives it (a `Tuple` from an
        operator built with `pane_info=True`), read by field name."""
        return cls(tup["timing"], tup["pane_index"], tup["on_time_index"], tup["is_first"],
                   tup["is_last"], tup["timestamp"])


class OnTimeBehavior(enum.Enum):
    """Whether the on-time pane fires when nothing arrived since the previous pane (Beam's
    `Window.OnTimeBehavior`)."""

    FIRE_ALWAYS = "fire_always"
    """Beam's default: the on-time pane always fires, also empty (a discarding pane after early
    firings took everything), so a consumer can treat it as "the window is complete"."""
    FIRE_IF_NON_EMPTY = "fire_if_non_empty"
    """Only if something arrived since the previous pane."""


class LatenessRule(enum.Enum):
    """When a tuple behind the watermark is too late to count (dropped, or sent to the late
    stream), given the allowed lateness L and the watermark W.

    With windows of 10 s, L = 5 s and W = 12 s, a tuple at 6 s is 6 s behind W: Apex drops it
    (6 > L), Beam puts it in window [0, 10), which has not expired (10 + 5 > 12), as a LATE pane.

    >>> from squall.panes.accumulations import Sum
    >>> from squall.panes.beam_triggers import AfterCount, AfterWatermark
    >>> from squall.panes.engine import WindowedEngine
    >>> from squall.panes.windows import TimeWindows
    >>> def counts(rule):  # whether the tuple at 6 s counts
    ...     e = WindowedEngine(TimeWindows(10_000), Sum(), AfterWatermark(late=AfterCount(1)),
    ...                        allowed_lateness_ms=5_000, lateness_rule=rule)
    ...     e.process("k", 1_000, 1, now=0)
    ...     e.advance(12_000, now=0)
    ...     return e.process("k", 6_000, 3, now=0)
    >>> counts(LatenessRule.WINDOW_EXPIRED), counts(LatenessRule.BEHIND_WATERMARK)
    (True, False)
    """

    WINDOW_EXPIRED = "window_expired"
    """Beam's rule, the default with Beam's triggers: too late only in a window that has
    expired (its end + L at or before W); a tuple is dropped when every window it belongs to
    has, and counts in the others (sliding windows)."""
    BEHIND_WATERMARK = "behind_watermark"
    """Apex's rule, the default with `TriggerOption`: too late once its timestamp is more than
    L behind W, whatever its windows."""


class ClosingBehavior(enum.Enum):
    """Whether the final pane fires when a window is purged (or input ends) with nothing new
    since its previous pane (Beam's `Window.ClosingBehavior`)."""

    FIRE_IF_NON_EMPTY = "fire_if_non_empty"
    """Beam's default: a final pane only for data no pane has emitted yet."""
    FIRE_ALWAYS = "fire_always"
    """Always a final pane (`is_last`), also empty: every (key, window) ends with one."""


class TimestampCombiner(enum.Enum):
    """The output timestamp of a pane (Beam's `TimestampCombiner`), computed over the
    timestamps of the tuples that arrived since the previous pane of its (key, window)."""

    OUTPUT_AT_EOW = "end_of_window"
    """The window's last instant, `window_end - 1` (Beam's default)."""
    OUTPUT_AT_EARLIEST = "earliest"
    """The smallest timestamp; `window_end - 1` for a pane with no new tuple."""
    OUTPUT_AT_LATEST = "latest"
    """The largest timestamp; `window_end - 1` for a pane with no new tuple."""
