"""`SparkRunner`: runs a topology as one Structured Streaming query (driver side).

Per micro-batch (`foreachBatch`): the spout rows planned by the reader go through one
`mapInArrow` stage per bolt, in topological order. Each stage repartitions by a routing key whose
Spark hash is the target task's partition index, so every task's tuples meet in one partition; rows
for other stages, and ack rows, ride along, so the batch has one lineage and one action. The driver
then merges the per-task XOR aggregates into the ledger, writes the outcomes for the spouts and,
last, the commit record: a replay of an uncommitted batch restores every task from the snapshot of
the last committed batch, so nothing is lost or applied twice.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import cloudpickle

from squall.atomic_files import latest_snapshot, read_or_none, snapshot_path, write_atomic
from squall.components.partitioned_source import PartitionedSource
from squall.errors import ReliabilityError, SquallError
from squall.metrics.snapshot import BatchMetrics
from squall.protocols import Progress
from squall.reliability.acker import AckerLedger, Outcome
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
from squall.runtime.lifecycle import ACTIVE, STOPPING, Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.run_dir import open_run_dir
from squall.runtime.settlement import Settlement
from squall.runtime.spark import row_schema
from squall.runtime.spark.ack_fold import fold
from squall.runtime.spark.batch_rows import BatchRows, add_counters, decode_batch
from squall.runtime.spark.pulls import (
    SPOUT_HOST,
    SPOUTS_ON_EXECUTORS,
    read_pulled_status,
    write_pulled_status,
)
from squall.runtime.spark.query import StoppedInBatch, batch_metrics, drive_query, routing_keys
from squall.runtime.spark.reader_log import Relay
from squall.runtime.spark.rescale import migrate
from squall.runtime.spark.session import get_session
from squall.runtime.spark.shipping import portable
from squall.runtime.spark.spouts import (
    INPUT_PARTITIONS,
    PULLED_TASKS,
    SpoutSource,
    read_status,
    write_control,
    write_outcomes,
)
from squall.runtime.spark.stage import StageChain, StageHost, StagePlan, pulled_where_read
from squall.task.snapshot import load_instance
from squall.task.tasks import BoltTask
from squall.topology.config import (
    configured_message_timeout_ms,
    num_ackers,
    random_seed,
)
from squall.topology.description import Topology
from squall.topology.graph import bolt_order

log = logging.getLogger("squall")
MAX_BATCH_TUPLES = "squall.spark.batch.max.tuples"
# Its default. Each batch pays a fixed 0.25-0.3 s (Spark's planning, offset and commit logs, a
# Python worker round per stage, the driver's commit): a seventh of a W1 batch of 100,000
# sentences, a fifteenth of one of 250,000 (docs/design/spark-runner.md, "Batch size").
DEFAULT_MAX_BATCH_TUPLES = 250_000
# A batch that cannot commit (a task raised, or refused it with BatchRetryError) runs again after
# a pause that doubles from the backoff up to 30 s; unset attempts: for ever, as Storm replays.
MAX_BATCH_ATTEMPTS = "squall.spark.batch.max.attempts"
RETRY_BACKOFF_MS = "squall.spark.batch.retry.backoff.ms"
# The spouts' reader plans the next batch while one runs (spouts.SpoutReader._plans_ahead).
PLAN_AHEAD = "squall.spark.plan.ahead"
RETRY_BACKOFF_MAX_MS = 30_000


def _python_error(exc: BaseException) -> str:
    """The Python exception line of a failed Spark job (the last traceback's final line), or
    the error's first line: what a user needs, without the JVM stack around it."""
    text = str(exc)
    tail = text.rsplit("Traceback (most recent call last):", 1)
    if len(tail) == 2:
        for line in tail[1].splitlines():
            if line and not line[0].isspace():
                return line.strip()
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _batch_ids(directory: str) -> list[int]:
    """The batch ids of the files of one of Spark's logs (`offsets`, `commits`), in order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


class SparkRunner(Controls, Reporting):
    """Runs a topology as one Structured Streaming query (see the module doc)."""

    runner_name = "spark"

    def __init__(
        self,
        topology: Topology,
        conf: Mapping[str, Any] | RunConfig | None = None,
        *,
        master: str | None = None,
        checkpoint_location: str | None = None,
        capture: bool = False,
        session: Any = None,
    ) -> None:
        config = resolve(topology, conf, runner="spark")
        self.config, self.conf = config, config.user
        # Checks that need no Spark come first, so a wrong checkpoint fails in milliseconds.
        run_dir = open_run_dir(topology, checkpoint_location, conf=self.conf, migrate=migrate)
        self.dir, self.checkpoint_id = run_dir.path, run_dir.checkpoint_id
        began = time.monotonic()
        self.spark = session or get_session(master, self.conf)
        # Start-up, for the metrics (squall.metrics.snapshot.MetricsSnapshot.startup): the
        # session (about 0 when it was running already), then from `run`'s start the query's
        # start, its first batch's start and end.
        self.startup = {"session_ms": int((time.monotonic() - began) * 1000)}
        self.spark.dataSource.register(SpoutSource)
        self.topology = portable(topology)
        self.capture = capture
        self.seed = random_seed(self.config.effective)
        self.tracking = num_ackers(self.config.effective) > 0
        # How long the ledger remembers a failed root: the timeout even when timeouts are off.
        self.timeout_ms = configured_message_timeout_ms(self.config.effective)
        self.order = bolt_order(self.topology)
        self.keys = {cid: routing_keys(self.topology.components[cid].num_tasks)
                     for cid in self.order}
        # The reader hands a batch's rows over partitioned for the first bolt, which then runs
        # where they are read (spouts.INPUT_PARTITIONS); not with a built-in source, whose
        # ranges are read, and their records routed, on the executors.
        self.source_options = {"dir": self.dir}
        # User spouts run in the reader (the default) or are pulled on the executors
        # (squall.runtime.spark.pulls), whose rows are routed where they are pulled: there the
        # first bolt runs in the pulls' partitions only when each pull sends to one of its
        # tasks (spouts.PULLED_TASKS, stage.pulled_where_read).
        self.spout_host = str(self.config.effective.get(SPOUT_HOST) or "reader")
        if self.order and not any(isinstance(spec.new_instance(), PartitionedSource)
                                  for spec in self.topology.spouts.values()):
            first = str(self.topology.components[self.order[0]].num_tasks)
            if self.spout_host != SPOUTS_ON_EXECUTORS:
                self.source_options[INPUT_PARTITIONS] = first
            elif (pulled := pulled_where_read(self.topology, self.order[0], self.conf)):
                self.source_options[INPUT_PARTITIONS] = first
                self.source_options[PULLED_TASKS] = ",".join(map(str, pulled))
        self.run_id = uuid.uuid4().hex
        self.chain: StageChain | None = None  # the batches' stages (_batch)
        self.errors: list[ErrorRecord] = []
        # Logged rate-limited per component and error kind (batch time); every one is kept.
        self.error_log = ErrorLog(log, traceback=user_error)
        self.captures: dict[int, list[tuple[tuple[int, int], str, list[Any]]]] = {}
        self.bolt_stats: dict[int, dict[str, int]] = {}
        self.executed_in: dict[int, int] = {}  # batch id -> tuples its bolts executed
        # Trees open when this run's first batch ended: they waited for start-up (_apply).
        self.startup_open: set[int] = set()
        self.outcomes: list[tuple] = []  # the batch being applied's, for the spouts
        self.record_errors: dict[int, tuple[str, str]] = {}  # range root -> its records' error
        self.settlement = Settlement(self._deliver, self._report_unknown)
        self.query: Any = None  # set by drive_query
        self.elapsed_ms = 0
        self.batches = 0
        self.completed = False  # set by `run` when it stopped because the topology completed
        self.stopping = False  # set by drive_query before it stops the query
        self.failure: SquallError | None = None  # why the runner stopped its query, if it did
        self.retry_backoff_ms = int(self.config.effective.get(RETRY_BACKOFF_MS) or 1000)
        self.lifecycle = Lifecycle()
        self.reader_log = Relay()
        # A control file left inactive by a stopped run must not deactivate this one.
        write_control(self.dir, active=True)
        self._restore()
        self.restarted = self.committed >= 0  # counters are this run's (squall.metrics)
        if self.committed >= 0 or os.path.isdir(os.path.join(self.dir, "spouts")):
            log.info("%s", self.recovery_note())
        plan = {
            "topology": self.topology, "conf": self.conf, "keys": self.keys,
            "seed": self.seed, "tracking": self.tracking, "capture": capture,
            "run": self.run_id,  # the reader's counters start from zero on a new run
            "max_batch": int(self.config.effective.get(MAX_BATCH_TUPLES)
                             or DEFAULT_MAX_BATCH_TUPLES),
            "spout_host": self.spout_host,
            "plan_ahead": self.config.effective.get(PLAN_AHEAD) is True,
            # A reader in this very process (tests build one) logs here already (reader_log).
            "driver_pid": os.getpid(),
        }
        write_atomic(os.path.join(self.dir, "plan.pkl"), cloudpickle.dumps(plan))

    def _relay_reader_log(self) -> None:
        """Log what the spouts' reader process logged since the last call (reader_log)."""
        status = read_status(self.dir) or {}
        for level, message in self.reader_log.new(status.get("log", [])):
            log.log(level, "%s", message)

    # ---- checkpoint ----------------------------------------------------------------------
    def _restore(self) -> None:
        # The pulled spout tasks' statuses, as the last commit left them (empty: none yet).
        self.pulled_status = read_pulled_status(self.dir)
        blob = read_or_none(os.path.join(self.dir, "commit.pkl"))
        if blob is None:
            self.committed = -1
            self.ledger = AckerLedger(memory_ms=self.timeout_ms)
            return
        record = pickle.loads(blob)
        self.committed = record["batch_id"]
        self.ledger = AckerLedger.restore(record["ledger"], self.timeout_ms)

    def recovery_note(self) -> str:
        """One line on what a restart resumes from: the last committed batch, the batch Spark
        replays (planned before the stop, not committed), and the tuple trees still pending."""
        planned = _batch_ids(os.path.join(self.dir, "query", "offsets"))
        logged = _batch_ids(os.path.join(self.dir, "query", "commits"))
        replayed = [b for b in planned if b > max(logged, default=-1)]
        status = read_status(self.dir) or {}
        note = f"resuming from {self.dir}: " + (
            f"batch {self.committed} committed" if self.committed >= 0 else "no batch committed")
        if replayed:
            # A batch the driver committed but Spark did not log is skipped when replayed.
            again = [b for b in replayed if b > self.committed]
            note += (f"; batch {replayed[-1]} was planned before the stop and is "
                     + ("replayed with the same input" if again else "already applied"))
        pending = status.get("pending")
        if pending is not None:
            note += f"; {pending} tuple tree{'s' if pending != 1 else ''} pending"
        return note

    # ---- one micro-batch -----------------------------------------------------------------
    def _batch(self, df: Any, batch_id: int) -> None:
        self._relay_reader_log()
        if "first_batch_started_ms" not in self.startup and self._began is not None:
            self.startup["first_batch_started_ms"] = int((time.monotonic() - self._began) * 1000)
        if batch_id <= self.committed:
            return  # already applied: Spark replays a batch whose commit it did not log
        if self.chain is None:  # made once per run: a batch only applies it
            plan = StagePlan(
                run_id=self.run_id, topology=self.topology, conf=self.conf, component="",
                batch_id=-1, committed=-1, state_dir=self.dir, keys=self.keys, seed=self.seed,
                tracking=self.tracking, capture=self.capture, checkpoint_id=self.checkpoint_id,
            )
            self.chain = StageChain(self.spark, plan, self.order,
                                    partitioned=INPUT_PARTITIONS in self.source_options)
        cur = self.chain.apply(df, batch_id, self.committed)
        attempt = 1
        while True:
            try:
                rows = decode_batch(cur.toArrow().to_pydict(), self.topology)
            except Exception as exc:  # a task raised (a state store is down, say)
                if self.stopping:  # the run's stop cancelled the batch's job
                    raise StoppedInBatch(f"stopped during batch {batch_id}") from None
                errors = [ErrorRecord("?", -1, SquallError(_python_error(exc)), None, wall_ms())]
            else:
                errors = rows.aborts  # tasks that refused to commit (BatchRetryError)
                if not errors:
                    self._apply(rows, batch_id)
                    if "first_batch_done_ms" not in self.startup and self._began is not None:
                        self.startup["first_batch_done_ms"] = int(
                            (time.monotonic() - self._began) * 1000)
                    return
            # Nothing of this attempt is applied: its rows are dropped, the tasks restore the
            # last committed snapshots, and the same input runs again (docs/design/
            # spark-runner.md, "Batches that cannot commit").
            self._retry_or_raise(batch_id, attempt, errors)
            attempt += 1

    def _fail(self, message: str) -> SquallError:
        self.failure = SquallError(message)
        return self.failure

    def _retry_or_raise(self, batch_id: int, attempt: int, errors: list[ErrorRecord]) -> None:
        """Record why batch `batch_id` did not commit, then wait before its next attempt, or
        raise when `squall.spark.batch.max.attempts` is used up or the run is stopping (a
        foreachBatch that returned would let Spark log the batch as done)."""
        for record in errors:
            self.errors.append(record)
        first = errors[0]
        limit = self.config.effective.get(MAX_BATCH_ATTEMPTS)
        what = f"[{first.component}:{first.task}] {type(first.error).__name__}: {first.error}"
        if limit is not None and attempt >= int(limit):
            raise self._fail(
                f"batch {batch_id} could not commit in {attempt} attempts ({MAX_BATCH_ATTEMPTS}"
                f"={limit}); last error: {what}. Nothing of it was committed: a restart with "
                "the same checkpoint location runs it again")
        delay_ms = min(self.retry_backoff_ms * 2 ** (attempt - 1), RETRY_BACKOFF_MAX_MS)
        log.error("batch %d not committed (attempt %d): %s; running it again from the last "
                  "committed state in %.1f s", batch_id, attempt, what, delay_ms / 1000)
        deadline = time.monotonic() + delay_ms / 1000
        while time.monotonic() < deadline:
            if self.stopping:
                raise StoppedInBatch(f"stopped while batch {batch_id} was waiting to run again")
            time.sleep(0.05)

    def _deliver(self, outcome: Outcome) -> None:
        self.outcomes.append(tuple(outcome))  # written for the reader, which hands them over

    def _report_unknown(self, component: str | None, error: ReliabilityError) -> None:
        self.errors.append(ErrorRecord(component or "?", -1, error, None, wall_ms()))

    @property
    def late_acks(self) -> int:
        """Acks that arrived for trees that had already failed or timed out."""
        return self.settlement.late_acks

    def _apply(self, rows: BatchRows, batch_id: int) -> None:
        now = wall_ms()
        folded = fold(rows.messages, self.ledger.entries)
        for record in rows.errors:
            self.errors.append(record)
            self.error_log.record(record, now)
        for task, seq, stream, values in rows.captures:
            # (batch, seq): seq counts within one batch of one partition only.
            self.captures.setdefault(task, []).append(((batch_id, seq), stream, values))
        add_counters(self.bolt_stats, rows.stats)
        self.executed_in[batch_id] = sum(s.get("executed", 0) for s in rows.stats.values())
        for root in folded.forget:
            self.ledger.forget(root, now)
            self.record_errors.pop(root, None)
        self.outcomes = []
        for root in folded.resets:
            reset = self.ledger.reset(root, now)
            if reset is not None and reset.kind == "reset":
                self._deliver(reset)
        self.outcomes += folded.done_outcomes(now)  # trees complete within the batch
        # A failed tree is attributed the batch's last error (the exception a bolt failed it
        # on, usually), for the dead-letter stream (squall.reliability.retries).
        error = None
        if rows.errors:
            last = rows.errors[-1].error
            error = (type(last).__name__, str(last))
        for root, (xor, spout_task, failed, start, records, size) in folded.rest.items():
            outcome = self.ledger.apply(root, xor, now, spout_task=spout_task, failed=failed,
                                        start_ms=start, failed_records=records, tuples=size)
            if records and error is not None:
                # A range fails once the rest of it completes, maybe batches later: its error
                # is the one of the batch its records failed in.
                self.record_errors[root] = error
            if outcome is not None:
                if outcome.kind == "fail":
                    failed_on = self.record_errors.pop(root, None) or error
                    if failed_on is not None:
                        outcome = outcome._replace(error=failed_on)
                self.settlement.settle(outcome)
        self._mark_startup()
        if rows.spouts:  # spout tasks pulled on the executors: their status, with the batch
            self.pulled_status.update(rows.spouts)
            write_pulled_status(self.dir, self.pulled_status)
        write_outcomes(self.dir, batch_id, self.outcomes)
        commit = {"batch_id": batch_id, "ledger": self.ledger.snapshot()}
        write_atomic(os.path.join(self.dir, "commit.pkl"), pickle.dumps(commit))
        self.committed = batch_id
        self.batches += 1

    def _mark_startup(self) -> None:
        """Mark the outcomes of trees that waited for this run's start-up (`Outcome.startup`).

        The run's first micro-batch starts Spark's Python workers and loads every component:
        seconds that are start-up, not a latency of tuples (`startup` reports them). The trees
        it settles, and those still open after it (they started before it ended, or in a
        previous run), are acked as any other but left out of complete latency; their spout
        tuples are counted in `startup["tuples"]`."""
        first = self.batches == 0
        still = self.startup_open
        if not first and not still:
            return
        out = []
        tuples = 0
        for o in self.outcomes:
            if first or o[1] in still:
                outcome = Outcome(*o)._replace(startup=True)
                if outcome.kind == "ack":
                    tuples += outcome.tuples
                elif outcome.kind == "fail" and outcome.records is not None:
                    tuples += outcome.tuples - len(outcome.records)  # the rest completed
                o = tuple(outcome)
            out.append(o)
        self.outcomes = out
        self.startup["tuples"] = self.startup.get("tuples", 0) + tuples
        if first:
            self.startup_open = set(self.ledger.entries)
        else:
            still.intersection_update(self.ledger.entries)

    # ---- running -------------------------------------------------------------------------
    def run(
        self,
        *,
        duration_ms: int | None = None,
        until_complete: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Progress | None = None,
        progress_every_ms: int = 1000,
    ) -> RunResult:
        """As `squall.protocols.Runner.run` (`duration_ms` in wall time)."""

        def complete() -> bool:
            if until_complete and self.complete():
                # Remembered: after this the reader may still plan a batch (ticks, say)
                # before the query stops, and a later check would see it unprocessed.
                self.completed = True
                return True
            return False

        def drive(started: float) -> None:
            drive_query(self, SpoutSource.name(), self._batch, done=complete, started=started,
                        duration_ms=duration_ms, should_stop=should_stop,
                        on_progress=on_progress, progress_every_ms=progress_every_ms,
                        options=self.source_options)
            self._cleanup()  # after a run that ended well only: a failed one restarts

        return self.run_bracket(drive, on_progress=on_progress)

    def restored_bolts(self) -> Iterator[BoltTask]:
        """Each bolt task with its last committed state, rebuilt on the driver.

        Yields `BoltTask`s whose instances come from the snapshots of the last committed batch
        (tasks that never ran are skipped); their emits go nowhere.
        """
        plan = StagePlan(
            run_id=self.run_id, topology=self.topology, conf=self.conf, component="",
            batch_id=self.committed, committed=self.committed, state_dir=self.dir,
            keys=self.keys, seed=self.seed, tracking=False, capture=False,
            checkpoint_id=self.checkpoint_id,
        )
        host = StageHost(plan, row_schema.RowBuffer())
        for cid in self.order:
            for task_id in self.topology.component_tasks(cid):
                latest = latest_snapshot(self.dir, task_id, self.committed)
                blob = None if latest is None else read_or_none(
                    snapshot_path(self.dir, task_id, latest))
                if blob is None:
                    continue
                task = BoltTask(self.topology, task_id, self.conf, host, seed=self.seed,
                                tracking=False)
                load_instance(task, blob)
                yield task

    def _cleanup(self) -> None:
        """Call every bolt task's `cleanup`, on the driver, with its last committed state.

        Storm calls cleanup when a topology is killed in local mode; executors here do not know
        when a run ends, so the driver restores each task from its snapshot and calls it.
        """
        for task in self.restored_bolts():
            task.cleanup()

    def apply_activation(self, active: bool) -> None:
        write_control(self.dir, active=active)

    def status(self) -> str:
        """As `Controls.status`, and `deactivating`/`activating` until the spouts' reader (its
        own process) has carried the request out: a batch it was planning may still start."""
        wanted = self.lifecycle.status()
        if wanted == STOPPING:
            return wanted
        status = read_status(self.dir)
        pulled = True if status is None else status.get("active", True)
        if pulled != (wanted == ACTIVE):
            return "activating" if wanted == ACTIVE else "deactivating"
        return wanted

    def drained(self) -> bool:
        """The reader has stopped pulling the spouts, and every tree they started has settled
        in a committed batch."""
        status = read_status(self.dir)
        if status is None:
            return True  # nothing was ever planned
        if status.get("active", True) or status["pending"] or len(self.ledger):
            return False
        return self._processed(status["seg"])

    def _processed(self, seg: int) -> bool:
        """Every segment up to `seg` went through a batch Spark reported."""
        if seg < 0:
            return True
        progress = self.query.lastProgress
        if not progress or not progress.get("sources"):
            return False
        end = progress["sources"][0].get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        return end is not None and int(end["seg"]) >= seg

    def complete(self) -> bool:
        """Every spout exhausted and settled, and every planned segment processed; once a run
        stopped because of that, it stays complete (the reader may still plan a batch of ticks
        before the query stops, which a later look would see unprocessed)."""
        if self.completed:
            return True
        status = read_status(self.dir)
        if status is None or not status["exhausted"] or status["pending"]:
            return False
        return self._processed(status["seg"]) and len(self.ledger) == 0

    def incomplete(self) -> list[str]:
        if self.complete():
            return []
        status = read_status(self.dir)
        if status is None:
            # The reader writes its status at the end of its first planning round.
            return [f"no batch planned yet: spouts {sorted(self.topology.spouts)} "
                    "still in their first planning round"]
        # What each spout that never finished did, named as on the local runner.
        spouts = status["spouts"].values()
        stuck = sorted({s["component"] for s in spouts if not s["exhausted"]})
        stats = self.component_stats() if stuck else {}
        counts = [f"spout {c!r}: emitted {stats[c].emitted}, acked {stats[c].acked}, "
                  f"failed {stats[c].failed}" for c in stuck]
        return [f"spouts exhausted: {'yes' if status['exhausted'] else 'no'}",
                *([f"spouts not exhausted: {stuck}"] if stuck else []), *counts,
                f"tracked tuples pending: {status['pending']}",
                f"trees in the ledger: {len(self.ledger)}"]

    def spout_instances(self) -> dict[int, Any]:
        return {}  # the spouts run in the reader's process

    def task_counters(self) -> list[tuple[int, dict[str, int]]]:
        status = read_status(self.dir) or {"spouts": {}}
        tasks = list(self.bolt_stats.items())
        tasks += [(int(t), s["stats"]) for t, s in status["spouts"].items()]
        return tasks

    def captured(self) -> Captures:
        return ordered_captures(self.captures)

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        status = read_status(self.dir) or {"spouts": {}}
        return {task: s["settled_ids"] or {} for task, s in status["spouts"].items()}

    def component_stats(self) -> dict[str, ComponentStats]:
        return aggregate_stats(self.topology, self.task_counters())

    def batch_metrics(self) -> list[BatchMetrics]:
        return batch_metrics(self.query)

    def batch_executed(self) -> dict[int, int]:
        return self.executed_in

    def result(self) -> RunResult:
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms,
                         {"late_acks": self.late_acks, "batches": self.batches})
