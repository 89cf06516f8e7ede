"""Task runtimes: one user component instance, its context, collector, routes and counters.

Runners host tasks through the `Host` protocol (deliver a tuple, carry ack messages, read the
clock, record errors). The tasks hold all of Storm's per-task semantics, so every runner gets
the same behaviour by hosting them.
"""

from __future__ import annotations

import functools
import logging
import random
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from squall.components.base import BasicBolt, Spout
from squall.components.context import TopologyContext
from squall.components.partitioned_source import (
    PartitionAssignment,
    PartitionedSource,
    Range,
    RecordRange,
)
from squall.errors import BatchRetryError, DeadLetterError, FailedException
from squall.metrics.histogram import LatencyHistogram
from squall.metrics.user import merge_partial
from squall.protocols import Host, OutputCollectorLike, SpoutHost
from squall.reliability.acker import Outcome
from squall.reliability.pending import PendingEntry, PendingMap
from squall.reliability.retries import DEAD_LETTER, Retries, RetryPolicy
from squall.task.checkpointing import (
    CheckpointingSaved,
    TaskCheckpointing,
    is_stateful_topology,
)
from squall.task.collectors import (
    BasicOutputCollector,
    OutputCollector,
    SpoutOutputCollector,
)
from squall.task.roles import WindowRole, window_role
from squall.task.routing import build_routes
from squall.task.stats import ExecuteTimes, TaskStats
from squall.topology.config import (
    SQUALL_RETRY_INITIAL_DELAY_MS,
    SQUALL_RETRY_MAX,
    SQUALL_RETRY_MAX_DELAY_MS,
    Config,
    max_spout_pending,
    message_timeout_ms,
    retry_settings,
    tick_period_ms,
)
from squall.topology.description import Topology
from squall.topology.roles import BASIC, is_windowed_role
from squall.topology.tuple import Tuple

log = logging.getLogger("squall")

# Per host (one runner's tasks), per source component: the partition assignment its tasks share.
_ASSIGNMENTS: weakref.WeakKeyDictionary[Any, dict[str, PartitionAssignment]] = (
    weakref.WeakKeyDictionary())


# The host a task runs on: a spout task needs a `SpoutHost`, a bolt task a `Host`.
H = TypeVar("H", bound=SpoutHost)


class TaskRuntime(Generic[H]):
    kind = "task"
    collector: SpoutOutputCollector | OutputCollector

    def __init__(
        self,
        topology: Topology,
        task_id: int,
        topology_conf: Mapping[str, Any],
        host: H,
        *,
        seed: int,
        tracking: bool,
        capture: list | None = None,
    ) -> None:
        self.topology = topology
        self.task_id = task_id
        self.component_id = topology.task_component(task_id)
        spec = topology.components[self.component_id]
        self.conf = Config.effective_of(topology_conf, spec.conf)
        self.host = host
        self.tracking = tracking
        self.capture = capture
        self.stats = TaskStats()
        # Tuple and root ids: 64 random bits, seeded per task so runs repeat. As in Storm an id
        # may be 0 (probability 2^-64), which is harmless; not guarding saves a call per edge.
        ids = random.Random((seed << 20) ^ task_id)
        self.rand64: Callable[[], int] = functools.partial(ids.getrandbits, 64)
        self._metric_totals: dict[str, dict[str, Any]] = {}  # metric_totals
        self.context = TopologyContext(topology, self.conf, task_id)
        self.routes = build_routes(topology, task_id, seed, self.context)
        self.instance = spec.new_instance()

    def rebind(self) -> None:
        """After a snapshot replaced instance, routes and ids (squall.task.snapshot)."""
        self._bind_collectors()
        # The restored component's registered metrics are its attributes that carry a name
        # (`TopologyContext.register_metric`); the context is this task's, new.
        for value in vars(self.instance).values() if hasattr(self.instance, "__dict__") else ():
            name = getattr(value, "_squall_name", None)
            if isinstance(name, str):
                self.context.registered_metrics[name] = value

    def metric_partials(self) -> dict[str, dict[str, Any]]:
        """The registered metrics' values since the last call (squall.metrics.user)."""
        return {name: m.partial_and_reset()
                for name, m in self.context.registered_metrics.items()}

    def metric_totals(self) -> dict[str, dict[str, Any]]:
        """The registered metrics' values since the task started (for a runner whose tasks
        report what they counted so far rather than per batch)."""
        totals = self._metric_totals
        for name, partial in self.metric_partials().items():
            totals[name] = merge_partial(totals.get(name), partial)
        return dict(totals)

    def _bind_collectors(self) -> None:
        """Bind the task's collectors to its host, routes and id generator (one call; each
        kind of task binds its own collectors)."""
        raise NotImplementedError

    def framework_saved(self) -> tuple[Any, CheckpointingSaved | None]:
        """What a snapshot carries of the framework's state for the instance: the role
        adapter's (opaque: each role's own) and the checkpointing's (squall.task.snapshot).
        None for a spout."""
        return None, None

    def restore_framework(self, window: Any,
                          checkpointing: CheckpointingSaved | None) -> None:
        """Continue from what `framework_saved` returned, after the instance was restored."""

    def collector_reference(self, kind: str) -> Any:
        """The collector a pickled collector reference resolves to (squall.task.snapshot)."""
        return self.collector

    def report(self, error: BaseException, stream: str | None = None) -> None:
        self.stats.errors += 1
        self.host.report_error(self.component_id, self.task_id, error, stream)


class SpoutTask(TaskRuntime[SpoutHost]):
    kind = "spout"

    def __init__(self, topology: Topology, task_id: int, topology_conf: Mapping[str, Any],
                 host: SpoutHost, *, seed: int, tracking: bool,
                 capture: list | None = None) -> None:
        super().__init__(topology, task_id, topology_conf, host, seed=seed, tracking=tracking,
                         capture=capture)
        self.pending = PendingMap(message_timeout_ms(self.conf))
        self.max_pending: int | None = max_spout_pending(self.conf)
        self.completions: deque[Outcome] = deque()
        self.collector: SpoutOutputCollector = SpoutOutputCollector(self)
        self.spout: Spout = self.instance
        self.active = True  # pulled by the runner (set_active); framework state, not the spout's
        self._untracked_acks: list[Any] = []
        self._watch: Callable[[int], None] | None = None
        # When the run captures (complete_topology), the message ids handed to the spout's ack
        # and fail, in order: the framework's record, whatever the spout keeps itself.
        self.settled_ids: dict[str, list[Any]] | None = (
            {"ack": [], "fail": []} if self.capture is not None else None)
        # Failed trees: how often each message id failed, and the replays waiting for their
        # backoff; past the limit a message goes to the dead-letter stream and is acked.
        self.retries = Retries(RetryPolicy(*retry_settings(self.conf)))
        self.keep_values = self.retries.policy.limited
        # `next_tuple` calls in a row that raised, and when the next may come (see next_tuple).
        self._raised = 0
        self._pull_at = 0
        # Complete latencies (squall.metrics): the host's ledger measures them in its own unit
        # (ms on Spark, us on the local runner).
        self.complete_latency = LatencyHistogram()
        self._latency_unit_ms = float(getattr(self.host, "ledger_unit_ms", 1.0))
        # Storm samples latencies (topology.stats.sample.rate); the histogram takes one tree in
        # `latency_every` (the host's: every tree on Spark, where a tree is a range or a batch's
        # worth), the exact count and mean come from every tree.
        self._latency_every = int(getattr(self.host, "latency_sample_every", 1))
        self._latency_turn = 1

    def rebind(self) -> None:
        super().rebind()
        self.spout = self.instance
        self._watch_partitions()

    def _bind_collectors(self) -> None:
        self.collector.bind(self.host, self.routes, self.rand64)

    def open(self) -> None:
        self.spout.open(self.conf, self.context, self.collector)
        self._watch_partitions()
        if self.active:  # opened while the topology is deactivated: activate() comes later
            self.spout.activate()

    def _watch_partitions(self) -> None:
        # A source whose partition events someone reads says what changed after each poll, at
        # the runner's time (squall.partition_watermarks).
        spout = self.spout
        self._watch = (
            spout.watch_partitions
            if isinstance(spout, PartitionedSource) and spout._watching else None)
        if isinstance(spout, PartitionedSource) and spout.assign_by_hash:
            # The component's tasks share one assignment of partitions (they are hosted
            # together); what this task has offsets for (a restart) stays its own.
            shared = _ASSIGNMENTS.setdefault(self.host, {})
            assignment = shared.get(self.component_id)
            if assignment is None:
                tasks = len(self.topology.component_tasks(self.component_id))
                assignment = shared[self.component_id] = PartitionAssignment(tasks)
            spout.assignment = assignment
            assignment.claim(self.context.this_task_index, spout._offsets)

    def close(self) -> None:
        try:
            if self.active:
                self.spout.deactivate()
            self.spout.close()
        except Exception as exc:  # a failing close must not hide the other tasks' results
            self.report(exc)

    def set_active(self, active: bool) -> bool:
        """Storm's activate/deactivate: while inactive, `next_tuple` is not called (trees in
        flight still complete). Calls the spout's `activate`/`deactivate` on a change; returns
        whether it changed."""
        if active == self.active:
            return False
        self.active = active
        try:
            self.spout.activate() if active else self.spout.deactivate()
        except Exception as exc:
            self.report(exc)
        return True

    def can_emit(self) -> bool:
        return self.active and (self.max_pending is None or len(self.pending) < self.max_pending)

    def next_tuple(self) -> int:
        """Call the spout's `next_tuple` once; returns how many tuples it emitted.

        A spout whose `next_tuple` raises without emitting anything (a replay of a file that
        was deleted, a store that is down) is not called again before the replays' backoff
        (`squall.retry.*`) has passed, growing while it keeps raising, so it does not spin; a
        call that emits starts the count again."""
        if self._pull_at and self.host.now_ms() < self._pull_at:
            return 0
        before = self.stats.emitted
        try:
            self.spout.next_tuple()
            if self._watch is not None:
                self._watch(self.host.now_ms())
        except Exception as exc:
            self._raised_in_call(exc, before)
        if self._raised and self.stats.emitted != before:
            self._raised = self._pull_at = 0
        if self._untracked_acks:
            self._ack_untracked_now()
        return self.stats.emitted - before

    def pull(self, budget: int) -> tuple[int, int]:
        """`next_tuple` while fewer than `budget` tuples were emitted, the task can emit and each
        call emits something: a runner's loop over its one spout task, with `next_tuple`'s
        bookkeeping inline. Returns the tuples emitted and the calls made, a last call counted
        also when the task could not emit (as a loop calling `can_emit` then `next_tuple`
        would count its turns)."""
        stats, spout_next = self.stats, self.spout.next_tuple
        pending, max_pending = self.pending, self.max_pending
        start = stats.emitted
        calls = 0
        while stats.emitted - start < budget:
            calls += 1
            if not self.active or (max_pending is not None and len(pending) >= max_pending):
                break
            if self._pull_at or self._watch is not None:  # backing off, or a watched source
                if not self.next_tuple():
                    break
                continue
            before = stats.emitted
            try:
                spout_next()
            except Exception as exc:
                self._raised_in_call(exc, before)
            if self._untracked_acks:
                self._ack_untracked_now()
            if stats.emitted == before:
                break
            if self._raised:
                self._raised = self._pull_at = 0
        return stats.emitted - start, calls

    def _raised_in_call(self, exc: Exception, before: int) -> None:
        """`next_tuple` raised: reported; a call that emitted nothing backs the next one off."""
        self.report(exc)
        if self.stats.emitted == before:
            self._raised += 1
            self._pull_at = self.host.now_ms() + self.retries.policy.delay_ms(self._raised)

    def _ack_untracked_now(self) -> None:
        acks, self._untracked_acks = self._untracked_acks, []
        for msg_id in acks:
            self.stats.acked += 1
            self._call("ack", msg_id)

    def exhausted(self) -> bool:
        if self.retries.waiting:
            return False  # replays wait for their backoff: the spout is not done
        try:
            return bool(self.spout.is_exhausted())
        except Exception as exc:
            self.report(exc)
            return False

    def track(self, root: int, msg_id: Any, stream: str, xor: int, values: Any = None) -> None:
        self.pending.add(root, msg_id, stream, self.host.now_ms(),
                         values if self.keep_values else None)
        self.host.ack_init(root, xor, self.task_id)

    def ack_untracked(self, msg_id: Any) -> None:
        # Storm calls ack inside emit when there are no ackers; doing it right after next_tuple
        # returns gives the same order without re-entering the spout.
        self._untracked_acks.append(msg_id)

    def deliver_completions(self) -> int:
        """Call the spout's `ack`/`fail` for every tree the ackers settled."""
        n = 0
        completions = self.completions
        stats, unit, pop = self.stats, self._latency_unit_ms, self.pending.pop
        while completions:
            outcome = completions.popleft()
            entry = pop(outcome.root)
            if entry is None:
                continue  # already timed out and failed
            n += 1
            # A tree may hold several spout tuples (a built-in source's range on Spark): acks
            # and failures count tuples, as they do when each record is its own tree.
            tuples = outcome.tuples
            if outcome.kind == "ack":
                # `_completed`, inline: the path of every tree.
                stats.acked += tuples
                if not outcome.startup:  # start-up is no latency of tuples (Outcome)
                    ms = outcome.latency_ms * unit
                    stats.latency_total_ms += ms * tuples
                    stats.latency_count += tuples
                    self._latency_turn -= 1
                    if not self._latency_turn:
                        self._latency_turn = self._latency_every
                        self.complete_latency.record_us(int(ms * 1000), tuples)
                if self.retries.counted:  # a replay that succeeded: its count is done
                    self.retries.forget(entry.msg_id)
                self._call("ack", entry.msg_id)
            else:
                records = outcome.records
                if records is None:
                    self.stats.failed += tuples
                else:  # its other records completed
                    self.stats.failed += len(records)
                    if tuples > len(records):
                        self._completed(outcome.latency_ms, tuples - len(records),
                                        outcome.startup)
                self._failed(entry, outcome.error or ("failed", "the tuple was failed"),
                             records)
        return n

    def _completed(self, latency: float, tuples: int, startup: bool = False) -> None:
        stats = self.stats
        stats.acked += tuples
        if startup:
            return  # acked; its time is start-up, not a latency (Outcome)
        ms = latency * self._latency_unit_ms
        stats.latency_total_ms += ms * tuples
        stats.latency_count += tuples
        self._latency_turn -= 1
        if not self._latency_turn:
            self._latency_turn = self._latency_every
            self.complete_latency.record_us(int(ms * 1000), tuples)

    def expire(self, now_ms: int) -> int:
        """Fail the tracked tuples whose timeout has passed."""
        expired = self.pending.expire(now_ms)
        for root, entry in expired:
            self.stats.failed += 1
            self.stats.timed_out += 1
            self.host.forget(root)
            self._failed(entry, ("timeout", "the tuple tree did not complete within "
                                 f"{self.pending.timeout_ms} ms"))
        return len(expired)

    # ---- retries and the dead-letter stream (squall.reliability.retries) -------------------
    def replay_due(self, now_ms: int) -> int:
        """Hand the spout the failed messages whose backoff has passed (its `fail` replays)."""
        due = self.retries.due(now_ms)
        for msg_id in due:
            self._call("fail", msg_id)
        return len(due)

    def next_deadline(self) -> int | None:
        """The earliest timeout or replay due, for a runner on simulated time."""
        deadlines = [d for d in (self.pending.next_deadline(), self.retries.next_due(),
                                 self._pull_at or None) if d is not None]
        return min(deadlines) if deadlines else None

    def _failed(self, entry: PendingEntry, error: tuple[str, str],
                records: tuple[int, ...] | None = None) -> None:
        """`records`: for a range whose records were told apart, the ones that failed (the
        others completed and are not replayed)."""
        msg_id = entry.msg_id
        retries = self.retries
        if not (retries.policy.limited or retries.policy.delays):
            # Storm's way: the spout replays at once, for ever. Counted, so that a message
            # that keeps failing (a poison tuple, which keeps a bounded run from ending) is
            # said, with the key that bounds its replays.
            retries.failed(msg_id, 0)  # counted only: no limit, no backoff
            self._tell_repeated(msg_id, retries.attempts(msg_id), error)
            self._call("fail", msg_id)
            return
        now = self.host.now_ms()
        source = self.spout if isinstance(self.spout, PartitionedSource) else None
        if (source is not None and isinstance(msg_id, Range)
                and not isinstance(msg_id, RecordRange) and retries.policy.limited):
            # A Spark range is one tree for all its records. Its records that failed (all of
            # them when that is unknown: a timeout) are replayed as ranges of one record each,
            # continuing the range's count.
            parts = source.split(msg_id)
            failures = retries.attempts(msg_id)
            if parts is None:
                # It cannot be read now (its store is down, say): that is not the records'
                # fault, so the range is replayed whole, after a backoff, without counting.
                if retries.schedule(msg_id, failures, now) <= now:
                    self._call("fail", msg_id)
                return
            retries.forget(msg_id)
            if records is None:
                # Which records failed is unknown: each is replayed alone to find out, the
                # range's attempt counted but never its last.
                for part in parts:
                    if retries.schedule(part, failures + 1, now) <= now:
                        self._call("fail", part)
                return
            for part in (parts[i] for i in records if i < len(parts)):
                retries.carry(part, failures)  # the range's count so far, then this failure
                due = retries.failed(part, now)
                if due is None:
                    self._dead_letter(PendingEntry(part, entry.stream, now), error,
                                      retries.last_dead_attempts, now, source)
                elif due <= now:
                    self._call("fail", part)
            return
        due = retries.failed(msg_id, now)
        if due is None:
            self._dead_letter(entry, error, retries.last_dead_attempts, now, source)
            return
        if not retries.policy.limited:
            self._tell_repeated(msg_id, retries.attempts(msg_id), error)
        if due <= now:
            self._call("fail", msg_id)

    def _tell_repeated(self, msg_id: Any, failures: int, error: tuple[str, str]) -> None:
        """Warn when a message replayed for ever has failed 10, 100, 1,000... times: once per
        order of magnitude, so a poison tuple is named without a line per replay."""
        if failures < 10 or failures != 10 ** (len(str(failures)) - 1):
            return
        policy = self.retries.policy
        spacing = (f"each replay waits up to {policy.max_delay_ms} ms "
                   f"({SQUALL_RETRY_MAX_DELAY_MS})" if policy.delays else
                   f"replayed at once; set {SQUALL_RETRY_INITIAL_DELAY_MS} to space its replays")
        log.warning(
            "spout %r task %s: message %r has failed %d times (last: %s: %s) and is replayed "
            "for ever (Storm's default; %s); set %s to bound its replays (then it goes to the "
            "%r stream)", self.component_id, self.task_id, msg_id, failures, error[0], error[1],
            spacing, SQUALL_RETRY_MAX, DEAD_LETTER)

    def _dead_letter(self, entry: PendingEntry, error: tuple[str, str], attempts: int,
                     now: int, source: PartitionedSource | None) -> None:
        msg_id = entry.msg_id
        values, partition, offset, message_id = entry.values, None, None, msg_id
        if source is not None:
            partition, offset, message_id = msg_id[0], msg_id[1], None
            if values is None:  # a Spark range: read its one record again
                values = source.record(partition, offset)
        record = [list(values) if values is not None else None, self.component_id,
                  entry.stream, partition, offset, message_id, error[0], error[1], attempts, now]
        self.stats.dead_lettered += 1
        try:
            if DEAD_LETTER not in self.topology.components[self.component_id].streams:
                raise DeadLetterError(
                    f"message {msg_id!r} failed {attempts} times ({error[0]}: {error[1]}) and "
                    f"is not replayed again; declare the {DEAD_LETTER!r} stream to route it",
                    component=self.component_id, stream=entry.stream)
            self.collector.emit(record, stream=DEAD_LETTER)
        except Exception as exc:  # not declared, or declared with other fields: reported
            self.report(exc)
        # As Storm's KafkaSpout past maxRetries: acked, so the source moves on.
        self._call("ack", msg_id)

    def reset(self, root: int) -> None:
        self.pending.reset(root, self.host.now_ms())

    def _call(self, method: str, msg_id: Any) -> None:
        if self.settled_ids is not None:
            self.settled_ids[method].append(msg_id)
        try:
            getattr(self.spout, method)(msg_id)
        except Exception as exc:
            self.report(exc)


class BoltTask(TaskRuntime[Host]):
    kind = "bolt"

    def __init__(self, topology: Topology, task_id: int, topology_conf: Mapping[str, Any],
                 host: Host, *, seed: int, tracking: bool, capture: list | None = None) -> None:
        super().__init__(topology, task_id, topology_conf, host, seed=seed, tracking=tracking,
                         capture=capture)
        self.collector: OutputCollector = OutputCollector(self)
        role = self.topology.components[self.component_id].role
        self.basic = role == BASIC
        self.basic_collector = BasicOutputCollector(self.collector) if self.basic else None
        # A windowed bolt's execute takes windows: tuples go to its role adapter instead, which
        # holds the window (squall.task.roles).
        self.window: WindowRole | None = (
            window_role(role, self.instance) if is_windowed_role(role) else None)
        self.execute: Callable[[Tuple], None] = self._execute_basic if self.basic else (
            self._execute_rich if self.window is None else self._execute_windowed)
        self.on_execute_error = self._on_error
        self.times = ExecuteTimes()  # sampled by the runner (squall.metrics)
        # In a stateful topology every bolt takes part in checkpoints (squall.task.checkpointing).
        self.checkpointing: TaskCheckpointing | None = None
        if is_stateful_topology(self.topology):
            self.checkpointing = TaskCheckpointing(self)
            self.execute = self.checkpointing.execute

    def rebind(self) -> None:
        super().rebind()
        if self.basic != isinstance(self.instance, BasicBolt):
            raise TypeError(f"snapshot of {self.component_id} is not the same kind of bolt")

    def _bind_collectors(self) -> None:
        # A BasicBolt's collector binds the OutputCollector it emits through, then takes its
        # shortcuts.
        (self.basic_collector or self.collector).bind(self.host, self.routes, self.rand64)

    def collector_reference(self, kind: str) -> Any:
        if kind == "basic" and self.basic_collector is not None:
            return self.basic_collector
        return self.collector

    def framework_saved(self) -> tuple[Any, CheckpointingSaved | None]:
        return (None if self.window is None else self.window.saved(),
                None if self.checkpointing is None else self.checkpointing.saved())

    def restore_framework(self, window: Any,
                          checkpointing: CheckpointingSaved | None) -> None:
        if self.window is not None:
            self.window.restore(window, self.instance)
        if self.checkpointing is not None and checkpointing is not None:
            self.checkpointing.restore(checkpointing)

    @property
    def tick_ms(self) -> int | None:
        """Tick period of this task (`topology.tick.tuple.freq.secs`), or None."""
        return tick_period_ms(self.conf)

    def set_host(self, host: Host) -> None:
        """Move this task to another host (the Spark runner: a new micro-batch's stage)."""
        self.host = host
        self._bind_collectors()

    def prepare(self) -> None:
        if self.checkpointing is not None:
            self.checkpointing.prepare()  # it prepares the instance with its own collector
        else:
            self.prepare_instance(self.collector)

    def open_states(self) -> None:
        """Open the task's states if `prepare` could not (their store was unreachable)."""
        if self.checkpointing is not None:
            self.checkpointing.open_local_states()

    def prepare_instance(self, out: OutputCollectorLike) -> None:
        """Call the component's `prepare` with `out` (a windowed role's collector wraps it; a
        BasicBolt gets its collector per `execute` instead)."""
        if self.basic:
            self.instance.prepare(self.conf, self.context)
        elif self.window is not None:
            collector = self.window.setup(self.conf, self.context, out)
            self.instance.prepare(self.conf, self.context, collector)
        else:
            self.instance.prepare(self.conf, self.context, out)

    def end_batch(self, batch_id: int) -> None:
        try:
            self.instance.on_batch_end(batch_id)
            if self.window is not None:  # processing-time triggers, watermarks downstream
                self.window.end_batch(batch_id, self.host.now_ms())
        except BatchRetryError as exc:
            if self.host.transactional_batches:
                raise  # the batch must not commit: the runner runs it again
            self.report(exc)
        except Exception as exc:
            self.report(exc)
        if self.checkpointing is not None:
            # Not caught: on Spark a state that cannot be prepared must fail the batch.
            self.checkpointing.end_batch(batch_id)

    def cleanup(self) -> None:
        try:
            if self.checkpointing is not None:
                self.checkpointing.cleanup()
            self.instance.cleanup()
        except Exception as exc:
            self.report(exc)

    def end_of_input(self) -> None:
        """Every spout is exhausted (squall.task.end_of_input): windows flush and ack."""
        if self.window is not None:
            try:
                self.window.end_of_input(self.host.now_ms())
            except Exception as exc:
                self.report(exc)

    def direct_execute(self) -> Any:
        """The instance's own `execute` when `execute` would only call it and report errors
        (`_on_error`) — a plain `Bolt`, no checkpointing — so a host's hot loop can call it with
        one call less per tuple; else None."""
        if self.execute == self._execute_rich:
            return self.instance.execute
        return None

    def _execute_windowed(self, tup: Tuple) -> None:
        window = self.window
        assert window is not None, "only a windowed role's task executes through it"
        try:
            window.execute(tup, self.host.now_ms())
        except Exception as exc:
            self._on_error(tup, window.explained(tup, exc))  # the field and value at fault

    def _execute_rich(self, tup: Tuple) -> None:
        try:
            self.instance.execute(tup)
        except Exception as exc:
            self._on_error(tup, exc)

    def _execute_basic(self, tup: Tuple) -> None:
        bc = self.basic_collector
        bc.input = tup  # type: ignore[union-attr]
        try:
            self.instance.execute(tup, bc)
        except FailedException:
            self.collector.fail(tup)
            return
        except Exception as exc:
            self._on_error(tup, exc)
            return
        self.collector.ack(tup)

    def _on_error(self, tup: Tuple, exc: Exception) -> None:
        # Storm would restart the worker and let the tree time out; failing the input now
        # replays it sooner, and the topology keeps running.
        self.report(exc, tup.source_stream_id)
        if tup._state == 0:
            self.collector.fail(tup)
