"""`TridentSparkRunner`: a transaction per micro-batch, its Spark paths run as typed jobs.

Per transaction (`_batch`) the runner asks the coordinator for each spout's batch and runs the
plan's Spark jobs (`planner.spark_jobs`: an aggregation, an event-time window, a state query or
state updates in the tasks, each a dataclass of `trident.jobs`) over it through
`launch.Launcher`, which puts what they computed into one `Computed`. The rest of the plan runs
on the driver through the local runner's executor, given that `Computed`, and the transaction
commits. How a transaction runs, step by step: the package documentation.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, assert_never

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from squall.errors import SquallError, TransactionFailedError
from squall.metrics.snapshot import BatchMetrics
from squall.protocols import Progress
from squall.redis_clients import wait_until_reachable
from squall.results import Captures, ComponentStats, ErrorRecord, RunResult, rows_by_first_task
from squall.runtime.gc_pause import gc_paused
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.run_dir import open_run_dir
from squall.runtime.spark.query import TICKS, batch_metrics, drive_query
from squall.runtime.spark.session import get_session
from squall.runtime.spark.shipping import ship_by_value
from squall.runtime.spark.trident.failures import worker_error
from squall.runtime.spark.trident.jobs import Launched, SparkJob, Tuning
from squall.runtime.spark.trident.launch import Batch, Launcher
from squall.runtime.spark.trident.planner import (
    persist_in_tasks,
    query_in_tasks,
    spark_jobs,
    spark_segments,
    unread_fields,
)
from squall.topology.description import Topology
from squall.transaction_kernel.progress_store import STORE
from squall.trident.computed import Computed
from squall.trident.coordinator import (
    MAX_ATTEMPTS,
    BatchCoordinator,
    TransactionAbandoned,
    attempt_transaction,
)
from squall.trident.execution import BatchExecutor, Parts
from squall.trident.plan import (
    AggregateNode,
    CustomPartition,
    JoinNode,
    MergeNode,
    Node,
    Persist,
    PersistNode,
    Plan,
    RepartitionNode,
    RowNode,
    SpoutNode,
    StateQueryNode,
    WindowNode,
    trident_plan,
)
from squall.trident.spouts import FileBatch, FileBatchSpout
from squall.trident.stats import TridentStats

log = logging.getLogger("squall")


class TridentSparkRunner(Controls, Reporting):
    """Runs a Trident topology on Spark (see the package documentation)."""

    runner_name = "spark"

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | RunConfig | None = None, *,
                 master: str | None = None, checkpoint_location: str | None = None,
                 session: SparkSession | None = None, capture: bool = False) -> None:
        self.topology = topology
        self.plan = trident_plan(topology)
        self.dir = open_run_dir(topology, checkpoint_location).path
        config = resolve(topology, conf, runner="spark").with_defaults(
            {STORE: {"dir": os.path.join(self.dir, "trident")}})
        self.config, self.conf = config, config.user
        for node in self.plan.nodes:  # user classes from scripts travel by value
            for value in _user_objects(node):
                ship_by_value(value)
        self.coordinator = BatchCoordinator(self.plan, self.conf, "spark")
        self.spark: SparkSession = session or get_session(master, self.conf)
        self.tuning = Tuning.from_conf(self.config.effective)
        # Driver batches staged as files Spark reads (`launch`), in local mode only.
        staging = os.path.join(self.dir, "trident", "staged") \
            if str(self.spark.sparkContext.master).startswith("local") else None
        self.launcher = Launcher(self.spark, self.plan, self.conf, self.dir, staging)
        # State queries read in the tasks first: a query sees its state before the batch's
        # updates (`squall.trident.plan`), and those run in later jobs.
        paths, self.inside = spark_segments(
            self.plan, lambda node: self.tuning.in_executors and query_in_tasks(node),
            lambda node: self.tuning.in_executors and persist_in_tasks(node))
        _log_driver_persists(self.plan, paths)
        self.paths = dict(sorted(paths.items(),
                                 key=lambda p: not isinstance(p[1][-1], StateQueryNode)))
        self._planned: tuple[SparkJob, ...] | None = None
        self.launched: list[Launched] = []  # the Spark jobs the transactions ran
        self.executor: BatchExecutor | None = None
        self.stats = TridentStats(self.plan)
        self._stats_lock = threading.Lock()
        self.errors: list[ErrorRecord] = []
        self.capture = capture
        # A file spout's fields that nothing reads: its batches read on the driver skip them,
        # unless every operation's output is kept (`capture`: the spout's rows whole).
        self.unread = {} if capture else {n.cid: unread_fields(self.plan, n.cid)
                                          for n in self.plan.nodes if isinstance(n, SpoutNode)}
        self.outputs: dict[str, list[tuple[Any, ...]]] = {n.cid: [] for n in self.plan.nodes}
        self.committed: list[int] = []
        self.failed_attempts = 0
        self.batch_seconds: list[float] = []
        self.spark_sizes: dict[str, int] = {}
        # Where the transactions' time went on the driver (seconds, summed over batches): the
        # spouts' batches, the Spark jobs (input DataFrame included), the driver's share of
        # the plan (state updates included), the commit record.
        self.timing = dict.fromkeys(("emit", "spark", "driver", "commit"), 0.0)
        self.query: StreamingQuery | None = None
        self.stopping = False
        self.in_transaction = False  # a transaction is being attempted (a stop waits for it)
        self.failure: SquallError | None = None
        self.elapsed_ms = 0
        self.lifecycle = Lifecycle()  # stop requests; spouts cannot be deactivated
        self.exhausted = False

    # ---- one micro-batch = one transaction ------------------------------------------------------
    def _batch(self, df: DataFrame, batch_id: int) -> None:
        if self.exhausted or self.stopping or self.lifecycle.stop_requested:
            return  # a tick after the bounded input ended, or during the stop: no transaction
        self.in_transaction = True
        try:
            self._transaction(batch_id)
        except TransactionAbandoned:
            # A stop came while it failed: not tried again, nothing more is started, and the
            # stop ends now (a restart replays the transaction).
            self.stopping = True
            self.lifecycle.abandon()
        finally:
            self.in_transaction = False

    def _transaction(self, batch_id: int) -> None:
        # The coordinator, not Spark's batch id, numbers the transactions: a batch Spark runs
        # again after a crash replays the transaction the coordinator has not committed, and a
        # tick that ran no transaction leaves no gap.
        txid = self.coordinator.next_txid
        started = time.perf_counter()
        max_attempts = self.config.effective.get(MAX_ATTEMPTS)

        def emit(attempt: int) -> dict[str, Any]:
            t_emit = time.perf_counter()
            batches = self.coordinator.emit(txid, lazy=True)
            self.timing["emit"] += time.perf_counter() - t_emit
            if attempt == 1:  # its files are read again on a retry: told once
                with self._stats_lock:
                    self.stats.malformed(self.coordinator.malformed(), self.errors)
            return batches

        def evaluate(batches: dict[str, Any]) -> dict[str, Parts]:
            # The collector paused while the results are decoded into rows: building W2's
            # 1.26 M rows set off repeated full collections over the driver's heap (about
            # 40 % of the time); the rows hold no cycles, and it runs again right after.
            with gc_paused():
                try:
                    return self._evaluate(txid, batches)
                except Exception as exc:  # a Spark job's failure: told as its worker's error
                    told = worker_error(exc)
                    if told is None:
                        raise
                    raise told from exc

        def failed(batches: dict[str, Any], exc: Exception, component: str) -> None:
            self.failed_attempts += 1
            with self._stats_lock:
                self.errors.append(ErrorRecord(component, 0, exc))
                self.stats.error(component)
                self.stats.add_batch({c: _size(b) for c, b in batches.items()}, False)

        try:
            out = attempt_transaction(
                txid, emit, evaluate, failed, blamed=self.plan.nodes[-1].cid,
                max_attempts=None if max_attempts is None else int(max_attempts),
                pause_ms=lambda ms: time.sleep(ms / 1000),
                stopping=lambda: self.stopping or self.lifecycle.stop_requested)
        except TransactionFailedError as exc:  # the run stops with it
            self.failure = exc
            raise
        t_commit = time.perf_counter()
        self.coordinator.commit(txid)
        self.timing["commit"] += time.perf_counter() - t_commit
        self.committed.append(txid)
        sizes = {cid: sum(map(len, parts)) for cid, parts in out.items()}
        sizes.update(self.spark_sizes)
        for node in self.plan.nodes:  # in plan order: a parent's size comes first
            if isinstance(node, RepartitionNode) and node.cid in self.inside \
                    and node.cid not in sizes:
                # Spark's own repartition, with no Python of ours to count it: it puts out
                # every tuple it receives.
                sizes[node.cid] = sum(sizes.get(p, 0) for p in node.parents)
        with self._stats_lock:
            self.stats.add_batch(sizes, True, batch_id)
        if self.capture:
            for cid, parts in out.items():
                for p in parts:
                    self.outputs[cid].extend(p)
        self.batch_seconds.append(time.perf_counter() - started)
        self.exhausted = self.coordinator.exhausted()

    def _evaluate(self, txid: int, batches: Mapping[str, Batch]) -> dict[str, Parts]:
        """The transaction's outputs; `batches` holds each spout's partitions of rows, or a
        file spout's `FileBatch`, read by Spark where the spout's operations run in Spark and
        here otherwise."""
        try:
            return self._evaluate_attempt(txid, batches)
        finally:
            self.launcher.unstage()

    def _evaluate_attempt(self, txid: int, batches: Mapping[str, Batch]) -> dict[str, Parts]:
        assert self.executor is not None
        # Storm's State protocol opens the batch before any Spark job, since some write their
        # state in the job (an opaque state's rollback of an earlier attempt comes first).
        self.executor.begin(txid)
        computed = Computed(skip=self.inside)
        for job in self._jobs():
            t_spark = time.perf_counter()
            route = self.launcher.launch(job, txid, batches[job.path[0].cid], computed)
            self.timing["spark"] += time.perf_counter() - t_spark
            if route is not None:
                self.launched.append(Launched(txid, job.kind, route, job.operations))
        self.spark_sizes = self.launcher.sizes(self.inside)
        t_driver = time.perf_counter()
        rows = {cid: [b.rows(self.unread.get(cid, ()))] if isinstance(b, FileBatch) else b
                for cid, b in batches.items() if cid not in self.inside}
        # The transaction's processing time: the driver's clock when its micro-batch first ran.
        now = self.coordinator.batch_time(txid, int(time.time() * 1000))
        out = self.executor.run(txid, rows, computed=computed,
                                final=self.coordinator.exhausted_after(txid), time_ms=now)
        self.timing["driver"] += time.perf_counter() - t_driver
        for cid, batch in batches.items():
            if cid not in out:  # a spout read in Spark: its size, for the counters
                # (a file spout read by Spark: only its size is known here; not captured)
                out[cid] = [[()] * batch.count()] if isinstance(batch, FileBatch) else batch
        return out

    def _jobs(self) -> tuple[SparkJob, ...]:
        """The Spark jobs of every transaction of this run (`planner.spark_jobs`), planned once
        its states are open."""
        if self._planned is None:
            assert self.executor is not None
            self._planned = spark_jobs(self.plan, self.paths, self.executor.states,
                                       self.tuning, self.capture)
        return self._planned

    # ---- running --------------------------------------------------------------------------------
    supports_deactivate = False  # its reader plans transactions, not spout pulls

    def apply_activation(self, active: bool) -> None:
        """Only a stop deactivates this runner, and the stop itself ends the query."""

    def drained(self) -> bool:
        """No transaction is being attempted: they commit inside their batch, so a stop between
        two loses nothing, and a stop during one lets it commit (or fail: not tried again)."""
        return not self.in_transaction

    def run(self, *, duration_ms: int | None = None, until_complete: bool = True,
            should_stop: Callable[[], bool] | None = None, on_progress: Progress | None = None,
            progress_every_ms: int = 1000) -> RunResult:
        """As `squall.protocols.Runner.run` (`duration_ms` in wall time)."""

        def drive(started: float) -> None:
            self.executor, self._planned = None, None
            self.coordinator.open()
            # A state whose store is down when the run starts is waited for, as a batch that
            # meets it mid-run is attempted again; a stop meanwhile ends the run.
            self.executor = wait_until_reachable(
                lambda: BatchExecutor(self.plan, self.conf, location=self.dir),
                what="trident states", pause_ms=lambda ms: time.sleep(ms / 1000),
                stopping=lambda: self.stopping or self.lifecycle.stop_requested)
            if self.executor is None:
                self.coordinator.close()
                return
            self.exhausted = self.coordinator.exhausted()
            if not (until_complete and self.exhausted):
                drive_query(self, TICKS[0], self._batch, options=TICKS[1], query_dir="ticks",
                            done=lambda: until_complete and self.exhausted, started=started,
                            duration_ms=duration_ms, should_stop=should_stop,
                            on_progress=on_progress, progress_every_ms=progress_every_ms,
                            finish_last_trigger=lambda: max(self.stats.batch_input, default=0))

        return self.run_bracket(drive, close=self._close, on_progress=on_progress)

    def _close(self) -> None:
        if self.executor is not None:  # opened, so the coordinator was too
            self.executor.close()
            self.coordinator.close()

    def _uncollected(self) -> set[str]:
        """Operations whose rows stay in Spark: those inside the Spark paths, spouts included
        when Spark reads their files (other spouts' batches come from the driver)."""
        nodes = {n.cid: n for n in self.plan.nodes}
        return {cid for cid in self.inside
                if not isinstance(node := nodes[cid], SpoutNode)
                or isinstance(node.spout, FileBatchSpout)}

    def batch_metrics(self) -> list[BatchMetrics]:
        """Spark's reports of the batches that ran a transaction (not the ticks after the
        input ended), each with the tuples its spouts emitted as its input rows."""
        rows = self.stats.batch_input  # per Spark batch id that committed a transaction
        return [dataclasses.replace(b, input_rows=rows[b.batch_id])
                for b in batch_metrics(self.query) if b.batch_id in rows]

    def batch_executed(self) -> dict[int, int]:
        return self.stats.batch_executed

    def complete(self) -> bool:
        """Every spout's input ended with the last committed transaction."""
        return self.exhausted

    def incomplete(self) -> list[str]:
        return [] if self.complete() else self.coordinator.incomplete()

    def spout_instances(self) -> dict[int, Any]:
        return {}  # batch spouts, driven by the coordinator

    def captured(self) -> Captures:
        return rows_by_first_task(self.topology, self.outputs) if self.capture else {}

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        return {}  # batches are settled, not tuples

    def component_stats(self) -> dict[str, ComponentStats]:
        with self._stats_lock:
            return self.stats.component_stats(
                None if self.executor is None else dict(self.executor.late))

    def result(self) -> RunResult:
        extra: dict[str, Any] = {"batches": len(self.committed),
                                 "committed": list(self.committed),
                                 "failed_attempts": self.failed_attempts,
                                 "batch_seconds": list(self.batch_seconds),
                                 "timing": dict(self.timing),
                                 "spark_operations": sorted(self.inside | set(self.paths)),
                                 "uncollected": sorted(self._uncollected()),
                                 "spark_jobs": [dataclasses.asdict(j) for j in self.launched]}
        if self.executor is not None and self.executor.late:
            extra["late"] = dict(self.executor.late)
        if self.capture:
            extra["outputs"] = {c: list(rows) for c, rows in self.outputs.items()}
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms, extra)


def _log_driver_persists(plan: Plan, paths: Mapping[str, list[Node]]) -> None:
    """Says once per run which `partition_persist`s run on the driver, and why."""
    for node in plan.nodes:
        if isinstance(node, PersistNode) and node.persist is Persist.PARTITION \
                and node.cid not in paths:
            why = "an operation before it runs on the driver" if persist_in_tasks(node) else (
                f"its state factory {type(node.factory).__name__} has no make_task_state, so "
                "its state opens on the driver only")
            log.info("partition_persist %r and the operations feeding it run on the driver: "
                     "%s", node.cid, why)


def _size(batch: Batch) -> int:
    if isinstance(batch, FileBatch):
        return batch.count()
    return sum(map(len, batch))


def _user_objects(node: Node) -> list[Any]:
    """The user's objects a node holds (spout, function, aggregators, state factory, custom
    grouping): their classes travel by value when a script defines them."""
    match node:
        case SpoutNode():
            return [node.spout]
        case RepartitionNode():
            return [node.scheme.grouping] if isinstance(node.scheme, CustomPartition) else []
        case RowNode():
            return [node.op]
        case AggregateNode():
            return [a.op for a in node.aggregations]
        case PersistNode() | StateQueryNode() | WindowNode():
            return [node.op, node.factory]
        case MergeNode() | JoinNode():
            return []
        case _:
            assert_never(node)
