"""Trident's semantics on one batch, in plain Python: the local runner's executor and the
reference the Spark runner's plans are tested against.

A batch is, per operation, a list of partitions, each a list of rows (tuples of values in the
operation's field order). `BatchExecutor.run(txid, spout_batches)` evaluates every operation of
the plan in plan order (a `state_query` before the update of the state it reads, unless it
reads the update's own stream: it sees the state as of the previous batch) and returns every
operation's output. State updates happen as the batch is evaluated; for transactional and
opaque map states a replayed txid is recognised by the state (see `squall.trident.state`), so a
batch evaluated again after a crash applies its updates exactly once.

>>> from squall.trident import TridentTopology, Count, FixedBatchSpout, Function
>>> from squall.trident.plan import trident_plan
>>> from squall.trident.state import MemoryMapState
>>> class Split(Function):
...     def execute(self, tup, collector):
...         for w in tup["sentence"].split():
...             collector.emit([w])
>>> t = TridentTopology()
>>> s = t.new_stream("s", FixedBatchSpout(["sentence"], 9, ["a b"], ["b"]))
>>> _ = (s.each(["sentence"], Split(), ["word"]).group_by(["word"])
...       .persistent_aggregate(MemoryMapState.factory(), Count(), ["n"]).name("counts"))
>>> plan = trident_plan(t.build())
>>> ex = BatchExecutor(plan, {}, location=None)
>>> out = ex.run(1, {"s": [[("a b",), ("b",)]]})
>>> sorted(r for part in out["counts"] for r in part)
[('a', 1), ('b', 2)]
>>> ex.close()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import itemgetter
from typing import Any, assert_never

import cloudpickle
import pyarrow as pa

from squall import tracebacks
from squall.errors import SquallError
from squall.topology.groupings import stable_hash
from squall.trident.computed import Computed, Parts, Rows
from squall.trident.operations import (
    ROW,
    Aggregator,
    BatchFunction,
    CombinerAggregator,
    Count,
    Function,
    ListCollector,
    ReducerAggregator,
    Sum,
    TridentCollector,
    check_type,
    opens_in_tasks,
)
from squall.trident.plan import (
    AggregateNode,
    Broadcast,
    CustomPartition,
    Global,
    JoinNode,
    JoinType,
    MergeNode,
    Operation,
    PartitionBy,
    Persist,
    PersistNode,
    Plan,
    PlanNode,
    RepartitionNode,
    RowNode,
    RowOp,
    Scope,
    Shuffle,
    SpoutNode,
    StateQueryNode,
    WindowBy,
    WindowNode,
    user_op,
)
from squall.trident.state.map_state import Adder, MapState
from squall.trident.state.partitioned import open_state
from squall.trident.tuple import tuple_type
from squall.trident.windows import CountWindowStep, Segment, Window, WindowStep, assign

log = logging.getLogger("squall")



class TridentOperationError(SquallError):
    """A Trident operation raised, or emitted tuples that do not match its declared fields."""


def operation_failed(node: PlanNode, txid: int, error: Exception,
                     rows: Iterable[Sequence[Any]] = (),
                     fields: Sequence[str] = ()) -> TridentOperationError:
    """The error of operation `node` raising `error` on batch `txid`, on either runner: one
    line naming the operation, the batch, the error and where in the user's code it was raised
    (`squall.tracebacks.where`). A `TypeError` names the input field whose values are of
    different types, when `rows` (the operation's input, with `fields`) show one."""
    hint = ""
    if isinstance(error, TypeError):
        inputs = [f for a in node.aggregations for f in a.input] \
            if isinstance(node, AggregateNode) else getattr(node, "input", ())
        hint = mixed_field(inputs, fields, rows)
    return TridentOperationError(
        f"Trident operation {node.label} failed on batch {txid}: {type(error).__name__}: "
        f"{error}{tracebacks.where(error)}{hint}", component=node.cid)


def _kind(value: Any) -> str:
    # int and float compare and add: one kind; bool is its own.
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else type(value).__name__


def mixed_field(inputs: Sequence[str], fields: Sequence[str],
                rows: Iterable[Sequence[Any]]) -> str:
    """What a `TypeError` of an operation over `inputs` says about its input: the first of
    `inputs` whose values (in `rows`, laid out as `fields`) are of two kinds, with a value of
    the kind that came second; empty when none is.

    >>> rows = [("a", 10), ("a", "12.50"), ("b", 3)]
    >>> print(mixed_field(["price"], ["item", "price"], rows))  # doctest: +NORMALIZE_WHITESPACE
    ; field 'price' holds values of different types (number and str: '12.50'); convert it to
    one type before this operation
    >>> mixed_field(["price"], ["item", "price"], [("a", 10), ("b", 2.5), ("c", None)])
    ''
    """
    index = {f: i for i, f in enumerate(fields)}
    wanted = [(f, index[f]) for f in inputs if f in index]
    if not wanted:
        return ""
    first: dict[str, str] = {}
    for row in rows:
        for name, i in wanted:
            value = row[i]
            if value is None:
                continue
            kind = _kind(value)
            seen = first.setdefault(name, kind)
            if seen != kind:
                return (f"; field {name!r} holds values of different types ({seen} and "
                        f"{kind}: {value!r}); convert it to one type before this operation")
    return ""


def check_batch_output(op: BatchFunction, component: str, outputs: Sequence[str],
                       names: Collection[str], rows_in: int, rows_out: int | None) -> None:
    """What both runners require of a `BatchFunction`'s result, with columns `names` and
    `rows_out` rows (None: it declares no output): every declared output column, and one row per
    input row unless a `ROW` column names each output row's input row.

    >>> from squall.trident.operations import BatchFunction
    >>> class Lengths(BatchFunction):
    ...     def execute_batch(self, table): ...
    >>> check_batch_output(Lengths(), "lengths", ["n"], ["n"], 3, 3)
    >>> def error(names, rows_out):
    ...     try:
    ...         check_batch_output(Lengths(), "lengths", ["n"], names, 3, rows_out)
    ...     except TridentOperationError as exc:
    ...         print(exc.component, "|", exc.message)
    >>> error(["m"], 3)
    lengths | Lengths.execute_batch returned no column 'n' (needs ['n'])
    >>> error(["n"], 2)  # doctest: +NORMALIZE_WHITESPACE
    lengths | Lengths.execute_batch returned 2 rows for 3 input rows; add a '$row' column
    naming each output row's input row when the counts differ
    >>> error(["n", "$row"], 2)  # each output row names its input row
    """
    name = type(op).__name__
    for f in outputs:
        if f not in names:
            raise TridentOperationError(f"{name}.execute_batch returned no column {f!r} "
                                        f"(needs {list(outputs)})", component=component)
    if ROW not in names and rows_out is not None and rows_out != rows_in:
        raise TridentOperationError(
            f"{name}.execute_batch returned {rows_out} rows for {rows_in} input rows; add a "
            f"{ROW!r} column naming each output row's input row when the counts differ",
            component=component)


@dataclass(frozen=True)
class TridentOperationContext:
    """What an operation's `prepare` learns: its component, partition index and count."""

    component: str
    partition_index: int
    num_partitions: int


class StateView:
    """A map state as one batch's operations see it: the batch's txid is implied."""

    def __init__(self, state: Any, txid: int) -> None:
        self.state, self.txid = state, txid

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        return list(self.state.multi_get(keys))

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        self.state.multi_put(self.txid, keys, values)

    def multi_update(self, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Callable[[Any], Any]]) -> list[Any]:
        return list(self.state.multi_update(self.txid, keys, updaters))

    def multi_add(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> list[Any]:
        """Each value added to its key's (`Count` and `Sum`); a state that is not a squall
        `MapState` gets the equivalent updaters."""
        if isinstance(self.state, MapState):
            return self.state.multi_add(self.txid, keys, values)
        return self.multi_update(keys, [Adder(v) for v in values])


class QueryView:
    """A map state as a `state_query` sees it: read only (`multi_get`), as Storm's
    `QueryFunction`s read a `MapState`; state is written by `persistent_aggregate` and
    `partition_persist`. The same view on every runner, so a query that writes fails alike
    wherever its state lives."""

    def __init__(self, state: Any, component: str) -> None:
        self.state, self.component = state, component

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        return list(self.state.multi_get(keys))

    def __getattr__(self, name: str) -> Any:
        raise TridentOperationError(
            f"state query {self.component!r} called {name!r} on its state: a query reads its "
            "state with multi_get only; write state with persistent_aggregate or "
            "partition_persist", component=self.component)


def query_rows(node: PlanNode, fields: tuple[str, ...], part: Rows, op: Any, state: Any) -> Rows:
    """A `state_query`'s output for one partition's rows `part` (of `fields`): each row with
    the values `op` (a `QueryFunction`) emits for it, reading `state` (a map state) through a
    `QueryView`. The Spark runner calls it in the task holding the state partition of the
    rows' keys, the local runner here.

    >>> from squall.trident.operations import MapGet
    >>> from squall.trident.state.memory import MemoryMapState
    >>> state = MemoryMapState(); state.multi_put([("a",)], [3])
    >>> node = StateQueryNode(cid="q", parents=("s",), fields=("w", "n"), state="counts",
    ...                       factory=None, input=("w",), op=MapGet(), output=("n",))
    >>> query_rows(node, ("w",), [("a",), ("b",)], MapGet(), state)
    [('a', 3), ('b', None)]
    """
    assert isinstance(node, StateQueryNode), node
    idx = _indexes(fields, node.input)
    make = tuple_type(node.input)
    width = len(node.output)
    tuples = list(map(make, map(_picker(idx), part)))
    results = op.batch_retrieve(QueryView(state, node.cid), tuples) if tuples else []
    out: Rows = []
    coll = _Emitted()
    for r, t, res in zip(part, tuples, results, strict=True):
        op.execute(t, res, coll)
        for values in coll.out:
            out.append(r + _checked(values, width, node))
        coll.out.clear()
    BatchExecutor._raise_reported(node, coll)
    return out


def updater_tuples(node: PersistNode, fields: Sequence[str], part: Rows) -> list[Any]:
    """A `partition_persist`'s input tuples for one partition's rows `part` (of `fields`)."""
    return list(map(tuple_type(node.input), map(_picker(_indexes(fields, node.input)), part)))


def update_partition(node: PersistNode, tuples: list[Any], txid: int, op: Any, state: Any
                     ) -> Rows:
    """One partition's `tuples` given to the `partition_persist` updater `op` with `state`;
    the rows it emitted (its new-values stream)."""
    coll = _Emitted()
    # A map state is seen through the batch's txid; any other state (a Kafka topic, a
    # user's) had the txid from `begin_commit` and is handed over as it is.
    view = StateView(state, txid) if isinstance(state, MapState) else state
    op.update_state(view, tuples, coll)
    BatchExecutor._raise_reported(node, coll)
    width = len(node.fields)
    return [_checked(v, width, node) for v in coll.out]


def task_partition(node: PersistNode, tuples: list[Any], txid: int, op: Any, state: Any) -> Rows:
    """A partition's update as Storm's `PartitionPersistProcessor` makes it in its task:
    `begin_commit(txid)`, the updater, `commit(txid)`, and nothing for a partition without
    tuples. Both runners use it for a `TaskStateFactory`'s states (the Spark runner in the
    task holding the partition)."""
    if not tuples:
        return []
    state.begin_commit(txid)
    out = update_partition(node, tuples, txid, op, state)
    state.commit(txid)
    return out


def partition_rows(rows: Rows, n: int, parent: PlanNode) -> Parts:
    """`rows` (whose first fields are those of `parent`) in `n` partitions as `parent` placed
    them: by the hash of its keys after a `partition_by`, else in turn."""
    scheme = parent.scheme if isinstance(parent, RepartitionNode) else None
    if not isinstance(scheme, PartitionBy):
        return _round_robin(rows, n)
    idx = _indexes(parent.fields, scheme.keys)
    return _by_key(rows, n, lambda r: tuple(r[i] for i in idx))


class _Emitted(TridentCollector):
    """Collects the value lists an operation emits for one input."""

    __slots__ = ("emit", "errors", "out")

    def __init__(self) -> None:
        self.out: list[Sequence[Any]] = []
        self.errors: list[BaseException] = []
        # `emit` is the list's own append: a per-tuple function emits without a Python frame
        # (measured: 0.2 s of 0.5 s per million words in W1's split).
        self.emit = self.out.append  # type: ignore[method-assign,assignment]

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)


def aggregate(op: Any, tuples: Sequence[Any], txid: int, empty_emits: bool = True) -> list[tuple]:
    """The value tuples an aggregator emits for `tuples` (one group, partition or batch)."""
    if isinstance(op, CombinerAggregator):
        if not tuples:
            return [(op.zero(),)] if empty_emits else []
        init, combine = op.init, op.combine
        return [(reduce(combine, (init(t) for t in tuples)),)]
    if isinstance(op, ReducerAggregator):
        if not tuples and not empty_emits:
            return []
        acc = op.init()
        for t in tuples:
            acc = op.reduce(acc, t)
        return [(acc,)]
    assert isinstance(op, Aggregator)
    out = ListCollector()
    state = op.init(txid, out)
    for t in tuples:
        op.aggregate(state, t, out)
    op.complete(state, out)
    return [tuple(r) for r in out.rows]


def partial(op: Any, tuples: Sequence[Any]) -> Any:
    """A combiner's value for `tuples` (the state update's argument)."""
    if not tuples:
        return op.zero()
    init, combine = op.init, op.combine
    return reduce(combine, (init(t) for t in tuples))


class BatchExecutor:
    """Evaluates a plan batch by batch (see the module documentation).

    `states` maps state names to open map states; missing ones are made from the plan's
    factories with `location` (the run's checkpoint directory, or None).
    """

    def __init__(self, plan: Plan, conf: Mapping[str, Any], *, location: str | None,
                 states: Mapping[str, Any] | None = None) -> None:
        self.plan, self.conf = plan, dict(conf)
        self.states = dict(states or {})
        # A `TaskStateFactory`'s state is made per partition (`_task_persist`), never whole.
        per_partition = {n.state for n in plan.nodes if isinstance(n, PersistNode)
                         and n.persist is Persist.PARTITION and opens_in_tasks(n.factory)}
        for name, factory in plan.states().items():
            if name not in self.states and name not in per_partition:
                self.states[name] = open_state(factory, name, location, self.conf)
        # One copy of each operation per partition, prepared once (Storm: one per task).
        self.ops: dict[str, list[Any]] = {}
        for node in plan.nodes:
            user = None if isinstance(node, SpoutNode) else user_op(node)
            if user is None:
                continue
            blob = cloudpickle.dumps(user)
            copies = []
            for i in range(1 if node.single_partition else node.parallelism):
                op = cloudpickle.loads(blob)
                op.prepare(self.conf, TridentOperationContext(node.cid, i, node.parallelism))
                copies.append(op)
            self.ops[node.cid] = copies
        # The partitions' states of a `partition_persist` into a `TaskStateFactory`'s state.
        self.location = location
        self.task_states: dict[tuple[str, int], Any] = {}
        self.late: dict[str, int] = {}  # late tuples (window assignments) per window operation
        self.final = False
        self.parts_ops: dict[str, list[list[Any]]] = {}
        for node in plan.nodes:
            if isinstance(node, AggregateNode) and node.chained:
                self.parts_ops[node.cid] = [[cloudpickle.loads(cloudpickle.dumps(a.op))
                                             for _ in range(node.parallelism)]
                                            for a in node.aggregations]

    def close(self) -> None:
        for copies in self.ops.values():
            for op in copies:
                op.cleanup()
        for state in [*self.states.values(), *self.task_states.values()]:
            state.close()

    # ---- one batch ---------------------------------------------------------------------------
    def begin(self, txid: int) -> None:
        """Storm's State protocol opens batch `txid` on every state; an opaque map rolls back
        here what an earlier attempt of this txid wrote, since its replay may touch other
        keys."""
        for state in self.states.values():
            state.begin_commit(txid)

    def run(self, txid: int, spout_batches: Mapping[str, Parts], *,
            computed: Computed | None = None, final: bool = False,
            time_ms: int | None = None) -> dict[str, Parts]:
        """Every operation's output for batch `txid`, given each spout's partitions.

        A runner that computed some operations elsewhere (the Spark runner, in Spark) passes
        what it computed as `computed` (`squall.trident.computed`): operations' outputs, a
        `persistent_aggregate`'s per-key aggregates (applied to the state at the operation's
        turn), a window operation's partials, and the operations nothing here needs. `final`:
        every spout's input ends with this batch (windows' watermarks go to the end of time).
        `time_ms`: the transaction's processing time (the same on every attempt), for
        processing-time windows."""
        out: dict[str, Parts] = {}
        self.final, self.time_ms = final, time_ms
        done = computed or Computed(begun=False)
        if not done.begun:
            self.begin(txid)
        for node in self.plan.nodes:
            if node.cid in done.windows:
                assert isinstance(node, WindowNode), node.cid
                rows = self.window_step(node, txid, *done.windows[node.cid])
                out[node.cid] = split_by_key(rows, node.parallelism, node)
                continue
            if node.cid in done.given:
                out[node.cid] = done.given[node.cid]
                continue
            if node.cid in done.partials:
                assert isinstance(node, PersistNode), node.cid
                groups = dict(done.partials[node.cid])
                if not node.keys and not groups:
                    groups[()] = self.ops[node.cid][0].zero()
                rows = self.apply_partials(node, self.ops[node.cid][0], groups, txid,
                                           partials=True)
                out[node.cid] = split_by_key(rows, node.parallelism, node)
                continue
            if node.cid in done.skip:
                continue
            if isinstance(node, SpoutNode):
                out[node.cid] = [list(p) for p in spout_batches.get(node.cid, [[]])]
                continue
            parents = [out[p] for p in node.parents]
            try:
                out[node.cid] = self._eval(node, parents, txid)
            except TridentOperationError as exc:
                if exc.component is None:
                    raise TridentOperationError(exc.message, component=node.cid) from exc
                raise
            except Exception as exc:
                fields = self._fields_of(node.parents[0]) if node.parents else ()
                inputs: Iterable[Sequence[Any]] = \
                    (row for part in parents[0] for row in part) if parents else ()
                raise operation_failed(node, txid, exc, inputs, fields) from exc
        for state in self.states.values():
            state.commit(txid)
        return out

    def _fields_of(self, cid: str) -> tuple[str, ...]:
        return self.plan.node(cid).fields

    def _eval(self, node: Operation, parents: list[Parts], txid: int) -> Parts:
        n = node.parallelism
        match node:
            case RowNode() | StateQueryNode():
                fields = self._fields_of(node.parents[0])
                ops = self.ops.get(node.cid)
                return [self.row_op(node, fields, part, ops[i % len(ops)] if ops else None,
                                    txid)
                        for i, part in enumerate(parents[0])]
            case RepartitionNode():
                return self._repartition(node, _rows(parents[0]))
            case MergeNode():
                merged: Parts = [[] for _ in range(n)]
                for parts in parents:
                    for j, part in enumerate(parts):
                        merged[j % n].extend(part)
                return merged
            case JoinNode():
                return self._join(node, parents)
            case AggregateNode():
                return self._aggregate(node, parents[0], txid)
            case PersistNode():
                fields = self._fields_of(node.parents[0])
                persist = node.persist
                match persist:
                    case Persist.AGGREGATE:
                        return split_by_key(self._persist(node, fields, _rows(parents[0]), txid),
                                            n, node)
                    case Persist.PARTITION if opens_in_tasks(node.factory):
                        return self._task_persist(node, fields, parents[0], txid)
                    case Persist.PARTITION:
                        return [self._partition_persist(node, fields, part, txid,
                                                        self.ops[node.cid][i % n])
                                for i, part in enumerate(parents[0])]
                    case _:
                        assert_never(persist)
            case WindowNode():
                fields = self._fields_of(node.parents[0])
                return split_by_key(self._window(node, fields, _rows(parents[0]), txid), n, node)
            case _:
                assert_never(node)

    def _repartition(self, node: RepartitionNode, rows: Rows) -> Parts:
        n = node.parallelism
        scheme = node.scheme
        match scheme:
            case Shuffle():
                return _round_robin(rows, n)
            case PartitionBy(keys=keys):
                idx = _indexes(self._fields_of(node.parents[0]), keys)
                return _by_key(rows, n, lambda r: tuple(r[i] for i in idx))
            case Broadcast():
                return [list(rows) for _ in range(n)]
            case Global():
                return [rows]
            case CustomPartition(grouping=grouping):
                return self._custom(node, grouping, rows)
            case _:
                assert_never(scheme)

    def _aggregate(self, node: AggregateNode, parts: Parts, txid: int) -> Parts:
        n = node.parallelism
        fields = self._fields_of(node.parents[0])
        if node.chained:
            return split_by_key(self._chained(node, fields, _rows(parts), txid), n, node)
        ops = self.ops[node.cid]
        scope = node.scope
        match scope:
            case Scope.PARTITION:
                return [self._grouped(node, fields, part, txid, ops[i % n])
                        for i, part in enumerate(parts)]
            case Scope.BATCH:
                return [self._grouped(node, fields, _rows(parts), txid, ops[0])]
            case Scope.GROUP:
                return split_by_key(self._grouped(node, fields, _rows(parts), txid, ops[0]), n,
                                    node)
            case _:
                assert_never(scope)

    # ---- operations ----------------------------------------------------------------------------
    def row_op(self, node: PlanNode, fields: tuple[str, ...], part: Rows, op: Any,
               txid: int, keep_inputs: bool = True) -> Rows:
        """One row operation (or state query) over a partition's rows. `keep_inputs=False` (an
        `each` whose input tuple's fields nothing reads later, on Spark) leaves them out of its
        output rows: the rows are the emitted values alone."""
        if isinstance(node, StateQueryNode):
            return query_rows(node, fields, part, op, self.states[node.state])
        assert isinstance(node, RowNode), node
        inputs = node.input
        idx = _indexes(fields, inputs)
        make = tuple_type(inputs)
        pick = _picker(idx)
        if idx == list(range(len(fields))):
            view: Callable[[tuple[Any, ...]], Any] = make
        else:
            def view(r: tuple[Any, ...]) -> Any:
                return make(pick(r))

        width = len(node.output)
        row_op = node.row_op
        match row_op:
            case RowOp.PROJECT:
                return list(map(pick, part))
            case RowOp.FILTER:
                keep = op.is_keep
                return [r for r in part if keep(view(r))]
            case RowOp.PEEK:
                for r in part:
                    op.accept(view(r))
                return part
            case RowOp.EACH:
                if isinstance(op, BatchFunction):
                    return self._batch_each(node, op, part, idx, inputs)
                if not keep_inputs:
                    # No input row to pair the values with: the emitted values of the whole
                    # part, in order, are the output.
                    columns, n = self.each_columns(node, fields, part, op)
                    return list(zip(*columns, strict=True)) if columns else [()] * n
                return self._each(node, fields, part, op, view)
            case RowOp.MAP:
                mapped = list(map(tuple, map(op.execute, map(view, part))))
                if mapped and set(map(len, mapped)) != {width}:  # checked once, in C
                    for v in mapped:
                        _checked(v, width, node)  # raises, naming the operation
                return mapped
            case RowOp.FLAT_MAP:
                out: Rows = []
                for r in part:
                    out.extend(_checked(v, width, node) for v in op.execute(view(r)))
                return out
            case _:
                assert_never(row_op)

    def _each(self, node: RowNode, fields: tuple[str, ...], part: Rows, op: Function,
              view: Callable[[tuple[Any, ...]], Any]) -> Rows:
        """A per-tuple `each`: each input row followed by each of its emitted value lists."""
        out: Rows = []
        coll = _Emitted()
        execute, emitted, append = op.execute, coll.out, out.append
        for r in part:
            execute(view(r), coll)
            if emitted:
                for values in emitted:
                    append(r + tuple(values))
                emitted.clear()
        self._raise_reported(node, coll)
        # Every output row is an input row and the emitted values: a row of another length
        # means a function emitted the wrong number of values (checked once, in C).
        width = len(node.output)
        wide = len(fields) + width
        if out and set(map(len, out)) != {wide}:
            bad = next(r for r in out if len(r) != wide)
            _checked(bad[len(fields):], width, node)  # raises, naming the operation
        if op.output_types and out:
            _check_emitted(node, op, out, len(fields))
        return out

    def each_columns(self, node: PlanNode, fields: tuple[str, ...], part: Rows, op: Function
                     ) -> tuple[list[list[Any]], int]:
        """A per-tuple `each` whose input fields nothing later reads: the values the function
        emits for the whole part, as one list per output field (what `row_op` with
        `keep_inputs=False` returns as rows), and how many times it emitted. A Spark worker
        turns the lists into Arrow columns without building a row per emit.

        >>> from squall.trident.plan import RowNode, RowOp
        >>> class Pairs(Function):
        ...     def execute(self, tup, collector):
        ...         for w in tup[0].split():
        ...             collector.emit([w, len(w)])
        >>> node = RowNode(cid="each-1", parents=("src",), fields=("s", "w", "n"),
        ...                row_op=RowOp.EACH, input=("s",), output=("w", "n"), op=Pairs())
        >>> ex = BatchExecutor(Plan(()), {}, location=None)
        >>> ex.each_columns(node, ("s",), [("a bb",), ("ccc",)], Pairs())
        ([['a', 'bb', 'ccc'], [1, 2, 3]], 3)
        """
        assert isinstance(node, RowNode), node
        inputs = node.input
        idx = _indexes(fields, inputs)
        make = tuple_type(inputs)
        output = node.output
        width = len(output)
        coll = _Emitted()
        execute = op.execute
        if idx == list(range(len(fields))):
            for r in part:
                execute(make(r), coll)
        else:
            for r in part:
                execute(make(tuple([r[i] for i in idx])), coll)
        self._raise_reported(node, coll)
        out = coll.out
        columns: list[list[Any]]
        try:
            # One pass that also checks each emit's width (unpacking raises on another).
            if width == 1:
                columns = [[v for (v,) in out]]
            elif out and set(map(len, out)) != {width}:
                raise ValueError("widths differ")
            else:
                columns = [list(c) for c in zip(*out, strict=True)] if out else \
                    [[] for _ in output]
        except (ValueError, TypeError):
            # Iterables other than sequences, or a wrong width (which _checked names).
            rows = [_checked(v, width, node) for v in out]
            columns = [list(c) for c in zip(*rows, strict=True)] if rows else \
                [[] for _ in output]
        for f, want in (op.output_types or {}).items():
            try:
                check_type(f, columns[output.index(f)], want)
            except TypeError as exc:
                raise TridentOperationError(f"{type(op).__name__}.execute: {exc}",
                                            component=node.cid, field=f) from None
        return columns, len(out)

    def _batch_each(self, node: RowNode, op: BatchFunction, part: Rows, idx: list[int],
                    inputs: Sequence[str]) -> Rows:
        if not part:
            # No rows, no call (as a Function is called per tuple): an empty table would also
            # give the function columns of Arrow's null type.
            return []
        import_table = _arrow_table(inputs, [[r[i] for r in part] for i in idx])
        table = import_table.to_pandas() if op.format == "pandas" else import_table
        result = _as_columns(op.execute_batch(table))
        outputs = node.output
        check_batch_output(op, node.cid, outputs, result, len(part),
                           len(result[outputs[0]]) if outputs and outputs[0] in result else None)
        for f, want in op.output_types.items():
            try:
                check_type(f, result[f], want)
            except TypeError as exc:
                raise TridentOperationError(f"{type(op).__name__}.execute_batch: {exc}",
                                            component=node.cid, field=f) from None
        cols = [result[f] for f in outputs]
        rows_of = result.get(ROW)
        if rows_of is None:
            rows_of = list(range(len(part)))
        if not cols:  # a selection (`ROW` alone): the kept input rows as they are
            return [part[j] for j in rows_of]
        return [part[j] + values for j, values in zip(rows_of, zip(*cols, strict=True),
                                                       strict=True)]

    def _grouped(self, node: AggregateNode, fields: tuple[str, ...], rows: Rows, txid: int,
                 op: Any) -> Rows:
        keys, inputs = node.keys, node.aggregation.input
        idx = _indexes(fields, inputs)
        make = tuple_type(inputs)
        if not keys:
            return aggregate(op, list(map(make, map(_picker(idx), rows))), txid,
                             empty_emits=node.scope is Scope.BATCH)
        key, pick = _picker(_indexes(fields, keys)), _picker(idx)
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(make(pick(r)))
        out: Rows = []
        for k, ts in groups.items():
            out.extend(k + v for v in aggregate(op, ts, txid))
        return out

    def _chained(self, node: AggregateNode, fields: tuple[str, ...], rows: Rows, txid: int
                 ) -> Rows:
        keys = node.keys
        kidx = _indexes(fields, keys)
        groups: dict[tuple[Any, ...], Rows] = {}
        for r in rows:
            groups.setdefault(tuple(r[i] for i in kidx), []).append(r)
        if not keys and not groups:
            groups[()] = []
        out: Rows = []
        for k, members in groups.items():
            results: list[list[tuple]] = []
            for j, aggregation in enumerate(node.aggregations):
                op = self.parts_ops[node.cid][j][0]
                idx = _indexes(fields, aggregation.input)
                make = tuple_type(aggregation.input)
                results.append(aggregate(op, [make(tuple(r[i] for i in idx)) for r in members],
                                         txid))
            combos: list[tuple[Any, ...]] = [()]
            for emitted in results:
                combos = [c + e for c in combos for e in emitted]
            out.extend(k + c for c in combos)
        return out

    def _persist(self, node: PersistNode, fields: tuple[str, ...], rows: Rows, txid: int
                 ) -> Rows:
        keys, op = node.keys, self.ops[node.cid][0]
        kidx, idx = _indexes(fields, keys), _indexes(fields, node.input)
        make = tuple_type(node.input)
        key, pick = _picker(kidx), _picker(idx)
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(make(pick(r)))
        if not keys and not groups:
            groups[()] = []  # a global aggregate updates its one key on every batch
        return self.apply_partials(node, op, groups, txid)

    def apply_partials(self, node: PersistNode, op: Any, groups: Mapping[tuple[Any, ...], Any],
                       txid: int, partials: bool = False) -> Rows:
        """Folds each group into the node's map state for `txid`; the new `key + (value,)`
        rows. `groups` maps a key to its tuples, or (`partials=True`, combiners only) to the
        combined value of its tuples (what the Spark runner collects)."""
        state = StateView(self.states[node.state], txid)
        keys = list(groups)
        if isinstance(op, CombinerAggregator):
            combine = op.combine
            values = list(groups.values()) if partials else [partial(op, ts)
                                                            for ts in groups.values()]
            if type(op) in (Count, Sum) and keys:  # combine is `+`: the state may add in bulk
                new = state.multi_add(keys, values)
                return [(*k, v) for k, v in zip(keys, new, strict=True)]

            def combiner(v: Any) -> Callable[[Any], Any]:
                return lambda old: v if old is None else combine(old, v)

            updaters = [combiner(v) for v in values]
        else:
            def reducer(ts: list[Any]) -> Callable[[Any], Any]:
                def run(old: Any) -> Any:
                    acc = op.init() if old is None else old
                    for t in ts:
                        acc = op.reduce(acc, t)
                    return acc
                return run

            updaters = [reducer(ts) for ts in groups.values()]
        new = state.multi_update(keys, updaters) if keys else []
        return [(*k, v) for k, v in zip(keys, new, strict=True)]

    def _window(self, node: WindowNode, fields: tuple[str, ...], rows: Rows, txid: int
                ) -> Rows:
        op = self.ops[node.cid][0]
        kidx, idx = _indexes(fields, node.keys), _indexes(fields, node.input)
        make = tuple_type(node.input)
        by = node.by
        match by:
            case WindowBy.COUNT:
                groups: dict[tuple[Any, ...], list[Any]] = {}
                for r in rows:
                    groups.setdefault(tuple([r[i] for i in kidx]), []).append(
                        op.init(make(tuple([r[i] for i in idx]))))
                step = CountWindowStep(self.states[node.state], op.combine, node.size,
                                       node.slide)
                return step.apply(txid, groups)
            case WindowBy.PROCESSING:
                if self.time_ms is None:
                    raise SquallError(f"{node.cid!r}: a processing-time window needs the "
                                      "transaction's time from the runner")
                # Every tuple of the transaction has its time: an extra last field of each row.
                tsi, rows = len(fields), [(*r, self.time_ms) for r in rows]
            case WindowBy.EVENT:
                assert node.timestamp_field is not None
                tsi = fields.index(node.timestamp_field)
            case _:
                assert_never(by)
        size, slide = node.size, node.slide
        init, combine = op.init, op.combine
        partials: dict[Window, dict[tuple[Any, ...], Any]] = {}
        assigned: dict[Window, int] = {}
        max_ts: int | None = None
        for r in rows:
            ts = r[tsi]
            if ts.__class__ is not int:
                ts = timestamp_of(ts, node)
            if max_ts is None or ts > max_ts:
                max_ts = ts
            k = tuple([r[i] for i in kidx])
            v = init(make(tuple([r[i] for i in idx])))
            for w in assign(ts, size, slide):
                d = partials.get(w)
                if d is None:
                    d = partials[w] = {}
                d[k] = v if k not in d else combine(d[k], v)
                assigned[w] = assigned.get(w, 0) + 1
        segments = [(w, list(partials[w]), list(partials[w].values()))
                    for w in sorted(partials)]
        return self.window_step(node, txid, segments, assigned, max_ts)

    def window_step(self, node: WindowNode, txid: int, segments: Sequence[Segment],
                    assigned: Mapping[Window, int], max_ts: int | None) -> Rows:
        """Applies a window operation's partials for `txid` to its state; the fired rows."""
        op = self.ops[node.cid][0]
        step = WindowStep(self.states[node.state], op.combine, node.lag)
        rows, late = step.apply(txid, segments, assigned, max_ts, self.final)
        if late:
            self.late[node.cid] = self.late.get(node.cid, 0) + late
            log.warning("%s dropped %d late tuple(s) in batch %d (their windows had "
                        "ended: watermark past them)", node.cid, late, txid)
        return rows

    def _partition_persist(self, node: PersistNode, fields: tuple[str, ...], part: Rows, txid: int,
                           op: Any) -> Rows:
        tuples = updater_tuples(node, fields, part)
        return update_partition(node, tuples, txid, op, self.states[node.state])

    def _task_persist(self, node: PersistNode, fields: tuple[str, ...], parts: Parts, txid: int
                      ) -> Parts:
        """A `partition_persist` into a state that opens per partition (`TaskStateFactory`):
        each partition's state made once with its index, updated as Storm's task does
        (`task_partition`), as the Spark runner does in its tasks."""
        out: Parts = []
        n = len(parts)
        for i, part in enumerate(parts):
            state = self.task_states.get((node.cid, i))
            if state is None:
                state = self.task_states[(node.cid, i)] = node.factory.make_task_state(
                    node.state, self.location, i, n)
            ops = self.ops[node.cid]
            out.append(task_partition(node, updater_tuples(node, fields, part), txid,
                                      ops[i % len(ops)], state))
        return out

    def _custom(self, node: RepartitionNode, grouping: Any, rows: Rows) -> Parts:
        n = node.parallelism
        out: Parts = [[] for _ in range(n)]
        choose = grouping.choose_tasks
        for r in rows:
            for i in choose(0, list(r)):
                if not 0 <= i < n:
                    raise TridentOperationError(f"{node.cid!r}: the custom partitioning chose "
                                                f"partition {i}; there are {n} (0..{n - 1})")
                out[i].append(r)
        return out

    def _join(self, node: JoinNode, parents: list[Parts]) -> Parts:
        lk, rk = node.left_keys, node.right_keys
        lf, rf = self._fields_of(node.parents[0]), self._fields_of(node.parents[1])
        li, ri = _indexes(lf, lk), _indexes(rf, rk)
        lrest = [i for i in range(len(lf)) if i not in li]
        rrest = [i for i in range(len(rf)) if i not in ri]
        right: dict[tuple[Any, ...], Rows] = {}
        for part in parents[1]:
            for r in part:
                right.setdefault(tuple(r[i] for i in ri), []).append(r)
        how = node.join_type
        out: Rows = []
        matched: set[tuple[Any, ...]] = set()
        for part in parents[0]:
            for r in part:
                k = tuple(r[i] for i in li)
                rows = right.get(k)
                left_vals = tuple(r[i] for i in lrest)
                if rows:
                    matched.add(k)
                    out.extend(k + left_vals + tuple(s[i] for i in rrest) for s in rows)
                elif how is not JoinType.INNER:
                    out.append(k + left_vals + (None,) * len(rrest))
        if how is JoinType.OUTER:
            for k, rows in right.items():
                if k not in matched:
                    out.extend(k + (None,) * len(lrest) + tuple(s[i] for i in rrest)
                               for s in rows)
        return _by_key(out, node.parallelism, lambda r: r[:len(lk)])

    @staticmethod
    def _raise_reported(node: PlanNode, coll: _Emitted) -> None:
        if coll.errors:
            err = coll.errors[0]
            raise TridentOperationError(f"{node.cid!r} reported {type(err).__name__}: {err}") \
                from err


def _check_emitted(node: RowNode, op: Function, out: Rows, offset: int) -> None:
    """A per-tuple function's emitted values of the fields it declared (`output_types`) are
    of those types (row `r`'s emitted values start at `r[offset]`)."""
    output = node.output
    for f, want in op.output_types.items():
        j = offset + output.index(f)
        try:
            check_type(f, [r[j] for r in out], want)
        except TypeError as exc:
            raise TridentOperationError(f"{type(op).__name__}.execute: {exc}",
                                        component=node.cid, field=f) from None


def timestamp_of(ts: Any, node: PlanNode) -> int:
    """A window operation's timestamp that is not an int: a float's whole milliseconds, or an
    error naming the operation and the field."""
    if isinstance(ts, float) and ts == ts:
        return int(ts)
    field = node.timestamp_field if isinstance(node, WindowNode) else None
    raise TridentOperationError(
        f"timestamp field {field!r} holds {ts!r} "
        f"({type(ts).__name__}); window operations need milliseconds as an int",
        component=node.cid, field=field)


def _indexes(fields: Sequence[str], names: Sequence[str]) -> list[int]:
    pos = {f: i for i, f in enumerate(fields)}
    return [pos[n] for n in names]


def _picker(idx: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A row's values at `idx` as a tuple, taken in C (`itemgetter`): about a third of the
    time a generator over the indexes takes, once per row of every operation that reads some
    of its input's fields.

    >>> _picker([2, 0])(("a", "b", "c")), _picker([1])(("a", "b")), _picker([])(("a",))
    (('c', 'a'), ('b',), ())
    """
    if len(idx) >= 2:
        return itemgetter(*idx)
    if len(idx) == 1:
        i = idx[0]
        return lambda r: (r[i],)
    return lambda r: ()


def _checked(values: Any, width: int, node: RowNode | StateQueryNode | PersistNode
             ) -> tuple[Any, ...]:
    t = tuple(values)
    if len(t) != width:
        raise TridentOperationError(
            f"{node.cid!r} emitted {len(t)} values {list(t)!r} but declares {width} output "
            f"fields {list(node.output)}")
    return t


def _rows(parts: Parts) -> Rows:
    """Every partition's rows in one list."""
    return [r for part in parts for r in part]


def _round_robin(rows: Rows, n: int) -> Parts:
    return [rows[i::n] for i in range(n)]


def _by_key(rows: Rows, n: int, key: Callable[[tuple[Any, ...]], Any]) -> Parts:
    if n == 1:
        return [rows]
    out: Parts = [[] for _ in range(n)]
    for r in rows:
        out[stable_hash(list(key(r))) % n].append(r)
    return out


def split_by_key(rows: Rows, n: int, node: PlanNode) -> Parts:
    """An aggregation's, state update's or window's output `rows` (its keys first) in `n`
    partitions by the hash of their keys."""
    width = len(node.keys) if isinstance(node, (AggregateNode, PersistNode, WindowNode)) else 0
    return _by_key(rows, n, lambda r: r[:width])


def _arrow_table(names: Sequence[str], columns: Sequence[list[Any]]) -> Any:
    return pa.table(dict(zip(names, columns, strict=True)))


def _as_columns(result: Any) -> dict[str, list[Any]]:
    """A batch function's result as Python lists per column."""
    if isinstance(result, Mapping):
        return {k: v.to_pylist() if hasattr(v, "to_pylist") else list(v)
                for k, v in result.items()}
    if hasattr(result, "to_pydict"):
        return dict(result.to_pydict())
    if hasattr(result, "to_dict"):  # pandas
        return {str(k): list(v) for k, v in result.to_dict(orient="list").items()}
    raise TridentOperationError(f"execute_batch returned a {type(result).__name__}; return a "
                                "pyarrow Table or RecordBatch, a pandas DataFrame or a dict "
                                "of columns")
