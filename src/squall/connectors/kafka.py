"""Kafka: a partitioned source and a sink, built on confluent-kafka (librdkafka).

`KafkaSource` is a `PartitionedSource` (squall.components.partitioned_source) with one source
partition per Kafka partition, named `"<topic>:<partition>"`; offsets are Kafka offsets, owned by
squall: the planner assigns partitions and reads explicit offsets (no consumer group is needed
for correctness), and the offsets live in squall's checkpoints (Spark's, through the planned
ranges and spout snapshots, and the local runner's commit record), so a run resumed after a crash
reads exactly the ranges it had planned. On Spark each planned range is read on an executor.

`KafkaSink` is a `BatchSink`: the idempotent producer (at-least-once) by default, or, with
`transactional=True`, one Kafka transaction per (batch, task) that also commits a marker (the
batch id as a consumer-group offset, sent in the same transaction), so a replayed batch whose
transaction committed is skipped and one that did not is fenced and written again: exactly-once
per micro-batch.

Every librdkafka setting (`security.protocol`, `sasl.*`, `ssl.*`, ...) passes through `config`
unchanged; squall sets only what it needs (offsets, idempotence, transactions).

>>> source = KafkaSource(["events"], ["key", "value", "offset"], bootstrap_servers="k:9092")
>>> source.fields.to_list(), source.mine(["events:0", "events:1"])
(['key', 'value', 'offset'], ['events:0', 'events:1'])
>>> split_partition("my.topic:12")
('my.topic', 12)
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from squall.components.batch_sink import BatchSink, SinkError, SinkWriteError
from squall.components.partitioned_source import (
    PartitionedSource,
    Range,
    SourceError,
)
from squall.kafka_clients import (
    DESERIALISERS,
    RECORD_FIELDS,
    Deserialiser,
    KafkaReadError,
    KafkaWriterSettings,
    MalformedKafkaRecord,
    Serialiser,
    consume_range,
    delivery_errors,
    fetch_high_watermark,
    kafka_reason,
    produce,
    reader_config,
    record_values,
)
from squall.topology.fields import Fields
from squall.topology.tuple import Tuple

log = logging.getLogger("squall")

def split_partition(name: str) -> tuple[str, int]:
    """`"topic:3"` -> `("topic", 3)` (topic names cannot contain `:`)."""
    topic, _, partition = name.rpartition(":")
    return topic, int(partition)


def _check_codec(what: str, codec: Any, names: Sequence[str], component: str) -> None:
    if not callable(codec) and codec not in names:
        raise SourceError(f"{component}: {what} must be one of {list(names)} or a function, "
                          f"got {codec!r}", component=component)


def _raw_text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", "backslashreplace")


# ---- the source -----------------------------------------------------------------------------

_READERS: dict[str, Any] = {}  # per process: one reading consumer per (brokers, config)


class KafkaSource(PartitionedSource):
    """Kafka topics (`topics`, or every topic matching the regular expression `pattern`), one
    source partition `"<topic>:<partition>"` per Kafka partition; offsets are Kafka offsets.

    Fields: any of `topic`, `partition`, `offset`, `timestamp` (ms), `key`, `value` and
    `headers` (a list of `(name, bytes)` pairs); other names are taken from the value, which
    must then deserialise to a JSON object (`value_deserialiser="json"`). Keys and values are
    deserialised by `"bytes"`, `"utf-8"`, `"json"` or a function of the bytes; a record that does
    not deserialise (or lacks a field) is reported naming topic, partition and offset, counted,
    and emitted on the `malformed` stream (its partition, offset, raw value and the error).

    Where reading starts in a partition the run has no offset for: `start="earliest"` or
    `"latest"`, or `start_timestamp_ms` (the first record at or after that time), or
    `start_offsets` (`{"topic:partition": offset}`, which wins for the partitions it names).
    Partitions that appear after the first plan (a new topic matching `pattern`, partitions
    added to a topic) start at their earliest offset, so nothing written to them is missed.

    `max_records_per_partition` caps the records of one partition in one plan (a Spark
    micro-batch reads at most that many per partition). Partitions are listed on every plan;
    a listed topic that does not exist is a `SourceError` (reported once; reading starts when it
    appears). With `commit_group`, the offsets up to which every record's tree completed are
    committed to that consumer group after the batches that read them commit (only so lag shows
    in Kafka's tools: squall never reads them back). `bounded=True` reads what exists at the
    first plan, then lets the topology finish.

    `config` is passed to librdkafka as it is (`security.protocol`, `sasl.mechanism`, ...).
    Each partition's end is the high watermark of a one-record fetch (`end_offsets="fetch"`,
    the default: one small fetch per partition per plan), which is the log's end on every
    broker; `end_offsets="list"` asks ListOffsets instead, one request for all partitions,
    exact on Kafka but short on brokers whose answer is not the log's end (Tansu's), where a
    bounded read would end early. A bounded read logs, per partition, the offsets it read
    once it has planned them all.
    """

    def __init__(
        self, topics: Sequence[str] | None, fields: Fields | Iterable[str] = ("key", "value"), *,
        bootstrap_servers: str, pattern: str | None = None, config: Mapping[str, Any] | None = None,
        start: str = "earliest", start_offsets: Mapping[str, int] | None = None,
        start_timestamp_ms: int | None = None, key_deserialiser: Deserialiser = "bytes",
        value_deserialiser: Deserialiser = "utf-8", max_records_per_partition: int | None = None,
        commit_group: str | None = None, end_offsets: str = "fetch", timeout: float = 10.0,
        stream: str = "default",
        bounded: bool = False, records_per_call: int = 1000,
    ) -> None:
        super().__init__(fields, stream=stream, bounded=bounded,
                         records_per_call=records_per_call)
        name = type(self).__name__
        if (topics is None) == (pattern is None):
            raise SourceError(f"{name}: give either topics or pattern", component=name)
        if topics is not None and (isinstance(topics, str) or not topics):
            raise SourceError(f"{name}: topics must be a non-empty list of topic names",
                              component=name)
        if start not in ("earliest", "latest"):
            raise SourceError(f"{name}: start must be 'earliest' or 'latest' (or give "
                              f"start_offsets / start_timestamp_ms), got {start!r}",
                              component=name)
        if end_offsets not in ("list", "fetch"):
            raise SourceError(f"{name}: end_offsets must be 'list' or 'fetch', got "
                              f"{end_offsets!r}", component=name)
        if max_records_per_partition is not None and max_records_per_partition < 1:
            raise SourceError(f"{name}: max_records_per_partition must be >= 1",
                              component=name)
        _check_codec("key_deserialiser", key_deserialiser, DESERIALISERS, name)
        _check_codec("value_deserialiser", value_deserialiser, DESERIALISERS, name)
        self.topics = None if topics is None else list(topics)
        self.pattern = pattern
        self.bootstrap_servers = bootstrap_servers
        self.config = dict(config or {})
        self.start = start
        self.start_offsets = {str(k): int(v) for k, v in (start_offsets or {}).items()}
        self.start_timestamp_ms = start_timestamp_ms
        self.key_deserialiser = key_deserialiser
        self.value_deserialiser = value_deserialiser
        self.max_records_per_partition = max_records_per_partition
        self.commit_group = commit_group
        self.end_offsets = end_offsets
        self.timeout = float(timeout)
        self._from_value = [f for f in self.fields if f not in RECORD_FIELDS]
        if self._from_value and value_deserialiser != "json" and not callable(value_deserialiser):
            raise SourceError(
                f"{name}: fields {self._from_value} are not parts of a record "
                f"({list(RECORD_FIELDS)}), so they come from the value, which needs "
                "value_deserialiser='json' (or a function returning a dict)", component=name)
        self._planned_once = False
        # Not yet acked: ranges (Spark's unit, by start) and records (the local runner's).
        self._ranges_inflight: dict[str, set[int]] = {}
        self._records_inflight: dict[str, set[int]] = {}
        self._group_committed: dict[str, int] = {}
        self._consumer: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_consumer"] = None  # connections do not travel; each process opens its own
        return state

    # ---- clients ----------------------------------------------------------------------------
    def _consumer_config(self, group: str | None) -> dict[str, Any]:
        return reader_config(self.bootstrap_servers, group or f"squall-{self.component}",
                             self.timeout, self.config)

    def consumer(self) -> Any:
        """The planner's consumer (metadata, end offsets, group commits)."""
        if self._consumer is None:
            self._consumer = Consumer(self._consumer_config(self.commit_group))
        return self._consumer

    def _reader_key(self) -> str:
        return json.dumps([self.bootstrap_servers, sorted(self.config.items(), key=str),
                           self.component], default=str)

    def _reader(self) -> Any:
        key = self._reader_key()
        reader = _READERS.get(key)
        if reader is None:
            reader = _READERS[key] = Consumer(self._consumer_config(None))
        return reader

    def _where(self) -> str:
        what = f"topics {self.topics}" if self.topics is not None else \
            f"topics matching {self.pattern!r}"
        return f"{what} on {self.bootstrap_servers}"

    def _fail(self, exc: BaseException, doing: str) -> SourceError:
        self._consumer = None  # a new client next time: this one may be stuck
        return SourceError(
            f"source {self.component!r}: could not {doing} ({self._where()}): "
            f"{kafka_reason(exc)}. "
            "Nothing is lost: the offsets not yet read are read when it works again",
            component=self.component)

    # ---- PartitionedSource ------------------------------------------------------------------
    def discover(self) -> list[str]:
        # All topics, not the listed ones: a metadata request naming a topic may create it.
        try:
            md = self.consumer().list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise self._fail(exc, "list the topics") from None
        if self.topics is not None:
            missing = [t for t in self.topics if t not in md.topics]
            if missing:
                raise SourceError(
                    f"source {self.component!r}: topic(s) {missing} do not exist on "
                    f"{self.bootstrap_servers}; create them (reading starts when they "
                    "exist) or fix the topic names", component=self.component)
            names = list(self.topics)
        else:
            assert self.pattern is not None
            regex = re.compile(self.pattern)
            names = sorted(t for t in md.topics if regex.fullmatch(t)
                           and not t.startswith("__"))
        out: list[str] = []
        for topic in names:
            meta = md.topics[topic]
            if meta.error is not None and meta.error.code() != KafkaError.NO_ERROR:
                raise SourceError(
                    f"source {self.component!r}: topic {topic!r} on {self.bootstrap_servers}: "
                    f"{meta.error}; check the topic and its permissions",
                    component=self.component)
            out.extend(f"{topic}:{p}" for p in sorted(meta.partitions))
        return out

    def mine(self, partitions: Iterable[str]) -> list[str]:
        # Partition p of a topic goes to task (hash(topic) + p) % tasks: even over a topic's
        # partitions, and stable when partitions or topics are added (each keeps its task).
        if self._tasks == 1:
            return list(partitions)
        out: list[str] = []
        for name in partitions:
            topic, p = split_partition(name)
            if (zlib.crc32(topic.encode()) + p) % self._tasks == self._task_index:
                out.append(name)
        return out

    def plan(self, budget: int, max_ranges: int | None = None) -> list[Range]:
        fresh_bounds = self.bounded and self._bounds is None
        out = super().plan(budget, max_ranges)
        self._planned_once = True
        for r in out:
            self._ranges_inflight.setdefault(r.partition, set()).add(int(r.start))
        if self.bounded:
            self._note_read_out(out, fresh_bounds)
        if self.commit_group is not None:
            self._commit_group()
        return out

    def _note_read_out(self, planned: list[Range], fresh_bounds: bool) -> None:
        """Logs each partition of a bounded read once it is planned to its end: what it read,
        so a read that ends is never silent about how much it took."""
        if fresh_bounds:  # the first plan of a bounded read (after a restore too)
            self._read_from: dict[str, int] = {}
            self._told_read_out: set[str] = set()
        for r in planned:
            start = self._read_from.get(r.partition)
            if start is None or int(r.start) < start:
                self._read_from[r.partition] = int(r.start)
        bounds = self._bounds or {}
        for p in sorted(self._read_out_partitions() - self._told_read_out):
            self._told_read_out.add(p)
            end = int(bounds[p])
            start = self._read_from.get(p, end)
            log.info("source %r: bounded read of %s planned to its end: offsets %d to %d "
                     "(%d records at most: transaction markers take offsets too)",
                     self.component, p, start, end, end - start)

    def _watermarks(self, partition: str) -> tuple[int, int]:
        topic, p = split_partition(partition)
        try:
            low, high = self.consumer().get_watermark_offsets(
                TopicPartition(topic, p), timeout=self.timeout, cached=False)
        except KafkaException as exc:
            raise self._fail(exc, f"list the offsets of {partition}") from None
        return int(low), int(high)

    def initial_offset(self, partition: str) -> int:
        if partition in self.start_offsets:
            return self.start_offsets[partition]
        low, high = self._watermarks(partition)
        if not self._planned_once and self.start_timestamp_ms is not None:
            topic, p = split_partition(partition)
            try:
                (tp,) = self.consumer().offsets_for_times(
                    [TopicPartition(topic, p, int(self.start_timestamp_ms))],
                    timeout=self.timeout)
            except KafkaException as exc:
                raise self._fail(exc, f"look up offsets by time in {partition}") from None
            return high if tp.offset < 0 else int(tp.offset)  # -1: nothing at or after it
        if not self._planned_once and self.start == "latest":
            return high
        return low

    def end_offset(self, partition: str, start: Any) -> int:
        if self.end_offsets == "fetch":
            topic, p = split_partition(partition)
            try:
                high = fetch_high_watermark(self.consumer(), topic, p, int(start),
                                            self.timeout)
            except KafkaException as exc:
                raise self._fail(exc, f"fetch the end of {partition}") from None
            return max(int(start), high)
        return max(int(start), self._watermarks(partition)[1])

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        size = max(1, budget)
        if self.max_records_per_partition is not None:
            size = min(size, self.max_records_per_partition)
        return min(int(end), int(start) + size)

    def estimate(self, r: Range) -> int:
        return int(r.end) - int(r.start)

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        topic, p = split_partition(partition)
        fields = list(self.fields)
        try:
            for m in consume_range(self._reader(), topic, p, int(start), int(end),
                                   self.timeout):
                try:
                    values = record_values(m, fields, self.key_deserialiser,
                                           self.value_deserialiser, partition)
                except MalformedKafkaRecord as exc:
                    yield m.offset(), self.malformed(_raw_text(m.value()), str(exc),
                                                     field=exc.field)
                    continue
                yield m.offset(), values
        except KafkaReadError as exc:
            # A new reader next time: after a broker restart this one may be stuck.
            _READERS.pop(self._reader_key(), None)
            raise SourceError(
                f"source {self.component!r}: {exc} (on {self.bootstrap_servers}); the range is "
                "read again later, nothing is lost", component=self.component) from None

    # ---- completions and the optional group commits -----------------------------------------
    def _emit(self, partition: str, offset: Any, values: Any, replay: bool = False) -> None:
        # The local runner reads its ranges at once and emits record by record: from here on
        # the records are in flight, each until acked, instead of the ranges they came from.
        self._records_inflight.setdefault(partition, set()).add(int(offset))
        ranges = self._ranges_inflight.get(partition)
        if ranges:
            ranges.difference_update([s for s in ranges if s <= offset])
        super()._emit(partition, offset, values, replay)

    def ack(self, msg_id: Any) -> None:
        if isinstance(msg_id, Range):
            self._ranges_inflight.get(msg_id.partition, set()).discard(int(msg_id.start))
        else:
            partition, offset = msg_id
            self._records_inflight.get(partition, set()).discard(int(offset))

    def committable(self) -> dict[str, int]:
        """Per partition, the offset before which every record's tree has completed."""
        out = {}
        for partition, offset in self.position()["offsets"].items():
            pending = self._ranges_inflight.get(partition, set()) | \
                self._records_inflight.get(partition, set())
            out[partition] = min(pending) if pending else int(offset)
        return out

    def _commit_group(self) -> None:
        todo = [(p, o) for p, o in self.committable().items()
                if self._group_committed.get(p) != o]
        if not todo:
            return
        tps = [TopicPartition(*split_partition(p), o) for p, o in todo]
        try:
            self.consumer().commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            # Only lag reporting depends on it; reading goes on from squall's own offsets.
            log.warning("source %r: could not commit offsets to consumer group %r: %s",
                        self.component, self.commit_group, kafka_reason(exc))
            return
        self._group_committed.update(todo)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def close_readers() -> None:
    """Close this process's reading consumers (they are kept between ranges otherwise)."""
    while _READERS:
        _READERS.popitem()[1].close()


# ---- the sink -------------------------------------------------------------------------------

class KafkaSink(KafkaWriterSettings, BatchSink):
    """Writes each tuple as a Kafka record to `topic`: the value from `value_field` (or the
    whole tuple as a JSON object when `value_field` is None), the key from `key_field`, the
    partition from `partition_field` (otherwise librdkafka's partitioner on the key).

    - Default (at-least-once): the idempotent producer; a batch is acked once every record is
      delivered. A delivery error fails the batch with a `SinkWriteError` naming the component,
      topic and partition, so it is replayed (records delivered before the error may then be
      written twice).
    - `transactional=True` (exactly-once per micro-batch): each (batch, task) is one Kafka
      transaction with the transactional id `<prefix>-<run>-t<task>-b<batch>`. The transaction
      also commits the batch id as an offset of consumer group `<prefix>-<run>-t<task>` (on
      partition 0 of `topic`); a replayed batch whose transaction committed is skipped, and one
      whose transaction did not is fenced by the new producer (its records aborted) and written
      again. `<run>` names the checkpoint location (the same across its restarts, so a
      replay of any batch, the first included, finds its committed transaction) or, without
      one, the process. Readers must use `isolation.level=read_committed` (librdkafka's
      default). On the local runner with a checkpoint location the batch's records are kept
      with the commit record and the transaction runs once the runner's commit names the
      batch.

    `prefix` defaults to `squall-<component id>`. `config` goes to librdkafka unchanged. With
    `attempt_header`, every record of a transactional batch carries a header of that name,
    `<transactional id>/<attempt>` (a random id per attempt): which batch, task and attempt
    wrote it, for tracing, and for brokers that show aborted records to `read_committed`
    readers.
    """

    settings_error = SinkError

    def __init__(
        self, topic: str, *, bootstrap_servers: str, value_field: str | None = "value",
        key_field: str | None = None, partition_field: str | None = None,
        value_serialiser: Serialiser = "utf-8", key_serialiser: Serialiser = "utf-8",
        transactional: bool = False, config: Mapping[str, Any] | None = None,
        prefix: str | None = None, timeout: float = 30.0, attempt_header: str | None = None,
    ) -> None:
        super().__init__(  # the settings, then BatchSink's own (all fields)
            topic, bootstrap_servers=bootstrap_servers, value_field=value_field,
            key_field=key_field, partition_field=partition_field,
            value_serialiser=value_serialiser, key_serialiser=key_serialiser,
            transactional=transactional, config=config, prefix=prefix, timeout=timeout,
            attempt_header=attempt_header)
        self._producer: Any = None
        self._marker: Any = None
        self._pending: dict[int, list[tuple[Any, Any, Any]]] = {}  # staged batches (local)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_producer"] = None  # connections do not pickle; snapshots reconnect on demand
        state["_marker"] = None
        return state

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        if self.prefix is None:
            self.prefix = f"squall-{context.this_component_id}"
        # A fresh run numbers its batches from 0 again: the run keeps its markers apart. On a
        # checkpoint location the runner replaces it with the location's (bind_checkpoint).
        self.run_token = uuid.uuid4().hex[:12]
        self.batches_skipped = 0
        self._pending = {}

    def required_fields(self) -> tuple[str, ...]:
        return tuple(f for f in (self.value_field, self.key_field, self.partition_field) if f)

    def target(self) -> str:
        return f"Kafka topic {self.topic!r} on {self.bootstrap_servers}"

    # ---- records ----------------------------------------------------------------------------
    def _records(self, tuples: list[Tuple]) -> list[tuple[Any, Any, Any]]:
        record_bytes, record = self.record_bytes, self.record
        return [record_bytes(tup, functools.partial(record, tup)) for tup in tuples]

    def _produce_all(self, producer: Any, records: list[tuple[Any, Any, Any]],
                     batch_id: int, headers: list[tuple[str, bytes]] | None = None) -> None:
        errors: list[str] = []
        delivered = delivery_errors(errors)
        for record in records:
            try:
                produce(producer, self.topic, record, headers, delivered)
            except KafkaException as exc:  # refused at once (no such partition, ...)
                part = record[2]
                where = "" if part is None else f"partition {part}: "
                errors.append(f"{where}{kafka_reason(exc)}")
            if errors:
                break
        left = producer.flush(self.timeout)
        if left:
            errors.append(f"{left} records not delivered within {self.timeout} s")
        if errors:
            raise SinkWriteError(
                f"KafkaSink could not deliver batch {batch_id} of task "
                f"{self.context.this_task_id} to topic {self.topic!r} on "
                f"{self.bootstrap_servers}: {'; '.join(errors)}; the batch is not committed "
                "and is written again", component=self.context.this_component_id)

    # ---- at-least-once ------------------------------------------------------------------------
    def write_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        records = self._records(tuples)
        if self.transactional:
            self._write_transaction(batch_id, records)
            return
        if self._producer is None:
            self._producer = Producer(self.producer_config())
        self._produce_all(self._producer, records, batch_id)

    # ---- exactly-once -----------------------------------------------------------------------
    def _marker_consumer(self) -> Any:
        if self._marker is None:
            # The run is in the group's name rather than in the offset's metadata, which not
            # every Kafka-protocol broker keeps.
            conf = self.marker_config(
                f"{self.prefix}-{self.run_token}-t{self.context.this_task_id}")
            self._marker = Consumer(conf)
        return self._marker

    def written(self, batch_id: int) -> bool:
        """Whether this task's transaction for `batch_id` (of this run) committed."""
        (tp,) = self._marker_consumer().committed([TopicPartition(self.topic, 0)],
                                                  timeout=self.timeout)
        if tp.error is not None:
            raise KafkaException(tp.error)
        return tp.offset >= batch_id + 1

    def _write_transaction(self, batch_id: int, records: list[tuple[Any, Any, Any]]) -> None:
        if self.written(batch_id):
            self.batches_skipped += 1
            log.info("%s task %s: batch %s was already committed to Kafka; skipped",
                     self.context.this_component_id, self.context.this_task_id, batch_id)
            return
        tid = f"{self.prefix}-{self.run_token}-t{self.context.this_task_id}-b{batch_id}"
        # A new producer per (batch, task): init_transactions fences an earlier attempt of the
        # same batch (a killed process, a replay) and aborts what it left open.
        producer = Producer(self.producer_config(tid))
        producer.init_transactions(self.timeout)
        producer.begin_transaction()
        headers = None
        if self.attempt_header:
            headers = [(self.attempt_header, f"{tid}/{uuid.uuid4().hex[:8]}".encode())]
        try:
            self._produce_all(producer, records, batch_id, headers)
            marker = TopicPartition(self.topic, 0, batch_id + 1)
            producer.send_offsets_to_transaction(
                [marker], self._marker_consumer().consumer_group_metadata(), self.timeout)
            producer.commit_transaction(self.timeout)
        except BaseException:
            try:
                producer.abort_transaction(self.timeout)
            except KafkaException as exc:  # a new attempt's producer fences it anyway
                log.warning("KafkaSink: abort of %s failed: %s", tid, exc)
            raise

    # ---- the local runner with a checkpoint location: stage, then publish ------------------
    def stage_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        if not self.transactional:
            self.write_batch(batch_id, tuples)
            return
        # Kept in this instance, which the runner's commit record holds: a restart publishes
        # the committed batches from there (a Kafka transaction cannot outlive its producer).
        self._pending[batch_id] = self._records(tuples)

    def publish_batch(self, batch_id: int) -> None:
        records = self._pending.get(batch_id)
        if records is not None:
            self._write_transaction(batch_id, records)
            del self._pending[batch_id]

    def bind_checkpoint(self, checkpoint_id: str) -> None:
        # Transactional ids and the marker group are the checkpoint's, not this process's:
        # markers written by its earlier processes are recognised.
        if self.run_token != checkpoint_id[:12] and self._marker is not None:
            self._marker.close()
            self._marker = None
        self.run_token = checkpoint_id[:12]

    def recover(self, committed: int, run_id: str) -> None:
        for batch_id in sorted(self._pending):
            if batch_id <= committed:
                self.publish_batch(batch_id)
            else:
                del self._pending[batch_id]

    def describe_failure(self, exc: Exception, batch_id: int, n: int) -> SinkError:
        if isinstance(exc, SinkWriteError):
            return exc
        reason = kafka_reason(exc)
        return SinkWriteError(
            f"KafkaSink could not write batch {batch_id} of task {self.context.this_task_id} to "
            f"topic {self.topic!r} on {self.bootstrap_servers}: {reason}; its {n} tuples are "
            "not committed and are written again", component=self.context.this_component_id)

    def cleanup(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
        if self._marker is not None:
            self._marker.close()
        self._producer = self._marker = None


__all__ = ["KafkaSink", "KafkaSource", "close_readers", "split_partition"]
