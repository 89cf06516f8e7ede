"""Built-in sources on Spark: ranges planned by the spout reader, read on the executors.

The reader (spouts.py) asks each `PartitionedSource` task for the ranges of new offsets, starts one
tuple tree per range (its root and edge are drawn there, tracked in the spout task's pending map and
sent to the ledger as an INIT row) and lists the ranges of a segment in a file beside it. Spark
turns each range into an input partition; `read_range` runs on an executor: it reads the records,
routes them with the spout task's own groupings and emits them anchored to the range's root, then
acks the range with its edge XOR the records' edges. Edges come from a generator seeded by the root,
so a batch that Spark replays after a crash produces the same rows.

A source with an event-time field gives each record its position (squall.partition_watermarks):
the largest event time of its partition before it. A range starts where the partition's last
range ended, read in an earlier batch, whose executor left the partition's largest event time at
that offset in a small file beside the plan (`positions_path`); the range's rows carry the
positions in their packet headers, and its end tells the operators how far the partition is read.
A range whose start is not on file (an old range replayed) carries none.
"""

from __future__ import annotations

import os
import pickle
import random
import zlib
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from squall.atomic_files import write_atomic
from squall.components.partitioned_source import (
    MALFORMED,
    MalformedRecord,
    PartitionedSource,
    Range,
    RecordRange,
    Skipped,
    event_time_index,
)
from squall.errors import EmitError
from squall.partition_watermarks import AT, FROM, PARTITIONS_STREAM, SourcePositions
from squall.reliability.acker import plain_root, range_root, record_index, record_root
from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark import row_schema
from squall.task.tasks import SpoutTask
from squall.topology.tuple import _RuntimeTuple

# A range's records are ordered after everything its task planned before it: seq = base + i.
SEQ_SHIFT = 32


class RangePartition(InputPartition):
    """One planned range: what an executor needs to read it and start its records' trees."""

    def __init__(self, run_dir: str, task: int, rng: Range, root: int | None, edge: int | None,
                 ts: int, seq: int) -> None:
        self.run_dir = run_dir
        self.task = task
        self.range = rng
        self.root = root
        self.edge = edge
        self.ts = ts
        self.seq = seq


def ranges_path(run_dir: str, seg: int) -> str:
    return os.path.join(run_dir, "segments", f"seg={seg:012d}.ranges")


def write_ranges(run_dir: str, seg: int, planned: list[tuple]) -> None:
    write_atomic(ranges_path(run_dir, seg), pickle.dumps(planned))


class RecordRangeGroup(InputPartition):
    """Ranges of one record each (a failed range split for its replay), read as one Spark
    partition: each is its own tree, but a thousand of them need not be a thousand tasks."""

    def __init__(self, parts: list[RangePartition]) -> None:
        self.parts = parts


GROUP_RECORDS = 1000  # the most one-record ranges one Spark partition reads


def range_partitions(run_dir: str, seg: int) -> list[InputPartition]:
    try:
        with open(ranges_path(run_dir, seg), "rb") as f:
            planned = pickle.load(f)
    except FileNotFoundError:
        return []
    out: list[InputPartition] = []
    group: list[RangePartition] = []
    for entry in planned:
        part = RangePartition(run_dir, *entry)
        if isinstance(part.range, RecordRange):
            group.append(part)
            if len(group) == GROUP_RECORDS:
                out.append(RecordRangeGroup(group))
                group = []
        else:
            out.append(part)
    if group:
        out.append(RecordRangeGroup(group))
    return out


def is_source(task: SpoutTask) -> bool:
    return isinstance(task.spout, PartitionedSource)


def plan_ranges(task: SpoutTask, budget: int, now: int, next_seq: Any) -> list[tuple]:
    """Ask a source task for its next ranges and start their trees (in the reader).

    Returns `(task, range, root, edge, ts, seq)` entries for the segment's range file.
    """
    max_ranges = None
    if task.max_pending is not None:
        max_ranges = task.max_pending - len(task.pending)
        if max_ranges <= 0:
            return []
    source = task.spout
    assert isinstance(source, PartitionedSource)  # `is_source(task)`
    planned = source.plan(budget, max_ranges)
    # Partition events are rows of the reader's segment, which come before every range's rows.
    source.watch_partitions(now)
    out = []
    root: int | None
    edge: int | None
    # With a retry limit a range's records are told apart (squall.reliability.acker), so a
    # failure replays only the records that failed.
    per_record = task.retries.policy.limited
    for r in planned:
        if task.tracking:
            bits, edge = task.rand64(), task.rand64()
            root = (range_root(bits) if per_record and not isinstance(r, RecordRange)
                    else plain_root(bits))
            task.track(root, r, source.stream, edge)
        else:
            # No ackers: acked as soon as it is planned, as Storm acks an untracked emit.
            root = edge = None
            task.stats.acked += 1
            task._call("ack", r)
        out.append((task.task_id, r, root, edge, now, next_seq()))
    return out


class _RangeHost:
    """The `SpoutHost` of a range's spout task: collects the rows of its records."""

    def __init__(self, keys: dict[int, int], ts: int, seq: int) -> None:
        self.rows = row_schema.RowBuffer()
        self.seq = seq << SEQ_SHIFT
        self.packets = row_schema.Packets(keys, self.next_seq)
        self.send = self.packets.send  # the Host's send: tuples go into packets
        self.packets.set_now(ts)
        self.keys = keys
        self.ts = ts

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def report_error(self, component: str, task: int, error: BaseException,
                     stream: str | None = None) -> None:
        self.seq += 1
        self.rows.report(row_schema.ERROR, task=task, key=0, stream=stream,
                         payload=row_schema.portable_error(error), ts=self.ts, seq=self.seq)

    def now_ms(self) -> int:
        return self.ts

    # A range is one tuple tree, anchored and acked by `_read_range` itself: its task's
    # collector routes the records and never reaches the ledger through the host.
    def ack_init(self, root: int, xor: int, spout_task: int) -> None:
        raise RuntimeError("a range's tree is started by the reader's plan, not by its records")

    def forget(self, root: int) -> None:
        raise RuntimeError("a range's tree is forgotten by the reader's plan")


_PLANS: dict[str, tuple[int, dict[str, Any], dict[int, int]]] = {}


def cached_plan(run_dir: str) -> tuple[dict[str, Any], dict[int, int]]:
    """The run's plan (`plan.pkl`, written by the driver) and each task's routing key, loaded
    once per run in a worker."""
    path = os.path.join(run_dir, "plan.pkl")
    mtime = os.stat(path).st_mtime_ns
    cached = _PLANS.get(run_dir)
    if cached is None or cached[0] != mtime:
        with open(path, "rb") as f:
            plan = cloudpickle.load(f)
        topology = plan["topology"]
        first = {cid: topology.component_tasks(cid)[0] for cid in topology.components}
        keys = {t: plan["keys"][cid][t - first[cid]] if cid in plan["keys"] else 0
                for cid in topology.components for t in topology.component_tasks(cid)}
        cached = _PLANS[run_dir] = (mtime, plan, keys)
    return cached[1], cached[2]


def read_range(part: RangePartition | RecordRangeGroup) -> Iterator[pa.RecordBatch]:
    """The executor side: read one range (or a group of one-record ranges) and emit its
    records as tuple rows."""
    with gc_paused():  # per-record allocations, as in a stage (squall.runtime.gc_pause)
        if isinstance(part, RecordRangeGroup):
            for one in part.parts:
                yield from _read_range(one)
        else:
            yield from _read_range(part)


POSITIONS_KEPT = 16  # ends remembered per partition: enough for the ranges still replayable


def positions_path(run_dir: str, component: str, partition: Any) -> str:
    name = zlib.crc32(repr(partition).encode()) & 0xFFFFFFFF
    return os.path.join(run_dir, "positions", component, f"{name:08x}.pkl")


def _read_positions(path: str) -> dict[str, dict[str, int | None]]:
    """Per partition of the file (every partition whose name hashes to it), its largest event
    time at the ends of its last ranges; empty when nothing was read before."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return {}


def _write_positions(path: str, every: dict[str, dict[str, int | None]], partition: Any,
                     kept: dict[str, int | None]) -> None:
    every[repr(partition)] = dict(list(kept.items())[-POSITIONS_KEPT:])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, pickle.dumps(every))


def _read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    plan, keys = cached_plan(part.run_dir)
    host = _RangeHost(keys, part.ts, part.seq)
    task = SpoutTask(plan["topology"], part.task, plan["conf"], host,
                     seed=plan["seed"], tracking=plan["tracking"],
                     capture=[] if plan["capture"] else None)
    source = task.spout
    assert isinstance(source, PartitionedSource)  # only sources plan ranges
    source.component = task.component_id
    source._task_index = task.context.this_task_index
    tracking = part.root is not None
    range_id = part.root or 0
    per_record = tracking and record_index(range_id | 1) is not None  # a `range_root`
    rand = random.Random(part.root if tracking else part.seq).getrandbits
    check = task.collector._route
    emitted = transferred = records = 0
    streams: dict[str, int] = {}
    ack_val = 0
    events = task.routes.get(PARTITIONS_STREAM)
    partition = part.range.partition
    if events is not None:
        # The operators' partition watermarks: this range's records come from its partition.
        control = [FROM, [partition]]
        for t in events.choose(control):
            host.send(t, _RuntimeTuple(control, events.origin, None, t))
    index_ts = None if events is None else event_time_index(
        source, {**plan["conf"], **plan["topology"].components[task.component_id].conf})
    positions: SourcePositions | None = None
    kept: dict[str, int | None] | None = None
    every: dict[str, dict[str, int | None]] = {}
    path = ""
    if index_ts is not None:
        path = positions_path(part.run_dir, task.component_id, partition)
        every = _read_positions(path)
        kept = every.get(repr(partition))  # None: the partition has read nothing yet
        start = repr(part.range.start)
        if kept is None or start in kept:
            known = None if kept is None else kept[start]
            positions = SourcePositions(
                index_ts, {} if known is None else {partition: known})
    # A source that skips records marks each run of them with their largest event time.
    source.time_index = None if positions is None else positions.index
    set_at = host.packets.set_at
    try:
        for offset, values in source.read(*part.range):
            if values.__class__ is Skipped:
                if positions is not None:
                    positions.passed(partition, values.max_ts)
                continue
            index = records
            records += 1
            stream = source.stream
            if isinstance(values, MalformedRecord):
                host.report_error(task.component_id, task.task_id, values, stream)
                stream = MALFORMED
                values = [part.range.partition, offset, values.record, str(values)]
                set_at(None)
            elif positions is not None:
                set_at(positions.position(partition, values))
            try:
                route = check(stream, values, direct=False)
            except EmitError as exc:
                host.report_error(task.component_id, task.task_id, exc, stream)
                continue
            targets = route.choose(values)
            emitted += 1
            streams[stream] = streams.get(stream, 0) + 1
            transferred += len(targets)
            if task.capture is not None:
                host.seq += 1
                host.rows.report(row_schema.CAPTURE, task=task.task_id, key=0, stream=stream,
                                 payload=list(values), ts=host.ts, seq=host.seq)
            origin = route.origin
            root = record_root(range_id, index) if per_record else range_id
            for t in targets:
                anchors = None
                if tracking:
                    edge = rand(64)
                    ack_val ^= edge
                    anchors = {root: edge}
                host.send(t, _RuntimeTuple(values, origin, anchors, t))
    except Exception as exc:
        # The range could not be read (its store is down, say): drop what this attempt read and
        # fail the range, so the reader plans it again; the error says what to do.
        host.rows = row_schema.RowBuffer()
        host.packets.clear()
        host.report_error(task.component_id, task.task_id, exc, source.stream)
        if part.root is not None:  # tracking
            failed = [(row_schema.FAIL, -1, part.root, 0)]
            host.rows.append(row_schema.messages_row(failed, host.ts))
        yield host.rows.to_batch()
        return
    set_at(None)
    if positions is not None:
        # How far the partition is read: for the operators (applied at their batch end) and
        # for the range that starts here, in a later batch (a range read again, replayed or
        # retried by Spark, finds its end on file already and leaves the file alone).
        assert events is not None  # positions only where operators listen
        reached = positions.max_ts.get(partition)
        if reached is not None:
            told: list[Any] = [AT, [[partition, reached]]]
            for t in events.choose(told):
                host.send(t, _RuntimeTuple(told, events.origin, None, t))
        end = repr(part.range.end)
        if kept is None or end not in kept:
            _write_positions(path, every, partition, {**(kept or {}), end: reached})
    if part.root is not None and part.edge is not None:  # tracking: a root comes with its edge
        host.rows.append(row_schema.messages_row(
            [(row_schema.ACK, -1, part.root, part.edge ^ ack_val),
             (row_schema.SIZE, records, part.root, 0)], host.ts))
    host.rows.report(row_schema.STATS, task=task.task_id, key=0, stream=None,
                     payload={"emitted": emitted, "transferred": transferred,
                              "streams": streams}, ts=host.ts, seq=0)
    host.rows.rows.extend(host.packets.rows())
    yield host.rows.to_batch()
