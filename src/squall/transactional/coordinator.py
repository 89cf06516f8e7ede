"""The transaction coordinator's rules (Storm's `TransactionalSpoutCoordinator`), runner-free.

Each active transaction id has a status: PROCESSING, PROCESSED or COMMITTING. `curr` is the
lowest uncommitted id and is durable, so a restarted topology goes on from it (and replays the
batch of an uncommitted id with the metadata its emitters stored).

- `sync()`: if `curr` is PROCESSED it becomes COMMITTING and its commit is emitted; then, while
  fewer than `max_active` ids are active, the next ids from `curr` are started with new
  attempts (their processing phases overlap; commits never do).
- `ack(kind, attempt)`: ignored unless `attempt` is the live attempt of its id (stale). A
  processed batch becomes PROCESSED; a committed one leaves, and `curr` moves on and is stored.
- `fail(kind, attempt)`: the id leaves the active set (even for a stale attempt, as in Storm);
  a live attempt also takes every later active id with it, so they are emitted again, in order,
  with new attempts. Otherwise an opaque spout could skip tuples.

>>> from squall.transactional.progress_store import MemoryStore
>>> c = Coordinator(MemoryStore("doc", 1), max_active=2)
>>> [(kind, a.transaction_id) for kind, a in c.sync()]
[('batch', 1), ('batch', 2)]
>>> first = c.active[1].attempt
>>> c.ack("batch", c.active[2].attempt); c.sync()   # 2 is processed, but 1 is not: no commit
[]
>>> c.ack("batch", first); [(k, a.transaction_id) for k, a in c.sync()]
[('commit', 1)]
>>> c.ack("commit", first); [(k, a.transaction_id) for k, a in c.sync()]
[('commit', 2), ('batch', 3)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.progress_store import CURR, Store, attempt_key

PROCESSING, PROCESSED, COMMITTING = "PROCESSING", "PROCESSED", "COMMITTING"


@dataclass
class Active:
    attempt: TransactionAttempt
    status: str


class Coordinator:
    def __init__(self, store: Store, max_active: int = 1,
                 ready: Callable[[int], bool] | None = None) -> None:
        if max_active < 1:
            raise ValueError(f"topology.max.spout.pending must be >= 1, got {max_active}")
        self.store = store
        self.max_active = max_active
        self.ready = ready or (lambda txid: True)
        self.curr: int = int(store.get(CURR, 1))
        self.active: dict[int, Active] = {}
        # What happened, in order: ("commit", txid) etc. Tests read it; bounded by the caller.
        self.committed: list[int] = []

    def new_attempt(self, txid: int) -> TransactionAttempt:
        """A fresh attempt id for `txid`: a stored counter, so it differs even after a restart."""
        n = int(self.store.get(attempt_key(txid), 0)) + 1
        self.store.put(attempt_key(txid), n)
        return TransactionAttempt(txid, n)

    def sync(self) -> list[tuple[str, TransactionAttempt]]:
        out: list[tuple[str, TransactionAttempt]] = []
        head = self.active.get(self.curr)
        if head is not None and head.status == PROCESSED:
            head.status = COMMITTING
            out.append(("commit", head.attempt))
        if len(self.active) < self.max_active:
            for txid in range(self.curr, self.curr + self.max_active):
                if txid in self.active or len(self.active) >= self.max_active:
                    continue
                if not self.ready(txid):
                    break  # later ids wait too: batches start in id order
                attempt = self.new_attempt(txid)
                self.active[txid] = Active(attempt, PROCESSING)
                out.append(("batch", attempt))
        return out

    def is_live(self, attempt: TransactionAttempt) -> bool:
        entry = self.active.get(attempt.transaction_id)
        return entry is not None and entry.attempt == attempt

    def ack(self, kind: str, attempt: TransactionAttempt) -> None:
        if not self.is_live(attempt):
            return  # a stale attempt: its id was failed and emitted again since
        txid = attempt.transaction_id
        entry = self.active[txid]
        if kind == "batch" and entry.status == PROCESSING:
            entry.status = PROCESSED
        elif kind == "commit" and entry.status == COMMITTING:
            del self.active[txid]
            self.committed.append(txid)
            self.curr = txid + 1
            self.store.put(CURR, self.curr)
            self.store.delete(attempt_key(txid))

    def fail(self, kind: str, attempt: TransactionAttempt) -> None:
        txid = attempt.transaction_id
        live = self.is_live(attempt)
        self.active.pop(txid, None)
        if live:
            for later in [t for t in self.active if t > txid]:
                del self.active[later]
