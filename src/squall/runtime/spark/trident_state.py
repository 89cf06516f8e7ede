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

from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark import trident_columns as cols
from squall.trident.operations import Count, Sum
from squall.trident.plan import PlanNode
from squall.trident.state.partitioned import partition_indexes

PARTITION = "$sp"
TERMINAL = "$t"
OUTPUT_SCHEMA = "`$t` int, `$sp` int, `$n` long, `$rows` binary"
PICKLED = "b"  # a user's combiner's partials: pickled, one binary column
ANY = "*"  # a built-in's partials of no one type: the four variant columns


def stacked_schema(keys_ddl: str, kinds: Sequence[str]) -> str:
    """The Spark DDL of `stacked`'s output: the keys (`keys_ddl`), `$t`, each terminal's
    partial column(s) `$p<i>`, `$sp`."""
    parts = [keys_ddl, f"`{TERMINAL}` int"]
    for i, kind in enumerate(kinds):
        name = f"$p{i}"
        parts.append(f"`{name}` binary" if kind == PICKLED else
                     cols.spark_schema((name,), {} if kind == ANY else {name: kind}))
    parts.append(f"`{PARTITION}` int")
    return ", ".join(p for p in parts if p)


def _partial_fields(i: int, kind: str) -> list[pa.Field]:
    name = f"$p{i}"
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
        key_names = [f.name for f in rb.schema if not f.name.startswith("$partial")]
        arrays = [rb.column(name) for name in key_names]
        names = list(key_names)
        arrays.append(pa.array([i] * rows, pa.int32()))
        names.append(TERMINAL)
        for j, fs in enumerate(fields):
            for f in fs:
                if j == i:
                    arrays.append(rb.column("$partial" + f.name[len(f"$p{j}"):]))
                else:
                    arrays.append(pa.nulls(rows, f.type))
                names.append(f.name)
        key_columns = [cols.decode(rb, k) for k in keys]
        key_rows = list(zip(*key_columns, strict=True)) if key_columns else [()] * rows
        arrays.append(pa.array(partition_indexes(key_rows, n), pa.int32()))
        names.append(PARTITION)
        out.append(pa.RecordBatch.from_arrays(arrays, names=names))
    return out


class ApplyState:
    """The `mapInArrow` function applying one transaction's partials to the partitions held by
    this task of the states of `nodes` (`persistent_aggregate`s with a `CombinerAggregator`,
    their partials stacked by `stacked`).

    `location` is the run's checkpoint location; `collect[i]`: whether the new `key + (value,)`
    rows of `nodes[i]` go back to the driver (pickled, one cell per state partition).
    """

    def __init__(self, nodes: Sequence[PlanNode], kinds: Sequence[str], location: str | None,
                 txid: int, collect: Sequence[bool]) -> None:
        self.nodes, self.kinds, self.location = list(nodes), list(kinds), location
        self.txid, self.collect = txid, list(collect)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():
            yield from self._apply(batches)

    def _apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        groups: dict[tuple[int, int], dict[tuple[Any, ...], Any]] = {}
        for rb in batches:
            if rb.num_rows == 0:
                continue
            terminal = rb.column(TERMINAL)
            for i, node in enumerate(self.nodes):
                part = rb.filter(pc.equal(terminal, i))
                if part.num_rows:
                    self._group(i, node, part, groups)
        out: dict[str, list[Any]] = {"$t": [], "$sp": [], "$n": [], "$rows": []}
        for (i, sp), group in sorted(groups.items()):
            node = self.nodes[i]
            new = self._write(node, sp, list(group), list(group.values()))
            out["$t"].append(i)
            out["$sp"].append(sp)
            out["$n"].append(len(group))
            out["$rows"].append(
                cloudpickle.dumps([(*k, v) for k, v in zip(group, new, strict=True)])
                if self.collect[i] else None)
        yield pa.RecordBatch.from_pydict(
            {"$t": pa.array(out["$t"], pa.int32()), "$sp": pa.array(out["$sp"], pa.int32()),
             "$n": pa.array(out["$n"], pa.int64()), "$rows": pa.array(out["$rows"], pa.binary())})

    def _group(self, i: int, node: PlanNode, rb: pa.RecordBatch,
               groups: dict[tuple[int, int], dict[tuple[Any, ...], Any]]) -> None:
        """The partials of terminal `i` in `rb`, combined per (state partition, key)."""
        combine: Callable[[Any, Any], Any] = node.args["op"].combine
        kcols = [cols.decode(rb, k) for k in node.args["keys"]]
        name = f"$p{i}"
        values = [cloudpickle.loads(b) for b in rb.column(name).to_pylist()] \
            if self.kinds[i] == PICKLED else cols.decode(rb, name)
        for sp, k, v in zip(rb.column(PARTITION).to_pylist(), zip(*kcols, strict=True),
                            values, strict=True):
            group = groups.get((i, sp))
            if group is None:
                group = groups[(i, sp)] = {}
            old = group.get(k, _MISSING)
            group[k] = v if old is _MISSING else combine(old, v)

    def _write(self, node: PlanNode, sp: int, keys: list[tuple[Any, ...]], values: list[Any]
               ) -> list[Any]:
        """`values` folded into partition `sp` of the state of `node` for the transaction;
        the keys' new values."""
        op = node.args["op"]
        state = node.args["factory"].make_partition(node.args["state"], self.location, sp)
        try:
            if type(op) in (Count, Sum):  # combine is `+`: the store may add in bulk
                return list(state.multi_add(self.txid, keys, values))
            combine = op.combine
            return list(state.multi_update(self.txid, keys, [
                _Combining(combine, v) for v in values]))
        finally:
            state.close()


class _Combining:
    """An updater combining the stored value with a batch's (`value` for an absent key)."""

    __slots__ = ("combine", "value")

    def __init__(self, combine: Callable[[Any, Any], Any], value: Any) -> None:
        self.combine, self.value = combine, value

    def __call__(self, old: Any) -> Any:
        return self.value if old is None else self.combine(old, self.value)


def applied_rows(result: pa.Table, terminals: int
                 ) -> list[tuple[int, list[tuple[Any, ...]] | None]]:
    """Per terminal of `ApplyState`'s output: the keys written and, if collected, the new
    rows."""
    out: list[tuple[int, list[tuple[Any, ...]] | None]] = []
    ts, ns, cells = (result.column(c).to_pylist() for c in ("$t", "$n", "$rows"))
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
