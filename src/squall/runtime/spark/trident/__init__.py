"""Trident on Spark: a transaction is a micro-batch, its heavy part planned as DataFrame work.

A streaming query over Spark's `rate-micro-batch` source drives the transactions: each of its
micro-batches runs the coordinator's next transaction (`BatchCoordinator.next_txid`; a tick after
a bounded input ended, or during a stop, runs none). Per transaction the driver asks every spout
for the transaction's batch (`BatchCoordinator.emit`; a replayed txid gives the same batch, or
for an opaque spout one starting where the previous ended), then:

1. **In Spark**, for each spout whose operations are all Spark-able, the path from the spout to
   each aggregation that ends it (`persistent_aggregate`, `group_by().aggregate`, `aggregate`
   with a `CombinerAggregator`): the spout's rows become a DataFrame, consecutive row operations
   (`each`, `filter`, `map`, `flat_map`, `peek`, `project`) run fused in one `mapInArrow`
   (a Python loop per Arrow batch for per-tuple functions, one call per Arrow batch for a
   `BatchFunction`), repartitions map to `repartition`, and the aggregation's combiner runs in
   the same worker over each partition (Storm's partial aggregation before the transfer). The
   partials meet in Spark's JVM for the built-ins (`Count`, `Sum`, `Min`, `Max`: a SQL
   aggregation), or on the driver for a user's combiner. One Spark action (`toArrow`) per
   aggregation brings the batch's per-key aggregates to the driver, except for a
   `persistent_aggregate` into a partitioned state: its partials are shuffled by state
   partition and applied in the tasks that hold them (`trident.state`), and only how many keys
   each partition wrote comes back. A `state_query` of a partitioned state fed this way is read
   in the tasks holding the state partitions of its keys (`trident.state_query`), before the
   transaction's updates, and only its output rows come back.
2. **On the driver**, everything else runs through the same executor as the local runner
   (`squall.trident.execution.BatchExecutor`), given the aggregates of step 1: map state
   updates (in plan order, so in txid order: Spark runs one micro-batch at a time), state
   other state queries, joins, merges and whatever follows a state.
3. The next txid is recorded (the commit). A batch that failed is run again at once as a new
   attempt of the same txid (`squall.trident.max.attempts`; unset: for ever, with a growing
   pause), its states applying it once if transactional or opaque.

Column encoding of the untyped fields: `squall.runtime.spark.trident.columns`. Decisions and
measurements: docs/design/trident.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import functions as F

from squall.errors import SquallError
from squall.metrics.snapshot import BatchMetrics
from squall.protocols import Progress
from squall.results import ComponentStats, ErrorRecord, RunResult
from squall.runtime.checkpoint_location import prepare_location
from squall.runtime.gc_pause import gc_paused
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.spark.fingerprint import check_fingerprint
from squall.runtime.spark.query import TICKS, batch_metrics, drive_query
from squall.runtime.spark.session import get_session
from squall.runtime.spark.shipping import ship_by_value
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import state as ts
from squall.runtime.spark.trident import state_query as tq
from squall.runtime.spark.trident import windows as tw
from squall.topology.config import Config
from squall.topology.description import Topology
from squall.transaction_kernel.progress_store import STORE
from squall.trident.coordinator import (
    MAX_ATTEMPTS,
    BatchCoordinator,
    retry_pause_ms,
)
from squall.trident.execution import (
    BatchExecutor,
    Parts,
    TridentOperationContext,
    TridentOperationError,
    partition_rows,
    split_by_key,
)
from squall.trident.operations import (
    ROW,
    BatchFunction,
    BuiltinCombiner,
    CombinerAggregator,
    Count,
    Function,
    Sum,
)
from squall.trident.plan import Plan, PlanNode, trident_plan
from squall.trident.spouts import FileBatch, FileBatchSpout
from squall.trident.state.partitioned import PartitionedMap
from squall.trident.stats import TridentStats
from squall.trident.tuple import tuple_type

log = logging.getLogger("squall")

# Combine in the Python worker before the shuffle (default true); false sends every row to the
# aggregation (for measuring what the partial aggregation gives).
PARTIAL = "squall.trident.spark.partial.aggregation"
# false: a persistent_aggregate's aggregates go to the driver, which applies them (for measuring).
IN_EXECUTORS = "squall.trident.spark.state.in.executors"
# Up to this many partitions' typed partials of a built-in combiner are combined on the driver
# by Arrow (W1: 0.3 s less than Spark's shuffle and JVM aggregation); more go through Spark.
DRIVER_COMBINE = 16
ROW_OPS = frozenset({"each", "filter", "map", "flat_map", "peek", "project"})
REPARTITIONS = frozenset({"shuffle", "partition_by", "global", "batch_global"})
TERMINALS = frozenset({"persistent_aggregate", "group_aggregate", "aggregate"})


# ---- which operations run in Spark ----------------------------------------------------------

def spark_segments(plan: Plan, queries: Callable[[PlanNode], bool] = lambda node: False
                   ) -> tuple[dict[str, list[PlanNode]], frozenset[str]]:
    """Each aggregation computed in Spark, and each `state_query` for which `queries` is
    true (read in the tasks, `trident.state_query`) -> its path from its spout (spout first, the
    aggregation or query last), and the operations inside those paths (the driver skips them).

    An operation runs in Spark only if every operation reading its output does too (its rows
    never reach the driver), so the paths are pruned until that holds."""
    inside: set[str] = set()
    terminals: set[str] = set()
    for node in plan.nodes:
        if node.kind == "spout":
            inside.add(node.cid)
            continue
        if len(node.parents) != 1 or node.parents[0] not in inside:
            continue
        if node.kind in ROW_OPS or node.kind in REPARTITIONS:
            inside.add(node.cid)
        elif _spark_terminal(node) or (node.kind == "state_query" and queries(node)):
            terminals.add(node.cid)
    changed = True
    while changed:
        changed = False
        for cid in list(inside):
            kids = plan.children(cid)
            if not kids or any(k.cid not in inside and k.cid not in terminals for k in kids):
                inside.discard(cid)
                for k in kids:
                    terminals.discard(k.cid)
                changed = True
        for cid in list(terminals):
            if plan.node(cid).parents[0] not in inside:
                terminals.discard(cid)
                changed = True
    paths: dict[str, list[PlanNode]] = {}
    for cid in sorted(terminals):
        path = [plan.node(cid)]
        while path[0].kind != "spout":
            path.insert(0, plan.node(path[0].parents[0]))
        paths[cid] = path
    return paths, frozenset(inside)


def _spark_terminal(node: PlanNode) -> bool:
    """An aggregation Spark can end a path with: a combiner (built-in: finished in the JVM;
    a user's: on the driver), or an event-time window with a built-in combiner (partials per
    window and key in the workers, by Arrow, finished on the driver)."""
    op = node.args.get("op")
    if node.kind == "window":  # event time; count and processing-time windows: the driver's
        return isinstance(op, BuiltinCombiner) and node.args.get("by", "event") == "event"
    return node.kind in TERMINALS and isinstance(op, CombinerAggregator)


# ---- worker side: fused row operations, partial aggregation ---------------------------------

class _Chain:
    """Row operations fused into one `mapInArrow` (shipped to the workers), optionally ending
    with the partial aggregation of a combiner."""

    def __init__(self, nodes: list[PlanNode], in_fields: tuple[str, ...],
                 out_fields: tuple[str, ...], conf: Mapping[str, Any], txid: int,
                 partial: PlanNode | None = None, counts: Any = None,
                 types: cols.Types | None = None, cells: bool = False) -> None:
        self.nodes, self.in_fields, self.out_fields = nodes, in_fields, out_fields
        # The partials go to the driver as they are (no Spark aggregation after): as IPC cells.
        self.cells = cells
        self.conf, self.txid, self.partial = dict(conf), txid, partial
        self.terminals: tuple[PlanNode, ...] = (partial,) if partial is not None else ()
        self.counts = counts  # an accumulator of each operation's tuples in and out
        # The output's typed fields (the rest travel as four columns).
        self.types = dict(types or {})
        kind = _partial_kind(partial, self.types) if partial is not None else None
        if partial is not None and partial.kind == "window":
            self.types = tw.partial_types(partial, self.types, kind)
        elif kind is not None:
            self.types["$partial"] = kind
        self._identify()

    def _identify(self) -> None:
        self.key = cloudpickle.dumps((self.nodes, self.terminals))  # the prepared operations
        reads = [f for t in self.terminals for f in _partial_reads(t)]
        self.live = _live(self.nodes, (*self.out_fields, *dict.fromkeys(reads)))

    def partial_schema(self) -> pa.Schema:
        """The Arrow schema of the partial rows, which travel as IPC cells
        (`trident.columns.to_cells`) when they go to the driver as they are."""
        assert self.partial is not None
        if self.partial.kind == "window":
            return cols.schema(tw.partial_fields(self.partial), self.types)
        return cols.schema((*self.partial.args["keys"], "$partial"), self.types)

    def output_schema(self) -> str:
        if self.cells:
            return cols.IPC_SCHEMA
        if self.partial is None:
            return cols.spark_schema(self.out_fields, self.types)
        if self.partial.kind == "window":
            return cols.spark_schema(tw.partial_fields(self.partial), self.types)
        keys = tuple(self.partial.args["keys"])
        if isinstance(self.partial.args["op"], BuiltinCombiner):
            # partials Spark aggregates further
            return cols.spark_schema((*keys, "$partial"), self.types)
        return ", ".join(filter(None, [cols.spark_schema(keys, self.types),
                                       "`$partial` binary"]))

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
        ops = _prepared(self, index)
        accs = self._accumulators(ops, index)
        counts: dict[str, list[int]] = {}
        for rb in batches:
            columns, rows, fields = self._run(rb, ops, counts)
            if not accs:
                yield self._encode(columns, rows, fields, self.out_fields, self.types)
                continue
            n = len(rows) if rows is not None else _length(columns)
            for terminal, acc in zip(self.terminals, accs, strict=True):
                counts.setdefault(terminal.cid, [0, 0])[0] += n
                acc.add(columns, rows, fields)
        if accs:
            yield from self._results(accs)
        if self.counts is not None:
            self.counts.add(counts)

    def _accumulators(self, ops: dict[str, Any], index: int
                      ) -> list[_Partials | tw.WindowPartials]:
        """The partial aggregation of each terminal over this partition."""
        if self.partial is None:
            return []
        if self.partial.kind == "window":
            return [tw.WindowPartials(self.partial, ops[self.partial.cid], self.types, index)]
        return [_Partials(self.partial, ops, self.types)]

    def _results(self, accs: list[Any]) -> Iterator[pa.RecordBatch]:
        (acc,) = accs
        if self.cells:
            yield from cols.to_cells(acc.result())
        else:
            yield acc.result()

    # Values travel either as Arrow columns (after batch functions) or as Python rows (after
    # per-tuple functions); each operation takes what suits it.
    def _run(self, rb: pa.RecordBatch, ops: dict[str, Any], counts: dict[str, list[int]]
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
            op = ops.get(node.cid)
            c = counts.setdefault(node.cid, [0, 0])
            c[0] += len(rows) if rows is not None else _length(columns)
            if _columnar(node, ops):
                if columns is None:
                    assert rows is not None
                    columns = {f: pa.array([r[i] for r in rows]) for i, f in enumerate(fields)}
                    rows = None
                # Fields no later operation reads are dropped here (not repeated per output row).
                columns = _batch_each(node, ops[node.cid], columns, fields, self.live[i])
                fields = tuple(f for f in (*fields, *node.args["output"]) if f in columns)
            else:
                if rows is None:
                    assert columns is not None
                    lists = [_pylist(columns[f]) for f in fields]
                    rows = list(zip(*lists, strict=True)) if lists else []
                    columns = None
                if node.kind == "each" and isinstance(op, Function) \
                        and not self.live[i] & set(fields) \
                        and i == len(self.nodes) - 1 and node.args["output"]:
                    # The chain's last operation, whose input tuple nothing reads: its emitted
                    # values go on as Arrow columns when each field holds one native type
                    # (no row per emit; the encoder and the partial aggregation take Arrow).
                    lists, _ = _ROW_EXECUTOR.each_columns(node, fields, rows, op)
                    fields = tuple(node.args["output"])
                    columns = _native_columns(fields, lists, op.output_types)
                    rows = None if columns is not None else \
                        list(zip(*lists, strict=True))
                elif node.kind == "each" and not self.live[i] & set(fields):
                    # Nothing later reads the input tuple: the rows are the emitted values.
                    rows = _ROW_EXECUTOR.row_op(node, fields, rows, op, self.txid,
                                                keep_inputs=False)
                    fields = tuple(node.args["output"])
                else:
                    rows = _ROW_EXECUTOR.row_op(node, fields, rows, op, self.txid)
                    fields = (*fields, *node.args["output"]) if node.kind == "each" else \
                        fields if node.kind in ("filter", "peek") else node.fields
            c[1] += len(rows) if rows is not None else _length(columns)
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

    def __init__(self, nodes: list[PlanNode], in_fields: tuple[str, ...],
                 conf: Mapping[str, Any], txid: int, terminals: Sequence[PlanNode],
                 partitions: int, counts: Any, types: cols.Types) -> None:
        super().__init__(nodes, in_fields, (), conf, txid, counts=counts, types=types)
        self.terminals, self.partitions = tuple(terminals), partitions
        self.keys = tuple(self.terminals[0].args["keys"])
        # Each terminal's partials: one typed column, the four variants, or pickled.
        self.kinds: list[str] = [
            _partial_kind(t, self.types)
            or (ts.ANY if isinstance(t.args["op"], BuiltinCombiner) else ts.PICKLED)
            for t in self.terminals]
        self._identify()

    def output_schema(self) -> str:
        return ts.stacked_schema(cols.spark_schema(self.keys, self.types), self.kinds)

    def _accumulators(self, ops: dict[str, Any], index: int
                      ) -> list[_Partials | tw.WindowPartials]:
        return [_Partials(t, ops, {**self.types, "$partial": k} if k in cols.PYTHON
                          else self.types)
                for t, k in zip(self.terminals, self.kinds, strict=True)]

    def _results(self, accs: list[Any]) -> Iterator[pa.RecordBatch]:
        yield from ts.stacked([a.result() for a in accs], self.keys, self.kinds,
                              self.partitions)


class _Partials:
    """A combiner's partial aggregation over one partition, in the worker (Storm's partial
    aggregation before the transfer). Arrow columns of native types are grouped by Arrow
    (no Python loop) for the built-ins; anything else by a dict in Python."""

    def __init__(self, node: PlanNode, ops: dict[str, Any], types: cols.Types) -> None:
        self.node, self.op, self.types = node, ops[node.cid], types
        self.keys, self.inputs = tuple(node.args["keys"]), tuple(node.args["input"])
        self.builtin = isinstance(self.op, BuiltinCombiner)
        self.sql = self.op.sql if self.builtin else ""
        self.names = [f"k{i}" for i in range(len(self.keys))]
        self.tables: list[pa.Table] = []  # Arrow partials, combined at the end
        # Arrow rows not grouped yet: grouped together, in one Arrow call per million rows
        # (a group_by per Arrow batch and another over their partials cost a third more).
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.combined: dict[Any, Any] = {}  # Python partials (a key tuple -> value)

    def add(self, columns: dict[str, Any] | None, rows: list[tuple] | None,
            fields: tuple[str, ...]) -> None:
        keys, sql = self.keys, self.sql
        if columns is not None and self.builtin and all(cols.native(columns[k]) for k in keys) \
                and (sql == "count" or cols.native(columns[self.inputs[0]])):
            self._arrow(columns, "count_all" if sql == "count" else sql)
            return
        if rows is None:
            assert columns is not None
            lists = [_pylist(columns[f]) for f in fields]
            rows = list(zip(*lists, strict=True)) if lists else []
        pos = {f: i for i, f in enumerate(fields)}
        kidx = [pos[k] for k in keys]
        combined = self.combined
        if sql == "count":
            # Counting needs no tuple: C's Counter over the keys (the rows themselves when
            # they are the keys).
            counts: Mapping[tuple[Any, ...], int]
            if kidx == list(range(len(fields))):
                counts = Counter(rows)
            elif len(kidx) == 1:
                counts = {(k,): n for k, n in Counter(map(itemgetter(*kidx), rows)).items()}
            else:
                counts = Counter(map(itemgetter(*kidx), rows)) if kidx else {(): len(rows)}
            if not combined:
                combined.update(counts)
                return
            for k, n in counts.items():
                combined[k] = combined.get(k, 0) + n
            return
        idx = [pos[f] for f in self.inputs]
        make = tuple_type(self.inputs)
        init, combine = self.op.init, self.op.combine
        for r in rows:
            k = tuple([r[i] for i in kidx])
            v = init(make(tuple([r[i] for i in idx])))
            old = combined.get(k, _MISSING)
            combined[k] = v if old is _MISSING else combine(old, v)

    def _arrow(self, columns: dict[str, Any], agg: str) -> None:
        names = self.names
        if not names:  # a global aggregate: one value per Arrow batch
            if agg == "count_all":
                value = pa.array([_length(columns)], pa.int64())
            else:
                value = pa.array([pc.call_function(agg, [columns[self.inputs[0]]]).as_py()])
            self.tables.append(pa.table({"v": value}))
            return
        data = {n: columns[k] for n, k in zip(names, self.keys, strict=True)}
        if agg != "count_all":
            data["v"] = columns[self.inputs[0]]
        table = pa.table(data)
        self.pending.append(table)
        self.pending_rows += table.num_rows
        if self.pending_rows >= tw.GROUP_EVERY:
            self._group_pending()

    def _group_pending(self) -> None:
        if not self.pending:
            return
        names, raw = self.names, pa.concat_tables(self.pending)
        self.pending, self.pending_rows = [], 0
        if self.sql == "count":
            t = raw.group_by(names).aggregate([([], "count_all")])
        else:
            t = raw.group_by(names).aggregate([("v", self.sql)])
        self.tables.append(t.rename_columns([c if c in names else "v" for c in t.column_names]))

    def result(self) -> pa.RecordBatch:
        keys = self.keys
        self._group_pending()
        if self.tables:
            # The Arrow partials, combined once more by Arrow when there are several.
            names = self.names
            final = tw.FINAL[self.sql]
            t = pa.concat_tables(self.tables)
            if names:
                if len(self.tables) > 1:
                    t = t.group_by(names).aggregate([("v", final)])
                    t = t.rename_columns([c if c in names else "v" for c in t.column_names])
                kcols: list[Any] = [t.column(n) for n in names]
                values: Any = t.column("v")
            else:
                kcols, values = [], pa.array([pc.call_function(final, [t["v"]]).as_py()])
            if self.combined:  # some Arrow batches took the Python path: merge them in
                ks = list(zip(*[c.to_pylist() for c in kcols], strict=True)) if names \
                    else [()]
                for k, v in zip(ks, values.to_pylist(), strict=True):
                    old = self.combined.get(k, _MISSING)
                    self.combined[k] = v if old is _MISSING else self.op.combine(old, v)
            else:
                out = (*keys, "$partial")
                return pa.RecordBatch.from_pydict(
                    cols.encode_columns(out, [*kcols, values], self.types),
                    schema=cols.schema(out, self.types))
        combined = self.combined
        klists = [[k[i] for k in combined] for i in range(len(keys))]
        if self.builtin:
            out = (*keys, "$partial")
            return pa.RecordBatch.from_pydict(
                cols.encode_columns(out, [*klists, list(combined.values())], self.types),
                schema=cols.schema(out, self.types))
        data = cols.encode_columns(keys, klists, self.types)
        data["$partial"] = pa.array([cloudpickle.dumps(v) for v in combined.values()],
                                    type=pa.binary())
        schema = pa.schema([*cols.schema(keys, self.types), ("$partial", pa.binary())])
        return pa.RecordBatch.from_pydict(data, schema=schema)


class _CountsParam(AccumulatorParam):
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


_MISSING = object()
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
            if "op" in node.args:
                op = cloudpickle.loads(cloudpickle.dumps(node.args["op"]))
                op.prepare(chain.conf, TridentOperationContext(node.cid, index, node.parallelism))
                ops[node.cid] = op
        _PREPARED[key] = ops
    return ops


def _live(nodes: Sequence[PlanNode], out: Sequence[str]) -> list[frozenset[str]]:
    """For each row operation of a chain, the fields read after it (by a later operation, or
    as the chain's output `out`)."""
    live = set(out)
    after: list[frozenset[str]] = []
    for node in reversed(nodes):
        after.append(frozenset(live))
        reads = set(node.args.get("input", ()))
        if node.kind == "each":
            live = reads | (live - set(node.args["output"]))
        elif node.kind in ("filter", "peek"):
            live = reads | live
        else:  # project, map, flat_map: a new set of fields
            live = reads
    return after[::-1]


def _types_after(node: PlanNode, types: cols.Types) -> dict[str, str]:
    """The typed fields after a row operation or repartition, from those before it: a field
    keeps its column type through the operations that pass it on unchanged; a batch
    function's declared outputs are typed; other new values are not."""
    if node.kind == "each":
        declared = getattr(node.args["op"], "output_types", {})
        out = dict(types)
        for f in node.args["output"]:
            out.pop(f, None)
            if f in declared:
                out[f] = cols.KIND[declared[f]]
        return out
    if node.kind == "project":
        return {f: k for f, k in types.items() if f in node.fields}
    if node.kind in ("map", "flat_map"):
        return {}
    return dict(types)


def _partial_reads(terminal: PlanNode | None) -> tuple[str, ...]:
    """The fields a combiner's partial aggregation reads: its keys, and its input unless it
    counts (a count reads no value)."""
    if terminal is None:
        return ()
    op = terminal.args["op"]
    counts = isinstance(op, BuiltinCombiner) and op.sql == "count"
    window = (terminal.args["timestamp_field"],) if terminal.kind == "window" else ()
    return (*terminal.args["keys"], *(() if counts else terminal.args["input"]), *window)


def _partial_kind(terminal: PlanNode, types: cols.Types) -> str | None:
    """The column type of a combiner's partials: a count is an int; a built-in sum, min or
    max has its input's type (when typed); a user's combiner is pickled."""
    op = terminal.args["op"]
    if not isinstance(op, BuiltinCombiner):
        return None
    if op.sql == "count":
        return "i"
    kind = types.get(terminal.args["input"][0])
    return kind if kind in ("i", "d") or (kind == "s" and op.sql != "sum") else None


def _col(df_columns: Sequence[str], name: str) -> Any:
    """A column of the DataFrame, or a typed null when the field's layout lacks it (a typed
    field has one of its four columns)."""
    if name in df_columns:
        return F.col(f"`{name}`")
    return F.lit(None).cast(cols.SQL[name[-1]])


def _present(df_columns: Sequence[str], field: str) -> list[Any]:
    """The columns a field has in the DataFrame (one when typed or tagged, else four)."""
    return [F.col(f"`{n}`") for n in cols.stored(field) if n in df_columns]


def _length(columns: dict[str, Any] | None) -> int:
    return len(next(iter(columns.values()))) if columns else 0


def _columnar(node: PlanNode, ops: dict[str, Any]) -> bool:
    return node.kind == "each" and isinstance(ops.get(node.cid), BatchFunction)


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


def _pylist(values: Any) -> list[Any]:
    return values.to_pylist() if hasattr(values, "to_pylist") else list(values)


def _batch_each(node: PlanNode, op: BatchFunction, columns: dict[str, Any],
                fields: tuple[str, ...], keep: frozenset[str]) -> dict[str, Any]:
    """One `BatchFunction` over Arrow columns: the fields in `keep` after it (those later
    operations read), its declared output types checked as on the local runner."""
    inputs, outputs = node.args["input"], node.args["output"]
    table = pa.table({f: columns[f] for f in inputs})
    result = op.execute_batch(table.to_pandas() if op.format == "pandas" else table)
    if hasattr(result, "to_pydict") and not isinstance(result, (pa.Table, pa.RecordBatch)):
        result = result.to_pydict()
    if not isinstance(result, (pa.Table, pa.RecordBatch, dict)):
        result = pa.Table.from_pandas(result, preserve_index=False)
    get = (lambda f: result[f]) if isinstance(result, dict) else result.column
    names = list(result.keys()) if isinstance(result, dict) else result.schema.names
    for f in outputs:
        if f not in names:
            raise TridentOperationError(f"{type(op).__name__}.execute_batch returned no column "
                                        f"{f!r} (needs {list(outputs)})", component=node.cid)
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
        n = table.num_rows
        first = get(outputs[0]) if outputs else None
        if first is not None and len(first) != n:
            raise TridentOperationError(
                f"{type(op).__name__}.execute_batch returned {len(first)} rows for {n} input "
                f"rows; add a {ROW!r} column naming each output row's input row",
                component=node.cid)
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


# ---- the runner ------------------------------------------------------------------------------

class TridentSparkRunner(Controls, Reporting):
    """Runs a Trident topology on Spark (see the module documentation)."""

    runner_name = "spark"

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | None = None, *,
                 master: str | None = None, checkpoint_location: str | None = None,
                 session: Any = None, capture: bool = False) -> None:
        self.topology = topology
        self.plan = trident_plan(topology)
        self.dir = prepare_location(checkpoint_location or
                                    tempfile.mkdtemp(prefix="squall-trident-"))
        check_fingerprint(self.dir, topology)
        self.user_conf = dict(conf or {})
        self.user_conf.setdefault(STORE, {"dir": os.path.join(self.dir, "trident")})
        self.conf = Config.effective_of(self.user_conf)
        for node in self.plan.nodes:  # user classes from scripts travel by value
            for value in node.args.values():
                ship_by_value(value)
            for part in node.args.get("parts", ()):
                ship_by_value(part[1])
        self.coordinator = BatchCoordinator(self.plan, self.user_conf, "spark")
        self.spark = session or get_session(master, self.user_conf)
        # Driver batches staged as files Spark reads (`_dataframe`), in local mode only.
        self._staging: str | None = os.path.join(self.dir, "trident", "staged") \
            if str(self.spark.sparkContext.master).startswith("local") else None
        self._staged: list[str] = []
        self._stage_seq = 0
        if self._staging is not None:  # a killed run's leftovers
            shutil.rmtree(self._staging, ignore_errors=True)
        self.partial = str(self.conf.get(PARTIAL, True)).lower() not in ("false", "0")
        self._jobs: dict[str, list[str]] | None = None
        self.in_executors = str(self.conf.get(IN_EXECUTORS, True)).lower() not in ("false", "0")
        # State queries read in the tasks first: a query sees its state before the batch's
        # updates (`squall.trident.plan`), and those run in later jobs.
        paths, self.inside = spark_segments(self.plan, self._query_in_tasks)
        self.paths = dict(sorted(paths.items(), key=lambda p: p[1][-1].kind != "state_query"))
        self.executor: BatchExecutor | None = None
        self.stats = TridentStats(self.plan)
        self._stats_lock = threading.Lock()
        self.errors: list[ErrorRecord] = []
        self.capture = capture
        self.outputs: dict[str, list[tuple[Any, ...]]] = {n.cid: [] for n in self.plan.nodes}
        self.committed: list[int] = []
        self.failed_attempts = 0
        self.batch_seconds: list[float] = []
        self._counts: list[Any] = []  # this transaction's accumulators, one per Spark path
        self.spark_sizes: dict[str, int] = {}
        # Where the transactions' time went on the driver (seconds, summed over batches): the
        # spouts' batches, the Spark jobs (input DataFrame included), the driver's share of
        # the plan (state updates included), the commit record.
        self.timing = dict.fromkeys(("emit", "spark", "driver", "commit"), 0.0)
        self.query: Any = None
        self.stopping = False
        self.failure: SquallError | None = None
        self.elapsed_ms = 0
        self.lifecycle = Lifecycle()  # stop requests; spouts cannot be deactivated
        self.exhausted = False

    # ---- one micro-batch = one transaction ------------------------------------------------------
    def _batch(self, df: Any, batch_id: int) -> None:
        if self.exhausted or self.stopping:
            return  # a tick after the bounded input ended, or during the stop: no transaction
        # The coordinator, not Spark's batch id, numbers the transactions: a batch Spark runs
        # again after a crash replays the transaction the coordinator has not committed, and a
        # tick that ran no transaction leaves no gap.
        txid = self.coordinator.next_txid
        started = time.perf_counter()
        max_attempts = self.conf.get(MAX_ATTEMPTS)
        attempt = 0
        while True:
            attempt += 1
            t_emit = time.perf_counter()
            batches = self.coordinator.emit(txid, lazy=True)
            self.timing["emit"] += time.perf_counter() - t_emit
            if attempt == 1:  # its files are read again on a retry: told once
                with self._stats_lock:
                    self.stats.malformed(self.coordinator.malformed(), self.errors)
            try:
                # The collector paused while the results are decoded into rows: building W2's
                # 1.26 M rows set off repeated full collections over the driver's heap (about
                # 40 % of the time); the rows hold no cycles, and it runs again right after.
                with gc_paused():
                    out = self._evaluate(txid, batches)
                break
            except Exception as exc:
                self.failed_attempts += 1
                component = getattr(exc, "component", None) or self.plan.nodes[-1].cid
                with self._stats_lock:
                    self.errors.append(ErrorRecord(component, 0, exc))
                    self.stats.error(component)
                    self.stats.add_batch({c: _size(b) for c, b in batches.items()}, False)
                log.error("squall: Trident batch %d attempt %d failed: %s", txid, attempt, exc)
                if (max_attempts is not None and attempt >= int(max_attempts)) or self.stopping:
                    self.failure = SquallError(
                        f"Trident transaction {txid} failed {attempt} attempts "
                        f"({MAX_ATTEMPTS}); last error: {getattr(exc, 'message', exc)}",
                        component=component, field=getattr(exc, "field", None))
                    raise self.failure from exc
                time.sleep(retry_pause_ms(attempt) / 1000)
        t_commit = time.perf_counter()
        self.coordinator.commit(txid)
        self.timing["commit"] += time.perf_counter() - t_commit
        self.committed.append(txid)
        sizes = {cid: sum(map(len, parts)) for cid, parts in out.items()}
        sizes.update(self.spark_sizes)
        with self._stats_lock:
            self.stats.add_batch(sizes, True, batch_id)
        if self.capture:
            for cid, parts in out.items():
                for p in parts:
                    self.outputs[cid].extend(p)
        self.batch_seconds.append(time.perf_counter() - started)
        self.exhausted = self.coordinator.exhausted()

    def _evaluate(self, txid: int, batches: Mapping[str, Any]) -> dict[str, Parts]:
        """The transaction's outputs; `batches` holds each spout's partitions of rows, or a
        file spout's `FileBatch`, read by Spark where the spout's operations run in Spark and
        here otherwise."""
        try:
            return self._evaluate_attempt(txid, batches)
        finally:
            self._unstage()

    def _evaluate_attempt(self, txid: int, batches: Mapping[str, Any]) -> dict[str, Parts]:
        assert self.executor is not None
        # Storm's State protocol opens the batch before any Spark job, since some write their
        # state in the job (an opaque state's rollback of an earlier attempt comes first).
        self.executor.begin(txid)
        given: dict[str, Parts] = {}
        partials: dict[str, dict[tuple[Any, ...], Any]] = {}
        windows: dict[str, Any] = {}
        applied: dict[str, int] = {}  # keys written in Spark, per persistent_aggregate
        for cid, path in self.paths.items():
            if cid in applied:  # applied in the job of an earlier one
                continue
            batch = batches[path[0].cid]
            t_spark = time.perf_counter()
            # An empty batch needs no Spark job (a global aggregate still gets its zero).
            empty = not batch.files if isinstance(batch, FileBatch) else not any(batch)
            if self._in_executors(path[-1]):
                job = self._state_jobs()[cid]
                done = {c: _Applied(0, []) for c in job} if empty else \
                    self._spark_path(txid, path, batch, [self.paths[c][-1] for c in job[1:]])
                self.timing["spark"] += time.perf_counter() - t_spark
                for c, result in done.items():
                    applied[c] = result.written
                    node = self.paths[c][-1]
                    given[c] = [[]] if result.rows is None else \
                        split_by_key(result.rows, node.parallelism, node)
                continue
            if path[-1].kind == "state_query":
                node = path[-1]
                rows = [] if empty else self._spark_path(txid, path, batch)
                self.timing["spark"] += time.perf_counter() - t_spark
                given[cid] = partition_rows(rows, node.parallelism,
                                            self.plan.node(node.parents[0]))
                continue
            if path[-1].kind == "window":
                windows[cid] = ({}, {}, None) if empty else self._spark_path(txid, path, batch)
                self.timing["spark"] += time.perf_counter() - t_spark
                continue
            groups = {} if empty else self._spark_path(txid, path, batch)
            self.timing["spark"] += time.perf_counter() - t_spark
            if path[-1].kind == "persistent_aggregate":
                partials[cid] = groups  # applied to the state in plan order
            else:
                given[cid] = self._result(path[-1], groups)
        # Tuples in and out of the operations that ran in Spark, from the workers. Two jobs
        # whose paths share an operation each ran it over the whole batch: counted once.
        self.spark_sizes = {}
        for acc in self._counts:
            for cid, (_, n_out) in acc.value.items():
                if cid in self.inside:  # an aggregation's output is counted on the driver
                    self.spark_sizes[cid] = max(self.spark_sizes.get(cid, 0), n_out)
        self._counts.clear()
        self.spark_sizes.update(applied)
        t_driver = time.perf_counter()
        rows = {cid: [b.rows()] if isinstance(b, FileBatch) else b
                for cid, b in batches.items() if cid not in self.inside}
        # The transaction's processing time: the driver's clock when its micro-batch first ran.
        now = self.coordinator.batch_time(txid, int(time.time() * 1000))
        out = self.executor.run(txid, rows, given=given, partials=partials, windows=windows,
                                skip=self.inside, final=self.coordinator.exhausted_after(txid),
                                time_ms=now, begun=True)
        self.timing["driver"] += time.perf_counter() - t_driver
        for cid, batch in batches.items():
            if cid not in out:  # a spout read in Spark: its size, for the counters
                # (a file spout read by Spark: only its size is known here; not captured)
                out[cid] = [[()] * batch.count()] if isinstance(batch, FileBatch) else batch
        return out

    def _spark_path(self, txid: int, path: list[PlanNode], batch: Any,
                    together: Sequence[PlanNode] = ()) -> Any:
        """The per-key aggregates of the aggregation ending `path` for this batch, computed
        in Spark; for a `persistent_aggregate` applied in the executors, what it and the
        terminals `together` (the same path before them) wrote."""
        assert self.executor is not None
        spout, terminal = path[0], path[-1]
        keys, inputs = terminal.args.get("keys", ()), terminal.args["input"]
        fields = spout.fields
        df, types = self._input(batch, fields)
        counts = self.spark.sparkContext.accumulator({}, _CountsParam())
        self._counts.append(counts)
        chain: list[PlanNode] = []

        def make_chain(needed: tuple[str, ...], partial: PlanNode | None = None,
                       cells: bool = False, tagged: Sequence[str] = ()) -> _Chain:
            out_types = {f: k for f, k in types.items() if f in needed}
            out_types.update({f: cols.TAGGED for f in tagged if f not in out_types})
            return _Chain(chain, fields, needed, self.user_conf, txid, partial=partial,
                          counts=counts, types=out_types, cells=cells)

        def chain_df(df: Any, needed: tuple[str, ...], partial: PlanNode | None = None,
                     tagged: Sequence[str] = ()) -> Any:
            c = make_chain(needed, partial, tagged=tagged)
            return df.mapInArrow(c, c.output_schema())

        def partials_here(df: Any, needed: tuple[str, ...]) -> pa.Table:
            """The terminal's partials of every partition, on the driver as they are."""
            c = make_chain(needed, terminal, cells=True)
            return cols.from_cells(df.mapInArrow(c, c.output_schema()).toArrow(),
                                   c.partial_schema())

        for node in path[1:-1]:  # the row operations and repartitions before the aggregation
            if node.kind in ROW_OPS:
                chain.append(node)
                types = _types_after(node, types)
                continue
            needed = _needed(path, node)
            if chain:
                df = chain_df(df, needed)
                fields, chain = needed, []
                types = {f: k for f, k in types.items() if f in needed}
            if node.kind in REPARTITIONS:
                df = _repartition(df, node)
        if terminal.kind == "state_query":  # the query's rows are whole rows of its input
            parent = path[-2].fields
            if chain or fields != parent:
                df = chain_df(df, parent)
            return self._query_in_tasks_rows(terminal, parent, df)
        needed = tuple(dict.fromkeys(_partial_reads(terminal)))
        if terminal.kind == "window":  # partials per (window, key) in the workers, then here
            return tw.finish(partials_here(df, needed), terminal)
        if self._in_executors(terminal):
            terminals = [terminal, *together]
            state = StateChainArgs(chain, fields, types, counts)
            # CSV and JSON lines Spark drops as malformed depend on the columns a query reads
            # (Spark prunes the others): the JVM path, reading the keys and values only, would
            # count lines the driver's read of the same files leaves out.
            pruned_ok = not isinstance(batch, FileBatch) or batch.spout.format == "parquet"
            return self._apply_in_executors(txid, terminals, state, df, pruned_ok)
        if self.partial:
            op = terminal.args["op"]
            if isinstance(op, BuiltinCombiner) and _partial_kind(terminal, types) is not None \
                    and df.rdd.getNumPartitions() <= DRIVER_COMBINE:
                # A few partitions' typed partials: combined here by Arrow, no Spark shuffle.
                return _combine_here(partials_here(df, needed), keys, op.sql)
            df = chain_df(df, needed, terminal)
            value_fields = ("$partial",)
        else:
            if chain or fields != needed:
                # Keys of unknown type as one tagged column each: the JVM groups by one
                # column instead of four.
                tagged = keys if isinstance(terminal.args["op"], BuiltinCombiner) else ()
                df = chain_df(df, needed, tagged=tagged)
            value_fields = inputs[:1]
        return self._finish(terminal, df, keys, value_fields)

    def _in_executors(self, node: PlanNode) -> bool:
        """Whether `node` is a `persistent_aggregate` whose partials Spark applies to its
        state's partitions in the tasks (`trident.state`): a keyed combiner's, into a
        partitioned state no other operation of the plan writes, and which every query of it
        reads before the update (in the tasks, in an earlier job) or after it (reading the
        update's own stream, on the driver)."""
        if node.kind != "persistent_aggregate" or not self.partial or not self.in_executors \
                or not node.args["keys"]:
            return False
        name = node.args["state"]
        state = self.executor.states.get(name) if self.executor is not None else None
        others = [n for n in self.plan.nodes if n.args.get("state") == name and n is not node]

        def read_in_turn(query: PlanNode) -> bool:
            if query.kind != "state_query":
                return False
            return query.cid in self.paths or self.plan.descends(query.cid, node.cid)

        return isinstance(state, PartitionedMap) \
            and hasattr(node.args["factory"], "make_partition") \
            and all(map(read_in_turn, others))

    def _query_in_tasks(self, node: PlanNode) -> bool:
        """Whether the `state_query` `node` reads its state in the Spark tasks
        (`trident.state_query`): a state partitioned by a factory whose partitions a task opens."""
        return self.in_executors and hasattr(node.args["factory"], "make_partition") \
            and hasattr(node.args["factory"], "make_partitioned")

    def _query_in_tasks_rows(self, node: PlanNode, fields: tuple[str, ...], df: Any
                             ) -> list[tuple[Any, ...]]:
        """The output rows of the `state_query` `node` over `df` (rows of `fields`), read in
        the tasks holding the state partitions of their keys."""
        assert self.executor is not None
        n = self.executor.states[node.args["state"]].partitions
        ddl = ", ".join([*(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema),
                         f"`{tq.PARTITION}` int"])
        keyed = df.mapInArrow(tq.KeyPartitions(node.args["input"], n), ddl)
        query = tq.QueryPartitions(node, fields, self.dir, self.user_conf, n)
        return tq.output_rows(keyed.repartition(n, tq.PARTITION).mapInArrow(
            query, tq.OUTPUT_SCHEMA).toArrow())

    def _state_jobs(self) -> dict[str, list[str]]:
        """For each `persistent_aggregate` applied in the executors, the ones applied in the
        same Spark job, itself first: those of the same path before them, the same keys and
        states of as many partitions (one read of the input, one pass of its operations)."""
        if self._jobs is None:
            assert self.executor is not None
            states = self.executor.states

            def shape(cid: str) -> tuple[Any, ...]:
                path = self.paths[cid]
                node = path[-1]
                return (tuple(n.cid for n in path[:-1]), tuple(node.args["keys"]),
                        states[node.args["state"]].partitions)

            mine = [c for c, p in self.paths.items() if self._in_executors(p[-1])]
            self._jobs = {c: [c, *(o for o in mine if o != c and shape(o) == shape(c))]
                          for c in mine}
        return self._jobs

    def _apply_in_executors(self, txid: int, terminals: Sequence[PlanNode],
                            args: StateChainArgs, df: Any, jvm: bool = True
                            ) -> dict[str, _Applied]:
        """The batch's partials of `terminals` applied to their states' partitions in Spark's
        tasks, in one job; what each wrote. `jvm`: built-ins may be aggregated by Spark's JVM
        (`_jvm_builtins`) when `df` reads its columns alike whichever the query needs."""
        assert self.executor is not None
        n = self.executor.states[terminals[0].args["state"]].partitions
        chain = _StateChain(args.chain, args.fields, self.user_conf, txid, terminals, n,
                            args.counts, args.types)
        collect = [self.capture or bool(self.plan.children(t.cid)) for t in terminals]
        keys = tuple(terminals[0].args["keys"])
        if jvm and not args.chain and _jvm_builtins(terminals, args.types):
            # Built-ins over typed columns: partitioned, grouped and aggregated by Spark's JVM,
            # then applied by the tasks holding the partitions; no Python pass over the input.
            # `repartition` by the key columns is by Spark's hash of them, the state's own
            # partitioning: task i holds the keys of partition i, and the aggregation needs no
            # second shuffle.
            key_columns = [f"{k}#{args.types[k]}" for k in keys]
            grouped = df.repartition(n, *(F.col(f"`{c}`") for c in key_columns)) \
                .groupBy(*key_columns).agg(*_jvm_aggregates(terminals, args.types)) \
                .withColumn(ts.PARTITION, F.expr(ts.partition_sql(key_columns, n)))
            columns = ts.ApplyColumns(terminals, key_columns, self.dir, txid, collect, n)
            result = grouped.mapInArrow(columns, ts.OUTPUT_SCHEMA).toArrow()
            return {t.cid: _Applied(written, rows) for t, (written, rows) in zip(
                terminals, ts.applied_rows(result, len(terminals)), strict=True)}
        apply = ts.ApplyState(terminals, chain.kinds, self.dir, txid, collect)
        partials = df.mapInArrow(chain, chain.output_schema())
        result = partials.repartition(n, ts.PARTITION).mapInArrow(
            apply, ts.OUTPUT_SCHEMA).toArrow()
        return {t.cid: _Applied(written, rows) for t, (written, rows) in zip(
            terminals, ts.applied_rows(result, len(terminals)), strict=True)}

    def _input(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[str, str]]:
        """The spout's batch as a DataFrame of encoded fields and its typed fields: files read
        by Spark (the columns Spark reads as string, long or double), anything else from the
        driver (a field whose values share one type travels as that one column)."""
        if isinstance(batch, FileBatch):
            read = _read_files(self.spark, batch, fields)
            if read is not None:
                return read
            batch = [batch.rows()]
        rows = [r for p in batch for r in p]
        columns = [[r[i] for r in rows] for i in range(len(fields))]
        types = {f: k for f, c in zip(fields, columns, strict=True)
                 if (k := cols.infer(c)) is not None}
        table = pa.Table.from_pydict(cols.encode_columns(fields, columns, types),
                                     schema=cols.schema(fields, types))
        return self._dataframe(table, cols.spark_schema(fields, types)), types

    def _dataframe(self, table: pa.Table, ddl: str) -> Any:
        """A batch built on the driver as a DataFrame. In local mode it is staged as a parquet
        file Spark reads: `createDataFrame` of the same Arrow table and a job over it took
        twice as long here (W1's 200,000 sentences: 1.0-1.25 s against 0.5-0.6 s, Kafka
        W1 through Trident; docs/design/trident.md). A cluster's executors cannot read the
        driver's files: there, `createDataFrame`."""
        if self._staging is None:
            return self.spark.createDataFrame(table)
        os.makedirs(self._staging, exist_ok=True)
        # A name never used before in this run: Spark must not take a file it listed for an
        # earlier batch for this one.
        self._stage_seq += 1
        path = os.path.join(self._staging, f"batch-{self._stage_seq}.parquet")
        # Row groups small enough for Spark to split the file over its cores.
        per_group = max(1, -(-table.num_rows // (2 * self.spark.sparkContext.defaultParallelism)))
        pq.write_table(table, path, row_group_size=per_group, compression="none")
        self._staged.append(path)
        return self.spark.read.schema(ddl).parquet(path)

    def _unstage(self) -> None:
        """The staged files of a transaction's attempt, once its Spark jobs ran."""
        for path in self._staged:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self._staged.clear()

    def _finish(self, terminal: PlanNode, df: Any, keys: tuple[str, ...],
                value_fields: tuple[str, ...]) -> dict[tuple[Any, ...], Any]:
        op = terminal.args["op"]
        if isinstance(op, BuiltinCombiner):
            result = self._aggregate(terminal, df, keys, value_fields)
            sql = "sum" if value_fields == ("$partial",) and op.sql == "count" else op.sql
            return _builtin_groups(result, keys, op, sql, terminal)
        result = df.toArrow()
        groups: dict[tuple[Any, ...], Any] = {}
        combine = op.combine
        kvals = [cols.decode(result, k) for k in keys]
        for j, blob in enumerate(result.column("$partial").to_pylist()):
            k = tuple(c[j] for c in kvals)
            v = cloudpickle.loads(blob)
            groups[k] = v if k not in groups else combine(groups[k], v)
        return groups

    @staticmethod
    def _aggregate(terminal: PlanNode, df: Any, keys: tuple[str, ...],
                   value_fields: tuple[str, ...], extra: Sequence[Any] = (),
                   order: bool = False) -> pa.Table:
        """A built-in combiner as a Spark SQL aggregation by `keys` (encoded fields), one
        column per value type (`$v#s`, `$v#i`, `$v#d`, and `$v#xn` counting other values: no
        field can be named so), plus
        `extra` aggregate columns; the result as Arrow on the driver."""
        op = terminal.args["op"]
        sql = op.sql
        if value_fields == ("$partial",):
            sql = "sum" if sql == "count" else sql  # partial counts add up
        aggs = list(extra)
        if sql == "count":
            aggs.append(F.count(F.lit(1)).alias("$v#i"))
        else:
            v = value_fields[0]
            fn = {"sum": F.sum, "min": F.min, "max": F.max}[sql]
            names = df.columns
            for variant in ("s", "i", "d"):
                if sql == "sum" and variant == "s":
                    aggs.append(F.count(_col(names, f"{v}#s")).alias("$v#s"))
                    continue
                aggs.append(fn(_col(names, f"{v}#{variant}")).alias(f"$v#{variant}"))
            aggs.append(F.count(_col(names, f"{v}#x")).alias("$v#xn"))
        grouped = [c for k in keys for c in _present(df.columns, k)]
        result = df.groupBy(*grouped).agg(*aggs) if keys else df.agg(*aggs)
        if order:  # by the first key (a window's start), sorted in the JVM
            result = result.orderBy(*_present(df.columns, keys[0]))
        return result.toArrow()

    @staticmethod
    def _result(terminal: PlanNode, groups: dict[tuple[Any, ...], Any]) -> Parts:
        """An aggregation's output rows from its per-key aggregates."""
        if not terminal.args["keys"] and not groups:
            groups[()] = terminal.args["op"].zero()
        return [[(*k, v) for k, v in groups.items()]]

    # ---- running --------------------------------------------------------------------------------
    supports_deactivate = False  # its reader plans transactions, not spout pulls

    def apply_activation(self, active: bool) -> None:
        """Only a stop deactivates this runner, and the stop itself ends the query."""

    def drained(self) -> bool:
        """Transactions commit inside their batch: a stop between two loses nothing."""
        return True

    def run(self, *, duration_ms: int | None = None, until_complete: bool = True,
            on_progress: Progress | None = None, progress_every_ms: int = 1000,
            max_wait_ms: int | None = None) -> RunResult:
        started = time.monotonic()
        self._began, self._ended_ms = started, None
        self.coordinator.open()
        self.executor = BatchExecutor(self.plan, self.user_conf, location=self.dir)
        self.exhausted = self.coordinator.exhausted()
        try:
            if not (until_complete and self.exhausted):
                drive_query(self, TICKS[0], self._batch, options=TICKS[1], query_dir="ticks",
                            done=lambda: until_complete and self.exhausted, started=started,
                            duration_ms=duration_ms, max_wait_ms=max_wait_ms,
                            on_progress=on_progress, progress_every_ms=progress_every_ms,
                            finish_last_trigger=lambda: max(self.stats.batch_input, default=0))
        finally:
            self.executor.close()
            self.coordinator.close()
            self.elapsed_ms = int((time.monotonic() - started) * 1000)
            self._began = None  # elapsed_now_ms: the run's duration from now on
        self.mark_run_ended()
        if on_progress is not None:
            on_progress(self.metrics())
        return self.result()

    def _uncollected(self) -> set[str]:
        """Operations whose rows stay in Spark: those inside the Spark paths, spouts included
        when Spark reads their files (other spouts' batches come from the driver)."""
        return {cid for cid in self.inside
                if self.plan.node(cid).kind != "spout"
                or isinstance(self.plan.node(cid).args["op"], FileBatchSpout)}

    def batch_metrics(self) -> list[BatchMetrics]:
        """Spark's reports of the batches that ran a transaction (not the ticks after the
        input ended), each with the tuples its spouts emitted as its input rows."""
        rows = self.stats.batch_input  # per Spark batch id that committed a transaction
        return [dataclasses.replace(b, input_rows=rows[b.batch_id])
                for b in batch_metrics(self.query) if b.batch_id in rows]

    def batch_executed(self) -> dict[int, int]:
        return self.stats.batch_executed

    def component_stats(self) -> dict[str, ComponentStats]:
        with self._stats_lock:
            return self.stats.component_stats()

    def result(self) -> RunResult:
        extra: dict[str, Any] = {"batches": len(self.committed),
                                 "committed": list(self.committed),
                                 "failed_attempts": self.failed_attempts,
                                 "batch_seconds": list(self.batch_seconds),
                                 "timing": dict(self.timing),
                                 "spark_operations": sorted(self.inside | set(self.paths)),
                                 "uncollected": sorted(self._uncollected())}
        if self.executor is not None and self.executor.late:
            extra["late"] = dict(self.executor.late)
        if self.capture:
            extra["outputs"] = {c: list(rows) for c, rows in self.outputs.items()}
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms, extra)


_SPARK_VARIANT = {"string": "s", "bigint": "i", "int": "i", "smallint": "i", "tinyint": "i",
                  "double": "d", "float": "d"}


# Parquet's (Arrow's) types of the columns Spark reads into a typed field.
_PARQUET_SQL = {pa.string(): "string", pa.large_string(): "string", pa.int64(): "bigint",
                pa.int32(): "int", pa.int16(): "smallint", pa.int8(): "tinyint",
                pa.float64(): "double", pa.float32(): "float"}


class StateChainArgs(NamedTuple):
    """What a `_StateChain` continues from: the row operations not run yet, their input fields
    and typed fields, and the counts' accumulator."""

    chain: list[PlanNode]
    fields: tuple[str, ...]
    types: dict[str, str]
    counts: Any


class _Applied:
    """A `persistent_aggregate` applied in Spark: the keys written, and their new rows when
    they were collected."""

    def __init__(self, written: int, rows: list[tuple[Any, ...]] | None) -> None:
        self.written, self.rows = written, rows


def _parquet_types(path: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """The Spark types of `fields` from a parquet file's footer when the driver can read it
    and every field has a typed column's type; else None (Spark infers them).

    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "a.parquet")
    >>> pq.write_table(pa.table({"s": ["x"], "n": pa.array([1], pa.int32()), "b": [b"z"]}), f)
    >>> _parquet_types(f, ("n", "s")), _parquet_types(f, ("s", "b")), _parquet_types(f, ("t",))
    ({'n': 'int', 's': 'string'}, None, None)
    """
    if "://" in path and not path.startswith("file:"):
        return None  # a cluster's store: Spark reads it
    try:
        schema = pq.read_schema(path.removeprefix("file:"))
    except (OSError, pa.ArrowException):
        return None
    types = {}
    for f in fields:
        i = schema.get_field_index(f)
        sql = _PARQUET_SQL.get(schema.field(i).type) if i >= 0 else None
        if sql is None:
            return None
        types[f] = sql
    return types


def _jvm_builtins(terminals: Sequence[PlanNode], types: cols.Types) -> bool:
    """Whether Spark's JVM computes the aggregates of `terminals` exactly as the combiners
    would: `Count`s and `Sum`s of an integer field (a float sum's rounding depends on the
    order), keyed by string or integer fields."""
    keys = terminals[0].args["keys"]
    if any(types.get(k) not in ("s", "i") for k in keys):
        return False
    for t in terminals:
        op = type(t.args["op"])
        if not (op is Count or (op is Sum and types.get(t.args["input"][0]) == "i")):
            return False
    return True


def _jvm_aggregates(terminals: Sequence[PlanNode], types: cols.Types) -> list[Any]:
    """The Spark aggregations `ApplyColumns` reads: `$p<i>` per terminal, and for a `Sum` how
    many of its values were not None (`$c<i>`) against the key's tuples (`$rows`)."""
    out, sums = [], False
    for i, t in enumerate(terminals):
        if type(t.args["op"]) is Count:
            out.append(F.count(F.lit(1)).alias(f"$p{i}"))
            continue
        value = F.col(f"`{t.args['input'][0]}#{types[t.args['input'][0]]}`")
        out += [F.sum(value).alias(f"$p{i}"), F.count(value).alias(f"$c{i}")]
        sums = True
    if sums:
        out.append(F.count(F.lit(1)).alias("$rows"))
    return out


def _read_files(spark: Any, batch: FileBatch, fields: tuple[str, ...]
                ) -> tuple[Any, dict[str, str]] | None:
    """The files as a DataFrame of typed fields (each field the one column of its type), or
    None when a field's type has no typed column here (the driver then reads them, with the
    same values as the local runner)."""
    spout = batch.spout
    dtypes: dict[str, str] | None = None
    if spout.format == "parquet":
        dtypes = _parquet_types(batch.files[0], fields)
        # Given the schema, Spark does not list and read the files' footers first (0.15-0.2 s
        # of each W1 transaction here).
        ddl = ", ".join(f"`{f}` {t}" for f, t in (dtypes or {}).items())
        df = (spark.read.schema(ddl) if ddl else spark.read).parquet(*batch.files)
    # Lines that are not records are left out, as the driver's read of the same files does
    # (it reports them: FileBatch.malformed).
    elif spout.format == "csv":
        df = (spark.read.option("header", True).option("mode", "DROPMALFORMED")
              .csv(list(batch.files)))
    else:
        df = spark.read.option("mode", "DROPMALFORMED").json(list(batch.files))
    if dtypes is None:
        dtypes = dict(df.dtypes)
    selected, types = [], {}
    for f in fields:
        variant = _SPARK_VARIANT.get(dtypes.get(f, ""))
        if variant is None:
            return None
        col = F.col(f"`{f}`")
        if dtypes[f] != cols.SQL[variant]:  # an int or float column of fewer bits
            col = col.cast(cols.SQL[variant])
        selected.append(col.alias(f"{f}#{variant}"))
        types[f] = variant
    return df.select(*selected), types


def _size(batch: Any) -> int:
    if isinstance(batch, FileBatch):
        return batch.count()
    return sum(map(len, batch))


def _needed(path: list[PlanNode], at: PlanNode) -> tuple[str, ...]:
    """The fields the operations from `at` on read (the rest need not leave the worker)."""
    i = path.index(at)
    need: list[str] = []
    for node in path[i:]:
        for key in ("input", "keys"):
            for f in node.args.get(key, ()):
                if f not in need:
                    need.append(f)
    parent_fields = path[i - 1].fields if at.kind not in ROW_OPS else at.fields
    # Row operations after this one, and a state query (its rows are whole rows), may read
    # any field.
    later_rows = any(n.kind in ROW_OPS or n.kind == "state_query" for n in path[i:])
    if later_rows:
        return parent_fields  # row operations after this one may read any field
    return tuple(f for f in parent_fields if f in need)


def _repartition(df: Any, node: PlanNode) -> Any:
    n = node.parallelism
    if node.kind == "partition_by":
        return df.repartition(n, *[c for k in node.args["keys"] for c in _present(df.columns, k)])
    if node.kind in ("global", "batch_global"):
        return df.repartition(1)
    return df.repartition(n)


def _combine_here(result: pa.Table, keys: tuple[str, ...], sql: str
                  ) -> dict[tuple[Any, ...], Any]:
    """A built-in combiner's typed partials from every partition, combined by Arrow: the
    per-key aggregates."""
    final = tw.FINAL[sql]
    value = next(n for n in cols.names("$partial") if n in result.column_names)
    by = [n for k in keys for n in cols.names(k) if n in result.column_names]
    if not by:
        if result.num_rows == 0:
            return {}
        return {(): pc.call_function(final, [result.column(value)]).as_py()}
    t = result.group_by(by).aggregate([(value, final)])
    values = t.column(f"{value}_{final}").to_pylist()
    kvals = [cols.decode(t, k) for k in keys]
    return dict(zip(zip(*kvals, strict=True), values, strict=True))


def _builtin_groups(result: pa.Table, keys: tuple[str, ...], op: Any, sql: str,
                    node: PlanNode) -> dict[tuple[Any, ...], Any]:
    kvals = [cols.decode(result, k) for k in keys]
    values = _builtin_values(result, op, sql, node)
    # zip builds the key tuples in C (a generator per row took 6-8 ms of W1's 10,000 keys)
    return dict(zip(zip(*kvals, strict=True), values, strict=True)) if keys else \
        ({(): values[0]} if values else {})


def _builtin_values(result: pa.Table, op: Any, sql: str, node: PlanNode) -> list[Any]:
    """A built-in combiner's value per result row, from its per-type columns."""
    if sql == "count":
        return list(result.column("$v#i").to_pylist())
    bad = result.column("$v#xn").to_pylist()
    if sql == "sum":
        strings = result.column("$v#s").to_pylist()
        bad = [(b or 0) + (s or 0) for b, s in zip(bad, strings, strict=True)]
    if any(bad):
        raise TridentOperationError(
            f"{type(op).__name__} over field {node.args['input'][0]!r}: the Spark runner "
            f"aggregates int, float{'' if sql == 'sum' else ' and str'} values in Spark; "
            "this batch has others (use a CombinerAggregator of your own for them)",
            component=node.cid)
    parts = [result.column(f"$v#{v}").to_pylist() for v in (("i", "d") if sql == "sum"
                                                             else ("s", "i", "d"))]
    values = []
    for j in range(result.num_rows):
        present = [p[j] for p in parts if p[j] is not None]
        if not present:
            values.append(op.zero())
        elif sql == "sum":
            values.append(present[0] if len(present) == 1 else present[0] + present[1])
        else:
            values.append(min(present) if sql == "min" else max(present))
    return values
