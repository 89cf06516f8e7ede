"""Kafka clients, built on confluent-kafka (librdkafka): what squall's Kafka source, sink,
transactional spouts and Trident state share about reading and writing records.

Reading (`KafkaSource`, `KafkaTransactionalSpout`, `KafkaOpaqueSpout`): a consumer that reads
explicit offsets (`reader_config`), `consume_range` (every record of a partition in an offset
range, bounded in time), `fetch_high_watermark`, and a record's fields (`record_values`, the
deserialisers). Writing (`KafkaSink`, `KafkaStateFactory`): the serialisers, and
`KafkaWriterSettings`, the settings both writers take and the producer and marker-consumer
configurations that follow from them. `kafka_reason` turns a librdkafka error into what went
wrong and what to do.

>>> record_field_names = [f for f in ("key", "n", "offset") if f not in RECORD_FIELDS]
>>> record_field_names
['n']
>>> check_fields("reader", ["key", "n"], "json"), serialise("json", {"n": 1})
(None, b'{"n": 1}')
>>> settings = KafkaWriterSettings("counts", bootstrap_servers="k:9092", timeout=10)
>>> conf = settings.producer_config("tid-1")
>>> conf["enable.idempotence"], conf["transactional.id"], conf["transaction.timeout.ms"]
(True, 'tid-1', 60000)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

# ---- reading ---------------------------------------------------------------------------------

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
    broker connection that never comes back), which would leave a planner hung, silently, and
    its run without progress. The call runs in a daemon thread instead; a client that timed
    out is not used again (the callers replace it) and is kept here, never destroyed
    (destroying it would wait for the same threads), its thread left to its fate.
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


# ---- writing ---------------------------------------------------------------------------------

SERIALISERS = ("bytes", "utf-8", "json")
Serialiser = str | Callable[[Any], bytes | None]


def check_serialisers(owner: str, value_serialiser: Any, key_serialiser: Any,
                      error: Callable[[str], Exception] = ValueError) -> None:
    """`error(message)` when a serialiser is not one of `SERIALISERS` or a function."""
    for what, codec in (("value_serialiser", value_serialiser),
                        ("key_serialiser", key_serialiser)):
        if not callable(codec) and codec not in SERIALISERS:
            raise error(f"{owner}: {what} must be one of {list(SERIALISERS)} or a "
                        f"function, got {codec!r}")


def serialise(codec: Serialiser, value: Any) -> bytes | None:
    if value is None:
        return None
    if callable(codec):
        return codec(value)
    if codec == "json":
        return json.dumps(value, default=str).encode("utf-8")
    if isinstance(value, bytes):
        return value
    if codec == "utf-8" or isinstance(value, str):
        return str(value).encode("utf-8")
    raise TypeError(f"serialiser 'bytes' needs bytes, got {type(value).__name__}")


class KafkaWriterSettings:
    """The settings of a writer of Kafka records, which `KafkaSink` and the Kafka Trident state
    (`KafkaStateFactory`) share, and the client configurations that follow from them.

    Records go to `topic` on `bootstrap_servers`: the value from the tuple's `value_field` (or
    the whole tuple as a JSON object when it is None), the key from `key_field`, the partition
    from `partition_field` (otherwise librdkafka's partitioner on the key), serialised by
    `value_serialiser` and `key_serialiser` (`"bytes"`, `"utf-8"`, `"json"` or a function).
    Writes are idempotent, or with `transactional=True` Kafka transactions; `prefix` names the
    transactional ids and marker groups, `timeout` bounds every call (s), and `attempt_header`
    names the header that tells which attempt wrote a record of a transactional batch. `config`
    goes to librdkafka unchanged (`security.protocol`, `sasl.*`, ...) and wins over squall's
    settings.

    A writer inherits these settings, first of its bases (their `__init__` is called without
    arguments), so they are its own attributes: what a restart compares with the configuration
    its checkpoint recorded, and what its instances pickled before kept. An empty topic or an
    invalid serialiser raises the writer's `settings_error`.
    """

    settings_error: ClassVar[type[Exception]] = ValueError
    attempt_header: str | None = None  # class default: instances pickled before it existed

    def __init__(
        self, topic: str, *, bootstrap_servers: str, value_field: str | None = "value",
        key_field: str | None = None, partition_field: str | None = None,
        value_serialiser: Serialiser = "utf-8", key_serialiser: Serialiser = "utf-8",
        transactional: bool = False, config: Mapping[str, Any] | None = None,
        prefix: str | None = None, timeout: float = 30.0, attempt_header: str | None = None,
    ) -> None:
        owner, error = type(self).__name__, type(self).settings_error
        check_serialisers(owner, value_serialiser, key_serialiser, error)
        if not isinstance(topic, str) or not topic:
            raise error(f"{owner}: topic must be a non-empty string, got {topic!r}")
        self.topic, self.bootstrap_servers = topic, bootstrap_servers
        self.value_field, self.key_field = value_field, key_field
        self.partition_field = partition_field
        self.value_serialiser, self.key_serialiser = value_serialiser, key_serialiser
        self.transactional = bool(transactional)
        self.config = dict(config or {})
        self.prefix, self.timeout = prefix, float(timeout)
        self.attempt_header = attempt_header
        super().__init__()  # the writer's other bases (a sink's), with their defaults

    def producer_config(self, transactional_id: str | None = None) -> dict[str, Any]:
        """The idempotent producer's configuration, a transactional one's with an id."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                "enable.idempotence": True, "linger.ms": 5,
                                "message.timeout.ms": int(self.timeout * 1000)}
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = max(60_000, int(self.timeout * 2000))
        conf.update(self.config)
        return conf

    def marker_config(self, group: str) -> dict[str, Any]:
        """The configuration of the consumer whose group's offsets mark committed batches."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "group.id": group,
                                "enable.auto.commit": False}
        conf.update(self.config)
        return conf

    def record_bytes(self, tup: Any,
                     whole: Callable[[], Mapping[str, Any]]) -> tuple[Any, Any, Any]:
        """A tuple's record: (key bytes, value bytes, partition or None); `whole()` is the tuple
        as a mapping, the value when there is no `value_field`."""
        if self.value_field is None:
            value = serialise("json", whole())
        else:
            value = serialise(self.value_serialiser, tup[self.value_field])
        key = None if self.key_field is None else serialise(self.key_serialiser,
                                                            tup[self.key_field])
        part = None if self.partition_field is None else tup[self.partition_field]
        return key, value, part


def produce(producer: Any, topic: str, record: tuple[Any, Any, Any],
            headers: list[tuple[str, bytes]] | None, on_delivery: Callable[[Any, Any], None],
            ) -> None:
    """Sends `record` (key bytes, value bytes, partition or None, as `record_bytes` gives it),
    waiting for deliveries while librdkafka's local queue is full; a record refused at once (no
    such partition, ...) raises `KafkaException`."""
    key, value, part = record
    kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
    if headers:
        kwargs["headers"] = headers
    if part is not None:
        kwargs["partition"] = int(part)
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)


def delivery_errors(errors: list[str]) -> Callable[[Any, Any], None]:
    """An `on_delivery` callback that adds the first five delivery errors to `errors`."""

    def delivered(err: Any, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(f"partition {msg.partition()}: {err.str()}")

    return delivered


# ---- errors ----------------------------------------------------------------------------------

def kafka_reason(exc: BaseException) -> str:
    """What went wrong, and what to do, from a librdkafka error."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    code = err.code() if isinstance(err, KafkaError) else None
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
        return (f"the broker refused the credentials or the permission ({err}); check "
                "security.protocol, sasl.* and ssl.* in config, and the ACLs")
    if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                KafkaError._RESOLVE, KafkaError._MSG_TIMED_OUT):
        return (f"cannot reach the brokers ({err}); start Kafka or fix bootstrap_servers (a "
                "broker that closes connections over security settings looks the same: check "
                "security.protocol and sasl.* in config)")
    return f"{type(exc).__name__}: {exc}"
