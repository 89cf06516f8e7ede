"""Redis Streams as a partitioned transactional spout: one stream per partition.

A batch of a partition is up to `max_batch` entries after the previous batch's last entry id,
read with `XRANGE`. Emitted tuples are `[attempt, *values]`, the values being the entry's fields
named by `fields`, in order (a missing field is an error naming the stream and entry).

- `opaque=False` (`PartitionedTransactionalSpout`): metadata `(after, last, count)`; a replay
  reads exactly the entries `(after, last]` again (the stream must not be trimmed below
  uncommitted batches, as Storm's Kafka spout needs the log retained).
- `opaque=True` (`OpaquePartitionedTransactionalSpout`): metadata is the last id read; a replay
  reads from the previous transaction's last id, so it may see entries appended meanwhile.

`stop_when_empty=True` makes the spout bounded: a partition is exhausted once nothing follows the
last committed batch (tests, backfills); by default a stream never ends, and while no stream has
an entry after the last batch no transaction starts (no empty transactions while idle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields
from squall.transaction_kernel.spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)


class _RedisStreams(TransactionalSpout):
    def __init__(self, streams: Sequence[str], fields: Fields, max_batch: int = 1000, *,
                 host: str = "127.0.0.1", port: int = 6379, password: str | None = None,
                 database: int = 0, stop_when_empty: bool = False) -> None:
        if not streams:
            raise ValueError("a Redis Streams spout needs at least one stream")
        self.streams = list(streams)
        self.fields = fields
        self.max_batch = max_batch
        self.host, self.port, self.password, self.database = host, port, password, database
        self.stop_when_empty = stop_when_empty
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = redis.Redis(host=self.host, port=self.port, password=self.password,
                                       db=self.database, decode_responses=True, socket_timeout=10)
        return self._client

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("attempt", *self.fields))

    def num_partitions(self) -> int:
        return len(self.streams)

    def _read(self, partition: int, after: str, last: str | None, count: int) -> list:
        stream = self.streams[partition]
        return self.client.xrange(stream, min=f"({after}", max=last or "+", count=count)

    def _emit(self, attempt: Any, collector: Any, partition: int, entries: list) -> None:
        names = list(self.fields)
        for entry_id, body in entries:
            try:
                values = [body[n] for n in names]
            except KeyError as exc:
                raise KeyError(f"stream {self.streams[partition]!r} entry {entry_id} has no "
                               f"field {exc.args[0]!r} (fields {names})") from None
            collector.emit([attempt, *values])

    def _last(self, meta: Any) -> str:
        raise NotImplementedError

    def is_exhausted(self, partition: int, meta: Any) -> bool:
        if not self.stop_when_empty:
            return False
        return not self.has_new_data(partition, meta)

    def has_new_data(self, partition: int, meta: Any) -> bool:
        return bool(self._read(partition, self._last(meta), None, 1))


class RedisStreamTransactionalSpout(_RedisStreams, PartitionedTransactionalSpout):
    """Idempotent: a transaction's batch is the same entries on every replay."""

    def _last(self, meta: Any) -> str:
        return "0-0" if meta is None else meta[1]

    def emit_partition_batch_new(self, attempt: Any, collector: Any, partition: int,
                                 last_meta: Any) -> Any:
        after = self._last(last_meta)
        entries = self._read(partition, after, None, self.max_batch)
        self._emit(attempt, collector, partition, entries)
        return (after, entries[-1][0] if entries else after, len(entries))

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             meta: Any) -> None:
        after, last, count = meta
        if count:
            self._emit(attempt, collector, partition, self._read(partition, after, last, count))


class RedisStreamOpaqueSpout(_RedisStreams, OpaquePartitionedTransactionalSpout):
    """Opaque: a replay reads from where the previous transaction ended, whatever is there now."""

    def _last(self, meta: Any) -> str:
        return meta or "0-0"

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             last_meta: Any) -> Any:
        after = self._last(last_meta)
        entries = self._read(partition, after, None, self.max_batch)
        self._emit(attempt, collector, partition, entries)
        return entries[-1][0] if entries else after
