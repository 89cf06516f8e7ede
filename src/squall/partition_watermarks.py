"""Event-time progress per source partition: the watermark an operator takes from its sources.

A partitioned source (a file, a Redis stream, a Kafka partition) is read in order, so each of
its partitions has its own event-time progress: the largest timestamp read from it so far. An
operator that reads several partitions, from one spout task or many, must not let the fastest
one decide which tuples are late (Beam's and Flink's source watermarks). The source's tasks
tell the operators which partition their next tuples come from, on the control stream
`_partitions` (an all-grouping subscription the builder adds), and the operator keeps:

- per partition, the largest timestamp seen, and its watermark: that minus the delay;
- the input watermark: the smallest partition watermark over the partitions every upstream
  source task has announced that are neither idle nor done (None until every task announced and
  every such partition delivered a tuple); when all are idle or done, the smallest over the idle
  ones that delivered a tuple (nothing is arriving anywhere);
- the lateness of a tuple against *its own partition's* watermark just before it (`before`).

Judging a tuple against its own partition makes the choice of late tuples independent of
parallelism and of how partitions are spread over tasks and interleaved: a partition's tuples
arrive in its own order whatever the topology. Since the input watermark is never above any
active partition's, a tuple that is not late for its partition is not late for the operator.

Control events (values `[event, partitions]` on `_partitions`):
`own` (the task's partitions now, a list), `from` (its next tuples come from this one partition),
`idle` (these had no new records for the idleness timeout: they stop holding the watermark back
until they deliver again), `done` (these are read to their end: they never hold it back again),
`at` (`[[partition, largest event time], ...]`: how far these partitions have been read).

Positions carried with the data. A source that knows its records' event time (its
`squall.source.event.time.field`) gives every record a *position*: the largest event time of its
partition before it. The runners carry a record's position with everything derived from it
(the host's `at`: on Spark in the packet headers, on the local runner in the call that executes
it), through any bolts, so an operator judges each tuple against its own partition's watermark
at its source position, whatever path or order it arrived by. Such an input learns each
partition's progress from the `at` events, which every operator task receives, and applies
them at its batch ends, when everything read before them has arrived (`apply`): the watermark
is then the operator's, not its task's, and what is late does not depend on parallelism.

>>> w = PartitionWatermarks(frozenset({1, 2}), delay_ms=10)
>>> w.control(1, OWN, ["a"]), w.control(2, OWN, ["b"]), w.control(1, FROM, ["a"])
(None, None, None)
>>> w.observe(1, 100), w.value       # b has delivered nothing yet: no watermark
(None, None)
>>> w.control(2, FROM, ["b"]); w.observe(2, 50)
40
>>> w.before(1), w.before(2)         # each tuple is judged against its own partition
(90, 40)
>>> w.observe(2, 500)                # b passes a: the watermark follows the slower one
90
>>> w.control(1, DONE, ["a"])        # a is read out: b alone holds the watermark
490
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

PARTITIONS_STREAM = "_partitions"
"""The control stream on which partitioned sources tell operators about their partitions."""
PARTITIONS_FIELDS = ("event", "partitions")
OWN, FROM, IDLE, DONE, AT = "own", "from", "idle", "done", "at"
EVENTS = frozenset({OWN, FROM, IDLE, DONE, AT})


class SourcePositions:
    """A source's side of carried positions: per partition, the largest event time read so far.

    `index`: the position of the event-time field in the source's records.

    >>> s = SourcePositions(1)
    >>> s.position("a", ["x", 100]), s.position("a", ["y", 90]), s.position("a", ["z", 120])
    (None, 100, 100)
    >>> s.progress()                       # what the next `at` event says, once
    [['a', 120]]
    >>> s.progress(), s.position("b", ["w", "not a time"]), s.max_ts
    ([], None, {'a': 120})
    """

    def __init__(self, index: int, max_ts: dict[Any, int] | None = None) -> None:
        self.index = index
        self.max_ts: dict[Any, int] = dict(max_ts or {})
        self._told: dict[Any, int] = {}

    def position(self, partition: Any, values: Sequence[Any]) -> int | None:
        """The record's position (its partition's largest event time before it); the record's
        own event time is taken in. A record without a valid one moves nothing (the operator
        routes it to its error stream)."""
        before = self.max_ts.get(partition)
        try:
            ts = values[self.index]
        except (IndexError, TypeError):
            return before
        if ts.__class__ is not int:
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts != ts:
                return before
            ts = int(ts)
        if before is None or ts > before:
            self.max_ts[partition] = ts
        return before

    def passed(self, partition: Any, ts: int | float) -> None:
        """Records read but not emitted (a source's filter skipped them) whose largest event
        time is `ts`: the partition's position takes it in, as if they had been emitted.

        >>> s = SourcePositions(0)
        >>> s.passed("a", 130); s.position("a", [100])
        130
        """
        ts = int(ts)
        before = self.max_ts.get(partition)
        if before is None or ts > before:
            self.max_ts[partition] = ts

    def progress(self) -> list[list[Any]]:
        """`[partition, largest event time]` of the partitions that moved since the last call."""
        out = [[p, m] for p, m in self.max_ts.items() if self._told.get(p) != m]
        for p, m in out:
            self._told[p] = m
        return out

    def forget_told(self) -> None:
        """A restart says everything again (every event is idempotent)."""
        self._told = {}


class PartitionWatermarks:
    """One input's partition watermarks (see the module doc); plain picklable state.

    `tasks`: the upstream source tasks, each of which announces its partitions (`own`) before
    the input has a watermark. Partition names are qualified by the task's component by the
    caller when two sources may share names.
    """

    def __init__(self, tasks: frozenset[int], delay_ms: int,
                 component_of: dict[int, str] | None = None) -> None:
        self.tasks = tasks
        self.delay = delay_ms
        self.component_of = component_of or {}
        self.owned: dict[int, frozenset[Hashable]] = {}
        self.current: dict[int, Hashable] = {}  # task -> the partition its tuples come from
        self.max_ts: dict[Hashable, int] = {}
        self.idle: set[Hashable] = set()
        self.done: set[Hashable] = set()
        self.value: int | None = None
        # The smallest largest-timestamp over the active partitions (None: not all known): a
        # partition's new largest timestamp can move the watermark only if it was this one.
        self._low: int | None = None
        # Tuples the operator failed, until they come back or are dead-lettered: (partition,
        # values, the watermark each was judged against), which the input watermark stays at
        # or below so that a replay is judged as its first attempt was (Beam's watermark hold).
        self.holds: list[tuple[Hashable, list[Any], int]] = []
        # `at` events not applied yet: applied at the batch end (`apply`), when every tuple
        # read before them has arrived whatever path it took.
        self.pending: dict[Hashable, int] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("holds", [])  # (snapshots written before holds existed)
        state.setdefault("pending", {})
        self.__dict__.update(state)

    def apply(self) -> int | None:
        """Take in the `at` events received since the last call; returns the input watermark
        if it moved."""
        if not self.pending:
            return None
        pending, self.pending = self.pending, {}
        max_ts = self.max_ts
        for p, m in pending.items():
            old = max_ts.get(p)
            if old is None or m > old:
                max_ts[p] = m
        return self._recompute()

    def held(self, task: int, values: Sequence[Any]) -> int | None:
        """The watermark a failed tuple of `task` with these values was judged against, if it
        is held (a replay)."""
        p = self.current.get(task)
        for (q, v, w) in self.holds:
            if q == p and v == values:
                return w
        return None

    def hold(self, task: int, values: Sequence[Any], watermark: int) -> None:
        """A tuple of `task` failed when judged against `watermark`: hold the input watermark
        there until it comes back (`release`) or is dead-lettered."""
        p = self.current.get(task)
        if p is not None and self.held(task, values) is None:
            self.holds.append((p, list(values), watermark))

    def release(self, task: int, values: Sequence[Any],
                partition: Hashable | None = None) -> int | None:
        """The held tuple came back and went through (or, with `partition`: task `task`'s
        source dead-lettered it); returns the input watermark if it moved."""
        p = self.current.get(task) if partition is None else self._key(task, partition)
        values = list(values)
        kept = [h for h in self.holds if not (h[0] == p and h[1] == values)]
        if len(kept) == len(self.holds):
            return None
        self.holds = kept
        return self._recompute()

    def _key(self, task: int, partition: Hashable) -> Hashable:
        component = self.component_of.get(task)
        return partition if component is None else (component, partition)

    def before(self, task: int) -> int | None:
        """The watermark of the partition `task`'s next tuple comes from, before that tuple."""
        p = self.current.get(task)
        if p is None:
            return None
        m = self.max_ts.get(p)
        return None if m is None else m - self.delay

    def observe(self, task: int, ts: int) -> int | None:
        """A tuple of `task` at `ts`; returns the input watermark if it moved."""
        p = self.current.get(task)
        if p is None:
            return None  # a tuple before its task said where it comes from: nothing to learn
        m = self.max_ts.get(p)
        if m is not None and ts <= m:
            return None
        self.max_ts[p] = ts
        if m is not None and self._low is not None and m > self._low:
            return None  # not the slowest partition: the minimum stays
        return self._recompute()

    def control(self, task: int, event: str, partitions: Iterable[Hashable]) -> int | None:
        """A control event from upstream source task `task`; returns the input watermark if it
        moved."""
        if event == AT:  # `[partition, largest event time]` pairs, applied at the batch end
            pending = self.pending
            progress: Iterable[tuple[Hashable, int]] = partitions  # type: ignore[assignment]
            for p, m in progress:
                key = self._key(task, p)
                if m > pending.get(key, m - 1):
                    pending[key] = m
            return None
        keys = [self._key(task, p) for p in partitions]
        if event == FROM:
            p = keys[0]
            self.current[task] = p
            if p not in self.idle:
                return None
            self.idle.discard(p)  # delivering again: it holds the watermark from now on
        elif event == OWN:
            self.owned[task] = frozenset(keys)
        elif event == IDLE:
            self.idle.update(keys)
        elif event == DONE:
            self.done.update(keys)
        else:
            raise ValueError(f"unknown partition event {event!r}; expected one of "
                             f"{sorted(EVENTS)}")
        return self._recompute()

    def _recompute(self) -> int | None:
        self._low = None
        low = idle_low = None
        idle, done, max_ts, owned = self.idle, self.done, self.max_ts, self.owned
        for task in self.tasks:
            parts = owned.get(task)
            if parts is None:
                return None  # a task that has not said which partitions it reads
            for p in parts:
                m = max_ts.get(p)
                if p in idle or p in done:
                    if m is not None and (idle_low is None or m < idle_low):
                        idle_low = m
                    continue
                if m is None:
                    return None  # an active partition that has delivered nothing holds it
                if low is None or m < low:
                    low = m
        if low is None:
            # Every partition idle (or done): nothing is arriving, so the idle and finished
            # ones that delivered something decide, the slowest first (else nothing moves).
            if idle_low is None:
                return None
            w = self._held(idle_low - self.delay)
            if self.value is not None and w <= self.value:
                return None
            self.value = w
            return w
        self._low = low
        w = self._held(low - self.delay)
        if self.value is not None and w <= self.value:
            return None
        self.value = w
        return w

    def _held(self, w: int) -> int:
        for h in self.holds:
            if h[2] < w:
                w = h[2]
        return w
