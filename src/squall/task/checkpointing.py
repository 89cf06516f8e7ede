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
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

from squall.errors import InvalidTopologyError
from squall.protocols import StatefulHooks
from squall.reliability.acker import Outcome
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
from squall.task.collectors import StatefulOutputCollector
from squall.task.roles.stateful_windowed import StatefulWindowedRole
from squall.task.surfaces import CheckpointedTask
from squall.topology.config import checkpoint_interval_ms, message_timeout_ms
from squall.topology.description import Topology
from squall.topology.graph import downstream, is_acyclic, upstream
from squall.topology.roles import is_stateful_role
from squall.topology.tuple import Origin, Tuple, _RuntimeTuple

# Once every spout is exhausted nothing new can arrive: checkpoint at this pace instead of the
# configured interval, so bounded runs finish without waiting (a squall decision).
EXHAUSTED_INTERVAL_MS = 10


# What a task snapshot carries of the checkpointing: the bolt's state, a stateful windowed bolt's
# window state, and the batch prepared last (see `TaskCheckpointing.saved`).
CheckpointingSaved = tuple[Any, State | None, int | None]


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
    """A bolt task's side of the protocol; also its collector wrapping (anchoring, held acks).

    It holds the framework's state of a stateful bolt: the state (`state`, the same object the
    bolt gets in `init_state`), a stateful windowed bolt's window state, and on Spark the batch
    whose state is prepared and not yet known committed. A task snapshot carries them
    (`saved`/`restore`), so a task restored in another process continues with them.
    """

    def __init__(self, task: CheckpointedTask) -> None:
        self.task = task
        topology = task.topology
        cid = task.component_id
        self.stateful = is_stateful_role(topology.components[cid].role)
        # A stateful windowed bolt's role also keeps a window state in the same transactions.
        self.windows = task.window if isinstance(task.window, StatefulWindowedRole) else None
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
        self.window_state: State | None = None
        # Spark: the batch whose state was prepared last, until known committed or not.
        self.prepared_batch: int | None = None
        self.inner = task.execute
        self.handled: list[tuple[str, int]] = []  # (action, txid) handled, for tests and stats

    # ---- snapshots ----------------------------------------------------------------------------
    def saved(self) -> CheckpointingSaved:
        """What a task snapshot must carry of the checkpointing (batch transactions: Spark, or
        the local runner with a checkpoint location)."""
        return (self.state, self.window_state, self.prepared_batch)

    def restore(self, saved: CheckpointingSaved) -> None:
        self.state, self.window_state, self.prepared_batch = saved

    @property
    def hooks(self) -> StatefulHooks:
        """The checkpoint hooks: a plain stateful bolt's own methods (Storm's user API), or a
        windowed component's role adapter, which wraps them."""
        task = self.task
        return task.window if task.window is not None else task.instance

    # ---- wiring -------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Instead of `BoltTask.prepare`: the user's collector anchors and (locally) holds acks."""
        task = self.task
        held = self.queued if self.stateful and not self.spark else None
        unanchored = task.window is not None and task.window.emits_unanchored
        task.prepare_instance(
            StatefulOutputCollector(task.collector, held, anchored=not unanchored))
        self.open_local_states()

    def open_local_states(self) -> None:
        """The local runner's states (a stateful bolt's), unless open: a store that cannot be
        reached raises, and the runner calls this again once it waits for the store (Spark
        opens its states per batch instead)."""
        if self.stateful and not self.spark and self.state is None:
            self._open_states(MEMORY)

    def _open_states(self, default: str, base_dir: str | None = None,
                     committed: int | None = None) -> None:
        """The task's state and, for a stateful windowed bolt, its window state (provider
        `default` unless configured); with `committed`, stores drop what later batches left."""
        task = self.task
        names = [namespace(task.component_id, task.task_id)]
        if self.windows is not None:
            names.append(window_namespace(task.component_id, task.task_id))
        states = [new_state(task.conf, name, default=default, base_dir=base_dir,
                            context=task.context) for name in names]
        if committed is not None:
            for state in states:
                if isinstance(state, StoreKeyValueState):
                    state.sync(committed)  # drop what a crashed first attempt left
        self.state = states[0]
        if self.windows is not None:
            self.window_state = states[1]
            self.windows.attach_window_state(states[1])

    # ---- local runner: checkpoint tuples -----------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if tup._origin.stream == CHECKPOINT_STREAM:
            self.on_checkpoint(tup)
        elif not self.initialized:
            self.buffered.append(tup)  # executed right after init_state, in order
        else:
            self.inner(tup)

    def on_checkpoint(self, tup: Tuple) -> None:
        # A system tuple: acked, failed and forwarded like any other, but counted in none of
        # the bolt's executed, acked or failed (docs/metrics.md), as Storm's UI leaves out
        # system streams.
        txid, action = tup.values
        out = self.task.collector
        key = (action, txid)
        count = self.counts.get(key, 0) + 1
        if count < self.expected:
            self.counts[key] = count
            out.ack_system(tup)
            return
        self.counts.pop(key, None)
        if self.last_txid is not None and txid < self.last_txid:
            out.ack_system(tup)  # an old transaction: recovery has moved on
            return
        try:
            forward = self.handle(action, txid) if self.stateful else True
        except Exception as exc:
            self.task.report(exc, CHECKPOINT_STREAM)
            out.fail_system(tup)
            return
        self.last_txid = txid - 1 if action == ROLLBACK else txid
        if not forward:
            out.fail_system(tup)  # PREPARE before INITSTATE: the coordinator goes into recovery
            return
        if self.targets:
            out._send_anchored([txid, action], self.origin, self.targets, tup,
                               send=cast(CheckpointHost, self.task.host).send_system)
        out.ack_system(tup)

    def handle(self, action: str, txid: int) -> bool:
        hooks, state, out, windows = self.hooks, self.state, self.task.collector, self.windows
        self.handled.append((action, txid))
        if action == PREPARE:
            if not self.initialized:
                return False
            hooks.pre_prepare(txid)
            if windows is not None:
                windows.prepare_window_state(txid)
            state.prepare_commit(txid)
            self.prepared.extend(self.queued)
            self.queued.clear()
        elif action == COMMIT:
            hooks.pre_commit(txid)
            state.commit(txid)
            if windows is not None:
                # After a crash between the two commits, the roll-forward (COMMIT again)
                # promotes the window state's prepared version: both end up committed.
                windows.commit_window_state(txid)
            acks, self.prepared = self.prepared, []
            for t in acks:
                out.ack(t)
        elif action == ROLLBACK:
            hooks.pre_rollback()
            state.rollback()
            if windows is not None:
                windows.rollback_window_state()
            failed = self.prepared + self.queued
            self.prepared = []
            self.queued.clear()
            for t in failed:
                out.fail(t)
        elif action == INITSTATE and not self.initialized:
            hooks.init_state(state)
            self.initialized = True
            if windows is not None:
                windows.init_window(self.task.host.now_ms())
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
        if self.state is None:
            self._open_states(DURABLE, os.path.join(self.state_dir or ".", "state"), committed)
            self.prepared_batch = None
            self.hooks.init_state(self.state)
            if self.windows is not None:
                self.windows.init_window(self.task.host.now_ms())
            return
        self.finish_prepared(committed)
        if self.windows is not None:
            self.windows.reattach()

    def end_batch(self, batch_id: int) -> None:
        if not (self.spark and self.stateful):
            return
        self.hooks.pre_prepare(batch_id)
        if self.windows is not None:
            self.windows.prepare_window_state(batch_id)
        self.state.prepare_commit(batch_id)
        self.prepared_batch = batch_id

    def cleanup(self) -> None:
        """The driver's cleanup restores each task from its last committed snapshot: the batch
        it prepared last is committed."""
        if self.prepared_batch is not None:
            self.finish_prepared(self.prepared_batch)

    def finish_prepared(self, committed: int) -> None:
        """Spark: commit what the task prepared if its batch is committed, drop later
        versions."""
        states: list[State] = [self.state]
        if self.window_state is not None:
            states.append(self.window_state)  # a stateful windowed bolt's window, same batches
        prepared = self.prepared_batch
        if prepared is not None and prepared <= committed:
            self.hooks.pre_commit(prepared)
            for state in states:
                if isinstance(state, StoreKeyValueState):
                    state.sync(committed)
                else:
                    state.commit(prepared)
            self.prepared_batch = None
        else:
            for state in states:
                if isinstance(state, StoreKeyValueState):
                    state.sync(committed)


class CheckpointHost(Protocol):
    """What the coordinator's task needs of the local engine that hosts it."""

    @property
    def topology(self) -> Topology: ...

    @property
    def conf(self) -> Mapping[str, Any]: ...

    @property
    def tracking(self) -> bool: ...

    @property
    def seed(self) -> int: ...

    @property
    def send_system(self) -> Callable[[int, Tuple], None]: ...

    def now_ms(self) -> int: ...

    def ack_init(self, root: int, xor: int, spout_task: int) -> None: ...

    def forget(self, root: int) -> None: ...


class CheckpointSpoutTask:
    """The coordinator's task on the local runner: emits tracked `$checkpoint` tuples."""

    kind = "checkpoint"

    def __init__(self, engine: CheckpointHost, task_id: int) -> None:
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
        self.completions: deque[Outcome] = deque()
        self.pending = PendingMap(message_timeout_ms(conf))
        self.rand = random.Random((engine.seed << 20) ^ task_id ^ 0x5EED).getrandbits
        self.coordinator: CheckpointCoordinator  # `open` makes it, from its state
        self.targets = sorted({
            t for cid, spec in topology.bolts.items()
            if any(topology.components[s.component].kind == "spout" for s in spec.inputs)
            for t in topology.component_tasks(cid)})
        self.origin = Origin(CHECKPOINT_FIELDS, CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, task_id)
        self.sent: list[tuple[int, str]] = []
        self.end_txid: int | None = None  # the coordinator's txid at the last end of input
        self.settled_ms = 0  # when the last checkpoint action was acked or failed

    def open(self) -> None:
        """Open the coordinator's state (the configured provider's) and the coordinator, when
        the run starts; a store that cannot be reached raises, and the runner calls this again
        once it waits for the store."""
        if hasattr(self, "coordinator"):
            return
        conf = self.engine.conf
        state = new_state(conf, namespace(CHECKPOINT_COMPONENT, self.task_id), default=MEMORY)
        if not isinstance(state, KeyValueState):
            # A custom provider's states need not be maps; the coordinator's is kept in memory.
            state = MemoryKeyValueState()
        self.coordinator = CheckpointCoordinator(state, checkpoint_interval_ms(conf))

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
        send = self.engine.send_system  # checkpoint tuples are not counted as executed
        for t, edge in zip(self.targets, edges, strict=True):
            send(t, _RuntimeTuple(list(action), self.origin, {root: edge}, t))
        return work + 1
