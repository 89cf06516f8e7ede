"""Kafka as a Trident spout: squall's Kafka transactional and opaque partitioned spouts feed a
Trident word count into a durable map state, on both runners, with a batch that fails once
after the state update and is replayed; the counts are exact.

A real Kafka-protocol broker (Tansu, tests/kafka_broker.py); its limits are listed there.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from kafka_broker import running_broker
from test_trident import FailOnce

from squall import Fields
from squall.connectors.kafka import close_readers
from squall.testing import complete_topology
from squall.transactional import KafkaOpaqueSpout, KafkaTransactionalSpout
from squall.trident import Count, TridentTopology
from squall.trident.state import DurableMapState, StateType


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tansu")) as b:
        yield b
        close_readers()


@pytest.mark.parametrize("opaque", [False, True])
def test_kafka_spouts_feed_exactly_once_trident_counts(runner, opaque, broker, tmp_path):
    topic = broker.create_topic(f"trident-{opaque}-{runner}-{time.monotonic_ns()}", 2)
    words = [f"w{i % 7}" for i in range(60)]
    broker.produce(topic, [(None, json.dumps({"word": w}).encode(), i % 2)
                           for i, w in enumerate(words)])
    kind = KafkaOpaqueSpout if opaque else KafkaTransactionalSpout
    spout = kind([topic], Fields("word"), bootstrap_servers=broker.bootstrap,
                 value_deserialiser="json", max_batch=10, stop_when_empty=True, timeout=5)
    state = DurableMapState.factory(StateType.OPAQUE if opaque else StateType.TRANSACTIONAL)
    t = TridentTopology()
    counts = (t.new_stream("words", spout).group_by(["word"])
              .persistent_aggregate(state, Count(), ["count"]).name("counts"))
    (counts.new_values_stream()
     .each(["word"], FailOnce("w3", str(tmp_path / "failed")), ["ok"]).name("after"))
    result = complete_topology(t.build(), runner=runner)
    assert result.extra["failed_attempts"] == 1
    final = {k: v for k, v in map(tuple, result.tuples("counts"))}
    assert final == dict(Counter(words))
    assert result.extra["batches"] == 3  # 30 records per partition, 10 per batch
