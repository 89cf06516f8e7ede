"""`PendingMap`: a spout task's tracked tuples, their timeouts and the max-spout-pending bound.

Unlike Storm's two-bucket rotating map (whose real timeout is between 1x and 2x the configured
value), entries are kept in deadline order and expire at the first check at or after
`start + timeout`, so a timeout fires within one scheduler tick of the configured value.

>>> p = PendingMap(timeout_ms=30_000)
>>> p.add(root=11, msg_id="m1", stream="default", now_ms=0)
>>> p.add(root=12, msg_id="m2", stream="default", now_ms=5_000)
>>> p.reset(11, now_ms=10_000)            # reset_timeout restarts 11's clock
>>> p.next_deadline()
35000
>>> [(root, e.msg_id) for root, e in p.expire(now_ms=40_000)]
[(12, 'm2'), (11, 'm1')]
>>> len(p)
0
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class PendingEntry:
    __slots__ = ("msg_id", "stream", "start_ms", "touched_ms")

    def __init__(self, msg_id: Any, stream: str, now_ms: int) -> None:
        self.msg_id = msg_id
        self.stream = stream
        self.start_ms = now_ms  # for complete latency
        self.touched_ms = now_ms  # for the timeout; moved by reset_timeout


class PendingMap:
    def __init__(self, timeout_ms: int | None) -> None:
        self.timeout_ms = timeout_ms  # None: timeouts disabled
        self._entries: OrderedDict[int, PendingEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, root: int) -> bool:
        return root in self._entries

    def add(self, root: int, msg_id: Any, stream: str, now_ms: int) -> None:
        self._entries[root] = PendingEntry(msg_id, stream, now_ms)

    def pop(self, root: int) -> PendingEntry | None:
        return self._entries.pop(root, None)

    def reset(self, root: int, now_ms: int) -> None:
        entry = self._entries.get(root)
        if entry is not None:
            entry.touched_ms = now_ms
            self._entries.move_to_end(root)

    def next_deadline(self) -> int | None:
        """When the oldest entry times out, or None when nothing can time out."""
        if self.timeout_ms is None or not self._entries:
            return None
        first = next(iter(self._entries.values()))
        return first.touched_ms + self.timeout_ms

    def expire(self, now_ms: int) -> list[tuple[int, PendingEntry]]:
        """Remove and return the entries whose timeout has passed, oldest first."""
        if self.timeout_ms is None:
            return []
        out = []
        entries = self._entries
        horizon = now_ms - self.timeout_ms
        while entries:
            root, entry = next(iter(entries.items()))
            if entry.touched_ms > horizon:
                break
            del entries[root]
            out.append((root, entry))
        return out

    def items(self):
        return self._entries.items()
