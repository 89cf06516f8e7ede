"""Kafka transactional spouts (both kinds) on both runners, with random failures injected in the
committers: the word counts are exact. The opaque spout's partitions grow between attempts.

A real Kafka-protocol broker (Tansu, tests/support/kafka_broker.py); its limits are listed there.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter

import pytest
from support.kafka_broker import running_broker
from test_transactional import FaultyBuckets, FaultyKeyedCount, _check_words, _run

from squall import Fields
from squall.transactional import (
    KafkaOpaqueSpout,
    KafkaTransactionalSpout,
    TransactionalTopologyBuilder,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tansu")) as b:
        yield b  # running_broker closes this process's reading consumers


@pytest.fixture
def session_for(request):
    def get(runner: str):
        return request.getfixturevalue("spark_session") if runner == "spark" else None
    return get


class GrowingCount(FaultyKeyedCount):
    """On an injected failure, first appends a record to partition 0 (opaque test): the replay
    of the transaction then reads a different batch."""

    def finish_batch(self) -> None:
        try:
            super().finish_batch()
        except Exception:
            from confluent_kafka import Producer

            # One record, flushed alone: a one-record batch (Tansu's end offsets need it).
            producer = Producer({"bootstrap.servers": self.conf["test.bootstrap"]})
            producer.produce(self.conf["test.topic"], partition=0,
                             value=json.dumps({"word": f"grown{self.attempt.transaction_id}"}
                                              ).encode())
            assert producer.flush(10) == 0
            raise


@pytest.mark.parametrize("opaque", [False, True])
def test_kafka_spouts_count_exactly_under_failures(runner, opaque, broker, tmp_path,
                                                   session_for, caplog):
    caplog.set_level(logging.CRITICAL)
    topic = broker.create_topic(f"words-{opaque}-{runner}-{time.monotonic_ns()}", 2)
    rnd = random.Random(5)
    words = [f"w{i}" for i in range(20)]
    records = [(None, json.dumps({"word": rnd.choice(words)}).encode(), i % 2)
               for i in range(120)]
    broker.produce(topic, records)
    kind = KafkaOpaqueSpout if opaque else KafkaTransactionalSpout
    spout = kind([topic], Fields("word"), bootstrap_servers=broker.bootstrap,
                 value_deserialiser="json",
                 max_batch=10 if runner == "local" else 25, stop_when_empty=True, timeout=5)
    b = TransactionalTopologyBuilder(f"kafka-words-{opaque}", "spout", spout, 2)
    import test_transactional as tt

    b.set_bolt("count", (GrowingCount if opaque else FaultyKeyedCount)(), 2) \
        .fields_grouping("spout", Fields("word"))
    b.set_bolt("bucketize", tt.tw.Bucketize()).none_grouping("count")
    b.set_bolt("buckets", FaultyBuckets(), 2).fields_grouping("bucketize", Fields("bucket"))
    conf = {"transactional_words.db": {"provider": "durable", "dir": str(tmp_path / "db")},
            "test.seed": 3, "test.fail": 0.3, "test.topic": topic,
            "test.bootstrap": broker.bootstrap,
            "topology.max.spout.pending": 2,
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    _run(runner, b.create_topology(), conf, tmp_path / "r", session_for(runner))
    final = Counter(json.loads(m.value())["word"] for m in broker.read_all(topic))
    assert sum(final.values()) >= 120
    if opaque:
        assert any(w.startswith("grown") for w in final), "the partition never changed"
    _check_words(conf, final)


def test_transactional_spout_replays_the_same_offsets(broker):
    topic = broker.create_topic(f"replay-{time.monotonic_ns()}", 1)
    broker.produce(topic, [(f"k{i}".encode(), f"v{i}".encode(), 0) for i in range(7)])
    spout = KafkaTransactionalSpout([topic], ["key", "value", "offset"],
                                    bootstrap_servers=broker.bootstrap, max_batch=4,
                                    key_deserialiser="utf-8", timeout=5)

    class Out:
        def __init__(self):
            self.rows = []

        def emit(self, values, stream="default"):
            self.rows.append(values)

    first, again, second = Out(), Out(), Out()
    meta = spout.emit_partition_batch_new("tx1", first, 0, None)
    assert meta == (0, 4)
    spout.emit_partition_batch("tx1", again, 0, meta)
    assert first.rows == again.rows == [["tx1", f"k{i}", f"v{i}", i] for i in range(4)]
    assert spout.emit_partition_batch_new("tx2", second, 0, meta) == (4, 7)
    assert [r[3] for r in second.rows] == [4, 5, 6]
    assert spout.is_exhausted(0, (4, 7)) is False  # not bounded
    assert spout.has_new_data(0, (4, 7)) is False


def test_missing_topic_and_bad_fields_are_clear_errors(broker):
    spout = KafkaOpaqueSpout([f"absent-{time.monotonic_ns()}"], ["value"],
                             bootstrap_servers=broker.bootstrap, timeout=5)
    with pytest.raises(RuntimeError, match=r"do not exist on 127\.0\.0\.1:\d+; create them"):
        spout.num_partitions()
    with pytest.raises(ValueError, match="value_deserialiser='json'"):
        KafkaOpaqueSpout(["t"], ["user"], bootstrap_servers=broker.bootstrap)
