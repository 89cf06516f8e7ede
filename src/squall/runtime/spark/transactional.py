"""Transactional topologies on Spark: a transaction is a micro-batch.

The transaction id is the micro-batch id + 1 (ids start at 1, Spark's batch ids at 0). Spark
replays a batch whose commit it did not log with the same id, so a restarted topology replays the
same transaction; the coordinator's durable `curr` tells whether it was committed already (then
the batch is skipped). Per micro-batch the driver:

1. starts a new attempt of the transaction (the `Coordinator` core, its attempt counter stored);
2. builds one `$batch` row per emitter task and runs every bolt as a stage (the same stages as the
   at-least-once runner), processing-phase bolts first, then commit-phase bolts. Processing-phase
   tasks send a `$done` marker to every committer task when they finish; a committer runs
   `finish_batch` only once it has the markers of *every* processing-phase task: the commit phase
   starts after the whole processing phase succeeded, inside the one Spark action;
3. reads every task's `BatchReport`. All finished: the transaction is committed (`curr` stored).
   Otherwise the attempt failed: a new attempt of the same transaction runs at once, in the same
   micro-batch (tasks restart from the snapshots of the last committed transaction, batch bolts
   are fresh per attempt, emitters replay the stored batch metadata).

Counters (`component_stats`, shown live by `squall run` and in the summary) are the bolt tasks'
own, summed over every attempt, and the coordinator's, kept by the driver since the coordinator
runs here: one `$batch` tuple emitted per attempt (transferred to every emitter task), acked when
the attempt commits (latency: from its start to its commit), failed when it does not; pending
while an attempt runs. There is no `$commit` tuple on Spark (done markers gate the commit phase
inside the same action), so the coordinator emits one tuple per attempt, not two as on the local
runner.

Micro-batches run one after another, so commits are in id order and at most one transaction is
in flight: `topology.max.spout.pending` has no effect here (see docs/design/transactional.md for
how Storm's pipelining maps onto Spark).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from squall.atomic_files import write_atomic
from squall.errors import InvalidTopologyError, SquallError
from squall.metrics.snapshot import BatchMetrics
from squall.protocols import Progress
from squall.results import (
    Captures,
    ComponentStats,
    ErrorLog,
    ErrorRecord,
    RunResult,
    aggregate_stats,
    ordered_captures,
    user_error,
)
from squall.runtime.clock import wall_ms
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.run_dir import open_run_dir
from squall.runtime.spark import row_schema
from squall.runtime.spark.batch_rows import add_counters, decode_batch
from squall.runtime.spark.query import batch_metrics, drive_query, routing_keys
from squall.runtime.spark.session import get_session
from squall.runtime.spark.shipping import portable
from squall.runtime.spark.stage import StageChain, StagePlan
from squall.topology.config import random_seed
from squall.topology.description import Topology
from squall.topology.graph import bolt_order
from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.progress_store import STORE, open_store
from squall.transaction_kernel.reports import INBAND
from squall.transaction_kernel.spouts import idle_after, partitions_exhausted
from squall.transactional.builder import coordinator_id
from squall.transactional.coordinator import Coordinator
from squall.transactional.wrappers import BATCH, CoordinatedBolt

MAX_ATTEMPTS = "squall.transactional.max.attempts"  # unset: replay for ever, as Storm


def _plan_path(run_dir: str) -> str:
    return os.path.join(run_dir, "transactional-plan.pkl")


class _TxReader(DataSourceStreamReader):
    """Offsets are transaction counts: one more per trigger while the spout has input left."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.run_dir = options["dir"]
        with open(_plan_path(self.run_dir), "rb") as f:
            plan = cloudpickle.load(f)
        self.spout, self.store = plan["spout"], open_store(plan["conf"], plan["tx_id"])
        self.spout.open(plan["conf"], None)

    def __getstate__(self) -> dict:
        return {"run_dir": self.run_dir}

    def __setstate__(self, state: dict) -> None:
        self.run_dir = state["run_dir"]

    def initialOffset(self) -> dict:
        return {"tx": 0}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        done = int(start["tx"])
        # Batch `done` (transaction done + 1) is the next; nothing to do once the input ended.
        if (partitions_exhausted(self.spout, self.store, done)
                or idle_after(self.spout, self.store, done)
                or not self.spout.is_ready(done + 1)):
            return start  # no micro-batch: ended, idle (nothing new to read) or not ready
        return {"tx": done + 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition):
        return iter(())

    def commit(self, end: dict) -> None:
        pass


class TransactionalSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "squall_transactions"

    def schema(self) -> str:
        return "tx bigint"

    def streamReader(self, schema: Any) -> _TxReader:
        return _TxReader(self.options)


def stage_order(topology: Topology) -> list[str]:
    """Bolts in topological order, every processing-phase bolt before every commit-phase one."""
    order = bolt_order(topology)

    def commit_phase(cid: str) -> bool:
        inst = topology.components[cid].new_instance()
        return isinstance(inst, CoordinatedBolt) and inst.commit_phase

    phase = {cid: commit_phase(cid) for cid in order}
    return [c for c in order if not phase[c]] + [c for c in order if phase[c]]


class TransactionalSparkRunner(Controls, Reporting):
    """Runs a transactional topology, one transaction per micro-batch (see the module doc)."""

    runner_name = "spark"

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | RunConfig | None = None, *,
                 master: str | None = None, checkpoint_location: str | None = None,
                 session: Any = None, capture: bool = False) -> None:
        coords = [cid for cid in topology.spouts if cid.startswith("$coord-")]
        if len(coords) != 1 or len(topology.spouts) != 1:
            raise InvalidTopologyError("not a topology built by TransactionalTopologyBuilder")
        run_dir = open_run_dir(topology, checkpoint_location)
        self.dir, self.checkpoint_id = run_dir.path, run_dir.checkpoint_id
        config = resolve(topology, conf, runner="spark").with_defaults(
            {STORE: {"dir": os.path.join(self.dir, "transactional")}}, forced={INBAND: True})
        self.config, self.conf = config, config.user
        coordinator = topology.components[coords[0]].new_instance()
        self.tx_id, self.spout = coordinator.tx_id, coordinator.spout
        self.spout.open(self.conf, None)
        self.store = open_store(self.conf, self.tx_id)
        self.core = Coordinator(self.store, 1)
        self.coord_task = topology.component_tasks(coordinator_id(self.tx_id))[0]
        self.spark = session or get_session(master, self.conf)
        self.spark.dataSource.register(TransactionalSource)
        # Ships the wrappers' user objects (batch bolts, the spout) by value as well.
        self.topology = portable(topology)
        self.order = stage_order(self.topology)
        self.keys = {cid: routing_keys(self.topology.components[cid].num_tasks)
                     for cid in self.order}
        emitter = next(c for c in self.order
                       if any(s.stream == BATCH for s in self.topology.components[c].inputs))
        self.emitter_tasks = self.topology.component_tasks(emitter)
        self.reporting_tasks = {t for c in self.order for t in self.topology.component_tasks(c)}
        self.seed = random_seed(self.config.effective)
        self.run_id = uuid.uuid4().hex
        self.errors: list[ErrorRecord] = []
        # Logged rate-limited per component and error kind (batch time); every one is kept.
        self.error_log = ErrorLog(logging.getLogger("squall"), traceback=user_error)
        self.bolt_stats: dict[int, dict[str, int]] = {}
        # The coordinator's counters (see the module doc), and whether an attempt is running.
        self.coord_stats: dict[str, int] = dict.fromkeys(
            ("emitted", "transferred", "acked", "failed", "latency_total_ms", "latency_count"), 0)
        self.in_flight = 0
        # `_batch` runs on Spark's foreachBatch callback thread while `component_stats` is called
        # from the thread polling the query: counters change and are read under this lock.
        self._stats_lock = threading.Lock()
        self.committed_txids: list[int] = []
        self.failed_attempts: list[tuple[Any, list[str]]] = []
        self.batches = 0
        self.batch_seconds: list[float] = []
        self.exhausted = False
        self.capture = capture  # every attempt's emits, keyed (txid, attempt, seq)
        self.captures: dict[int, list[tuple[tuple[int, int, int], str, list[Any]]]] = {}
        # The stages, made once per run; a transaction's ids travel with its Spark job, and
        # bolts fuse as on the at-least-once runner (squall.spark.fusion).
        self.chain = StageChain(self.spark, StagePlan(
            run_id=self.run_id, topology=self.topology, conf=self.conf, component="",
            batch_id=0, committed=-1, state_dir=self.dir, keys=self.keys, seed=self.seed,
            tracking=False, capture=capture, checkpoint_id=self.checkpoint_id), self.order)
        self.query: Any = None  # set by drive_query
        self.stopping = False  # set by drive_query before it stops the query
        self.failure: SquallError | None = None  # this runner stops its query only by raising
        self.elapsed_ms = 0
        self.lifecycle = Lifecycle()  # stop requests; spouts cannot be deactivated
        write_atomic(_plan_path(self.dir), cloudpickle.dumps(
            {"spout": self.spout, "conf": self.conf, "tx_id": self.tx_id}))

    # ---- one micro-batch = one transaction -------------------------------------------------
    def _batch(self, df: Any, batch_id: int) -> None:
        txid = batch_id + 1
        if txid < self.core.curr:
            return  # committed before a crash that kept Spark from logging the batch
        if txid > self.core.curr:
            raise SquallError(
                f"micro-batch {batch_id} would be transaction {txid}, but transaction "
                f"{self.core.curr} is the next to commit: the query checkpoint and the "
                f"transactional store ({self.conf[STORE]}) belong to different runs")
        started = time.perf_counter()  # for benchmarks: the transaction's time on the driver
        max_attempts = self.config.effective.get(MAX_ATTEMPTS)
        while True:
            ((_, attempt),) = self.core.sync()
            if max_attempts is not None and attempt.attempt_id > int(max_attempts):
                raise SquallError(
                    f"transaction {txid} failed {max_attempts} attempts ({MAX_ATTEMPTS}); last "
                    f"failure: {self.failed_attempts[-1][1][:3] if self.failed_attempts else '?'}")
            ok = self._counted_attempt(attempt)
            if ok:
                self.core.ack("batch", attempt)
                ((_, commit),) = self.core.sync()
                self.core.ack("commit", commit)
                self.committed_txids.append(txid)
                break
            self.core.fail("batch", attempt)
        self.batches += 1
        self.batch_seconds.append(time.perf_counter() - started)
        self.exhausted = partitions_exhausted(self.spout, self.store, txid)

    def _counted_attempt(self, attempt: TransactionAttempt) -> bool:
        """`_attempt`, with the coordinator's counters: its batch tuple is emitted to every
        emitter task, then acked (the attempt commits) or failed."""
        started = time.monotonic()
        with self._stats_lock:
            self.coord_stats["emitted"] += 1
            self.coord_stats["transferred"] += len(self.emitter_tasks)
            self.in_flight = 1
        ok = self._attempt(attempt)
        with self._stats_lock:
            self.in_flight = 0
            if ok:
                self.coord_stats["acked"] += 1
                self.coord_stats["latency_total_ms"] += int((time.monotonic() - started) * 1000)
                self.coord_stats["latency_count"] += 1
            else:
                self.coord_stats["failed"] += 1
        return ok

    def _attempt(self, attempt: TransactionAttempt) -> bool:
        txid = attempt.transaction_id
        now = wall_ms()  # the runner is where time enters (batch time)
        emitter_keys = self.keys[self.topology.task_component(self.emitter_tasks[0])]
        batch = row_schema.RowBuffer()
        for i, t in enumerate(self.emitter_tasks):
            batch.tuple(task=t, key=emitter_keys[t - self.emitter_tasks[0]], stream=BATCH,
                        src=self.coord_task, values=[attempt, txid - 1], anchors=None, ts=now,
                        seq=i)
        cur = self.chain.apply(
            self.spark.createDataFrame(pa.Table.from_batches([batch.to_batch()])), txid, txid - 1)
        rows = decode_batch(cur.toArrow().to_pydict(), self.topology)
        for task, seq, stream, values in rows.captures:
            self.captures.setdefault(task, []).append(
                ((txid, attempt.attempt_id, seq), stream, values))
        finished: set[int] = set()
        failures: list[str] = []
        for report in rows.reports:
            if report.attempt == attempt:
                if report.finished:
                    finished.add(report.task)
                else:
                    failures.append(f"task {report.task}: {report.cause}")
        for record in rows.errors:
            self.errors.append(record)
            self.error_log.record(record, now)
        for record in rows.aborts:  # a task refused to commit (BatchRetryError): retried
            failures.append(f"task {record.task}: {type(record.error).__name__}: {record.error}")
            self.errors.append(record)
        with self._stats_lock:
            add_counters(self.bolt_stats, rows.stats)
        ok = not failures and finished >= self.reporting_tasks
        if not ok:
            missing = sorted(self.reporting_tasks - finished)
            self.failed_attempts.append(
                (attempt, failures or [f"tasks {missing} did not finish"]))
        return ok

    # ---- running ---------------------------------------------------------------------------
    supports_deactivate = False  # its reader plans transactions, not spout pulls

    def apply_activation(self, active: bool) -> None:
        """Only a stop deactivates this runner, and the stop itself ends the query."""

    def drained(self) -> bool:
        """No transaction attempt is running (a stopped one would be replayed anyway)."""
        return not self.in_flight

    def run(self, *, duration_ms: int | None = None, until_complete: bool = True,
            should_stop: Callable[[], bool] | None = None, on_progress: Progress | None = None,
            progress_every_ms: int = 1000) -> RunResult:
        """As `squall.protocols.Runner.run` (`duration_ms` in wall time)."""

        def drive(started: float) -> None:
            self.exhausted = partitions_exhausted(self.spout, self.store, self.core.curr - 1)
            drive_query(self, TransactionalSource.name(), self._batch,
                        done=lambda: until_complete and self.exhausted, started=started,
                        duration_ms=duration_ms, should_stop=should_stop,
                        on_progress=on_progress, progress_every_ms=progress_every_ms)

        return self.run_bracket(drive, on_progress=on_progress)

    def batch_metrics(self) -> list[BatchMetrics]:
        return batch_metrics(self.query)

    def complete(self) -> bool:
        """Every partition of the spout read to its end, its last transaction committed."""
        return self.exhausted

    def incomplete(self) -> list[str]:
        if self.complete():
            return []
        return [f"spout {self.tx_id!r} not exhausted",
                f"transactions committed: {len(self.committed_txids)}"]

    def spout_instances(self) -> dict[int, Any]:
        return {}  # the coordinator's spout emits batch metadata, not tuples

    def captured(self) -> Captures:
        return ordered_captures(self.captures)

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        return {}  # the coordinator's batches are settled, not tuples

    def component_stats(self) -> dict[str, ComponentStats]:
        """Every component's counters so far (as `SparkRunner.component_stats`): the bolt tasks'
        of every finished attempt, and the coordinator's (see the module doc)."""
        with self._stats_lock:
            tasks = [(t, dict(s)) for t, s in self.bolt_stats.items()]
            tasks.append((self.coord_task, {**self.coord_stats, "pending": self.in_flight}))
        return aggregate_stats(self.topology, tasks)

    def result(self) -> RunResult:
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms,
                         {"batches": self.batches, "committed": list(self.committed_txids),
                          "failed_attempts": len(self.failed_attempts)})
