"""The windowed role: the framework's side of one Storm `WindowedBolt` in one task.

The bolt (squall.components.windowed) holds the user's configuration (`with_window`, timestamps,
lag, late stream). `WindowedRole` holds what the task needs to run it: the window manager
(squall.tuple_windows), the collector that anchors `execute(window)`'s emits to the window
(`WindowedOutputCollector`), the task's collector it acks through, and the count of tuples
without a valid timestamp. It calls the bolt's `execute(window)` for each window, acks each input
tuple when it leaves its last window, routes late tuples and tuples without a valid timestamp.
A task snapshot carries `saved()`; the bolt reads its counter through the link the adapter sets
(`WindowedBolt._task_side`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from squall.components.context import TopologyContext
from squall.components.side_records import LATE, SideRecords, watermark_ms
from squall.components.windowed import (
    ERROR_STREAM,
    LATE_TUPLE_STREAM,
    SOURCE_WATERMARKS,
    TIMESTAMP_ERRORS_FATAL,
    TIMESTAMP_FIELD,
    WindowedBolt,
    WindowTimestampError,
)
from squall.partition_watermarks import PARTITIONS_STREAM
from squall.protocols import OutputCollectorLike
from squall.task.collectors import WindowedOutputCollector
from squall.task.roles.base import WindowRole, carried_inputs, source_partition_tasks
from squall.timestamps import valid_timestamp
from squall.topology.tuple import TICK_STREAM, Origin, Tuple, _RuntimeTuple, is_tick_tuple
from squall.tuple_windows.columnar import process_columns, unsupported
from squall.tuple_windows.manager import Activation, Expired, Late, WindowManager
from squall.tuple_windows.spec import WindowSpec
from squall.tuple_windows.window import TupleWindow

log = logging.getLogger("squall")

# What a task snapshot carries (`saved`): everything `setup` built and the input changed. The
# collectors among them pickle as references to the restoring task's (squall.task.snapshot).
_SAVED = ("out", "collector", "manager", "late_records", "error_records", "fatal", "field",
          "window_errors")
_MAX_ENTRIES = 1024  # origins whose entry `execute` keeps (`_entry`)
_reported: set[str] = set()  # why a role's batches went tuple by tuple, said once each


class WindowedRole(WindowRole):
    """The role adapter of the `windowed` role (see the module doc)."""

    instance: WindowedBolt
    manager: WindowManager

    def __init__(self, instance: WindowedBolt) -> None:
        super().__init__(instance)
        self.window_errors = 0  # tuples routed to `window_errors` (read as bolt.window_errors)
        # Per upstream origin (one per emitting task and stream, shared by its tuples): how
        # `execute` reads a tuple's event time and where the window manager says it came from
        # (`_entry`). Derived from the configuration, so not saved in snapshots.
        self._entries: dict[Any, tuple[Any, int | None]] = {}

    # ---- set up, snapshots ---------------------------------------------------------------
    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> WindowedOutputCollector:
        """Build the window for this task; returns the collector `prepare` gets."""
        bolt = self.instance
        self.out = out
        self.collector = WindowedOutputCollector(out)
        self.manager = self.new_manager(bolt.window_spec(conf), conf, context)
        late_stream = conf.get(LATE_TUPLE_STREAM)
        self.late_records = None if late_stream is None else SideRecords.of(context, late_stream)
        self.error_records = SideRecords.of(context, ERROR_STREAM) if bolt.event_time else None
        self.fatal = bool(conf.get(TIMESTAMP_ERRORS_FATAL))
        # Event time has a timestamp field or an extractor (WindowedBolt.check_window).
        self.field: str = conf.get(TIMESTAMP_FIELD) or ""
        self.extractor: Callable[[Tuple], Any] | None = bolt.timestamp_extractor()
        self.window_errors = 0
        self._entries = {}
        bolt._task_side = self
        return self.collector

    def new_manager(self, spec: WindowSpec, conf: Mapping[str, Any],
                    context: TopologyContext) -> WindowManager:
        """The task's window manager over its input streams (with source watermarks, over the
        upstream sources' partitions)."""
        streams = [s for s in context.this_sources if s[1] != PARTITIONS_STREAM]
        # Positions carried from the sources (squall.partition_watermarks): each tuple judged
        # at its source position, against its own partition (docs/design/source-watermarks.md).
        carried = bool(spec.event_time and carried_inputs(context)[0])
        tasks = source_partition_tasks(context, carried=[carried])[0] if (
            carried or conf.get(SOURCE_WATERMARKS)) else None
        return WindowManager(spec, streams, tasks, carried=carried and bool(tasks))

    def saved(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _SAVED if name in self.__dict__}

    def restore(self, saved: Any, instance: Any) -> None:
        super().restore(saved, instance)
        if saved:
            for name, value in saved.items():
                setattr(self, name, value)
            self.extractor = instance.timestamp_extractor()  # the bolt's configuration
            instance._task_side = self
        self._entries = {}

    def events_in_memory(self) -> int:
        """How many tuples the window holds now."""
        manager = self.__dict__.get("manager")
        return 0 if manager is None else len(manager.events)

    # ---- tuples --------------------------------------------------------------------------
    def execute(self, tup: Tuple, now_ms: int) -> None:
        # Every input tuple comes through here: an event-time tuple takes the short way (its
        # origin's entry says where its timestamp is and what source it counts for), anything
        # else `_execute_other`.
        origin = tup._origin
        entry = self._entries.get(origin)
        if entry is None:
            if len(self._entries) >= _MAX_ENTRIES:
                # A Spark stage makes new origins for every batch while the task lives on in
                # its worker: the cache is dropped now and then rather than kept for ever.
                self._entries.clear()
            entry = self._entries[origin] = self._entry(tup)
        source, index = entry
        if source is None:
            self._execute_other(tup, now_ms)
            return
        try:
            ts = self.timestamp(tup) if index is None else valid_timestamp(tup.values[index])
        except Exception as exc:
            self.invalid(tup, exc)
            return
        manager = self.manager
        actions: Sequence[Any]
        if manager.carried:
            actions = manager.add_at(tup, now_ms, ts, source, self._source_at())
        else:
            actions = manager.add_event(tup, now_ms, ts, source)
        if actions:
            self.apply(actions)

    def columns_reason(self) -> str | None:
        """Why this task's input cannot go through the window manager column-wise
        (`execute_columns`), or None if it can (`squall.tuple_windows.columnar.unsupported`)."""
        if type(self).execute is not WindowedRole.execute:
            return f"role {type(self).__name__} (it adds tuples its own way)"
        return unsupported(self.manager)

    def execute_columns(self, rows: Sequence[list[Any]], origin: Origin, now_ms: int,
                        on_error: Callable[[Tuple, Exception], None],
                        anchors: Sequence[dict[int, int] | None] | None = None,
                        task_id: int = -1) -> None:
        """`execute` of each of a run of input tuples of one origin (a source task's stream),
        given as their values `rows` in arrival order (with `anchors`, each row's anchors;
        None: all unanchored): the same acks, windows, late and error records in the same
        order, `on_error(tup, exc)` where `execute` raises for a tuple (the task fails it).

        Where the window manager can (`columns_reason`), the run's timestamps are read as a
        column (by position, or through the extractor) and the run goes through the manager
        column-wise (`squall.tuple_windows.columnar.process_columns`), split only at tuples
        without a valid timestamp (routed as `execute` routes them). A tuple object is made for
        every row (the window holds each row that is not late until it expires, and acks it).
        Otherwise, and for ticks and partition events, each row goes through `execute` as a
        tuple; the reason is logged once."""
        n = len(rows)
        if anchors is None:
            tuples = [_RuntimeTuple(r, origin, None, task_id) for r in rows]
        else:
            tuples = [_RuntimeTuple(r, origin, a, task_id)
                      for r, a in zip(rows, anchors, strict=True)]
        reason = self.columns_reason()
        control = origin.stream in (TICK_STREAM, PARTITIONS_STREAM)
        if reason is not None or control or not n:
            if reason is not None and reason not in _reported:
                _reported.add(reason)
                log.info("windowed bolt %s: tuples go one by one, not column-wise: %s",
                         type(self.instance).__name__, reason)
            self._execute_each(tuples, now_ms, on_error)
            return
        manager = self.manager
        if not manager.spec.event_time:
            self.apply([a for _, a in process_columns(
                manager, tuples, None, None, (), now_ms).actions])
            return
        source, index = self._entry(tuples[0])
        assert source is not None
        # The timestamps as a column; the ones that are not ints read again one by one (a float
        # is floored, anything else makes the tuple an error record where it stands).
        raw: list[Any] | None = None
        if index is not None:
            raw = list(map(itemgetter(index), rows))
        elif self.extractor is not None:
            try:
                raw = list(map(self.extractor, tuples))
            except Exception:
                raw = None  # (one by one below, each error where it stands)
        if raw is None:
            raw = [None] * n
            odd = list(range(n))
        else:
            odd = [k for k, t in enumerate(raw) if t.__class__ is not int]
        lo = 0
        for k in odd:
            try:
                raw[k] = self.timestamp(tuples[k]) if index is None else valid_timestamp(raw[k])
            except Exception as exc:
                self._execute_run(tuples, raw, lo, k, source, now_ms)
                lo = k + 1
                try:
                    self.invalid(tuples[k], exc)
                except Exception as error:
                    on_error(tuples[k], error)
        self._execute_run(tuples, raw, lo, n, source, now_ms)

    def _execute_run(self, tuples: Sequence[Tuple], tss: list[Any], lo: int, hi: int,
                     source: tuple[Any, int], now_ms: int) -> None:
        if hi > lo:
            if lo or hi < len(tuples):
                tuples, tss = tuples[lo:hi], tss[lo:hi]
            result = process_columns(self.manager, tuples, tss, [0] * len(tss), [source],
                                     now_ms)
            self.apply([a for _, a in result.actions])

    def _execute_each(self, tuples: Sequence[Tuple], now_ms: int,
                      on_error: Callable[[Tuple, Exception], None]) -> None:
        for tup in tuples:
            try:
                self.execute(tup, now_ms)
            except Exception as exc:
                on_error(tup, exc)

    def _source_at(self) -> int | None:
        """The position the host carries for the tuple executing (squall.partition_watermarks)."""
        at = getattr(getattr(self.out, "_out", self.out), "source_at", None)
        return None if at is None else at()

    def _entry(self, tup: Tuple) -> tuple[Any, int | None]:
        """(source, index) for the tuples of `tup`'s origin: `source` is what
        `WindowManager.add_event` takes ((component, stream), task), None for tuples that are
        not event-time data (ticks, partition events, any tuple of a processing-time window);
        `index` is the timestamp field's position in the tuple's values, None when an extractor
        reads it or the stream lacks the field (`timestamp` then raises the error the tuple is
        routed with)."""
        origin = tup._origin
        if is_tick_tuple(tup) or origin.stream == PARTITIONS_STREAM or \
                not self.manager.spec.event_time:
            return None, None
        index = None if self.extractor is not None else origin.fields._index.get(self.field)
        return ((origin.component, origin.stream), origin.task), index

    def _execute_other(self, tup: Tuple, now_ms: int) -> None:
        manager = self.manager
        if is_tick_tuple(tup):
            self.apply(manager.tick(now_ms))
            return
        if tup._origin.stream == PARTITIONS_STREAM:
            event, partitions = tup.values
            self.apply(manager.partition_event(tup._origin.task, event, partitions, now_ms))
            return
        self.apply(manager.add(tup, now_ms))  # processing time (`_entry`)

    def end_batch(self, batch_id: int, now_ms: int) -> None:
        """With positions, the watermark moves at batch ends (`WindowManager.apply_positions`)."""
        if self.manager.carried:
            self.apply(self.manager.apply_positions())

    def end_of_input(self, now_ms: int) -> None:
        if self.manager.carried:
            self.apply(self.manager.apply_positions())
        self.apply(self.manager.end_of_input(now_ms))

    def timestamp(self, tup: Tuple) -> int:
        """The tuple's event time (ms), from the extractor or the timestamp field."""
        value = self.extractor(tup) if self.extractor is not None else tup[self.field]
        return valid_timestamp(value)

    def invalid(self, tup: Tuple, exc: Exception) -> None:
        """A tuple without a valid timestamp: counted, routed to `window_errors` and acked (or,
        with `squall.window.timestamp.errors.fatal`, an error of the task)."""
        self.window_errors += 1
        error = WindowTimestampError(f"no valid timestamp: {type(exc).__name__}: {exc}")
        if self.fatal:
            raise error from exc
        log.warning("windowed bolt %s: tuple %r routed to %r: %s",
                    type(self.instance).__name__, tup, ERROR_STREAM, error)
        out = self.out
        assert self.error_records is not None, "only event time reads timestamps"
        watermark = self.manager.watermark
        record = self.error_records.values(tup, None, watermark_ms(watermark), str(error))
        out.emit(record, anchors=tup, stream=ERROR_STREAM)
        out.ack(tup)

    def apply(self, actions: Sequence[Any]) -> None:
        """Carry out what the window manager decided: ack expired tuples, evaluate windows,
        route late tuples."""
        out = self.out
        for action in actions:
            if isinstance(action, Expired):
                ack = out.ack
                for tup in action.events:
                    if tup._state == 0:  # a tuple failed by a failing execute stays failed
                        ack(tup)
            elif isinstance(action, Activation):
                self.activate(action.window)
            elif isinstance(action, Late):
                tup = action.event
                self.late_count += 1
                if self.late_records is not None:
                    record = self.late_records.values(
                        tup, action.ts, watermark_ms(action.watermark), LATE)
                    out.emit(record, anchors=tup, stream=self.late_records.stream)
                else:
                    log.info("windowed bolt %s: late tuple %r (ts %s < watermark %s)",
                             type(self.instance).__name__, tup, action.ts, action.watermark)
                out.ack(tup)

    def held(self) -> int | None:
        manager = getattr(self, "manager", None)
        events = getattr(manager, "events", None)
        return None if events is None else len(events)

    def activate(self, window: TupleWindow) -> None:
        """Call the bolt's `execute(window)`, its unanchored emits anchored to the window."""
        collector = self.collector
        # Only tuples in a tracked tree take part in anchoring; leaving the others out keeps an
        # emit of an untracked window O(1) instead of O(window) (Storm pays O(window) per emit).
        tracked = [t for t in window.get() if t._anchors]
        collector.anchors = tracked or None
        try:
            self.instance.execute(window)
        except Exception as exc:
            # Storm would lose the worker and replay the window's trees after their timeout;
            # failing them now replays them sooner, and the bolt keeps running.
            self.out.report_error(exc)
            for tup in window.get():
                if tup._state == 0:
                    self.out.fail(tup)
        finally:
            collector.anchors = None
