"""Kafka as a Trident spout: squall's Kafka transactional and opaque partitioned spouts feed a
Trident word count into a durable map state, on both runners, with a batch that fails once
after the state update and is replayed; the counts are exact.

A real Kafka-protocol broker (Tansu, tests/support/kafka_broker.py); its limits are listed there.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from support.kafka_broker import committed_once, running_broker
from test_trident import FailOnce

from squall import Fields
from squall.connectors.kafka import close_readers
from squall.connectors.kafka_state import KafkaStateFactory, KafkaStateUpdater
from squall.errors import InvalidTopologyError
from squall.testing import complete_topology
from squall.transactional import KafkaOpaqueSpout, KafkaTransactionalSpout
from squall.trident import Count, TridentTopology
from squall.trident.state import DurableMapState, StateType
from squall.trident.tuple import tuple_type

pytestmark = pytest.mark.kafka


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


# ---- Kafka as a Trident state (partition_persist) -------------------------------------------

def _count_topology(broker, source, sink, tmp_path, *, transactional, fail_word=None):
    """Kafka words -> Count per word in a durable transactional map -> each batch's new counts
    written to `sink` by `partition_persist` into a Kafka state (keyed by word)."""
    spout = KafkaTransactionalSpout([source], Fields("word"), bootstrap_servers=broker.bootstrap,
                                    value_deserialiser="json", max_batch=10,
                                    stop_when_empty=True, timeout=5)
    t = TridentTopology()
    counts = (t.new_stream("words", spout).group_by(["word"])
              .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(),
                                    ["count"]).name("counts"))
    kafka = KafkaStateFactory(sink, bootstrap_servers=broker.bootstrap, key_field="word",
                              value_field="count", transactional=transactional,
                              attempt_header="attempt" if transactional else None, timeout=10)
    counts.new_values_stream().partition_persist(kafka, ["word", "count"],
                                                 KafkaStateUpdater()).name("out")
    if fail_word is not None:  # after the Kafka write of the same batch, in plan order
        (counts.new_values_stream()
         .each(["word"], FailOnce(fail_word, str(tmp_path / "failed")), ["ok"]).name("after"))
    return t


def _produce_words(broker, topic, words):
    broker.produce(topic, [(None, json.dumps({"word": w}).encode(), i % 2)
                           for i, w in enumerate(words)])


@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_state_writes_each_batch_new_counts(runner, transactional, broker, tmp_path):
    """Each batch's changed counts reach the topic; a batch that fails after its Kafka write
    runs again: with the transactional state its records are committed once (the failed
    attempt's transaction aborted), with the idempotent one at least once."""
    stamp = time.monotonic_ns()
    source = broker.create_topic(f"tk-in-{transactional}-{runner}-{stamp}", 2)
    sink = broker.create_topic(f"tk-out-{transactional}-{runner}-{stamp}", 2)
    words = [f"w{i % 7}" for i in range(60)]
    _produce_words(broker, source, words)
    t = _count_topology(broker, source, sink, tmp_path, transactional=transactional,
                        fail_word="w3")
    result = complete_topology(t.build(), runner=runner)
    assert result.extra["failed_attempts"] == 1 and result.extra["batches"] == 3
    # What each transaction must have written: every word its batch changed, with its count.
    expected: Counter = Counter()
    running: Counter = Counter()
    for b in range(3):  # 10 records per partition and batch, partitions alternate by index
        batch = [w for i, w in enumerate(words) if (i // 2) // 10 == b]
        running.update(batch)
        expected.update((w, running[w]) for w in set(batch))
    out = broker.read_all(sink)
    written = Counter((m.key().decode(), int(m.value())) for m in out)
    if transactional:
        # Per transaction (the header's id), what its committed attempt wrote: every changed
        # word once (this broker shows aborted records too; see committed_once).
        by_txn: dict[str, list] = {}
        for m in out:
            (tag,) = [v.decode() for k, v in m.headers() if k == "attempt"]
            by_txn.setdefault(tag.rsplit("/", 1)[0], []).append(m)
        retried = [tid for tid, ms in by_txn.items() if committed_once(ms, "attempt")[1]]
        assert len(by_txn) == 3 and len(retried) == 1, "3 transactions, the failed one twice"
        committed: Counter = Counter()
        for ms in by_txn.values():
            keys, _ = committed_once(ms, "attempt")
            assert max(keys.values()) == 1  # each changed word once per transaction
            committed.update(keys)
        assert sum(committed.values()) == sum(expected.values())
        assert set(written) == set(expected)
    else:
        assert set(written) == set(expected) and all(n >= 1 for n in written.values())
        assert sum(written.values()) > sum(expected.values()), "the replay wrote again"
    last = {}
    for m in sorted(out, key=lambda m: (int(m.value()))):
        last[m.key().decode()] = int(m.value())
    assert last == dict(Counter(words))


def test_kafka_state_skips_a_committed_transaction_on_replay(broker, tmp_path):
    """A new process on the same checkpoint that replays a txid whose Kafka transaction
    committed writes nothing again (the marker); the next txid is written; a fresh checkpoint
    is a new lineage whose txid 1 is written."""
    sink = broker.create_topic(f"tk-replay-{time.monotonic_ns()}", 1)
    factory = KafkaStateFactory(sink, bootstrap_servers=broker.bootstrap, key_field="word",
                                value_field="count", transactional=True,
                                attempt_header="attempt", timeout=10)
    rows = tuple_type(("word", "count"))

    def transaction(state, txid, values):
        state.begin_commit(txid)
        state.write([rows(v) for v in values])
        state.commit(txid)

    ckpt = str(tmp_path / "ckpt")
    first = factory.make_state("out", ckpt)
    transaction(first, 1, [("a", 1), ("b", 1)])
    first.close()
    again = factory.make_state("out", ckpt)  # a restart replays txid 1, then goes on
    transaction(again, 1, [("a", 1), ("b", 1)])
    assert again.batches_skipped == 1
    transaction(again, 2, [("a", 2)])
    again.close()
    fresh = factory.make_state("out", str(tmp_path / "other"))
    transaction(fresh, 1, [("c", 1)])
    fresh.close()
    keys = [(m.key().decode(), int(m.value())) for m in broker.read_all(sink)]
    assert sorted(keys) == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]


def test_kafka_state_refuses_an_opaque_spout_when_transactional(broker):
    spout = KafkaOpaqueSpout(["any"], Fields("value"), bootstrap_servers=broker.bootstrap)
    t = TridentTopology()
    kafka = KafkaStateFactory("out", bootstrap_servers=broker.bootstrap, transactional=True)
    t.new_stream("words", spout).partition_persist(kafka, ["value"], KafkaStateUpdater())
    with pytest.raises(InvalidTopologyError, match="TRANSACTIONAL but spout 'words' is opaque"):
        complete_topology(t.build(), runner="local")
