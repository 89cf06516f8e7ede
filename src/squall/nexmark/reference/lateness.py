"""Event time for the reference: each event's source-partition watermark and, per window, whether
it counts on time, counts late or is dropped.

The streaming queries read the stream as a partitioned source (partition `i` of `n`: positions
`i, i + n, ...`, as `NexmarkSource` and the partition files split it), and their windowed operators
judge each tuple against *its own partition's* watermark at its position (`squall.
partition_watermarks`): the largest event time of the events before it in its partition, less the
watermark delay. Under Beam's lateness rule (squall's default with Beam's triggers):

- in a window ending at or before that watermark, the tuple is **late** (its window's on-time pane
  has fired, in source order): it counts in a late pane;
- in a window whose end + allowed lateness is at or before that watermark, the window has
  **expired**: the tuple is **dropped** from it (it still counts in its other windows);
- otherwise it counts **on time**.

The first event of a partition has no watermark: on time.

>>> from squall.nexmark.model import Bid
>>> bid = lambda ts: Bid(1000, 1001, 1, "", "", ts, "")
>>> stream = [bid(0), bid(12_000), bid(9_000), bid(3_000)]     # one partition
>>> time = EventTime(watermark_delay_ms=1_000, allowed_lateness_ms=5_000)
>>> [(e.date_time, w, s) for e, w, s in judge(stream, time, fixed(10_000))]
[(0, (0, 10000), 'on_time'), (12000, (10000, 20000), 'on_time'), (9000, (0, 10000), 'late'), \
(3000, (0, 10000), 'late')]
>>> watermarks(stream, time)                  # 12 s - 1 s: [0, 10 s) + 5 s has not expired
[None, -1000, 11000, 11000]
>>> [s for *_, s in judge(stream, EventTime(watermark_delay_ms=1_000), fixed(10_000))]
['on_time', 'on_time', 'dropped', 'dropped']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from squall.nexmark.model import Event

Window = tuple[int, int]
"""A window `[start, end)` in milliseconds of event time."""

ON_TIME, LATE, DROPPED = "on_time", "late", "dropped"


@dataclass(frozen=True)
class EventTime:
    """How the streaming query meets the stream: `partitions` strided source partitions, the
    windowed operators' `watermark_delay_ms` and `allowed_lateness_ms` (Beam's rule).

    >>> EventTime(partitions=0)
    Traceback (most recent call last):
    ValueError: EventTime: partitions must be a positive int, got 0
    """

    partitions: int = 1
    watermark_delay_ms: int = 0
    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        if not _int(self.partitions) or self.partitions < 1:
            raise ValueError(f"EventTime: partitions must be a positive int, got "
                             f"{self.partitions!r}")
        for name in ("watermark_delay_ms", "allowed_lateness_ms"):
            value = getattr(self, name)
            if not _int(value) or value < 0:
                raise ValueError(f"EventTime: {name} must be an int >= 0, got {value!r}")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


IN_ORDER = EventTime()
"""One partition, no watermark delay, no allowed lateness: an event behind an earlier one of its
partition is dropped from every window that earlier one's time has passed."""


def watermarks(events: Iterable[Event], time: EventTime) -> list[int | None]:
    """Per event, in stream order: its partition's watermark just before it (the largest event
    time earlier in its partition, less the delay), None for a partition's first event."""
    largest: list[int | None] = [None] * time.partitions
    out: list[int | None] = []
    for position, e in enumerate(events):
        p = position % time.partitions
        before = largest[p]
        out.append(None if before is None else before - time.watermark_delay_ms)
        if before is None or e.date_time > before:
            largest[p] = e.date_time
    return out


def status(window: Window, watermark: int | None, time: EventTime) -> str:
    """`ON_TIME`, `LATE` or `DROPPED`: a tuple in `window` judged against `watermark`."""
    if watermark is None or watermark < window[1]:
        return ON_TIME
    if window[1] + time.allowed_lateness_ms <= watermark:
        return DROPPED
    return LATE


def judge(events: Iterable[Event], time: EventTime,
          assign: Callable[[Event], list[Window]]) -> Iterator[tuple[Event, Window, str]]:
    """Every (event, window, status) in stream order, for the windows `assign` gives an event
    (none: the event is not in the query)."""
    stream = list(events)
    for e, w in zip(stream, watermarks(stream, time), strict=True):
        for window in assign(e):
            yield e, window, status(window, w, time)


def fixed(size_ms: int) -> Callable[[Event], list[Window]]:
    """Tumbling windows `[k size, (k + 1) size)`."""
    return sliding(size_ms, size_ms)


def sliding(size_ms: int, period_ms: int) -> Callable[[Event], list[Window]]:
    """Windows of `size_ms` starting every `period_ms` (Beam's `SlidingWindows`): an event at `ts`
    is in each `[b, b + size)` with `b` a multiple of the period and `ts - size < b <= ts`,
    earliest end first.

    >>> from squall.nexmark.model import Bid
    >>> sliding(10_000, 5_000)(Bid(1, 1, 1, "", "", 12_000, ""))
    [(5000, 15000), (10000, 20000)]
    """
    if not _int(size_ms) or not _int(period_ms) or size_ms < 1 or period_ms < 1:
        raise ValueError(f"windows: size_ms and period_ms must be positive ints, got "
                         f"{size_ms!r} and {period_ms!r}")

    def assign(e: Event) -> list[Window]:
        ts = e.date_time
        last = ts - ts % period_ms
        starts = range(last, ts - size_ms, -period_ms)
        return [(b, b + size_ms) for b in reversed(starts)]
    return assign
