"""Kafka partitions as transactional spouts (Storm's `TransactionalKafkaSpout` and
`OpaqueTridentKafkaSpout` shapes), and the Kafka reading that `squall.connectors.kafka` shares.

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

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.fields import Fields
from squall.transaction_kernel.spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)

# The record's own parts, available as fields; any other field name is looked up in the
# deserialised value (a JSON object).
RECORD_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
DESERIALISERS = ("bytes", "utf-8", "json")
Deserialiser = str | Callable[[bytes], Any]


class KafkaReadError(Exception):
    """Offsets could not be read; the message says which and why (callers add who)."""


class MalformedKafkaRecord(Exception):
    """A record's field could not be read: `field` names it, the message says why."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def deserialise(codec: Deserialiser, raw: bytes | None) -> Any:
    if raw is None or codec == "bytes":
        return raw
    if codec == "utf-8":
        return raw.decode("utf-8")
    if codec == "json":
        return json.loads(raw)
    assert callable(codec)
    return codec(raw)


def record_values(m: Any, fields: Sequence[str], key_codec: Deserialiser,
                  value_codec: Deserialiser, where: str) -> list[Any]:
    """The values of `fields` of one consumed message; `MalformedKafkaRecord` if one cannot be
    read (`where` names the partition, e.g. `"topic:3"`)."""
    values: list[Any] = []
    value: Any = None
    decoded = False
    for name in fields:
        if name == "key":
            try:
                values.append(deserialise(key_codec, m.key()))
            except Exception as exc:
                raise MalformedKafkaRecord(f"{where} offset {m.offset()}: the key does not "
                                           f"deserialise ({type(exc).__name__}: {exc})",
                                           "key") from None
        elif name == "value" or name not in RECORD_FIELDS:
            if not decoded:
                try:
                    value = deserialise(value_codec, m.value())
                except Exception as exc:
                    raise MalformedKafkaRecord(
                        f"{where} offset {m.offset()}: the value does not deserialise "
                        f"({type(exc).__name__}: {exc})", "value") from None
                decoded = True
            if name == "value":
                values.append(value)
            elif not isinstance(value, dict) or name not in value:
                raise MalformedKafkaRecord(f"{where} offset {m.offset()}: the value has no "
                                           f"field {name!r}", name)
            else:
                values.append(value[name])
        elif name == "offset":
            values.append(m.offset())
        elif name == "partition":
            values.append(m.partition())
        elif name == "topic":
            values.append(m.topic())
        elif name == "timestamp":
            kind, ts = m.timestamp()
            values.append(ts if kind != 0 else None)  # 0: TIMESTAMP_NOT_AVAILABLE
        else:  # headers
            values.append(list(m.headers() or ()))
    return values


def check_fields(owner: str, fields: Sequence[str], value_codec: Deserialiser) -> None:
    from_value = [f for f in fields if f not in RECORD_FIELDS]
    if from_value and value_codec != "json" and not callable(value_codec):
        raise ValueError(
            f"{owner}: fields {from_value} are not parts of a record ({list(RECORD_FIELDS)}), "
            "so they come from the value, which needs value_deserialiser='json' (or a function "
            "returning a dict)")
    for what, codec in (("value_deserialiser", value_codec),):
        if not callable(codec) and codec not in DESERIALISERS:
            raise ValueError(f"{owner}: {what} must be one of {list(DESERIALISERS)} or a "
                             f"function, got {codec!r}")


def reader_config(bootstrap_servers: str, group: str, timeout: float,
                  config: Mapping[str, Any]) -> dict[str, Any]:
    """A consumer that reads explicit offsets: nothing committed behind squall's back, and an
    offset deleted by retention is an error instead of a silent jump."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers, "group.id": group,
        "enable.auto.commit": False, "enable.auto.offset.store": False,
        "auto.offset.reset": "error", "enable.partition.eof": True,
        "socket.timeout.ms": int(timeout * 1000),
        # A fetch waiting at the end of the log holds up the next assign() for this long
        # (librdkafka's default, 500 ms, per range read): answer soon instead.
        "fetch.wait.max.ms": 10,
    }
    conf.update(config)
    return conf


_STUCK: list[Any] = []  # clients whose call never returned: kept, never destroyed


def bounded(client: Any, call: Callable[[], Any], timeout: float, what: str) -> Any:
    """`call()` on `client`, or `KafkaException` (timed out) when it has not returned within
    `timeout` s.

    librdkafka's `assign` and `unassign` have no timeout: they wait for the client's own
    threads, and after a broker restart one of them can wait for ever (a fetch stopped on a
    broker connection that never comes back). Seen with Tansu restarted mid-run: the planner
    hung in `assign`, silently, and the run made no progress. The call runs in a daemon thread
    instead; a client that timed out is not used again (the callers replace it) and is kept
    here, never destroyed (destroying it would wait for the same threads), its thread left to
    its fate.
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"squall-kafka-{what}", daemon=True).start()
    if not done.wait(timeout):
        _STUCK.append(client)
        raise KafkaException(KafkaError(
            KafkaError._TIMED_OUT, f"the Kafka client's {what} did not return within {timeout} s "
            "(broker down or restarted); a new client is used next time"))
    if "error" in box:
        raise box["error"]
    return box.get("value")


def consume_range(consumer: Any, topic: str, partition: int, start: int, end: int,
                  timeout: float) -> Iterator[Any]:
    """Every message of `topic`/`partition` with an offset in `[start, end)`, in order.

    Offsets without a record (transaction markers, compaction) are skipped. Raises
    `KafkaReadError` when the broker cannot be reached for `timeout` seconds, or the offsets
    no longer exist (retention)."""
    where = f"{topic}:{partition}"
    tp = TopicPartition(topic, partition, int(start))
    try:
        bounded(consumer, lambda: consumer.assign([tp]), timeout, "assign")
    except KafkaException as exc:
        raise KafkaReadError(f"cannot read {where}: {exc}") from None
    try:
        yield from _consume(consumer, where, int(start), int(end), timeout)
    finally:
        # A consumer kept for the next range fetches nothing meanwhile.
        try:
            bounded(consumer, consumer.unassign, timeout, "unassign")
        except KafkaException as exc:
            raise KafkaReadError(f"cannot read {where}: {exc}") from None


def _consume(consumer: Any, where: str, start: int, end: int, timeout: float) -> Iterator[Any]:
    expected = start
    idle, max_idle = 0, max(1, int(timeout / 0.2))
    while expected < end:
        try:
            batch = consumer.consume(min(10_000, end - expected), 0.2)
        except KafkaException as exc:
            raise KafkaReadError(f"cannot read {where} [{expected}, {end}): {exc}") from None
        if not batch:
            idle += 1
            if idle > max_idle:
                raise KafkaReadError(
                    f"offsets [{expected}, {end}) of {where} could not be read within "
                    f"{timeout} s (broker down or the partition's leader unavailable)")
            continue
        idle = 0
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= end:  # the offsets up to `end` hold no more records
                        expected = end
                    continue
                if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    raise KafkaReadError(
                        f"offset {expected} of {where} no longer exists ({err}): records were "
                        "deleted (retention) before squall read them; restart with start "
                        "offsets past the gap, or keep the log longer")
                raise KafkaReadError(f"cannot read {where}: {err}")
            off = m.offset()
            if off >= end:
                expected = end
                break
            expected = off + 1
            yield m


def fetch_high_watermark(consumer: Any, topic: str, partition: int, start: int,
                         timeout: float) -> int:
    """The partition's high watermark as a fetch from `start` reports it (one fetch, at most
    one record taken), for brokers whose ListOffsets answer is not the log's end."""
    tp = TopicPartition(topic, partition, int(start))
    bounded(consumer, lambda: consumer.assign([tp]), timeout, "assign")
    try:
        events = consumer.consume(1, timeout)
        for event in events:
            err = event.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(err)
        # Without an answer the cached watermark is an earlier fetch's: not the end now.
        high = consumer.get_watermark_offsets(tp, cached=True)[1] if events else -1
    finally:
        bounded(consumer, consumer.unassign, timeout, "unassign")
    if high < 0:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                        f"no fetch answer from {topic}:{partition} within "
                                        f"{timeout} s"))
    return int(high)


# ---- the transactional spouts ----------------------------------------------------------------


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
