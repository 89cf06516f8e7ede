"""User spouts pulled on the executors (`squall.spark.spouts` = `executors`).

By default every user spout task lives in the streaming source's reader on the driver
(`spouts.SpoutReader`), which calls `next_tuple` before each batch's job. With spouts on the
executors, the reader only plans: per batch it writes one *pull* per spout task (the task, its
budget of tuples, the planning time, whether the spouts are active, the last committed segment and
the last batch whose outcomes may be handed over) in a file beside the batch's segment, and Spark
turns each pull into an input partition. `read_pull` runs on an executor: it takes the task's
instance from the worker's cache, or restores it from the task's newest snapshot before this
segment (or opens it), hands it the outcomes of its tuple trees, fails timed-out trees, pulls up to
the budget, writes the task's snapshot for this segment, and yields the tuples as packets, with
the ledger's INIT rows and one SPOUT row: the task's status (exhausted, pending, counters) for the
driver, which commits it with the batch.

So spout tasks read in parallel where the bolts run, and their tuples never pass through the
driver. The snapshot is the authority, as for bolts: a batch that runs again (a retried Spark task,
an attempt the driver retries, a replay after a restart) restores the snapshot of the task's last
segment before it, so the spout emits from the same state again; its tuples equal the first
attempt's when `next_tuple` is a function of the spout's state and its input (a file and an
offset, a log and a position), as after a Storm worker restart.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from squall.atomic_files import read_or_none, write_atomic
from squall.metrics.histogram import LatencyHistogram
from squall.reliability.acker import Outcome
from squall.runtime.gc_pause import gc_paused
from squall.runtime.reporting import task_figures
from squall.runtime.settlement import deliver_to_spout
from squall.runtime.spark import row_schema
from squall.runtime.spark.ranges import cached_plan
from squall.task.snapshot import dump_instance, load_instance
from squall.task.tasks import SpoutTask

SPOUT_HOST = "squall.spark.spouts"  # where user spout tasks run: "reader" or "executors"
SPOUTS_ON_EXECUTORS = "executors"
SNAPSHOTS_KEPT = 3  # per task: the newest, and the ones a retry or a replay may restore


class ReaderHost:
    """The `SpoutHost` of spout tasks, in the reader or in a pull: emits become rows of the
    batch."""

    def __init__(self, keys: dict[int, int], capture: bool) -> None:
        self.rows = row_schema.RowBuffer()
        self.packets = row_schema.Packets(keys, self.next_seq)
        self.send = self.packets.send  # the Host's send: tuples go into packets
        self.messages: list[tuple[int, int, int, int]] = []
        self.keys = keys
        self.now = 0
        self.seq = 0
        self.capture = capture

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def set_now(self, now: int) -> None:
        self.now = now
        self.packets.set_now(now)

    def ack_init(self, root: int, xor: int, spout_task: int) -> None:
        self.messages.append((row_schema.INIT, spout_task, root, xor))

    def forget(self, root: int) -> None:
        self.messages.append((row_schema.FAIL, row_schema.TIMED_OUT, root, 0))

    def now_ms(self) -> int:
        return self.now

    def report_error(self, component: str, task: int, error: BaseException,
                     stream: str | None = None) -> None:
        self.seq += 1
        self.rows.report(row_schema.ERROR, task=task, key=0, stream=stream,
                         payload=row_schema.portable_error(error), ts=self.now, seq=self.seq)

    def drain(self, tasks: Iterable[SpoutTask]) -> row_schema.RowBuffer:
        """The rows of what `tasks` did since the last drain, out of the host: after the rows
        already in `rows` (errors, ticks), their captures, their packets and the ledger's
        messages."""
        host_rows = self.rows
        for task in tasks:
            if task.capture:
                for stream, values in task.capture:
                    self.seq += 1
                    host_rows.report(row_schema.CAPTURE, task=task.task_id, key=0,
                                     stream=stream, payload=values, ts=self.now, seq=self.seq)
                task.capture.clear()
        host_rows.rows.extend(self.packets.rows())
        if self.messages:
            host_rows.append(row_schema.messages_row(self.messages, self.now))
            self.messages = []
        self.rows = row_schema.RowBuffer()
        return host_rows


class PullPartition(InputPartition):
    """One spout task's pull in one batch (see the module's docstring)."""

    def __init__(self, run_dir: str, task: int, seg: int, budget: int, now: int, active: bool,
                 committed: int, outcomes_upto: int) -> None:
        self.run_dir, self.task, self.seg, self.budget = run_dir, task, seg, budget
        self.now, self.active, self.committed = now, active, committed
        self.outcomes_upto = outcomes_upto


def pulls_path(run_dir: str, seg: int) -> str:
    return os.path.join(run_dir, "pulls", f"seg={seg:012d}.pkl")


def write_pulls(run_dir: str, seg: int, pulls: list[tuple]) -> None:
    """The segment's pulls, `PullPartition` arguments after `run_dir`, written before its
    offset is returned, so a replay reads the same ones."""
    write_atomic(pulls_path(run_dir, seg), pickle.dumps(pulls))


def pull_partitions(run_dir: str, seg: int) -> list[InputPartition]:
    blob = read_or_none(pulls_path(run_dir, seg))
    if blob is None:
        return []
    return [PullPartition(run_dir, *entry) for entry in pickle.loads(blob)]


def unlink_pulls(run_dir: str, seg: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pulls_path(run_dir, seg))


def task_dir(run_dir: str, task: int) -> str:
    return os.path.join(run_dir, "spout-tasks", f"task={task}")


def task_snapshot_path(run_dir: str, task: int, seg: int) -> str:
    return os.path.join(task_dir(run_dir, task), f"seg={seg:012d}.pkl")


def task_snapshots(run_dir: str, task: int) -> list[int]:
    try:
        names = os.listdir(task_dir(run_dir, task))
    except FileNotFoundError:
        return []
    return sorted(int(n[4:-4]) for n in names if n.startswith("seg=") and n.endswith(".pkl"))


class _Pulled:
    """A spout task kept in an executor's Python worker between batches."""

    def __init__(self, task: SpoutTask, host: ReaderHost, run: Any, seg: int,
                 delivered: int) -> None:
        self.task, self.host, self.run, self.seg = task, host, run, seg
        self.delivered = delivered


# (run_dir, task id) -> the task as its last pull in this worker left it. It is used only when
# its segment is the newest snapshot before the pull's, of the same run: what a restore would give.
_CACHE: dict[tuple[str, int], _Pulled] = {}


def _task_for(part: PullPartition) -> _Pulled:
    plan, keys = cached_plan(part.run_dir)
    before = [s for s in task_snapshots(part.run_dir, part.task) if s < part.seg]
    cached = _CACHE.get((part.run_dir, part.task))
    if (cached is not None and before and cached.seg == before[-1]
            and cached.run == plan.get("run")):
        return cached
    host = ReaderHost(keys, plan["capture"])
    task = SpoutTask(plan["topology"], part.task, plan["conf"], host, seed=plan["seed"],
                     tracking=plan["tracking"], capture=[] if plan["capture"] else None)
    pulled = _Pulled(task, host, plan.get("run"), -1, -1)
    if before:
        blob = read_or_none(task_snapshot_path(part.run_dir, part.task, before[-1]))
        assert blob is not None  # snapshots are removed only below the newest few
        state = pickle.loads(blob)
        try:
            load_instance(task, state["instance"])
        except Exception as exc:  # a spout that no longer unpickles is reopened, as Storm
            task.report(exc)
            task.open()
        else:
            task.pending = pickle.loads(state["pending"])
            retries = pickle.loads(state["retries"])
            retries.policy = task.retries.policy  # the configuration of this run
            task.retries = retries
            task.active = state["active"]
            if state["run"] == plan.get("run"):
                # The same run: its counters, latencies and (for tests) settled ids go on.
                for key, value in state["stats"].items():
                    setattr(task.stats, key, value)
                task.complete_latency = LatencyHistogram.from_state(state["latency"])
                if task.settled_ids is not None:
                    task.settled_ids = state["settled_ids"]
            else:
                # A new run (a restart on the checkpoint): counters from zero, as its bolts'
                # and the time the topology was down does not count against a tree's timeout.
                task.pending.restart_clocks(part.now)
            host.seq = state["seq"]
        pulled.seg, pulled.delivered = before[-1], state["delivered"]
    else:
        task.open()
    return pulled


def _deliver(pulled: _Pulled, run_dir: str, upto: int) -> None:
    """Hand the task the outcomes of its trees settled in batches up to `upto` (committed)."""
    task = pulled.task
    for batch_id in range(pulled.delivered + 1, upto + 1):
        blob = read_or_none(os.path.join(run_dir, "outcomes", f"batch={batch_id:012d}.pkl"))
        if blob is None:
            continue  # a batch that settled nothing wrote no file
        for settled in pickle.loads(blob):
            outcome = Outcome(*settled)
            if outcome.spout_task == task.task_id:
                deliver_to_spout(task, outcome)
    pulled.delivered = max(pulled.delivered, upto)
    task.deliver_completions()


def read_pull(part: PullPartition) -> Iterator[pa.RecordBatch]:
    """The executor side of a pull (see the module's docstring)."""
    with gc_paused():  # a pull allocates per tuple, like a stage (squall.runtime.gc_pause)
        pulled = _task_for(part)
        task, host = pulled.task, pulled.host
        host.set_now(part.now)
        # The trees of segments up to the committed one start their timeouts now; the ones
        # this pull starts wait for their batch's commit (docs/design/spark-runner.md).
        task.pending.arm(part.committed, part.now)
        task.pending.hold(part.seg)
        _deliver(pulled, part.run_dir, part.outcomes_upto)
        task.set_active(part.active)
        task.expire(part.now)
        task.replay_due(part.now)
        emitted, _calls = task.pull(part.budget)
        rows = host.drain([task])
        exhausted = task.exhausted()
        status = {
            "component": task.component_id, "seg": part.seg, "exhausted": exhausted,
            "emitted": emitted,
            "active": task.active, "delivered": pulled.delivered,
            "settled_ids": task.settled_ids,
            "stats": {**task.stats.as_dict(), "pending": len(task.pending),
                      **task_figures(task)},
        }
        rows.append((row_schema.SPOUT, task.task_id, 0, None, task.task_id,
                     pickle.dumps(status, protocol=5), None, None, None, part.now, 0))
        _snapshot(part, pulled)
        pulled.seg = part.seg
        _CACHE[(part.run_dir, part.task)] = pulled
        yield rows.to_batch()


def _snapshot(part: PullPartition, pulled: _Pulled) -> None:
    task = pulled.task
    try:
        instance = dump_instance(task)
    except Exception as exc:
        # Not picklable (an open connection, say): a restore reopens it and it replays as the
        # spout itself can, as in Storm. The task's bookkeeping is still kept.
        task.report(exc)
        instance = b""
    state = {"instance": instance, "pending": pickle.dumps(task.pending),
             "retries": pickle.dumps(task.retries), "stats": task.stats.as_dict(),
             "latency": task.complete_latency.state(), "settled_ids": task.settled_ids,
             "active": task.active, "seq": pulled.host.seq, "delivered": pulled.delivered,
             "run": pulled.run}
    path = task_snapshot_path(part.run_dir, part.task, part.seg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, pickle.dumps(state))
    for old in task_snapshots(part.run_dir, part.task)[:-SNAPSHOTS_KEPT]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(task_snapshot_path(part.run_dir, part.task, old))


def status_path(run_dir: str) -> str:
    return os.path.join(run_dir, "spout-status.pkl")


def read_pulled_status(run_dir: str) -> dict[int, dict[str, Any]]:
    """Each pulled spout task's status as of its last committed pull (the driver's record)."""
    blob = read_or_none(status_path(run_dir))
    return {} if blob is None else pickle.loads(blob)


def write_pulled_status(run_dir: str, statuses: dict[int, dict[str, Any]]) -> None:
    write_atomic(status_path(run_dir), pickle.dumps(statuses))


def pulled_pending(status: dict[str, Any]) -> int:
    return int(status["stats"]["pending"])
