"""Eviction policies: which of the events up to a window's end stay in the window.

Events are kept sorted by timestamp (then by source and arrival), so the events a window can see
are always a prefix of the queue, and the events that leave it are a prefix of that prefix.
`first_kept(ts, hi, end)` returns the index of the first event of the window among `ts[:hi]`;
everything before it has expired and can never be in a later window, whose end is later.

>>> CountEviction(2).first_kept([1, 2, 3, 4], hi=3, end=3)
1
>>> TimeEviction(10).first_kept([1, 5, 11, 15], hi=4, end=15)  # window (5, 15]
2
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from squall.tuple_windows.spec import WindowSpec


class CountEviction:
    """The window holds the last `n` events up to its end."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def first_kept(self, ts: Sequence[int], hi: int, end: float) -> int:
        return max(0, hi - self.n)

    def start(self, end: int) -> int | None:
        return None


class TimeEviction:
    """The window is (end - length, end]: an event whose age at the end is >= length is gone."""

    __slots__ = ("length_ms",)

    def __init__(self, length_ms: int) -> None:
        self.length_ms = length_ms

    def first_kept(self, ts: Sequence[int], hi: int, end: float) -> int:
        return min(hi, bisect_right(ts, end - self.length_ms, 0, hi))

    def start(self, end: int) -> int | None:
        return end - self.length_ms


def eviction_for(spec: WindowSpec) -> CountEviction | TimeEviction:
    if spec.length_count is not None:
        return CountEviction(spec.length_count)
    return TimeEviction(spec.length_ms)  # type: ignore[arg-type]


def aligned_end(ts: int, slide_ms: int) -> int:
    """The first multiple of `slide_ms` at or after `ts` (window ends are aligned to epoch 0).

    >>> aligned_end(603, 10), aligned_end(610, 10), aligned_end(-5, 10)
    (610, 610, 0)
    """
    return -(-ts // slide_ms) * slide_ms
