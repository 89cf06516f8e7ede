"""`WatermarkTracker`: event-time progress over a bolt's input streams.

The watermark is the smallest, over input streams (source component and stream), of the largest
timestamp seen on that stream, minus the lag. None is produced until every input stream has
delivered a tuple, and it only ever increases (the first one is at least 1, as in Storm). A tuple
is late when its timestamp is below the current watermark.

>>> t = WatermarkTracker([("a", "default")], lag_ms=5)
>>> t.track(("a", "default"), 100); t.track(("a", "default"), 110); t.watermark
105
>>> t.track(("a", "default"), 104); t.watermark  # out of order within the lag: not late
105
>>> t.is_late(104), t.is_late(105)
(True, False)
>>> two = WatermarkTracker([("a", "default"), ("b", "default")], lag_ms=5)
>>> two.track(("a", "default"), 110); two.watermark is None
True
>>> two.track(("b", "default"), 98); two.watermark
93
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

INFINITY = math.inf


class WatermarkTracker:
    """Per-stream largest timestamps and the watermark they give; plain picklable state."""

    def __init__(self, streams: Iterable[Hashable], lag_ms: int) -> None:
        self.streams = frozenset(streams)
        self.lag_ms = lag_ms
        self.max_ts: dict[Hashable, int] = {}
        # Updated with every tuple, not on a timer: which tuples are late then depends only on
        # the order tuples reach the task, never on when a runner's clock or batches tick.
        self.watermark: float | int | None = None

    def is_late(self, ts: int) -> bool:
        return self.watermark is not None and ts < self.watermark

    def track(self, stream: Hashable, ts: int) -> None:
        seen = self.max_ts.get(stream)
        if seen is not None and ts <= seen:
            return  # no stream's largest timestamp moved: neither did the watermark
        max_ts = self.max_ts
        max_ts[stream] = ts
        if self.watermark == INFINITY:
            return
        if len(max_ts) == 1 and (not self.streams or stream in self.streams):
            # One input stream (the common case): its largest timestamp is the minimum.
            if len(self.streams) > 1:
                return  # the other streams have not delivered yet
            candidate = ts - self.lag_ms
        else:
            required = self.streams or max_ts.keys()
            if not all(s in max_ts for s in required):
                return
            candidate = min(max_ts[s] for s in required) - self.lag_ms
        if candidate > (self.watermark if self.watermark is not None else 0):
            self.watermark = candidate

    def advance(self, watermark: int | None) -> None:
        """A watermark given from outside (the upstream sources' partitions): kept if higher."""
        if watermark is not None and self.watermark != INFINITY and (
                self.watermark is None or watermark > self.watermark):
            self.watermark = watermark

    def advance_to_infinity(self) -> None:
        """All input is over: every window can close, and any later tuple is late."""
        self.watermark = INFINITY
