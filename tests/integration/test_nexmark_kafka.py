"""NEXMark queries over Kafka: a topic of flat-row JSON records (`kafka_records`, position `i` to
partition `i mod 2`) read by a `KafkaSource` (Storm-API and windowed queries) and a
`KafkaTransactionalSpout` (Trident), on both runners; a representative subset of the queries
equals the reference exactly: joins and changelogs (q3, q9), windows with late and dropped
events (q5, q7), sessions (q11), a stateless and two aggregating Trident queries (q1, q15, q19).

One Tansu broker per module (tests/support/kafka_broker.py). The Spark runs are in CI's second
run (`extended`): the files module runs every query on Spark already, and two more Spark runs
would take the new tests past their share of the default run.
"""

from __future__ import annotations

import time

import pytest
from support.kafka_broker import running_broker
from support.nexmark import CONF, EVENT_TIME, PARTITIONS, TIME, config, reference
from support.runs import complete_cached

from squall import Fields
from squall.connectors import KafkaSource
from squall.connectors.kafka import close_readers
from squall.nexmark import ROW_FIELDS, kafka_records
from squall.nexmark.generator import events
from squall.nexmark.queries import storm_topology, trident_topology
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import DROPPED, judge
from squall.nexmark.reference.lateness import fixed
from squall.transactional import KafkaTransactionalSpout

pytestmark = pytest.mark.kafka

CONFIG = config(3_000)
STORM = ("q3", "q5", "q7", "q9", "q11")
TRIDENT = ("q1", "q15", "q19")
RUNNERS = [pytest.param("local", id="local"),
           pytest.param("spark", id="spark", marks=[pytest.mark.spark, pytest.mark.extended])]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tansu")) as b:
        yield b
        close_readers()


@pytest.fixture(scope="module")
def topic(broker):
    name = broker.create_topic(f"nexmark-{time.monotonic_ns()}", PARTITIONS)
    assert broker.produce(name, kafka_records(CONFIG, PARTITIONS)) == CONFIG.max_events
    return name


@pytest.fixture(scope="module")
def stream():
    return list(events(CONFIG))


def test_the_stream_drops_late_events(stream):
    assert DROPPED in {s for *_, s in judge(stream, EVENT_TIME, fixed(10_000))}



@pytest.mark.parametrize("runner", RUNNERS, indirect=True)
@pytest.mark.parametrize("query", STORM)
def test_storm_and_windowed_queries_over_kafka(request, runner, broker, topic, stream, query):
    def build():
        source = KafkaSource([topic], ROW_FIELDS, bootstrap_servers=broker.bootstrap,
                             value_deserialiser="json", bounded=True)
        return storm_topology(source, STORM, time=TIME)
    result = complete_cached(request, "storm", runner, build, CONF)
    assert not result.errors
    expected = reference(query, stream)
    assert expected
    assert canonical(query, result.tuples(query)) == expected


@pytest.mark.parametrize("runner", RUNNERS, indirect=True)
@pytest.mark.parametrize("query", TRIDENT)
def test_trident_queries_over_kafka(request, runner, broker, topic, stream, query):
    def build():
        spout = KafkaTransactionalSpout([topic], Fields(*ROW_FIELDS),
                                        bootstrap_servers=broker.bootstrap,
                                        value_deserialiser="json", max_batch=1_000,
                                        stop_when_empty=True, timeout=5)
        return trident_topology(spout, TRIDENT)
    result = complete_cached(request, "trident", runner, build, CONF)
    assert not result.errors
    expected = reference(query, stream)
    assert expected
    assert canonical(query, result.tuples(query)) == expected
