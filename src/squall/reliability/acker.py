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
Outcome(kind='ack', root=7, spout_task=1, latency_ms=50, error=None, records=None, tuples=1, \
startup=False)
>>> ledger.ack(7, 0b0100, now_ms=160).kind                     # the root is gone: unknown
'unknown'

A root with the top bit set stands for one record of a range tree (`record_root`): a Spark range
is one tree for all its records, and with a retry limit its records' tuples are anchored to such
roots, so a failure names the record. The ledger folds them into the range's root for the XOR and
keeps the failed records' indices: the tree completes once everything else is acked, and the
outcome says which records failed (`Outcome.records`), as one tree per record would.

>>> r = range_root(0xfeed_beef_1234_5678)
>>> one = record_root(r, 3)
>>> base_root(one) == r and record_index(one) == 3, record_index(r)
(True, None)
>>> ledger = AckerLedger()
>>> ledger.apply(r, 0b11, now_ms=0, spout_task=1)                    # a range of two records
>>> ledger.apply(r, 0b01, now_ms=5, failed_records=(1,))             # record 1's tuple fails
>>> done = ledger.apply(r, 0b10, now_ms=9)                           # record 0's tuple is acked
>>> done.kind, done.records
('fail', (1,))

Differences from Storm, on purpose: an ack for a root the ledger never saw, or saw complete, is
reported (`unknown`) rather than left to create an orphan entry that expires silently; acks that
arrive for a tree that already failed or timed out are recognised (`late`) and dropped quietly.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

RECORD_FLAG = 1 << 63  # set on record roots and on the range roots they fold into
INDEX_BITS = 20  # a record root's index (plus one) in its low bits; 0: the range itself
_INDEX_MASK = (1 << INDEX_BITS) - 1
MAX_INDEXED = _INDEX_MASK - 1  # records past this index of a range are not told apart


def plain_root(bits: int) -> int:
    """A root id of an ordinary tree, from 64 random bits: the top bit clear."""
    return bits & ~RECORD_FLAG


def range_root(bits: int) -> int:
    """The root of a range tree whose records are told apart, from 64 random bits."""
    return (bits | RECORD_FLAG) & ~_INDEX_MASK


def record_root(root: int, index: int) -> int:
    """The root the tuples of a range's `index`-th record are anchored to (the range's own
    root past `MAX_INDEXED`, where a failure can only fail the whole range)."""
    return root | (index + 1) if index <= MAX_INDEXED else root


def base_root(root: int) -> int:
    """The tree a root belongs to: a record root's range, any other root itself."""
    return root & ~_INDEX_MASK if root & RECORD_FLAG else root


def record_index(root: int) -> int | None:
    """The record a record root stands for; None for any other root."""
    if not root & RECORD_FLAG or not root & _INDEX_MASK:
        return None
    return (root & _INDEX_MASK) - 1


class Outcome(NamedTuple):
    """What the ledger decided for a root: `ack`, `fail`, `reset`, `late` or `unknown`.

    A runner may add to a `fail` the `(kind, text)` of the error that failed the tree, for the
    dead-letter stream (squall.reliability.retries). `records`: for a range tree whose records
    are told apart, the indices of the records whose tuples failed; the others completed.
    `tuples`: how many spout tuples the tree holds, when a runner told the ledger (a range).
    `startup`: the tree waited for its run's start-up (a Spark run's first micro-batch starts
    the Python workers): its time is not a latency of tuples, so it is left out of the spout's
    complete latency (the runner reports start-up apart)."""

    kind: str
    root: int
    spout_task: int
    latency_ms: int
    error: tuple[str, str] | None = None
    records: tuple[int, ...] | None = None
    tuples: int = 1  # how many spout tuples the tree holds (a range's records), for the counts
    startup: bool = False  # the tree waited for the run's start-up: no complete latency


class _Entry:
    __slots__ = ("failed", "records", "spout_task", "start_ms", "tuples", "val")

    def __init__(self, start_ms: int) -> None:
        self.val = 0
        self.spout_task = -1
        self.failed = False
        self.records: set[int] | None = None  # failed records of a range (`record_root`)
        self.start_ms = start_ms
        self.tuples = 1


class AckerLedger:
    """Pending tuple trees of one acker task.

    `memory_ms` is how long a failed or timed-out root is remembered, so that acks from its other
    branches are recognised as late rather than unknown (the message timeout is a good value).
    """

    def __init__(self, memory_ms: int = 30_000) -> None:
        self._pending: dict[int, _Entry] = {}
        # The pending trees by root, for a runner's hot path: it may XOR an ack's value into an
        # entry's `val` itself, and must then call `ack(root, 0, now)` when that leaves `val` at
        # 0 with `spout_task >= 0` (the tree completed: `ack` settles it). Any other message
        # goes through the methods.
        self.entries = self._pending
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
        failed_records: Iterable[int] = (),
        tuples: int | None = None,
    ) -> Outcome | None:
        """Apply many messages for `root` at once: their XOR, an init's task, any fail.

        A runner that aggregates a micro-batch's ack messages per root (a distributed `bit_xor`)
        feeds the result here; the outcome equals applying the messages one by one.
        `failed_records`: records of a range tree that failed (their XOR still counts); the
        tree then fails when the rest of it completes, naming them. `tuples`: how many spout
        tuples the tree holds (a range's records), carried to its outcome.
        """
        entry = self._pending.get(root)
        if entry is None:
            if spout_task is None:
                if root in self._gone:
                    return Outcome("late", root, -1, 0)
            elif not xor and not failed and not failed_records:
                # A whole tree in one go (init and every ack in the same micro-batch): what the
                # lines below would decide, without an entry.
                start = now_ms if start_ms is None else start_ms
                return Outcome("ack", root, spout_task, now_ms - start,
                               tuples=1 if tuples is None else tuples)
            # Acks may precede their init across micro-batches on a distributed runner.
            entry = self._pending[root] = _Entry(now_ms if start_ms is None else start_ms)
        entry.val ^= xor
        if spout_task is not None:
            entry.spout_task = spout_task
            if start_ms is not None:
                entry.start_ms = start_ms  # latency counts from the spout's emit
        if failed:
            entry.failed = True
        for index in failed_records:
            if entry.records is None:
                entry.records = set()
            entry.records.add(index)
        if tuples is not None:
            entry.tuples = tuples
        return self._settle(root, entry, now_ms)

    def forget(self, root: int, now_ms: int) -> None:
        """The spout timed `root` out: drop it, and treat its later acks as late."""
        self._pending.pop(root, None)
        self._remember_gone(root, now_ms)

    def snapshot(self) -> dict[int, tuple]:
        """The pending entries as plain data, to persist between runs or micro-batches."""
        return {r: (e.val, e.spout_task, e.failed, e.start_ms,
                    None if e.records is None else sorted(e.records), e.tuples)
                for r, e in self._pending.items()}

    @classmethod
    def restore(cls, snap: dict[int, tuple], memory_ms: int) -> AckerLedger:
        ledger = cls(memory_ms)
        for root, (val, task, failed, start, *rest) in snap.items():
            e = ledger._pending[root] = _Entry(start)
            e.val, e.spout_task, e.failed = val, task, failed
            if rest and rest[0] is not None:  # snapshots since record roots exist
                e.records = set(rest[0])
            if len(rest) > 1:
                e.tuples = rest[1]
        return ledger

    def _settle(self, root: int, entry: _Entry, now_ms: int) -> Outcome | None:
        if entry.spout_task < 0:
            return None  # as in Storm, nothing is reported before the init names the spout task
        if entry.failed:
            del self._pending[root]
            self._remember_gone(root, now_ms)
            return Outcome("fail", root, entry.spout_task, now_ms - entry.start_ms,
                           tuples=entry.tuples)
        if entry.val == 0:
            del self._pending[root]
            if entry.records:
                self._remember_gone(root, now_ms)
                return Outcome("fail", root, entry.spout_task, now_ms - entry.start_ms,
                               records=tuple(sorted(entry.records)), tuples=entry.tuples)
            return Outcome("ack", root, entry.spout_task, now_ms - entry.start_ms,
                           tuples=entry.tuples)
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
