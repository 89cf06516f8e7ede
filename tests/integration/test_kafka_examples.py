"""The Kafka examples against a real Kafka-protocol broker (Tansu), on both runners."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from support.examples import load_example
from support.kafka_broker import running_broker

from squall import run
from squall.connectors.kafka import close_readers

pytestmark = pytest.mark.kafka

wc = load_example("kafka_wordcount")
txc = load_example("kafka_transactional_count")

SENTENCES = ["the cow jumped over the moon", "an apple a day", "the moon and the cow",
             "four score and seven years ago"] * 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tansu")) as b:
        yield b
        close_readers()


def test_kafka_wordcount_example(runner, broker, tmp_path):
    stamp = time.monotonic_ns()
    source = broker.create_topic(f"sentences-{stamp}", 3)
    sink = broker.create_topic(f"word-counts-{stamp}", 2)
    broker.produce(source, [(None, s.encode(), i % 3) for i, s in enumerate(SENTENCES)])
    result = run(wc.build(broker.bootstrap, source, sink, bounded=True), runner=runner,
                 checkpoint_location=str(tmp_path / "ckpt"))
    assert not result.errors
    expected = Counter(w for s in SENTENCES for w in s.split())
    out = [(m.key().decode(), int(m.value())) for m in broker.read_all(sink)]
    assert len(out) == sum(expected.values()), "one running count per word read, once each"
    finals: dict[str, int] = {}
    for word, n in out:
        finals[word] = max(finals.get(word, 0), n)
    assert finals == dict(expected)
    assert sorted(n for w, n in out if w == "the") == list(range(1, expected["the"] + 1))


def test_kafka_transactional_count_example(runner, broker, tmp_path, request):
    topic = broker.create_topic(f"words-{time.monotonic_ns()}", 2)
    words = [w for s in SENTENCES for w in s.split()]
    broker.produce(topic, [(None, w.encode(), i % 2) for i, w in enumerate(words)])
    conf = {"kafka_count.dir": str(tmp_path / "counts"),
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    result = run(txc.build(broker.bootstrap, topic, bounded=True, max_batch=7), conf,
                 runner=runner, checkpoint_location=str(tmp_path / "ckpt"))
    assert not result.errors
    assert txc.read_counts(str(tmp_path / "counts")) == dict(Counter(words))


twc = load_example("trident_kafka_wordcount")


def test_trident_kafka_wordcount_example(runner, broker, tmp_path):
    stamp = time.monotonic_ns()
    source = broker.create_topic(f"t-sentences-{stamp}", 2)
    sink = broker.create_topic(f"t-word-counts-{stamp}", 2)
    lines = [*SENTENCES, "  two  spaces ", ""]
    broker.produce(source, [(None, s.encode(), i % 2) for i, s in enumerate(lines)])
    result = run(twc.build(broker.bootstrap, source, sink, bounded=True, max_batch=5),
                 runner=runner, checkpoint_location=str(tmp_path / "ckpt"))
    assert not result.errors
    expected = Counter(w for s in lines for w in s.split())
    finals: dict[str, int] = {}
    out = [(m.key().decode(), int(m.value())) for m in broker.read_all(sink)]
    for word, n in out:  # each transaction writes a word's new count once: they only grow
        assert n > finals.get(word, 0), (word, n, finals.get(word))
        finals[word] = n
    assert finals == dict(expected)
    assert result.extra["batches"] >= 3  # 13 records per partition, 5 per transaction
