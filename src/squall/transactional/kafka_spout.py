"""Kafka partitions as transactional spouts (Storm's `TransactionalKafkaSpout` and
`OpaqueTridentKafkaSpout` shapes), read with the clients of `squall.kafka_clients`.

The spout's partitions are the Kafka partitions of `topics`, in (topic, partition) order, listed
once when first needed (a transactional spout's partition count is fixed for a run, as in
Storm). Emitted tuples are `[attempt, *values]`; field names are those of `KafkaSource`
(`key`, `value`, `topic`, `partition`, `offset`, `timestamp`, `headers`, or fields of a JSON
object value). A record whose fields cannot be read is an error naming topic, partition and
offset: a transaction cannot skip a record and stay replayable, so the batch fails until the
record is dealt with (a `KafkaSource` routes such records to its `malformed` stream instead).

- `KafkaTransactionalSpout` (`PartitionedTransactionalSpout`): metadata `(start, end)` offsets;
  a replay reads exactly `[start, end)` again (the log must be kept until it commits).
- `KafkaOpaqueSpout` (`OpaquePartitionedTransactionalSpout`): metadata is the offset after the
  batch; a replay reads from the previous transaction's end, whatever is there now.

A batch takes at most `max_batch` records of a partition. `stop_when_empty=True` makes the spout
bounded (a partition is exhausted when nothing follows its last committed batch); otherwise no
transaction starts while no partition has new records.

>>> spout = KafkaTransactionalSpout(["t"], bootstrap_servers="k:9092", max_batch=500)
>>> spout.fields.to_list(), spout.max_batch   # nothing connects until the first batch
(['value'], 500)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from squall.kafka_clients import (
    Deserialiser,
    KafkaReadError,
    MalformedKafkaRecord,
    check_fields,
    consume_range,
    reader_config,
    record_values,
)
from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields
from squall.transaction_kernel.spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)


class _KafkaPartitions(TransactionalSpout):
    def __init__(self, topics: Sequence[str], fields: Fields | Sequence[str] = ("value",), *,
                 bootstrap_servers: str, max_batch: int = 1000,
                 config: Mapping[str, Any] | None = None, key_deserialiser: Deserialiser = "bytes",
                 value_deserialiser: Deserialiser = "utf-8", stop_when_empty: bool = False,
                 timeout: float = 10.0) -> None:
        name = type(self).__name__
        if isinstance(topics, str) or not topics:
            raise ValueError(f"{name}: topics must be a non-empty list of topic names")
        if max_batch < 1:
            raise ValueError(f"{name}: max_batch must be >= 1, got {max_batch}")
        self.fields = fields if isinstance(fields, Fields) else Fields(list(fields))
        check_fields(name, list(self.fields), value_deserialiser)
        self.topics = list(topics)
        self.bootstrap_servers = bootstrap_servers
        self.max_batch = max_batch
        self.config = dict(config or {})
        self.key_deserialiser, self.value_deserialiser = key_deserialiser, value_deserialiser
        self.stop_when_empty = stop_when_empty
        self.timeout = float(timeout)
        self._partitions: list[tuple[str, int]] | None = None
        self._consumer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}  # connections do not travel

    def _fail(self, doing: str, exc: BaseException) -> RuntimeError:
        self._consumer = None
        return RuntimeError(
            f"{type(self).__name__}: could not {doing} (topics {self.topics} on "
            f"{self.bootstrap_servers}): {exc}; start Kafka or fix bootstrap_servers and the "
            "topics. The transaction is replayed from its stored offsets: nothing is lost")

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer(reader_config(
                self.bootstrap_servers, f"squall-{type(self).__name__}", self.timeout,
                self.config))
        return self._consumer

    def partitions(self) -> list[tuple[str, int]]:
        if self._partitions is None:
            try:
                md = self.consumer.list_topics(timeout=self.timeout)  # all: naming may create
            except KafkaException as exc:
                raise self._fail("list the topics", exc) from None
            missing = [t for t in self.topics if t not in md.topics]
            if missing:
                raise RuntimeError(f"{type(self).__name__}: topic(s) {missing} do not exist on "
                                   f"{self.bootstrap_servers}; create them or fix the names")
            self._partitions = [(t, p) for t in self.topics
                                for p in sorted(md.topics[t].partitions)]
        return self._partitions

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("attempt", *self.fields))

    def num_partitions(self) -> int:
        return len(self.partitions())

    def _watermarks(self, partition: int) -> tuple[int, int]:
        topic, p = self.partitions()[partition]
        try:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=self.timeout, cached=False)
        except KafkaException as exc:
            raise self._fail(f"list the offsets of {topic}:{p}", exc) from None
        return int(low), int(high)

    def _emit(self, attempt: Any, collector: Any, partition: int, start: int,
              end: int) -> None:
        topic, p = self.partitions()[partition]
        where = f"{topic}:{p}"
        fields = list(self.fields)
        try:
            for m in consume_range(self.consumer, topic, p, start, end, self.timeout):
                try:
                    values = record_values(m, fields, self.key_deserialiser,
                                           self.value_deserialiser, where)
                except MalformedKafkaRecord as exc:
                    raise ValueError(f"{type(self).__name__}: {exc}; the transaction cannot "
                                     "skip it: fix or remove the record (or read the topic "
                                     "with a KafkaSource, which routes it)") from None
                collector.emit([attempt, *values])
        except KafkaReadError as exc:
            raise self._fail("read", exc) from None

    def _end(self, meta: Any) -> int | None:
        raise NotImplementedError

    def _start(self, partition: int, meta: Any) -> int:
        end = self._end(meta)
        return self._watermarks(partition)[0] if end is None else end

    def has_new_data(self, partition: int, meta: Any) -> bool:
        return self._watermarks(partition)[1] > self._start(partition, meta)

    def is_exhausted(self, partition: int, meta: Any) -> bool:
        return self.stop_when_empty and not self.has_new_data(partition, meta)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaTransactionalSpout(_KafkaPartitions, PartitionedTransactionalSpout):
    """Idempotent: a transaction's batch is the same offsets `[start, end)` on every replay."""

    def _end(self, meta: Any) -> int | None:
        return None if meta is None else int(meta[1])

    def emit_partition_batch_new(self, attempt: Any, collector: Any, partition: int,
                                 last_meta: Any) -> Any:
        start = self._start(partition, last_meta)
        end = min(self._watermarks(partition)[1], start + self.max_batch)
        end = max(start, end)
        self._emit(attempt, collector, partition, start, end)
        return (start, end)

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             meta: Any) -> None:
        start, end = meta
        if end > start:
            self._emit(attempt, collector, partition, start, end)


class KafkaOpaqueSpout(_KafkaPartitions, OpaquePartitionedTransactionalSpout):
    """Opaque: a replay reads from where the previous transaction ended, whatever is there now."""

    def _end(self, meta: Any) -> int | None:
        return None if meta is None else int(meta)

    def emit_partition_batch(self, attempt: Any, collector: Any, partition: int,
                             last_meta: Any) -> Any:
        start = self._start(partition, last_meta)
        end = max(start, min(self._watermarks(partition)[1], start + self.max_batch))
        if end > start:
            self._emit(attempt, collector, partition, start, end)
        return end
