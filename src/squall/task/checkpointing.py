"""The checkpoint protocol inside the runners: per bolt task, and the coordinator's task.

Local runner (Storm's protocol). `CheckpointSpoutTask` hosts the `CheckpointCoordinator` as a
tracked pseudo-spout: each action is a tuple `(txid, action)` on stream `$checkpoint`, sent to
every task of the bolts that read from spouts. Each bolt task (`TaskCheckpointing`) counts an
action until it has arrived from every upstream task (the barrier), then handles it, if it is a
stateful bolt (Storm's `StatefulBoltExecutor`), forwards it to every downstream task anchored to
the incoming one, and acks it. Data tuples are never blocked by the barrier.

Spark runner. There are no checkpoint tuples: a micro-batch is a transaction whose id is the batch
id. At the end of a batch the task prepares its state under the batch id; when the task next
runs (or the driver cleans up), the batch is known to be committed or not, and the state is
committed (rolled forward) or its version discarded (the batch is replayed). See
docs/design/state.md.
"""

from __future__ import annotations

import os
import random
from collections import deque
from typing import Any

from squall.components.base import BasicBolt
from squall.components.stateful import StatefulOutputCollector
from squall.errors import InvalidTopologyError
from squall.reliability.pending import PendingMap
from squall.state.backends import StoreKeyValueState
from squall.state.base import KeyValueState, MemoryKeyValueState, State
from squall.state.checkpoint import (
    CHECKPOINT_COMPONENT,
    CHECKPOINT_FIELDS,
    CHECKPOINT_STREAM,
    COMMIT,
    INITSTATE,
    PREPARE,
    ROLLBACK,
    CheckpointCoordinator,
)
from squall.state.providers import DURABLE, MEMORY, new_state
from squall.topology.config import checkpoint_interval_ms, message_timeout_ms
from squall.topology.description import Topology
from squall.topology.graph import downstream, is_acyclic, upstream
from squall.topology.roles import is_stateful_role
from squall.topology.tuple import Origin, Tuple, _RuntimeTuple

# Once every spout is exhausted nothing new can arrive: checkpoint at this pace instead of the
# configured interval, so bounded runs finish without waiting (a squall decision).
EXHAUSTED_INTERVAL_MS = 10


def is_stateful_topology(topology: Topology) -> bool:
    """Whether any bolt is stateful: then every bolt takes part in checkpoints."""
    return any(is_stateful_role(spec.role) for spec in topology.bolts.values())


def stateful_components(topology: Topology) -> set[str]:
    return {cid for cid, spec in topology.bolts.items() if is_stateful_role(spec.role)}


def namespace(component: str, task: int) -> str:
    return f"{component}-{task}"


def window_namespace(component: str, task: int) -> str:
    """The window state of a stateful windowed bolt task (as Storm's `<ns>-window`)."""
    return f"{component}-{task}-window"


class TaskCheckpointing:
    """A bolt task's side of the protocol; also its collector wrapping (anchoring, held acks)."""

    def __init__(self, task: Any) -> None:
        self.task = task
        topology = task.topology
        cid = task.component_id
        self.stateful = is_stateful_role(topology.components[cid].role)
        self.spark = False
        self.state_dir: str | None = None
        sources = upstream(topology, cid)
        from_spouts = any(topology.components[c].kind == "spout" for c in sources)
        self.expected = int(from_spouts) + sum(
            topology.components[c].num_tasks for c in sources
            if topology.components[c].kind != "spout")
        self.targets = sorted({
            t for other in downstream(topology, cid) for t in topology.component_tasks(other)})
        self.origin = Origin(CHECKPOINT_FIELDS, cid, CHECKPOINT_STREAM, task.task_id)
        self.counts: dict[tuple[str, int], int] = {}
        self.last_txid: int | None = None
        self.initialized = not self.stateful
        self.buffered: list[Tuple] = []
        self.queued: list[Tuple] = []  # acked by the bolt since the last PREPARE
        self.prepared: list[Tuple] = []  # acked before the last PREPARE, waiting for COMMIT
        self.state: Any = None
        self.inner = task.execute
        self.handled: list[tuple[str, int]] = []  # (action, txid) handled, for tests and stats

    # ---- wiring -------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Instead of `BoltTask.prepare`: the user's collector anchors and (locally) holds acks."""
        task, inst = self.task, self.task.instance
        held = self.queued if self.stateful and not self.spark else None
        persistent = bool(getattr(inst, "_window_persistent", False))
        out = StatefulOutputCollector(task.collector, held, anchored=not persistent)
        if isinstance(inst, BasicBolt):
            inst.prepare(task.conf, task.context)
        elif task.windowed:
            collector = task.window.setup(task.conf, task.context, out)
            inst.prepare(task.conf, task.context, collector)
        else:
            inst.prepare(task.conf, task.context, out)
        if self.stateful and not self.spark:
            self.state = new_state(task.conf, namespace(task.component_id, task.task_id),
                                   default=MEMORY, context=task.context)
            if hasattr(inst, "_sw_init"):  # a stateful windowed bolt: its window state too
                inst._squall_window_state = new_state(
                    task.conf, window_namespace(task.component_id, task.task_id),
                    default=MEMORY, context=task.context)

    # ---- local runner: checkpoint tuples -----------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if tup._origin.stream == CHECKPOINT_STREAM:
            self.on_checkpoint(tup)
        elif not self.initialized:
            self.buffered.append(tup)  # executed right after init_state, in order
        else:
            self.inner(tup)

    def on_checkpoint(self, tup: Tuple) -> None:
        txid, action = tup.values
        out = self.task.collector
        key = (action, txid)
        count = self.counts.get(key, 0) + 1
        if count < self.expected:
            self.counts[key] = count
            out.ack(tup)
            return
        self.counts.pop(key, None)
        if self.last_txid is not None and txid < self.last_txid:
            out.ack(tup)  # an old transaction: recovery has moved on
            return
        try:
            forward = self.handle(action, txid) if self.stateful else True
        except Exception as exc:
            self.task._report(exc, CHECKPOINT_STREAM)
            out.fail(tup)
            return
        self.last_txid = txid - 1 if action == ROLLBACK else txid
        if not forward:
            out.fail(tup)  # PREPARE before INITSTATE: the coordinator goes into recovery
            return
        if self.targets:
            out._send_anchored([txid, action], self.origin, self.targets, tup)
        out.ack(tup)

    def handle(self, action: str, txid: int) -> bool:
        inst, state, out = self.task.instance, self.state, self.task.collector
        self.handled.append((action, txid))
        if action == PREPARE:
            if not self.initialized:
                return False
            inst.pre_prepare(txid)
            if hasattr(inst, "_sw_prepare"):
                inst._sw_prepare(txid)
            state.prepare_commit(txid)
            self.prepared.extend(self.queued)
            self.queued.clear()
        elif action == COMMIT:
            inst.pre_commit(txid)
            state.commit(txid)
            if hasattr(inst, "_sw_commit"):
                # After a crash between the two commits, the roll-forward (COMMIT again)
                # promotes the window state's prepared version: both end up committed.
                inst._sw_commit(txid)
            acks, self.prepared = self.prepared, []
            for t in acks:
                out.ack(t)
        elif action == ROLLBACK:
            inst.pre_rollback()
            state.rollback()
            if hasattr(inst, "_sw_rollback"):
                inst._sw_rollback()
            failed = self.prepared + self.queued
            self.prepared = []
            self.queued.clear()
            for t in failed:
                out.fail(t)
        elif action == INITSTATE and not self.initialized:
            inst.init_state(state)
            self.initialized = True
            if hasattr(inst, "_sw_init"):
                inst._sw_init(inst._squall_window_state, self.task.host.now_ms())
            buffered, self.buffered = self.buffered, []
            for t in buffered:
                self.inner(t)
        return True

    # ---- Spark runner: micro-batches are the transactions ------------------------------------
    def on_spark(self, state_dir: str) -> None:
        """Called by the Spark stage before the task is prepared or restored."""
        self.on_batch_transactions(state_dir)

    def on_batch_transactions(self, state_dir: str) -> None:
        """Batches are the transactions, as on Spark, with `state_dir` the checkpoint location:
        called before the task is prepared or restored by the Spark stage and by the local
        runner with a checkpoint location (`begin_batch`/`end_batch` then drive the state;
        `spark` names this mode)."""
        self.spark = True
        self.state_dir = state_dir
        self.initialized = True
        self.task.execute = self.inner  # no checkpoint tuples on Spark

    def begin_batch(self, batch_id: int, committed: int) -> None:
        """Before the task's first tuple of batch `batch_id`; `committed` is the driver's."""
        if not self.stateful:
            return
        task, inst = self.task, self.task.instance
        state = inst.__dict__.get("_squall_state")
        if state is None:
            base = os.path.join(self.state_dir or ".", "state")
            state = new_state(task.conf, namespace(task.component_id, task.task_id),
                              default=DURABLE, base_dir=base, context=task.context)
            if isinstance(state, StoreKeyValueState):
                state.sync(committed)  # drop what a crashed first attempt left
            inst._squall_state = state
            inst._squall_prepared = None
            window_state = None
            if hasattr(inst, "_sw_init"):  # a stateful windowed bolt: its window state too
                window_state = new_state(
                    task.conf, window_namespace(task.component_id, task.task_id),
                    default=DURABLE, base_dir=base, context=task.context)
                if isinstance(window_state, StoreKeyValueState):
                    window_state.sync(committed)
                inst._squall_window_state = window_state
            inst.init_state(state)
            if window_state is not None:
                inst._sw_init(window_state, task.host.now_ms())
            return
        finish_prepared(inst, committed)
        if hasattr(inst, "_sw_attach"):
            inst._sw_attach()

    def end_batch(self, batch_id: int) -> None:
        if not (self.spark and self.stateful):
            return
        inst = self.task.instance
        inst.pre_prepare(batch_id)
        if hasattr(inst, "_sw_prepare"):
            inst._sw_prepare(batch_id)
        inst._squall_state.prepare_commit(batch_id)
        inst._squall_prepared = batch_id

    def cleanup(self) -> None:
        """The driver's cleanup restores each task from its last committed snapshot: the batch
        it prepared last is committed."""
        inst = self.task.instance
        prepared = inst.__dict__.get("_squall_prepared")
        if prepared is not None:
            finish_prepared(inst, prepared)


def finish_prepared(inst: Any, committed: int) -> None:
    """Spark: commit what the instance prepared if its batch is committed, drop later versions."""
    states: list[State] = [inst._squall_state]
    window_state = inst.__dict__.get("_squall_window_state")
    if window_state is not None:
        states.append(window_state)  # a stateful windowed bolt's window, same transactions
    prepared = inst.__dict__.get("_squall_prepared")
    if prepared is not None and prepared <= committed:
        inst.pre_commit(prepared)
        for state in states:
            if isinstance(state, StoreKeyValueState):
                state.sync(committed)
            else:
                state.commit(prepared)
        inst._squall_prepared = None
    else:
        for state in states:
            if isinstance(state, StoreKeyValueState):
                state.sync(committed)


class CheckpointSpoutTask:
    """The coordinator's task on the local runner: emits tracked `$checkpoint` tuples."""

    kind = "checkpoint"

    def __init__(self, engine: Any, task_id: int) -> None:
        topology, conf = engine.topology, engine.conf
        if not engine.tracking:
            raise InvalidTopologyError(
                "a stateful topology needs ackers on the local runner (its checkpoints are "
                "tracked tuples): do not set topology.acker.executors to 0")
        if not is_acyclic(topology):
            raise InvalidTopologyError("a stateful topology cannot have cycles: checkpoint "
                                       "tuples would circle for ever")
        self.engine = engine
        self.task_id = task_id
        self.completions: deque[Any] = deque()
        self.pending = PendingMap(message_timeout_ms(conf))
        self.rand = random.Random((engine.seed << 20) ^ task_id ^ 0x5EED).getrandbits
        state = new_state(conf, namespace(CHECKPOINT_COMPONENT, task_id), default=MEMORY)
        if not isinstance(state, KeyValueState):
            # A custom provider's states need not be maps; the coordinator's is kept in memory.
            state = MemoryKeyValueState()
        self.coordinator = CheckpointCoordinator(
            state, checkpoint_interval_ms(conf))
        self.targets = sorted({
            t for cid, spec in topology.bolts.items()
            if any(topology.components[s.component].kind == "spout" for s in spec.inputs)
            for t in topology.component_tasks(cid)})
        self.origin = Origin(CHECKPOINT_FIELDS, CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, task_id)
        self.sent: list[tuple[int, str]] = []
        self.end_txid: int | None = None  # the coordinator's txid at the last end of input
        self.settled_ms = 0  # when the last checkpoint action was acked or failed

    def reset(self, root: int) -> None:
        self.pending.reset(root, self.engine.now_ms())

    def end_of_input(self) -> None:
        """The bolts were told input ended: what they changed then (a persistent window's
        last windows, whose tuples were acked long before) must still be checkpointed."""
        self.end_txid = self.coordinator.txid

    def settled(self) -> bool:
        """Whether a bounded run may stop: no action in flight, and a checkpoint started
        after the last end of input has committed."""
        c = self.coordinator
        return (not c.in_flight and c.status == "COMMITTED" and not c.recovering
                and (self.end_txid is None or c.txid > self.end_txid))

    def next_deadline(self, exhausted: bool) -> int | None:
        due = self.coordinator.due_at()
        if due is not None and exhausted and self.coordinator.status == "COMMITTED":
            due = max(self.coordinator.last_checkpoint_ms, self.settled_ms) + EXHAUSTED_INTERVAL_MS
        deadlines = [d for d in (due, self.pending.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def step(self, now: int, exhausted: bool) -> int:
        """Settle acks and timeouts of checkpoint tuples, then send the next action if due."""
        work = 0
        coordinator = self.coordinator
        while self.completions:
            outcome = self.completions.popleft()
            entry = self.pending.pop(outcome.root)
            if entry is None:
                continue
            self.settled_ms = now
            work += 1
            (coordinator.ack if outcome.kind == "ack" else coordinator.fail)(entry.msg_id)
        if self.pending.timeout_ms is not None and self.pending:
            for root, entry in self.pending.expire(now):
                self.engine.forget(root)
                coordinator.fail(entry.msg_id)
                self.settled_ms = now
                work += 1
        # Once exhausted, the pause is counted from when the last action settled, not from
        # when it started: a checkpoint slower than the pause (several fsyncing stores) would
        # otherwise follow the last at once, every round would have work, and the engine would
        # never go idle, so end of input would never fire.
        interval = None
        if exhausted:
            interval = max(EXHAUSTED_INTERVAL_MS,
                           self.settled_ms - coordinator.last_checkpoint_ms + EXHAUSTED_INTERVAL_MS)
        action = coordinator.next_action(now, interval_ms=interval)
        if action is None:
            return work
        self.sent.append(action)
        txid = action[0]
        root = self.rand(64)
        edges = [self.rand(64) for _ in self.targets]
        xor = 0
        for edge in edges:
            xor ^= edge
        self.pending.add(root, txid, CHECKPOINT_STREAM, now)
        self.engine.ack_init(root, xor, self.task_id)
        send = self.engine.send
        for t, edge in zip(self.targets, edges, strict=True):
            send(t, _RuntimeTuple(list(action), self.origin, {root: edge}, t))
        return work + 1
