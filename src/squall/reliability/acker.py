"""`AckerLedger`: Storm's acker, one per acker task, as a pure-Python object.

Every tuple tree has a random 64-bit root id. The ledger keeps, per root, the XOR of every edge id
it was told about: the spout's init XORs in the edge ids of the tuples it emitted; each ack XORs in
the acked tuple's own edge id and the edge ids of the tuples anchored to it. Each edge id goes in
exactly twice (once when created, once when acked), so the value returns to zero exactly when every
tuple of the tree was acked.

>>> ledger = AckerLedger()
>>> ledger.init(root=7, xor=0b1010, spout_task=1, now_ms=100)  # two tuples, edges 0b1000, 0b0010
>>> ledger.ack(7, 0b1000, now_ms=120)                          # first acked, anchors nothing
>>> ledger.ack(7, 0b0010 ^ 0b0100, now_ms=130)                 # second acked, anchors edge 0b0100
>>> ledger.ack(7, 0b0100, now_ms=150)                          # the child is acked: tree complete
Outcome(kind='ack', root=7, spout_task=1, latency_ms=50, error=None)
>>> ledger.ack(7, 0b0100, now_ms=160)                          # the root is gone: unknown
Outcome(kind='unknown', root=7, spout_task=-1, latency_ms=0, error=None)

Differences from Storm, on purpose: an ack for a root the ledger never saw, or saw complete, is
reported (`unknown`) rather than left to create an orphan entry that expires silently; acks that
arrive for a tree that already failed or timed out are recognised (`late`) and dropped quietly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class Outcome(NamedTuple):
    """What the ledger decided for a root: `ack`, `fail`, `reset`, `late` or `unknown`.

    A runner may add to a `fail` the `(kind, text)` of the error that failed the tree, for the
    dead-letter stream (squall.reliability.retries)."""

    kind: str
    root: int
    spout_task: int
    latency_ms: int
    error: tuple[str, str] | None = None


class _Entry:
    __slots__ = ("failed", "spout_task", "start_ms", "val")

    def __init__(self, start_ms: int) -> None:
        self.val = 0
        self.spout_task = -1
        self.failed = False
        self.start_ms = start_ms


class AckerLedger:
    """Pending tuple trees of one acker task.

    `memory_ms` is how long a failed or timed-out root is remembered, so that acks from its other
    branches are recognised as late rather than unknown (the message timeout is a good value).
    """

    def __init__(self, memory_ms: int = 30_000) -> None:
        self._pending: dict[int, _Entry] = {}
        self._gone: OrderedDict[int, int] = OrderedDict()  # failed or timed out root -> when
        self.memory_ms = memory_ms

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, root: int) -> bool:
        return root in self._pending

    def pending_roots(self) -> list[int]:
        return list(self._pending)

    def init(self, root: int, xor: int, spout_task: int, now_ms: int) -> Outcome | None:
        entry = self._pending.get(root)
        if entry is None:
            entry = self._pending[root] = _Entry(now_ms)
        entry.val ^= xor
        entry.spout_task = spout_task
        entry.start_ms = now_ms
        return self._settle(root, entry, now_ms)

    def ack(self, root: int, value: int, now_ms: int) -> Outcome | None:
        entry = self._pending.get(root)
        if entry is None:
            return self._absent(root, now_ms)
        entry.val ^= value
        if entry.val == 0 and entry.spout_task >= 0:
            del self._pending[root]
            return Outcome("ack", root, entry.spout_task, now_ms - entry.start_ms)
        return None

    def fail(self, root: int, now_ms: int) -> Outcome | None:
        entry = self._pending.get(root)
        if entry is None:
            return self._absent(root, now_ms)
        entry.failed = True
        return self._settle(root, entry, now_ms)

    def reset(self, root: int, now_ms: int) -> Outcome | None:
        entry = self._pending.get(root)
        if entry is None:
            return self._absent(root, now_ms)
        return Outcome("reset", root, entry.spout_task, 0)

    def apply(
        self,
        root: int,
        xor: int,
        now_ms: int,
        *,
        spout_task: int | None = None,
        failed: bool = False,
        start_ms: int | None = None,
    ) -> Outcome | None:
        """Apply many messages for `root` at once: their XOR, an init's task, any fail.

        A runner that aggregates a micro-batch's ack messages per root (a distributed `bit_xor`)
        feeds the result here; the outcome equals applying the messages one by one.
        """
        entry = self._pending.get(root)
        if entry is None:
            if spout_task is None and root in self._gone:
                return Outcome("late", root, -1, 0)
            # Acks may precede their init across micro-batches on a distributed runner.
            entry = self._pending[root] = _Entry(now_ms if start_ms is None else start_ms)
        entry.val ^= xor
        if spout_task is not None:
            entry.spout_task = spout_task
            if start_ms is not None:
                entry.start_ms = start_ms  # latency counts from the spout's emit
        if failed:
            entry.failed = True
        return self._settle(root, entry, now_ms)

    def forget(self, root: int, now_ms: int) -> None:
        """The spout timed `root` out: drop it, and treat its later acks as late."""
        self._pending.pop(root, None)
        self._remember_gone(root, now_ms)

    def snapshot(self) -> dict[int, tuple[int, int, bool, int]]:
        """The pending entries as plain data, to persist between runs or micro-batches."""
        return {r: (e.val, e.spout_task, e.failed, e.start_ms) for r, e in self._pending.items()}

    @classmethod
    def restore(cls, snap: dict[int, tuple[int, int, bool, int]], memory_ms: int) -> AckerLedger:
        ledger = cls(memory_ms)
        for root, (val, task, failed, start) in snap.items():
            e = ledger._pending[root] = _Entry(start)
            e.val, e.spout_task, e.failed = val, task, failed
        return ledger

    def _settle(self, root: int, entry: _Entry, now_ms: int) -> Outcome | None:
        if entry.spout_task < 0:
            return None  # as in Storm, nothing is reported before the init names the spout task
        if entry.failed:
            del self._pending[root]
            self._remember_gone(root, now_ms)
            return Outcome("fail", root, entry.spout_task, now_ms - entry.start_ms)
        if entry.val == 0:
            del self._pending[root]
            return Outcome("ack", root, entry.spout_task, now_ms - entry.start_ms)
        return None

    def _absent(self, root: int, now_ms: int) -> Outcome:
        self._expire_gone(now_ms)
        if root in self._gone:
            return Outcome("late", root, -1, 0)
        return Outcome("unknown", root, -1, 0)

    def _remember_gone(self, root: int, now_ms: int) -> None:
        self._gone[root] = now_ms
        self._gone.move_to_end(root)
        self._expire_gone(now_ms)

    def _expire_gone(self, now_ms: int) -> None:
        gone = self._gone
        horizon = now_ms - self.memory_ms
        while gone:
            root, when = next(iter(gone.items()))
            if when > horizon:
                break
            del gone[root]
