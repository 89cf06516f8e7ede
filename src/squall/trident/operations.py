"""Trident's operations: functions, filters, aggregators, query functions and the built-ins.

Storm's interfaces with Python names. Per-tuple operations get a `TridentTuple` of their input
fields; a `BatchFunction` gets whole columns at once.

>>> from squall.trident.tuple import tuple_type
>>> class Split(Function):
...     def execute(self, tup, collector):
...         for word in tup["sentence"].split():
...             collector.emit([word])
>>> out = ListCollector()
>>> Split().execute(tuple_type(("sentence",))(("a b",)), out)
>>> out.rows
[['a'], ['b']]
>>> c = Count()
>>> c.combine(c.init(None), c.combine(c.zero(), c.init(None)))
2
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

ROW = "$row"  # a BatchFunction's output column naming the input row an output row belongs to


class TridentCollector:
    """What a Trident operation emits to (Storm's `TridentCollector`)."""

    def emit(self, values: Sequence[Any]) -> None:
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        raise NotImplementedError


class ListCollector(TridentCollector):
    """Collects emitted rows in `rows`; errors reported are raised (for tests and doctests)."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []

    def emit(self, values: Sequence[Any]) -> None:
        self.rows.append(list(values))

    def report_error(self, error: BaseException) -> None:
        raise error


class Operation:
    """Base of every Trident operation: `prepare` once per partition task, `cleanup` at the end.

    `context` is a `TridentOperationContext` (partition index and count, the stage's name).
    """

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        """Called once per partition before the first batch."""

    def cleanup(self) -> None:
        """Called when the run ends."""


class Function(Operation):
    """`execute(tuple, collector)`: emits zero or more value lists per input tuple; each is
    appended to the input tuple (Storm's `Function`). A tuple that emits nothing is dropped.

    `output_types` may declare an output field's type (`str`, `int` or `float`), as for a
    `BatchFunction`: every value emitted for the field is then of that type or None (checked
    on both runners; another type fails the batch naming the operation and the field), and on
    Spark the field travels as one typed column instead of four.

    >>> class Split(Function):
    ...     output_types = {"word": str}
    ...     def execute(self, tup, collector):
    ...         for word in tup[0].split(" "):
    ...             collector.emit((word,))
    """

    output_types: ClassVar[Mapping[str, type]] = {}

    def execute(self, tup: Any, collector: TridentCollector) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple, collector)")


class Filter(Operation):
    """`is_keep(tuple)`: keeps the tuple when True (Storm's `Filter`)."""

    def is_keep(self, tup: Any) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement is_keep(tuple)")


class MapFunction(Operation):
    """`execute(tuple)` returns the new tuple's values (Storm's `MapFunction`)."""

    def execute(self, tup: Any) -> Sequence[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple)")


class FlatMapFunction(Operation):
    """`execute(tuple)` returns any number of new tuples' values (Storm's `FlatMapFunction`)."""

    def execute(self, tup: Any) -> Sequence[Sequence[Any]]:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple)")


class Consumer(Operation):
    """`accept(tuple)`: sees every tuple, changes nothing (Storm's `Consumer`, for `peek`)."""

    def accept(self, tup: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement accept(tuple)")


class BatchFunction(Operation):
    """A function on whole columns, called once per batch of rows (squall's vectorised form).

    `execute_batch(table)` gets a `pyarrow.Table` of the input fields (a pandas `DataFrame` when
    `format = "pandas"`) and returns a table (or `RecordBatch`, `DataFrame`, or a dict of
    columns) with the function's output fields. Without a `ROW` column the result has exactly one
    row per input row, in order; with it, output row `i` belongs to input row `result[ROW][i]`
    (0-based), so a function may emit several rows per input row or none, as `Function` does.
    Either way the output fields are appended to the input tuple's fields, as `each` does.

    `output_types` may declare an output field's type (`str`, `int` or `float`), as a Spark
    `mapInArrow` schema does: every value of the field is then of that type or None (checked on
    both runners; another type fails the batch naming the field), and on Spark the field travels
    as one typed column instead of four, which makes the Spark job about a fifth faster on W1.

    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> class SplitColumns(BatchFunction):
    ...     output_types = {"word": str}
    ...     def execute_batch(self, table):
    ...         words = pc.split_pattern(table["sentence"], " ")
    ...         return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}
    >>> out = SplitColumns().execute_batch(pa.table({"sentence": ["a b", "c"]}))
    >>> out["word"].to_pylist(), out[ROW].to_pylist()
    (['a', 'b', 'c'], [0, 0, 1])
    """

    format: ClassVar[str] = "arrow"
    output_types: ClassVar[Mapping[str, type]] = {}

    def execute_batch(self, table: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement execute_batch(table)")


DECLARABLE = (str, int, float)  # the types a function's output field may declare
_NONE = type(None)


def check_type(field: str, values: Sequence[Any], want: type) -> None:
    """Raises a TypeError naming `field` when a value is neither None nor exactly `want` (a
    bool is not an int, an int not a float: values come back as they went in).

    >>> check_type("n", [1, None, 2], int)
    >>> check_type("n", [1, True], int)
    Traceback (most recent call last):
    ...
    TypeError: field 'n' is declared int but holds a bool value (True)
    """
    if set(map(type, values)) <= {want, _NONE}:  # the common case, without a Python loop
        return
    for v in values:
        if v is not None and v.__class__ is not want:
            raise TypeError(f"field {field!r} is declared {want.__name__} but holds a "
                            f"{type(v).__name__} value ({v!r})")


# ---- aggregators --------------------------------------------------------------------------

class CombinerAggregator(Operation):
    """`init(tuple)` per tuple, `combine(a, b)` of two values, `zero()` for no tuples.

    Storm aggregates these partially before the network transfer; squall does too (in the
    Python worker, or in Spark's JVM for the built-ins)."""

    def init(self, tup: Any) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def zero(self) -> Any:
        raise NotImplementedError


class ReducerAggregator(Operation):
    """`init()` then `reduce(current, tuple)` for every tuple of the group, in order."""

    def init(self) -> Any:
        raise NotImplementedError

    def reduce(self, current: Any, tup: Any) -> Any:
        raise NotImplementedError


class Aggregator(Operation):
    """`init(batch_id, collector)` returns a state, `aggregate(state, tuple, collector)` per
    tuple, `complete(state, collector)` at the end of the batch (or group); emits any number of
    tuples (Storm's `Aggregator`)."""

    def init(self, batch_id: Any, collector: TridentCollector) -> Any:
        raise NotImplementedError

    def aggregate(self, state: Any, tup: Any, collector: TridentCollector) -> None:
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class BuiltinCombiner(CombinerAggregator):
    """A built-in combiner the Spark runner runs as a Spark SQL aggregation (`sql` names it)."""

    sql: ClassVar[str] = ""


class Count(BuiltinCombiner):
    """The number of tuples (input fields: none needed): Storm's Trident `Count` aggregator.
    `squall.Count` is a window length in tuples, `squall.windows.accumulations.Count` the
    windowed operators' accumulation."""

    sql = "count"

    def init(self, tup: Any) -> int:
        return 1

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> int:
        return 0


class Sum(BuiltinCombiner):
    """The sum of the first input field (0 for no tuples)."""

    sql = "sum"

    def init(self, tup: Any) -> Any:
        return tup[0]

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> int:
        return 0


class Min(BuiltinCombiner):
    """The smallest value of the first input field (None for no tuples)."""

    sql = "min"

    def init(self, tup: Any) -> Any:
        return tup[0]

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if b < a else a

    def zero(self) -> Any:
        return None


class Max(BuiltinCombiner):
    """The largest value of the first input field (None for no tuples)."""

    sql = "max"

    def init(self, tup: Any) -> Any:
        return tup[0]

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if b > a else a

    def zero(self) -> Any:
        return None


class First(Aggregator):
    """The first tuple of the batch (or group): emits its input fields (Storm's `FirstN` of 1)."""

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return []

    def aggregate(self, state: Any, tup: Any, collector: TridentCollector) -> None:
        if not state:
            state.append(list(tup))

    def complete(self, state: Any, collector: TridentCollector) -> None:
        if state:
            collector.emit(state[0])


class _By(Aggregator):
    """Keeps the tuple whose `field` is smallest (`sign` 1) or largest (`sign` -1)."""

    def __init__(self, field: str, sign: int, key: Callable[[Any], Any] | None = None) -> None:
        self.field, self.sign, self.key = field, sign, key

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return []

    def aggregate(self, state: Any, tup: Any, collector: TridentCollector) -> None:
        value = tup[self.field]
        k = value if self.key is None else self.key(value)
        if not state or (k < state[0] if self.sign > 0 else k > state[0]):
            state[:] = [k, list(tup)]

    def complete(self, state: Any, collector: TridentCollector) -> None:
        if state:
            collector.emit(state[1])


def min_by(field: str, key: Callable[[Any], Any] | None = None) -> Aggregator:
    """An aggregator emitting the tuple with the smallest `field` (the first of equals)."""
    return _By(field, 1, key)


def max_by(field: str, key: Callable[[Any], Any] | None = None) -> Aggregator:
    """An aggregator emitting the tuple with the largest `field` (the first of equals)."""
    return _By(field, -1, key)


class FilterNull(Filter):
    """Drops tuples with a None in any of their input fields (Storm's `FilterNull`)."""

    def is_keep(self, tup: Any) -> bool:
        return all(v is not None for v in tup)


# ---- state queries and updaters --------------------------------------------------------------

class QueryFunction(Operation):
    """Reads a state for a batch: `batch_retrieve(state, tuples)` returns one result per tuple,
    then `execute(tuple, result, collector)` emits the values appended to each tuple."""

    def batch_retrieve(self, state: Any, tuples: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def execute(self, tup: Any, result: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class MapGet(QueryFunction):
    """The committed value of the map state at the tuple's key (its input fields), or None."""

    def batch_retrieve(self, state: Any, tuples: Sequence[Any]) -> list[Any]:
        return list(state.multi_get([tuple(t) for t in tuples]))

    def execute(self, tup: Any, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])


class StateUpdater(Operation):
    """`update_state(state, tuples, collector)` for `partition_persist`: writes a batch's tuples
    to the state; what it emits forms the state's new-values stream."""

    def update_state(self, state: Any, tuples: Sequence[Any], collector: TridentCollector) -> None:
        raise NotImplementedError


class TaskStateFactory(Protocol):
    """A `partition_persist` state factory whose state opens in the task that updates a
    partition (Storm's `StateFactory.makeState(conf, metrics, partitionIndex, numPartitions)`):
    on Spark such a stream runs in the Python workers, each partition's state made there with
    the partition's index, and `begin_commit(txid)`, the updater over the partition's tuples
    and `commit(txid)` called in that task, as Storm's `PartitionPersistProcessor` does (and
    only for a partition with tuples). A batch's partition can be updated again with the same
    txid and index (a task or a batch run again): the state keeps that exactly once, as
    Storm's states do with the txid. A factory without `make_task_state` is opened once, on the
    driver, where its stream then runs."""

    def make_task_state(self, name: str, location: str | None, partition_index: int,
                        num_partitions: int) -> Any:
        """The state `name` of partition `partition_index` of `num_partitions` (a `State`:
        `begin_commit`, `commit`, `close`); `location`: the run's checkpoint directory."""
        ...


def opens_in_tasks(factory: Any) -> bool:
    """Whether a `partition_persist`'s state `factory` opens in the tasks
    (`TaskStateFactory`).

    >>> class Files:
    ...     def make_task_state(self, name, location, partition_index, num_partitions): ...
    >>> opens_in_tasks(Files()), opens_in_tasks(object())
    (True, False)
    """
    return callable(getattr(factory, "make_task_state", None))


class MapPut(StateUpdater):
    """Puts each tuple's last input field under its other input fields as the key (the last
    tuple of a batch wins for a key it has twice); emits the `(key..., value)` put."""

    def update_state(self, state: Any, tuples: Sequence[Any], collector: TridentCollector) -> None:
        last: dict[tuple[Any, ...], Any] = {}
        for t in tuples:  # a key put twice in one batch keeps its last value
            values = tuple(t)
            last.pop(values[:-1], None)
            last[values[:-1]] = values[-1]
        if last:
            state.multi_put(list(last), list(last.values()))
        for k, v in last.items():
            collector.emit([*k, v])
