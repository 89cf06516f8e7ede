"""A `partition_persist` updated where its partitions are: in the Spark tasks.

For a state whose factory opens per partition (`squall.trident.operations.TaskStateFactory`),
the path's row operations run fused in the worker as any Spark path's do (`chain._Chain`), and
the same task then does what Storm's `PartitionPersistProcessor` does in the task holding a
partition: it gathers the partition's tuples of the updater's input fields, makes the state
with the partition's index and the number of partitions (`make_task_state`), and calls
`begin_commit(txid)`, the updater and `commit(txid)` (`execution.task_partition`; nothing for a
partition without tuples). The driver sees one row per task: how many rows the updater emitted,
and, when a later operation or the caller reads them, the rows themselves (pickled). It commits
the transaction once the job has ended, so once every partition's update has returned.

A task Spark runs again, and a transaction the driver attempts again after its job failed, make
the partition's state again with the same txid and index (a batch's partitions are its files'
splits, the same on every attempt): the state keeps the update exactly once by the txid, as
Storm's states do and as the map states applied in the tasks do (`trident.state`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from squall import tracebacks
from squall.errors import SquallError
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import combine as tc
from squall.runtime.spark.trident import state as ts
from squall.runtime.spark.trident import windows as tw
from squall.runtime.spark.trident.chain import Counts, _Chain
from squall.trident.execution import (
    operation_failed,
    task_partition,
    updater_tuples,
)
from squall.trident.plan import PersistNode, RowNode


class PersistChain(_Chain):
    """Row operations fused into one `mapInArrow`, ending with the `partition_persist` `node`
    updating the state of this task's partition (of `partitions`, the input DataFrame's).
    `location`: the run's checkpoint location; `collect`: the emitted rows go to the driver."""

    def __init__(self, nodes: list[RowNode], in_fields: tuple[str, ...],
                 conf: Mapping[str, Any], txid: int, node: PersistNode, partitions: int,
                 location: str | None, collect: bool, counts: Counts | None,
                 types: cols.Types) -> None:
        super().__init__(nodes, in_fields, node.input, conf, txid, partial=node, counts=counts,
                         types={f: k for f, k in types.items() if f in node.input})
        self.node, self.partitions, self.location = node, partitions, location
        self.collect = collect

    def output_schema(self) -> str:
        return ts.OUTPUT_SCHEMA

    def _accumulators(self, ops: dict[str, Any], index: int
                      ) -> list[tc._Partials | tw.WindowPartials]:
        return [_Partition(self, ops[self.node.cid], index)]  # type: ignore[list-item]

    def _results(self, accs: list[Any]) -> Iterator[pa.RecordBatch]:
        (acc,) = accs
        yield acc.result()


class _Partition:
    """A task's partition of a `partition_persist`: its tuples gathered batch by batch (`add`,
    as a partial aggregation is), then the update (`result`)."""

    def __init__(self, chain: PersistChain, op: Any, index: int) -> None:
        self.chain, self.op, self.index = chain, op, index
        self.tuples: list[Any] = []

    def add(self, columns: dict[str, Any] | None, rows: list[tuple[Any, ...]] | None,
            fields: tuple[str, ...]) -> None:
        node = self.chain.node
        if rows is None:
            assert columns is not None
            lists = [cols.pylist(columns[f]) for f in node.input]
            rows, fields = list(zip(*lists, strict=True)), node.input
        self.tuples.extend(updater_tuples(node, fields, rows))

    def result(self) -> pa.RecordBatch:
        chain, node = self.chain, self.chain.node
        out = ts.Written()
        if not self.tuples:  # Storm updates no state for a partition without tuples
            return out.batch()
        state = node.factory.make_task_state(node.state, chain.location, self.index,
                                             chain.partitions)
        try:
            emitted = task_partition(node, self.tuples, chain.txid, self.op, state)
        except SquallError:
            raise
        except Exception as exc:  # the user's updater or state
            raise tracebacks.noted(operation_failed(node, chain.txid, exc, self.tuples,
                                                    node.input), exc) from exc
        finally:
            state.close()
        out.add_rows(0, self.index, emitted, chain.collect)
        return out.batch()
