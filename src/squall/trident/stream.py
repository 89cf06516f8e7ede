"""`TridentTopology` and `Stream`: Storm's Trident API, building a plan of operations.

>>> from squall.trident import TridentTopology, Count, FixedBatchSpout, Function
>>> from squall.trident.state import MemoryMapState
>>> class Split(Function):
...     def execute(self, tup, collector):
...         for w in tup[0].split():
...             collector.emit([w])
>>> t = TridentTopology()
>>> spout = FixedBatchSpout(["sentence"], 2, ["a b"], ["b c"])
>>> counts = (t.new_stream("spout1", spout).each(["sentence"], Split(), ["word"])
...           .group_by(["word"])
...           .persistent_aggregate(MemoryMapState.factory(), Count(), ["count"]))
>>> sorted(t.build().components)
['b-1-each', 'b-2-persistent_aggregate', 'spout1']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, assert_never

import cloudpickle

from squall.duration import to_millis
from squall.errors import InvalidTopologyError, NotPicklableError
from squall.topology import roles
from squall.topology.declarer import DEFAULT_STREAM, StreamSpec
from squall.topology.description import ComponentSpec, Subscription, Topology
from squall.topology.fields import Fields
from squall.topology.groupings import (
    AllGrouping,
    CustomGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    ShuffleGrouping,
)
from squall.trident.operations import (
    DECLARABLE,
    Aggregator,
    BatchFunction,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    Operation,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
    max_by,
    min_by,
)
from squall.trident.plan import (
    AggregateNode,
    Aggregation,
    Broadcast,
    CustomPartition,
    Global,
    JoinNode,
    JoinType,
    MergeNode,
    Node,
    PartitionBy,
    Persist,
    PersistNode,
    RepartitionNode,
    RowNode,
    RowOp,
    Scheme,
    Scope,
    Shuffle,
    SpoutNode,
    StateQueryNode,
    WindowBy,
    WindowNode,
    user_op,
)
from squall.trident.spouts import check_spout, spout_fields
from squall.trident.state import DurableMapState, StateType

AGGREGATORS = (CombinerAggregator, ReducerAggregator, Aggregator)


def _names(fields: Fields | Iterable[str] | str, what: str, where: str) -> tuple[str, ...]:
    if isinstance(fields, str):
        fields = [fields]
    names = tuple(fields)
    if not all(isinstance(f, str) and f for f in names):
        raise InvalidTopologyError(f"{where}: {what} must be field names (strings), got {names!r}")
    if len(set(names)) != len(names):
        raise InvalidTopologyError(f"{where}: {what} {list(names)} name a field twice")
    _unreserved(names, f"{where}: {what}")
    return names


def _unreserved(names: Sequence[str], where: str) -> None:
    """Names starting with '$' are squall's own columns on Spark ('$partial', '$v#i', ...)."""
    for f in names:
        if f.startswith("$"):
            raise InvalidTopologyError(f"{where} {list(names)}: field names starting with '$' "
                                       f"are reserved for squall's own columns; rename {f!r}",
                                       field=f)


class _Node:
    """A node while the topology is being built: its parents are nodes, and `plan` its plan
    node but for what `build` fills in (component id, parents' ids, partitions, order).
    `reads`: a state query's state's node (`build` names it the query's writer)."""

    def __init__(self, topology: TridentTopology, parents: Sequence[_Node], plan: Node, *,
                 reads: _Node | None = None) -> None:
        self.topology, self.parents, self.plan, self.reads = topology, tuple(parents), plan, reads
        self.order = topology._take_order()
        self.name: str | None = None
        self.parallelism: int | None = None
        topology._nodes.append(self)

    @property
    def fields(self) -> tuple[str, ...]:
        return self.plan.fields

    def describe(self) -> str:
        return f"{self.name or self.plan.label} (fields {list(self.fields)})"


class Stream:
    """A stream of batches of tuples with named fields; every operation returns a new stream."""

    def __init__(self, node: _Node) -> None:
        self._node = node

    # ---- helpers ---------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...]:
        """The fields of this stream's tuples."""
        return self._node.fields

    def _where(self, op: str) -> str:
        return f"Trident {op} on stream {self._node.describe()}"

    def _inputs(self, fields: Any, op: str) -> tuple[str, ...]:
        names = _names(fields, "input fields", self._where(op))
        for f in names:
            if f not in self.fields:
                raise InvalidTopologyError(
                    f"{self._where(op)}: no field {f!r}; the stream has {list(self.fields)}",
                    field=f)
        return names

    def _new_fields(self, fields: Any, op: str, keep: tuple[str, ...]) -> tuple[str, ...]:
        names = _names(fields, "output fields", self._where(op))
        for f in names:
            if f in keep:
                raise InvalidTopologyError(
                    f"{self._where(op)}: output field {f!r} is already a field of the stream "
                    f"{list(keep)}; choose another name or project it away first", field=f)
        return names

    def _add(self, plan: Node, parents: Sequence[_Node] | None = None) -> Stream:
        return Stream(self._new(plan, parents))

    def _new(self, plan: Node, parents: Sequence[_Node] | None = None) -> _Node:
        return _Node(self._node.topology, parents or [self._node], plan)

    def _row(self, row_op: RowOp, fields: tuple[str, ...], inputs: tuple[str, ...], op: Any,
             output: tuple[str, ...] = ()) -> Stream:
        return self._add(RowNode(fields=fields, row_op=row_op, input=inputs, op=op,
                                 output=output))

    def _repartition(self, scheme: Scheme) -> Stream:
        return self._add(RepartitionNode(fields=self.fields, scheme=scheme))

    def _aggregate(self, scope: Scope, fields: tuple[str, ...], inputs: tuple[str, ...], op: Any,
                   output: tuple[str, ...], keys: tuple[str, ...] = ()) -> Stream:
        return self._add(AggregateNode(fields=fields, scope=scope, keys=keys,
                                       aggregations=(Aggregation(inputs, op, output),)))

    @staticmethod
    def _check_op(op: Any, types: tuple[type, ...], where: str, what: str) -> None:
        if not isinstance(op, types):
            names = " or ".join(t.__name__ for t in types)
            raise InvalidTopologyError(f"{where}: {what} must be a {names}, got "
                                       f"{type(op).__name__}")

    # ---- naming and parallelism ------------------------------------------------------------
    def name(self, name: str) -> Stream:
        """Names this operation (its component id in the topology, the UI and the stats)."""
        _check_name(name, self._where("name"))
        self._node.name = name
        return self

    def parallelism_hint(self, n: int) -> Stream:
        """The number of partitions of the operations since the last repartitioning (Storm:
        of the bolt they run in)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidTopologyError(f"{self._where('parallelism_hint')}: parallelism must be "
                                       f"a positive int, got {n!r}")
        node: _Node | None = self._node
        while node is not None:
            node.parallelism = n
            if not node.plan.keeps_partitioning or len(node.parents) != 1:
                break
            node = node.parents[0]
        return self

    # ---- row operations --------------------------------------------------------------------
    def each(self, input_fields: Any, op: Any = None, function_fields: Any = None) -> Stream:
        """`each(input_fields, function, function_fields)`: the function's emitted values are
        appended to each input tuple; `each(input_fields, filter)` keeps tuples; the input
        fields may be left out (`each(function, function_fields)`: all fields)."""
        if isinstance(input_fields, Operation):
            input_fields, op, function_fields = self.fields, input_fields, op
        inputs = self._inputs(input_fields, "each")
        where = self._where("each")
        self._check_op(op, (Function, Filter, BatchFunction), where, "the operation")
        if isinstance(op, Filter):
            if function_fields is not None:
                raise InvalidTopologyError(f"{where}: a Filter emits no fields; leave out "
                                           f"the function fields {function_fields!r}")
            return self._row(RowOp.FILTER, self.fields, inputs, op)
        if function_fields is None:
            raise InvalidTopologyError(f"{where}: {type(op).__name__} needs its output fields: "
                                       "each(input_fields, function, function_fields)")
        out = self._new_fields(function_fields, "each", self.fields)
        if isinstance(op, (Function, BatchFunction)):
            _check_declared(op, out, where)
        return self._row(RowOp.EACH, self.fields + out, inputs, op, out)

    def filter(self, input_fields: Any, op: Any = None) -> Stream:
        """Keeps the tuples for which the filter's `is_keep` is true."""
        if isinstance(input_fields, Operation):
            input_fields, op = self.fields, input_fields
        self._check_op(op, (Filter,), self._where("filter"), "the filter")
        return self._row(RowOp.FILTER, self.fields, self._inputs(input_fields, "filter"), op)

    def map(self, function: MapFunction, output_fields: Any = None) -> Stream:
        """One new tuple per tuple (same fields unless `output_fields` are given)."""
        self._check_op(function, (MapFunction,), self._where("map"), "the function")
        out = self.fields if output_fields is None else _names(output_fields, "output fields",
                                                               self._where("map"))
        return self._row(RowOp.MAP, out, self.fields, function, out)

    def flat_map(self, function: FlatMapFunction, output_fields: Any = None) -> Stream:
        """Any number of new tuples per tuple (same fields unless `output_fields` are given)."""
        self._check_op(function, (FlatMapFunction,), self._where("flat_map"), "the function")
        out = self.fields if output_fields is None else _names(output_fields, "output fields",
                                                               self._where("flat_map"))
        return self._row(RowOp.FLAT_MAP, out, self.fields, function, out)

    def peek(self, consumer: Consumer) -> Stream:
        """Calls `consumer.accept(tuple)` for every tuple; the stream is unchanged."""
        self._check_op(consumer, (Consumer,), self._where("peek"), "the consumer")
        return self._row(RowOp.PEEK, self.fields, self.fields, consumer)

    def project(self, fields: Any) -> Stream:
        """Keeps only `fields`, in that order."""
        names = self._inputs(fields, "project")
        return self._row(RowOp.PROJECT, names, names, None)

    # ---- repartitioning --------------------------------------------------------------------
    def shuffle(self) -> Stream:
        return self._repartition(Shuffle())

    def partition_by(self, fields: Any) -> Stream:
        """Tuples with equal `fields` go to the same partition."""
        return self._repartition(PartitionBy(self._inputs(fields, "partition_by")))

    def broadcast(self) -> Stream:
        """Every partition gets every tuple."""
        return self._repartition(Broadcast())

    def global_(self) -> Stream:
        """Every tuple of every batch to one partition."""
        return self._repartition(Global())

    def batch_global(self) -> Stream:
        """Every tuple of a batch to one partition (one batch is one micro-batch here)."""
        return self._repartition(Global(per_batch=True))

    def partition(self, grouping: Any) -> Stream:
        """A custom partitioning: a `CustomStreamGrouping` (`choose_tasks(task, values)`
        returns partition indexes 0..n-1 here)."""
        if not callable(getattr(grouping, "choose_tasks", None)):
            raise InvalidTopologyError(f"{self._where('partition')}: needs a "
                                       "CustomStreamGrouping with choose_tasks(task, values)")
        return self._repartition(CustomPartition(grouping))

    # ---- aggregation -----------------------------------------------------------------------
    def _agg_args(self, args: tuple[Any, ...], op: str) -> tuple[tuple[str, ...], Any, Any]:
        if len(args) == 2:
            return self.fields, args[0], args[1]
        if len(args) == 3:
            return self._inputs(args[0], op), args[1], args[2]
        raise InvalidTopologyError(f"{self._where(op)}: takes ([input_fields,] aggregator, "
                                   "function_fields)")

    def partition_aggregate(self, *args: Any) -> Stream:
        """Aggregates each partition of each batch separately; emits only the function fields."""
        inputs, agg, fn_fields = self._agg_args(args, "partition_aggregate")
        self._check_op(agg, AGGREGATORS, self._where("partition_aggregate"), "the aggregator")
        out = _names(fn_fields, "function fields", self._where("partition_aggregate"))
        return self._aggregate(Scope.PARTITION, out, inputs, agg, out)

    def aggregate(self, *args: Any) -> Stream:
        """Aggregates each whole batch; emits only the function fields."""
        inputs, agg, fn_fields = self._agg_args(args, "aggregate")
        self._check_op(agg, AGGREGATORS, self._where("aggregate"), "the aggregator")
        out = _names(fn_fields, "function fields", self._where("aggregate"))
        return self._aggregate(Scope.BATCH, out, inputs, agg, out)

    def min_by(self, field: str) -> Stream:
        """The tuple of the batch with the smallest `field`."""
        self._inputs([field], "min_by")
        return self._aggregate(Scope.BATCH, self.fields, self.fields, min_by(field), self.fields)

    def max_by(self, field: str) -> Stream:
        """The tuple of the batch with the largest `field`."""
        self._inputs([field], "max_by")
        return self._aggregate(Scope.BATCH, self.fields, self.fields, max_by(field), self.fields)

    def tumbling_window(self, size: Any, input_fields: Any, aggregator: CombinerAggregator,
                        function_fields: Any, *, timestamp_field: str | None = None,
                        lag: Any = 0, state: Any = None) -> Stream:
        """Tumbling windows of `size` (a `Duration` or milliseconds): emits `(window_start,
        window_end, value)` per window once the watermark passes its end (see
        `squall.trident.windows`). In event time over `timestamp_field` (milliseconds; the
        watermark is the largest timestamp seen minus `lag`), or without one in processing
        time: every tuple of a transaction has the transaction's time (kept for its replays)
        and the watermark is that time. `state`: the window state's factory (default: durable,
        opaque)."""
        return GroupedStream(self, ()).tumbling_window(
            size, input_fields, aggregator, function_fields, timestamp_field=timestamp_field,
            lag=lag, state=state)

    def sliding_window(self, size: Any, slide: Any, input_fields: Any,
                       aggregator: CombinerAggregator, function_fields: Any, *,
                       timestamp_field: str | None = None, lag: Any = 0,
                       state: Any = None) -> Stream:
        """Windows of `size` starting every `slide` (see `tumbling_window`)."""
        return GroupedStream(self, ()).sliding_window(
            size, slide, input_fields, aggregator, function_fields,
            timestamp_field=timestamp_field, lag=lag, state=state)

    def tumbling_count_window(self, count: int, input_fields: Any,
                              aggregator: CombinerAggregator, function_fields: Any, *,
                              state: Any = None) -> Stream:
        """Windows of `count` tuples in stream order: emits `(window_start, window_end,
        value)`, the window's tuple positions `[start, end)`, as its last tuple arrives
        (Storm's count windows; see `squall.trident.windows`)."""
        return GroupedStream(self, ()).sliding_count_window(
            count, count, input_fields, aggregator, function_fields, state=state)

    def sliding_count_window(self, count: int, slide: int, input_fields: Any,
                             aggregator: CombinerAggregator, function_fields: Any, *,
                             state: Any = None) -> Stream:
        """Windows of `count` tuples starting every `slide` tuples (see
        `tumbling_count_window`)."""
        return GroupedStream(self, ()).sliding_count_window(
            count, slide, input_fields, aggregator, function_fields, state=state)

    def group_by(self, fields: Any) -> GroupedStream:
        """Groups each batch by `fields` for the aggregation that follows."""
        return GroupedStream(self, self._inputs(fields, "group_by"))

    def persistent_aggregate(self, factory: Any, *args: Any) -> TridentState:
        """Aggregates every batch into one global value kept in a map state (key `()`)."""
        return GroupedStream(self, ()).persistent_aggregate(factory, *args)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self, ())

    # ---- state -----------------------------------------------------------------------------
    def state_query(self, state: TridentState, input_fields: Any, function: QueryFunction,
                    function_fields: Any) -> Stream:
        """Reads `state` for each tuple (its committed values, as of the previous batch for a
        state this topology also updates) and appends the function's output."""
        where = self._where("state_query")
        if not isinstance(state, TridentState):
            raise InvalidTopologyError(f"{where}: the state must be a TridentState "
                                       "(from persistent_aggregate or new_static_state)")
        self._check_op(function, (QueryFunction,), where, "the query function")
        inputs = self._inputs(input_fields, "state_query")
        out = self._new_fields(function_fields, "state_query", self.fields)
        plan = StateQueryNode(fields=self.fields + out, state=state.state_name,
                              factory=state.factory, input=inputs, op=function, output=out)
        return Stream(_Node(self._node.topology, [self._node], plan, reads=state.node))

    def partition_persist(self, factory: Any, input_fields: Any, updater: StateUpdater,
                          function_fields: Any = ()) -> TridentState:
        """Writes each partition's tuples of each batch to a state with `updater`."""
        where = self._where("partition_persist")
        self._check_op(updater, (StateUpdater,), where, "the updater")
        _check_factory(factory, where)
        inputs = self._inputs(input_fields, "partition_persist")
        out = _names(function_fields, "function fields", where)
        return TridentState(self._new(PersistNode(
            fields=out, persist=Persist.PARTITION, state=self._node.topology._state_name(),
            factory=factory, input=inputs, op=updater, output=out)), factory)

    def to_stream(self) -> Stream:
        return self

    def __repr__(self) -> str:
        return f"Stream({self._node.describe()})"


class GroupedStream:
    """A stream grouped by key fields: `aggregate`, `partition_aggregate`,
    `persistent_aggregate` and `chained_agg` work per group."""

    def __init__(self, stream: Stream, keys: tuple[str, ...]) -> None:
        self.stream, self.keys = stream, keys

    def _agg(self, kind: str,
             args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any, tuple[str, ...]]:
        s = self.stream
        inputs, agg, fn_fields = s._agg_args(args, kind)
        s._check_op(agg, AGGREGATORS, s._where(kind), "the aggregator")
        out = s._new_fields(fn_fields, kind, self.keys)
        return inputs, agg, out

    def aggregate(self, *args: Any) -> Stream:
        """Per group of each batch: emits the group's key fields and the function fields."""
        inputs, agg, out = self._agg("aggregate", args)
        return self.stream._aggregate(Scope.GROUP, self.keys + out, inputs, agg, out, self.keys)

    def partition_aggregate(self, *args: Any) -> Stream:
        inputs, agg, out = self._agg("partition_aggregate", args)
        return self.stream._aggregate(Scope.PARTITION, self.keys + out, inputs, agg, out,
                                      self.keys)

    def persistent_aggregate(self, factory: Any, *args: Any) -> TridentState:
        """Aggregates each batch per group and folds the result into the map state made by
        `factory`, exactly once per batch for transactional and opaque states."""
        where = self.stream._where("persistent_aggregate")
        _check_factory(factory, where)
        inputs, agg, out = self._agg("persistent_aggregate", args)
        if not isinstance(agg, (CombinerAggregator, ReducerAggregator)):
            raise InvalidTopologyError(f"{where}: a map state is updated by a "
                                       "CombinerAggregator or a ReducerAggregator, got "
                                       f"{type(agg).__name__}")
        if len(out) != 1:
            raise InvalidTopologyError(f"{where}: a map state keeps one value per key; give one "
                                       f"function field, got {list(out)}")
        s = self.stream
        return TridentState(s._new(PersistNode(
            fields=self.keys + out, persist=Persist.AGGREGATE, state=s._node.topology._state_name(),
            factory=factory, input=inputs, op=agg, output=out, keys=self.keys)), factory)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self.stream, self.keys)

    def state_query(self, state: TridentState, input_fields: Any, function: QueryFunction,
                    function_fields: Any) -> Stream:
        """Storm's `GroupedStream.stateQuery`: the tuples partitioned by the group's keys, then
        `state_query` (each key's lookups in one partition)."""
        return self.stream.partition_by(self.keys).state_query(state, input_fields, function,
                                                                function_fields)

    def tumbling_window(self, size: Any, input_fields: Any, aggregator: CombinerAggregator,
                        function_fields: Any, *, timestamp_field: str | None = None,
                        lag: Any = 0, state: Any = None) -> Stream:
        """Per group: `(keys..., window_start, window_end, value)` (see
        `Stream.tumbling_window`)."""
        return self.sliding_window(size, size, input_fields, aggregator, function_fields,
                                   timestamp_field=timestamp_field, lag=lag, state=state)

    def sliding_window(self, size: Any, slide: Any, input_fields: Any,
                       aggregator: CombinerAggregator, function_fields: Any, *,
                       timestamp_field: str | None = None, lag: Any = 0,
                       state: Any = None) -> Stream:
        """Per group: `(keys..., window_start, window_end, value)` for windows of `size`
        starting every `slide` (see `Stream.tumbling_window`)."""
        where = self.stream._where("window")
        try:
            size_ms, slide_ms, lag_ms = to_millis(size), to_millis(slide), to_millis(lag)
        except TypeError as exc:
            raise InvalidTopologyError(f"{where}: {exc}") from None
        if size_ms < 1 or slide_ms < 1 or slide_ms > size_ms or lag_ms < 0:
            raise InvalidTopologyError(f"{where}: need 0 < slide <= size and lag >= 0, got "
                                       f"size {size_ms} ms, slide {slide_ms} ms, lag {lag_ms} ms")
        if timestamp_field is None and lag_ms:
            raise InvalidTopologyError(f"{where}: a processing-time window (no timestamp_field) "
                                       f"has no lag, got {lag_ms} ms")
        if timestamp_field is not None:
            self.stream._inputs([timestamp_field], "window")
        return self._window(WindowBy.EVENT if timestamp_field else WindowBy.PROCESSING,
                            size_ms, slide_ms,
                            input_fields, aggregator, function_fields, state,
                            lag=lag_ms, timestamp_field=timestamp_field)

    def tumbling_count_window(self, count: int, input_fields: Any,
                              aggregator: CombinerAggregator, function_fields: Any, *,
                              state: Any = None) -> Stream:
        """Per group: `(keys..., window_start, window_end, value)`, positions in the group's
        tuples (see `Stream.tumbling_count_window`)."""
        return self.sliding_count_window(count, count, input_fields, aggregator,
                                         function_fields, state=state)

    def sliding_count_window(self, count: int, slide: int, input_fields: Any,
                             aggregator: CombinerAggregator, function_fields: Any, *,
                             state: Any = None) -> Stream:
        """Per group: windows of `count` tuples starting every `slide` tuples."""
        where = self.stream._where("window")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (count, slide)) \
                or not 0 < slide <= count:
            raise InvalidTopologyError(f"{where}: need whole numbers 0 < slide <= count, got "
                                       f"count {count!r}, slide {slide!r}")
        return self._window(WindowBy.COUNT, count, slide, input_fields, aggregator,
                            function_fields,
                            state, lag=0, timestamp_field=None)

    def _window(self, by: WindowBy, size: int, slide: int, input_fields: Any,
                aggregator: CombinerAggregator, function_fields: Any, state: Any, *,
                lag: int, timestamp_field: str | None) -> Stream:
        s = self.stream
        where = s._where("window")
        inputs = s._inputs(input_fields, "window")
        if not isinstance(aggregator, CombinerAggregator):
            raise InvalidTopologyError(f"{where}: windows combine their tuples with a "
                                       f"CombinerAggregator, got {type(aggregator).__name__}")
        out = s._new_fields(function_fields, "window",
                            (*self.keys, "window_start", "window_end"))
        factory = state if state is not None else DurableMapState.factory(StateType.OPAQUE)
        _check_factory(factory, where)
        kind = getattr(getattr(factory, "state_type", None), "name", "")
        if kind == "TRANSACTIONAL":
            raise InvalidTopologyError(
                f"{where}: a window state must be OPAQUE (or NON_TRANSACTIONAL): firing a "
                "window on a replayed batch needs the state as it was before the batch, which a "
                "transactional map does not keep")
        return s._add(WindowNode(
            fields=(*self.keys, "window_start", "window_end", *out), by=by, size=size,
            slide=slide, lag=lag, timestamp_field=timestamp_field, keys=self.keys, input=inputs,
            op=aggregator, output=out, state=s._node.topology._state_name(), factory=factory))

    def to_stream(self) -> Stream:
        return self.stream


class ChainedAggregatorDeclarer:
    """Several aggregations of the same groups in one pass: `.aggregate(...)` repeatedly, then
    `.chain_end()`; the output holds the key fields and every aggregator's fields."""

    def __init__(self, stream: Stream, keys: tuple[str, ...]) -> None:
        self.stream, self.keys = stream, keys
        self.parts: list[Aggregation] = []

    def aggregate(self, *args: Any) -> ChainedAggregatorDeclarer:
        s = self.stream
        inputs, agg, fn_fields = s._agg_args(args, "chained_agg")
        s._check_op(agg, AGGREGATORS, s._where("chained_agg"), "the aggregator")
        used = self.keys + tuple(f for a in self.parts for f in a.output)
        self.parts.append(Aggregation(inputs, agg, s._new_fields(fn_fields, "chained_agg", used)))
        return self

    def chain_end(self) -> Stream:
        if not self.parts:
            raise InvalidTopologyError(f"{self.stream._where('chained_agg')}: chain at least "
                                       "one aggregate before chain_end()")
        out = tuple(f for a in self.parts for f in a.output)
        return self.stream._add(AggregateNode(
            fields=self.keys + out, scope=Scope.GROUP if self.keys else Scope.BATCH,
            keys=self.keys, aggregations=tuple(self.parts), chained=True))


class TridentState:
    """A state a topology writes (`persistent_aggregate`, `partition_persist`) or reads
    (`new_static_state`); `state_query` reads it, `new_values_stream` streams its updates."""

    def __init__(self, node: _Node | None, factory: Any, name: str = "") -> None:
        # `node`: the operation writing the state (its plan node names the state); None for a
        # static state, named `name`.
        self.node, self.factory, self._static_name = node, factory, name

    def _writer(self) -> tuple[_Node, PersistNode] | None:
        if self.node is None:
            return None
        plan = self.node.plan
        assert isinstance(plan, PersistNode)
        return self.node, plan

    @property
    def state_name(self) -> str:
        writer = self._writer()
        return self._static_name if writer is None else writer[1].state

    def new_values_stream(self) -> Stream:
        """The stream of each batch's updated `(key fields..., new value)` tuples."""
        if self.node is None:
            raise InvalidTopologyError(f"static state {self._static_name!r}: this topology does "
                                       "not update it, so it has no stream of updates")
        return Stream(self.node)

    to_stream = new_values_stream

    def parallelism_hint(self, n: int) -> TridentState:
        if self.node is not None:  # a static state is not an operation here
            Stream(self.node).parallelism_hint(n)
        return self

    def name(self, name: str) -> TridentState:
        """Names the state (its table, file or Redis key) and its update operation."""
        writer = self._writer()
        if writer is None:
            _check_name(name, f"new_static_state({self._static_name!r})")
            self._static_name = name
        else:
            node, plan = writer
            Stream(node).name(name)
            node.plan = replace(plan, state=name)
        return self


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not name or name.startswith("$"):
        raise InvalidTopologyError(f"{where}: a name must be a non-empty string not starting "
                                   f"with '$', got {name!r}")


def _check_factory(factory: Any, where: str) -> None:
    if not callable(getattr(factory, "make_state", None)):
        raise InvalidTopologyError(f"{where}: needs a state factory such as "
                                   "DurableMapState.factory(StateType.TRANSACTIONAL), got "
                                   f"{type(factory).__name__}")


class TridentTopology:
    """Builds Trident streams; `build()` gives an ordinary squall `Topology`."""

    def __init__(self) -> None:
        self._nodes: list[_Node] = []
        self._created = 0  # operations and static states so far: the next one's order
        self._txids: set[str] = set()

    def _take_order(self) -> int:
        self._created += 1
        return self._created - 1

    def _state_name(self) -> str:
        """The default name of the state the next operation keeps: `state-<its order>`."""
        return f"state-{self._created}"

    def new_stream(self, txid: str, spout: Any) -> Stream:
        """A stream from `spout` (a `BatchSpout` or a partitioned transactional or opaque
        spout); `txid` names the stream's transactions and is the spout's component id."""
        if not isinstance(txid, str) or not txid or txid.startswith("$"):
            raise InvalidTopologyError(f"new_stream: the txid name must be a non-empty string "
                                       f"not starting with '$', got {txid!r}")
        if txid in self._txids:
            raise InvalidTopologyError(f"new_stream: txid {txid!r} is used twice",
                                       component=txid)
        check_spout(txid, spout)
        fields = spout_fields(txid, spout)
        _unreserved(fields, f"new_stream({txid!r}): the spout's fields")
        self._txids.add(txid)
        node = _Node(self, [], SpoutNode(fields=fields, spout=spout))
        node.name = txid
        node.parallelism = 1
        return Stream(node)

    def new_static_state(self, factory: Any, name: str) -> TridentState:
        """A state this topology only reads (filled by something else), for `state_query`."""
        _check_factory(factory, f"new_static_state({name!r})")
        self._take_order()  # numbered as an operation is (the ids of those after it)
        return TridentState(None, factory, name)

    def merge(self, *streams: Stream, output_fields: Any = None) -> Stream:
        """All tuples of the streams' batches in one stream (the fields of the first, or
        `output_fields`); the streams must have as many fields."""
        if len(streams) < 2:
            raise InvalidTopologyError("merge needs at least two streams")
        width = len(streams[0].fields)
        for s in streams:
            if len(s.fields) != width:
                raise InvalidTopologyError(f"merge: {s!r} has {len(s.fields)} fields, "
                                           f"{streams[0]!r} has {width}")
        out = streams[0].fields if output_fields is None else _names(
            output_fields, "output fields", "merge")
        return streams[0]._add(MergeNode(fields=out), parents=[s._node for s in streams])

    def join(self, left: Stream, left_fields: Any, right: Stream, right_fields: Any,
             output_fields: Any, join_type: str = "inner") -> Stream:
        """Joins the tuples of the same batch of two streams on equal key fields (Storm joins
        per batch). Output: the keys, then the left's other fields, then the right's, named
        by `output_fields`. `join_type`: "inner", "left" or "outer" (missing side: None)."""
        lk, rk = left._inputs(left_fields, "join"), right._inputs(right_fields, "join")
        if len(lk) != len(rk):
            raise InvalidTopologyError(f"join: {list(lk)} and {list(rk)} must have as many fields")
        if join_type not in ("inner", "left", "outer"):
            raise InvalidTopologyError(f"join: join_type must be 'inner', 'left' or 'outer', "
                                       f"got {join_type!r}")
        width = len(lk) + len(left.fields) - len(lk) + len(right.fields) - len(rk)
        out = _names(output_fields, "output fields", "join")
        if len(out) != width:
            raise InvalidTopologyError(f"join: the output has {width} fields (keys, the left's "
                                       f"others, the right's others); got {list(out)}")
        return left._add(JoinNode(fields=out, left_keys=lk, right_keys=rk,
                                  join_type=JoinType(join_type)),
                         parents=[left._node, right._node])

    def build(self) -> Topology:
        """The topology: one component per operation (named by `.name()` or
        `b-<n>-<operation>`)."""
        if not any(isinstance(n.plan, SpoutNode) for n in self._nodes):
            raise InvalidTopologyError("a Trident topology needs at least one new_stream")
        ids: dict[_Node, str] = {}
        used: set[str] = set()
        for n in self._nodes:
            base = n.name or f"b-{n.order}-{n.plan.label}"
            if n.name and n.name in used:
                raise InvalidTopologyError(
                    f"two operations (or an operation and a spout's txid) are named {n.name!r}; "
                    "names are component ids and must differ", component=n.name)
            cid, i = base, 1
            while cid in used:
                i += 1
                cid = f"{base}-{i}"
            used.add(cid)
            ids[n] = cid
        parallelism = _partitions(self._nodes)
        specs: dict[str, ComponentSpec] = {}
        for n in self._nodes:
            cid = ids[n]
            node = replace(n.plan, cid=cid, parents=tuple(ids[p] for p in n.parents),
                           parallelism=parallelism[n], order=n.order)
            if isinstance(node, StateQueryNode) and n.reads in ids:
                node = replace(node, writer=ids[n.reads])  # a state this topology writes
            op = user_op(node)
            spout = isinstance(node, SpoutNode)
            grouping = _grouping(node)
            specs[cid] = ComponentSpec(
                id=cid, kind="spout" if spout else "bolt",
                role=roles.TRIDENT_SPOUT if spout else roles.TRIDENT,
                class_name=node.label if op is None else type(op).__qualname__,
                payload=_pickle(cid, node), parallelism=parallelism[n],
                num_tasks=parallelism[n], conf={},
                inputs=tuple(Subscription(ids[p], DEFAULT_STREAM, grouping) for p in n.parents),
                streams={DEFAULT_STREAM: StreamSpec(Fields(list(n.fields)))})
        return Topology(specs)


def _partitions(nodes: list[_Node]) -> dict[_Node, int]:
    """Each node's partition count: one where the node has a single partition (a batch
    aggregate, a global repartition); a hint where given; a node that keeps its parent's
    partitioning (row operations, state queries) its parent's; else 1 (Storm's default)."""
    out: dict[_Node, int] = {}
    for n in nodes:
        if n.plan.single_partition:
            out[n] = 1
        elif n.parallelism is not None:
            out[n] = n.parallelism
        elif n.plan.keeps_partitioning and n.parents:
            out[n] = out[n.parents[0]]
        else:
            out[n] = 1
    return out


def _grouping(node: Node) -> Grouping:
    """How the operation's input is shared, for pictures of the topology."""
    match node:
        case RepartitionNode(scheme=scheme):
            match scheme:
                case PartitionBy(keys=keys):
                    return FieldsGrouping(keys)
                case Global():
                    return GlobalGrouping()
                case Broadcast():
                    return AllGrouping()
                case CustomPartition(grouping=grouping):
                    return CustomGrouping(grouping)
                case Shuffle():
                    return ShuffleGrouping()
                case _:
                    assert_never(scheme)
        case AggregateNode():
            if node.single_partition:
                return GlobalGrouping()
            if node.scope is Scope.GROUP and node.keys and not node.chained:
                return FieldsGrouping(node.keys)
            return ShuffleGrouping()
        case PersistNode() | WindowNode():
            return FieldsGrouping(node.keys) if node.keys else ShuffleGrouping()
        case SpoutNode() | RowNode() | StateQueryNode() | MergeNode() | JoinNode():
            return ShuffleGrouping()
        case _:
            assert_never(node)


def _pickle(cid: str, node: Node) -> bytes:
    try:
        return cloudpickle.dumps(node)
    except Exception as exc:
        raise NotPicklableError(
            f"an operation of {cid!r} cannot be pickled ({type(exc).__name__}: {exc}); Trident "
            "operations travel to Spark executors: open connections in prepare()",
            component=cid) from exc


def _check_declared(op: Function | BatchFunction, outputs: tuple[str, ...], where: str
                    ) -> None:
    """A function's `output_types` name its output fields and the types Spark columns
    hold."""
    declared = op.output_types
    if not isinstance(declared, Mapping):
        raise InvalidTopologyError(f"{where}: {type(op).__name__}.output_types must map output "
                                   f"fields to str, int or float, got {declared!r}")
    for field, kind in declared.items():
        if field not in outputs:
            raise InvalidTopologyError(
                f"{where}: {type(op).__name__}.output_types names {field!r}, which is not one "
                f"of its output fields {list(outputs)}")
        if kind not in DECLARABLE:
            raise InvalidTopologyError(
                f"{where}: {type(op).__name__}.output_types[{field!r}] is {kind!r}; declare "
                "str, int or float, or leave the field out (then it may hold any value)")
