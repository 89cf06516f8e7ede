"""The transactional spout interfaces: partitioned sources whose batches are decided per
transaction id, as transactional topologies and Trident read them.

A spout is split in partitions; the emitter task `i` of `n` owns the partitions `p` with
`p % n == i`. For each transaction and partition the emitter stores the batch's metadata (an
offset range, say) under `meta/p=<p>/tx=<txid>` of the progress store, before the next
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
the last committed transaction (`partitions_exhausted`); `has_new_data` lets a coordinator wait
rather than start an empty transaction (`idle_after`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.components.base import Component
from squall.transaction_kernel.progress_store import Store, meta_key


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


def partitions_exhausted(spout: TransactionalSpout, store: Store, txid: int) -> bool:
    """Every partition is exhausted after transaction `txid`'s batch (0: before any)."""
    for p in range(spout.num_partitions()):
        meta = None if txid < 1 else store.get(meta_key(p, txid))
        if txid >= 1 and meta is None:
            return False  # not emitted yet
        if not spout.is_exhausted(p, meta):
            return False
    return True


def idle_after(spout: TransactionalSpout, store: Store, txid: int) -> bool:
    """Transaction `txid`'s batch is known in every partition and none has anything after it:
    transaction `txid + 1` would be empty if it started now."""
    if txid < 1:
        return False
    for p in range(spout.num_partitions()):
        meta = store.get(meta_key(p, txid))
        if meta is None or spout.has_new_data(p, meta):
            return False
    return True
