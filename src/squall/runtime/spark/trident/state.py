"""A `persistent_aggregate` applied where its keys live: in the Spark tasks, per state partition.

The combiner's partials leave the fused worker chain with `$sp`, the state partition of their key
(`squall.trident.state.partitioned.partition_indexes`), Spark shuffles them by `$sp`
(`repartition(n, "$sp")`: every partial of a state partition meets in one task), and `ApplyState`
combines each key's partials and applies them to that partition's store with Storm's rule for the
state's type, in the task, on an executor. The driver sees one small row per state partition (how
many keys it wrote; the new values too when a later operation or the caller reads them), and
commits the transaction once the job has ended, so once every partition's write is durable.

A task that dies is run again by Spark, and a batch whose job failed is run again by the driver
as a new attempt of the same txid; both apply nothing twice to a transactional or opaque state,
whose entries carry the txid that wrote them. An opaque state's rollback of what an earlier
attempt of the txid wrote (`OpaqueMap.begin_commit`) is done by the driver for every partition
before the job starts, since a replay may put no key in a partition the first attempt wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc

from squall.errors import SquallError
from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.runtime.spark.trident.per_job import job_ids
from squall.trident.operations import Count, Sum
from squall.trident.plan import PersistNode
from squall.trident.state.partitioned import partition_indexes

# What a task of a state job returns: per terminal and state partition, the keys written and
# the new rows when collected.
OUTPUT_SCHEMA = ", ".join([sc.ddl(sc.TERMINAL, "int"), sc.ddl(sc.STATE_PARTITION, "int"),
                           sc.ddl(sc.WRITTEN, "long"), sc.ddl(sc.ROWS, "binary")])
PICKLED = "b"  # a user's combiner's partials: pickled, one binary column
ANY = "*"  # a built-in's partials of no one type: the four variant columns


def stacked_schema(keys_ddl: str, kinds: Sequence[str]) -> str:
    """The Spark DDL of `stacked`'s output: the keys (`keys_ddl`), `$t`, each terminal's
    partial column(s) `$p<i>`, `$sp`."""
    parts = [keys_ddl, sc.ddl(sc.TERMINAL, "int")]
    for i, kind in enumerate(kinds):
        name = sc.stacked(i)
        parts.append(sc.ddl(name, "binary") if kind == PICKLED else
                     cols.spark_schema((name,), {} if kind == ANY else {name: kind}))
    parts.append(sc.ddl(sc.STATE_PARTITION, "int"))
    return ", ".join(p for p in parts if p)


def _partial_fields(i: int, kind: str) -> list[pa.Field]:
    name = sc.stacked(i)
    if kind == PICKLED:
        return [pa.field(name, pa.binary())]
    return list(cols.schema((name,), {} if kind == ANY else {name: kind}))


def stacked(results: Sequence[pa.RecordBatch], keys: Sequence[str], kinds: Sequence[str],
            n: int) -> list[pa.RecordBatch]:
    """Each terminal's partials (`results[i]`: encoded `keys` and `$partial`) as rows of one
    schema: `$t` = i, its partial in `$p<i>` (the other terminals' null), and `$sp`, each
    key's state partition of `n`."""
    fields = [[*_partial_fields(i, k)] for i, k in enumerate(kinds)]
    out = []
    for i, rb in enumerate(results):
        rows = rb.num_rows
        key_names = [f.name for f in rb.schema if not f.name.startswith(sc.PARTIAL)]
        arrays = [rb.column(name) for name in key_names]
        names = list(key_names)
        arrays.append(pa.array([i] * rows, pa.int32()))
        names.append(sc.TERMINAL)
        for j, fs in enumerate(fields):
            for f in fs:
                if j == i:
                    arrays.append(rb.column(sc.PARTIAL + f.name[len(sc.stacked(j)):]))
                else:
                    arrays.append(pa.nulls(rows, f.type))
                names.append(f.name)
        key_columns = [cols.decode(rb, k) for k in keys]
        key_rows = list(zip(*key_columns, strict=True)) if key_columns else [()] * rows
        arrays.append(pa.array(partition_indexes(key_rows, n), pa.int32()))
        names.append(sc.STATE_PARTITION)
        out.append(pa.RecordBatch.from_arrays(arrays, names=names))
    return out


class ApplyState:
    """The `mapInArrow` function applying one transaction's partials to the partitions held by
    this task of the states of `nodes` (`persistent_aggregate`s with a `CombinerAggregator`,
    their partials stacked by `stacked`).

    `location` is the run's checkpoint location; `collect[i]`: whether the new `key + (value,)`
    rows of `nodes[i]` go back to the driver (pickled, one cell per state partition).
    """

    def __init__(self, nodes: Sequence[PersistNode], kinds: Sequence[str], location: str | None,
                 txid: int, collect: Sequence[bool], from_job: bool = False) -> None:
        self.nodes, self.kinds, self.location = list(nodes), list(kinds), location
        self.txid, self.collect = txid, list(collect)
        self.from_job = from_job  # made once per run: the txid is the job's (`per_job`)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.from_job:  # this task's copy of the function, for its job's transaction
            self.txid = job_ids()[0]
        with gc_paused():
            yield from self._apply(batches)

    def _apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        groups: dict[tuple[int, int], dict[tuple[Any, ...], Any]] = {}
        for rb in batches:
            if rb.num_rows == 0:
                continue
            terminal = rb.column(sc.TERMINAL)
            for i, node in enumerate(self.nodes):
                part = rb.filter(pc.equal(terminal, i))
                if part.num_rows:
                    self._group(i, node, part, groups)
        out = Written()
        for (i, sp), group in sorted(groups.items()):
            keys = list(group)
            out.add(i, sp, keys, self._write(self.nodes[i], sp, keys, list(group.values())),
                    self.collect[i])
        yield out.batch()

    def _group(self, i: int, node: PersistNode, rb: pa.RecordBatch,
               groups: dict[tuple[int, int], dict[tuple[Any, ...], Any]]) -> None:
        """The partials of terminal `i` in `rb`, combined per (state partition, key)."""
        combine: Callable[[Any, Any], Any] = node.op.combine
        kcols = [cols.decode(rb, k) for k in node.keys]
        name = sc.stacked(i)
        values = [cloudpickle.loads(b) for b in rb.column(name).to_pylist()] \
            if self.kinds[i] == PICKLED else cols.decode(rb, name)
        for sp, k, v in zip(rb.column(sc.STATE_PARTITION).to_pylist(), zip(*kcols, strict=True),
                            values, strict=True):
            group = groups.get((i, sp))
            if group is None:
                group = groups[(i, sp)] = {}
            old = group.get(k, _MISSING)
            group[k] = v if old is _MISSING else combine(old, v)

    def _write(self, node: PersistNode, sp: int, keys: list[tuple[Any, ...]], values: list[Any]
               ) -> list[Any]:
        """`values` folded into partition `sp` of the state of `node` for the transaction;
        the keys' new values."""
        op = node.op
        state = node.factory.make_partition(node.state, self.location, sp)
        try:
            if type(op) in (Count, Sum):  # combine is `+`: the store may add in bulk
                return list(state.multi_add(self.txid, keys, values))
            combine = op.combine
            return list(state.multi_update(self.txid, keys, [
                _Combining(combine, v) for v in values]))
        finally:
            state.close()


class Written:
    """A task's output (`OUTPUT_SCHEMA`): per terminal and state partition, the keys written
    (or rows emitted) and, when collected, their new rows (pickled)."""

    def __init__(self) -> None:
        self.t: list[int] = []
        self.sp: list[int] = []
        self.n: list[int] = []
        self.rows: list[bytes | None] = []

    def add(self, i: int, sp: int, keys: Sequence[tuple[Any, ...]], new: Sequence[Any],
            collect: bool) -> None:
        self.t.append(i)
        self.sp.append(sp)
        self.n.append(len(keys))
        self.rows.append(cloudpickle.dumps([(*k, v) for k, v in zip(keys, new, strict=True)])
                         if collect else None)

    def add_rows(self, i: int, sp: int, rows: Sequence[tuple[Any, ...]], collect: bool) -> None:
        """A task's output rows of terminal `i` (a `partition_persist`'s emitted rows) in
        partition `sp`: how many, and the rows when collected."""
        self.t.append(i)
        self.sp.append(sp)
        self.n.append(len(rows))
        self.rows.append(cloudpickle.dumps(list(rows)) if collect else None)

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {sc.TERMINAL: pa.array(self.t, pa.int32()),
             sc.STATE_PARTITION: pa.array(self.sp, pa.int32()),
             sc.WRITTEN: pa.array(self.n, pa.int64()), sc.ROWS: pa.array(self.rows, pa.binary())})


class _Combining:
    """An updater combining the stored value with a batch's (`value` for an absent key)."""

    __slots__ = ("combine", "value")

    def __init__(self, combine: Callable[[Any, Any], Any], value: Any) -> None:
        self.combine, self.value = combine, value

    def __call__(self, old: Any) -> Any:
        return self.value if old is None else self.combine(old, self.value)


# ---- built-in aggregates computed by Spark's JVM -----------------------------------------------

def partition_sql(columns: Sequence[str], n: int) -> str:
    """SQL: the state partition of `n` of the key held in `columns` (`partition_indexes`):
    Spark's own `hash`, so `repartition(n, *columns)` puts each key in the task of its
    partition.

    >>> partition_sql(["w#s"], 8)
    'CAST(pmod(hash(`w#s`), 8) AS INT)'
    """
    return "CAST(pmod(hash(" + ", ".join(f"`{c}`" for c in columns) + f"), {n}) AS INT)"


class ApplyColumns:
    """The `mapInArrow` function applying built-in aggregates Spark's JVM computed (`Count`,
    `Sum` of an integer field) to this task's state partitions: each row one key (its fields in
    `key_columns`), its partition `$sp` and each terminal's aggregate `$p<i>` (`$c<i>`: how
    many of a `Sum`'s values were not None, `$tuples`: how many tuples the key had). Every key of
    a state partition is in one task (the rows were repartitioned by their key columns, and a
    task holds the keys of the state partition of its index)."""

    def __init__(self, nodes: Sequence[PersistNode], key_columns: Sequence[str],
                 location: str | None, txid: int, collect: Sequence[bool], n: int) -> None:
        self.nodes, self.key_columns, self.location = list(nodes), list(key_columns), location
        self.txid, self.collect, self.n = txid, list(collect), n

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():
            yield from self._apply(batches)

    def _apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = Written()
        parts = [rb for rb in batches if rb.num_rows]
        table = pa.Table.from_batches(parts) if parts else None
        if table is not None:
            self._check_sums(table)
            sp_column = table.column(sc.STATE_PARTITION)
            for sp in sorted(pc.unique(sp_column).to_pylist()):
                rows = table.filter(pc.equal(sp_column, sp))
                keys = list(zip(*(rows.column(c).to_pylist() for c in self.key_columns),
                                strict=True))
                if partition_indexes(keys[:1], self.n) != [sp]:  # the SQL and Python agree
                    raise SquallError(
                        f"key {keys[0]!r} was sent to state partition {sp} by Spark but "
                        f"belongs to {partition_indexes(keys[:1], self.n)[0]}",
                        component=self.nodes[0].cid)
                for i, node in enumerate(self.nodes):
                    values = rows.column(sc.stacked(i)).to_pylist()
                    state = node.factory.make_partition(node.state,
                                                                self.location, sp)
                    try:
                        new = list(state.multi_add(self.txid, keys, values))
                    finally:
                        state.close()
                    out.add(i, sp, keys, new, self.collect[i])
        yield out.batch()

    def _check_sums(self, table: pa.Table) -> None:
        """A `Sum` meeting a None fails the batch, as `Sum.combine` does on the local runner
        (`a + None`); a key's lone None is its partial as it is (`Sum.init`)."""
        for i, node in enumerate(self.nodes):
            name = sc.valued(i)
            if name not in table.column_names:
                continue
            valued, rows = table.column(name), table.column(sc.KEY_TUPLES)
            lone_none = pc.and_(pc.equal(valued, 0), pc.equal(rows, 1))
            if not pc.all(pc.or_(pc.equal(valued, rows), lone_none)).as_py():
                raise SquallError(
                    f"Sum of field {node.input[0]!r} met a None value: "
                    "unsupported operand type(s) for +", component=node.cid,
                    field=node.input[0])


def applied_rows(result: pa.Table, terminals: int
                 ) -> list[tuple[int, list[tuple[Any, ...]] | None]]:
    """Per terminal of `ApplyState`'s output: the keys written and, if collected, the new
    rows."""
    out: list[tuple[int, list[tuple[Any, ...]] | None]] = []
    ts, ns, cells = (result.column(c).to_pylist() for c in (sc.TERMINAL, sc.WRITTEN, sc.ROWS))
    for i in range(terminals):
        mine = [(n, c) for t, n, c in zip(ts, ns, cells, strict=True) if t == i]
        rows: list[tuple[Any, ...]] | None = []
        for _, c in mine:
            if c is None:
                rows = None
                break
            assert rows is not None
            rows.extend(cloudpickle.loads(c))
        out.append((sum(n for n, _ in mine), rows))
    return out


_MISSING = object()
