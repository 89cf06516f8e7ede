"""The checkpoint coordinator: Storm's `CheckpointSpout` state machine, as a pure core.

Its persistent state is `(txid, COMMITTED | PREPARING | COMMITTING)`, kept under `__state` in a
`KeyValueState` (namespace `$checkpointspout-<task>`), `(-1, COMMITTED)` when there is none. It
always starts in recovery: from PREPARING(t) it rolls back (ROLLBACK(t), then COMMITTED(t-1)), from
COMMITTING(t) it rolls forward (COMMIT(t)), from COMMITTED(t) it initialises the bolts' state
(INITSTATE(t)). Then, at most one action in flight at a time, it PREPAREs t+1 every
`topology.state.checkpoint.interval.ms` (at least 100) and COMMITs right after a PREPARE is acked.
A failed action (or a timed-out one) sends it back into recovery. Time is passed in.

Storm's `testPrepareWithFail` trace:

>>> from squall.state.base import MemoryKeyValueState
>>> c = CheckpointCoordinator(MemoryKeyValueState(), interval_ms=100)
>>> trace = []
>>> def step(now, ok=True):
...     txid, action = c.next_action(now)
...     trace.append(f"{action}({txid}){'' if ok else 'x'}")
...     (c.ack if ok else c.fail)(txid)
>>> step(0); step(200); step(200); step(400, ok=False); step(400, ok=False); step(400)
>>> step(400); step(600)
>>> " ".join(trace)
'INITSTATE(-1) PREPARE(0) COMMIT(0) PREPARE(1)x ROLLBACK(1)x ROLLBACK(1) INITSTATE(0) PREPARE(1)'
"""

from __future__ import annotations

from typing import Any

from squall.topology.fields import Fields

CHECKPOINT_COMPONENT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = Fields("txid", "action")

PREPARE, COMMIT, ROLLBACK, INITSTATE = "PREPARE", "COMMIT", "ROLLBACK", "INITSTATE"
COMMITTED, PREPARING, COMMITTING = "COMMITTED", "PREPARING", "COMMITTING"
STATE_KEY = "__state"
MIN_INTERVAL_MS = 100


class CheckpointCoordinator:
    """Which checkpoint action to send next, given acks, fails and the time."""

    def __init__(self, state: Any, interval_ms: int = 1000) -> None:
        self.state = state
        self.interval_ms = max(MIN_INTERVAL_MS, int(interval_ms))
        txid, status = state.get(STATE_KEY, (-1, COMMITTED))
        self.txid: int = int(txid)
        self.status: str = status
        self.recovering = True
        self.in_flight = False
        self.last_checkpoint_ms = 0

    def _save(self, txid: int, status: str) -> None:
        self.txid, self.status = txid, status
        self.state.put(STATE_KEY, (txid, status))
        self.state.commit()

    def due_at(self) -> int | None:
        """When the next action may be sent (None: waiting for an ack or fail)."""
        if self.in_flight:
            return None
        if self.recovering or self.status != COMMITTED:
            return 0
        return self.last_checkpoint_ms + self.interval_ms

    def next_action(self, now_ms: int, *, interval_ms: int | None = None
                    ) -> tuple[int, str] | None:
        """The (txid, action) to emit now, or None. `interval_ms` overrides the interval for
        this call (the local runner checkpoints sooner once every spout is exhausted)."""
        if self.in_flight:
            return None
        if self.recovering:
            action = {PREPARING: ROLLBACK, COMMITTING: COMMIT, COMMITTED: INITSTATE}[self.status]
        else:
            interval = self.interval_ms if interval_ms is None else interval_ms
            if self.status == COMMITTED:
                if now_ms - self.last_checkpoint_ms < interval:
                    return None
                # Stored before the PREPARE leaves: a crash from here on rolls it back.
                self._save(self.txid + 1, PREPARING)
                self.last_checkpoint_ms = now_ms
            action = PREPARE if self.status == PREPARING else COMMIT
        self.in_flight = True
        return self.txid, action

    def ack(self, txid: int) -> None:
        self.in_flight = False
        if txid != self.txid:
            return  # an old action: the current one is sent again
        if self.recovering:
            if self.status == COMMITTED:
                self.recovering = False  # INITSTATE done
            elif self.status == PREPARING:
                self._save(self.txid - 1, COMMITTED)
            else:
                self._save(self.txid, COMMITTED)
        elif self.status == PREPARING:
            self._save(self.txid, COMMITTING)
        elif self.status == COMMITTING:
            self._save(self.txid, COMMITTED)

    def fail(self, txid: int) -> None:
        self.in_flight = False
        self.recovering = True
