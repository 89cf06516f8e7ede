"""Window options: which event-time windows a tuple belongs to.

A window is a plain `(start, end)` tuple of ints, the half-open span [start, end) in ms (plain
data: it pickles into the Spark runner's snapshots and sorts by start). Window options:

>>> TimeWindows(Duration.seconds(10)).assign(12_345)
[(10000, 20000)]
>>> TimeWindows(Duration.seconds(1)).assign(-1)   # floor, not Java's remainder
[(-1000, 0)]
>>> TimeWindows(Duration(1000)).slide_by(Duration(500)).assign(100)   # ordered by end
[(-500, 500), (0, 1000)]
>>> GlobalWindow().assign(42) == [GLOBAL_WINDOW]
True
>>> SessionWindows(Duration(30)).proto(100)
(100, 130)
>>> TimeWindows(Duration(1000)).slide_by(Duration(300))
Traceback (most recent call last):
...
ValueError: slide_by(300 ms) must divide the window duration (1000 ms)
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from squall.duration import Duration, to_millis

Window = tuple[int, int]

MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1
"""The end of time: the watermark once input has ended, and the end of the global window."""
GLOBAL_WINDOW: Window = (MIN_TIMESTAMP, MAX_TIMESTAMP)


def _ms(value: Duration | datetime.timedelta | int, what: str) -> int:
    ms = to_millis(value)
    if ms < 1:
        raise ValueError(f"{what} must be at least 1 ms, got {ms} ms")
    return ms


class WindowOption:
    """Base of the window options; `assign(ts)` lists the windows of a tuple at `ts`."""

    merging = False

    def assign(self, ts: int) -> list[Window]:
        raise NotImplementedError


@dataclass(frozen=True)
class GlobalWindow(WindowOption):
    """One window over all of time; its on-time pane fires when input ends."""

    def assign(self, ts: int) -> list[Window]:
        return [GLOBAL_WINDOW]


class TimeWindows(WindowOption):
    """Fixed (tumbling) windows of `duration`, or sliding ones with `slide_by(s)`."""

    def __init__(self, duration: Duration | datetime.timedelta | int,
                 slide: Duration | datetime.timedelta | int | None = None) -> None:
        self.duration_ms = _ms(duration, "window duration")
        self.slide_ms = self.duration_ms if slide is None else _ms(slide, "slide")
        if self.duration_ms % self.slide_ms:
            raise ValueError(f"slide_by({self.slide_ms} ms) must divide the window duration "
                             f"({self.duration_ms} ms)")

    def slide_by(self, slide: Duration | datetime.timedelta | int) -> TimeWindows:
        """Sliding windows: a new window every `slide`, which must divide the duration."""
        return TimeWindows(self.duration_ms, slide)

    @property
    def sliding(self) -> bool:
        return self.slide_ms != self.duration_ms

    def assign(self, ts: int) -> list[Window]:
        d, s = self.duration_ms, self.slide_ms
        last = ts - ts % s  # Python's % floors: right for negative timestamps too
        # Starts from the earliest to the last: windows ordered by end (then start), as Apex.
        return [(b, b + d) for b in range(last - d + s, last + 1, s)]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TimeWindows) and other.duration_ms == self.duration_ms
                and other.slide_ms == self.slide_ms)

    def __hash__(self) -> int:
        return hash((self.duration_ms, self.slide_ms))

    def __repr__(self) -> str:
        if self.sliding:
            return f"TimeWindows({self.duration_ms} ms).slide_by({self.slide_ms} ms)"
        return f"TimeWindows({self.duration_ms} ms)"


class SessionWindows(WindowOption):
    """Per-key sessions: a tuple at ts opens [ts, ts + min_gap); sessions that strictly overlap
    merge, transitively (windows that only touch stay apart, as in Beam)."""

    merging = True

    def __init__(self, min_gap: Duration | datetime.timedelta | int) -> None:
        self.gap_ms = _ms(min_gap, "session gap")

    def proto(self, ts: int) -> Window:
        return (ts, ts + self.gap_ms)

    def assign(self, ts: int) -> list[Window]:
        return [self.proto(ts)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SessionWindows) and other.gap_ms == self.gap_ms

    def __hash__(self) -> int:
        return hash(self.gap_ms)

    def __repr__(self) -> str:
        return f"SessionWindows({self.gap_ms} ms)"
