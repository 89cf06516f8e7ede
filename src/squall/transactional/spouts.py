"""`MemoryTransactionalSpout`: partitioned in-memory data as a transactional spout (Storm's
`MemoryTransactionalSpout`), for tests and examples. The spout interfaces it implements, and
how emitters use them, are in `squall.transaction_kernel.spouts`.

>>> from squall import Fields
>>> spout = MemoryTransactionalSpout({0: [["a"], ["b"], ["c"]]}, Fields("word"), max_batch=2)
>>> class Out:
...     def __init__(self): self.rows = []
...     def emit(self, values, stream="default"): self.rows.append(values)
>>> out = Out()
>>> meta = spout.emit_partition_batch_new("tx1", out, 0, None)
>>> meta, out.rows
((0, 2), [['tx1', 'a'], ['tx1', 'b']])
>>> spout.emit_partition_batch_new("tx2", out, 0, meta), spout.is_exhausted(0, (2, 1))
((2, 1), True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields
from squall.transaction_kernel.spouts import PartitionedTransactionalSpout


class MemoryTransactionalSpout(PartitionedTransactionalSpout):
    """Partitioned in-memory data (Storm's `MemoryTransactionalSpout`), bounded.

    `data` maps partition number (0..n-1) to its rows; a batch takes at most `max_batch` rows of
    each partition. Metadata is `(start, count)`. Emitted tuples are `[attempt, *row]`.
    """

    def __init__(self, data: Mapping[int, Sequence[Sequence[Any]]], fields: Fields,
                 max_batch: int = 1000) -> None:
        if sorted(data) != list(range(len(data))):
            raise ValueError(f"partitions must be numbered 0..n-1, got {sorted(data)}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.data = {p: [list(r) for r in rows] for p, rows in data.items()}
        for p, rows in self.data.items():
            for row in rows:
                if len(row) != len(fields):
                    raise ValueError(f"partition {p}: row {row!r} does not match the "
                                     f"fields {fields.to_list()}")
        self.fields = fields
        self.max_batch = max_batch

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("attempt", *self.fields))

    def num_partitions(self) -> int:
        return len(self.data)

    def emit_partition_batch_new(self, attempt: Any, collector: Any, partition: int,
                                 last_meta: Any) -> Any:
        start = 0 if last_meta is None else last_meta[0] + last_meta[1]
        count = max(0, min(self.max_batch, len(self.data[partition]) - start))
        meta = (start, count)
        self.emit_partition_batch(attempt, collector, partition, meta)
        return meta

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             meta: Any) -> None:
        start, count = meta
        emit = collector.emit
        for row in self.data[partition][start:start + count]:
            emit([attempt, *row])

    def is_exhausted(self, partition: int, meta: Any) -> bool:
        end = 0 if meta is None else meta[0] + meta[1]
        return end >= len(self.data[partition])
