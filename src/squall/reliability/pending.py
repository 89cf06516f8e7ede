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

A runner whose work is transactional (Spark: a micro-batch commits or is replayed whole) *holds*
the entries it starts in a batch: their clocks start only when `arm` says the batch committed, so
a slow batch, or a batch killed and replayed, never times out the trees it carries.

>>> p = PendingMap(timeout_ms=1_000)
>>> p.hold(epoch=7)                       # what is added now belongs to batch 7
>>> p.add(root=21, msg_id="m", stream="default", now_ms=0)
>>> [root for root, _ in p.expire(now_ms=60_000)], len(p)   # batch 7 still in flight
([], 1)
>>> p.arm(through=7, now_ms=60_000)       # batch 7 committed at 60 s: the clock starts
>>> p.next_deadline()
61000
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any


class PendingEntry:
    __slots__ = ("msg_id", "start_ms", "stream", "touched_ms", "values")

    def __init__(self, msg_id: Any, stream: str, now_ms: int, values: Any = None) -> None:
        self.msg_id = msg_id
        self.stream = stream
        self.start_ms = now_ms  # for complete latency
        self.touched_ms = now_ms  # for the timeout; moved by reset_timeout
        # The emitted values, kept only when a dead tree must be sent to the dead-letter stream
        # (squall.reliability.retries); None otherwise, so tracking costs no more than before.
        self.values = values

    def __setstate__(self, state: Any) -> None:
        # Entries pickled before `values` existed have no such slot.
        slots = state[1] if isinstance(state, tuple) else state
        self.values = None
        for name, value in slots.items():
            setattr(self, name, value)


class PendingMap:
    def __init__(self, timeout_ms: int | None) -> None:
        self.timeout_ms = timeout_ms  # None: timeouts disabled
        self._entries: OrderedDict[int, PendingEntry] = OrderedDict()  # armed, deadline order
        self._held: dict[int, PendingEntry] = {}  # root -> entry whose clock has not started
        self._held_epoch: dict[int, int] = {}  # root -> the epoch (batch) it was added in
        self._epoch: int | None = None  # set by `hold`: new entries are held under it

    def __getstate__(self) -> dict[str, Any]:
        # The entries as columns, one list per field: pickling 100,000 entry objects one by one
        # took most of a reliable spout's snapshot (a spout reader snapshots every batch).
        armed, held = self._entries, self._held
        return {"version": _COLUMNS, "timeout_ms": self.timeout_ms, "epoch": self._epoch,
                "armed": _columns(armed), "held": _columns(held),
                "held_epochs": [self._held_epoch[root] for root in held]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("version") != _COLUMNS:
            # A snapshot of entry objects (written before the columns); those written before
            # entries could be held have none.
            self.__dict__.update({"_held": {}, "_held_epoch": {}, "_epoch": None, **state})
            return
        self.timeout_ms = state["timeout_ms"]
        self._epoch = state["epoch"]
        self._entries = OrderedDict(_entries(state["armed"]))
        self._held = dict(_entries(state["held"]))
        self._held_epoch = dict(zip(self._held, state["held_epochs"], strict=True))

    def __len__(self) -> int:
        return len(self._entries) + len(self._held)

    def __contains__(self, root: int) -> bool:
        return root in self._entries or root in self._held

    def add(self, root: int, msg_id: Any, stream: str, now_ms: int, values: Any = None) -> None:
        entry = PendingEntry(msg_id, stream, now_ms, values)
        if self._epoch is None:
            self._entries[root] = entry
        else:
            self._held[root] = entry
            self._held_epoch[root] = self._epoch

    def hold(self, epoch: int | None) -> None:
        """Hold the entries added from now on under `epoch` (None: add them armed again)."""
        self._epoch = epoch

    def arm(self, through: int, now_ms: int) -> None:
        """Start the clocks of the entries held under epochs up to `through`, at `now_ms`."""
        if not self._held:
            return
        ready = [root for root, epoch in self._held_epoch.items() if epoch <= through]
        for root in ready:
            entry = self._held.pop(root)
            del self._held_epoch[root]
            entry.touched_ms = now_ms
            self._entries[root] = entry  # now_ms is at or after every armed clock: order kept

    def restart_clocks(self, now_ms: int) -> None:
        """Every armed entry's timeout starts again at `now_ms` (a runner resuming after a
        stop, whose pending trees were not lost: the time it was down does not count)."""
        for entry in self._entries.values():
            entry.touched_ms = now_ms

    def pop(self, root: int) -> PendingEntry | None:
        entry = self._entries.pop(root, None)
        if entry is None and root in self._held:
            del self._held_epoch[root]
            return self._held.pop(root)
        return entry

    def reset(self, root: int, now_ms: int) -> None:
        entry = self._entries.get(root)
        if entry is not None:  # a held entry's clock has not started: nothing to reset
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

    def items(self) -> list[tuple[int, PendingEntry]]:
        return [*self._entries.items(), *self._held.items()]


_COLUMNS = 2  # the snapshot format of `PendingMap.__getstate__`: entries as columns


def _columns(entries: dict[int, PendingEntry]) -> tuple[list, ...]:
    """`entries` as (roots, msg ids, streams, starts, touched, values), in their order."""
    es = list(entries.values())  # a comprehension a field: a third of the time of zip(*rows)
    return (list(entries), [e.msg_id for e in es], [e.stream for e in es],
            [e.start_ms for e in es], [e.touched_ms for e in es], [e.values for e in es])


def _entries(columns: tuple[list, ...]) -> Iterator[tuple[int, PendingEntry]]:
    """The `(root, entry)` pairs of `_columns`' lists."""
    new = PendingEntry.__new__
    for root, msg_id, stream, start, touched, values in zip(*columns, strict=True):
        entry = new(PendingEntry)
        entry.msg_id, entry.stream, entry.start_ms = msg_id, stream, start
        entry.touched_ms, entry.values = touched, values
        yield root, entry
