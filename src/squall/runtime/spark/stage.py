"""Executor side: run one component's tasks over a micro-batch's rows (inside `mapInArrow`).

Each Spark partition holds the rows of one or more whole tasks (the driver routes by a key whose
Spark hash lands in the task's shuffle partition, and a stage with more tasks than the application
has cores coalesces those partitions into one per core); a partition runs its tasks in turn. Rows
for later components, and ack/report rows, pass through unchanged so that one lineage carries
everything to the batch's single action. A stage may also host fused components (`fusion_groups`):
their tasks run after their upstream's in the same partition, executing what it emitted to them
straight from the packet buffer, without a row.

A task's component instance is cached in the Python worker with the batch it ran last and the id
of the snapshot it equals. It is reused only when that batch is committed and that id is the newest
snapshot at or before the driver's last committed batch; otherwise (another worker ran the task
last, or a batch is replayed after a crash or a refused commit) it is restored from that snapshot.
A batch ends by writing the task's snapshot under its batch id when its state changed (its bytes
differ from the snapshot it started from); an unchanged task writes none and removes any snapshot
a failed attempt of the batch left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.classic.dataframe import DataFrame

from squall.atomic_files import (
    latest_snapshot,
    prune_snapshots,
    read_or_none,
    snapshot_path,
    write_atomic,
)
from squall.components.batch_sink import BatchSink
from squall.errors import BatchRetryError
from squall.reliability.acker import RECORD_FLAG, base_root
from squall.runtime.gc_pause import gc_paused
from squall.runtime.reporting import task_figures
from squall.runtime.spark import row_schema, window_columns
from squall.runtime.spark.map_in_arrow import java_udf
from squall.task.end_of_input import END_OF_INPUT_SRC
from squall.task.routing import load_aware
from squall.task.snapshot import dump_instance, load_instance
from squall.task.tasks import BoltTask
from squall.topology.config import Config, tick_period_ms
from squall.topology.description import ComponentSpec, Topology
from squall.topology.groupings import forwards
from squall.topology.tuple import TICK_ORIGIN, Origin, _RuntimeTuple
from squall.transaction_kernel.reports import BatchReport

# (run id, task id) -> (id of the snapshot the instance equals, the batch it ran last, task runtime,
# the instance dumped when it last equalled that snapshot)
_TASKS: dict[tuple[str, int], tuple[int, int, BoltTask, bytes]] = {}

# run id -> its topology, in the driver (written to the run's file) and in each Python worker (read
# from it): a stage's closure carries the run id, not the topology (see `StagePlan`).
_TOPOLOGIES: OrderedDict[str, Topology] = OrderedDict()
_TOPOLOGIES_KEPT = 4


def topology_path(state_dir: str, run_id: str) -> str:
    """The file a run's stages read its topology from (written once, by the first stage shipped)."""
    return os.path.join(state_dir, "stages", f"topology-{run_id}.pkl")


def _keep_topology(run_id: str, topology: Topology) -> None:
    _TOPOLOGIES[run_id] = topology
    _TOPOLOGIES.move_to_end(run_id)
    while len(_TOPOLOGIES) > _TOPOLOGIES_KEPT:
        _TOPOLOGIES.popitem(last=False)


@dataclass(frozen=True)
class StagePlan:
    """What one stage's closure carries to the executors."""

    run_id: str
    topology: Topology
    conf: Mapping[str, Any]
    component: str
    batch_id: int
    committed: int  # the last committed batch id (-1: none)
    state_dir: str
    keys: dict[str, list[int]]  # component -> routing key of each task index
    seed: int
    tracking: bool
    capture: bool
    checkpoint_id: str  # the location's (fingerprint.checkpoint_id): sinks name marks with it
    # batch_id and committed are the Spark job's (`BATCH_PROPERTY`, set by `StageChain`), not
    # the plan's: a run's stage functions are then the same for every batch.
    batch_from_job: bool = False
    # Components run in this stage after `component`, each fed by an earlier one of the group
    # alone (`fusion_groups`): their input is executed here, never sent as a packet row.
    fused: tuple[str, ...] = ()

    # Pickled for every stage of every batch: the topology (which holds every component, and
    # whatever data a spout keeps) travels once per run, in a file under the checkpoint location
    # that every executor reads (as it reads snapshots), and a worker keeps it per run id. Per
    # batch only the plan's small fields are pickled, shipped and unpickled.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if _TOPOLOGIES.get(self.run_id) is not self.topology:
            path = topology_path(self.state_dir, self.run_id)
            write_atomic(path, cloudpickle.dumps(self.topology))
            _keep_topology(self.run_id, self.topology)
            for name in os.listdir(os.path.dirname(path)):  # earlier runs' (restarts)
                if name.startswith("topology-") and name != os.path.basename(path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(os.path.dirname(path), name))
        state["topology"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        run_id = state["run_id"]
        topology = _TOPOLOGIES.get(run_id)
        if topology is None:
            with open(topology_path(state["state_dir"], run_id), "rb") as f:
                topology = cloudpickle.load(f)
        _keep_topology(run_id, topology)
        state["topology"] = topology
        self.__dict__.update(state)


class StageHost:
    """The `Host` of tasks running inside a stage: everything they send becomes output rows."""

    transactional_batches = True  # a batch commits whole, or is run again (driver.py)

    def __init__(self, plan: StagePlan, out: row_schema.RowBuffer) -> None:
        self.plan = plan
        self.out = out
        self._append = out.append
        self.topology = plan.topology
        self.now = 0
        self.xor: dict[int, int] = {}
        self.ack_xor = self.xor  # collectors XOR acks into it directly (OutputCollector.ack)
        self.fails: list[int] = []
        self.resets: list[int] = []
        self.seq = 0
        first = {cid: self.topology.component_tasks(cid)[0] for cid in self.topology.components}
        self._key_of = {
            t: plan.keys[cid][t - first[cid]] if cid in plan.keys else 0
            for cid in self.topology.components
            for t in self.topology.component_tasks(cid)
        }
        self.packets = row_schema.Packets(self._key_of, self.next_seq)
        self.send = self.packets.send  # the Host's send: tuples go into packets
        # The event-time position of what executes now (a packet header's, see `Packets`), which
        # what it emits carries on (squall.partition_watermarks).
        self.at: int | None = None

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def set_now(self, now: int) -> None:
        """The processing time of the tuples executed next (and so of what they emit)."""
        if now != self.now:
            self.now = now
            self.packets.set_now(now)

    def set_at(self, at: int | None) -> None:
        """The event-time position of the tuples executed next (and so of what they emit)."""
        if at != self.at:
            self.at = at
            self.packets.set_at(at)

    def ack_init(self, root: int, xor: int, spout_task: int) -> None:
        raise RuntimeError("bolts do not start tuple trees")

    def ack(self, root: int, value: int, component: str) -> None:
        self.xor[root] = self.xor.get(root, 0) ^ value

    def fail(self, root: int, component: str) -> None:
        self.fails.append(root)

    def reset(self, root: int, component: str) -> None:
        self.resets.append(root)

    def forget(self, root: int) -> None:
        pass

    def now_ms(self) -> int:
        return self.now

    def report_error(self, component: str, task: int, error: BaseException,
                     stream: str | None = None) -> None:
        self.seq += 1
        if isinstance(error, BatchReport):
            # A transactional task's report travels through the collector's error channel
            # (its only channel to the host) but is no error: it gets a row kind of its own.
            self._append(row_schema.report_row(error, ts=self.now, seq=self.seq))
            return
        self.out.report(row_schema.ERROR, task=task, key=0, stream=stream,
                        payload=row_schema.portable_error(error), ts=self.now, seq=self.seq)


@dataclass
class _Started:
    """A task as a stage started it: the snapshot it continues from (its id, and its state dumped
    in this process; None for a task that had none and was prepared)."""

    task: BoltTask
    snapshot: int | None
    blob: bytes | None


def _task(plan: StagePlan, task_id: int, host: StageHost) -> _Started:
    latest = latest_snapshot(plan.state_dir, task_id, plan.committed)
    # Out of the cache while it runs, back in only when its batch is finished: an attempt that
    # dies halfway leaves no half-updated instance for the retry to reuse.
    cached = _TASKS.pop((plan.run_id, task_id), None)
    # An instance that ran a batch not committed (a retry, a replay) is not reused even when its
    # snapshot is: what it keeps outside its snapshot may hold that batch's effects.
    if cached is not None and cached[0] == latest and cached[1] <= plan.committed:
        task = cached[2]
        task.set_host(host)
        if task.checkpointing is not None:  # stateful topology: state commits keyed by batch
            task.checkpointing.begin_batch(plan.batch_id, plan.committed)
        return _Started(task, latest, cached[3])
    task = BoltTask(plan.topology, task_id, plan.conf, host, seed=plan.seed,
                    tracking=plan.tracking, capture=[] if plan.capture else None)
    if task.checkpointing is not None:
        task.checkpointing.on_spark(plan.state_dir)
    blob = None if latest is None else read_or_none(snapshot_path(plan.state_dir, task_id, latest))
    if blob is not None:
        load_instance(task, blob)
        # What an unchanged task dumps is compared with this, not with the file: pickle shares
        # equal objects by identity, which a restore need not reproduce (an interned string
        # becomes two), so the same state can pickle to other bytes in another process.
        blob = dump_instance(task)
    else:
        task.prepare()  # first batch of this task: prepare runs once, as in Storm
        if isinstance(task.instance, BatchSink):
            # Before its first batch is written: a replay of that batch after a kill (no
            # snapshot yet) must find what the killed attempt committed.
            task.instance.bind_checkpoint(plan.checkpoint_id)
    if task.checkpointing is not None:
        task.checkpointing.begin_batch(plan.batch_id, plan.committed)
    return _Started(task, latest if blob is not None else None, blob)


def run_stage(plan: StagePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function of a stage (see `stage_function`)."""
    if plan.batch_from_job:
        plan = _job_batch(plan)
    # A stage allocates a few objects per tuple (tuple, values, packet item) and keeps few of
    # them: CPython's cyclic collector would rescan the growing heap over and over, which
    # measured as half of a word-count stage's time (docs/performance.md). Reference counting
    # still frees everything that is not in a cycle; the collector runs again afterwards.
    with gc_paused():
        yield from _run_stage(plan, batches)


def _run_stage(plan: StagePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    out = row_schema.RowBuffer()
    host = StageHost(plan, out)
    topology = plan.topology
    group = (plan.component, *plan.fused)
    mine = pa.array([t for cid in group for t in topology.component_tasks(cid)], pa.int32())
    carried = pa.array([row_schema.TUPLE, row_schema.PACKET], pa.int8())
    selected: list[pa.RecordBatch] = []
    # The whole input is drained before any work, which Python worker reuse relies on. Rows are
    # split with Arrow compute: only this stage's tuples are converted to Python objects.
    for batch in batches:
        if batch.num_rows == 0:
            continue
        is_mine = pc.and_(pc.is_in(batch.column("kind"), value_set=carried),
                          pc.is_in(batch.column("task"), value_set=mine))
        rest = batch.filter(pc.invert(is_mine))
        if rest.num_rows:
            yield rest
        if rest.num_rows < batch.num_rows:
            selected.append(batch.filter(is_mine))
    cols: dict[str, list[Any]] = {}
    rows_of: dict[int, range] = {}
    if selected:
        # Per (source task -> this task) FIFO, as Storm guarantees; sources in task order.
        table = pa.Table.from_batches(selected).sort_by(
            [("task", "ascending"), ("src", "ascending"), ("seq", "ascending")])
        cols = {name: table.column(name).to_pylist()
                for name in ("kind", "task", "src", "stream", "values", "root", "edge", "more",
                             "ts", "seq")}
        n = table.num_rows
        i = 0
        while i < n:
            task_id = cols["task"][i]
            j = i
            while j < n and cols["task"][j] == task_id:
                j += 1
            rows_of[task_id] = range(i, j)
            i = j
    peers = _peers(topology, plan.fused)
    # The group's components in topological order, each one's tasks in task order: a fused
    # component's tasks run after its upstream's, with what they emitted to them here.
    for cid in group:
        for task_id in topology.component_tasks(cid):
            held = _held(host, task_id, peers) if task_id in peers else []
            rows = rows_of.get(task_id)
            if rows is not None or held:
                _run_task(plan, host, out, task_id, cols, rows or range(0), held)
    if host.xor:
        out.append(row_schema.ack_messages_row(_folded(host.xor), host.now))
    messages = [(row_schema.FAIL, -1, root, 0) for root in host.fails]  # records named
    messages += [(row_schema.RESET, -1, base_root(root), 0) for root in host.resets]
    if messages:
        out.append(row_schema.messages_row(messages, host.now))
    out.rows.extend(host.packets.rows())
    if len(out):
        yield out.to_batch()


def _peers(topology: Topology, fused: tuple[str, ...]) -> dict[int, int]:
    """Task of a fused component -> the one task that sends to it: its upstream's task with the
    same index (`groupings.forwards`)."""
    peers: dict[int, int] = {}
    for cid in fused:
        upstream = topology.components[cid].inputs[0].component
        peers.update(zip(topology.component_tasks(cid), topology.component_tasks(upstream),
                         strict=True))
    return peers


def _held(host: StageHost, task_id: int, peers: dict[int, int]) -> list[tuple[int, int, list]]:
    """What this stage's tasks emitted to fused task `task_id`, as `(source, seq, items)`."""
    held = _take(host.packets, task_id)
    for src, _, _ in held:
        if src != peers[task_id]:
            # Only a task restored from a snapshot whose route predates the local_or_shuffle
            # rule can get here (`snapshot.layout` rebuilds those that predate the shuffle
            # rule): its target task runs in another Spark task.
            raise RuntimeError(
                f"task {src} ({host.topology.task_component(src)!r}) emitted to task {task_id} "
                f"of {host.topology.task_component(task_id)!r}, which runs fused with task "
                f"{peers[task_id]}: run with squall.spark.fusion=false")
    return held


def _take(packets: row_schema.Packets, dst: int) -> list[tuple[int, int, list]]:
    """The pairs of `packets` to task `dst` as `(source task, seq, items)`, out of the buffer:
    their items are executed in this stage rather than sent as rows."""
    taken = [(src, packets.seqs[(src, to)], items)
             for (src, to), items in packets.pairs.items() if to == dst]
    for src, _, _ in taken:
        pair = (src, dst)
        del packets.pairs[pair], packets.seqs[pair], packets.marks[pair]
        packets.heads.pop(pair, None)
    for key in [key for key in packets.open if key[1] == dst]:
        del packets.open[key]
    return taken


def _run_task(plan: StagePlan, host: StageHost, out: row_schema.RowBuffer, task_id: int,
              cols: dict[str, list[Any]], rows: range, held: list[tuple[int, int, list]]) -> None:
    """Run task `task_id` over its input rows `rows` (of `cols`) and the packets `held` for it
    (a fused task's, executed without a row), in (source task, seq) order; then end its batch."""
    topology = plan.topology
    started = _task(plan, task_id, host)
    task = started.task
    execute = task.execute
    origins: dict[tuple[int, str], Any] = {}
    decode, anchors_of = row_schema.decode_values, row_schema.anchors_of
    kinds, srcs, streams, blobs = (cols.get(name, []) for name in ("kind", "src", "stream",
                                                                    "values"))
    roots, edges, mores, tss = (cols.get(name, []) for name in ("root", "edge", "more", "ts"))
    # (row index or -1, source, items held): the rows alone in the common (unfused) case.
    steps: Any = ((k, srcs[k], None) for k in rows)
    if held:
        merged: list[tuple[int, int, int, list | None]] = [
            (srcs[k], cols["seq"][k], k, None) for k in rows]
        merged += [(src, seq, -1, items) for src, seq, items in held]
        merged.sort(key=lambda step: (step[0], step[1]))
        steps = [(k, src, items) for src, _, k, items in merged]
    executed = 0
    for k, src, items in steps:
        if items is not None:
            executed += _run_items(task, topology, host, src, items, origins)
            continue
        stream = streams[k]
        if kinds[k] == row_schema.PACKET:
            executed += _run_packet(task, topology, host, src, blobs[k], origins)
            continue
        host.set_at(None)  # a spout's row: no position
        if src == END_OF_INPUT_SRC:  # sorts after the task's tuples of this batch
            host.set_now(tss[k])
            task.end_of_input()
            continue
        executed += 1
        origin = _source_origin(topology, src, origins, stream)
        host.set_now(tss[k])
        root = roots[k]
        anchors = None if root is None else anchors_of(root, edges[k], mores[k])
        tup = _RuntimeTuple(decode(blobs[k]), origin, anchors, task_id)
        if executed % SAMPLE_EVERY != 1:
            execute(tup)
        else:  # timed now and then (squall.task.stats.ExecuteTimes)
            task.times.timed(execute, tup)
    host.set_at(None)  # what a batch end emits derives from no one record
    try:
        task.end_batch(plan.batch_id)
    except BatchRetryError as exc:
        # An ABORT row rather than an exception: the driver runs the batch again without
        # Spark failing a job (and printing its traceback) for a store that is down.
        host.seq += 1
        out.report(row_schema.ABORT, task=task_id, key=0, stream=None,
                   payload=row_schema.portable_error(exc), ts=host.now, seq=host.seq)
    _finish_task(plan, started, host, out, executed=executed)


def _job_batch(plan: StagePlan) -> StagePlan:
    """`plan` with the batch ids of the Spark job running this task (`StageChain.apply`)."""
    context = TaskContext.get()
    value = None if context is None else context.getLocalProperty(BATCH_PROPERTY)
    if value is None:
        raise RuntimeError(f"the stage of {plan.component!r} runs in a Spark job without the "
                           f"{BATCH_PROPERTY} property: run its StageChain's apply, which sets it")
    batch_id, committed = (int(x) for x in value.split())
    return dataclasses.replace(plan, batch_id=batch_id, committed=committed,
                               batch_from_job=False)


def _folded(xor: dict[int, int]) -> dict[int, int]:
    """The XOR of the acks per tree: the acks of a range's record roots fold into the range's
    root (squall.reliability.acker.record_root), so telling records apart adds no ack rows."""
    if not any(root & RECORD_FLAG for root in xor):  # no range trees: nothing to fold
        return xor
    folded: dict[int, int] = {}
    for root, value in xor.items():
        if root & RECORD_FLAG:
            root = base_root(root)
        folded[root] = folded.get(root, 0) ^ value
    return folded


def _run_packet(task: BoltTask, topology: Topology, host: StageHost, src: int, blob: bytes,
                origins: dict[tuple[int, str], Any]) -> int:
    """Execute every tuple of one packet (see `row_schema.Packets`), in emission order; returns how
    many."""
    return _run_items(task, topology, host, src, row_schema.decode_values(blob), origins)


def _run_items(task: BoltTask, topology: Topology, host: StageHost, src: int, items: list,
               origins: dict[tuple[int, str], Any]) -> int:
    """`_run_packet` of a packet's items: decoded from a row, or held by a fused stage."""
    role = window_columns.column_role(task, host.plan.run_id)
    if role is not None:  # a windowed task's rows as columns, no execute per tuple
        return window_columns.run_packet(
            task, role, host, items, functools.partial(_source_origin, topology, src, origins),
            SAMPLE_EVERY)
    task_id = task.task_id
    execute = task.execute
    # A plain Bolt's execute is called here directly (what `BoltTask._execute_rich` does, one
    # call less per tuple): the hot loop of most stages.
    direct = task.direct_execute()
    on_error = task.on_execute_error
    origin = None
    n = 0
    for item in items:
        if item.__class__ is list:
            tup = _RuntimeTuple(item, origin, None, task_id)
        elif len(item) == 2:
            tup = _RuntimeTuple(item[0], origin, item[1], task_id)
        else:  # a header: stream, processing time and position of the tuples that follow
            stream = item[0]
            origin = _source_origin(topology, src, origins, stream)
            host.set_now(item[1])
            host.set_at(item[2])
            continue
        n += 1
        if n % SAMPLE_EVERY == 1:  # timed now and then (squall.task.stats.ExecuteTimes)
            _timed(task, execute, direct, on_error, tup)
            continue
        if direct is None:
            execute(tup)
            continue
        try:
            direct(tup)
        except Exception as exc:
            on_error(tup, exc)
    return n


def _source_origin(topology: Topology, src: int, origins: dict[tuple[int, str], Any],
                   stream: str) -> Any:
    """The origin of `src`'s `stream`, made once per stage run (`origins` memoizes it)."""
    origin = origins.get((src, stream))
    if origin is None:
        origin = origins[(src, stream)] = _origin(topology, src, stream)
    return origin


SAMPLE_EVERY = 20  # timed: the first tuple of a packet, then one in 20 (Storm samples 5%)


def _timed(task: BoltTask, execute: Callable[[Any], None], direct: Callable[[Any], None] | None,
           on_error: Callable[[Any, Exception], None], tup: Any) -> None:
    if direct is None:
        task.times.timed(execute, tup)
        return
    try:
        task.times.timed(direct, tup)
    except Exception as exc:
        on_error(tup, exc)


def _finish_task(
    plan: StagePlan, started: _Started, host: StageHost, out: row_schema.RowBuffer, executed: int
) -> None:
    task = started.task
    if task.capture:
        for stream, values in task.capture:
            host.seq += 1
            out.report(row_schema.CAPTURE, task=task.task_id, key=0, stream=stream, payload=values,
                       ts=host.now, seq=host.seq)
        task.capture.clear()
    stats: dict[str, Any] = task.stats.as_dict()
    stats["executed"] = executed
    task.times.settle_open()
    stats.update(task_figures(task, per_batch=True))
    out.report(row_schema.STATS, task=task.task_id, key=0, stream=None, payload=stats, ts=host.now,
               seq=0)
    task.stats.reset()  # counters are per batch; the driver sums them
    task.times.reset()
    for route in task.routes.values():
        route.emitted = 0
    blob = dump_instance(task)
    path = snapshot_path(plan.state_dir, task.task_id, plan.batch_id)
    if started.snapshot is not None and blob == started.blob:
        # Unchanged (a stateless bolt, or nothing its tuples changed): the snapshot it started
        # from stays the newest at or before this batch once it commits, so it writes none. A
        # snapshot of this batch a failed attempt wrote would shadow it: it goes.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _TASKS[(plan.run_id, task.task_id)] = (started.snapshot, plan.batch_id, task, blob)
        return
    write_atomic(path, blob)
    prune_snapshots(plan.state_dir, task.task_id, plan.committed)
    _TASKS[(plan.run_id, task.task_id)] = (plan.batch_id, plan.batch_id, task, blob)


def _origin(topology: Topology, src: int, stream: str) -> Any:
    if src == -1:
        return TICK_ORIGIN  # planned by the spout reader from topology.tick.tuple.freq.secs
    cid = topology.task_component(src)
    return Origin(topology.components[cid].streams[stream].fields, cid, stream, src)


def stage_function(plan: StagePlan) -> Callable[[Iterator[pa.RecordBatch]],
                                                Iterator[pa.RecordBatch]]:
    """The function given to `mapInArrow` for this stage."""
    return functools.partial(run_stage, plan)


FUSION = "squall.spark.fusion"


def fusion_groups(topology: Topology, order: list[str],
                  conf: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The components of `order` (bolts, topologically ordered) grouped into the stages that run
    them: a bolt runs in its upstream's stage when every input it has is a grouping from that
    one bolt that forwards task i to task i (`groupings.forwards`: `local_or_shuffle`, or
    `shuffle` unless the upstream's `topology.disable.loadaware.messaging` is true, between
    equal task counts), and it gets no tick tuples. Its task i then receives from the
    upstream's task i alone (`groupings.make_chooser`), which the same Spark task runs; a
    chain of such bolts is one stage. `squall.spark.fusion` false: a stage each.

    Fields groupings, and shuffles between other task counts, are not fused: every upstream
    task sends to every downstream one, and the upstream's Spark tasks hold other Storm tasks
    than the downstream's would.
    """
    if not conf.get(FUSION, True):
        return [(cid,) for cid in order]
    head: dict[str, str] = {}  # component -> the first component of its stage
    groups: dict[str, list[str]] = {}
    for cid in order:
        spec = topology.components[cid]
        upstream = {sub.component for sub in spec.inputs}
        source = next(iter(upstream)) if len(upstream) == 1 else None
        if (source is not None and source in head and source != cid
                and _forwarded(topology, source, spec, conf)
                and tick_period_ms(Config.effective_of(conf, spec.conf)) is None):
            head[cid] = head[source]
            groups[head[cid]].append(cid)
        else:
            head[cid] = cid
            groups[cid] = [cid]
    return [tuple(group) for group in groups.values()]


def _forwarded(topology: Topology, source: str, spec: ComponentSpec,
               conf: Mapping[str, Any]) -> bool:
    """Whether every input of `spec` (all from `source`) sends task i to task i: the rule the
    upstream's tasks route by (`routing.load_aware` of their effective configuration)."""
    upstream = topology.components[source]
    aware = load_aware(Config.effective_of(conf, upstream.conf))
    return all(forwards(sub.grouping, upstream.num_tasks, spec.num_tasks, load_aware=aware)
               for sub in spec.inputs)


def pulled_where_read(topology: Topology, first: str,
                      conf: Mapping[str, Any]) -> tuple[int, ...] | None:
    """With spouts pulled on the executors: the spout tasks whose pulls can be read in the input
    partitions of the first bolt's stage, task k of them in partition k, else None.

    So when the topology has one spout component, with as many tasks as the first bolt `first`,
    and every input of `first` is from it by a grouping that forwards task i to task i
    (`_forwarded`): what pull k emits to `first` goes to its task k alone, whose routing key
    lands in partition k, so `first` runs in the Spark task that pulled its tuples, with no
    shuffle of them (`StageChain`'s `partitioned`). Rows for other components pass through it.
    """
    spec = topology.components[first]
    spouts = list(topology.spouts)
    if (len(spouts) != 1 or {sub.component for sub in spec.inputs} != {spouts[0]}
            or not _forwarded(topology, spouts[0], spec, conf)):
        return None
    return topology.component_tasks(spouts[0])


# The Spark job property a `StageChain` batch's ids travel in ("<batch id> <last committed>").
BATCH_PROPERTY = "squall.stage.batch"


class StageChain:
    """A batch's input rows through one stage per group of components, in topological order.

    Each stage repartitions by the routing key, so that every task's rows meet in its
    partition, and maps them with `stage_function`; the result is one lineage for the batch's
    single action. A component with more tasks than the application has cores (Spark's default
    parallelism) runs them as one Spark task per core: `coalesce` hands each Spark task whole
    partitions, hence whole Storm tasks, which it runs in turn. Each Python task costs a
    worker's round (start, function, Arrow stream), so there are no more of them than cores to
    run them. `partitioned`: the input holds its rows in the partitions `repartition` would
    give them for the first component, so its stage runs where they are read.

    Building a stage through `DataFrame.mapInArrow` costs the driver about 60 calls into the JVM
    (the function pickled and wrapped, its return type parsed, each input column resolved): 45 to
    170 ms a batch for two stages, before its Spark job starts. Here each stage's function, Spark
    UDF and input columns are made once per run, and a batch only applies them (a few calls a
    stage). Its batch id and last committed batch travel as a property of its Spark job
    (`BATCH_PROPERTY`, which Spark hands every task of the job), not in the function. Bolts
    fuse into their upstream's stage as `fusion_groups` says (`groups`: the components of each
    stage).
    """

    def __init__(self, spark: Any, plan: StagePlan, order: list[str], *,
                 partitioned: bool = False) -> None:
        self.spark = spark
        self.partitioned = partitioned
        jvm = spark.sparkContext._jvm
        self.groups = fusion_groups(plan.topology, order, plan.conf)
        self.stages = []
        for cid, *fused in self.groups:
            udf = java_udf(
                stage_function(dataclasses.replace(plan, component=cid, fused=tuple(fused),
                                                   batch_from_job=True)),
                row_schema.DDL, f"squall_{cid}")
            self.stages.append((plan.topology.components[cid].num_tasks, udf))
        # Columns by name, resolved against each batch's plan: every stage reads and writes the
        # rows of row_schema.SCHEMA.
        self.columns = jvm.PythonUtils.toSeq(
            [jvm.org.apache.spark.sql.functions.col(name) for name in row_schema.SCHEMA.names])
        self.key = jvm.PythonUtils.toSeq([jvm.org.apache.spark.sql.functions.col("key")])

    def apply(self, df: Any, batch_id: int, committed: int) -> Any:
        """`df` (the batch's input rows) through the run's stages, for batch `batch_id`."""
        sc = self.spark.sparkContext
        # On the thread that runs the batch's action: its job, and so each task, carries it.
        sc.setLocalProperty(BATCH_PROPERTY, f"{batch_id} {committed}")
        cores = sc.defaultParallelism
        jdf = df._jdf
        for i, (n, judf) in enumerate(self.stages):
            if i or not self.partitioned:
                jdf = jdf.repartition(n, self.key)
            if cores < n:
                jdf = jdf.coalesce(cores)
            jdf = jdf.mapInArrow(judf.apply(self.columns), False, None)
        return DataFrame(jdf, self.spark)
