"""`LocalEngine`: runs a whole topology in one process, one tuple at a time.

Every task is its own component instance. Emitted tuples go into one FIFO queue that is drained
after each `next_tuple` call, so a spout tuple's tree is usually complete before the next spout
tuple is asked for. Ack messages go straight into the acker ledgers (task = root mod ackers);
their outcomes are delivered to the spout between `next_tuple` calls, as Storm's spout executor
does. All randomness comes from the configured seed, so a run on a simulated clock repeats.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

from squall.errors import ReliabilityError
from squall.protocols import Progress
from squall.redis_clients import RedisUnreachable, wait_until_reachable
from squall.reliability.acker import AckerLedger, Outcome
from squall.results import (
    Captures,
    ComponentStats,
    ErrorLog,
    ErrorRecord,
    RunResult,
    aggregate_stats,
    user_error,
)
from squall.runtime.clock import Clock, RealClock
from squall.runtime.gc_pause import full_collections_deferred
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.local.transactions import LocalTransactions
from squall.runtime.reporting import Reporting, task_figures
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.run_dir import open_run_dir
from squall.runtime.settlement import OutcomeReceiver, Settlement, deliver_to_spout
from squall.task.checkpointing import CheckpointSpoutTask, is_stateful_topology
from squall.task.end_of_input import EndOfInput
from squall.task.stats import ExecuteTimes
from squall.task.tasks import BoltTask, SpoutTask, TaskRuntime
from squall.topology.config import (
    TOPOLOGY_SLEEP_SPOUT_WAIT_MS,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS,
    batch_emit_interval_ms,
    checkpoint_interval_ms,
    configured_message_timeout_ms,
    num_ackers,
    random_seed,
)
from squall.topology.description import Topology
from squall.topology.graph import is_acyclic
from squall.topology.tuple import Tuple, tick_tuple
from squall.transactional.wrappers import CoordinatorSpout

log = logging.getLogger("squall")


class LocalEngine(Controls, Reporting):
    # As a Host (squall.protocols): tuples go through `send` one by one, acks to the ledger.
    packets: None = None
    ack_xor: None = None

    def __init__(
        self,
        topology: Topology,
        conf: Mapping[str, Any] | RunConfig | None = None,
        *,
        clock: Clock | None = None,
        capture: bool = False,
        checkpoint_location: str | None = None,
    ) -> None:
        self.config = config = resolve(topology, conf, runner="local")
        self.conf = conf = config.user
        effective = config.effective
        self.topology = topology
        self.clock: Clock = clock or RealClock()
        # The Host's clock is the engine's: its own method, bound here, so a read of the time
        # (a windowed bolt's every tuple, a spout's every tracked emit) is one call, not two.
        self.now_ms = self.clock.now_ms
        self.seed = random_seed(effective)
        n_ackers = num_ackers(effective)
        self.tracking = n_ackers > 0
        # How long a ledger remembers a failed root: the timeout even when timeouts are off.
        timeout_ms = configured_message_timeout_ms(effective)
        self.ackers = [AckerLedger(memory_ms=timeout_ms * 1000) for _ in range(n_ackers)]
        self._n_ackers = n_ackers  # (a restore replaces the ledgers, not their number)
        self.queue: deque[tuple[Callable[[Tuple], None], Tuple]] = deque()
        self.errors: list[ErrorRecord] = []
        self.settlement = Settlement(self._deliver, self._report_unknown)
        self.captures: dict[int, list[tuple[str, list[Any]]]] = {}
        self.tasks: dict[int, TaskRuntime] = {}
        self.spouts: list[SpoutTask] = []
        self.bolts: list[BoltTask] = []
        # Logged rate-limited per component and error kind, on the engine's clock; all counted.
        self.error_log = ErrorLog(log, traceback=user_error)
        self._recent_error: dict[str, tuple[str, str]] = {}
        # Acks folded into their anchor's (squall.task.collectors.OutputCollector.ack): the
        # tuple executing now, its anchor, and the record of components' last errors.
        self.ack_folding: list[Any] | None = None
        # Task id -> what executes its tuples (replaced for one call to time it).
        executors: dict[int, Callable[[Tuple], None]] = {}
        self._executors = executors
        # Tuples received per task: every queued tuple gets executed, so this is "executed"
        # once the queue is drained, without a per-tuple counter in the execute path.
        self.received = received = [0] * (max(topology.task_ids) + 1)
        # The event-time position of the source record what executes now derives from (set by
        # partitioned sources, squall.partition_watermarks): a tuple executed as it is emitted
        # runs inside its emitter's call, with its position; a queued one takes it along.
        self.at: int | None = None
        # In an acyclic topology a tuple is executed as soon as it is emitted (depth first):
        # no bolt can be re-entered, each task still sees its inputs in emission order, and the
        # queue round trip per tuple is saved. A cycle needs the queue, or execute would recurse.
        self.direct = is_acyclic(topology)
        # The Host's `send` and `send_system`, chosen here once (see `_send_direct`).
        if self.direct:
            self.send, self.send_system = self._send_direct, self._send_direct_system
        else:
            self.send, self.send_system = self._send_queued, self._send_queued_system
        # What `_send_direct` does, for collectors to do inline (one call less per tuple):
        # `(executors, received, on_error)`; None when tuples go through the queue.
        self.direct_delivery: tuple[dict[int, Callable[[Tuple], None]], list[int],
                                    Callable[[int, Tuple, Exception], None]] | None = (
            (executors, received, self._execute_error) if self.direct else None)
        if self.direct and n_ackers:
            self.ack_folding = [None, None, self._recent_error]
        # With a checkpoint location every batch is a transaction (transactions.py); without,
        # stateful bolts follow Storm's checkpoint protocol (CheckpointSpoutTask below).
        self.transactions: LocalTransactions | None = None
        # With a checkpoint a batch is a transaction: one that cannot commit (BatchRetryError)
        # stops the run, and a restart resumes from the last commit; otherwise tuples fail.
        self.transactional_batches = checkpoint_location is not None
        if checkpoint_location is not None:
            run_dir = open_run_dir(topology, checkpoint_location, fingerprinted=False)
            self.transactions = LocalTransactions(run_dir.path, topology, conf)
        for task_id in topology.task_ids:
            cid = topology.task_component(task_id)
            spec = topology.components[cid]
            capture_list: list | None = [] if capture else None
            if capture_list is not None:
                self.captures[task_id] = capture_list
            cls = SpoutTask if spec.kind == "spout" else BoltTask
            task = cls(topology, task_id, conf, self, seed=self.seed,
                       tracking=self.tracking, capture=capture_list)
            self.tasks[task_id] = task
            if isinstance(task, SpoutTask):
                self.spouts.append(task)
            else:
                self.bolts.append(task)
                if self.transactions is not None and task.checkpointing is not None:
                    task.checkpointing.on_batch_transactions(self.transactions.dir)
        self.batch_id = 0
        self._rounds = 0
        self._expired_ms = -1  # the clock's time when timeouts were last looked at (`round`)
        self._next_sample = 1  # the round whose bolt tuples are timed next
        # Restored bolt instances (a restart) are not prepared again, as on Spark.
        self.restored: set[int] = (self.transactions.restore(self)
                                   if self.transactions is not None else set())
        self.restarted = bool(self.restored)  # counters are this run's (squall.metrics)
        for task in self.bolts:
            # A rich bolt's own execute goes straight into the queue (one call less per
            # tuple); drain() catches its exceptions and hands them to the task. Bound after
            # a restore, which replaces the instance.
            executors[task.task_id] = task.direct_execute() or task.execute
        self.started = False  # bolts prepared and spouts open
        self._starting = False
        self.finished = False
        self._start_ms = 0
        # Operator requests (deactivate, activate, stop), carried out by the run loop.
        self.lifecycle = Lifecycle()
        self._spouts_active = True
        # With a checkpoint location a batch is the transaction, so a stateful topology's
        # checkpoint interval paces it unless the batch length is set.
        batch_ms = effective.get("squall.local.batch.ms")
        if batch_ms is None and self.transactions is not None and is_stateful_topology(topology):
            batch_ms = checkpoint_interval_ms(effective)
        self.batch_ms = int(batch_ms or 1000)
        # [next tick time, period, task] per bolt task with topology.tick.tuple.freq.secs
        self.ticks: list[list[Any]] = [[0, b.tick_ms, b] for b in self.bolts if b.tick_ms]
        self.end_of_input = EndOfInput(topology, self.bolts)
        # A transactional topology's coordinator, on a simulated clock: a round in which it
        # starts transactions takes Storm's batch emit interval, as a local Trident batch does,
        # so a duration counts transactions and a spout that never ends runs into it. On a
        # real clock the next transaction follows at once.
        self._coordinators = [s for s in self.spouts if isinstance(s.spout, CoordinatorSpout)
                              ] if self.clock.simulated else []
        self._pace_ms = max(1, batch_emit_interval_ms(effective))  # time must move
        # Stateful topologies: Storm's checkpoint spout, as a task after the last one.
        self.checkpoint: CheckpointSpoutTask | None = None
        if is_stateful_topology(topology) and self.transactions is None:
            self.checkpoint = CheckpointSpoutTask(self, max(topology.task_ids) + 1)

    # ---- Host protocol (`send` and `send_system` are chosen in __init__) ------------------
    send: Callable[[int, Tuple], None]
    send_system: Callable[[int, Tuple], None]  # a system tuple: delivered, not counted
    now_ms: Callable[[], int]  # the clock's (set in __init__)

    def _send_direct(self, task_id: int, tup: Tuple) -> None:
        """`send` in an acyclic topology: the tuple is executed now, inside its emitter's call."""
        self.received[task_id] += 1
        try:
            self._executors[task_id](tup)
        except Exception as exc:
            self._execute_error(task_id, tup, exc)

    def _send_direct_system(self, task_id: int, tup: Tuple) -> None:
        """`send_system` in an acyclic topology: a system tuple (Storm's checkpoint tuples),
        executed as `send` does, not counted in the task's executed (docs/metrics.md)."""
        self._send_direct(task_id, tup)
        self.received[task_id] -= 1  # (as OutputCollector.ack_system: counted, then not)

    def _send_queued(self, task_id: int, tup: Tuple) -> None:
        """`send` with a cycle: the tuple is queued, with the event-time position in force
        (`at`), which `drain` restores when it executes it."""
        self.received[task_id] += 1
        at = self.at
        if at is not None:
            tup._at = at  # type: ignore[attr-defined]
        self.queue.append((self._executors[task_id], tup))

    def _send_queued_system(self, task_id: int, tup: Tuple) -> None:
        """`send_system` with a cycle: queued, not counted in the task's executed."""
        self.queue.append((self._executors[task_id], tup))

    # The ledgers run on microseconds, so complete latencies have sub-millisecond resolution;
    # an outcome's `latency_ms` is then in microseconds (the spout tasks scale it).
    ledger_unit_ms = 0.001
    latency_sample_every = 16  # complete latencies in the histogram: one tree in 16

    def set_at(self, at: int | None) -> None:
        self.at = at

    def now_us(self) -> int:
        return self.clock.now_us()

    def ack_init(self, root: int, xor: int, spout_task: int) -> None:
        ackers = self.ackers
        outcome = ackers[root % len(ackers) if len(ackers) > 1 else 0].init(
            root, xor, spout_task, self.clock.now_us())
        if outcome is not None:
            self._settle(outcome, None)

    def ack(self, root: int, value: int, component: str) -> None:
        """An ack for the collectors: the XOR goes into the ledger's entry inline, and the clock
        is read only when the tree completes (or the root is not pending)."""
        recent = self._recent_error
        if recent:  # the component went on: its last error failed nothing later
            recent.pop(component, None)
        ledger = self.ackers[root % self._n_ackers]
        entry = ledger.entries.get(root)
        if entry is not None:
            value ^= entry.val
            entry.val = value
            if value or entry.spout_task < 0:
                return
        outcome = ledger.ack(root, value, self.clock.now_us())
        if outcome is not None:
            self.settlement.settle(outcome, component)

    def fail(self, root: int, component: str) -> None:
        outcome = self.ackers[root % len(self.ackers)].fail(root, self.now_us())
        if outcome is not None:
            if outcome.kind == "fail":
                # A bolt fails the tuple its execute raised on right after reporting the error:
                # the error the dead-letter stream names (squall.reliability.retries).
                recent = self._recent_error.get(component)
                if recent is not None:
                    outcome = outcome._replace(error=recent)
            self._settle(outcome, component)

    def reset(self, root: int, component: str) -> None:
        outcome = self.ackers[root % len(self.ackers)].reset(root, self.now_us())
        if outcome is not None:
            self._settle(outcome, component)

    def forget(self, root: int) -> None:
        self.ackers[root % len(self.ackers)].forget(root, self.now_us())

    def report_error(
        self, component: str, task: int, error: BaseException, stream: str | None = None
    ) -> None:
        record = ErrorRecord(component, task, error, stream, self.now_ms())
        self.errors.append(record)
        self._recent_error[component] = (type(error).__name__, str(error))
        self.error_log.record(record, record.time_ms)

    def _settle(self, outcome: Outcome, component: str | None) -> None:
        self.settlement.settle(outcome, component)

    def _deliver(self, outcome: Outcome) -> None:
        task = self.tasks.get(outcome.spout_task)
        # Trees of the checkpoint spout (a stateful topology's) have its task id, past the last.
        spout: OutcomeReceiver | None = task if isinstance(task, SpoutTask) else self.checkpoint
        assert spout is not None, f"no spout task {outcome.spout_task}"
        if outcome.kind == "ack":  # deliver_to_spout, inline for the path of every tree
            spout.completions.append(outcome)
            return
        deliver_to_spout(spout, outcome)

    def _report_unknown(self, component: str | None, error: ReliabilityError) -> None:
        self.report_error(component or "?", -1, error)

    @property
    def late_acks(self) -> int:
        """Acks that arrived for trees that had already failed or timed out."""
        return self.settlement.late_acks

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self.started or self._starting:
            return
        self._starting = True
        self._start_ms = self.now_ms()
        for tick in self.ticks:
            tick[0] = self._start_ms + tick[1]
        # A Redis state store that is down as the run starts is waited for, as a store that
        # goes down mid-run is (a bolt's user prepare has run: only its states are opened).
        if self.checkpoint is not None:
            self._open_waiting(self.checkpoint.open, "the checkpoint coordinator's state")
        for bolt in self.bolts:
            if bolt.task_id not in self.restored:
                try:
                    bolt.prepare()
                except RedisUnreachable:
                    self._open_waiting(bolt.open_states, f"bolt {bolt.component_id}'s state")
        if self.transactions is not None:
            self.transactions.begin(self)
        for spout in self.spouts:
            spout.open()
        if self.transactions is not None:
            self.transactions.seek_sources(self)
        # Only now: another thread (LocalCluster.wait_until_complete) reads `started` and then
        # `complete()`, which a spout that is not open yet may answer with "exhausted".
        self.started = True

    def _open_waiting(self, open_: Callable[[], None], what: str) -> None:
        """`open_()`, tried again while its Redis cannot be reached, until it opens or a stop."""
        wait_until_reachable(open_, what=what, pause_ms=self.clock.sleep_ms,
                             stopping=lambda: self.lifecycle.stop_requested)

    def end_batch(self) -> None:
        """End the current batch for every bolt task (`Bolt.on_batch_end`)."""
        batch_id = self.batch_id
        self.batch_id += 1
        if self.transactions is not None:
            self.transactions.commit(self, batch_id)
            return
        for bolt in self.bolts:
            bolt.end_batch(batch_id)
        self.drain()  # what the bolts emitted while ending the batch

    def stop(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.started:
            self.end_batch()
        for spout in self.spouts:
            spout.close()
        for bolt in self.bolts:
            bolt.cleanup()

    def _send_ticks(self, now: int) -> int:
        """Deliver the tick tuples that are due (Storm's per-component tick tuples)."""
        sent = 0
        for tick in self.ticks:
            if now >= tick[0]:
                period, task = tick[1], tick[2]
                tick[0] = now + period
                rate = task.conf[TOPOLOGY_TICK_TUPLE_FREQ_SECS]
                self.send(task.task_id, tick_tuple(rate, task.task_id))
                sent += 1
        if sent and self.queue:
            self.drain()
        return sent

    def drain(self) -> int:
        """Execute queued tuples until the queue is empty; returns how many ran."""
        q = self.queue
        pop = q.popleft
        n = 0
        while q:
            try:
                while q:
                    execute, tup = pop()
                    n += 1
                    self.at = getattr(tup, "_at", None)
                    execute(tup)
            except Exception as exc:
                assert tup._task is not None  # a queued tuple has its target task
                self._execute_error(tup._task, tup, exc)
        self.at = None
        return n

    def _execute_error(self, task_id: int, tup: Tuple, exc: Exception) -> None:
        """A bolt's execute raised: its task reports the error and fails the tuple."""
        task = self.tasks[task_id]
        assert isinstance(task, BoltTask)
        task.on_execute_error(tup, exc)

    # Every this many scheduling rounds each bolt task's next tuple is timed: tens of samples a
    # second per task at W1's pace, and nothing measurable on its throughput (docs/metrics.md).
    SAMPLE_ROUNDS = 1024

    def _sample_executes(self) -> None:
        """Time the next tuple of every bolt task (squall.task.stats.ExecuteTimes): its
        executor is replaced for one call, so the other tuples' path costs nothing."""
        executors = self._executors
        for task in self.bolts:
            tid = task.task_id
            original = executors[tid]
            if getattr(original, "sampling", False):
                continue  # still waiting for a tuple
            times = task.times
            times.settle_open()

            def once(tup: Tuple, tid: int = tid, original: Any = original,
                     times: ExecuteTimes = times) -> None:
                executors[tid] = original
                times.timed(original, tup)

            once.sampling = True  # type: ignore[attr-defined]
            executors[tid] = once

    def round(self) -> int:
        """One scheduling round: settle acks and timeouts, then one `next_tuple` per spout.

        Returns the amount of work done (0 means the topology was idle this round).
        """
        self._rounds += 1
        if self._rounds == self._next_sample:
            # Rounds 1, 2, 4, ... then every SAMPLE_ROUNDS: short runs get samples too.
            self._next_sample += min(self._next_sample, self.SAMPLE_ROUNDS)
            self._sample_executes()
        work = 0
        now = self.clock.now_ms()
        # Within one millisecond nothing new can time out (a tree's clock starts at the time it
        # is added or reset, so not before `now`): expiry is looked at once per millisecond,
        # not once per round (tens of rounds a millisecond at W1's pace).
        fresh = now != self._expired_ms
        self._expired_ms = now
        for spout in self.spouts:
            if spout.completions:
                work += spout.deliver_completions()
            timeout = spout.pending.timeout_ms
            if timeout is not None and (fresh or not timeout) and spout.pending:
                work += spout.expire(now)
            if spout.retries.waiting:
                work += spout.replay_due(now)
            if spout.can_emit():
                work += spout.next_tuple()
            if self.queue:
                work += self.drain()
        if self.checkpoint is not None:
            work += self.checkpoint.step(now, all(s.exhausted() for s in self.spouts))
            if self.queue:
                work += self.drain()
        return work

    def pending(self) -> int:
        return sum(len(s.pending) + len(s.completions) for s in self.spouts)

    def complete(self) -> bool:
        """Started, every spout exhausted, nothing queued, no tracked tree pending."""
        return (
            self.started
            and not self.queue
            and self.pending() == 0
            and all(s.exhausted() for s in self.spouts)
        )

    def _attempts_started(self) -> int:
        """Transaction attempts the paced coordinators (`_coordinators`) started so far."""
        return sum(cast(CoordinatorSpout, t.spout).attempts_started for t in self._coordinators)

    # On a simulated clock, how many busy rounds the engine does at one instant before the
    # clock moves on by itself, and by how much: 1 ms a round, taken 10 s at a time (Storm's
    # completeTopology advances simulated time 10 s per wait while the topology works), so a
    # bounded input shorter than that runs at one instant as before (docs/design/foundation.md).
    BUSY_ROUNDS_PER_STEP = 10_000
    BUSY_STEP_MS = 10_000

    def _busy_round(self, busy: list[int]) -> None:
        """Count a round that did work on a simulated clock; `busy` is [the instant, the busy
        rounds at it]. Past `BUSY_ROUNDS_PER_STEP` busy rounds at one instant the clock moves
        `BUSY_STEP_MS`, so a topology that never goes idle still sees time pass."""
        clock = self.clock
        now = clock.now_ms()
        if now != busy[0]:
            busy[0], busy[1] = now, 0
        busy[1] += 1
        if busy[1] >= self.BUSY_ROUNDS_PER_STEP:
            clock.sleep_ms(self.BUSY_STEP_MS)
            busy[0], busy[1] = clock.now_ms(), 0

    def next_deadline(self) -> int | None:
        deadlines = [d for s in self.spouts if (d := s.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def run(
        self,
        *,
        duration_ms: int | None = None,
        until_complete: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Progress | None = None,
        progress_every_ms: int = 1000,
    ) -> RunResult:
        """As `squall.protocols.Runner.run`; `should_stop` is called every scheduling round.

        On a simulated clock an idle topology jumps time to the next timeout, so timeouts in
        tests take no real time; one that stays busy moves it `BUSY_STEP_MS` per
        `BUSY_ROUNDS_PER_STEP` busy rounds at one instant (`_busy_round`), so `duration_ms` ends
        a run whose spout emits on every call.
        """
        with full_collections_deferred():
            self.start()  # a run again goes on from the first run's start (`_start_ms`)
            return self.run_bracket(
                lambda _started: self._drive(duration_ms, until_complete, should_stop,
                                             on_progress, progress_every_ms),
                close=self.stop, on_progress=on_progress)

    def _drive(
        self,
        duration_ms: int | None,
        until_complete: bool,
        should_stop: Callable[[], bool] | None,
        on_progress: Progress | None,
        progress_every_ms: int,
    ) -> None:
        clock = self.clock
        start = clock.now_ms()
        wait_ms = int(self.config.effective.get(TOPOLOGY_SLEEP_SPOUT_WAIT_MS) or 1)
        next_progress = start + progress_every_ms
        next_batch_end = start + self.batch_ms
        life = self.lifecycle
        paced = self._coordinators
        started = self._attempts_started()
        # Busy rounds at the clock's current instant (`_busy_round`): [instant, rounds].
        busy = [start, 0] if clock.simulated else None
        while True:
            if life.active != self._spouts_active:
                self._spouts_active = life.active
                for spout in self.spouts:
                    spout.set_active(life.active)
            work = self.round()
            if paced and (n := self._attempts_started()) != started:
                started = n
                clock.sleep_ms(self._pace_ms)  # the transactions it started took the interval
            elif work and busy is not None:
                self._busy_round(busy)
            now = clock.now_ms()
            if now >= next_batch_end:
                self.end_batch()
                next_batch_end = now + self.batch_ms
                work += 1  # its acks reach the spouts in the next round
            if self.ticks:
                work += self._send_ticks(now)
            if on_progress is not None and now >= next_progress:
                on_progress(self.metrics())
                next_progress = now + progress_every_ms
            if duration_ms is not None and now - start >= duration_ms:
                break
            if should_stop is not None and should_stop():
                break
            # A requested stop waits for the trees in flight (or its deadline): the last
            # batch then commits them, so a restart resumes exactly.
            if life.stop_requested and life.should_stop(
                    not self.queue and self.pending() == 0):
                break
            if work:
                continue
            if self.end_of_input.due(self.spouts):
                for bolt in self.end_of_input.order:  # upstream first: flushes flow down
                    bolt.end_of_input()
                    self.drain()
                if self.checkpoint is not None:
                    self.checkpoint.end_of_input()
                continue
            if until_complete and self.complete() and (
                    self.checkpoint is None or self.checkpoint.settled()):
                break
            if clock.simulated:
                # The next thing that can happen: a timeout, or a batch end (which lets
                # bolts that hold tuples until then flush and ack them).
                deadline = self.next_deadline()
                if deadline is not None:
                    deadline = min([deadline, next_batch_end] + [t[0] for t in self.ticks])
                if self.checkpoint is not None:
                    due = self.checkpoint.next_deadline(
                        all(s.exhausted() for s in self.spouts))
                    if due is not None:
                        deadline = due if deadline is None else min(deadline, due)
                if deadline is not None and deadline > now:
                    clock.advance_to(deadline)  # type: ignore[attr-defined]
                else:
                    clock.sleep_ms(wait_ms)
            else:
                clock.sleep_ms(wait_ms)

    def task_counters(self) -> list[tuple[int, dict[str, Any]]]:
        def counters(task: TaskRuntime) -> dict[str, Any]:
            out: dict[str, Any] = task.stats.as_dict()
            # Executed tuples are counted where they are sent (see `received`).
            out["executed"] = self.received[task.task_id] if task.kind == "bolt" else 0
            out["pending"] = len(task.pending) if isinstance(task, SpoutTask) else 0
            out.update(task_figures(task))
            return out

        return [(task.task_id, counters(task)) for task in self.tasks.values()]

    def incomplete(self) -> list[str]:
        if self.complete():
            return []
        stuck = sorted({s.component_id for s in self.spouts if not s.exhausted()})
        # A transactional topology's coordinator: its spout, named as on Spark.
        coordinators = [s.spout for s in self.spouts if self.started
                        and isinstance(s.spout, CoordinatorSpout) and not s.exhausted()]
        # What each spout that never finished did: a spout that emits on every call shows it.
        stats = self.component_stats() if stuck else {}
        counts = [f"spout {c!r}: emitted {stats[c].emitted}, acked {stats[c].acked}, "
                  f"failed {stats[c].failed}" for c in stuck]
        return [phrase for c in coordinators for phrase in (
                    f"transactional spout {c.tx_id!r} not exhausted",
                    f"transactions committed: {len(c.core.committed)}")] + [
            f"spouts not exhausted: {stuck}", *counts,
            f"tracked tuples pending: {self.pending()}"]

    def spout_instances(self) -> dict[int, Any]:
        return {t.task_id: t.instance for t in self.spouts}

    def captured(self) -> Captures:
        return self.captures

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        return {t.task_id: t.settled_ids or {} for t in self.spouts}

    def component_stats(self) -> dict[str, ComponentStats]:
        return aggregate_stats(self.topology, self.task_counters())

    def _live_elapsed_ms(self) -> int:
        return self.now_ms() - self._start_ms  # the runner's clock, as `result`

    def result(self) -> RunResult:
        return RunResult(
            self.component_stats(),
            list(self.errors),
            self.elapsed_now_ms(),
            {"late_acks": self.late_acks},
        )
