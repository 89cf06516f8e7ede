"""Kafka as a Trident state: `partition_persist` writes each batch's tuples to a topic.

Storm's `TridentKafkaStateFactory` and `TridentKafkaStateUpdater`, in Python spelling:

    stream.partition_persist(KafkaStateFactory("counts", bootstrap_servers="k:9092",
                                               key_field="word", value_field="count"),
                             ["word", "count"], KafkaStateUpdater())

- Default (`StateType.NON_TRANSACTIONAL`, Storm's behaviour): the idempotent producer; the
  batch's records are flushed when the transaction commits, and an undelivered record fails
  the batch, which runs again (records delivered before the error are then written twice):
  at-least-once.
- `transactional=True` (`StateType.TRANSACTIONAL`): each Trident transaction is one Kafka
  transaction, which also commits the txid as an offset of a marker consumer group (on
  partition 0 of `topic`). A replayed txid whose Kafka transaction committed writes nothing
  again; one whose transaction did not is aborted (or fenced, after a crash, by the next
  process's producer) and written again: exactly-once, with a spout that replays a txid with
  the same tuples (a transactional spout; Storm's table refuses an opaque one, whose replay
  may differ from what was committed).

The marker group is named after the state and a lineage token kept under the run's checkpoint
location (a fresh location, or a run without one, starts a new lineage, whose txids start at
1 again). Readers of a transactional state's topic use `isolation.level=read_committed`
(librdkafka's default).

>>> factory = KafkaStateFactory("counts", bootstrap_servers="k:9092", key_field="word",
...                             value_field="count")
>>> factory.state_type
<StateType.NON_TRANSACTIONAL: 'non_transactional'>
>>> KafkaStateFactory("counts", bootstrap_servers="k:9092", transactional=True).state_type
<StateType.TRANSACTIONAL: 'transactional'>
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from squall.atomic_files import write_atomic
from squall.components.batch_sink import SinkError, SinkWriteError
from squall.kafka_clients import KafkaWriterSettings, delivery_errors, kafka_reason, produce
from squall.trident.operations import StateUpdater, TridentCollector
from squall.trident.state.durable import local_directory
from squall.trident.state.map_state import StateType, check_name

log = logging.getLogger("squall")

_LINEAGE_DIRECTORY = "kafka-state"


class KafkaStateFactory(KafkaWriterSettings):
    """Makes the Kafka state of a `partition_persist` (see the module documentation).

    The record's value is the tuple's `value_field` (or the tuple as a JSON object when it is
    None), its key `key_field`, its partition `partition_field` (otherwise librdkafka's
    partitioner on the key); `config` goes to librdkafka unchanged (`security.protocol`,
    `sasl.*`, ...). `prefix` names the marker group and transactional id (default
    `squall-<state name>`). `attempt_header`: every record of a transactional batch carries a
    header of that name, `<transactional id>-t<txid>/<attempt>` (a random id per attempt): which
    transaction and attempt wrote it, for tracing, and for brokers that show aborted records to
    `read_committed` readers. The settings are `KafkaSink`'s (`squall.kafka_clients`).
    """

    settings_error = SinkError

    @property
    def state_type(self) -> StateType:
        return StateType.TRANSACTIONAL if self.transactional else StateType.NON_TRANSACTIONAL

    def __repr__(self) -> str:
        kind = "transactional" if self.transactional else "idempotent"
        return f"KafkaStateFactory({self.topic!r}, {kind}, on {self.bootstrap_servers})"

    def make_state(self, name: str, location: str | None = None) -> KafkaState:
        name = check_name(name, "KafkaStateFactory")
        return KafkaState(self, name, _lineage(name, location) if self.transactional else "")


def _lineage(name: str, location: str | None) -> str:
    """The token of this checkpoint's lineage for state `name` (kept under `location`), or a
    new one for a run without a location."""
    if location is None:
        return uuid.uuid4().hex[:12]
    directory = local_directory(location, f"Kafka state {name!r}")
    path = os.path.join(directory, _LINEAGE_DIRECTORY, f"{name}.token")
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except FileNotFoundError:
        token = uuid.uuid4().hex[:12]
        write_atomic(path, token.encode("ascii"))
        return token


class KafkaState:
    """One topic written batch by batch, the batch's txid set by `begin_commit` (Storm's
    `State` protocol); `write(tuples)` sends records, `commit(txid)` makes them durable."""

    def __init__(self, factory: KafkaStateFactory, name: str, lineage: str) -> None:
        self.f, self.name, self.lineage = factory, name, lineage
        self.prefix = factory.prefix or f"squall-{name}"
        self.txid: int | None = None
        self.skip = False  # this txid's transaction committed before: write nothing again
        self.batches_skipped = 0
        self._producer: Any = None
        self._stale: list[Any] = []  # producers given up on, kept: their destructor may block
        self._marker: Any = None
        self._known: int | None = None  # the marker as this process last read or wrote it
        self._open = False  # a Kafka transaction is open
        self._errors: list[str] = []
        self._attempt = ""  # a random id per attempt of a transaction (the attempt header)

    # ---- Storm's State protocol --------------------------------------------------------------
    def begin_commit(self, txid: int) -> None:
        self.txid, self._errors = txid, []
        if not self.f.transactional:
            return
        if self._open:  # an earlier attempt of this txid failed after it began
            self._abort()
        producer = self._transactional_producer()  # after the abort, which may replace it
        if self._known is None:  # first transaction here, or an outcome not known
            self._known = self._committed()
        self.skip = self._known >= txid
        if self.skip:
            self.batches_skipped += 1
            log.info("Kafka state %r: transaction %d was already committed to topic %r; "
                     "skipped", self.name, txid, self.f.topic)
            return
        producer.begin_transaction()
        self._open = True
        self._attempt = uuid.uuid4().hex[:8]

    def write(self, tuples: Sequence[Any]) -> None:
        """Sends each tuple as a record of this transaction."""
        if self.txid is None:
            raise SinkError(f"Kafka state {self.name!r}: write outside a transaction "
                            "(begin_commit first)")
        if self.skip:
            return
        if self.f.transactional and not self._open:
            raise SinkError(f"Kafka state {self.name!r}: write of transaction {self.txid} "
                            "after it ended (begin_commit first)")
        producer = self._producer if self.f.transactional else self._plain()
        f = self.f
        headers = None
        if f.transactional and f.attempt_header:
            tag = f"{self._tid()}-t{self.txid}/{self._attempt}"
            headers = [(f.attempt_header, tag.encode())]
        delivered = delivery_errors(self._errors)
        for tup in tuples:
            try:
                produce(producer, f.topic, f.record_bytes(tup, functools.partial(_as_dict, tup)),
                        headers, delivered)
            except KafkaException as exc:  # refused at once (no such partition, ...)
                raise self._failure(kafka_reason(exc)) from exc

    def commit(self, txid: int) -> None:
        if not self.f.transactional:
            if self._producer is not None:
                self._flush(self._producer)
            return
        if self.skip or not self._open:
            return
        try:
            self._flush(self._producer)
            marker = TopicPartition(self.f.topic, 0, txid)
            self._producer.send_offsets_to_transaction(
                [marker], self._marker_consumer().consumer_group_metadata(), self.f.timeout)
            self._producer.commit_transaction(self.f.timeout)
            self._open = False
            self._known = txid
        except KafkaException as exc:
            self._abort()
            raise self._failure(kafka_reason(exc)) from exc
        except BaseException:
            self._abort()
            raise

    def close(self) -> None:
        if self._open:
            self._abort()
        if self._producer is not None:
            self._producer.flush(self.f.timeout)
        if self._marker is not None:
            self._marker.close()
        self._producer = self._marker = None

    # ---- helpers -----------------------------------------------------------------------------
    def _plain(self) -> Any:
        if self._producer is None:
            self._producer = Producer(self.f.producer_config())
        return self._producer

    def _tid(self) -> str:
        return f"{self.prefix}-{self.lineage}"

    def _transactional_producer(self) -> Any:
        if self._producer is None:
            producer = Producer(self.f.producer_config(self._tid()))
            try:
                # Fences a previous process of this lineage and aborts what it left open.
                producer.init_transactions(self.f.timeout)
            except KafkaException as exc:
                raise self._failure(kafka_reason(exc)) from exc
            self._producer = producer
        return self._producer

    def _marker_consumer(self) -> Any:
        if self._marker is None:
            self._marker = Consumer(self.f.marker_config(self._tid()))
        return self._marker

    def _committed(self) -> int:
        """The last txid whose Kafka transaction committed (0: none)."""
        try:
            (tp,) = self._marker_consumer().committed([TopicPartition(self.f.topic, 0)],
                                                      timeout=self.f.timeout)
        except KafkaException as exc:
            raise self._failure(kafka_reason(exc)) from exc
        if tp.error is not None:
            raise self._failure(str(tp.error))
        return max(tp.offset, 0)

    def _flush(self, producer: Any) -> None:
        left = producer.flush(self.f.timeout)
        if left:
            self._errors.append(f"{left} records not delivered within {self.f.timeout} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise self._failure("; ".join(errors))

    def _abort(self) -> None:
        # Whether a failed commit committed is not known here: the marker is read again.
        self._open, self._known = False, None
        try:
            self._producer.abort_transaction(self.f.timeout)
        except KafkaException as exc:
            # A new producer's init_transactions fences this one and aborts what it left open.
            log.warning("Kafka state %r: abort of transaction %s failed (%s); the next attempt "
                        "starts a new producer", self.name, self.txid, exc)
            self._stale.append(self._producer)
            self._producer = None

    def _failure(self, reason: str) -> SinkWriteError:
        return SinkWriteError(
            f"Kafka state {self.name!r} could not write transaction {self.txid} to topic "
            f"{self.f.topic!r} on {self.f.bootstrap_servers}: {reason}; the batch is not "
            "committed and runs again", component=self.name)


def _as_dict(tup: Any) -> dict[str, Any]:
    """A Trident tuple as a JSON object's fields."""
    return dict(zip(tup.fields, tup, strict=True))


class KafkaStateUpdater(StateUpdater):
    """Writes every tuple of the batch to the Kafka state (Storm's `TridentKafkaStateUpdater`);
    emits nothing."""

    def update_state(self, state: Any, tuples: Sequence[Any], collector: TridentCollector) -> None:
        if not isinstance(state, KafkaState):
            raise SinkError(f"KafkaStateUpdater writes to a Kafka state "
                            f"(KafkaStateFactory), got {type(state).__name__}")
        state.write(tuples)


__all__ = ["KafkaState", "KafkaStateFactory", "KafkaStateUpdater"]
