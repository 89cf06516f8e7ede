"""A `state_query` read where its state lives: in the Spark tasks, per state partition.

The query stream's rows leave the worker chain tagged with `$sp`, the state partition of the
query's input fields (`KeyPartitions`: Storm's `MapGet` reads exactly that key), Spark shuffles
them by `$sp` (every row of a state partition meets in one task: a join by key), and
`QueryPartitions` runs the `QueryFunction` over each partition's rows against that partition's
store, opened in the task (`make_partition`), on an executor. Only the query's output rows go to
the driver, which hands them to the operations after the query; the state itself never does.

A query reads through `QueryView` (`multi_get` only), as on the local runner. A key of another
partition (a user's `QueryFunction` may read any key) is read from its own partition, opened in
the same task, so every query gives what it gives on the local runner.

The runner runs these jobs before the jobs that update the states they read, so a query sees
its state as of the previous transaction, as the plan orders it (`squall.trident.plan`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc

from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.trident.execution import TridentOperationContext, query_rows
from squall.trident.plan import StateQueryNode
from squall.trident.state.map_state import MapState
from squall.trident.state.partitioned import by_partition, partition_indexes

# What a task of a query job returns: per state partition, the output rows (pickled).
OUTPUT_SCHEMA = f"{sc.ddl(sc.STATE_PARTITION, 'int')}, {sc.ddl(sc.ROWS, 'binary')}"


class KeyPartitions:
    """The `mapInArrow` function adding `$sp` to each row: the state partition, of `n`, of its
    `keys` fields."""

    def __init__(self, keys: Sequence[str], n: int) -> None:
        self.keys, self.n = list(keys), n

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            columns = [cols.decode(rb, k) for k in self.keys]
            keys = list(zip(*columns, strict=True)) if columns else [()] * rb.num_rows
            yield rb.append_column(sc.STATE_PARTITION, pa.array(partition_indexes(keys, self.n),
                                                       pa.int32()))


class QueryPartitions:
    """The `mapInArrow` function running the `state_query` `node` over this task's rows (of
    `fields`, with `$sp`), a state partition at a time; its output is one row per state
    partition with the query's output rows, pickled."""

    def __init__(self, node: StateQueryNode, fields: Sequence[str], location: str | None,
                 conf: Mapping[str, Any], n: int) -> None:
        self.node, self.fields, self.location = node, tuple(fields), location
        self.conf, self.n = dict(conf), n

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():
            yield from self._query(batches)

    def _query(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [rb for rb in batches if rb.num_rows]
        sps: list[int] = []
        cells: list[bytes] = []
        if parts:
            table = pa.Table.from_batches(parts)
            state = TaskPartitions(self.node.factory, self.node.state,
                                   self.location, self.n)
            try:
                column = table.column(sc.STATE_PARTITION)
                for sp in sorted(pc.unique(column).to_pylist()):
                    mine = table.filter(pc.equal(column, sp))
                    values = [cols.decode(mine, f) for f in self.fields]
                    rows = list(zip(*values, strict=True)) if values else [()] * mine.num_rows
                    out = query_rows(self.node, self.fields, rows, self._op(sp), state)
                    sps.append(sp)
                    cells.append(cloudpickle.dumps(out))
            finally:
                state.close()
        yield pa.RecordBatch.from_pydict({sc.STATE_PARTITION: pa.array(sps, pa.int32()),
                                          sc.ROWS: pa.array(cells, pa.binary())})

    def _op(self, sp: int) -> Any:
        """The query function, prepared for state partition `sp` (one copy per partition, as
        the local runner keeps one per stream partition)."""
        node = self.node
        op = cloudpickle.loads(cloudpickle.dumps(node.op))
        op.prepare(self.conf, TridentOperationContext(node.cid, sp % node.parallelism,
                                                      node.parallelism))
        return op


def output_rows(result: pa.Table) -> list[tuple[Any, ...]]:
    """`QueryPartitions`' output, collected: the query's rows, state partition by partition."""
    out: list[tuple[Any, ...]] = []
    for cell in result.column(sc.ROWS).to_pylist():
        out.extend(cloudpickle.loads(cell))
    return out


class TaskPartitions:
    """The partitions of a state read in a task, each opened when a key of it is first read
    (for `MapGet`, only the task's own)."""

    def __init__(self, factory: Any, name: str, location: str | None, n: int) -> None:
        self.factory, self.name, self.location, self.n = factory, name, location, n
        self.open: dict[int, MapState] = {}

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        out: list[Any] = [None] * len(keys)
        for sp, where in by_partition(keys, self.n).items():
            part = self.open.get(sp)
            if part is None:
                part = self.open[sp] = self.factory.make_partition(self.name, self.location, sp)
            for i, value in zip(where, part.multi_get([keys[i] for i in where]), strict=True):
                out[i] = value
        return out

    def close(self) -> None:
        for part in self.open.values():
            part.close()
        self.open.clear()
