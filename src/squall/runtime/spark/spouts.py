"""Spouts on Spark: hosted in the streaming source's reader, which lives on the driver side.

The reader process keeps every spout task (a `SpoutTask`, the same core as the local runner). On
each trigger Spark asks it for the latest offset: it first hands the spouts the outcomes of their
tuple trees (files the driver writes per batch), fails trees whose timeout passed, then calls
`next_tuple` up to the batch budget. What the spouts emitted is written as one Arrow segment under
the checkpoint location *before* its offset is returned; the spouts' snapshot after that plan is
written while Spark logs the offset, and `partitions` waits for it, so a batch is read only once
both are durable, and Spark's replay of a batch that was read reads exactly the same rows.
Timeouts are decided here on the planning time, which is stored in the rows (`ts`), so a replay
sees the same times and the bolts' processing time is the batch's. When a plan fills the batch,
the next is planned in a thread while Spark runs the batch just returned (the process waits for
Spark meanwhile), written the same way, and returned by the next call after it has delivered the
committed outcomes (`SpoutReader._plans_ahead`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import threading
from collections.abc import Mapping
from typing import Any

import cloudpickle
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from squall.atomic_files import read_or_none, write_atomic
from squall.components.partitioned_source import PartitionedSource
from squall.metrics.histogram import LatencyHistogram
from squall.murmur3 import hash_long
from squall.reliability.acker import Outcome
from squall.runtime.clock import wall_ms  # planning time of a batch, recorded in its rows
from squall.runtime.gc_pause import gc_paused
from squall.runtime.reporting import task_figures
from squall.runtime.settlement import deliver_to_spout
from squall.runtime.spark import row_schema
from squall.runtime.spark.buffer_arrays import record_batch
from squall.runtime.spark.pulls import (
    SPOUTS_ON_EXECUTORS,
    PullPartition,
    ReaderHost,
    pull_partitions,
    pulled_pending,
    pulls_path,
    read_pull,
    read_pulled_status,
    unlink_pulls,
    write_pulls,
)
from squall.runtime.spark.ranges import (
    RangePartition,
    RecordRangeGroup,
    is_source,
    plan_ranges,
    range_partitions,
    ranges_path,
    read_range,
    write_ranges,
)
from squall.runtime.spark.reader_log import ReaderLog, keep_reader_log
from squall.task.end_of_input import END_OF_INPUT_SRC, END_OF_INPUT_STREAM
from squall.task.snapshot import dump_instance, load_instance
from squall.task.tasks import SpoutTask
from squall.topology.config import TOPOLOGY_TICK_TUPLE_FREQ_SECS, Config, tick_period_ms
from squall.topology.description import Topology
from squall.topology.graph import bolt_order
from squall.topology.roles import is_windowed_role
from squall.topology.tuple import TICK_STREAM

# The backoff of pulls that find nothing (spouts on the executors): a pull is a Spark job, so an
# idle spout is asked again after 50 ms, then 100, ... up to 1 s, and at once after a pull that
# emitted.
IDLE_MIN_MS = 50
IDLE_MAX_MS = 1000


def end_of_input_rows(topology: Topology, keys: dict[int, int], now: int,
                      seq: int) -> list[tuple]:
    """The rows that tell every bolt task input ended (`squall.task.end_of_input`), one per
    task, planned in the batch where every spout is exhausted: their `src` sorts after the task's
    other rows, and stages run in topological order, so upstream bolts flush first."""
    return [(row_schema.TUPLE, t, keys[t], END_OF_INPUT_STREAM, END_OF_INPUT_SRC,
             row_schema.encode_values([]), None, None, None, now, seq + i)
            for i, t in enumerate(t for cid in bolt_order(topology)
                                  for t in topology.component_tasks(cid))]


def segment_path(run_dir: str, seg: int) -> str:
    return os.path.join(run_dir, "segments", f"seg={seg:012d}.arrow")


def outcome_path(run_dir: str, batch_id: int) -> str:
    return os.path.join(run_dir, "outcomes", f"batch={batch_id:012d}.pkl")


class SegmentPartition(InputPartition):
    def __init__(self, path: str) -> None:
        self.path = path


class SegmentSlice(InputPartition):
    """Partition `index` of `n` of a batch's segments: the rows whose routing key Spark's hash
    places in partition `index` of `n`, as `repartition(n, "key")` would (see `INPUT_PARTITIONS`).
    """

    def __init__(self, paths: list[str], index: int, n: int) -> None:
        self.paths, self.index, self.n = paths, index, n


# The source option by which the driver asks for a batch's rows already partitioned for its first
# stage (that stage's task count): the first bolt then runs where the rows are read, with no
# shuffle of the spouts' rows (`stage.StageChain`). Not given when the topology has a built-in
# source (`PartitionedSource`), whose ranges are read, and routed, on the executors.
INPUT_PARTITIONS = "partitions"
# With spouts pulled on the executors, the option that allows `INPUT_PARTITIONS`: the pulled spout
# tasks (ids, comma-separated), task k's pulls read in partition k with the segments' slice k, as
# each sends to the first bolt's task k alone (`stage.pulled_where_read`).
PULLED_TASKS = "pulled"


class PulledSlice(SegmentSlice):
    """A `SegmentSlice` and, after its rows, the batch's pulls of the spout task whose tuples for
    the first bolt all go to the task this partition holds."""

    def __init__(self, paths: list[str], index: int, n: int, pulls: list[PullPartition]) -> None:
        super().__init__(paths, index, n)
        self.pulls = pulls


class SpoutReader(DataSourceStreamReader):
    """The spouts' host on the driver side (see the module's docstring).

    Spark makes one in its long-lived streaming process, which plans every batch, and also one
    per batch in a planning worker that only pickles it for `read` on the executors (which needs
    `run_dir` alone). So the spouts are restored, or opened, when the first offset is asked
    for, not here: restoring them from their snapshot took that worker 0.2-0.8 s per W1 batch
    of 100,000 trees (the pending map and the spout itself unpickled for nothing), and opening
    a spout there would call the user's `open` in a process that never pulls from it.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.run_dir = options["dir"]
        partitions = options.get(INPUT_PARTITIONS)
        self.input_partitions = int(partitions) if partitions else None
        pulled = options.get(PULLED_TASKS)
        self.pulled_tasks = [int(t) for t in pulled.split(",")] if pulled else None
        self.opened = False
        # The plan of the next segment while Spark processes the last (`_plans_ahead`).
        self.ahead_thread: threading.Thread | None = None
        # The spouts' snapshot of the segment just returned, written while Spark logs its
        # offset (`_start_snapshot`); `unsnapped`: a segment written, its snapshot not begun.
        self.snapshot_thread: threading.Thread | None = None
        self.snapshot_error: BaseException | None = None
        self.unsnapped: int | None = None

    def _open(self) -> None:
        self.opened = True
        with open(os.path.join(self.run_dir, "plan.pkl"), "rb") as f:
            plan = cloudpickle.load(f)
        # What the spouts log here reaches the driver's log (unless this is the driver).
        self.log: ReaderLog | None = (keep_reader_log() if plan.get("driver_pid") != os.getpid()
                                      else None)
        topology = plan["topology"]
        self.max_batch = int(plan["max_batch"])
        self.plan_ahead = bool(plan.get("plan_ahead", False))
        self.run_id = plan.get("run")  # which run of the topology (counters are per run)
        first = {cid: topology.component_tasks(cid)[0] for cid in topology.components}
        keys = {t: plan["keys"][cid][t - first[cid]] if cid in plan["keys"] else 0
                for cid in topology.components for t in topology.component_tasks(cid)}
        self.host = ReaderHost(keys, plan["capture"])
        # Tick tuples are planned here, on planning time, like every other input of a batch:
        # [next tick, period ms, task id, rate as configured] per bolt task that asks for them.
        self.ticks = []
        for cid, spec in topology.bolts.items():
            conf = Config.effective_of(plan["conf"], spec.conf)
            period = tick_period_ms(conf)
            if period is not None:
                rate = conf[TOPOLOGY_TICK_TUPLE_FREQ_SECS]
                for t in topology.component_tasks(cid):
                    self.ticks.append([0, period, t, rate])
        self.tasks: dict[int, SpoutTask] = {}
        # User spouts pulled on the executors (squall.runtime.spark.pulls): this reader plans
        # their pulls and knows them by the status the driver commits after each batch.
        self.pulled: list[int] = []
        on_executors = plan.get("spout_host") == SPOUTS_ON_EXECUTORS
        for cid, spec in topology.spouts.items():
            if on_executors and not isinstance(spec.new_instance(), PartitionedSource):
                self.pulled += topology.component_tasks(cid)
                continue
            for t in topology.component_tasks(cid):
                self.tasks[t] = SpoutTask(
                    topology, t, plan["conf"], self.host, seed=plan["seed"],
                    tracking=plan["tracking"], capture=[] if plan["capture"] else None,
                )
        self.host.set_now(wall_ms())
        self.delivered = -1
        self.counted_until = -1  # outcomes of batches up to this one were counted already
        self.turn = 0
        self.topology = topology
        self.ended = False  # end of input already planned (squall.task.end_of_input)
        # Windowed bolts or operators, which the end of input closes.
        self.windowed = any(is_windowed_role(c.role) for c in topology.components.values())
        self.source_errors: dict[int, str] = {}
        # Pulls that found nothing back off, as Storm's spout wait strategy: the next pull waits
        # `idle_ms`, doubling up to IDLE_MAX_MS while they keep finding nothing.
        self.idle_ms = 0
        self.pull_at = 0
        self.last_pull = -1  # the segment of the last planned pulls
        self.judged = -1  # the last pulls whose result the backoff has taken into account
        self.pulled_status: dict[int, dict[str, Any]] = {}
        segs = _segments(self.run_dir)
        self.next_seg = (segs[-1] + 1) if segs else 0
        if not self._resume():
            for task in self.tasks.values():
                task.open()

    def _resume(self) -> bool:
        """Restore the spouts as they were after the newest segment handed to Spark.

        A segment is written before its spouts' snapshot, and no batch reads it before both are
        written (`partitions` waits for the snapshot): a segment without a snapshot was never
        read, so it is dropped (`drop_unsnapshotted`) and its tuples are emitted again by the
        restored spouts.
        """
        snaps = drop_unsnapshotted(self.run_dir)
        if not snaps:
            return False
        blob = read_or_none(spout_snapshot_path(self.run_dir, snaps[-1]))
        state = pickle.loads(blob)  # type: ignore[arg-type]
        for task_id, (instance, pending, stats, *rest) in state["tasks"].items():
            task = self.tasks[task_id]
            try:
                load_instance(task, instance)
            except Exception as exc:  # a spout that no longer unpickles is reopened, as Storm
                task.report(exc)
                task.open()
                continue
            task.pending = pickle.loads(pending)
            if rest:  # retry counts and waiting replays (snapshots since they exist)
                retries = pickle.loads(rest[0])
                retries.policy = task.retries.policy  # the configuration of this run
                task.retries = retries
            if state.get("run") == self.run_id:
                # The same run's reader started again: its counters go on. A new run (a
                # restart on the checkpoint) counts from zero, as its bolts do.
                for key, value in stats.items():
                    setattr(task.stats, key, value)
        if state.get("run") != self.run_id:
            # Outcomes the previous run delivered after this snapshot are delivered again (the
            # restored spouts must see them) but were that run's work: not counted again.
            self.counted_until = read_delivered(self.run_dir)
        now = self.host.now
        for task in self.tasks.values():
            # The time the topology was down does not count against trees whose batch had
            # committed; those still in flight are held until Spark commits their batch.
            task.pending.restart_clocks(now)
        self.host.seq = state["seq"]
        self.delivered = state["delivered"]
        self.turn = state.get("turn", 0)
        self.ended = state.get("ended", False)
        self.next_seg = snaps[-1] + 1
        self.last_pull = max((seg for seg in _segments(self.run_dir)
                              if os.path.exists(pulls_path(self.run_dir, seg))), default=-1)
        return True

    def _snapshot(self, seg: int) -> None:
        tasks = {}
        for task_id, task in self.tasks.items():
            try:
                instance = dump_instance(task)
            except Exception as exc:
                # Not picklable (an open connection, say): after a restart it is reopened and
                # replays as the spout itself can, as in Storm.
                task.report(exc)
                continue
            tasks[task_id] = (instance, pickle.dumps(task.pending), task.stats.as_dict(),
                              pickle.dumps(task.retries))
        state = {"tasks": tasks, "seq": self.host.seq, "delivered": self.delivered,
                 "turn": self.turn, "ended": self.ended, "run": self.run_id}
        write_atomic(spout_snapshot_path(self.run_dir, seg), pickle.dumps(state))
        for old in _spout_snapshots(self.run_dir)[:-2]:
            os.unlink(spout_snapshot_path(self.run_dir, old))
        # Outcomes this snapshot has already delivered are never read again, even after a
        # restart (which resumes from this snapshot or a newer one); nor are those every
        # pulled task had delivered in its last committed pull (a retry or a replay restores
        # that pull's snapshot or a newer one).
        floor = min([self.delivered, *(self.pulled_status[t]["delivered"] if t in
                                       self.pulled_status else -1 for t in self.pulled)])
        outcomes = os.path.join(self.run_dir, "outcomes")
        for name in os.listdir(outcomes) if os.path.isdir(outcomes) else []:
            if name.startswith("batch=") and int(name[6:-4]) <= floor:
                os.unlink(os.path.join(outcomes, name))

    def __getstate__(self) -> dict:
        # Spark pickles the reader to call read() on executors; the live spout tasks stay here.
        return {"run_dir": self.run_dir}

    def __setstate__(self, state: dict) -> None:
        self.run_dir = state["run_dir"]

    def initialOffset(self) -> dict:
        return {"seg": -1}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        self._join_snapshot()
        if not self.opened:
            self._open()
        ahead = self._join_ahead()  # the next segment, if it was planned during the last batch
        with gc_paused():  # a plan allocates per tuple, like a stage (squall.runtime.gc_pause)
            end, emitted = self._latest_offset(start, ahead)
        if self._plans_ahead(emitted):
            self._snapshot_now()  # before the plan ahead moves the spouts on
            self._start_ahead()
        else:
            self._start_snapshot()
        return end

    # ---- the spouts' snapshot while Spark logs the offset --------------------------------------
    def _snapshot_now(self) -> None:
        seg, self.unsnapped = self.unsnapped, None
        if seg is not None:
            self._snapshot(seg)

    def _start_snapshot(self) -> None:
        """Write the snapshot of the segment just planned in a thread, while Spark writes the
        offset to its log and plans the batch: a batch's tuples are emitted before the snapshot,
        so its time (the spouts and their pending maps pickled, the file's fsync: 40-65 ms a
        batch at 10,000 tuples) counted in every tuple's latency. The spouts are not called
        until it is written: `partitions` (before any task reads the segment), `commit`,
        `latestOffset` and `stop` wait for it first (`_join_snapshot`)."""
        if self.unsnapped is None:
            return
        self.snapshot_error = None
        self.snapshot_thread = threading.Thread(target=self._snapshot_in_thread, daemon=True,
                                                name="squall-spouts-snapshot")
        self.snapshot_thread.start()

    def _snapshot_in_thread(self) -> None:
        try:
            with gc_paused():
                self._snapshot_now()
        except BaseException as exc:  # raised where the thread is joined, in Spark's thread
            self.snapshot_error = exc

    def _join_snapshot(self) -> None:
        thread = self.snapshot_thread
        if thread is None:
            return
        thread.join()
        self.snapshot_thread = None
        if self.snapshot_error is not None:
            error, self.snapshot_error = self.snapshot_error, None
            raise error

    def _latest_offset(self, start: dict, ahead: bool) -> tuple[dict, int]:
        """The offset to return, and the tuples the segment it ends with carries (a segment
        planned ahead: those it was planned with)."""
        host = self.host
        host.set_now(wall_ms())
        # Spark asks for the next offset only once every batch up to `start` has committed:
        # the trees started in those segments are done or wait on work that has committed,
        # and only now do their timeouts start (a slow, killed or replayed batch never times
        # out the trees it carries; docs/design/spark-runner.md, "Message timeouts").
        committed = int(start["seg"])
        seg = max(self.next_seg, committed + 1)  # the segment this call may write
        self.pulled_status = read_pulled_status(self.run_dir) if self.pulled else {}
        for task in self.tasks.values():
            task.pending.arm(committed, host.now)
            task.pending.hold(seg)
        self._deliver_outcomes()
        active = self._activate()
        if ahead and self.next_seg - 1 > committed:
            # Planned while the last batch ran, its spouts' snapshot written: it is returned
            # as planned; what the outcomes just delivered allow (replays, freed max spout
            # pending) goes into the next plan.
            emitted = self.ahead_emitted
        else:
            emitted = self._plan(seg, committed, active, ahead=False)
        end = start
        if self.next_seg - 1 > committed:
            # Also segments planned before a restart that Spark never logged (the driver was
            # killed between our snapshot and Spark's offset log), or planned ahead: their
            # spouts have moved on, so they must be processed even when nothing new was
            # planned now.
            end = {"seg": self.next_seg - 1}
        self._write_status(end)
        return end, emitted

    def _activate(self) -> bool:
        """Whether the driver wants the spouts pulled; their activate/deactivate, on a change."""
        active = read_control(self.run_dir)
        for task in self.tasks.values():
            task.set_active(active)
        return active

    def _plan(self, seg: int, committed: int, active: bool, *, ahead: bool) -> int:
        """Call the spouts up to the batch budget and write what they emitted as segment `seg`
        with the spouts' snapshot; the tuples planned. `ahead`: planned while the batch before
        runs, its outcomes not known yet (`_plan_ahead`)."""
        host = self.host
        emitted = 0
        for task in self.tasks.values():
            task.expire(host.now)
            task.replay_due(host.now)  # failed messages whose backoff has passed
        for tick in self.ticks:
            if tick[0] == 0:
                tick[0] = host.now + tick[1]
            elif host.now >= tick[0]:
                tick[0] = host.now + tick[1]
                host.seq += 1
                host.rows.append((row_schema.TUPLE, tick[2], host.keys[tick[2]], TICK_STREAM, -1,
                                  row_schema.encode_values([tick[3]]), None, None, None, host.now,
                                  host.seq))
        # Built-in sources plan ranges that executors read; their trees start here.
        ranges: list[tuple] = []
        for task in self.tasks.values():
            source = task.spout
            if (isinstance(source, PartitionedSource) and task.active  # is_source
                    and emitted < self.max_batch):
                planned = self._plan_source(task, self.max_batch - emitted)
                emitted += sum(source.estimate(entry[1]) for entry in planned)
                ranges += planned
        # Spout tasks take turns, one next_tuple each, as in the local runner's rounds; the
        # turn carries over to the next call, so a small budget does not starve later tasks.
        order = [task for task in self.tasks.values() if not is_source(task)]
        if len(order) == 1:  # the turns' loop for one task, its bookkeeping per call inline
            n, calls = order[0].pull(self.max_batch - emitted)
            emitted += n
            self.turn += calls
        idle = 0
        while len(order) > 1 and emitted < self.max_batch and idle < len(order):
            task = order[self.turn % len(order)]
            self.turn += 1
            n = task.next_tuple() if task.can_emit() else 0
            emitted += n
            idle = 0 if n else idle + 1
        pulls = self._plan_pulls(seg, committed, active, emitted)
        exhausted = all(t.exhausted() for t in self.tasks.values()) and self._pulled_done()
        if (exhausted and not self.ended and self.windowed and (emitted or ranges or ahead)
                and any(t.pending for t in self.tasks.values())):
            # Windows hear of the end in a batch of its own, after the outcomes of every batch
            # that carried input: a tuple that fails in the last one is replayed before they
            # close (as on the local runner, which learns of a failure before it asks its
            # spouts again), not judged against the end of input. With no tree pending (the
            # input untracked, or every tree settled) nothing can be replayed: the end goes
            # in this batch, after its input, and saves a batch. Planned ahead, the trees of
            # the batch running are pending: the end waits for their outcomes.
            exhausted = False
        if exhausted and not self.ended:
            rows = end_of_input_rows(self.topology, host.keys, host.now, host.seq + 1)
            host.rows.rows.extend(rows)
            host.seq += len(rows)
        self.ended = exhausted
        segment = host.drain(self.tasks.values())
        if len(segment) or ranges or pulls:
            if ranges:
                write_ranges(self.run_dir, seg, ranges)
            if pulls:
                write_pulls(self.run_dir, seg, pulls)
                self.last_pull = seg
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, row_schema.SCHEMA) as writer:
                # Not `segment.to_batch()`: its `pa.array` would import pandas into this
                # process in its first plan, 0.2-0.3 s of a run's first batch (buffer_arrays).
                writer.write_batch(record_batch(segment.rows, row_schema.SCHEMA))
            write_atomic(segment_path(self.run_dir, seg), sink.getvalue().to_pybytes())
            self.next_seg = seg + 1
            if ahead:
                self._snapshot(seg)
            else:
                self.unsnapped = seg  # `latestOffset` writes it, once the plan is done
        return emitted

    # ---- planning ahead ----------------------------------------------------------------------
    def _plans_ahead(self, emitted: int) -> bool:
        """Whether to plan the next segment while Spark processes the one just returned: when
        its plan filled the batch (the spouts have more ready than a batch holds), the spouts
        are in this process (not pulled on the executors, whose pulls wait for their last
        segment's commit), active, and not all exhausted, and no built-in source plans ranges
        (its plan is cheap, and a range planned before the running batch's outcomes would be
        planned again after a failed read of the same range: a lost file reported once per
        plan). A plan that did not fill the batch took what was ready: planned ahead, tuples
        ready later would wait a batch more. Off unless `squall.spark.plan.ahead` is true."""
        return (self.plan_ahead and emitted >= self.max_batch and not self.pulled
                and not self.ended and any(t.active for t in self.tasks.values())
                and not any(is_source(t) for t in self.tasks.values())
                and not all(t.exhausted() for t in self.tasks.values()))

    def _start_ahead(self) -> None:
        self.ahead_error: BaseException | None = None
        self.ahead_emitted = 0
        self.ahead_seg = self.next_seg
        self.ahead_thread = threading.Thread(target=self._plan_ahead, daemon=True,
                                             name="squall-spouts-plan-ahead")
        self.ahead_thread.start()

    def _plan_ahead(self) -> None:
        """In a thread of the reader, while the process waits for Spark: the next segment,
        planned as `_latest_offset` would plan it except that no outcome is delivered (the
        running batch's are not known) and the end of input waits for them. Nothing else
        calls the spouts meanwhile: `latestOffset` and `stop` join this thread first."""
        try:
            with gc_paused():
                host = self.host
                host.set_now(wall_ms())
                seg = self.next_seg
                for task in self.tasks.values():
                    task.pending.hold(seg)  # armed when the batch that carries it commits
                self.ahead_emitted = self._plan(seg, seg - 1, self._activate(), ahead=True)
        except BaseException as exc:  # raised by the next latestOffset, in Spark's thread
            self.ahead_error = exc

    def _join_ahead(self) -> bool:
        """Wait for the plan ahead, if one was started; whether it wrote a segment."""
        thread = self.ahead_thread
        if thread is None:
            return False
        thread.join()
        self.ahead_thread = None
        if self.ahead_error is not None:
            raise self.ahead_error
        return self.next_seg > self.ahead_seg

    def _pulled_done(self) -> bool:
        """Every pulled spout task exhausted with no tree pending, as of its last committed
        pull (True without pulled tasks)."""
        status = self.pulled_status
        return all(t in status and status[t]["exhausted"] and not pulled_pending(status[t])
                   for t in self.pulled)

    def _plan_pulls(self, seg: int, committed: int, active: bool, emitted: int) -> list[tuple]:
        """The pulls of this segment: one per pulled spout task, or none when they have nothing
        to do (exhausted and settled, or deactivated and settled) or are backing off."""
        if not self.pulled or self.last_pull > committed:
            # (A segment planned before a restart and not processed yet holds pulls: a task
            # pulls once per batch, from its snapshot of the segment before.)
            return []
        status, now = self.pulled_status, self.host.now
        last = [status.get(t) for t in self.pulled]
        if (0 <= self.last_pull != self.judged
                and all(s is not None and s["seg"] == self.last_pull for s in last)):
            # The last pulls' batch committed: back off while pulls find nothing.
            self.judged = self.last_pull
            if any(s["emitted"] for s in last if s is not None):
                self.idle_ms = self.pull_at = 0
            else:
                self.idle_ms = min(max(2 * self.idle_ms, IDLE_MIN_MS), IDLE_MAX_MS)
                self.pull_at = now + self.idle_ms
        settled = all(s is not None and not pulled_pending(s) for s in last)
        switched = any(s is None or s["active"] != active for s in last)
        if not switched and settled and (self._pulled_done() or not active):
            return []
        if not switched and now < self.pull_at:
            return []
        budget = max(1, (self.max_batch - emitted) // len(self.pulled))
        return [(t, seg, budget, now, active, committed, self.delivered) for t in self.pulled]

    def _plan_source(self, task: SpoutTask, budget: int) -> list[tuple]:
        def next_seq() -> int:
            self.host.seq += 1
            return self.host.seq

        try:
            planned = plan_ranges(task, budget, self.host.now, next_seq)
        except Exception as exc:
            # A store that is down fails every plan: report it when it starts or changes, not
            # on every trigger. Its offsets have not moved, so nothing is lost meanwhile.
            if str(exc) != self.source_errors.get(task.task_id):
                self.source_errors[task.task_id] = str(exc)
                task.report(exc)
            return []
        self.source_errors.pop(task.task_id, None)
        return planned

    def _deliver_outcomes(self) -> None:
        before = self.delivered
        directory = os.path.join(self.run_dir, "outcomes")
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return
        for name in names:
            if not name.startswith("batch="):
                continue
            batch_id = int(name[6:-4])
            if batch_id <= self.delivered:
                continue
            blob = read_or_none(os.path.join(directory, name))
            if blob is None:
                continue
            if batch_id <= self.counted_until:
                self._deliver_uncounted(pickle.loads(blob))
                self.delivered = batch_id
                continue
            for settled in pickle.loads(blob):
                outcome = Outcome(*settled)
                task = self.tasks.get(outcome.spout_task)
                if task is None:
                    continue
                # The driver settled the outcomes (squall.runtime.settlement); a reset restarts
                # the tree's timeout (OutputCollector.reset).
                deliver_to_spout(task, outcome)
            self.delivered = batch_id
        for task in self.tasks.values():
            task.deliver_completions()
        if self.delivered != before:  # what a restart must not count again
            write_atomic(delivered_path(self.run_dir), str(self.delivered).encode())

    def _deliver_uncounted(self, settled: list[tuple]) -> None:
        """Hand a batch's outcomes that a previous run delivered and counted already to the
        restored spouts: they ack and fail as before, their counters and complete latency do
        not change (docs/metrics.md, Restarts and rebalances)."""
        for task in self.tasks.values():
            task.deliver_completions()  # the counted ones first
        for o in settled:
            outcome = Outcome(*o)
            spout = self.tasks.get(outcome.spout_task)
            if spout is not None:
                deliver_to_spout(spout, outcome)
        for task in self.tasks.values():
            counts, latency = task.stats.as_dict(), task.complete_latency.state()
            task.deliver_completions()
            for key, value in counts.items():
                setattr(task.stats, key, value)
            task.complete_latency = LatencyHistogram.from_state(latency)

    def _write_status(self, end: dict) -> None:
        pulled = self.pulled_status
        status = {
            "seg": int(end["seg"]),
            # (Windows not yet told of the end of input are not done.)
            "exhausted": (all(t.exhausted() for t in self.tasks.values()) and self._pulled_done()
                          and (self.ended or not self.windowed)),
            "pending": (sum(len(t.pending) for t in self.tasks.values())
                        + sum(pulled_pending(s) for s in pulled.values())),
            # The driver's graceful stop waits until the reader has stopped pulling (a pulled
            # task, once its pull deactivated it).
            "active": (any(t.active for t in self.tasks.values())
                       or any(t not in pulled or pulled[t]["active"] for t in self.pulled)),
            "spouts": {
                **{t: {key: s[key] for key in ("component", "exhausted", "settled_ids", "stats")}
                   for t, s in pulled.items()},
                **{t: {
                    "component": task.component_id,
                    "exhausted": task.exhausted(),
                    "settled_ids": task.settled_ids,
                    "stats": {**task.stats.as_dict(), "pending": len(task.pending),
                              **task_figures(task)},
                } for t, task in self.tasks.items()},
            },
            "log": self.log.lines() if self.log is not None else [],
        }
        write_atomic(os.path.join(self.run_dir, "status.pkl"), pickle.dumps(status))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # No task reads a segment before its spouts' snapshot is durable. A reader that has not
        # planned (Spark replaying its last logged batch after a restart) drops a segment left
        # without one: the process was killed after Spark logged the offset and before the
        # snapshot was written, so no task read it; the restored spouts emit its tuples again
        # and the replayed batch runs without them, as `_resume` will find it.
        self._join_snapshot()
        if not self.opened:
            drop_unsnapshotted(self.run_dir)
        if self.input_partitions is not None:
            paths = [segment_path(self.run_dir, seg)
                     for seg in range(int(start["seg"]) + 1, int(end["seg"]) + 1)]
            paths = [path for path in paths if os.path.exists(path)]
            n = self.input_partitions
            if self.pulled_tasks is not None:
                return _pulled_slices(self.run_dir, paths, n, self.pulled_tasks)
            return [SegmentSlice(paths, i, n) for i in range(n)]
        out: list[InputPartition] = []
        for seg in range(int(start["seg"]) + 1, int(end["seg"]) + 1):
            if os.path.exists(segment_path(self.run_dir, seg)):
                out.append(SegmentPartition(segment_path(self.run_dir, seg)))
                out.extend(range_partitions(self.run_dir, seg))
                out.extend(pull_partitions(self.run_dir, seg))
        return out

    def read(self, partition: InputPartition):
        if isinstance(partition, (RangePartition, RecordRangeGroup)):
            yield from read_range(partition)
            return
        if isinstance(partition, PullPartition):
            yield from read_pull(partition)
            return
        if isinstance(partition, SegmentSlice):
            yield from _read_slice(partition)
            for pull in partition.pulls if isinstance(partition, PulledSlice) else ():
                yield from read_pull(pull)
            return
        assert isinstance(partition, SegmentPartition)
        with pa.OSFile(partition.path) as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    def commit(self, end: dict) -> None:
        self._join_snapshot()
        # Spark has committed every batch up to `end`: their segments will not be read again.
        for seg in _segments(self.run_dir):
            if seg <= int(end["seg"]):
                os.unlink(segment_path(self.run_dir, seg))
                _unlink(ranges_path(self.run_dir, seg))
                unlink_pulls(self.run_dir, seg)

    def stop(self) -> None:
        if not self.opened:
            return
        # A plan ahead finishes, its segment and snapshot written (a restart on this
        # checkpoint returns them first), as does the last segment's snapshot; no thread
        # outlives the reader.
        with contextlib.suppress(Exception):
            self._join_snapshot()
        with contextlib.suppress(Exception):
            self._join_ahead()
        for task in self.tasks.values():
            task.close()


def _pulled_slices(run_dir: str, paths: list[str], n: int,
                   tasks: list[int]) -> list[InputPartition]:
    """Slice k of the segments at `paths` with their pulls of spout task `tasks[k]`, in segment
    order (see `PULLED_TASKS`)."""
    index = {task: k for k, task in enumerate(tasks)}
    pulls: list[list[PullPartition]] = [[] for _ in range(n)]
    for path in paths:
        seg = int(os.path.basename(path)[4:-6])  # segment_path's name
        for pull in pull_partitions(run_dir, seg):
            assert isinstance(pull, PullPartition)
            pulls[index[pull.task]].append(pull)
    return [PulledSlice(paths, k, n, pulls[k]) for k in range(n)]


def _read_slice(part: SegmentSlice) -> Any:
    """The rows of a batch's segments that Spark's hash of the routing key places in partition
    `part.index` of `part.n` (a segment holds few rows: packets of up to 65,536 tuples)."""
    index, n = part.index, part.n
    for path in part.paths:
        with pa.OSFile(path) as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                keys = batch.column("key").to_pylist()
                mask = [hash_long(key or 0) % n == index for key in keys]
                if all(mask):
                    yield batch
                elif any(mask):
                    yield batch.filter(pa.array(mask))


def delivered_path(run_dir: str) -> str:
    """The last batch whose outcomes the spouts were handed (and counted), kept across runs."""
    return os.path.join(run_dir, "spouts-delivered.txt")


def read_delivered(run_dir: str) -> int:
    blob = read_or_none(delivered_path(run_dir))
    return -1 if blob is None else int(blob)


def spout_snapshot_path(run_dir: str, seg: int) -> str:
    return os.path.join(run_dir, "spouts", f"seg={seg:012d}.pkl")


def _spout_snapshots(run_dir: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(run_dir, "spouts"))
    except FileNotFoundError:
        return []
    return sorted(int(n[4:-4]) for n in names if n.startswith("seg=") and n.endswith(".pkl"))


def drop_unsnapshotted(run_dir: str) -> list[int]:
    """Remove the segments newer than the spouts' newest snapshot (with their ranges and pulls):
    planned, but their snapshot never written, so never read by a batch. The snapshots' ids."""
    snaps = _spout_snapshots(run_dir)
    for seg in _segments(run_dir):
        if seg not in snaps and (not snaps or seg > snaps[-1]):
            os.unlink(segment_path(run_dir, seg))
            _unlink(ranges_path(run_dir, seg))
            unlink_pulls(run_dir, seg)
    return snaps


def _segments(run_dir: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(run_dir, "segments"))
    except FileNotFoundError:
        return []
    return sorted(int(n[4:-6]) for n in names if n.startswith("seg=") and n.endswith(".arrow"))


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class SpoutSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "squall_spouts"

    def schema(self) -> str:
        return row_schema.DDL

    def streamReader(self, schema: Any) -> SpoutReader:
        return SpoutReader(self.options)


def write_control(run_dir: str, *, active: bool) -> None:
    """Tell the reader whether to pull the spouts (Storm's activate/deactivate)."""
    write_atomic(os.path.join(run_dir, "control.json"), json.dumps({"active": active}).encode())


def read_control(run_dir: str) -> bool:
    """Whether the spouts are to be pulled: True unless the driver said otherwise."""
    blob = read_or_none(os.path.join(run_dir, "control.json"))
    return True if blob is None else bool(json.loads(blob).get("active", True))


def read_status(run_dir: str) -> dict | None:
    blob = read_or_none(os.path.join(run_dir, "status.pkl"))
    return None if blob is None else pickle.loads(blob)


def write_outcomes(run_dir: str, batch_id: int, outcomes: list[tuple]) -> None:
    write_atomic(outcome_path(run_dir, batch_id), pickle.dumps(outcomes))



