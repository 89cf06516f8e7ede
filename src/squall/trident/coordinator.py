"""`BatchCoordinator`: which transaction comes next, each spout's batch for it, and the commit
record; shared by both runners (Storm's `MasterBatchCoordinator` and spout coordinators).

Every spout of a topology takes part in every transaction (txid 1, 2, 3, ...), as in Storm.
The next txid is kept in the transactional progress store (`squall.transactional.progress_store`,
a directory under the checkpoint location), written after the batch's state updates: a crash
before the write replays the same txid, which transactional and opaque map states recognise.

>>> from squall.trident import TridentTopology, FixedBatchSpout
>>> from squall.trident.plan import trident_plan
>>> t = TridentTopology(); _ = t.new_stream("s", FixedBatchSpout(["x"], 1, [1], [2]))
>>> c = BatchCoordinator(trident_plan(t.build()), {}, "doc")
>>> c.open()
>>> c.next_txid, c.emit(1), c.exhausted()
(1, {'s': [[(1,)]]}, False)
>>> c.commit(1); c.commit(2); c.next_txid, c.exhausted()
(3, True)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from squall.errors import InvalidTopologyError, SquallError, TransactionFailedError
from squall.reliability.retries import RetryPolicy
from squall.transaction_kernel.progress_store import CURR, open_store
from squall.trident.plan import (
    PLAN_FORMAT,
    PersistNode,
    Plan,
    SpoutNode,
    WindowNode,
    check_plan_format,
)
from squall.trident.spouts import (
    NON_TRANSACTIONAL,
    OPAQUE,
    TRANSACTIONAL,
    FileReport,
    MalformedLine,
    SpoutEmitter,
)

# How many attempts a failing transaction gets (unset: replayed for ever, as Storm does).
MAX_ATTEMPTS = "squall.trident.max.attempts"
TIME = "batch-time"  # the store's key of the last transaction's processing time
FORMAT = "plan-format"  # the store's key of the plan format its progress was recorded under
PAUSE_SLICE_MS = 50  # a pause between attempts looks at the stop this often


def retry_pause_ms(attempt: int) -> int:
    """The pause before attempt `attempt + 1` of a failed transaction: replayed for ever by
    default, as Storm does, but not in a tight loop: the spouts' default backoff
    (`squall.reliability.retries.RetryPolicy`: 0.1 s, 0.2 s, ... up to 10 s), so a failure
    that persists (a bug, a store that is down) does not spin.

    >>> [retry_pause_ms(a) for a in (1, 2, 3, 8, 20)]
    [100, 200, 400, 10000, 10000]
    """
    return _PAUSES.delay_ms(attempt)


_PAUSES = RetryPolicy()
Batches = TypeVar("Batches")
Output = TypeVar("Output")
_log = logging.getLogger("squall")


class TransactionAbandoned(Exception):
    """A failed transaction that is not tried again because the run is stopping: the stop ends
    the run, and a restart on the same checkpoint replays the transaction."""

    def __init__(self, txid: int, attempts: int, error: Exception) -> None:
        super().__init__(f"Trident transaction {txid} failed {attempts} attempt"
                         f"{'s' if attempts != 1 else ''} and is not tried again: the run is "
                         f"stopping (last error: {getattr(error, 'message', error)}); a restart "
                         "on the same checkpoint runs it again")
        self.txid, self.attempts, self.error = txid, attempts, error


def attempt_transaction(txid: int, emit: Callable[[int], Batches],
                        evaluate: Callable[[Batches], Output],
                        failed: Callable[[Batches, Exception, str], None], *,
                        blamed: str, max_attempts: int | None,
                        pause_ms: Callable[[int], None],
                        stopping: Callable[[], bool] = lambda: False) -> Output:
    """Transaction `txid` evaluated until an attempt succeeds: Storm's replay of a failed batch,
    the one attempt loop of both runners.

    `emit(attempt)` gives the spouts' batches for an attempt (a replay's are the same data),
    `evaluate(batches)` runs the plan over them and returns its output. When it raises,
    `failed(batches, error, component)` records the failure against the component the error
    names (`blamed` when it names none), and after `retry_pause_ms` (through `pause_ms`, the
    runner's clock, in slices of `PAUSE_SLICE_MS`) the next attempt starts. After
    `max_attempts` failed attempts (unset: never) it raises a `TransactionFailedError` naming
    the transaction, the attempts, the last error and the key. When `stopping()` says the run
    is ending (a stop was asked for: Storm's coordinator starts no attempt while its spouts are
    deactivated), a failed attempt is not tried again and the pause ends early: it raises
    `TransactionAbandoned`. What `emit` raises is not caught.

    The log gets the first failure of the transaction, with the key that bounds its attempts,
    then one line at its 10th, 100th, 1,000th... failure, not a line per attempt.

    >>> failures = []
    >>> def evaluate(batch):
    ...     if len(failures) < 2:
    ...         raise ValueError("store down")
    ...     return sum(batch)
    >>> attempt_transaction(7, lambda attempt: [1, 2], evaluate,
    ...                     lambda b, e, c: failures.append((c, str(e))), blamed="sink",
    ...                     max_attempts=None, pause_ms=lambda ms: None)
    3
    >>> failures
    [('sink', 'store down'), ('sink', 'store down')]
    >>> def broken(batch):
    ...     raise ValueError("bad row")
    >>> try:
    ...     attempt_transaction(8, lambda attempt: [1], broken, lambda b, e, c: None,
    ...                         blamed="sink", max_attempts=2, pause_ms=lambda ms: None)
    ... except TransactionFailedError as error:
    ...     print(error.component); print(error.message)
    sink
    Trident transaction 8 failed 2 attempts (squall.trident.max.attempts=2); last error: bad row
    >>> paused, stop = [], []
    >>> def pause(ms):
    ...     paused.append(ms)
    ...     stop.append(True)  # a stop comes during the first pause
    >>> try:
    ...     attempt_transaction(9, lambda attempt: [1], broken, lambda b, e, c: None,
    ...                         blamed="sink", max_attempts=None, pause_ms=pause,
    ...                         stopping=lambda: bool(stop))
    ... except TransactionAbandoned as abandoned:
    ...     print(paused, abandoned.attempts)
    [50] 1
    """
    attempt = 0
    while True:
        attempt += 1
        batches = emit(attempt)
        try:
            return evaluate(batches)
        except Exception as exc:
            component = getattr(exc, "component", None) or blamed
            failed(batches, exc, component)
            _tell_failure(txid, attempt, exc, max_attempts)
            if max_attempts is not None and attempt >= max_attempts:
                raise TransactionFailedError(
                    f"Trident transaction {txid} failed {attempt} attempts "
                    f"({MAX_ATTEMPTS}={max_attempts}); last error: "
                    f"{getattr(exc, 'message', exc)}",
                    component=component, field=getattr(exc, "field", None)) from exc
            pause = retry_pause_ms(attempt)
            while pause > 0 and not stopping():
                pause_ms(min(pause, PAUSE_SLICE_MS))
                pause -= PAUSE_SLICE_MS
            if stopping():
                abandoned = TransactionAbandoned(txid, attempt, exc)
                _log.warning("%s", abandoned)
                raise abandoned from exc


def _tell_failure(txid: int, attempt: int, exc: Exception, max_attempts: int | None) -> None:
    """The log line of a failed attempt: the first, then the 10th, 100th, 1,000th..."""
    error = getattr(exc, "message", exc)
    if attempt == 1:
        bound = (f"up to {max_attempts} attempts in all ({MAX_ATTEMPTS})"
                 if max_attempts is not None else
                 f"for ever (Storm's default); set {MAX_ATTEMPTS} to bound its attempts")
        _log.error("Trident transaction %d failed: %s; it is tried again after a pause "
                   "(%g s, doubling up to %g s), %s", txid, error, _PAUSES.initial_delay_ms / 1000,
                   _PAUSES.max_delay_ms / 1000, bound)
    elif attempt == 10 ** (len(str(attempt)) - 1):
        bound = (f"of {max_attempts} ({MAX_ATTEMPTS})" if max_attempts is not None else
                 f"and is tried again for ever; set {MAX_ATTEMPTS} to bound its attempts")
        _log.error("Trident transaction %d has failed %d attempts %s; last error: %s",
                   txid, attempt, bound, error)


# What each state type needs from every spout feeding it (Storm's spout x state table).
_ALLOWED = {
    "NON_TRANSACTIONAL": {NON_TRANSACTIONAL, TRANSACTIONAL, OPAQUE},
    "TRANSACTIONAL": {TRANSACTIONAL},
    "OPAQUE": {TRANSACTIONAL, OPAQUE},
}


def spout_store(conf: Mapping[str, Any], topology_id: str, spout: str) -> Any:
    """The store of one spout's batch metadata (shared by the runner and its Spark reader)."""
    return open_store(conf, f"trident-{topology_id}/spout={spout}")


def check_guarantees(plan: Plan) -> None:
    """Refuses a state type its spouts cannot give exactly-once (Storm's table)."""
    for node in plan.nodes:
        if not isinstance(node, (PersistNode, WindowNode)):
            continue
        state_type = getattr(node.factory, "state_type", None)
        kind = getattr(state_type, "name", str(state_type))
        allowed = _ALLOWED.get(kind)
        if allowed is None:
            continue
        for spout in _upstream_spouts(plan, node.cid):
            guarantee = SpoutEmitter(spout.cid, spout.spout, None).guarantee
            if guarantee not in allowed:
                hint = ("use StateType.OPAQUE (an opaque spout may replay a batch with other "
                        "tuples)" if guarantee == OPAQUE else
                        "use StateType.NON_TRANSACTIONAL (counts may then be inexact after a "
                        "failure), or a spout that replays the same batch for a txid "
                        "(transactional = True)")
                raise InvalidTopologyError(
                    f"state {node.state!r} of {node.cid!r} is {kind} but spout "
                    f"{spout.cid!r} is {guarantee}: it cannot be updated exactly once; {hint}",
                    component=node.cid)


def _upstream_spouts(plan: Plan, cid: str) -> list[SpoutNode]:
    out: list[SpoutNode] = []
    stack, seen = [cid], set()
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        node = plan.node(c)
        if isinstance(node, SpoutNode):
            out.append(node)
        stack.extend(node.parents)
    return out


class BatchCoordinator:
    """The run's transactions: `next_txid`, `emit(txid)`, `commit(txid)`, `exhausted()`."""

    def __init__(self, plan: Plan, conf: Mapping[str, Any], topology_id: str) -> None:
        check_guarantees(plan)
        self.conf = dict(conf)
        self.store = open_store(self.conf, f"trident-{topology_id}")
        self._check_format(f"trident-{topology_id}")
        # Each spout keeps its batch metadata per txid in its own namespace.
        self.emitters = {n.cid: SpoutEmitter(n.cid, n.spout,
                                             spout_store(self.conf, topology_id, n.cid))
                         for n in plan.spouts}
        self.next_txid = int(self.store.get(CURR, 1))

    def _check_format(self, name: str) -> None:
        """Refuse progress recorded under another plan format (`plan.PLAN_FORMAT`); record
        this one's with a run that has no progress yet."""
        if self.store.get(CURR) is None:
            self.store.put(FORMAT, PLAN_FORMAT)
            return
        # Where the store keeps its keys (a directory, a Redis hash), to name the checkpoint.
        where = getattr(self.store, "root", None) or getattr(self.store, "hash", None) or name
        check_plan_format(self.store.get(FORMAT), str(where))

    def open(self) -> None:
        for e in self.emitters.values():
            e.open(self.conf)

    def emit(self, txid: int, lazy: bool = False) -> dict[str, Any]:
        """Every spout's batch for `txid` as partitions of rows (`lazy`: a file spout's batch
        as its `FileBatch`, for a runner that reads the files itself)."""
        if txid != self.next_txid:
            raise SquallError(f"transaction {txid} asked for, but {self.next_txid} is the next "
                              "to commit: the checkpoint's progress and the run disagree")
        return {cid: e.emit(txid, lazy) for cid, e in self.emitters.items()}

    def malformed(self) -> list[MalformedLine | FileReport]:
        """The `MalformedLine`s of the last `emit`'s file spouts (skipped from their batches)
        and their `FileReport`s."""
        return [m for e in self.emitters.values() for m in e.malformed]

    def batch_time(self, txid: int, now_ms: int) -> int:
        """Transaction `txid`'s processing time: `now_ms` (the runner's clock) the first time
        it is asked, the same on every later attempt of the txid, after a restart too, so a
        replayed batch fills the same processing-time windows."""
        kept = self.store.get(TIME)
        if kept is not None and kept[0] == txid:
            return int(kept[1])
        self.store.put(TIME, (txid, now_ms))
        return now_ms

    def commit(self, txid: int) -> None:
        """Transaction `txid` is complete: the next one is `txid + 1`."""
        self.store.put(CURR, txid + 1)
        self.next_txid = txid + 1
        for e in self.emitters.values():
            e.ack(txid)

    def exhausted_after(self, txid: int) -> bool:
        """Every spout's input ends with transaction `txid`'s batch (asked once it is emitted:
        the answer is the same on a replay)."""
        return all(e.exhausted_after(txid) for e in self.emitters.values())

    def exhausted(self) -> bool:
        """Every spout's input ended with the last committed transaction."""
        last = self.next_txid - 1
        return all(e.exhausted_after(last) for e in self.emitters.values())

    def incomplete(self) -> list[str]:
        """What keeps the input from having ended (`Runner.incomplete`): the spouts whose input
        did not end with the last committed transaction, and the transactions committed."""
        last = self.next_txid - 1
        stuck = sorted(cid for cid, e in self.emitters.items() if not e.exhausted_after(last))
        return [f"spouts not exhausted: {stuck}", f"transactions committed: {last}"]

    def close(self) -> None:
        for e in self.emitters.values():
            e.close()
