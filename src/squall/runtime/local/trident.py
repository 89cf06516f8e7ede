"""`LocalTridentRunner`: runs a Trident topology in this process, one transaction at a time.

Per transaction: every spout emits its batch (`BatchCoordinator.emit`), the plan is evaluated
on it (`squall.trident.execution.BatchExecutor`: map states are updated as their operation
runs), and the next txid is recorded. A failed batch (an operation raised) is evaluated again
as a new attempt of the same txid, `squall.trident.max.attempts` times at most (unset: for ever,
as Storm replays a failed batch for ever, with a growing pause between attempts); transactional
and opaque states apply each txid once. A stop ends the run between transactions; a transaction
that fails once the stop is asked for is not tried again (the pause before its next attempt
ends at the stop), and the stop ends the run; a restart replays it.

Without a checkpoint location the run keeps its progress and durable states in a temporary
directory; with one, a restart continues after the last committed transaction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from squall.protocols import Progress
from squall.redis_clients import wait_until_reachable
from squall.results import Captures, ComponentStats, ErrorRecord, RunResult, rows_by_first_task
from squall.runtime.clock import Clock, RealClock
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.run_dir import open_run_dir
from squall.topology.config import batch_emit_interval_ms
from squall.topology.description import Topology
from squall.transaction_kernel.progress_store import STORE
from squall.trident.coordinator import (
    MAX_ATTEMPTS,
    BatchCoordinator,
    TransactionAbandoned,
    attempt_transaction,
)
from squall.trident.execution import BatchExecutor
from squall.trident.plan import Plan, trident_plan
from squall.trident.stats import TridentStats

log = logging.getLogger("squall")


class LocalTridentRunner(Controls, Reporting):
    """Runs a topology built by `TridentTopology` (see the module documentation)."""

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | RunConfig | None = None, *,
                 clock: Clock | None = None, checkpoint_location: str | None = None,
                 capture: bool = False) -> None:
        self.topology = topology
        self.plan = trident_plan(topology)
        self.dir = open_run_dir(topology, checkpoint_location).path
        self.config = resolve(topology, conf, runner="local").with_defaults(
            {STORE: {"dir": os.path.join(self.dir, "trident")}})
        self.conf = self.config.user
        self.clock = clock or RealClock()
        self.coordinator = BatchCoordinator(self.plan, self.conf, "local")
        self.executor: BatchExecutor | None = None
        self.stats = TridentStats(self.plan)
        self.errors: list[ErrorRecord] = []
        self.capture = capture
        self.outputs: dict[str, list[tuple[Any, ...]]] = {n.cid: [] for n in self.plan.nodes}
        self.committed: list[int] = []
        self.failed_attempts = 0
        self.elapsed_ms = 0
        self.lifecycle = Lifecycle()  # operator requests, read between transactions

    # ---- one transaction ---------------------------------------------------------------------
    def step(self) -> bool:
        """Runs the next transaction to its commit; False if its batch was empty."""
        assert self.executor is not None
        txid = self.coordinator.next_txid
        executor = self.executor
        max_attempts = self.config.effective.get(MAX_ATTEMPTS)

        def emit(attempt: int) -> dict[str, Any]:
            batches = self.coordinator.emit(txid)
            if attempt == 1:  # its files are read again on a retry: told once
                self.stats.malformed(self.coordinator.malformed(), self.errors,
                                     self.clock.now_ms())
            return batches

        def evaluate(batches: dict[str, Any]) -> dict[str, Any]:
            return executor.run(txid, batches, final=self.coordinator.exhausted_after(txid),
                                time_ms=self.coordinator.batch_time(txid, self.clock.now_ms()))

        def failed(batches: dict[str, Any], exc: Exception, component: str) -> None:
            self.failed_attempts += 1
            self.errors.append(ErrorRecord(component, 0, exc, time_ms=self.clock.now_ms()))
            self.stats.error(component)
            self.stats.add_batch({c: sum(map(len, p)) for c, p in batches.items()}, False)

        out = attempt_transaction(
            txid, emit, evaluate, failed, blamed=self.plan.nodes[-1].cid,
            max_attempts=None if max_attempts is None else int(max_attempts),
            pause_ms=self.clock.sleep_ms, stopping=lambda: self.lifecycle.stop_requested)
        self.coordinator.commit(txid)
        self.committed.append(txid)
        sizes = {cid: sum(map(len, parts)) for cid, parts in out.items()}
        self.stats.add_batch(sizes, True)
        if self.capture:
            for cid, parts in out.items():
                self.outputs[cid].extend(r for p in parts for r in p)
        return sizes_nonzero(sizes, self.plan)

    # ---- running -----------------------------------------------------------------------------
    def run(self, *, duration_ms: int | None = None, until_complete: bool = True,
            should_stop: Callable[[], bool] | None = None, on_progress: Progress | None = None,
            progress_every_ms: int = 1000) -> RunResult:
        """As `squall.protocols.Runner.run`; `should_stop` is called between transactions.

        A transaction whose batch was empty is followed by Storm's batch emit interval
        (`topology.trident.batch.emit.interval.millis`) of sleep, as Storm's coordinator
        throttles; on a simulated clock every other transaction takes that interval too, so a
        run's duration counts batches and a spout that never ends runs into it."""
        def drive(_started: float) -> None:
            self.executor = None
            self.coordinator.open()
            # A state whose store is down when the run starts is waited for, as a batch that
            # meets it mid-run is attempted again; a stop meanwhile ends the run.
            self.executor = wait_until_reachable(
                lambda: BatchExecutor(self.plan, self.conf, location=self.dir),
                what="trident states", pause_ms=self.clock.sleep_ms,
                stopping=lambda: self.lifecycle.stop_requested)
            if self.executor is None:
                self.coordinator.close()
                return
            clock = self.clock
            start = clock.now_ms()
            # Storm's throttle, read as every runner reads it; 0 counts as its default here,
            # where a batch that brings nothing would otherwise be followed in a busy loop.
            interval = batch_emit_interval_ms(self.config.effective) or 500
            next_progress = start + progress_every_ms
            while True:
                if until_complete and self.coordinator.exhausted():
                    break
                if duration_ms is not None and clock.now_ms() - start >= duration_ms:
                    break
                if should_stop is not None and should_stop():
                    break
                # Between transactions nothing is in flight: a stop ends the run at once.
                if self.lifecycle.should_stop(drained=True):
                    break
                if not self.lifecycle.active:
                    clock.sleep_ms(interval)  # deactivated: no new transaction
                else:
                    try:
                        if not self.step() or clock.simulated:
                            # Nothing came: as Storm's throttle waits. On a simulated clock a
                            # batch takes the interval too (wall time is not slowed by it).
                            clock.sleep_ms(interval)
                    except TransactionAbandoned:
                        self.lifecycle.abandon()  # stopping: the next round ends the run
                if on_progress is not None and clock.now_ms() >= next_progress:
                    on_progress(self.metrics())
                    next_progress = clock.now_ms() + progress_every_ms

        return self.run_bracket(drive, close=self._close, on_progress=on_progress)

    def _close(self) -> None:
        if self.executor is not None:  # opened, so the coordinator was too
            self.executor.close()
            self.coordinator.close()

    def complete(self) -> bool:
        """Opened, and every spout's input ended with the last committed transaction."""
        return self.executor is not None and self.coordinator.exhausted()

    def incomplete(self) -> list[str]:
        return [] if self.complete() else self.coordinator.incomplete()

    def spout_instances(self) -> dict[int, Any]:
        return {}  # batch spouts, driven by the coordinator

    def captured(self) -> Captures:
        return rows_by_first_task(self.topology, self.outputs) if self.capture else {}

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        return {}  # batches are settled, not tuples

    def component_stats(self) -> dict[str, ComponentStats]:
        return self.stats.component_stats(None if self.executor is None else self.executor.late)

    def result(self) -> RunResult:
        extra: dict[str, Any] = {"batches": len(self.committed), "committed": list(self.committed),
                                 "failed_attempts": self.failed_attempts}
        if self.executor is not None and self.executor.late:
            extra["late"] = dict(self.executor.late)
        if self.capture:
            extra["outputs"] = {c: list(rows) for c, rows in self.outputs.items()}
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms, extra)


def sizes_nonzero(sizes: Mapping[str, int], plan: Plan) -> bool:
    return any(sizes.get(n.cid, 0) for n in plan.spouts)
