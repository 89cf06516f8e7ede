"""Windowed operators as bolts: `KeyedWindowedOperator`, `WindowedOperator`,
`WindowedMergeOperator`. Apex Malhar's WindowedOperator feature set, with the decisions of
docs/design/windowed-operators.md, on every runner.

Each operator task hosts a `WindowedEngine`. Every input tuple is accumulated (or dropped as too
late) and acked at once: the operator keeps values in its state, not tuples, so panes are emitted
unanchored. Output fields: `key, window_start, window_end, value, timing, pane_index,
is_retraction` (the non-keyed operators omit `key`).

Watermarks: an operator emits its watermark on the stream `_watermark` (field `watermark`);
`TopologyBuilder` subscribes every operator to that stream of each upstream operator it reads,
with all grouping. A task's input watermark is the minimum over the upstream tasks (and, for the
merge operator, over both inputs); with `watermark_delay` the operator also generates one from
event time (largest timestamp seen minus the delay), and uses the larger of the two per input.

>>> from squall import Duration, Fields, TopologyBuilder
>>> from squall.testing import FixedTupleSpout, complete_topology
>>> from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption, accumulations
>>> rows = [["a", 1, 100], ["b", 2, 200], ["a", 3, 1100], ["a", 4, 300], ["b", 9, 50]]
>>> b = TopologyBuilder()
>>> _ = b.set_spout("events", FixedTupleSpout(rows, Fields("user", "amount", "ts")))
>>> op = KeyedWindowedOperator(window=TimeWindows(Duration.seconds(1)),
...     accumulation=accumulations.Sum(), trigger=TriggerOption.at_watermark(),
...     allowed_lateness=Duration(0), watermark_delay=Duration(1000),
...     timestamp_field="ts", key_field="user", value_field="amount", late_stream="late")
>>> _ = b.set_bolt("totals", op).fields_grouping("events", Fields("user"))
>>> result = complete_topology(b.create_topology())
>>> for row in result.tuples("totals"): print(row)
['a', 0, 1000, 5, 'ON_TIME', 0, False]
['b', 0, 1000, 2, 'ON_TIME', 0, False]
['a', 1000, 2000, 3, 'ON_TIME', 0, False]
>>> [late.values for [late] in result.tuples("totals", "late")]   # 50 < watermark 1100 - 1000
[['b', 9, 50]]
"""

from __future__ import annotations

import datetime
import logging
import math
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from squall.components.base import Bolt
from squall.components.windowed import ERROR_FIELDS, ERROR_STREAM, LATE_TUPLE_FIELD, detached
from squall.duration import Duration, to_millis
from squall.errors import InvalidTopologyError
from squall.panes.accumulations import Accumulation
from squall.panes.engine import InputWatermarks, WindowedEngine
from squall.panes.state_mapping import META_KEY, StateSessions, StateWindowStore
from squall.panes.triggers import TriggerOption
from squall.panes.windows import WindowOption
from squall.task.collectors import OutputCollector
from squall.topology import roles
from squall.topology.config import TOPOLOGY_TICK_TUPLE_FREQ_SECS
from squall.topology.declarer import DEFAULT_STREAM, StreamSpec
from squall.topology.fields import Fields
from squall.topology.tuple import TICK_STREAM, Tuple

log = logging.getLogger("squall")

WATERMARK_STREAM = "_watermark"
"""The stream on which operators send their watermark downstream (field `watermark`)."""
WATERMARK_FIELDS = Fields("watermark")
PANE_FIELDS = ("window_start", "window_end", "value", "timing", "pane_index", "is_retraction")
KEYED_FIELDS = Fields("key", *PANE_FIELDS)
UNKEYED_FIELDS = Fields(*PANE_FIELDS)

Extractor = Callable[[Tuple], Any]
DurationLike = Duration | datetime.timedelta | int


class WindowedOperatorBase(Bolt):
    """What the three operators share; the task routes tuples, batch ends and the end of input
    to the `_window_*` methods (as for `WindowedBolt`)."""

    keyed = True
    n_inputs = 1
    # Panes are emitted unanchored (they derive from inputs acked long ago), also in a stateful
    # topology, whose collector otherwise refuses unanchored emits.
    _window_persistent = True

    def __init__(
        self,
        *,
        accumulation: Accumulation,
        window: WindowOption | None = None,
        trigger: TriggerOption | None = None,
        allowed_lateness: DurationLike | None = None,
        watermark_delay: DurationLike | None = None,
        late_stream: str | None = None,
        timestamp_fields: tuple[str | None, ...] = (None,),
        timestamp_extractors: tuple[Extractor | None, ...] = (None,),
        key_fields: tuple[str | None, ...] = (None,),
        key_extractors: tuple[Extractor | None, ...] = (None,),
        value_fields: tuple[str | None, ...] = (None,),
        value_extractors: tuple[Extractor | None, ...] = (None,),
        stateful: bool = False,
    ) -> None:
        if window is not None and not isinstance(window, WindowOption):
            raise TypeError(f"window must be GlobalWindow(), TimeWindows(...) or "
                            f"SessionWindows(...), got {window!r}")
        for op in ("default_accumulated_value", "accumulate", "merge", "get_output"):
            if not callable(getattr(accumulation, op, None)):
                raise TypeError(f"accumulation {accumulation!r} has no {op}() method")
        self.window = window
        self.accumulation = accumulation
        self.trigger = trigger if trigger is not None else TriggerOption.at_watermark()
        self.trigger.validate(bool(getattr(accumulation, "retractable", False)),
                              type(accumulation).__name__)
        self.allowed_lateness_ms = None if allowed_lateness is None else to_millis(
            allowed_lateness)
        self.watermark_delay_ms = None if watermark_delay is None else to_millis(
            watermark_delay)
        if late_stream is not None and (not isinstance(late_stream, str) or not late_stream):
            raise ValueError(f"late stream must be a non-empty string, got {late_stream!r}")
        self.late_stream = late_stream
        for name, fields, extractors in (("timestamp", timestamp_fields, timestamp_extractors),
                                         ("key", key_fields, key_extractors),
                                         ("value", value_fields, value_extractors)):
            for f, x in zip(fields, extractors, strict=True):
                if f is not None and x is not None:
                    raise ValueError(f"give a {name} field or a {name} extractor, not both")
                if x is not None and not callable(x):
                    raise TypeError(f"{name} extractor must be callable, got {x!r}")
        if self.keyed and any(f is None and x is None
                              for f, x in zip(key_fields, key_extractors, strict=True)):
            raise ValueError(f"{type(self).__name__} needs key_field= or key_extractor=")
        self._ts_fields, self._ts_extractors = timestamp_fields, timestamp_extractors
        self._key_fields, self._key_extractors = key_fields, key_extractors
        self._value_fields, self._value_extractors = value_fields, value_extractors
        # With stateful=True the windows live in the topology's state provider and take part in
        # its checkpoints (squall.state): the task calls init_state and the pre_* hooks.
        self._stateful = bool(stateful)
        self.role = roles.STATEFUL_OPERATOR if stateful else roles.OPERATOR
        self._state: Any = None
        self._stale = False

    # ---- declaration -----------------------------------------------------------------------
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(KEYED_FIELDS if self.keyed else UNKEYED_FIELDS)

    def declared_streams(self) -> dict[str, StreamSpec]:
        streams = super().declared_streams()
        streams.setdefault(DEFAULT_STREAM, StreamSpec(KEYED_FIELDS if self.keyed
                                                      else UNKEYED_FIELDS))
        streams[WATERMARK_STREAM] = StreamSpec(WATERMARK_FIELDS)
        streams.setdefault(ERROR_STREAM, StreamSpec(ERROR_FIELDS))
        if self.late_stream is not None:
            streams[self.late_stream] = StreamSpec(Fields(LATE_TUPLE_FIELD))
        return streams

    def implicit_inputs(self, inputs: list[Any], streams: Mapping[str, Mapping[str, Any]]
                        ) -> list[Any]:
        """The watermark subscriptions `TopologyBuilder` adds: one per upstream operator."""
        from squall.topology.description import Subscription
        from squall.topology.groupings import AllGrouping

        have = {(s.component, s.stream) for s in inputs}
        extra = []
        for sub in inputs:
            key = (sub.component, WATERMARK_STREAM)
            if WATERMARK_STREAM in streams.get(sub.component, {}) and key not in have:
                have.add(key)
                extra.append(Subscription(sub.component, WATERMARK_STREAM, AllGrouping()))
        return extra

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        # On Spark a task runs only in batches that hold rows for it: ticks wake it up so that
        # time triggers fire at batch boundaries even without input (the local runner ends a
        # batch for every task anyway).
        period = self.trigger.time_ms
        return {TOPOLOGY_TICK_TUPLE_FREQ_SECS: period / 1000} if period else None

    def _input_of(self, component: str) -> int:
        return 0

    # ---- the framework's side: called by the task ------------------------------------------
    def _window_setup(self, conf: Mapping[str, Any], context: Any, out: Any) -> Any:
        self._out = out
        sources: list[set[int]] = [set() for _ in range(self.n_inputs)]
        inputs: dict[str, int] = {}
        for (cid, _stream) in context.this_sources:
            i = inputs[cid] = self._input_of(cid)
            if _stream == WATERMARK_STREAM:
                sources[i].update(context.component_tasks(cid))
        self._inputs = inputs
        self._sources = [frozenset(s) for s in sources]
        self._sends_wm = bool(context.this_targets.get(WATERMARK_STREAM))
        self._fresh()
        # Fields for timestamp, key and value, one input, the watermark generated only: the
        # per-tuple work can skip the general extraction and watermark bookkeeping.
        ts_f, key_f, value_f = self._ts_fields[0], self._key_fields[0], self._value_fields[0]
        delay = self.watermark_delay_ms
        self._fast: tuple[str, str | None, str, int] | None = None
        if (self.n_inputs == 1 and not sources[0] and delay is not None and ts_f is not None
                and value_f is not None and (not self.keyed or key_f is not None)):
            self._fast = (ts_f, key_f, value_f, delay)
        # The field positions of the fast path, for the last input stream's Fields (all tuples
        # of one upstream stream share it): an identity check instead of three name lookups.
        self._fast_fields: Any = None
        self._fast_index = (0, 0, 0)
        # Panes go to the task's collector in bulk (`emit_many`); in a stateful topology `out`
        # wraps that collector (and passes unanchored emits through).
        collector = getattr(out, "_out", out)
        self._bulk = collector if isinstance(collector, OutputCollector) else None
        return out

    def _fresh(self) -> None:
        """The state of a task that has seen nothing."""
        self.engine = WindowedEngine(self.window, self.accumulation, self.trigger,
                                     self.allowed_lateness_ms)
        self.watermarks = InputWatermarks(list(self._sources), self.watermark_delay_ms)
        self._pending_wm: int | None = None
        self.late_tuples = 0
        self.window_errors = 0

    # ---- stateful=True: the checkpoint protocol's hooks (as a StatefulBolt's) ----------------
    def init_state(self, state: Any) -> None:
        """The task's state (`topology.state.provider`, namespace `<component>-<task>`): the
        windows move into it, and whatever it committed last is where the operator resumes."""
        self._state = state
        self._load()

    def _load(self) -> None:
        state = self._state
        self._stale = False
        self._fresh()
        meta = state.get(META_KEY)
        progress = None if meta is None else pickle.loads(meta)
        engine = self.engine
        engine.windows = StateWindowStore(state, None if progress is None
                                          else progress["chunks"])
        engine.sessions = StateSessions(state)
        if progress is not None:
            engine.restore_progress(progress["engine"])
            self.watermarks = progress["watermarks"]
            self._pending_wm = progress["pending_wm"]
            self.late_tuples, self.window_errors = progress["counts"]

    def pre_prepare(self, txid: int) -> None:
        """Before the state prepares `txid`: write what changed since the last prepare."""
        if self._stale:
            self._load()
        engine = self.engine
        engine.windows.flush()  # type: ignore[attr-defined]
        engine.sessions.flush()  # type: ignore[attr-defined]
        self._state.put(META_KEY, pickle.dumps({
            "engine": engine.progress(), "chunks": engine.windows.chunks,  # type: ignore
            "watermarks": self.watermarks, "pending_wm": self._pending_wm,
            "counts": (self.late_tuples, self.window_errors)}, protocol=pickle.HIGHEST_PROTOCOL))

    def pre_commit(self, txid: int) -> None:
        """Nothing to do: the state commits what `pre_prepare` wrote."""

    def pre_rollback(self) -> None:
        """The state goes back to its last commit (right after this call): so does the operator,
        reloaded from it before its next tuple."""
        self._stale = True

    def _window_execute(self, tup: Tuple, now_ms: int) -> None:
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
        i = self._inputs[origin.component] if self.n_inputs > 1 else 0
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
                    self._invalid(tup, exc)
                    return
                self._fast_fields, self._fast_index = origin.fields, (i_ts, i_key, i_value)
            ts = values[i_ts]
            if ts.__class__ is int:
                if engine.process(values[i_key] if i_key >= 0 else None, ts, values[i_value],
                                  now_ms, False, None):
                    if engine.out:
                        self._flush()
                else:
                    self._late(tup, ts)
                w = ts - fast[3]
                if w > engine.watermark:
                    if w < engine.due:
                        # Nothing fires or purges below `due`: the watermark just moves (what
                        # `_advance` would do, without its calls on every new timestamp).
                        engine.watermark = self._pending_wm = w
                    else:
                        self._advance(w, now_ms)
                self._out.ack(tup)
                return
        try:
            ts, window = self._timestamp(tup, i)
            key = self._key(tup, i)
            value = self._value(tup, i)
        except Exception as exc:
            self._invalid(tup, exc)
            return
        out = self._out
        if engine.process(key, ts, value, now_ms, i == 1, window):
            if engine.out:
                self._flush()
        else:
            self._late(tup, ts)
        w = self.watermarks.observe(i, ts)
        if w is not None:
            self._advance(w, now_ms)
        out.ack(tup)

    def _advance(self, w: int, now_ms: int) -> None:
        engine = self.engine
        engine.advance(w, now_ms)
        if engine.out:
            self._flush()
        # Sent lazily: before the next pane, at the batch end or at the end of input. Downstream
        # sees it in the same place relative to this task's panes as if sent at once, without a
        # control tuple for every tuple that moves the watermark.
        self._pending_wm = engine.watermark

    def _flush(self) -> None:
        if self._pending_wm is not None:
            self._send_watermark()
        panes = self.engine.take()
        rows = [list(p) for p in panes] if self.keyed else [list(p[1:]) for p in panes]
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

    def on_batch_end(self, batch_id: int) -> None:
        """Time triggers fire against the batch's processing time; the watermark goes out.
        A subclass that overrides this must call it."""
        if self._stale:
            self._load()
        engine = self.engine
        out = self._out  # the task's collector, or (stateful topology) a wrapper around it
        engine.batch_end(getattr(out, "_out", out)._task.host.now_ms())
        if engine.out:
            self._flush()
        if self._pending_wm is not None:
            self._send_watermark()

    def _window_end_of_input(self, now_ms: int) -> None:
        if self._stale:
            self._load()
        engine = self.engine
        engine.end_of_input(now_ms)
        if engine.out:
            self._flush()
        self._pending_wm = engine.watermark
        self._send_watermark()

    # ---- extraction ----------------------------------------------------------------------
    def _timestamp(self, tup: Tuple, i: int) -> tuple[int, Any]:
        x = self._ts_extractors[i]
        if x is not None:
            return _valid_ts(x(tup)), None
        f = self._ts_fields[i]
        if f is not None:
            return _valid_ts(tup.values[tup._origin.fields._index[f]]), None
        if self.window is None:
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
        if not self.keyed:
            return None
        x = self._key_extractors[i]
        if x is not None:
            return x(tup)
        f = self._key_fields[i]
        assert f is not None, "a keyed operator has a key field or extractor per input"
        return tup.values[tup._origin.fields._index[f]]

    def _value(self, tup: Tuple, i: int) -> Any:
        x = self._value_extractors[i]
        if x is not None:
            return x(tup)
        f = self._value_fields[i]
        if f is not None:
            return tup.values[tup._origin.fields._index[f]]
        return tuple(tup.values)

    def _late(self, tup: Tuple, ts: int) -> None:
        self.late_tuples += 1
        if self.late_stream is not None:
            self._out.emit([detached(tup)], anchors=tup, stream=self.late_stream)
        else:
            log.info("windowed operator %s: late tuple %r dropped (ts %s < watermark %s - "
                     "allowed lateness %s)", type(self).__name__, tup, ts,
                     self.engine.watermark, self.allowed_lateness_ms)

    def _invalid(self, tup: Tuple, exc: Exception) -> None:
        self.window_errors += 1
        out = self._out
        out.emit([detached(tup), f"{type(exc).__name__}: {exc}"], anchors=tup,
                 stream=ERROR_STREAM)
        out.ack(tup)

    def execute(self, tup: Tuple) -> None:  # the task calls _window_execute instead
        raise RuntimeError("windowed operators are driven by their task")


def _valid_ts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timestamp must be a number of ms since epoch, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"timestamp must be finite, got {value!r}")
        return math.floor(value)
    return value


class KeyedWindowedOperator(WindowedOperatorBase):
    """Windows, triggers and accumulation per key: state, panes and triggers per (key, window).

    `window`: `GlobalWindow()`, `TimeWindows(d)`, `TimeWindows(d).slide_by(s)`,
    `SessionWindows(gap)`, or None to take the windows of the upstream operator's panes.
    Timestamps come from `timestamp_field` or `timestamp_extractor` (ms), keys from `key_field`
    or `key_extractor`, values from `value_field` or `value_extractor` (default: the tuple's
    values as a tuple). `allowed_lateness`: tuples older than watermark - lateness are dropped
    (to `late_stream` if given) and windows purged (None: never). `watermark_delay`: generate
    the watermark from event time, trailing the largest timestamp by this much.
    `stateful=True`: windows, accumulators and sessions live in the topology's state provider
    (`topology.state.provider`: memory, durable, redis; `squall.panes.state_mapping`), checkpointed
    with the topology's state (a stateful topology: Storm's checkpoints on the local runner,
    micro-batch commits on Spark). Only the (key, window)s a checkpoint interval touches are in
    memory, and a restarted task resumes from the last commit.
    """

    keyed = True

    def __init__(self, *, accumulation: Accumulation, window: WindowOption | None = None,
                 trigger: TriggerOption | None = None,
                 allowed_lateness: DurationLike | None = None,
                 watermark_delay: DurationLike | None = None, late_stream: str | None = None,
                 timestamp_field: str | None = None,
                 timestamp_extractor: Extractor | None = None, key_field: str | None = None,
                 key_extractor: Extractor | None = None, value_field: str | None = None,
                 value_extractor: Extractor | None = None, stateful: bool = False) -> None:
        super().__init__(accumulation=accumulation, window=window, trigger=trigger,
                         allowed_lateness=allowed_lateness, watermark_delay=watermark_delay,
                         late_stream=late_stream, timestamp_fields=(timestamp_field,),
                         timestamp_extractors=(timestamp_extractor,), key_fields=(key_field,),
                         key_extractors=(key_extractor,), value_fields=(value_field,),
                         value_extractors=(value_extractor,), stateful=stateful)


class WindowedOperator(WindowedOperatorBase):
    """As `KeyedWindowedOperator`, without keys: one state per window (output without `key`)."""

    keyed = False

    def __init__(self, *, accumulation: Accumulation, window: WindowOption | None = None,
                 trigger: TriggerOption | None = None,
                 allowed_lateness: DurationLike | None = None,
                 watermark_delay: DurationLike | None = None, late_stream: str | None = None,
                 timestamp_field: str | None = None,
                 timestamp_extractor: Extractor | None = None, value_field: str | None = None,
                 value_extractor: Extractor | None = None, stateful: bool = False) -> None:
        super().__init__(accumulation=accumulation, window=window, trigger=trigger,
                         allowed_lateness=allowed_lateness, watermark_delay=watermark_delay,
                         late_stream=late_stream, timestamp_fields=(timestamp_field,),
                         timestamp_extractors=(timestamp_extractor,),
                         value_fields=(value_field,), value_extractors=(value_extractor,),
                         stateful=stateful)


class WindowedMergeOperator(WindowedOperatorBase):
    """Two inputs into one window state: tuples of the components `input1` go to the
    accumulation's `accumulate`, those of `input2` to `accumulate2` (`InnerJoin`, `CoGroup`).

    Keyed when `key_field`/`key_extractor` are given (for both inputs, or per input with the
    `*2` variants). The watermark is the minimum of the two inputs' watermarks, and there is
    none until both inputs have one.
    """

    n_inputs = 2

    def __init__(self, *, accumulation: Accumulation, input1: str | tuple[str, ...],
                 input2: str | tuple[str, ...], window: WindowOption | None = None,
                 trigger: TriggerOption | None = None,
                 allowed_lateness: DurationLike | None = None,
                 watermark_delay: DurationLike | None = None, late_stream: str | None = None,
                 timestamp_field: str | None = None,
                 timestamp_extractor: Extractor | None = None,
                 timestamp_field2: str | None = None,
                 timestamp_extractor2: Extractor | None = None,
                 key_field: str | None = None, key_extractor: Extractor | None = None,
                 key_field2: str | None = None, key_extractor2: Extractor | None = None,
                 value_field: str | None = None, value_extractor: Extractor | None = None,
                 value_field2: str | None = None,
                 value_extractor2: Extractor | None = None, stateful: bool = False) -> None:
        if not callable(getattr(accumulation, "accumulate2", None)):
            raise TypeError(f"the merge operator needs an accumulation with accumulate2() "
                            f"(InnerJoin, CoGroup), got {accumulation!r}")
        self.input1 = (input1,) if isinstance(input1, str) else tuple(input1)
        self.input2 = (input2,) if isinstance(input2, str) else tuple(input2)
        if set(self.input1) & set(self.input2):
            raise ValueError("input1 and input2 must be different components")
        self.keyed = any(k is not None for k in (key_field, key_extractor, key_field2,
                                                  key_extractor2))

        ts2 = _pick(timestamp_field, timestamp_extractor, timestamp_field2, timestamp_extractor2)
        key2 = _pick(key_field, key_extractor, key_field2, key_extractor2)
        value2 = _pick(value_field, value_extractor, value_field2, value_extractor2)
        super().__init__(
            accumulation=accumulation, window=window, trigger=trigger,
            allowed_lateness=allowed_lateness, watermark_delay=watermark_delay,
            late_stream=late_stream,
            timestamp_fields=(timestamp_field, ts2[0]),
            timestamp_extractors=(timestamp_extractor, ts2[1]),
            key_fields=(key_field, key2[0]), key_extractors=(key_extractor, key2[1]),
            value_fields=(value_field, value2[0]), value_extractors=(value_extractor, value2[1]),
            stateful=stateful)

    def _input_of(self, component: str) -> int:
        if component in self.input1:
            return 0
        if component in self.input2:
            return 1
        raise InvalidTopologyError(
            f"merge operator reads {component!r}, which is neither input1 {self.input1} nor "
            f"input2 {self.input2}")

    def check_inputs(self, component_id: str, inputs: list[Any]) -> None:
        """Build-time: both inputs subscribed, nothing else."""
        subscribed = {s.component for s in inputs}
        for name, comps in (("input1", self.input1), ("input2", self.input2)):
            if not subscribed & set(comps):
                raise InvalidTopologyError(f"merge operator does not subscribe to its {name} "
                                           f"{comps}", component=component_id)
        for c in subscribed - set(self.input1) - set(self.input2):
            raise InvalidTopologyError(f"merge operator subscribes to {c!r}, which is neither "
                                       "input1 nor input2", component=component_id)


def _pick(f1: str | None, x1: Extractor | None, f2: str | None, x2: Extractor | None
          ) -> tuple[str | None, Extractor | None]:
    """Input 2's field or extractor: its own if given, else input 1's."""
    return (f2, x2) if f2 is not None or x2 is not None else (f1, x1)
