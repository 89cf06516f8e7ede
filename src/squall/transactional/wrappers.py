"""The runtime components a transactional topology compiles to (Storm's coordinator spout,
partitioned emitter and `CoordinatedBolt`).

- `CoordinatorSpout` (one task) runs `Coordinator` and emits `$batch` (attempt, last committed
  txid) to every emitter task and `$commit` (attempt) to every committer task, each tracked with
  the attempt as message id: the tree of a batch tuple completes when every task has finished
  the batch, the tree of a commit tuple when every commit-phase task has.
- `EmitterBolt` emits the spout's partitions for a batch, then tells each downstream task how
  many tuples it sent it (`$coord`, direct, anchored to the batch tuple).
- `CoordinatedBolt` runs a user `BatchBolt`: one clone per attempt; it counts the data tuples it
  gets from each upstream task and calls `finish_batch` once every upstream task has reported its
  count and all of them arrived (and, for committers, once the commit tuple came). It then reports
  its own counts downstream and acks what it held. Data tuples are not tracked: a failure (an
  exception, `FailedException`) fails the held coordination tuples, hence the whole batch.

On Spark (configuration `squall.transactional.inband`) nothing is tracked: the whole batch is
one micro-batch, processing-phase tasks send a `$done` marker to every committer task instead of
the coordinator's commit tuple, and every task reports `BatchReport`s to the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cloudpickle

from squall.components.base import Bolt, Spout
from squall.errors import FailedException, InvalidTopologyError
from squall.topology import roles
from squall.topology.config import max_spout_pending, num_ackers
from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields
from squall.topology.tuple import Tuple
from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.progress_store import Store, meta_key, open_store
from squall.transaction_kernel.reports import INBAND, BatchReport
from squall.transaction_kernel.spouts import TransactionalSpout, idle_after, partitions_exhausted
from squall.transactional.bolts import BatchOutputCollector
from squall.transactional.coordinator import Coordinator

BATCH, COMMIT, COORD, DONE = "$batch", "$commit", "$coord", "$done"


def store_for(conf: Mapping[str, Any], tx_id: str, context: Any) -> Store:
    # Memory stores are shared by the tasks of one Topology object (one local run).
    return open_store(conf, tx_id, token=id(context.topology))


class CoordinatorSpout(Spout):
    def __init__(self, tx_id: str, spout: TransactionalSpout) -> None:
        self.tx_id = tx_id
        self.spout = spout

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        if num_ackers(conf) == 0:
            raise InvalidTopologyError(
                "a transactional topology needs ackers (topology.acker.executors > 0): the "
                "coordinator learns that a batch is done from its tuple tree",
                component=context.this_component_id)
        self.store = store_for(conf, self.tx_id, context)
        self.spout.open(conf, context)
        # Unset means one batch in flight, as in Storm's transactional spout coordinator.
        max_active = max_spout_pending(conf) or 1
        self.core = Coordinator(self.store, max_active, ready=self._ready)
        # Attempts started so far (a replay is a new attempt): the local runner paces them on a
        # simulated clock (squall.runtime.local.engine).
        self.attempts_started = 0

    def _exhausted_after(self, txid: int) -> bool:
        # Asked again every time, not cached: a source may grow (files, streams).
        return partitions_exhausted(self.spout, self.store, txid)

    def _ready(self, txid: int) -> bool:
        return (not self._exhausted_after(txid - 1)
                and not idle_after(self.spout, self.store, txid - 1)
                and self.spout.is_ready(txid))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(BATCH, Fields("attempt", "last_committed"))
        declarer.declare_stream(COMMIT, Fields("attempt"))

    def next_tuple(self) -> None:
        for kind, attempt in self.core.sync():
            if kind == "batch":
                self.attempts_started += 1
                self.collector.emit([attempt, self.core.curr - 1], msg_id=("batch", attempt),
                                    stream=BATCH)
            else:
                self.collector.emit([attempt], msg_id=("commit", attempt), stream=COMMIT)

    def ack(self, msg_id: Any) -> None:
        self.core.ack(*msg_id)

    def fail(self, msg_id: Any) -> None:
        self.core.fail(*msg_id)

    def is_exhausted(self) -> bool:
        return not self.core.active and self._exhausted_after(self.core.curr - 1)

    def close(self) -> None:
        self.spout.close()


class _Coordinated(Bolt):
    """Coordination shared by emitters and batch bolts: counts per target, `$coord` reports."""

    done_targets: tuple[str, ...] = ()

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.inband = bool(conf.get(INBAND))
        topology = context.topology
        me = context.this_component_id
        self.me = me
        self.task_id = context.this_task_id
        # Tasks that expect a count from this one: every task of every subscriber of $coord.
        self.coord_targets = [t for cid, spec in topology.components.items()
                              for s in spec.inputs if s.component == me and s.stream == COORD
                              for t in topology.component_tasks(cid)]
        self.done_task_ids = [t for cid in self.done_targets
                              for t in topology.component_tasks(cid)]

    def _report(self, attempt: TransactionAttempt, finished: bool, cause: str = "") -> None:
        if self.inband:
            self.collector.report_error(BatchReport(attempt, self.task_id, finished, cause))

    def _send_coord(self, attempt: TransactionAttempt, counts: dict[int, int],
                    anchors: list[Tuple]) -> None:
        emit_direct = self.collector.emit_direct
        for t in self.coord_targets:
            emit_direct(t, [attempt, counts.get(t, 0)], anchors or None, stream=COORD)
        if self.inband:
            for t in self.done_task_ids:
                emit_direct(t, [attempt], None, stream=DONE)

    def declare_coordination(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(COORD, Fields("attempt", "count"), direct=True)
        declarer.declare_stream(DONE, Fields("attempt"), direct=True)


class EmitterBolt(_Coordinated):
    """Emits a transactional spout's partitions for each batch tuple (see the module doc)."""

    def __init__(self, tx_id: str, spout: TransactionalSpout,
                 done_targets: tuple[str, ...]) -> None:
        self.tx_id = tx_id
        self.spout = spout
        self.done_targets = done_targets

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, spec in self.spout.declared_streams().items():
            declarer.declare_stream(name, spec.fields, direct=spec.direct)
        self.declare_coordination(declarer)

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self._open()

    def _open(self) -> None:
        self.store = store_for(self.conf, self.tx_id, self.context)
        self.spout.open(self.conf, self.context)
        n, i = len(self.context.this_component_tasks), self.context.this_task_index
        self.partitions = [p for p in range(self.spout.num_partitions()) if p % n == i]
        self._opened = True

    def __getstate__(self) -> dict[str, Any]:
        # A task snapshot (Spark) leaves the spout out: it can hold all of a memory spout's
        # data, and the topology has it anyway (restored lazily in execute).
        state = dict(self.__dict__)
        if state.pop("_opened", False):
            state.pop("spout", None)
            state.pop("store", None)
        return state

    def execute(self, tup: Tuple) -> None:
        if "spout" not in self.__dict__ or "_opened" not in self.__dict__:
            self.spout = self.context.topology.components[self.me].new_instance().spout
            self._open()
        attempt, last_committed = tup.values
        counts: dict[int, int] = {}
        out = BatchOutputCollector(self.collector, counts, attempt, self.me)
        txid = attempt.transaction_id
        try:
            for p in self.partitions:
                self._emit_partition(out, attempt, txid, p, last_committed)
        except Exception as exc:
            if not isinstance(exc, FailedException):
                self.collector.report_error(exc)
            self._report(attempt, False, f"{type(exc).__name__}: {exc}")
            self.collector.fail(tup)
            return
        self._send_coord(attempt, counts, [tup])
        self._report(attempt, True)
        self.collector.ack(tup)

    def _emit_partition(self, out: BatchOutputCollector, attempt: TransactionAttempt, txid: int,
                        p: int, last_committed: int) -> None:
        store, spout = self.store, self.spout
        prev = store.get(meta_key(p, txid - 1)) if txid > 1 else None
        if getattr(spout, "opaque", False):
            # Always from where the previous transaction ended; stored before the next starts.
            meta = spout.emit_partition_batch(attempt, out, p, prev)  # type: ignore[attr-defined]
            store.put(meta_key(p, txid), meta)
        else:
            meta = store.get(meta_key(p, txid))
            if meta is None:
                meta = spout.emit_partition_batch_new(  # type: ignore[attr-defined]
                    attempt, out, p, prev)
                store.put(meta_key(p, txid), meta)
            else:  # a replay: exactly the batch first emitted for this txid
                spout.emit_partition_batch(attempt, out, p, meta)  # type: ignore[attr-defined]
        # Metadata older than the last committed transaction is never read again.
        if last_committed > 1:
            store.delete(meta_key(p, last_committed - 1))


class _Track:
    __slots__ = ("bolt", "commit_ok", "counts", "done", "expected", "failed", "held_commit",
                 "held_proc", "received", "released")

    def __init__(self) -> None:
        self.bolt: Any = None
        self.counts: dict[int, int] = {}
        self.received: dict[int, int] = {}
        self.expected: dict[int, int] = {}
        self.held_proc: dict[int, Tuple] = {}  # processing-tree coord tuples by source task
        self.held_commit: list[Tuple] = []  # commit-tree tuples (commit tuple, their coords)
        self.commit_ok = False
        self.done: set[int] = set()
        self.failed = False
        self.released: set[int] = set()


class CoordinatedBolt(_Coordinated):
    """Runs a user `BatchBolt` with Storm's batch coordination (see the module doc)."""

    def __init__(self, bolt: Any, *, committer: bool, commit_phase: bool,
                 upstream_commit_phase: frozenset[str], processing: tuple[str, ...],
                 done_targets: tuple[str, ...]) -> None:
        # The user's bolt, cloned for every attempt (kept as an object, not bytes, so the Spark
        # runner can ship its class by value like any component's).
        self.template = bolt
        self.streams = bolt.declared_streams()
        self.committer = committer
        self.commit_phase = commit_phase
        self.role = roles.COMMITTING if commit_phase else roles.COORDINATED
        self.upstream_commit_phase = upstream_commit_phase
        self.processing = processing  # components whose done markers gate a commit (Spark)
        self.done_targets = done_targets

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, spec in self.streams.items():
            declarer.declare_stream(name, spec.fields, direct=spec.direct)
        self.declare_coordination(declarer)

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        topology = context.topology
        spec = topology.components[self.me]
        self.sources: dict[int, str] = {}  # upstream task -> its component
        for s in spec.inputs:
            if not s.stream.startswith("$"):
                for t in topology.component_tasks(s.component):
                    self.sources[t] = s.component
        self.done_from = {t for cid in self.processing for t in topology.component_tasks(cid)}
        self.tracks: dict[TransactionAttempt, _Track] = {}
        self.live: dict[int, TransactionAttempt] = {}  # txid -> newest attempt seen

    # ---- per attempt ----------------------------------------------------------------------
    def _track(self, attempt: Any, tup: Tuple) -> _Track | None:
        if not isinstance(attempt, TransactionAttempt):
            raise InvalidTopologyError(
                f"the first value of a tuple must be its TransactionAttempt, got {attempt!r} "
                f"from {tup.source_component}", component=self.me, stream=tup.source_stream_id)
        tr = self.tracks.get(attempt)
        if tr is not None:
            return tr
        txid = attempt.transaction_id
        newest = self.live.get(txid)
        if newest is not None and newest.attempt_id > attempt.attempt_id:
            return None  # stale: a newer attempt of this transaction is already here
        if newest is not None:  # a replay: the older attempt is abandoned
            old = self.tracks.pop(newest, None)
            if old is not None:
                self._fail_held(old)
        self.live[txid] = attempt
        tr = self.tracks[attempt] = _Track()
        bolt = cloudpickle.loads(cloudpickle.dumps(self.template))
        try:
            bolt.prepare(self.conf, self.context,
                         BatchOutputCollector(self.collector, tr.counts, attempt, self.me),
                         attempt)
        except Exception as exc:
            self._failed(attempt, tr, exc)
        tr.bolt = bolt
        return tr

    def execute(self, tup: Tuple) -> None:
        stream = tup.source_stream_id
        values = tup.values
        tr = self._track(values[0], tup)
        if tr is None:  # stale attempt: ignored (its coordination tuples are failed)
            if stream in (COORD, COMMIT):
                self.collector.fail(tup)
            return
        attempt = values[0]
        if stream == COORD:
            src = tup.source_task
            tr.expected[src] = values[1]
            if tr.failed:
                self.collector.fail(tup)
                return
            if tup.source_component in self.upstream_commit_phase:
                tr.held_commit.append(tup)
            else:
                tr.held_proc[src] = tup
        elif stream == COMMIT:
            if tr.failed:
                self.collector.fail(tup)
                return
            tr.commit_ok = True
            tr.held_commit.append(tup)
        elif stream == DONE:
            tr.done.add(tup.source_task)
        else:
            src = tup.source_task
            tr.received[src] = tr.received.get(src, 0) + 1
            if tr.failed:
                return
            try:
                tr.bolt.execute(tup)
            except Exception as exc:
                self._failed(attempt, tr, exc)
                return
        if not tr.failed:
            self._check(attempt, tr)

    def _check(self, attempt: TransactionAttempt, tr: _Track) -> None:
        complete = True
        for src in self.sources:
            expected = tr.expected.get(src)
            if expected is None or tr.received.get(src, 0) != expected:
                complete = False
            elif self.commit_phase and src in tr.held_proc:
                # This task has all of src's batch: the processing phase is done here.
                self.collector.ack(tr.held_proc.pop(src))
        if not complete:
            return
        if self.committer:
            gate = tr.done >= self.done_from if self.inband else tr.commit_ok
            if not gate:
                return
        try:
            tr.bolt.finish_batch()
        except Exception as exc:
            self._failed(attempt, tr, exc)
            return
        held = tr.held_commit if self.commit_phase else list(tr.held_proc.values())
        self._send_coord(attempt, tr.counts, held)
        self._report(attempt, True)
        ack = self.collector.ack
        for t in held:
            ack(t)
        for t in tr.held_proc.values() if self.commit_phase else ():
            ack(t)
        del self.tracks[attempt]

    def _failed(self, attempt: TransactionAttempt, tr: _Track, exc: Exception) -> None:
        if not isinstance(exc, FailedException):
            self.collector.report_error(exc)  # a bug, not a decision: also an error
        tr.failed = True
        self._report(attempt, False, f"{type(exc).__name__}: {exc}")
        self._fail_held(tr)

    def _fail_held(self, tr: _Track) -> None:
        fail = self.collector.fail
        for t in list(tr.held_proc.values()) + tr.held_commit:
            fail(t)
        tr.held_proc.clear()
        tr.held_commit = []
        tr.failed = True
