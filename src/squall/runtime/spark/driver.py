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

import dataclasses
import hashlib
import json
import logging
import marshal
import os
import pickle
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
from pyspark import cloudpickle as pyspark_cloudpickle

from squall.atomic_files import read_or_none, write_atomic
from squall.components.windowed import check_window_limits
from squall.errors import InvalidTopologyError, ReliabilityError, SquallError
from squall.reliability.acker import AckerLedger
from squall.runtime.spark import row_schema
from squall.runtime.spark.session import get_session
from squall.runtime.spark.spouts import TIMED_OUT, SpoutSource, read_status, write_outcomes
from squall.runtime.spark.stage import StagePlan, stage_function
from squall.runtime.stats import ComponentStats, ErrorRecord, RunResult
from squall.topology.config import (
    Config,
    configured_message_timeout_ms,
    num_ackers,
    random_seed,
)
from squall.topology.description import ComponentSpec, Topology
from squall.topology.graph import bolt_order, is_acyclic

log = logging.getLogger("squall")
MAX_BATCH_TUPLES = "squall.spark.batch.max.tuples"
# A batch that cannot commit (a task raised, or refused it with BatchRetryError) runs again after
# a pause that doubles from the backoff up to 30 s; unset attempts: for ever, as Storm replays.
MAX_BATCH_ATTEMPTS = "squall.spark.batch.max.attempts"
RETRY_BACKOFF_MS = "squall.spark.batch.retry.backoff.ms"
RETRY_BACKOFF_MAX_MS = 30_000


class CheckpointMismatchError(SquallError):
    """The checkpoint location holds the state of a different topology."""


def fingerprint(topology: Topology) -> dict[str, Any]:
    """What must not change for a restarted topology to resume from a checkpoint."""
    return {
        cid: {
            "kind": spec.kind,
            "class": spec.class_name,
            "tasks": spec.num_tasks,
            "streams": {s: list(st.fields) for s, st in spec.streams.items()},
            "inputs": [[i.component, i.stream, i.grouping.name] for i in spec.inputs],
        }
        for cid, spec in topology.components.items()
    }


def portable(topology: Topology) -> Topology:
    """The topology with user classes that executors cannot import pickled by value.

    Classes from modules outside installed packages (a script, a test file) are not importable
    in Spark's Python workers, so their code travels inside the pickles.
    """
    installed = tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    squall_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def register(obj: Any) -> None:
        for cls in type(obj).__mro__:
            module = sys.modules.get(cls.__module__)
            path = getattr(module, "__file__", None)
            if module is None or path is None or cls.__module__ == "__main__":
                continue
            path = os.path.abspath(path)
            if path.startswith(installed) or path.startswith(squall_dir):
                continue
            # PySpark pickles closures (stage plans) with its own bundled cloudpickle.
            cloudpickle.register_pickle_by_value(module)
            pyspark_cloudpickle.register_pickle_by_value(module)

    specs: dict[str, ComponentSpec] = {}
    for cid, spec in topology.components.items():
        instance = spec.new_instance()
        register(instance)
        for sub in spec.inputs:
            if getattr(sub.grouping, "grouping", None) is not None:
                register(sub.grouping.grouping)
        specs[cid] = dataclasses.replace(spec, payload=cloudpickle.dumps(instance))
    return Topology(specs)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


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


def routing_keys(spark: Any, n: int) -> list[int]:
    """For each partition index t < n, a long whose Spark hash lands in partition t.

    `repartition(n, col)` places a row by pmod(murmur3(col), n); routing by these keys makes
    partition t receive exactly the rows of task index t (measured in docs/design/spark-runner.md).
    """
    from pyspark.sql import functions as F

    span = 64 * n
    while True:
        rows = (
            spark.range(0, span)
            .select(F.col("id"), F.expr(f"pmod(hash(id), {n})").alias("p"))
            .groupBy("p").agg(F.min("id").alias("k")).collect()
        )
        found = {int(r["p"]): int(r["k"]) for r in rows}
        if len(found) == n:
            return [found[t] for t in range(n)]
        span *= 4


def drive_query(
    runner: Any,
    source: str,
    batch: Callable[[Any, int], None],
    *,
    done: Callable[[], bool],
    started: float,
    duration_ms: int | None,
    max_wait_ms: int | None,
    on_progress: Callable[[Any], None] | None,
    progress_every_ms: int,
) -> None:
    """Run the query `source` -> `foreachBatch(batch)` of a runner until `done()`, `duration_ms`
    or `max_wait_ms` (counted from `started`, a `time.monotonic()`), then stop it.

    `runner` has `spark`, `dir` (the checkpoint location) and `conf`, and gets `query`; it is
    what `on_progress` receives every `progress_every_ms`. A failed query raises `SquallError`.
    """
    reader = runner.spark.readStream.format(source).option("dir", runner.dir).load()
    trigger_ms = int(runner.conf.get("squall.spark.trigger.ms") or 0)
    query = (
        reader.writeStream.foreachBatch(batch)
        .option("checkpointLocation", os.path.join(runner.dir, "query"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    runner.query = query
    next_progress = progress_every_ms
    try:
        while query.isActive:
            try:
                query.awaitTermination(0.05)
            except Exception:
                break  # the query failed: query.exception() below says why
            elapsed = int((time.monotonic() - started) * 1000)
            if on_progress is not None and elapsed >= next_progress:
                on_progress(runner)
                next_progress = elapsed + progress_every_ms
            if done():
                break
            if duration_ms is not None and elapsed >= duration_ms:
                break
            if max_wait_ms is not None and elapsed >= max_wait_ms:
                break
    finally:
        runner.stopping = True  # a batch waiting to run again gives up (uncommitted)
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        # The runner's own error, when it stopped the query on purpose, says it best.
        raise getattr(runner, "failure", None) or SquallError(
            f"the Spark query failed: {error}") from None


class SparkRunner:
    def __init__(
        self,
        topology: Topology,
        conf: Mapping[str, Any] | None = None,
        *,
        master: str | None = None,
        checkpoint_location: str | None = None,
        capture: bool = False,
        session: Any = None,
    ) -> None:
        if not is_acyclic(topology):
            raise InvalidTopologyError(
                "the spark runner executes bolts as stages in topological order, so a topology "
                "with a cycle cannot run on it; use the local runner"
            )
        check_window_limits(topology, conf)
        self.user_conf = dict(conf or {})
        self.conf = Config.effective_of(conf)
        # Checks that need no Spark come first, so a wrong checkpoint fails in milliseconds.
        self.dir = os.path.abspath(checkpoint_location or tempfile.mkdtemp(prefix="squall-"))
        os.makedirs(self.dir, exist_ok=True)
        self._check_fingerprint(topology)
        self.spark = session or get_session(master, self.user_conf)
        self.spark.dataSource.register(SpoutSource)
        self.topology = portable(topology)
        self.capture = capture
        self.seed = random_seed(self.conf)
        self.tracking = num_ackers(self.conf) > 0
        # How long the ledger remembers a failed root: the timeout even when timeouts are off.
        self.timeout_ms = configured_message_timeout_ms(self.conf)
        self.order = bolt_order(self.topology)
        self.keys = {cid: routing_keys(self.spark, self.topology.components[cid].num_tasks)
                     for cid in self.order}
        self.run_id = uuid.uuid4().hex
        self.errors: list[ErrorRecord] = []
        self.captures: dict[int, list[tuple[int, str, list[Any]]]] = {}
        self.bolt_stats: dict[int, dict[str, int]] = {}
        self.late_acks = 0
        self.batches = 0
        self.completed = False  # set by `run` when it stopped because the topology completed
        self.stopping = False  # set by drive_query before it stops the query
        self.failure: SquallError | None = None  # why the runner stopped its query, if it did
        self.retry_backoff_ms = int(self.conf.get(RETRY_BACKOFF_MS) or 1000)
        self._restore()
        if self.committed >= 0 or os.path.isdir(os.path.join(self.dir, "spouts")):
            log.info("%s", self.recovery_note())
        plan = {
            "topology": self.topology, "conf": self.user_conf, "keys": self.keys,
            "seed": self.seed, "tracking": self.tracking, "capture": capture,
            "max_batch": int(self.conf.get(MAX_BATCH_TUPLES) or 100_000),
        }
        write_atomic(os.path.join(self.dir, "plan.pkl"), cloudpickle.dumps(plan))

    # ---- checkpoint ----------------------------------------------------------------------
    def _check_fingerprint(self, topology: Topology) -> None:
        path = os.path.join(self.dir, "topology.json")
        mine = fingerprint(topology)
        blob = read_or_none(path)
        if blob is None:
            write_atomic(path, json.dumps(mine, sort_keys=True).encode())
            return
        theirs = json.loads(blob)
        if theirs != mine:
            digest = hashlib.sha1(blob).hexdigest()[:8]
            raise CheckpointMismatchError(
                f"checkpoint location {self.dir} was written by a different topology "
                f"(components {sorted(theirs)}, fingerprint {digest}); use a new checkpoint "
                "location, or restart the topology that wrote it"
            )

    def _restore(self) -> None:
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
        if batch_id <= self.committed:
            return  # already applied: Spark replays a batch whose commit it did not log
        cur = df
        for cid in self.order:
            plan = StagePlan(
                run_id=self.run_id, topology=self.topology, conf=self.user_conf, component=cid,
                batch_id=batch_id, committed=self.committed, state_dir=self.dir,
                keys=self.keys, seed=self.seed, tracking=self.tracking, capture=self.capture,
            )
            n = self.topology.components[cid].num_tasks
            cur = cur.repartition(n, "key").mapInArrow(stage_function(plan), row_schema.DDL)
        attempt = 1
        while True:
            try:
                cols = cur.toArrow().to_pydict()
            except Exception as exc:  # a task raised (a state store is down, say)
                errors = [ErrorRecord("?", -1, SquallError(_python_error(exc)), None,
                                      _wall_ms())]
            else:
                errors = self._aborts(cols)
                if not errors:
                    self._apply(cols, batch_id)
                    return
            # Nothing of this attempt is applied: its rows are dropped, the tasks restore the
            # last committed snapshots, and the same input runs again (docs/design/
            # spark-runner.md, "Batches that cannot commit").
            self._retry_or_raise(batch_id, attempt, errors)
            attempt += 1

    def _fail(self, message: str) -> SquallError:
        self.failure = SquallError(message)
        return self.failure

    def _aborts(self, cols: dict[str, list]) -> list[ErrorRecord]:
        """The errors of the tasks that refused to commit this batch (`BatchRetryError`)."""
        out = []
        for i, kind in enumerate(cols["kind"]):
            if kind == row_schema.ABORT:
                task = cols["task"][i]
                cid = self.topology.task_component(task) if task in self.topology.task_ids else "?"
                out.append(ErrorRecord(cid, task, pickle.loads(cols["values"][i]), None,
                                       cols["ts"][i]))
        return out

    def _retry_or_raise(self, batch_id: int, attempt: int, errors: list[ErrorRecord]) -> None:
        """Record why batch `batch_id` did not commit, then wait before its next attempt, or
        raise when `squall.spark.batch.max.attempts` is used up or the run is stopping (a
        foreachBatch that returned would let Spark log the batch as done)."""
        for record in errors:
            self.errors.append(record)
        first = errors[0]
        limit = self.conf.get(MAX_BATCH_ATTEMPTS)
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
                raise self._fail(f"stopped while batch {batch_id} was waiting to run again; "
                                 "nothing of it was committed")
            time.sleep(0.05)

    def _apply(self, cols: dict[str, list], batch_id: int) -> None:
        now = time.time_ns() // 1_000_000
        agg: dict[int, list] = {}  # root -> [xor, spout task or None, failed, start]
        forget: list[int] = []
        resets: list[int] = []
        topology = self.topology
        for i, kind in enumerate(cols["kind"]):
            task = cols["task"][i]
            if kind == row_schema.MESSAGES:
                ts = cols["ts"][i]
                for mkind, mtask, root, value in marshal.loads(cols["values"][i]):
                    if mkind == row_schema.RESET:
                        resets.append(root)
                        continue
                    if mkind == row_schema.FAIL and mtask == TIMED_OUT:
                        forget.append(root)
                        continue
                    entry = agg.get(root)
                    if entry is None:
                        entry = agg[root] = [0, None, False, ts]
                    if mkind == row_schema.FAIL:
                        entry[2] = True
                    else:
                        entry[0] ^= value
                        if mkind == row_schema.INIT:
                            entry[1] = mtask
                            entry[3] = ts
            elif kind == row_schema.ERROR:
                error = pickle.loads(cols["values"][i])
                cid = topology.task_component(task) if task in topology.task_ids else "?"
                self.errors.append(ErrorRecord(cid, task, error, cols["stream"][i], cols["ts"][i]))
                log.error("[%s:%s] %s: %s", cid, task, type(error).__name__, error)
            elif kind == row_schema.CAPTURE:
                # (batch, seq): seq counts within one batch of one partition only.
                self.captures.setdefault(task, []).append(
                    ((batch_id, cols["seq"][i]), cols["stream"][i],
                     pickle.loads(cols["values"][i]))
                )
            elif kind == row_schema.STATS:
                into = self.bolt_stats.setdefault(task, {})
                for key, value in pickle.loads(cols["values"][i]).items():
                    into[key] = into.get(key, 0) + value
            elif kind == row_schema.TUPLE or kind == row_schema.PACKET:
                raise RuntimeError(f"a tuple for task {task} reached no stage")
        for root in forget:
            self.ledger.forget(root, now)
        outcomes: list[tuple] = []
        for root in resets:
            reset = self.ledger.reset(root, now)
            if reset is not None and reset.kind == "reset":
                outcomes.append(tuple(reset))
        for root, (xor, spout_task, failed, start) in agg.items():
            outcome = self.ledger.apply(root, xor, now, spout_task=spout_task, failed=failed,
                                        start_ms=start)
            if outcome is None:
                continue
            if outcome.kind in ("ack", "fail", "reset"):
                outcomes.append(tuple(outcome))
            elif outcome.kind == "late":
                self.late_acks += 1
            else:
                self.errors.append(ErrorRecord("?", -1, ReliabilityError(
                    f"ack of an unknown tuple tree (root {root:#x})"), None, now))
        write_outcomes(self.dir, batch_id, outcomes)
        record = {"batch_id": batch_id, "ledger": self.ledger.snapshot()}
        write_atomic(os.path.join(self.dir, "commit.pkl"), pickle.dumps(record))
        self.committed = batch_id
        self.batches += 1

    # ---- running -------------------------------------------------------------------------
    def run(
        self,
        *,
        duration_ms: int | None = None,
        until_complete: bool = True,
        on_progress: Callable[[SparkRunner], None] | None = None,
        progress_every_ms: int = 1000,
        max_wait_ms: int | None = None,
    ) -> RunResult:
        started = time.monotonic()

        def complete() -> bool:
            if until_complete and self.complete():
                # Remembered: after this the reader may still plan a batch (ticks, say)
                # before the query stops, and a later check would see it unprocessed.
                self.completed = True
                return True
            return False

        drive_query(self, SpoutSource.name(), self._batch, done=complete, started=started,
                    duration_ms=duration_ms, max_wait_ms=max_wait_ms, on_progress=on_progress,
                    progress_every_ms=progress_every_ms)
        self._cleanup()
        self.elapsed_ms = int((time.monotonic() - started) * 1000)
        if on_progress is not None:
            on_progress(self)
        return self.result()

    def restored_bolts(self):
        """Each bolt task with its last committed state, rebuilt on the driver.

        Yields `BoltTask`s whose instances come from the snapshots of the last committed batch
        (tasks that never ran are skipped); their emits go nowhere.
        """
        from squall.atomic_files import latest_snapshot, snapshot_path
        from squall.runtime.spark.stage import StageHost
        from squall.task.snapshot import load_instance
        from squall.task.tasks import BoltTask

        plan = StagePlan(
            run_id=self.run_id, topology=self.topology, conf=self.user_conf, component="",
            batch_id=self.committed, committed=self.committed, state_dir=self.dir,
            keys=self.keys, seed=self.seed, tracking=False, capture=False,
        )
        host = StageHost(plan, row_schema.RowBuffer())
        for cid in self.order:
            for task_id in self.topology.component_tasks(cid):
                latest = latest_snapshot(self.dir, task_id, self.committed)
                blob = None if latest is None else read_or_none(
                    snapshot_path(self.dir, task_id, latest))
                if blob is None:
                    continue
                task = BoltTask(self.topology, task_id, self.user_conf, host, seed=self.seed,
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

    def complete(self) -> bool:
        """Every spout exhausted and settled, and every planned segment processed."""
        status = read_status(self.dir)
        if status is None or not status["exhausted"] or status["pending"]:
            return False
        progress = self.query.lastProgress
        if status["seg"] < 0:
            return True
        if not progress or not progress.get("sources"):
            return False
        end = progress["sources"][0].get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        return end is not None and int(end["seg"]) >= status["seg"] and len(self.ledger) == 0

    def component_stats(self) -> dict[str, ComponentStats]:
        out = {cid: ComponentStats(cid, spec.kind, spec.num_tasks)
               for cid, spec in self.topology.components.items()}
        status = read_status(self.dir) or {"spouts": {}}
        sources = list(self.bolt_stats.items()) + [
            (t, s["stats"]) for t, s in status["spouts"].items()
        ]
        for task, stats in sources:
            cs = out[self.topology.task_component(task)]
            for key in ("emitted", "transferred", "executed", "acked", "failed", "timed_out",
                        "errors", "latency_total_ms", "latency_count"):
                setattr(cs, key, getattr(cs, key) + stats.get(key, 0))
        for t, s in status["spouts"].items():
            cs = out[self.topology.task_component(t)]
            cs.pending += s["stats"].get("pending", 0)
        return out

    def result(self) -> RunResult:
        return RunResult(self.component_stats(), list(self.errors),
                         getattr(self, "elapsed_ms", 0),
                         {"late_acks": self.late_acks, "batches": self.batches})
