"""A combiner's aggregation on Spark: partials in the worker, combined into per-key aggregates.

`_Partials` aggregates one partition in the worker (Storm's partial aggregation before the
transfer). The driver combines what comes back: a built-in combiner's typed partials by Arrow
(`_combine_here`) or by a Spark SQL aggregation (`_aggregate`, read back by `_builtin_groups`),
a user's combiner's pickled partials in Python (`_finish`). `jvm_aggregates` are the Spark
aggregations of built-ins applied in the tasks holding their states
(`trident.state.ApplyColumns`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.runtime.spark.trident import windows as tw
from squall.runtime.spark.trident.planner import Terminal, terminal_input, terminal_op
from squall.trident.execution import Parts, TridentOperationError
from squall.trident.operations import BuiltinCombiner, Count
from squall.trident.plan import PersistNode
from squall.trident.tuple import tuple_type

_MISSING = object()


class _Partials:
    """A combiner's partial aggregation over one partition, in the worker (Storm's partial
    aggregation before the transfer). Arrow columns of native types are grouped by Arrow
    (no Python loop) for the built-ins; anything else by a dict in Python."""

    def __init__(self, node: Terminal, ops: dict[str, Any], types: cols.Types) -> None:
        self.node, self.op, self.types = node, ops[node.cid], types
        self.keys, self.inputs = node.keys, terminal_input(node)
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
            lists = [cols.pylist(columns[f]) for f in fields]
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
                value = pa.array([cols.num_rows(columns)], pa.int64())
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
                out = (*keys, sc.PARTIAL)
                return pa.RecordBatch.from_pydict(
                    cols.encode_columns(out, [*kcols, values], self.types),
                    schema=cols.schema(out, self.types))
        combined = self.combined
        klists = [[k[i] for k in combined] for i in range(len(keys))]
        if self.builtin:
            out = (*keys, sc.PARTIAL)
            return pa.RecordBatch.from_pydict(
                cols.encode_columns(out, [*klists, list(combined.values())], self.types),
                schema=cols.schema(out, self.types))
        data = cols.encode_columns(keys, klists, self.types)
        data[sc.PARTIAL] = pa.array([cloudpickle.dumps(v) for v in combined.values()],
                                    type=pa.binary())
        schema = pa.schema([*cols.schema(keys, self.types), (sc.PARTIAL, pa.binary())])
        return pa.RecordBatch.from_pydict(data, schema=schema)


def _finish(terminal: Terminal, df: DataFrame, keys: tuple[str, ...],
            value_fields: tuple[str, ...]) -> dict[tuple[Any, ...], Any]:
    """The per-key aggregates of `terminal` over `df`: a built-in combiner's by a Spark SQL
    aggregation (`_aggregate`), a user's combiner's pickled partials combined here."""
    op = terminal_op(terminal)
    if isinstance(op, BuiltinCombiner):
        result = _aggregate(terminal, df, keys, value_fields)
        sql = "sum" if value_fields == (sc.PARTIAL,) and op.sql == "count" else op.sql
        return _builtin_groups(result, keys, op, sql, terminal)
    result = df.toArrow()
    groups: dict[tuple[Any, ...], Any] = {}
    combine = op.combine
    kvals = [cols.decode(result, k) for k in keys]
    for j, blob in enumerate(result.column(sc.PARTIAL).to_pylist()):
        k = tuple(c[j] for c in kvals)
        v = cloudpickle.loads(blob)
        groups[k] = v if k not in groups else combine(groups[k], v)
    return groups


def _aggregate(terminal: Terminal, df: DataFrame, keys: tuple[str, ...],
               value_fields: tuple[str, ...]) -> pa.Table:
    """A built-in combiner as a Spark SQL aggregation by `keys` (encoded fields), one
    column per value type (`$v#s`, `$v#i`, `$v#d`, and `$v#xn` counting other values: no
    field can be named so); the result as Arrow on the driver."""
    op = terminal_op(terminal)
    sql = op.sql
    if value_fields == (sc.PARTIAL,):
        sql = "sum" if sql == "count" else sql  # partial counts add up
    aggs: list[Column] = []
    if sql == "count":
        aggs.append(F.count(F.lit(1)).alias(sc.value("i")))
    else:
        v = value_fields[0]
        fn = {"sum": F.sum, "min": F.min, "max": F.max}[sql]
        names = df.columns
        for variant in ("s", "i", "d"):
            if sql == "sum" and variant == "s":
                aggs.append(F.count(_col(names, f"{v}#s")).alias(sc.value("s")))
                continue
            aggs.append(fn(_col(names, f"{v}#{variant}")).alias(sc.value(variant)))
        aggs.append(F.count(_col(names, f"{v}#x")).alias(sc.VALUE_OTHERS))
    grouped = [c for k in keys for c in _present(df.columns, k)]
    result = df.groupBy(*grouped).agg(*aggs) if keys else df.agg(*aggs)
    return result.toArrow()


def _output_rows(terminal: Terminal, groups: dict[tuple[Any, ...], Any]) -> Parts:
    """An aggregation's output rows from its per-key aggregates."""
    if not terminal.keys and not groups:
        groups[()] = terminal_op(terminal).zero()
    return [[(*k, v) for k, v in groups.items()]]


def _combine_here(result: pa.Table, keys: tuple[str, ...], sql: str
                  ) -> dict[tuple[Any, ...], Any]:
    """A built-in combiner's typed partials from every partition, combined by Arrow: the
    per-key aggregates."""
    final = tw.FINAL[sql]
    value = next(n for n in cols.names(sc.PARTIAL) if n in result.column_names)
    by = [n for k in keys for n in cols.names(k) if n in result.column_names]
    if not by:
        if result.num_rows == 0:
            return {}
        return {(): pc.call_function(final, [result.column(value)]).as_py()}
    t = result.group_by(by).aggregate([(value, final)])
    values = t.column(f"{value}_{final}").to_pylist()
    kvals = [cols.decode(t, k) for k in keys]
    return dict(zip(zip(*kvals, strict=True), values, strict=True))


def _builtin_groups(result: pa.Table, keys: tuple[str, ...], op: BuiltinCombiner, sql: str,
                    node: Terminal) -> dict[tuple[Any, ...], Any]:
    kvals = [cols.decode(result, k) for k in keys]
    values = _builtin_values(result, op, sql, node)
    # zip builds the key tuples in C (a generator per row took 6-8 ms of W1's 10,000 keys)
    return dict(zip(zip(*kvals, strict=True), values, strict=True)) if keys else \
        ({(): values[0]} if values else {})


def _builtin_values(result: pa.Table, op: BuiltinCombiner, sql: str, node: Terminal
                    ) -> list[Any]:
    """A built-in combiner's value per result row, from its per-type columns."""
    if sql == "count":
        return list(result.column(sc.value("i")).to_pylist())
    bad = result.column(sc.VALUE_OTHERS).to_pylist()
    if sql == "sum":
        strings = result.column(sc.value("s")).to_pylist()
        bad = [(b or 0) + (s or 0) for b, s in zip(bad, strings, strict=True)]
    if any(bad):
        raise TridentOperationError(
            f"{type(op).__name__} over field {terminal_input(node)[0]!r}: the Spark runner "
            f"aggregates int, float{'' if sql == 'sum' else ' and str'} values in Spark; "
            "this batch has others (use a CombinerAggregator of your own for them)",
            component=node.cid)
    parts = [result.column(sc.value(v)).to_pylist() for v in (("i", "d") if sql == "sum"
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


def jvm_aggregates(terminals: Sequence[PersistNode], types: cols.Types) -> list[Column]:
    """The Spark aggregations `ApplyColumns` reads: `$p<i>` per terminal, and for a `Sum` how
    many of its values were not None (`$c<i>`) against the key's tuples (`$tuples`)."""
    out, sums = [], False
    for i, t in enumerate(terminals):
        if type(t.op) is Count:
            out.append(F.count(F.lit(1)).alias(sc.stacked(i)))
            continue
        value = F.col(f"`{t.input[0]}#{types[t.input[0]]}`")
        out += [F.sum(value).alias(sc.stacked(i)), F.count(value).alias(sc.valued(i))]
        sums = True
    if sums:
        out.append(F.count(F.lit(1)).alias(sc.KEY_TUPLES))
    return out


def _col(df_columns: Sequence[str], name: str) -> Column:
    """A column of the DataFrame, or a typed null when the field's layout lacks it (a typed
    field has one of its four columns)."""
    if name in df_columns:
        return F.col(f"`{name}`")
    return F.lit(None).cast(cols.SQL[name[-1]])


def _present(df_columns: Sequence[str], field: str) -> list[Column]:
    """The columns a field has in the DataFrame (one when typed or tagged, else four)."""
    return [F.col(f"`{n}`") for n in cols.stored(field) if n in df_columns]
