"""Windowed operators as bolts: `KeyedWindowedOperator`, `WindowedOperator`,
`WindowedMergeOperator`. Apex Malhar's WindowedOperator feature set, with the decisions of
docs/design/windowed-operators.md, on every runner.

An operator holds the user's configuration only; each of its tasks hosts a `WindowedEngine` in
the operator role adapter (`squall.task.roles.operator.OperatorRole`), which the task builds from
the recorded role. Every input tuple is accumulated (or dropped as too late) and acked at once:
the operator keeps values in its state, not tuples, so panes are emitted unanchored. Output
fields: `key, window_start, window_end, value, timing, pane_index, is_retraction` (the non-keyed
operators omit `key`); with `pane_info=True` also Beam's pane info, `is_first, is_last,
on_time_index, timestamp` (`squall.panes.pane_info`; `PaneInfo.of_tuple(tup)` reads it).

Triggers: Apex's `TriggerOption` (which carries the accumulation mode), or a trigger of Beam's
model (`AfterWatermark(early=..., late=...)`, `AfterCount`, `AfterProcessingTime`, `Repeatedly`,
`AfterAny`, `AfterAll`, `AfterEach`, `OrFinally`, `Never`, `Always`; squall.panes.beam_triggers)
with `accumulation_mode=`. Both take `on_time_behavior=` (the on-time pane fires also when empty
by default, as Beam's), `closing_behavior=` and `timestamp_combiner=` (the pane's `timestamp`).

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
>>> result.tuples("totals", "late")   # 50 < watermark 1100 - 1000: a late record
[['b', 9, 50, 'events', 'default', 1, 50, 100, 'late']]

The same with a Beam trigger, an early pane every two tuples, accumulating, and pane info. By
Beam's lateness rule (`LatenessRule`) b's 50 counts: it is behind the watermark (100), but its
window [0, 1000) has not expired:

>>> from squall.windows import AccumulationMode, AfterCount, AfterWatermark
>>> b = TopologyBuilder()
>>> _ = b.set_spout("events", FixedTupleSpout(rows, Fields("user", "amount", "ts")))
>>> op = KeyedWindowedOperator(window=TimeWindows(Duration.seconds(1)),
...     accumulation=accumulations.Sum(), trigger=AfterWatermark(early=AfterCount(2)),
...     accumulation_mode=AccumulationMode.ACCUMULATING, pane_info=True,
...     allowed_lateness=Duration(0), watermark_delay=Duration(1000),
...     timestamp_field="ts", key_field="user", value_field="amount")
>>> _ = b.set_bolt("totals", op).fields_grouping("events", Fields("user"))
>>> for row in complete_topology(b.create_topology()).tuples("totals"): print(row)
['a', 0, 1000, 5, 'EARLY', 0, False, True, False, -1, 999]
['b', 0, 1000, 11, 'EARLY', 0, False, True, False, -1, 999]
['a', 0, 1000, 5, 'ON_TIME', 1, False, False, True, 0, 999]
['b', 0, 1000, 11, 'ON_TIME', 1, False, False, True, 0, 999]
['a', 1000, 2000, 3, 'ON_TIME', 0, False, True, True, 0, 1999]
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from squall.components.base import Bolt
from squall.components.side_records import side_fields
from squall.components.windowed import ERROR_STREAM
from squall.duration import Duration, to_millis
from squall.errors import InvalidTopologyError
from squall.panes.accumulations import check_accumulation
from squall.panes.beam_triggers import Trigger, processing_delays
from squall.panes.engine import WindowedEngine
from squall.panes.pane_info import (
    PANE_INFO_FIELDS,
    ClosingBehavior,
    LatenessRule,
    OnTimeBehavior,
    TimestampCombiner,
)
from squall.panes.triggers import AccumulationMode, TriggerOption
from squall.panes.windowing import Windowing
from squall.panes.windows import WindowOption
from squall.partition_watermarks import PARTITIONS_STREAM
from squall.protocols import Accumulation
from squall.reliability.retries import DEAD_LETTER
from squall.topology import roles
from squall.topology.config import TOPOLOGY_TICK_TUPLE_FREQ_SECS
from squall.topology.declarer import DEFAULT_STREAM, StreamSpec
from squall.topology.description import Subscription
from squall.topology.fields import Fields
from squall.topology.groupings import AllGrouping
from squall.topology.tuple import Tuple

WATERMARK_STREAM = "_watermark"
"""The stream on which operators send their watermark downstream (field `watermark`)."""
WATERMARK_FIELDS = Fields("watermark")
PANE_FIELDS = ("window_start", "window_end", "value", "timing", "pane_index", "is_retraction")
KEYED_FIELDS = Fields("key", *PANE_FIELDS)
UNKEYED_FIELDS = Fields(*PANE_FIELDS)
KEYED_INFO_FIELDS = Fields("key", *PANE_FIELDS, *PANE_INFO_FIELDS)
UNKEYED_INFO_FIELDS = Fields(*PANE_FIELDS, *PANE_INFO_FIELDS)

Extractor = Callable[[Tuple], Any]
DurationLike = Duration | datetime.timedelta | int
T = TypeVar("T")


class _Setting(Generic[T]):
    """An operator attribute that reads one setting of the operator's windowing strategy
    (`operator.windowing`), read-only: the strategy is one immutable value."""

    def __init__(self, field: str) -> None:
        self._field = field

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, op: None, owner: type) -> _Setting[T]: ...

    @overload
    def __get__(self, op: WindowedOperatorBase, owner: type) -> T: ...

    def __get__(self, op: WindowedOperatorBase | None, owner: type) -> T | _Setting[T]:
        if op is None:
            return self
        return getattr(op.windowing, self._field)

    def __set__(self, op: WindowedOperatorBase, value: T) -> None:
        raise AttributeError(f"{self._name} is a setting of the operator's windowing strategy "
                             "(operator.windowing), which does not change once built")


class WindowedOperatorBase(Bolt):
    """What the three operators share: the user's configuration, the declaration of the output
    streams and the validation. The framework's side (engine, stores, watermarks, counters, the
    output collector) lives in the task's role adapter, `squall.task.roles.operator.OperatorRole`,
    to which the task routes tuples, batch ends and the end of input."""

    keyed = True
    n_inputs = 1
    # The task's role adapter while the operator forwards batch ends to it (set by the
    # adapter, never pickled with the operator).
    def __init__(
        self,
        *,
        accumulation: Accumulation,
        window: WindowOption | None = None,
        trigger: TriggerOption | Trigger | None = None,
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
        accumulation_mode: AccumulationMode | None = None,
        on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS,
        closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
        timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW,
        pane_info: bool = False,
        source_watermarks: bool = True,
        processing_time_watermark: DurationLike | None = None,
        lateness_rule: LatenessRule | None = None,
    ) -> None:
        if window is not None and not isinstance(window, WindowOption):
            raise TypeError(f"window must be GlobalWindow(), TimeWindows(...) or "
                            f"SessionWindows(...), got {window!r}")
        check_accumulation(accumulation)
        if window is not None and window.merging and not getattr(accumulation, "mergeable", True):
            raise ValueError(
                f"{type(self).__name__}: {type(window).__name__} merge with the accumulation's "
                f"merge(), and this {type(accumulation).__name__} has none: give it one (as "
                f"Fold(initial, add, merge=fn)) or use TimeWindows or GlobalWindow")
        self.accumulation = accumulation
        # The windowing strategy, one value: what each task's pane engine is built from.
        self.windowing = Windowing(
            window, trigger if trigger is not None else TriggerOption.at_watermark(),
            None if allowed_lateness is None else to_millis(allowed_lateness),
            accumulation_mode, on_time_behavior, closing_behavior, timestamp_combiner,
            lateness_rule)  # lateness_rule None: the trigger model's own (the engine's)
        # The engine checks the strategy against the accumulation (one thrown away here).
        WindowedEngine.of(self.windowing, accumulation)
        self.pane_info = bool(pane_info)
        # With `watermark_delay`, inputs read from partitioned sources take the watermark per
        # source partition (squall.partition_watermarks); False: from the input's largest
        # timestamp, whichever partition it came from.
        self.source_watermarks = bool(source_watermarks)
        # Apex's FixedDiffProcessingTimeWatermarkGen: at every batch end the watermark is at least
        # the batch's processing time less this much (the "fixed watermark").
        self.processing_time_watermark_ms = None if processing_time_watermark is None else (
            to_millis(processing_time_watermark))
        if self.processing_time_watermark_ms is not None and (
                self.processing_time_watermark_ms < 0):
            raise ValueError(f"processing_time_watermark must be >= 0, got "
                             f"{processing_time_watermark!r}")
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
        # Per input (one, or two for the merge operator): a field name or an extractor each.
        self.timestamp_fields, self.timestamp_extractors = timestamp_fields, timestamp_extractors
        self.key_fields, self.key_extractors = key_fields, key_extractors
        self.value_fields, self.value_extractors = value_fields, value_extractors
        # With stateful=True the windows live in the topology's state provider and take part in
        # its checkpoints (squall.state): the task hosts it with the stateful-operator role.
        self.stateful = bool(stateful)
        self.role = roles.STATEFUL_OPERATOR if stateful else roles.OPERATOR

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "windowing" not in state:
            # Pickled before the windowing strategy was one value: its settings were attributes
            # (those before a setting existed get the default).
            state = dict(state)
            state["windowing"] = Windowing(
                state.pop("window"), state.pop("trigger"), state.pop("allowed_lateness_ms"),
                state.pop("accumulation_mode", None),
                state.pop("on_time_behavior", OnTimeBehavior.FIRE_ALWAYS),
                state.pop("closing_behavior", ClosingBehavior.FIRE_IF_NON_EMPTY),
                state.pop("timestamp_combiner", TimestampCombiner.OUTPUT_AT_EOW),
                state.pop("lateness_rule", None))
        self.__dict__.update(state)

    # The windowing strategy's settings, read-only, under the names operators had for them.
    window = _Setting[WindowOption | None]("window")
    trigger = _Setting[TriggerOption | Trigger]("trigger")
    allowed_lateness_ms = _Setting[int | None]("allowed_lateness_ms")
    accumulation_mode = _Setting[AccumulationMode | None]("mode")
    on_time_behavior = _Setting[OnTimeBehavior]("on_time_behavior")
    closing_behavior = _Setting[ClosingBehavior]("closing_behavior")
    timestamp_combiner = _Setting[TimestampCombiner]("timestamp_combiner")
    lateness_rule = _Setting[LatenessRule | None]("lateness_rule")  # None: the model's own

    def engine_options(self) -> dict[str, Any]:
        """The pane engine's keyword arguments besides window, accumulation, trigger, lateness
        (`WindowedEngine.of(op.windowing, accumulation)` takes them all as one value)."""
        return self.windowing.engine_options()

    @property
    def output_width(self) -> int:
        """How many of an engine pane's fields the output carries (with the key)."""
        return 11 if getattr(self, "pane_info", False) else 7

    # ---- declaration -----------------------------------------------------------------------
    def _output_fields(self) -> Fields:
        if getattr(self, "pane_info", False):
            return KEYED_INFO_FIELDS if self.keyed else UNKEYED_INFO_FIELDS
        return KEYED_FIELDS if self.keyed else UNKEYED_FIELDS

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self._output_fields())

    def declared_streams(self) -> dict[str, StreamSpec]:
        streams = super().declared_streams()
        streams.setdefault(DEFAULT_STREAM, StreamSpec(self._output_fields()))
        streams[WATERMARK_STREAM] = StreamSpec(WATERMARK_FIELDS)
        return streams

    def derived_streams(self, component_id: str, inputs: list[Any],
                        streams: Mapping[str, Mapping[str, Any]],
                        conf: Mapping[str, Any]) -> dict[str, StreamSpec]:
        """`window_errors` and the late stream, as side records of the inputs' tuples
        (squall.components.side_records)."""
        side = [ERROR_STREAM] + ([self.late_stream] if self.late_stream is not None else [])
        # A source's dead letters are a control input where its partition events are one.
        control = {s.component for s in inputs if s.stream == PARTITIONS_STREAM}
        data = [s for s in inputs if s.stream != DEAD_LETTER or s.component not in control]
        return {stream: StreamSpec(side_fields(component_id, stream, data, streams))
                for stream in side}

    def implicit_inputs(self, inputs: list[Any], streams: Mapping[str, Mapping[str, Any]]
                        ) -> list[Any]:
        """The watermark subscriptions `TopologyBuilder` adds: one per upstream operator, and
        with a `watermark_delay` one per upstream partitioned source (its partition events)."""
        have = {(s.component, s.stream) for s in inputs}
        extra = []
        control = [WATERMARK_STREAM]
        if self.watermark_delay_ms is not None and getattr(self, "source_watermarks", True):
            # Its partition events, and its dead letters (which end a failed tuple's hold on
            # the watermark: squall.partition_watermarks).
            control += [PARTITIONS_STREAM, DEAD_LETTER]
        for sub in inputs:
            for stream in control:
                key = (sub.component, stream)
                if stream in streams.get(sub.component, {}) and key not in have:
                    have.add(key)
                    extra.append(Subscription(sub.component, stream, AllGrouping()))
        return extra

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        # On Spark a task runs only in batches that hold rows for it: ticks wake it up so that
        # time triggers fire at batch boundaries even without input (the local runner ends a
        # batch for every task anyway).
        if isinstance(self.trigger, TriggerOption):
            period = self.trigger.time_ms
        else:  # Beam: the shortest processing-time delay (1 s for delays of 0)
            delays = processing_delays(self.trigger)
            period = (min(d for d in delays if d > 0) if any(delays) else 1000) if delays else None
        if not period and getattr(self, "processing_time_watermark_ms", None) is not None:
            period = 1000  # the processing-time watermark moves at batch ends, input or not
        return {TOPOLOGY_TICK_TUPLE_FREQ_SECS: period / 1000} if period else None

    def input_of(self, component: str) -> int:
        """Which input (0, or 1 for the merge operator's `input2`) `component` feeds."""
        return 0

    def execute(self, tup: Tuple) -> None:  # the task hands tuples to the operator role
        raise RuntimeError("windowed operators are driven by their task")

    # With stateful=True the checkpoint protocol calls its hooks (`init_state`, `pre_prepare`,
    # `pre_commit`, `pre_rollback`) on the role adapter, which keeps the windows in the state.


class KeyedWindowedOperator(WindowedOperatorBase):
    """Windows, triggers and accumulation per key: state, panes and triggers per (key, window).

    `window`: `GlobalWindow()`, `TimeWindows(d)`, `TimeWindows(d).slide_by(s)`,
    `SessionWindows(gap)`, or None to take the windows of the upstream operator's panes.
    Timestamps come from `timestamp_field` or `timestamp_extractor` (ms), keys from `key_field`
    or `key_extractor`, values from `value_field` or `value_extractor` (default: the tuple's
    values as a tuple). `allowed_lateness`: windows are purged once their end is that far
    behind the watermark (None: never), and tuples too late are dropped (to `late_stream` if
    given): by `lateness_rule`, with Beam's triggers when every window of the tuple has expired
    (`LatenessRule.WINDOW_EXPIRED`), with `TriggerOption` when the tuple is older than
    watermark - lateness (`LatenessRule.BEHIND_WATERMARK`, Apex's rule). `watermark_delay`: generate
    the watermark from event time, trailing the largest timestamp by this much: per partition
    of the upstream partitioned sources (files, Redis streams, Kafka), the slowest partition
    deciding and each tuple judged late against its own partition, so results do not depend on
    parallelism (`source_watermarks=False`: the largest timestamp of the whole input;
    docs/design/source-watermarks.md). `processing_time_watermark`: at every batch end the
    watermark is at least the batch's processing time less this much (Apex's fixed watermark,
    `FixedDiffProcessingTimeWatermarkGen`), whatever the event times.
    `stateful=True`: windows, accumulators and sessions live in the topology's state provider
    (`topology.state.provider`: memory, durable, redis; `squall.panes.state_mapping`), checkpointed
    with the topology's state (a stateful topology: Storm's checkpoints on the local runner,
    micro-batch commits on Spark). Only the (key, window)s a checkpoint interval touches are in
    memory, and a restarted task resumes from the last commit.

    `trigger`: Apex's `TriggerOption` (default `TriggerOption.at_watermark()`; it carries the
    accumulation mode), or a trigger of Beam's model (`AfterWatermark(early=, late=)`, ...) with
    `accumulation_mode` (discarding by default). `on_time_behavior`, `closing_behavior`: whether
    the on-time pane and a window's final pane fire with nothing new since the previous pane
    (defaults, Beam's: the on-time pane always, the final pane if non-empty).
    `timestamp_combiner`: the panes' output timestamp. `pane_info=True`: output rows also carry
    `is_first, is_last, on_time_index, timestamp` (docs/design/triggers.md).
    """

    keyed = True

    def __init__(self, *, accumulation: Accumulation, window: WindowOption | None = None,
                 trigger: TriggerOption | Trigger | None = None,
                 allowed_lateness: DurationLike | None = None,
                 watermark_delay: DurationLike | None = None, late_stream: str | None = None,
                 timestamp_field: str | None = None,
                 timestamp_extractor: Extractor | None = None, key_field: str | None = None,
                 key_extractor: Extractor | None = None, value_field: str | None = None,
                 value_extractor: Extractor | None = None, stateful: bool = False,
                 accumulation_mode: AccumulationMode | None = None,
                 on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS,
                 closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
                 timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW,
                 pane_info: bool = False, source_watermarks: bool = True,
                 processing_time_watermark: DurationLike | None = None,
                 lateness_rule: LatenessRule | None = None) -> None:
        super().__init__(accumulation=accumulation, window=window, trigger=trigger,
                         allowed_lateness=allowed_lateness, watermark_delay=watermark_delay,
                         late_stream=late_stream, timestamp_fields=(timestamp_field,),
                         timestamp_extractors=(timestamp_extractor,), key_fields=(key_field,),
                         key_extractors=(key_extractor,), value_fields=(value_field,),
                         value_extractors=(value_extractor,), stateful=stateful,
                         accumulation_mode=accumulation_mode,
                         on_time_behavior=on_time_behavior, closing_behavior=closing_behavior,
                         timestamp_combiner=timestamp_combiner, pane_info=pane_info,
            source_watermarks=source_watermarks,
            processing_time_watermark=processing_time_watermark, lateness_rule=lateness_rule)


class WindowedOperator(WindowedOperatorBase):
    """As `KeyedWindowedOperator`, without keys: one state per window (output without `key`)."""

    keyed = False

    def __init__(self, *, accumulation: Accumulation, window: WindowOption | None = None,
                 trigger: TriggerOption | Trigger | None = None,
                 allowed_lateness: DurationLike | None = None,
                 watermark_delay: DurationLike | None = None, late_stream: str | None = None,
                 timestamp_field: str | None = None,
                 timestamp_extractor: Extractor | None = None, value_field: str | None = None,
                 value_extractor: Extractor | None = None, stateful: bool = False,
                 accumulation_mode: AccumulationMode | None = None,
                 on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS,
                 closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
                 timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW,
                 pane_info: bool = False, source_watermarks: bool = True,
                 processing_time_watermark: DurationLike | None = None,
                 lateness_rule: LatenessRule | None = None) -> None:
        super().__init__(accumulation=accumulation, window=window, trigger=trigger,
                         allowed_lateness=allowed_lateness, watermark_delay=watermark_delay,
                         late_stream=late_stream, timestamp_fields=(timestamp_field,),
                         timestamp_extractors=(timestamp_extractor,),
                         value_fields=(value_field,), value_extractors=(value_extractor,),
                         stateful=stateful, accumulation_mode=accumulation_mode,
            on_time_behavior=on_time_behavior, closing_behavior=closing_behavior,
            timestamp_combiner=timestamp_combiner, pane_info=pane_info,
            source_watermarks=source_watermarks,
            processing_time_watermark=processing_time_watermark, lateness_rule=lateness_rule)


class WindowedMergeOperator(WindowedOperatorBase):
    """Two inputs into one window state: tuples of the components `input1` go to the
    accumulation's `accumulate`, those of `input2` to `accumulate2` (`InnerJoin`,
    `LeftOuterJoin`, `RightOuterJoin`, `FullOuterJoin`, `CoGroup`).

    Keyed when `key_field`/`key_extractor` are given (for both inputs, or per input with the
    `*2` variants). The watermark is the minimum of the two inputs' watermarks, and there is
    none until both inputs have one.
    """

    n_inputs = 2

    def __init__(self, *, accumulation: Accumulation, input1: str | tuple[str, ...],
                 input2: str | tuple[str, ...], window: WindowOption | None = None,
                 trigger: TriggerOption | Trigger | None = None,
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
                 value_extractor2: Extractor | None = None, stateful: bool = False,
                 accumulation_mode: AccumulationMode | None = None,
                 on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS,
                 closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
                 timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW,
                 pane_info: bool = False, source_watermarks: bool = True,
                 processing_time_watermark: DurationLike | None = None,
                 lateness_rule: LatenessRule | None = None) -> None:
        if not callable(getattr(accumulation, "accumulate2", None)):
            raise TypeError("the merge operator needs an accumulation with accumulate2() "
                            "(InnerJoin, LeftOuterJoin, RightOuterJoin, FullOuterJoin, "
                            f"CoGroup), got {accumulation!r}")
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
            stateful=stateful, accumulation_mode=accumulation_mode,
            on_time_behavior=on_time_behavior, closing_behavior=closing_behavior,
            timestamp_combiner=timestamp_combiner, pane_info=pane_info,
            source_watermarks=source_watermarks,
            processing_time_watermark=processing_time_watermark, lateness_rule=lateness_rule)

    def input_of(self, component: str) -> int:
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
