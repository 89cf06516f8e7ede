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

from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark import trident_columns as cols
from squall.trident.operations import BuiltinCombiner, Count, Sum
from squall.trident.plan import PlanNode
from squall.trident.state.partitioned import partition_indexes

PARTITION = "$sp"
OUTPUT_SCHEMA = "`$sp` int, `$n` long, `$rows` binary"


def with_partitions(batch: pa.RecordBatch, keys: Sequence[str], n: int) -> pa.RecordBatch:
    """`batch` of partials (encoded `keys` and `$partial`) with `$sp`, each row's state
    partition of `n`."""
    columns = [cols.decode(batch, k) for k in keys]
    rows = list(zip(*columns, strict=True)) if columns else [()] * batch.num_rows
    return batch.append_column(PARTITION, pa.array(partition_indexes(rows, n), pa.int32()))


class ApplyState:
    """The `mapInArrow` function applying one transaction's partials to the partitions of the
    state of `node` (a `persistent_aggregate` with a `CombinerAggregator`) held by this task.

    `factory` makes a partition's map state (`make_partition`); `location` is the run's
    checkpoint location; `collect`: whether the new `key + (value,)` rows go back to the
    driver (pickled, one cell per state partition).
    """

    def __init__(self, node: PlanNode, factory: Any, location: str | None, txid: int,
                 types: cols.Types, collect: bool) -> None:
        self.node, self.factory, self.location = node, factory, location
        self.txid, self.types, self.collect = txid, dict(types), collect

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():
            yield from self._apply(batches)

    def _apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        op = self.node.args["op"]
        keys = tuple(self.node.args["keys"])
        combine: Callable[[Any, Any], Any] = op.combine
        builtin = isinstance(op, BuiltinCombiner)
        groups: dict[int, dict[tuple[Any, ...], Any]] = {}
        for rb in batches:
            if rb.num_rows == 0:
                continue
            kcols = [cols.decode(rb, k) for k in keys]
            values = cols.decode(rb, "$partial") if builtin else \
                [cloudpickle.loads(b) for b in rb.column("$partial").to_pylist()]
            for sp, k, v in zip(rb.column(PARTITION).to_pylist(), zip(*kcols, strict=True),
                                values, strict=True):
                group = groups.get(sp)
                if group is None:
                    group = groups[sp] = {}
                old = group.get(k, _MISSING)
                group[k] = v if old is _MISSING else combine(old, v)
        out_sp: list[int] = []
        out_n: list[int] = []
        out_rows: list[bytes | None] = []
        for sp in sorted(groups):
            group = groups[sp]
            new = self._write(sp, op, list(group), list(group.values()))
            out_sp.append(sp)
            out_n.append(len(group))
            out_rows.append(cloudpickle.dumps([(*k, v) for k, v in zip(group, new, strict=True)])
                            if self.collect else None)
        yield pa.RecordBatch.from_pydict(
            {"$sp": pa.array(out_sp, pa.int32()), "$n": pa.array(out_n, pa.int64()),
             "$rows": pa.array(out_rows, pa.binary())})

    def _write(self, sp: int, op: Any, keys: list[tuple[Any, ...]], values: list[Any]
               ) -> list[Any]:
        """`values` folded into partition `sp` for the transaction; the keys' new values."""
        state = self.factory.make_partition(self.node.args["state"], self.location, sp)
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


def applied_rows(result: pa.Table) -> tuple[int, list[tuple[Any, ...]] | None]:
    """The keys written and, if collected, the new rows, from `ApplyState`'s output."""
    written = sum(result.column("$n").to_pylist())
    cells = result.column("$rows").to_pylist()
    if any(c is None for c in cells):
        return written, None
    rows: list[tuple[Any, ...]] = []
    for c in cells:
        rows.extend(cloudpickle.loads(c))
    return written, rows


_MISSING = object()
