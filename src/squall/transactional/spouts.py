"""Transactional spouts: partitioned sources whose batches are decided per transaction id.

A spout is split in partitions; the emitter task `i` of `n` owns the partitions `p` with
`p % n == i`. For each transaction and partition the emitter stores the batch's metadata (an
offset range, say) under `meta/p=<p>/tx=<txid>` of the transactional store, before the next
transaction is started:

- `PartitionedTransactionalSpout` (idempotent): the first emission of a txid calls
  `emit_partition_batch_new(attempt, collector, partition, last_meta)` and stores what it
  returns; a replay calls `emit_partition_batch(attempt, collector, partition, meta)` with the
  stored metadata, which must emit exactly the same tuples.
- `OpaquePartitionedTransactionalSpout`: every emission (first or replay) calls
  `emit_partition_batch(attempt, collector, partition, last_meta)` with the metadata of the
  previous transaction, so a replay may emit a different batch but always starts where the
  previous one ended.

`is_exhausted(partition, meta)` lets a bounded source end a run: it is asked with the metadata of
the last committed transaction.

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

from squall.components.base import Component
from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields


class TransactionalSpout(Component):
    """What every transactional spout has: partitions and an `is_ready` check (default True)."""

    def open(self, conf: Mapping[str, Any], context: Any) -> None:
        """Called once per emitter task (and on the coordinator) before any batch."""

    def num_partitions(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement num_partitions()")

    def is_ready(self, txid: int) -> bool:
        """Whether a new transaction may start now (Storm's `Coordinator.isReady`)."""
        return True

    def is_exhausted(self, partition: int, meta: Any) -> bool:
        """True when `partition` has nothing after `meta` and never will (bounded input)."""
        return False

    def has_new_data(self, partition: int, meta: Any) -> bool:
        """Whether `partition` may hold tuples after `meta`, its last batch's metadata, now.

        When every partition answers False the coordinator waits (asking again at its next
        turn) instead of starting a transaction that would be empty. Default: True, so a spout
        that cannot tell always gets its transactions (as Storm's `isReady`).
        """
        return True

    def close(self) -> None: ...


class PartitionedTransactionalSpout(TransactionalSpout):
    """Re-emits exactly the same batch for a transaction id (see the module documentation)."""

    opaque = False

    def emit_partition_batch_new(self, attempt: Any, collector: Any, partition: int,
                                 last_meta: Any) -> Any:
        raise NotImplementedError

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             meta: Any) -> None:
        raise NotImplementedError


class OpaquePartitionedTransactionalSpout(TransactionalSpout):
    """May emit a different batch on replay; each batch starts where the previous one ended."""

    opaque = True

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             last_meta: Any) -> Any:
        raise NotImplementedError


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
