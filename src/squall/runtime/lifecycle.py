"""What an operator asks of a running topology: deactivate or activate its spouts, stop it.

Storm's `storm deactivate`/`activate` stop and resume calling the spouts' `next_tuple` (calling
`ISpout.deactivate`/`activate` on them) while tuple trees already in flight still complete;
`storm kill -w SECS` deactivates, waits, then shuts the topology down. `Lifecycle` holds those
requests for one run; they may come from another thread (a signal handler, the control endpoint
of `squall run`), and the runner's own loop reads them and acts on its own thread, so the user's
spouts are only ever called from the thread that runs them.

The stop deadline is operational, not semantic: it is wall time (`time.monotonic`), as an
operator's `--stop-timeout` is, even when the local runner runs on a simulated clock.

>>> life = Lifecycle()
>>> life.status(), life.active
('active', True)
>>> life.deactivate(); life.status()
'inactive'
>>> life.request_stop(timeout_s=0.0); life.status(), life.active
('stopping', False)
>>> life.stop_overdue(), life.should_stop(drained=False), life.outcome
(True, True, 'timed out')
"""

from __future__ import annotations

import threading
import time

from squall.errors import SquallError

ACTIVE = "active"
INACTIVE = "inactive"
STOPPING = "stopping"
DRAINED = "drained"
TIMED_OUT = "timed out"
ABANDONED = "abandoned"


class Lifecycle:
    """The operator's requests to one run (see the module doc); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = True  # whether the spouts should be pulled
        self.stop_requested = False
        self._deadline: float | None = None  # monotonic time by which the stop must happen
        # How a requested stop ended, set by the runner's loop: DRAINED (nothing was in
        # flight any more), TIMED_OUT (the deadline came first; a restart replays the rest) or
        # ABANDONED (a transaction that failed during the stop is not tried again: settled, as
        # a failed tuple tree is, and replayed by a restart).
        self.outcome: str | None = None
        self._abandoned = False

    def deactivate(self) -> None:
        with self._lock:
            self.active = False

    def activate(self) -> None:
        with self._lock:
            if not self.stop_requested:  # a stopping topology stays deactivated
                self.active = True

    def request_stop(self, timeout_s: float | None = None) -> None:
        """Stop pulling the spouts; stop once in-flight work is done, or after `timeout_s`
        (None: no deadline). A second request can only bring the deadline closer."""
        with self._lock:
            self.active = False
            deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
            sooner = deadline is not None and (self._deadline is None
                                               or deadline < self._deadline)
            if not self.stop_requested or sooner:
                self._deadline = deadline
            self.stop_requested = True

    def stop_overdue(self) -> bool:
        """A stop was requested and its deadline has passed."""
        with self._lock:
            return (self.stop_requested and self._deadline is not None
                    and time.monotonic() >= self._deadline)

    def abandon(self) -> None:
        """A transaction failed during the stop and is not tried again (see `outcome`): the
        stop ends now."""
        with self._lock:
            self._abandoned = True

    def should_stop(self, drained: bool) -> bool:
        """Whether a runner's loop should end now, given whether it has work in flight; records
        the outcome when it should."""
        if not self.stop_requested:
            return False
        if self._abandoned:
            self.outcome = ABANDONED
            return True
        if drained:
            self.outcome = DRAINED
            return True
        if self.stop_overdue():
            self.outcome = TIMED_OUT
            return True
        return False

    def status(self) -> str:
        if self.stop_requested:
            return STOPPING
        return ACTIVE if self.active else INACTIVE


class Controls:
    """The `Runner` protocol's control methods, over a `lifecycle` attribute (a mixin).

    A runner whose loop cannot deactivate its spouts sets `supports_deactivate = False`; asking
    it then raises `UnsupportedControlError` with a message for the operator.
    """

    lifecycle: Lifecycle
    supports_deactivate = True

    def request_stop(self, timeout_s: float | None = None) -> None:
        self.lifecycle.request_stop(timeout_s)

    def deactivate(self) -> None:
        self._check_deactivate()
        self.lifecycle.deactivate()

    def activate(self) -> None:
        self._check_deactivate()
        self.lifecycle.activate()

    def status(self) -> str:
        return self.lifecycle.status()

    def stopped(self) -> str | None:
        """How a requested stop ended (`drained`, `timed out`), None when none was requested."""
        return self.lifecycle.outcome

    def _check_deactivate(self) -> None:
        if not self.supports_deactivate:
            raise UnsupportedControlError(
                f"{type(self).__name__} cannot deactivate its spouts (only the topology runners "
                "and the local Trident runner can); stop it with `squall kill` instead")


class UnsupportedControlError(SquallError):
    """A control request this runner cannot carry out."""
