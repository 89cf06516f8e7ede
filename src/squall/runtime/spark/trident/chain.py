"""The worker side of a Spark path: a path's row operations fused into one `mapInArrow`.

A `_Chain` is shipped to the Python workers (pickled by reference, so it stays a top-level class
of an importable module) and runs consecutive row operations over each Arrow batch, per tuple or
one call per Arrow batch (`_batch_each`), optionally ending with a combiner's partial
aggregation (`combine._Partials`, or an event-time window's, `trident.windows.WindowPartials`).
A `_StateChain` ends with the partials of `persistent_aggregate`s into partitioned states,
stacked for `trident.state.ApplyState`. Each operation's tuples in and out reach the driver
through a `_CountsParam` accumulator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import cloudpickle
import pyarrow as pa
from pyspark.accumulators import Accumulator, AccumulatorParam, _deserialize_accumulator

from squall import tracebacks
from squall.errors import SquallError
from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.runtime.spark.trident import state as ts
from squall.runtime.spark.trident import windows as tw
from squall.runtime.spark.trident.combine import _Partials
from squall.runtime.spark.trident.per_job import job_ids
from squall.runtime.spark.trident.planner import (
    Terminal,
    _live,
    _partial_kind,
    _partial_reads,
    terminal_op,
)
from squall.trident.execution import (
    BatchExecutor,
    TridentOperationContext,
    TridentOperationError,
    check_batch_output,
    operation_failed,
)
from squall.trident.operations import ROW, BatchFunction, BuiltinCombiner, Function
from squall.trident.plan import PersistNode, Plan, RowNode, RowOp, WindowNode, user_op

# Each operation's tuples in and out, added up over the workers (`_CountsParam`).
Counts = Accumulator[dict[str, list[int]]]


class _Chain:
    """Row operations fused into one `mapInArrow` (shipped to the workers), optionally ending
    with the partial aggregation of a combiner."""

    def __init__(self, nodes: list[RowNode], in_fields: tuple[str, ...],
                 out_fields: tuple[str, ...], conf: Mapping[str, Any], txid: int,
                 partial: Terminal | None = None, counts: Counts | None = None,
                 types: cols.Types | None = None, cells: bool = False,
                 from_job: bool = False) -> None:
        self.nodes, self.in_fields, self.out_fields = nodes, in_fields, out_fields
        # The partials go to the driver as they are (no Spark aggregation after): as IPC cells.
        self.cells = cells
        self.conf, self.txid, self.partial = dict(conf), txid, partial
        self.terminals: tuple[Terminal, ...] = (partial,) if partial is not None else ()
        self.counts = counts  # an accumulator of each operation's tuples in and out
        # Made once per run: the txid and the counts' accumulator are the job's (`per_job`).
        self.from_job = from_job
        # The output's typed fields (the rest travel as four columns).
        self.types = dict(types or {})
        kind = _partial_kind(partial, self.types) if partial is not None else None
        if isinstance(partial, WindowNode):
            self.types = tw.partial_types(partial, self.types, kind)
        elif kind is not None:
            self.types[sc.PARTIAL] = kind
        self._identify()

    def _identify(self) -> None:
        self.key = cloudpickle.dumps((self.nodes, self.terminals))  # the prepared operations
        reads = [f for t in self.terminals for f in _partial_reads(t)]
        self.live = _live(self.nodes, (*self.out_fields, *dict.fromkeys(reads)))

    def partial_schema(self) -> pa.Schema:
        """The Arrow schema of the partial rows, which travel as IPC cells
        (`trident.columns.to_cells`) when they go to the driver as they are."""
        assert self.partial is not None
        if isinstance(self.partial, WindowNode):
            return cols.schema(tw.partial_fields(self.partial), self.types)
        return cols.schema((*self.partial.keys, sc.PARTIAL), self.types)

    def output_schema(self) -> str:
        if self.cells:
            return cols.IPC_SCHEMA
        if self.partial is None:
            return cols.spark_schema(self.out_fields, self.types)
        if isinstance(self.partial, WindowNode):
            return cols.spark_schema(tw.partial_fields(self.partial), self.types)
        keys = self.partial.keys
        if isinstance(terminal_op(self.partial), BuiltinCombiner):
            # partials Spark aggregates further
            return cols.spark_schema((*keys, sc.PARTIAL), self.types)
        return ", ".join(filter(None, [cols.spark_schema(keys, self.types),
                                       sc.ddl(sc.PARTIAL, "binary")]))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # As in a topology's stage (squall.runtime.spark.stage.run_stage): a per-tuple function
        # makes a tuple per input row and per emit, and the cyclic collector would rescan the
        # worker's growing heap again and again (13-19 % of W1's per-tuple chain in one
        # process). Reference counting frees what holds no cycle; the collector runs after.
        with gc_paused():
            yield from self._run_batches(batches)

    def _run_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415 -- runs in the Python worker only

        ctx = TaskContext.get()
        index = ctx.partitionId() if ctx is not None else 0
        if self.from_job:  # this task's copy of the function, for its job's transaction
            self.txid, counts_id = job_ids()
            self.counts = _deserialize_accumulator(counts_id, {}, _CountsParam())
        ops = _prepared(self, index)
        accs = self._accumulators(ops, index)
        counts: dict[str, list[int]] = {}
        for rb in batches:
            columns, rows, fields = self._run(rb, ops, counts)
            if not accs:
                yield self._encode(columns, rows, fields, self.out_fields, self.types)
                continue
            n = len(rows) if rows is not None else cols.num_rows(columns)
            for terminal, acc in zip(self.terminals, accs, strict=True):
                counts.setdefault(terminal.cid, [0, 0])[0] += n
                try:
                    acc.add(columns, rows, fields)
                except SquallError:
                    raise
                except Exception as exc:  # the user's aggregator, or values it cannot take
                    raise tracebacks.noted(operation_failed(
                        terminal, self.txid, exc, rows or (), fields), exc) from exc
        if accs:
            yield from self._results(accs)
        if self.counts is not None:
            self.counts.add(counts)

    def _accumulators(self, ops: dict[str, Any], index: int
                      ) -> list[_Partials | tw.WindowPartials]:
        """The partial aggregation of each terminal over this partition."""
        if self.partial is None:
            return []
        if isinstance(self.partial, WindowNode):
            return [tw.WindowPartials(self.partial, ops[self.partial.cid], self.types, index)]
        return [_Partials(self.partial, ops, self.types)]

    def _results(self, accs: list[_Partials | tw.WindowPartials]) -> Iterator[pa.RecordBatch]:
        (acc,) = accs
        if self.cells:
            yield from cols.to_cells(acc.result())
        else:
            yield acc.result()

    # Values travel either as Arrow columns (after batch functions) or as Python rows (after
    # per-tuple functions); each operation takes what suits it.
    def _run(self, rb: pa.RecordBatch, ops: dict[str, Any], counts: dict[str, list[int]]
             ) -> tuple[dict[str, Any] | None, list[tuple] | None, tuple[str, ...]]:
        self._current: RowNode | None = None  # the operation running, in the worker
        try:
            return self._run_nodes(rb, ops, counts)
        except SquallError:
            raise
        except Exception as exc:
            node = self._current
            if node is None:  # not the user's operation
                raise
            # The user's error, told as the local runner tells it, naming the operation and the
            # place in the user's file; its full traceback, with the real file names, travels
            # in the worker's text (`tracebacks.noted`).
            raise tracebacks.noted(operation_failed(node, self.txid, exc), exc) from exc

    def _run_nodes(self, rb: pa.RecordBatch, ops: dict[str, Any], counts: dict[str, list[int]]
                   ) -> tuple[dict[str, Any] | None, list[tuple] | None, tuple[str, ...]]:
        fields = self.in_fields
        # Arrow columns for a batch function first, or for an aggregation straight from
        # typed columns; Python rows otherwise.
        arrow = _columnar(self.nodes[0], ops) if self.nodes else \
            all(cols.single_typed(rb, f) for f in fields)
        columns: dict[str, Any] | None = {f: cols.decode_arrow(rb, f) for f in fields} \
            if arrow else None
        rows: list[tuple] | None = None
        if columns is None:
            rows = list(zip(*(cols.decode(rb, f) for f in fields), strict=True)) \
                if fields else [()] * rb.num_rows
        for i, node in enumerate(self.nodes):
            self._current = node
            op = ops.get(node.cid)
            c = counts.setdefault(node.cid, [0, 0])
            c[0] += len(rows) if rows is not None else cols.num_rows(columns)
            if _columnar(node, ops):
                if columns is None:
                    assert rows is not None
                    columns = {f: pa.array([r[i] for r in rows]) for i, f in enumerate(fields)}
                    rows = None
                # Fields no later operation reads are dropped here (not repeated per output row).
                columns = _batch_each(node, ops[node.cid], columns, fields, self.live[i])
                fields = tuple(f for f in (*fields, *node.output) if f in columns)
            elif node.row_op is RowOp.PROJECT and columns is not None:
                # Arrow columns stay columns: the projected ones, no row made.
                fields = node.fields
                columns = {f: columns[f] for f in fields}
            else:
                if rows is None:
                    assert columns is not None
                    lists = [cols.pylist(columns[f]) for f in fields]
                    rows = list(zip(*lists, strict=True)) if lists else []
                    columns = None
                each = node.row_op is RowOp.EACH
                if each and isinstance(op, Function) \
                        and not self.live[i] & set(fields) \
                        and i == len(self.nodes) - 1 and node.output:
                    # The chain's last operation, whose input tuple nothing reads: its emitted
                    # values go on as Arrow columns when each field holds one native type
                    # (no row per emit; the encoder and the partial aggregation take Arrow).
                    lists, _ = _ROW_EXECUTOR.each_columns(node, fields, rows, op)
                    fields = node.output
                    columns = _native_columns(fields, lists, op.output_types)
                    rows = None if columns is not None else \
                        list(zip(*lists, strict=True))
                elif each and not self.live[i] & set(fields):
                    # Nothing later reads the input tuple: the rows are the emitted values.
                    rows = _ROW_EXECUTOR.row_op(node, fields, rows, op, self.txid,
                                                keep_inputs=False)
                    fields = node.output
                else:
                    rows = _ROW_EXECUTOR.row_op(node, fields, rows, op, self.txid)
                    fields = (*fields, *node.output) if each else \
                        fields if node.row_op in (RowOp.FILTER, RowOp.PEEK) else node.fields
            c[1] += len(rows) if rows is not None else cols.num_rows(columns)
        self._current = None
        return columns, rows, fields

    @staticmethod
    def _encode(columns: dict[str, Any] | None, rows: list[tuple] | None,
                fields: tuple[str, ...], out: tuple[str, ...], types: cols.Types
                ) -> pa.RecordBatch:
        if columns is not None:
            data = [columns[f] for f in out]
        else:
            assert rows is not None
            pos = {f: i for i, f in enumerate(fields)}
            data = [[r[pos[f]] for r in rows] for f in out]
        return pa.RecordBatch.from_pydict(cols.encode_columns(out, data, types),
                                          schema=cols.schema(out, types))


class _StateChain(_Chain):
    """A chain ending with the partial aggregations of `terminals`, `persistent_aggregate`s of
    the same keys into partitioned states of `partitions` partitions, computed in one pass over
    the input: their partials leave stacked, each row with its terminal (`$t`) and its key's
    state partition (`$sp`), for `trident.state.ApplyState`."""

    def __init__(self, nodes: list[RowNode], in_fields: tuple[str, ...],
                 conf: Mapping[str, Any], txid: int, terminals: Sequence[PersistNode],
                 partitions: int, counts: Counts | None, types: cols.Types,
                 from_job: bool = False) -> None:
        super().__init__(nodes, in_fields, (), conf, txid, counts=counts, types=types,
                         from_job=from_job)
        self.terminals, self.partitions = tuple(terminals), partitions
        self.keys = self.terminals[0].keys
        # Each terminal's partials: one typed column, the four variants, or pickled.
        self.kinds: list[str] = [
            _partial_kind(t, self.types)
            or (ts.ANY if isinstance(terminal_op(t), BuiltinCombiner) else ts.PICKLED)
            for t in self.terminals]
        self._identify()

    def output_schema(self) -> str:
        return ts.stacked_schema(cols.spark_schema(self.keys, self.types), self.kinds)

    def _accumulators(self, ops: dict[str, Any], index: int
                      ) -> list[_Partials | tw.WindowPartials]:
        return [_Partials(t, ops, {**self.types, sc.PARTIAL: k} if k in cols.PYTHON
                          else self.types)
                for t, k in zip(self.terminals, self.kinds, strict=True)]

    def _results(self, accs: list[_Partials | tw.WindowPartials]) -> Iterator[pa.RecordBatch]:
        yield from ts.stacked([a.result() for a in accs], self.keys, self.kinds,
                              self.partitions)


class _CountsParam(AccumulatorParam[dict[str, list[int]]]):
    """Adds `{operation: [tuples in, tuples out]}` counts from the workers."""

    def zero(self, value: dict[str, list[int]]) -> dict[str, list[int]]:
        return {}

    def addInPlace(self, a: dict[str, list[int]], b: dict[str, list[int]]
                   ) -> dict[str, list[int]]:
        for cid, (n_in, n_out) in b.items():
            c = a.setdefault(cid, [0, 0])
            c[0] += n_in
            c[1] += n_out
        return a


# The row operations of the executor, without states (Spark runs no state query).
_ROW_EXECUTOR = BatchExecutor(Plan(()), {}, location=None)
_PREPARED: dict[tuple[bytes, int], dict[str, Any]] = {}


def _prepared(chain: _Chain, index: int) -> dict[str, Any]:
    """The chain's operations for partition `index`, prepared once per Python worker."""
    key = (chain.key, index)
    ops = _PREPARED.get(key)
    if ops is None:
        ops = {}
        nodes = [*chain.nodes, *chain.terminals]
        for node in nodes:
            if user_op(node) is not None:
                op = cloudpickle.loads(cloudpickle.dumps(user_op(node)))
                op.prepare(chain.conf, TridentOperationContext(node.cid, index, node.parallelism))
                ops[node.cid] = op
        _PREPARED[key] = ops
    return ops


def _columnar(node: RowNode, ops: dict[str, Any]) -> bool:
    return node.row_op is RowOp.EACH and isinstance(ops.get(node.cid), BatchFunction)


def _native_columns(fields: tuple[str, ...], lists: list[list[Any]],
                    checked: Mapping[str, type] | None = None) -> dict[str, pa.Array] | None:
    """Per-field value lists as Arrow arrays when each holds one native type (str, int within
    int64 or float, None allowed), else None: values come back as they went in, so an int
    never becomes a float and a list of mixed types stays Python values. `checked` maps the
    fields whose values were checked against a declared type to it (a `Function`'s
    `output_types`: `each_columns` checks them).

    >>> _native_columns(("w", "n"), [["a", None], [1, 2]])["n"].type
    DataType(int64)
    >>> _native_columns(("n",), [[1, 2.5]]) is None
    True
    """
    out: dict[str, pa.Array] = {}
    for f, values in zip(fields, lists, strict=True):
        arr = cols.native_array(values, checked.get(f) if checked else None)
        if arr is None:
            return None  # the encoder takes the Python values (an int beyond int64 pickled)
        out[f] = arr
    return out


def _batch_each(node: RowNode, op: BatchFunction, columns: dict[str, Any],
                fields: tuple[str, ...], keep: frozenset[str]) -> dict[str, Any]:
    """One `BatchFunction` over Arrow columns: the fields in `keep` after it (those later
    operations read), its declared output types checked as on the local runner."""
    inputs, outputs = node.input, node.output
    table = pa.table({f: columns[f] for f in inputs})
    result = op.execute_batch(table.to_pandas() if op.format == "pandas" else table)
    if hasattr(result, "to_pydict") and not isinstance(result, (pa.Table, pa.RecordBatch)):
        result = result.to_pydict()
    if not isinstance(result, (pa.Table, pa.RecordBatch, dict)):
        result = pa.Table.from_pandas(result, preserve_index=False)
    get = (lambda f: result[f]) if isinstance(result, dict) else result.column
    names = list(result.keys()) if isinstance(result, dict) else result.schema.names
    check_batch_output(op, node.cid, outputs, names, table.num_rows,
                       len(get(outputs[0])) if outputs and outputs[0] in names else None)
    out: dict[str, Any] = {}
    if ROW in names:
        rows_of = get(ROW)
        if not isinstance(rows_of, (pa.Array, pa.ChunkedArray)):
            rows_of = pa.array(rows_of)
        for f in fields:
            if f not in keep:
                continue
            c = columns[f]
            out[f] = c.take(rows_of) if hasattr(c, "take") else [c[i] for i in rows_of.to_pylist()]
    else:
        out.update({f: columns[f] for f in fields if f in keep})
    for f in outputs:
        v = get(f)
        v = v if isinstance(v, (pa.Array, pa.ChunkedArray, list)) else list(v)
        want = op.output_types.get(f)
        if want is not None:
            try:
                v = cols.encode_typed(f, v, cols.KIND[want])
            except TypeError as exc:
                raise TridentOperationError(f"{type(op).__name__}.execute_batch: {exc}",
                                            component=node.cid, field=f) from None
        if f in keep:
            out[f] = v
    return out
