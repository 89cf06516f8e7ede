"""The operator role: the framework's side of one windowed operator (squall.windows) in one task.

An operator (`KeyedWindowedOperator`, `WindowedOperator`, `WindowedMergeOperator`) holds the
user's configuration; `OperatorRole` holds what its task needs to run it: the pane engine
(`squall.panes.engine.WindowedEngine`) and, for `stateful=True`, its stores over the task's state,
the input watermarks, the watermark not yet sent downstream, the counters of late and invalid
tuples, and the output collector. The task gives it every input tuple with its processing time
(`execute`), the batch ends (`end_batch`) and the end of input; a task snapshot carries `saved()`
(for an in-memory operator the engine's panes, for a stateful one what is not in the state).

Stateful operators (role `stateful-operator`) resume from their state through the checkpoint
protocol's hooks, which are methods of this adapter: `init_state`, `pre_prepare`, `pre_commit`,
`pre_rollback`.

The operator's module (squall.components.operators) describes the semantics; the reasons are in
docs/design/windowed-operators.md.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import pickle
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from squall.components.context import TopologyContext
from squall.components.operators import WATERMARK_STREAM, WindowedOperatorBase
from squall.components.side_records import LATE, SideRecords, watermark_ms
from squall.components.windowed import ERROR_STREAM
from squall.panes.columnar import (
    LATE_TUPLE,
    ON_TIME_ROWS,
    cannot_fail,
    process_columns,
    unsupported,
)
from squall.panes.engine import (
    ACCEPTED,
    WATERMARK_DUE,
    WATERMARK_MOVED,
    WindowedEngine,
)
from squall.panes.input_watermarks import InputWatermarks
from squall.panes.state_mapping import META_KEY, StateSessions, StateWindowStore
from squall.panes.windows import Window
from squall.partition_watermarks import PARTITIONS_STREAM, PartitionWatermarks
from squall.protocols import OutputCollectorLike
from squall.reliability.retries import DEAD_LETTER, DEAD_LETTER_FIELDS
from squall.state.base import KeyValueState
from squall.task.collectors import OutputCollector
from squall.task.roles.base import (
    InvalidLog,
    LateLog,
    WindowRole,
    carried_inputs,
    input_resolver,
    source_partition_tasks,
)
from squall.task.snapshot import SnapshotFormatError
from squall.timestamps import valid_timestamp
from squall.topology.config import Config, retry_settings
from squall.topology.fields import Fields
from squall.topology.tuple import TICK_STREAM, Origin, Tuple, _RuntimeTuple

log = logging.getLogger("squall")

# Streams `execute_columns` leaves to `execute` (control, not data).
_CONTROL = frozenset((WATERMARK_STREAM, TICK_STREAM, PARTITIONS_STREAM, DEAD_LETTER))

# The hot path's commonest results of `WindowedEngine.process(..., delay=)` besides ACCEPTED.
_MOVED = ACCEPTED | WATERMARK_MOVED

# What a task snapshot carries (`saved`): everything `setup` and the input built, except the
# operator (the snapshot has it) and the field-position cache of the fast path (rebuilt from the
# first tuple). The collectors among them pickle as references to the restoring task's.
_SAVED = (
    "_out", "_bulk", "_inputs", "_n_inputs", "_sources", "_partition_tasks", "_dead_letters",
    "_holding", "_sends_wm", "_carried", "_behind", "_behind_seq",
    "_fast", "_late_log", "_invalid_log",
    "_keyed", "_late_records", "_error_records",
    "engine", "watermarks", "_pending_wm", "late_tuples", "window_errors",
    "_state", "_store", "_session_store", "_stale",
)


class OperatorRole(WindowRole):
    """The role adapter of the `operator` and `stateful-operator` roles (see the module doc)."""

    instance: WindowedOperatorBase
    # Panes derive from inputs acked long before: unanchored, also in a stateful topology.
    emits_unanchored = True

    def __init__(self, instance: WindowedOperatorBase) -> None:
        super().__init__(instance)
        self._state: KeyValueState | None = None
        self._store: StateWindowStore | None = None
        self._session_store: StateSessions | None = None
        self._stale = False

    # ---- set up, snapshots ---------------------------------------------------------------
    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> Any:
        """Build the task's engine and watermarks; returns `out`, the collector `prepare` gets."""
        op = self.instance
        self._out = out
        n_inputs = self._n_inputs = op.n_inputs
        sources: list[set[int]] = [set() for _ in range(n_inputs)]
        inputs: dict[str, int] = {}
        resolve = input_resolver(context, op.input_of)
        # Data streams first: a component's data always goes to the input it feeds directly;
        # a source reached only through bolts takes the input behind them (None: both).
        for (cid, stream) in sorted(context.this_sources, key=lambda s: s[1].startswith("_")):
            i = (op.input_of(cid) if not stream.startswith("_")
                 else inputs[cid] if cid in inputs else resolve(cid))
            if i is None:
                continue  # a source behind both inputs: its events count for neither
            inputs[cid] = i
            if stream == WATERMARK_STREAM:
                sources[i].update(context.component_tasks(cid))
        self._inputs = inputs
        self._sources = [frozenset(s) for s in sources]
        # Inputs read from partitioned sources take their watermark per source partition; where
        # the sources carry positions, also through bolts (squall.partition_watermarks).
        self._carried = carried_inputs(context, n_inputs, op.input_of)
        self._partition_tasks = source_partition_tasks(context, n_inputs, op.input_of,
                                                       self._carried)
        # ... and hear of the records those sources dead-letter (the builder subscribes them).
        self._dead_letters = frozenset(
            cid for (cid, stream) in context.this_sources if stream == PARTITIONS_STREAM)
        # A failed tuple holds the watermark only where its source gives up on it after a
        # retry limit (a dead letter ends the hold); replayed for ever, it would stop the
        # windows for good.
        self._holding = frozenset(
            cid for cid in self._dead_letters if retry_settings(Config.effective_of(
                context.conf, context.topology.components[cid].conf))[0] is not None)
        self._late_log = LateLog(log, context.this_component_id)
        self._invalid_log = InvalidLog(log, context.this_component_id)
        self._late_records = (None if op.late_stream is None else
                              SideRecords.of(context, op.late_stream))
        self._error_records = SideRecords.of(context, ERROR_STREAM)
        self._sends_wm = bool(context.this_targets.get(WATERMARK_STREAM))
        self._keyed = op.keyed
        self._fresh()
        # Fields for timestamp, key and value, one input, the watermark generated only: the
        # per-tuple work can skip the general extraction and watermark bookkeeping.
        ts_f, key_f, value_f = op.timestamp_fields[0], op.key_fields[0], op.value_fields[0]
        delay = op.watermark_delay_ms
        self._fast: tuple[str, str | None, str, int] | None = None
        if (n_inputs == 1 and not sources[0] and self._partition_tasks[0] is None
                and delay is not None and ts_f is not None
                and value_f is not None and (not op.keyed or key_f is not None)):
            self._fast = (ts_f, key_f, value_f, delay)
        self._reset_fast_cache()
        # Panes go to the task's collector in bulk (`emit_many`); in a stateful topology `out`
        # wraps that collector (and passes unanchored emits through).
        collector = getattr(out, "_out", out)
        self._bulk = collector if isinstance(collector, OutputCollector) else None
        return out

    def _reset_fast_cache(self) -> None:
        # The field positions of the fast path, for the last input stream's Fields (all tuples
        # of one upstream stream share it): an identity check instead of three name lookups.
        self._fast_fields: Fields | None = None
        self._fast_index = (0, 0, 0)
        # The position the host carries for the tuple executing (squall.partition_watermarks).
        collector = getattr(self._out, "_out", self._out)
        self._source_at = getattr(collector, "source_at", None)

    def _fresh(self, store: StateWindowStore | None = None,
               sessions: StateSessions | None = None) -> None:
        """The state of a task that has seen nothing (with `store` and `sessions`: in them)."""
        op = self.instance
        self.engine = WindowedEngine.of(op.windowing, op.accumulation, store, sessions)
        delay = op.watermark_delay_ms
        self.watermarks = InputWatermarks(list(self._sources), delay, [
            None if tasks is None or delay is None
            else PartitionWatermarks(frozenset(tasks), delay, dict(tasks))
            for tasks in self._partition_tasks])
        self._pending_wm: int | None = None
        self.late_tuples = 0
        self.window_errors = 0
        # Tuples behind their own partition's watermark for a window that has not had its
        # on-time pane here yet: applied when the operator's watermark reaches their position
        # (`_release`), so they land in the panes they would have had in source order.
        # (position, arrival number, key, ts, value, window, second) in a heap.
        self._behind: list[tuple[Any, ...]] = []
        self._behind_seq = 0

    def saved(self) -> dict[str, Any]:
        """The engine (in memory: its panes; stateful: what it loaded, the state is referenced),
        the watermarks, the counters and what `setup` derived from the topology."""
        return {name: getattr(self, name) for name in _SAVED}

    def restore(self, saved: Any, instance: Any) -> None:
        if not isinstance(saved, dict):
            raise SnapshotFormatError(
                f"snapshot of a {type(instance).__name__} task without its operator role's "
                "state (written before operators kept it in the role): start from a new "
                "checkpoint location")
        super().restore(saved, instance)
        # Snapshots written before partition watermarks lack their two entries.
        saved.setdefault("_partition_tasks", [None] * saved["_n_inputs"])
        saved.setdefault("_late_log", LateLog(log, type(instance).__name__))
        saved.setdefault("_invalid_log", InvalidLog(log, saved["_late_log"].component))
        saved.setdefault("_dead_letters", frozenset())  # (written before holds existed)
        saved.setdefault("_holding", frozenset())
        saved.setdefault("_carried", [False] * saved["_n_inputs"])  # (written before positions)
        saved.setdefault("_behind", [])
        saved.setdefault("_behind_seq", 0)
        for name in _SAVED:
            setattr(self, name, saved[name])
        self._reset_fast_cache()

    # ---- stateful-operator: the checkpoint protocol's hooks (as a StatefulBolt's) -----------
    def init_state(self, state: KeyValueState) -> None:
        """The task's state (`topology.state.provider`, namespace `<component>-<task>`): the
        windows move into it, and whatever it committed last is where the operator resumes."""
        self._state = state
        self._load()

    def _load(self) -> None:
        state = self._state
        assert state is not None, "init_state gives a stateful operator its state first"
        self._stale = False
        meta = state.get(META_KEY)
        progress = None if meta is None else pickle.loads(meta)
        self._store = StateWindowStore(state, None if progress is None else progress["chunks"])
        self._session_store = StateSessions(state)
        self._fresh(self._store, self._session_store)
        if progress is not None:
            self.engine.restore_progress(progress["engine"])
            self.watermarks = progress["watermarks"]
            self._pending_wm = progress["pending_wm"]
            self.late_tuples, self.window_errors = progress["counts"]
            self._behind, self._behind_seq = progress.get("behind", ([], 0))

    def pre_prepare(self, txid: int) -> None:
        """Before the state prepares `txid`: write what changed since the last prepare."""
        if self._stale:
            self._load()
        state, store, sessions = self._state, self._store, self._session_store
        assert state is not None and store is not None and sessions is not None, \
            "init_state comes before the first prepare"
        store.flush()
        sessions.flush()
        state.put(META_KEY, pickle.dumps({
            "engine": self.engine.progress(), "chunks": store.chunks,
            "watermarks": self.watermarks, "pending_wm": self._pending_wm,
            "counts": (self.late_tuples, self.window_errors),
            "behind": (self._behind, self._behind_seq)}, protocol=pickle.HIGHEST_PROTOCOL))

    def pre_commit(self, txid: int) -> None:
        """Nothing to do: the state commits what `pre_prepare` wrote."""

    def pre_rollback(self) -> None:
        """The state goes back to its last commit (right after this call): so does the operator,
        reloaded from it before its next tuple."""
        self._stale = True

    # ---- input -----------------------------------------------------------------------------
    def execute(self, tup: Tuple, now_ms: int) -> None:
        if self._stale:
            self._load()
        origin = tup._origin
        stream = origin.stream
        engine = self.engine
        if stream == WATERMARK_STREAM:
            w = self.watermarks.upstream(self._inputs[origin.component], origin.task,
                                         tup.values[0])
            if w is not None:
                self._advance(w, now_ms)
            return
        if stream == TICK_STREAM:
            return  # a wake-up: the batch end that follows runs the time triggers
        i = self._inputs.get(origin.component, -1) if self._n_inputs > 1 else 0
        if i < 0:  # a source behind both inputs (`input_resolver`): control for neither
            if stream == DEAD_LETTER:
                self._out.ack(tup)
            return
        if stream == PARTITIONS_STREAM:
            parts = self.watermarks.partitioned[i]
            if parts is not None:
                event, partitions = tup.values
                if parts.control(origin.task, event, partitions) is not None:
                    self._refresh(now_ms)
            return
        if stream == DEAD_LETTER and origin.component in self._dead_letters:
            # A source gave up on a record: a hold its failures here put on the watermark ends.
            parts = self.watermarks.partitioned[i]
            record = dict(zip(DEAD_LETTER_FIELDS, tup.values, strict=True))
            if parts is not None and record["values"] is not None and parts.release(
                    origin.task, record["values"], record["partition"]) is not None:
                self._refresh(now_ms)
            self._out.ack(tup)
            return
        fast = self._fast
        if fast is not None and i == 0:
            # The hot path: timestamp, key and value are fields, the watermark is generated.
            values = tup.values
            if origin.fields is self._fast_fields:
                i_ts, i_key, i_value = self._fast_index
            else:
                index = origin.fields._index
                try:
                    i_ts, i_value = index[fast[0]], index[fast[2]]
                    i_key = index[fast[1]] if fast[1] is not None else -1
                except KeyError as exc:
                    self._invalid(tup, exc, now_ms)
                    return
                self._fast_fields, self._fast_index = origin.fields, (i_ts, i_key, i_value)
            ts = values[i_ts]
            if ts.__class__ is int:
                # One engine call accumulates and moves the generated watermark when nothing
                # falls due below it; `_advance` runs only when something does.
                result = engine.process(values[i_key] if i_key >= 0 else None, ts,
                                        values[i_value], now_ms, False, None, fast[3])
                if result == ACCEPTED:  # most tuples: accumulated, the watermark stays
                    if engine.out:
                        self._flush()
                elif result == _MOVED:  # in-order input: a new largest timestamp
                    if engine.out:
                        self._flush()
                    self._pending_wm = engine.watermark  # sent lazily, as in `_advance`
                else:
                    if result & ACCEPTED:
                        if engine.out:
                            self._flush()
                    else:
                        self._late(tup, ts, now_ms)
                    if result & WATERMARK_MOVED:
                        # Sent lazily, as in `_advance`.
                        self._pending_wm = engine.watermark
                    elif result & WATERMARK_DUE:
                        self._advance(ts - fast[3], now_ms)
                self._out.ack(tup)
                return
        try:
            ts, window = self._timestamp(tup, i)
            key = self._key(tup, i)
            value = self._value(tup, i)
        except Exception as exc:
            self._invalid(tup, exc, now_ms)
            return
        out = self._out
        parts = self.watermarks.partitioned[i]
        if parts is not None:
            self._partitioned(tup, parts, ts, key, value, window, now_ms, i)
            return
        if engine.process(key, ts, value, now_ms, i == 1, window):
            if engine.out:
                self._flush()
        else:
            self._late(tup, ts, now_ms)
        w = self.watermarks.observe(i, ts)
        if w is not None:
            self._advance(w, now_ms)
        out.ack(tup)

    def _partitioned(self, tup: Tuple, parts: PartitionWatermarks, ts: int, key: Any,
                     value: Any, window: Window | None, now_ms: int, i: int) -> None:
        """A tuple of an input read from partitioned sources: judged by the operator's
        lateness rule against its own partition's watermark (squall.partition_watermarks), so
        which tuples are late does not depend on how partitions are spread over tasks or
        interleaved."""
        engine = self.engine
        task = tup._origin.task
        held = parts.held(task, tup.values) if parts.holds else None
        carried = self._carried[i]
        before: int | None
        if held is not None:
            # A replay of a tuple that failed here is judged as its first attempt was.
            before = held
        elif carried:
            # Its position came with it: its partition's watermark just before its record.
            at = self._source_at() if self._source_at is not None else None
            before = None if at is None else at - parts.delay
        else:
            before = parts.before(task)
        try:
            if before is None or before <= engine.watermark:
                # Judged against the operator's watermark: the partition's is not known yet, or
                # is behind it (a partition that was idle woke up late).
                before = None
                accepted = engine.process(key, ts, value, now_ms, i == 1, window)
            elif carried and engine.behind_unfired(ts, window, before):
                # Late for a window whose on-time pane is still to come here: it waits for the
                # watermark to reach its position, unless the lateness rule drops it now.
                accepted = not engine.drops_at(ts, window, before)
                if accepted:
                    self._behind_seq += 1
                    heapq.heappush(self._behind, (before, self._behind_seq, key, ts, value,
                                                  window, i == 1))
                else:
                    engine.dropped += 1
            else:
                accepted = engine.process_at(key, ts, value, now_ms, i == 1, window, before)
        except Exception:
            # Failed (the task fails the tuple): the watermark waits for its replay.
            if tup._origin.component in self._holding:
                parts.hold(task, tup.values, engine.watermark if before is None else before)
            raise
        if not accepted:
            self._late(tup, ts, now_ms, before)
        elif engine.out:
            self._flush()
        if held is not None and parts.release(task, tup.values) is not None:
            self._refresh(now_ms)
        if not carried and parts.observe(task, ts) is not None:
            self._refresh(now_ms)
        self._out.ack(tup)

    def columns_reason(self) -> str | None:
        """Why this task's data tuples cannot go through the engine column-wise
        (`execute_columns`), or None if they can: the hot path's conditions (timestamp, key and
        value fields, one input, the watermark generated, no partitioned sources), then the
        engine's (`squall.panes.columnar.unsupported`)."""
        if self._fast is None:
            return ("not the hot path (timestamp, key and value fields, one input, the "
                    "watermark generated from event time, no partitioned sources)")
        return unsupported(self.engine)

    def execute_columns(self, rows: Sequence[list[Any]], origin: Origin, now_ms: int,
                        on_error: Callable[[Tuple, Exception], None],
                        anchors: Sequence[dict[int, int] | None] | None = None,
                        task_id: int = -1) -> None:
        """`execute` of each of a run of input tuples of one origin (a source task's stream),
        given as their values `rows` in arrival order (with `anchors`, each row's anchors;
        None: all unanchored) rather than as tuple objects: the same output in the same order,
        `on_error(tup, exc)` where `execute` raises for a tuple (the task fails it, as when it
        calls `execute` itself).

        Where the hot path applies (`columns_reason`) the timestamp, key and value columns are
        taken from the rows by position, and each run of int timestamps whose values the
        accumulation cannot fail on (`squall.panes.columnar.cannot_fail`) goes through the
        engine column-wise (`squall.panes.columnar.process_columns`); every other row goes
        through `execute` as a tuple. A tuple object is made only for a row that needs one: a
        late record's anchor, `execute`, `on_error`, an anchored or a wrapped collector's ack;
        unanchored rows acked by the task's own collector are counted
        (`OutputCollector.ack_unanchored`)."""
        if self._stale:
            self._load()
        n = len(rows)

        def tuple_at(k: int) -> Tuple:
            return _RuntimeTuple(rows[k], origin, None if anchors is None else anchors[k],
                                 task_id)

        fast = self._fast
        where: tuple[int, int, int] | None = None
        if fast is not None and origin.stream not in _CONTROL:
            index = origin.fields._index
            ts_f, key_f, value_f, _delay = fast
            if ts_f in index and value_f in index and (key_f is None or key_f in index):
                where = (index[ts_f], -1 if key_f is None else index[key_f], index[value_f])
        if where is None:
            self._execute_each(tuple_at, 0, n, now_ms, on_error)
            return
        tss = list(map(itemgetter(where[0]), rows))
        lo = 0
        for b in [k for k, ts in enumerate(tss) if ts.__class__ is not int] + [n]:
            if b > lo:
                self._execute_run(rows, tss, lo, b, where, tuple_at, anchors is None, now_ms,
                                  on_error)
            if b < n:  # not an int: the general path's checks and errors
                self._execute_each(tuple_at, b, b + 1, now_ms, on_error)
            lo = b + 1

    def _execute_each(self, tuple_at: Callable[[int], Tuple], lo: int, hi: int, now_ms: int,
                      on_error: Callable[[Tuple, Exception], None]) -> None:
        """The per-tuple path of `execute_columns`: rows `lo` to `hi` through `execute`."""
        for k in range(lo, hi):
            tup = tuple_at(k)
            try:
                self.execute(tup, now_ms)
            except Exception as exc:
                on_error(tup, exc)

    def _execute_run(self, rows: Sequence[list[Any]], tss: list[Any], lo: int, hi: int,
                     where: tuple[int, int, int], tuple_at: Callable[[int], Tuple],
                     unanchored: bool, now_ms: int,
                     on_error: Callable[[Tuple, Exception], None]) -> None:
        """Rows `lo` to `hi` of `execute_columns`, data of the hot path with int timestamps
        `tss[lo:hi]`, their key and value at `where`: column-wise where the accumulation cannot
        fail on them, then their panes, late records and watermarks replayed in the order
        `execute` sends them, and their acks."""
        engine = self.engine
        delay = self._fast[3]  # type: ignore[index]
        whole = lo == 0 and hi == len(rows)
        part = rows if whole else rows[lo:hi]
        _i_ts, i_key, i_value = where
        keys = list(map(itemgetter(i_key), part)) if i_key >= 0 else [None] * len(part)
        ts = tss if whole else tss[lo:hi]
        values = list(map(itemgetter(i_value), part))
        if not cannot_fail(engine.accumulation, values):
            self._execute_each(tuple_at, lo, hi, now_ms, on_error)
            return
        start = engine.watermark
        result = process_columns(engine, keys, ts, values, now_ms, delay,
                                 rows=(self.instance.output_width, self._keyed))
        # The watermark after each tuple, and the tuples that moved it: `execute` marks the
        # watermark to be sent (before the next panes, or at the batch end) after each move,
        # once the tuple's own panes and late record are out.
        after = result.watermarks
        moved = np.flatnonzero(after > np.concatenate(([start], after[:-1]))).tolist()
        applied = 0  # the movers marked so far

        def marked_before(limit: int) -> None:
            nonlocal applied
            k = bisect.bisect_left(moved, limit, applied)
            if k > applied:
                self._pending_wm = int(after[moved[k - 1]])
                applied = k

        # Each tuple is acked once what it sent is out, as `execute` acks it: unanchored rows
        # on the task's own collector by count, the others (and the late ones, whose record is
        # anchored to their tuple) through their tuple.
        out = self._out
        counted = self._bulk if unanchored and self._bulk is out else None
        made: list[tuple[int, Tuple]] = []  # (row in the run, its tuple), in row order
        acked = 0  # the rows acked so far
        taken = 0  # the tuples of `made` acked so far

        def acked_before(limit: int) -> None:
            nonlocal acked, taken
            if limit <= acked:
                return
            if counted is None:
                for k in range(acked, limit):
                    if taken < len(made) and made[taken][0] == k:
                        tup = made[taken][1]
                        taken += 1
                    else:
                        tup = tuple_at(lo + k)
                    out.ack(tup)
            else:
                first = taken
                while taken < len(made) and made[taken][0] < limit:
                    out.ack(made[taken][1])
                    taken += 1
                counted.ack_unanchored(limit - acked - (taken - first))
            acked = limit

        for k, kind, x in result.steps:
            marked_before(k)
            acked_before(k)
            if kind == LATE_TUPLE:
                tup = tuple_at(lo + k)
                made.append((k, tup))
                self._late(tup, ts[k], now_ms, x)
            elif kind == ON_TIME_ROWS:
                self._emit_rows(x)
            else:
                self._emit_panes(x)
        marked_before(hi - lo)
        acked_before(hi - lo)

    def _apply_positions(self, now_ms: int) -> None:
        """The batch end of an input whose sources carry positions: the partitions' progress
        the `at` events told moves the watermark, now that everything read before it arrived."""
        moved = False
        for i, parts in enumerate(self.watermarks.partitioned):
            if parts is not None and self._carried[i] and parts.apply() is not None:
                moved = True
        if moved:
            self._refresh(now_ms)

    def _refresh(self, now_ms: int) -> None:
        """An input's partition watermarks moved: so may the operator's."""
        w = self.watermarks.refresh()
        if w is not None:
            self._advance(w, now_ms)

    def _release(self, limit: int | None, now_ms: int) -> None:
        """The tuples waiting behind the watermark (`_behind`) up to position `limit` (None:
        all), each applied with the engine's watermark at its position: the windows it is
        late for have had their on-time panes, the others not."""
        engine = self.engine
        behind = self._behind
        while behind and (limit is None or behind[0][0] <= limit):
            before, _n, key, ts, value, window, second = heapq.heappop(behind)
            engine.advance(before, now_ms)
            engine.process_at(key, ts, value, now_ms, second, window, before)

    def _advance(self, w: int, now_ms: int) -> None:
        engine = self.engine
        if self._behind:
            self._release(w, now_ms)
        engine.advance(w, now_ms)
        if engine.out:
            self._flush()
        # Sent lazily: before the next pane, at the batch end or at the end of input. Downstream
        # sees it in the same place relative to this task's panes as if sent at once, without a
        # control tuple for every tuple that moves the watermark.
        self._pending_wm = engine.watermark

    # ---- output ----------------------------------------------------------------------------
    def _flush(self) -> None:
        self._emit_panes(self.engine.take())

    def _emit_panes(self, panes: list[Any]) -> None:
        """The panes out, after the watermark not yet sent."""
        # A pane is (key, the pane's six fields, its pane info): the operator's output fields.
        width = self.instance.output_width
        self._emit_rows([list(p[:width]) for p in panes] if self._keyed
                        else [list(p[1:width]) for p in panes])

    def _emit_rows(self, rows: list[list[Any]]) -> None:
        """Panes out as their output rows, after the watermark not yet sent."""
        if self._pending_wm is not None:
            self._send_watermark()
        if self._bulk is not None:
            self._bulk.emit_many(rows)  # one route lookup per firing, not per pane
        else:
            emit = self._out.emit
            for row in rows:
                emit(row)

    def _send_watermark(self) -> None:
        w, self._pending_wm = self._pending_wm, None
        if self._sends_wm:
            self._out.emit([w], stream=WATERMARK_STREAM)

    # ---- batch ends and the end of input -----------------------------------------------------
    def end_batch(self, batch_id: int, now_ms: int) -> None:
        """Time triggers fire against the batch's processing time `now_ms`; the watermark goes
        out."""
        if self._stale:
            self._load()
        engine = self.engine
        self._apply_positions(now_ms)
        fixed = getattr(self.instance, "processing_time_watermark_ms", None)
        # Apex's processing-time watermark generator: applied at the batch end, before the time
        # triggers, if it is above the watermark the inputs give.
        if fixed is not None and now_ms - fixed > engine.watermark:
            self._advance(now_ms - fixed, now_ms)
        engine.batch_end(now_ms)
        if engine.out:
            self._flush()
        if self._pending_wm is not None:
            self._send_watermark()

    def end_of_input(self, now_ms: int) -> None:
        if self._stale:
            self._load()
        engine = self.engine
        self._apply_positions(now_ms)
        if self._behind:
            self._release(None, now_ms)
        engine.end_of_input(now_ms)
        if engine.out:
            self._flush()
        self._pending_wm = engine.watermark
        self._send_watermark()

    # ---- extraction --------------------------------------------------------------------------
    def _timestamp(self, tup: Tuple, i: int) -> tuple[int, Window | None]:
        op = self.instance
        x = op.timestamp_extractors[i]
        if x is not None:
            return valid_timestamp(x(tup)), None
        f = op.timestamp_fields[i]
        if f is not None:
            return valid_timestamp(tup.values[tup._origin.fields._index[f]]), None
        if op.window is None:
            # Window propagation: the tuple is a pane; its window is kept, its timestamp is the
            # window start (as Apex stamps panes).
            index = tup._origin.fields._index
            if "window_start" in index and "window_end" in index:
                start = tup.values[index["window_start"]]
                return start, (start, tup.values[index["window_end"]])
            raise ValueError("an operator without a window option needs panes (window_start, "
                             "window_end) as input")
        return 0, None  # no timestamp (Apex): fits the global window

    def _key(self, tup: Tuple, i: int) -> Any:
        if not self._keyed:
            return None
        op = self.instance
        x = op.key_extractors[i]
        if x is not None:
            return x(tup)
        f = op.key_fields[i]
        assert f is not None, "a keyed operator has a key field or extractor per input"
        return tup.values[tup._origin.fields._index[f]]

    def _value(self, tup: Tuple, i: int) -> Any:
        op = self.instance
        x = op.value_extractors[i]
        if x is not None:
            return x(tup)
        f = op.value_fields[i]
        if f is not None:
            return tup.values[tup._origin.fields._index[f]]
        return tuple(tup.values)

    def _late(self, tup: Tuple, ts: int, now_ms: int, watermark: int | None = None) -> None:
        """`watermark`: the one the tuple was judged against (its partition's), if not the
        operator's."""
        self.late_tuples += 1
        self.late_count += 1
        w = self.engine.watermark if watermark is None else watermark
        if self._late_records is not None:
            record = self._late_records.values(tup, ts, watermark_ms(w), LATE)
            self._out.emit(record, anchors=tup, stream=self._late_records.stream)
        else:
            lateness = self.engine.lateness or 0
            self._late_log.record(tup.values, ts, None if w is None else w - lateness, now_ms)

    def _invalid(self, tup: Tuple, exc: Exception, now_ms: int) -> None:
        self.window_errors += 1
        error = f"{type(exc).__name__}: {exc}"
        self._invalid_log.record(tup.values, error, now_ms)
        out = self._out
        record = self._error_records.values(tup, None, watermark_ms(self.engine.watermark),
                                            f"no valid timestamp: {error}")
        out.emit(record, anchors=tup, stream=ERROR_STREAM)
        out.ack(tup)

    # ---- errors ------------------------------------------------------------------------------
    def explained(self, tup: Tuple, exc: Exception) -> Exception:
        """A `TypeError` of the accumulation (a value, or key, of another type than the others:
        `'>' not supported between instances of 'str' and 'int'`) as an error naming the
        component, the field and the value, and what to do; other errors as they are."""
        if not isinstance(exc, TypeError):
            return exc
        op = self.instance
        origin = tup._origin
        i = self._inputs.get(origin.component, 0) if self._n_inputs > 1 else 0
        try:
            key = self._key(tup, i)
            hash(key)
        except TypeError:
            what, field = "key", op.key_fields[i]
        else:
            what, field = "value", op.value_fields[i]
        try:
            value = self._key(tup, i) if what == "key" else self._value(tup, i)
        except Exception:
            return exc
        where = (f"{what} field {field!r}" if field is not None
                 else f"{what} (from its {what} extractor)")
        fix = (f"give {field!r} one type in every tuple (convert it in the component that "
               "emits it)" if field is not None else f"make the {what} extractor return one "
               "type for every tuple")
        explained = TypeError(
            f"component {self._late_log.component!r} cannot accumulate {where} = {value!r} "
            f"({type(value).__name__}) of tuple {list(tup.values)!r} with "
            f"{type(op.accumulation).__name__} ({exc}); {fix}")
        explained.__cause__ = exc
        return explained
