"""`PartitionedSource`: the base of sources whose input is split into partitions with ordered
offsets, which the runners read where the records are needed.

*Planning* (which offsets are new) is cheap and runs where the spout lives; *reading* runs where the
records go:

- On the local runner it is an ordinary reliable spout: `next_tuple` emits one record with the
  message id `(partition, offset)`, and a failed record is read again at that offset and re-emitted.
- On Spark the spout reader plans *ranges* `Range(partition, start, end)`. Each range is one Spark
  input partition, read on an executor, and one tuple tree: its records are emitted anchored to the
  range's root, so the range is acked when every record's tree has completed and, when any record
  fails or times out, replayed whole from the same offsets (at-least-once; the records that had
  succeeded are delivered again, as with Trident's batches; under a retry limit only the records
  that failed, squall.reliability.acker's record roots). `topology.max.spout.pending` counts
  ranges there. Ranges are written under the checkpoint location before Spark plans the batch, so
  a batch replayed after a crash reads exactly the same offsets.

Partitions are spread evenly over the source's tasks: a fixed list (streams, in-memory
partitions) by position; files, which come and go, by a `PartitionAssignment` the tasks of the
component share (the runner hosts them in one process): each new file goes to the task with the
fewest, and stays there; a restart gives every task back the files it has offsets for. A source
without a shared assignment (hosted alone) falls back to a stable hash of the file name.

A record that cannot be read (bad JSON, a missing field, a value that does not convert) is reported
as an error naming the component, stream and field, counted, and emitted on the `malformed` stream
(fields `partition`, `offset`, `record`, `error`) with the same message id, so a topology can route
it; the source goes on with the next record.

Every source also declares the `dead_letter` stream (`squall.reliability.retries`): with a retry
limit (`squall.retry.max.retries`), a record that failed too often goes out on it, with its
partition and offset, and is not replayed again. A record that keeps failing without a limit
does not hold the others up: replays and new records take turns.

Operators that generate their watermark from event time read it per source partition
(squall.partition_watermarks): a source tells them, on its control stream `_partitions`, which
partitions each task owns, which partition its next tuples come from, and which partitions are
idle (nothing new for `squall.watermark.idle.timeout.ms` of the runner's clock) or read to their
end. It sends these only when some component subscribes to that stream. With an event-time field
(`squall.source.event.time.field`, which the builder sets from the operators' timestamp field)
each record also carries its position, the largest event time of its partition before it, and
the source tells the operators how far each partition has been read (`at`); a replayed record
carries none (the operator judges it against its own watermark). A source that skips records
where it reads them (a filter, such as `ParquetSource`'s `keep`) still counts their event times:
it yields a `Skipped` marker with the largest of each run, which the readers of both runners take
into the partition's position without emitting anything.

Every source reads from its constructor's settings only: on Spark the executors unpickle a fresh
copy, never `open` it, and call `read` on it. The built-in sources are in `squall.connectors`.
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from squall.components.base import Spout
from squall.errors import SquallError
from squall.partition_watermarks import (
    AT,
    DONE,
    FROM,
    IDLE,
    OWN,
    PARTITIONS_FIELDS,
    PARTITIONS_STREAM,
    SourcePositions,
)
from squall.reliability.retries import DEAD_LETTER, DEAD_LETTER_FIELDS
from squall.topology.config import SQUALL_SOURCE_EVENT_TIME_FIELD, idle_timeout_ms
from squall.topology.fields import Fields

MALFORMED = "malformed"
MALFORMED_FIELDS = Fields("partition", "offset", "record", "error")


class Range(NamedTuple):
    """Offsets `[start, end)` of one partition: the unit a Spark executor reads and replays."""

    partition: str
    start: Any
    end: Any


class RecordRange(Range):
    """A range of one record, split from a failed range (`PartitionedSource.split`): replayed
    and counted on its own. Equal to the `Range` with the same offsets."""

    __slots__ = ()


class Skipped:
    """What `PartitionedSource.read` yields, at the offset of the first of them, for a run of
    records its filter skipped (`ParquetSource`'s and the file sources' `keep`) when the runner
    carries positions (`PartitionedSource.time_index` is set): `max_ts`, the largest event time
    among them. The reader takes it into the partition's position and emits nothing, so the
    records after it are judged as if the skipped ones had been read.

    >>> Skipped(1200)
    Skipped(1200)
    """

    __slots__ = ("max_ts",)

    def __init__(self, max_ts: int | float) -> None:
        self.max_ts = max_ts

    def __repr__(self) -> str:
        return f"Skipped({self.max_ts!r})"


class SourceError(SquallError):
    """A source cannot reach or read its input; says what is wrong and what to do."""


class MalformedRecord(SquallError):
    """One record could not be turned into a tuple; names the component, stream and field.

    `record` holds the record's text (JSON for structured records).
    """

    record: str = ""


class PartitionAssignment:
    """Which task of a source component reads each partition: new partitions, in name order, go
    to the task with the fewest (the lowest index on a tie) and stay with it.

    >>> a = PartitionAssignment(2)
    >>> a.mine(0, ["web1", "web2"]), a.mine(1, ["web1", "web2", "web3"])
    (['web1'], ['web2'])
    >>> a.mine(0, ["web1", "web2", "web3"])
    ['web1', 'web3']
    """

    def __init__(self, tasks: int) -> None:
        self.owner: dict[str, int] = {}
        self.loads = [0] * tasks

    def claim(self, task: int, partitions: Iterable[str]) -> None:
        """`task` has read these (its offsets after a restart): they stay its own."""
        for p in partitions:
            old = self.owner.get(p)
            if old is not None:
                self.loads[old] -= 1
            self.owner[p] = task
            self.loads[task] += 1

    def mine(self, task: int, partitions: Iterable[str]) -> list[str]:
        partitions = list(partitions)
        owner, loads = self.owner, self.loads
        for p in sorted(p for p in partitions if p not in owner):
            least = min(range(len(loads)), key=loads.__getitem__)
            owner[p] = least
            loads[least] += 1
        return [p for p in partitions if owner[p] == task]


class PartitionedSource(Spout):
    """Base of the built-in sources. Subclasses implement `discover`, `initial_offset`,
    `end_offset` and `read` (and may override `cut` and `estimate`)."""

    def __init__(
        self, fields: Fields | Iterable[str], *, stream: str = "default", bounded: bool = False,
        records_per_call: int = 1000,
    ) -> None:
        self.fields = fields if isinstance(fields, Fields) else Fields(list(fields))
        self.stream = stream
        self.bounded = bounded
        self.records_per_call = records_per_call
        self._offsets: dict[str, Any] = {}
        self._bounds: dict[str, Any] | None = None  # bounded: the ends seen at the first plan
        # Unbounded: each partition's end at the plan that last looked at it, to tell a
        # partition that disappears with records not read (`_report_vanished`).
        self._ends: dict[str, Any] = {}
        self._replay_ranges: deque[Range] = deque()
        self._replay_records: deque[tuple[str, Any]] = deque()
        self._buffer: deque[tuple[str, Any, Any]] = deque()
        self._task_index, self._tasks = 0, 1
        self._last_error: str | None = None
        self._replayed_last = False  # the last next_tuple replayed: the next reads a new record
        self.component = type(self).__name__
        self._watching = False  # someone reads `_partitions` (open)
        # Shared by the component's tasks when the runner hosts them together (files).
        self.assignment: PartitionAssignment | None = None
        self._idle_ms: int | None = None
        # Positions carried with the records (squall.partition_watermarks.SourcePositions):
        # set up by `open` when the source has an event-time field and operators listen.
        self.positions: SourcePositions | None = None
        # The event-time field's position when the reader carries positions (set by `open`,
        # and by the Spark range reader on an executor), else None: a source that skips
        # records then yields a `Skipped` marker for each run of them.
        self.time_index: int | None = None
        self._forget_partition_events()

    def _forget_partition_events(self) -> None:
        # What the `_partitions` control stream has said (all of it is said again after a
        # restart: each event is idempotent for the operators).
        self._from: str | None = None  # the partition the last emitted record came from
        self._owned: tuple[str, ...] | None = None
        self._seen: list[str] | None = None  # the partitions the last plan looked at
        self._planned: set[str] = set()  # partitions that got records since the last watch
        self._last_new: dict[str, int] = {}
        self._idle: set[str] = set()
        self._read_out: set[str] = set()  # read to their end at the last watch
        self._done: set[str] = set()

    def __setstate__(self, state: dict) -> None:
        # A bounded source reads what exists when a run begins; a run resumed from a snapshot
        # (a restart on Spark's checkpoint) begins again, so it looks at its partitions anew.
        self.__dict__.update(state)
        self._bounds = None
        self.__dict__.setdefault("_watching", False)
        self.assignment = None  # the restoring task hands the shared one again
        self.__dict__.setdefault("_idle_ms", None)
        self.__dict__.setdefault("_ends", {})
        self.__dict__.setdefault("positions", None)
        self.__dict__.setdefault("time_index", None)
        self._forget_partition_events()

    # ---- what a subclass provides ---------------------------------------------------------
    def discover(self) -> list[str]:
        """The partitions that exist now (all tasks' partitions; `mine` picks this task's)."""
        raise NotImplementedError

    def initial_offset(self, partition: str) -> Any:
        raise NotImplementedError

    def end_offset(self, partition: str, start: Any) -> Any:
        """The offset just past the last record readable now (`start` if none is new)."""
        raise NotImplementedError

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        """Yield `(offset, values)` for every record in `[start, end)`; `values` is a list, or a
        `MalformedRecord` for a record that could not be read. A source that skips records (a
        filter) yields, when `time_index` is set, a `Skipped` marker before the next record for
        each run of them (their offsets still count: a range's end is unchanged)."""
        raise NotImplementedError

    def next_offset(self, partition: str, offset: Any) -> Any:
        """An end that makes `read(partition, offset, end)` yield the one record at `offset`."""
        return offset + 1

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> Any:
        """Where a range starting at `start` should end, given a budget of records."""
        return end

    def estimate(self, r: Range) -> int:
        """Records in a range, as far as the planner can tell without reading it."""
        return 1

    # ---- Spout ----------------------------------------------------------------------------
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream(self.stream, self.fields)
        declarer.declare_stream(MALFORMED, MALFORMED_FIELDS)
        declarer.declare_stream(DEAD_LETTER, DEAD_LETTER_FIELDS)
        declarer.declare_stream(PARTITIONS_STREAM, Fields(*PARTITIONS_FIELDS))

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.component = context.this_component_id
        self._task_index = context.this_task_index
        self._tasks = len(context.this_component_tasks)
        self._watching = bool(context.this_targets.get(PARTITIONS_STREAM))
        self._idle_ms = idle_timeout_ms(conf)
        index = event_time_index(self, conf)
        if index is None or not self._watching:
            self.positions = None
        elif self.positions is None or self.positions.index != index:
            self.positions = SourcePositions(index)
        else:
            self.positions.forget_told()  # restored from a snapshot: say everything again
        self.time_index = None if self.positions is None else self.positions.index
        self._forget_partition_events()

    # Fixed partition lists (memory, Redis streams) are dealt out by position, evenly; partitions
    # that come and go (files) by the shared assignment, or a stable hash of the name, so none
    # ever changes task.
    assign_by_hash = False

    def mine(self, partitions: Iterable[str]) -> list[str]:
        if self._tasks == 1:
            return list(partitions)
        if self.assign_by_hash and self.assignment is not None:
            return self.assignment.mine(self._task_index, partitions)
        if self.assign_by_hash:
            return [p for p in partitions
                    if zlib.crc32(p.encode()) % self._tasks == self._task_index]
        return [p for i, p in enumerate(partitions) if i % self._tasks == self._task_index]

    def plan(self, budget: int, max_ranges: int | None = None) -> list[Range]:
        """The next ranges to read: failed ranges first, then new records of every partition,
        until about `budget` records or `max_ranges` ranges. Advances this task's offsets.

        All or nothing: when a call it makes raises (the store is down while listing partitions
        or their ends), nothing changes: the failed ranges still wait and no offset has moved,
        so the next plan offers the same records again instead of losing those it had taken."""
        out: list[Range] = []

        def room() -> bool:
            return budget > 0 and (max_ranges is None or len(out) < max_ranges)

        for r in self._replay_ranges:
            if not room():
                break
            out.append(r)
            budget -= self.estimate(r)
        replays = len(out)
        bounds = self._bounds
        offsets: dict[str, Any] = {}  # what this plan moves, applied once nothing can raise
        if bounds is None and self.bounded:
            bounds = {}
            for p in self.mine(self.discover()):
                start = self._offsets.get(p)
                if start is None:
                    start = offsets[p] = self.initial_offset(p)
                bounds[p] = self.end_offset(p, start)
        listing = None if bounds is not None else self.discover()
        partitions = self.mine(listing) if listing is not None else list(bounds or ())
        ends: dict[str, Any] = {}
        for p in partitions:
            if not room():
                break
            start = offsets.get(p, self._offsets.get(p))
            if start is None:
                start = offsets[p] = self.initial_offset(p)
            end = bounds[p] if bounds is not None else self.end_offset(p, start)
            if listing is not None:
                ends[p] = end
            if not end > start:
                continue
            r = Range(p, start, self.cut(p, start, end, budget))
            offsets[p] = r.end
            out.append(r)
            budget -= self.estimate(r)
        for _ in range(replays):
            self._replay_ranges.popleft()
        self._bounds = bounds
        self._offsets.update(offsets)
        if listing is not None:
            self._report_vanished(set(listing))
            self._ends.update(ends)
        self._seen = partitions
        self._planned.update(r.partition for r in out[replays:])
        return out

    def _report_vanished(self, listed: set[str]) -> None:
        """A partition that is no longer listed although records the last plans saw in it were
        not read (a file deleted before it was read to its end): its unread records cannot be
        read any more, which is reported (an error of the spout, with the partition and the
        offsets), not lost in silence. One read to its end and then removed is not."""
        for p in [p for p in self._ends if p not in listed]:
            end = self._ends.pop(p)
            start = self._offsets.get(p)
            if start is None or not end > start:
                continue
            error = SourceError(
                f"source {self.component!r}: {p!r} disappeared before it was read to its end: "
                f"its records from offset {start!r} to {end!r} were not read and cannot be; "
                "restore it under the same name to read them", component=self.component)
            collector = getattr(self, "collector", None)
            if collector is not None:
                collector.report_error(error)

    def next_tuple(self) -> None:
        # The local runner's path: one record per call, from a buffer filled a plan at a time.
        # Replays and new records take turns, so a record that fails every time cannot keep the
        # other partitions (and the rest of its own) from being read.
        replay = bool(self._replay_records) and not (
            self._replayed_last and (self._buffer or not self.is_read_out()))
        self._replayed_last = replay
        if replay:
            p, offset = self._replay_records[0]
            try:
                records = list(self.read(p, offset, self.next_offset(p, offset)))
            except SourceError as exc:
                self._report_once(exc)  # it stays first in line: read again on a later call
                return
            self._replay_records.popleft()
            self._last_error = None
            for off, values in records:
                if values.__class__ is not Skipped:  # a replay carries no position
                    self._emit(p, off, values, replay=True)
            return
        if not self._buffer:
            try:
                ranges = self.plan(self.records_per_call)
            except SourceError as exc:
                # A store that is down fails every call: report it when it starts or changes,
                # not on every poll. A plan that fails moves nothing, so nothing is lost.
                self._report_once(exc)
                return
            for i, r in enumerate(ranges):
                try:
                    # Whole ranges only: a range that fails halfway is read again from its start.
                    records = list(self.read(*r))
                except SourceError as exc:
                    # Its offsets have moved past it: it and the ranges after it wait in front
                    # of the failed ranges, and the next plan hands them out first.
                    self._replay_ranges.extendleft(reversed(ranges[i:]))
                    self._report_once(exc)
                    break
                self._buffer.extend((r.partition, off, v) for off, v in records)
            else:
                self._last_error = None
        while self._buffer:
            partition, offset, values = self._buffer.popleft()
            if values.__class__ is Skipped:
                # Records a filter skipped: their event times move the partition's position.
                if self.positions is not None:
                    self.positions.passed(partition, values.max_ts)
                continue
            self._emit(partition, offset, values)
            return

    def _report_once(self, exc: SourceError) -> None:
        if str(exc) != self._last_error:
            self._last_error = str(exc)
            self.collector.report_error(exc)

    def _emit(self, partition: str, offset: Any, values: Any, replay: bool = False) -> None:
        if self._watching and partition != self._from:
            self._from = partition
            self.collector.emit_control([FROM, [partition]], PARTITIONS_STREAM)
        msg_id = (partition, offset)
        if isinstance(values, MalformedRecord):
            self.collector.report_error(values)
            self.collector.emit([partition, offset, values.record, str(values)], msg_id=msg_id,
                                stream=MALFORMED)
        elif self.positions is not None:
            # The record's position travels with everything derived from it; a replay's is
            # not its first attempt's, so it carries none.
            position = self.positions.position(partition, values)
            collector = self.collector
            collector.set_source_at(None if replay else position)
            try:
                collector.emit(values, msg_id=msg_id, stream=self.stream)
            finally:
                collector.set_source_at(None)
        else:
            self.collector.emit(values, msg_id=msg_id, stream=self.stream)

    def fail(self, msg_id: Any) -> None:
        if isinstance(msg_id, Range):
            self._replay_ranges.append(msg_id)
        else:
            self._replay_records.append(msg_id)

    # ---- partition events for the operators' watermarks (squall.partition_watermarks) -------
    def watch_partitions(self, now_ms: int) -> None:
        """Tell the operators what changed about this task's partitions since the last call:
        the partitions it owns (`own`), those with nothing new for the idleness timeout
        (`idle`), those read to their end (`done`). Called by the task after each poll (the
        local runner) or plan (the Spark reader), with the runner's processing time."""
        if not self._watching or self._seen is None:
            return  # nobody listens, or nothing planned yet: nothing to say
        emit = self.collector.emit_control
        owned = tuple(sorted(self._seen))
        if owned != self._owned:
            self._owned = owned
            emit([OWN, list(owned)], PARTITIONS_STREAM)
        buffered = {p for p, _off, _v in self._buffer}
        read_out = self._read_out_partitions() - buffered
        planned, self._planned = self._planned, set()
        for p in planned:
            self._last_new[p] = now_ms
        self._idle -= planned
        if self._idle_ms is not None:
            idle = [p for p in owned if p not in self._idle and p not in buffered
                    and p not in read_out  # a finished partition is done, not idle
                    and now_ms - self._last_new.setdefault(p, now_ms) >= self._idle_ms]
            if idle:
                self._idle.update(idle)
                if self._from in idle:
                    self._from = None  # its next record says `from` again, which wakes it
                emit([IDLE, idle], PARTITIONS_STREAM)
        if self.positions is not None and not buffered:
            # How far the partitions have been read, once every record planned is out (the
            # operators apply it at their batch end). On Spark the executors say it per range.
            progress = self.positions.progress()
            if progress:
                emit([AT, progress], PARTITIONS_STREAM)
        if self._bounds is not None:
            # Done once read out at the previous call as well: on Spark the ranges a plan made
            # are read after the rows the reader emits with it, so the event waits a plan.
            done = sorted((read_out & self._read_out) - self._done)
            self._read_out = read_out
            if done:
                self._done.update(done)
                emit([DONE, done], PARTITIONS_STREAM)

    def _read_out_partitions(self) -> set[str]:
        """The partitions planned up to their bounds (a bounded source; none otherwise)."""
        bounds = self._bounds or {}
        return {p for p, end in bounds.items() if not end > self._offsets.get(p, end)}

    def is_read_out(self) -> bool:
        """A bounded source has planned every record up to its bounds (replays aside)."""
        return self._bounds is not None and len(self._read_out_partitions()) == len(self._bounds)

    def split(self, r: Range) -> list[RecordRange] | None:
        """A failed range's records as ranges of one record each (read again here to find their
        offsets), so each is replayed and counted on its own; None if it cannot be read."""
        try:
            return [RecordRange(r.partition, off, self.next_offset(r.partition, off))
                    for off, values in self.read(*r) if values.__class__ is not Skipped]
        except Exception:
            return None  # its store is down, say

    def record(self, partition: str, offset: Any) -> list[Any] | None:
        """The values of the one record at `offset` (a malformed one's text), or None when it
        cannot be read: what the dead-letter stream carries for a Spark range."""
        try:
            for _off, values in self.read(partition, offset, self.next_offset(partition, offset)):
                if values.__class__ is Skipped:
                    continue
                if isinstance(values, MalformedRecord):
                    return [values.record]
                return list(values)
        except Exception:
            return None
        return None

    def is_exhausted(self) -> bool:
        if not self.bounded or self._replay_ranges or self._replay_records or self._buffer:
            return False
        return self.is_read_out()

    # ---- positions: what the local runner's checkpoint keeps ---------------------------------
    def position(self) -> dict[str, Any]:
        """Where this task's reading stands, as plain picklable data.

        `offsets`: per partition, the offset of the first record not yet emitted (records read
        ahead into the buffer but not emitted count as unread). `replay`: the records that
        failed and wait to be emitted again, and `ranges` the failed ranges (Spark's unit).
        Taken at a transaction's cut, it is what a restart resumes from (`seek`).
        """
        offsets = dict(self._offsets)
        # The buffer is in read order per partition: the last assignment made walking it
        # backwards is the partition's first buffered offset.
        for partition, offset, _values in reversed(self._buffer):
            offsets[partition] = offset
        return {"offsets": offsets, "replay": list(self._replay_records),
                "ranges": list(self._replay_ranges)}

    def seek(self, position: Mapping[str, Any]) -> None:
        """Continue from `position` (from `position()` of this task in an earlier run): records
        before the offsets are not read again, the failed ones are emitted first. Call after
        `open`. A bounded source then reads up to what exists now."""
        self._offsets = dict(position["offsets"])
        if self.assignment is not None:
            self.assignment.claim(self._task_index, self._offsets)
        self._replay_records = deque(position.get("replay", ()))
        self._replay_ranges = deque(position.get("ranges", ()))
        self._buffer.clear()
        self._bounds = None

    def malformed(self, record: Any, message: str, field: str | None = None) -> MalformedRecord:
        error = MalformedRecord(message, component=self.component, stream=self.stream,
                                field=field)
        error.record = record if isinstance(record, str) else json.dumps(record, default=str)
        return error


def event_time_index(source: PartitionedSource, conf: Mapping[str, Any]) -> int | None:
    """The position of the source's event-time field (`squall.source.event.time.field`) in its
    records, or None when it has none.

    >>> class S(PartitionedSource): pass
    >>> event_time_index(S(["word", "ts"]), {"squall.source.event.time.field": "ts"})
    1
    >>> event_time_index(S(["word"]), {"squall.source.event.time.field": "ts"})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.components.partitioned_source.SourceError: source 'S': ... is 'ts', which is not ...
    """
    name = conf.get(SQUALL_SOURCE_EVENT_TIME_FIELD)
    if name is None:
        return None
    fields = source.fields.to_list()
    if name not in fields:
        raise SourceError(
            f"source {source.component!r}: {SQUALL_SOURCE_EVENT_TIME_FIELD} is {name!r}, which "
            f"is not a field of its stream {source.stream!r} ({fields}); name one of its "
            "fields, or unset the key", component=source.component)
    return fields.index(name)
