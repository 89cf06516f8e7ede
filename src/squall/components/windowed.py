"""`WindowedBolt`: Storm's windowed bolts, on every runner.

The user implements `execute(window)` and configures the window with the `with_*` methods; the
framework keeps the window (`squall.tuple_windows.WindowManager`), calls `execute` for each window,
anchors what `execute` emits to every tuple of the window, and acks each input tuple when it leaves
the window. Time comes from the runner: its clock (local runner) or the micro-batch time (Spark).
This class holds the user's configuration; the window itself is the framework's, held by the
task's role adapter (squall.task.roles.windowed).

>>> from squall import Count, Fields, TopologyBuilder, Values
>>> from squall.testing import FixedTupleSpout, complete_topology
>>> class Sum(WindowedBolt):
...     def execute(self, window):
...         self.collector.emit(Values(sum(t["n"] for t in window.get())))
...     def declare_output_fields(self, declarer): declarer.declare(Fields("sum"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[n] for n in range(1, 7)], Fields("n")))
>>> _ = b.set_bolt("sum", Sum().with_tumbling_window(Count(3))).shuffle_grouping("numbers")
>>> result = complete_topology(b.create_topology())
>>> result.tuples("sum"), sorted(result.acked("numbers"))
([[6], [15]], [0, 1, 2, 3, 4, 5])

Event time: windows are (end - length, end], their ends multiples of the sliding interval; a
tuple whose timestamp is below the watermark is late and goes to the late-tuple stream as a
record (squall.components.side_records): its fields, then its origin, event time, the watermark
and the reason:

>>> from squall import Duration
>>> class Events(WindowedBolt):
...     def execute(self, window):
...         self.collector.emit(Values(window.end_timestamp, [t["v"] for t in window.get()]))
...     def declare_output_fields(self, declarer): declarer.declare(Fields("end", "values"))
>>> bolt = (Events().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
...         .with_late_tuple_stream("late"))
>>> b = TopologyBuilder()
>>> rows = [["a", 1000], ["b", 9000], ["c", 12000], ["d", 3000], ["e", 25000]]
>>> _ = b.set_spout("events", FixedTupleSpout(rows, Fields("v", "ts")))
>>> _ = b.set_bolt("windows", bolt).shuffle_grouping("events")
>>> result = complete_topology(b.create_topology())
>>> result.tuples("windows")
[[10000, ['a', 'b']], [20000, ['c']], [30000, ['e']]]
>>> result.tuples("windows", "late")
[['d', 3000, 'events', 'default', 1, 3000, 11000, 'late']]
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from squall.components.base import Bolt
from squall.components.side_records import side_fields
from squall.duration import Duration, to_millis
from squall.errors import InvalidTopologyError, SquallError
from squall.partition_watermarks import PARTITIONS_STREAM
from squall.topology import roles
from squall.topology.config import (
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS,
    Config,
    checkpoint_interval_ms,
    max_spout_pending,
    message_timeout_ms,
)
from squall.topology.declarer import StreamSpec
from squall.topology.description import Subscription, Topology
from squall.topology.groupings import AllGrouping
from squall.topology.tuple import Tuple
from squall.tuple_windows.spec import Count, WindowSpec
from squall.tuple_windows.window import TupleWindow

# Storm's configuration keys: the with_* methods put them in the component configuration.
WINDOW_LENGTH_COUNT = "topology.bolts.window.length.count"
WINDOW_LENGTH_DURATION_MS = "topology.bolts.window.length.duration.ms"
SLIDING_INTERVAL_COUNT = "topology.bolts.window.sliding.interval.count"
SLIDING_INTERVAL_DURATION_MS = "topology.bolts.window.sliding.interval.duration.ms"
TIMESTAMP_FIELD = "topology.bolts.tuple.timestamp.field.name"
TIMESTAMP_MAX_LAG_MS = "topology.bolts.tuple.timestamp.max.lag.ms"
WATERMARK_EVENT_INTERVAL_MS = "topology.bolts.watermark.event.interval.ms"
LATE_TUPLE_STREAM = "topology.bolts.late.tuple.stream"
# squall's own: a tuple without a valid timestamp stops being routed and raises instead.
TIMESTAMP_ERRORS_FATAL = "squall.window.timestamp.errors.fatal"
# Event time from the upstream sources' partitions (squall.partition_watermarks), opted into.
SOURCE_WATERMARKS = "squall.window.source.watermarks"

ERROR_STREAM = "window_errors"
"""Stream of tuples whose timestamp is missing or invalid, as side records
(squall.components.side_records): the tuple's fields, origin and the error as `reason`."""
_DEFAULT_WATERMARK_INTERVAL_MS = 1000

WindowMeasure = Count | Duration | datetime.timedelta


class WindowTimestampError(SquallError, ValueError):
    """A tuple of an event-time windowed bolt has no valid timestamp."""


class _TaskSide(Protocol):
    """What a windowed bolt reads from its task's role adapter (squall.task.roles.windowed),
    which holds the window and its counters."""

    window_errors: int

    def events_in_memory(self) -> int: ...


class WindowedBolt(Bolt):
    """A bolt that processes windows of tuples: implement `execute(window)`.

    Configure with `with_window(length, slide)` or `with_tumbling_window(length)`, where each is
    a `Count` or a `Duration` (all eight of Storm's forms), and for event time
    `with_timestamp_field`/`with_timestamp_extractor`, `with_lag`, `with_watermark_interval` and
    `with_late_tuple_stream`. Do not ack input tuples: the framework acks each one when it leaves
    the window (late tuples and tuples without a valid timestamp at once, after routing them to
    the late stream or to `window_errors`).
    """

    role = roles.WINDOWED
    _window_extractor: Callable[[Tuple], Any] | None = None
    # The task's role adapter (squall.task.roles.windowed), set by it when it sets up the
    # window: the window, its collector and counters are the framework's and live there.
    _task_side: _TaskSide | None = None

    def execute(self, window: TupleWindow[Tuple]) -> None:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} must implement execute(window)")

    # ---- configuration (Storm's BaseWindowedBolt) --------------------------------------------
    def _window_conf(self) -> dict[str, Any]:
        conf = self.__dict__.get("_window_settings")
        if conf is None:
            conf = self.__dict__["_window_settings"] = {}
        return conf

    def with_window(self, length: WindowMeasure, slide: WindowMeasure | None = None):
        """A sliding window: `length` and `slide` each a `Count` or a `Duration`.

        Without `slide` the window slides on every tuple (`Count(1)`), as in Storm.
        """
        conf = self._window_conf()
        for key in (WINDOW_LENGTH_COUNT, WINDOW_LENGTH_DURATION_MS, SLIDING_INTERVAL_COUNT,
                    SLIDING_INTERVAL_DURATION_MS):
            conf.pop(key, None)
        _put(conf, _measure(length, "length"), WINDOW_LENGTH_COUNT, WINDOW_LENGTH_DURATION_MS)
        _put(conf, _measure(slide if slide is not None else Count(1), "sliding interval"),
             SLIDING_INTERVAL_COUNT, SLIDING_INTERVAL_DURATION_MS)
        return self

    def with_tumbling_window(self, length: WindowMeasure):
        """A window that slides by its own length: consecutive windows do not overlap."""
        return self.with_window(length, length)

    def with_timestamp_field(self, name: str):
        """Event time: each tuple's timestamp (ms since epoch) is its field `name`."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"timestamp field must be a non-empty string, got {name!r}")
        self._window_conf()[TIMESTAMP_FIELD] = name
        self._window_extractor = None
        return self

    def with_timestamp_extractor(self, extractor: Callable[[Tuple], Any]):
        """Event time: each tuple's timestamp (ms since epoch) is `extractor(tuple)`."""
        if not callable(extractor):
            raise TypeError(f"timestamp extractor must be callable, got {extractor!r}")
        self._window_conf().pop(TIMESTAMP_FIELD, None)
        self._window_extractor = extractor
        return self

    def with_lag(self, lag: Duration | datetime.timedelta):
        """How far out of order tuples may arrive: the watermark trails the timestamps by it."""
        self._window_conf()[TIMESTAMP_MAX_LAG_MS] = to_millis(lag)
        return self

    def with_watermark_interval(self, interval: Duration | datetime.timedelta):
        """How often, in processing time, event-time windows are evaluated (default 1 s)."""
        self._window_conf()[WATERMARK_EVENT_INTERVAL_MS] = to_millis(interval)
        return self

    def with_source_watermarks(self, enabled: bool = True):
        """Take the watermark per partition of the upstream partitioned sources (files, Redis
        streams, Kafka) instead of Storm's rule (the largest timestamp per input stream, less
        the lag): a tuple is late when it is behind its own partition, the watermark is the
        slowest partition's, so results do not depend on how partitions are spread over tasks
        (docs/design/source-watermarks.md)."""
        self._window_conf()[SOURCE_WATERMARKS] = bool(enabled)
        return self

    def implicit_inputs(self, inputs: list[Subscription],
                        streams: Mapping[str, Mapping[str, StreamSpec]]) -> list[Subscription]:
        """With source watermarks, the partition events of every upstream partitioned source."""
        if not (self._window_conf().get(SOURCE_WATERMARKS) and self.event_time):
            return []
        have = {(s.component, s.stream) for s in inputs}
        return [Subscription(c, PARTITIONS_STREAM, AllGrouping())
                for c in dict.fromkeys(s.component for s in inputs)
                if PARTITIONS_STREAM in streams.get(c, {}) and (c, PARTITIONS_STREAM) not in have]

    def with_late_tuple_stream(self, stream: str):
        """Emit late tuples on `stream` (single field `late_tuple`) instead of only logging."""
        if not isinstance(stream, str) or not stream:
            raise ValueError(f"late tuple stream must be a non-empty string, got {stream!r}")
        self._window_conf()[LATE_TUPLE_STREAM] = stream
        return self

    @property
    def event_time(self) -> bool:
        return TIMESTAMP_FIELD in self._window_conf() or self._window_extractor is not None

    def window_spec(self, conf: Mapping[str, Any] | None = None) -> WindowSpec:
        """The window this bolt is configured with (`conf` overlays the with_* settings)."""
        c = {**self._window_conf(), **(conf or {})}
        if WINDOW_LENGTH_COUNT in c:
            length: Count | Duration = Count(int(c[WINDOW_LENGTH_COUNT]))
        elif WINDOW_LENGTH_DURATION_MS in c:
            length = Duration(int(c[WINDOW_LENGTH_DURATION_MS]))
        else:
            raise InvalidTopologyError(
                f"{type(self).__name__}: window length is not specified; call with_window(...) "
                "or with_tumbling_window(...)")
        if SLIDING_INTERVAL_COUNT in c:
            slide: Count | Duration = Count(int(c[SLIDING_INTERVAL_COUNT]))
        elif SLIDING_INTERVAL_DURATION_MS in c:
            slide = Duration(int(c[SLIDING_INTERVAL_DURATION_MS]))
        else:
            slide = Count(1)
        interval = c.get(WATERMARK_EVENT_INTERVAL_MS)
        return WindowSpec(
            length, slide,
            event_time=TIMESTAMP_FIELD in c or self._window_extractor is not None,
            lag_ms=int(c.get(TIMESTAMP_MAX_LAG_MS) or 0),
            watermark_interval_ms=int(_DEFAULT_WATERMARK_INTERVAL_MS if interval is None
                                      else interval),
        )

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """The window settings under Storm's keys, and the tick period that drives the window.

        Ticks wake the bolt when no tuple arrives: event time every watermark interval,
        processing time every sliding interval (or, for a duration window that slides by count,
        often enough to ack expired tuples).
        """
        conf = dict(self._window_conf())
        try:
            spec = self.window_spec()
        except InvalidTopologyError:
            return conf  # reported by check_window, with the component's id
        if spec.event_time:
            tick_ms = spec.watermark_interval_ms
        elif spec.slide_ms is not None:
            tick_ms = spec.slide_ms
        elif spec.length_ms is not None:
            tick_ms = min(spec.length_ms, _DEFAULT_WATERMARK_INTERVAL_MS)
        else:
            tick_ms = 0
        if tick_ms:
            conf[TOPOLOGY_TICK_TUPLE_FREQ_SECS] = tick_ms / 1000
        return conf

    def derived_streams(self, component_id: str, inputs: list[Subscription],
                        streams: Mapping[str, Mapping[str, StreamSpec]],
                        conf: Mapping[str, Any]) -> dict[str, StreamSpec]:
        """The late-tuple stream and, in event time, `window_errors`: each record the input
        tuple's fields and where and why it left the window (squall.components.side_records)."""
        out: dict[str, StreamSpec] = {}
        declared = streams.get(component_id, {})
        # The late stream may be set through the key as well as `with_late_tuple_stream`.
        late = conf.get(LATE_TUPLE_STREAM)
        if late is not None and not self.event_time:
            raise InvalidTopologyError(
                "a late tuple stream can be defined only when specifying a timestamp field or "
                "extractor (with_timestamp_field / with_timestamp_extractor)",
                component=component_id)
        side = ([late] if late is not None else []) + ([ERROR_STREAM] if self.event_time else [])
        for stream in side:
            fields = side_fields(component_id, stream, inputs, streams)
            mine = declared.get(stream)
            if mine is not None and mine.fields.to_list() != fields.to_list():
                raise InvalidTopologyError(
                    f"stream {stream!r} is declared for you (fields {fields.to_list()}); "
                    f"do not declare it in declare_output_fields", component=component_id)
            out[stream] = StreamSpec(fields)
        return out

    def check_component(self, component_id: str) -> None:
        self.check_window(component_id)

    def check_window(self, component_id: str) -> None:
        """Build-time checks of the window configuration (Storm checks them at prepare)."""
        try:
            self.window_spec()
        except (InvalidTopologyError, ValueError, TypeError) as exc:
            raise InvalidTopologyError(str(exc), component=component_id) from None
        if LATE_TUPLE_STREAM in self._window_conf() and not self.event_time:
            raise InvalidTopologyError(
                "a late tuple stream can be defined only when specifying a timestamp field or "
                "extractor (with_timestamp_field / with_timestamp_extractor)",
                component=component_id)

    # ---- what the framework reports -------------------------------------------------------
    @property
    def window_errors(self) -> int:
        """How many tuples this task routed to `window_errors` (no valid timestamp) so far."""
        side = self._task_side
        return 0 if side is None else side.window_errors

    def timestamp_extractor(self) -> Callable[[Tuple], Any] | None:
        """The extractor set with `with_timestamp_extractor`, if any."""
        return self._window_extractor

    def __getstate__(self) -> dict[str, Any]:
        # The link to the role adapter is not the bolt's: a task snapshot carries the adapter's
        # state separately, and the restoring adapter links itself to the restored bolt.
        state = dict(self.__dict__)
        state.pop("_task_side", None)
        return state


def detached(tup: Tuple) -> Tuple:
    """A copy of `tup` that carries its values and origin but no tuple-tree bookkeeping."""
    return Tuple(list(tup.values), tup.fields, tup.source_component, tup.source_stream_id,
                 tup.source_task)


def _measure(value: Any, what: str) -> Count | Duration:
    if isinstance(value, (Count, Duration)):
        return value
    if isinstance(value, datetime.timedelta):
        return Duration(to_millis(value))
    raise TypeError(f"window {what} must be a Count, a Duration or a timedelta, got {value!r}")


def _put(conf: dict[str, Any], value: Count | Duration, count_key: str, ms_key: str) -> None:
    if isinstance(value, Count):
        conf[count_key] = value.value
    else:
        if value.millis < 1:
            raise ValueError(f"window durations must be at least 1 ms, got {value}")
        conf[ms_key] = value.millis


# Set by `StatefulWindowedBolt.with_persistence()`: the window's contents are kept in state.
PERSISTENT = "squall.window.persistent"


def check_window_limits(topology: Topology, conf: Mapping[str, Any] | None) -> None:
    """Storm's prepare-time limits (§4.2), checked when a runner is created, before any work.

    A windowed bolt holds its input un-acked while tuples are in the window: a duration window
    longer than the message timeout would time out its own tuples, and a count window longer
    than `topology.max.spout.pending` would wait for ever. Equality is allowed, as in Storm.
    A persistent stateful windowed bolt acks its input at every checkpoint instead, so for it
    (Storm's `PersistentWindowedBoltExecutor.validate`) only the checkpoint interval must not
    exceed the message timeout. A late tuple stream named in the run's configuration
    (`topology.bolts.late.tuple.stream`) must be one the bolt declares, as Storm's executor
    checks at prepare: the builder method declares it.
    """
    for cid, spec in topology.bolts.items():
        c = spec.conf
        if WINDOW_LENGTH_COUNT not in c and WINDOW_LENGTH_DURATION_MS not in c:
            continue
        eff = Config.effective_of(conf, c)
        late = eff.get(LATE_TUPLE_STREAM)
        if late is not None and late not in spec.streams:
            raise InvalidTopologyError(
                f"windowed bolt {cid!r}: the late tuple stream {late!r} "
                f"({LATE_TUPLE_STREAM} in the topology configuration) is not defined on the "
                f"bolt; define it with the builder method with_late_tuple_stream({late!r}) "
                "(Storm's withLateTupleStream), which needs a timestamp field or extractor",
                component=cid)
        timeout = message_timeout_ms(eff)
        if c.get(PERSISTENT):
            interval = checkpoint_interval_ms(eff)
            if timeout is not None and interval > timeout:
                raise InvalidTopologyError(
                    f"persistent windowed bolt {cid!r}: {TOPOLOGY_STATE_CHECKPOINT_INTERVAL} "
                    f"({interval} ms) exceeds topology.message.timeout.secs ({timeout} ms); "
                    "its tuples are acked at the checkpoint and would time out before it. "
                    "Raise the timeout or checkpoint more often", component=cid)
            continue
        length_ms, slide_ms = c.get(WINDOW_LENGTH_DURATION_MS), c.get(SLIDING_INTERVAL_DURATION_MS)
        durations = [v for v in (length_ms, slide_ms) if v is not None]
        if timeout is not None and durations and sum(durations) > timeout:
            what = "window length + sliding interval" if len(durations) == 2 else (
                "window length" if length_ms is not None else "sliding interval")
            raise InvalidTopologyError(
                f"windowed bolt {cid!r}: {what} ({sum(durations)} ms) exceeds "
                f"topology.message.timeout.secs ({timeout} ms); its tuples would time out "
                "while still in the window. Raise the timeout or shorten the window",
                component=cid)
        pending = max_spout_pending(eff)
        counts = [c[k] for k in (WINDOW_LENGTH_COUNT, SLIDING_INTERVAL_COUNT) if k in c]
        if pending and counts and sum(counts) > pending:
            what = "window length + sliding interval" if len(counts) == 2 else (
                "window length" if WINDOW_LENGTH_COUNT in c else "sliding interval")
            raise InvalidTopologyError(
                f"windowed bolt {cid!r}: {what} ({sum(counts)} tuples) exceeds "
                f"topology.max.spout.pending ({pending}); the spouts would stop before the "
                "window fills. Raise max spout pending or shorten the window",
                component=cid)
