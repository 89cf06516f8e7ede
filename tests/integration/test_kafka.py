"""Kafka connectors (squall.connectors.kafka) against a real Kafka-protocol broker, on both runners.

One Tansu broker (tests/support/kafka_broker.py) and one Spark session per module; every test
uses its own topics. The broker's known limits and how they are worked around are listed in
tests/support/kafka_broker.py.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.kafka_broker import running_broker
from support.run_until import ErrorSeen, run_until
from support.runs import MAX_TUPLES

from squall import BasicBolt, Bolt, Fields, TopologyBuilder, Values, run
from squall.connectors import (
    JsonLinesSink,
    KafkaSink,
    KafkaSource,
    MemorySource,
    Range,
    SourceError,
    read_jsonl,
)
from squall.connectors.kafka import close_readers
from squall.testing import complete_topology

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tansu")) as b:
        yield b
        close_readers()


_names = iter(range(1_000_000))


def new_topic(broker, partitions=1, prefix="t"):
    return broker.create_topic(f"{prefix}{next(_names)}-{time.monotonic_ns()}", partitions)


class Collect(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(tup.source_stream_id, list(tup.values)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("stream", "values"))


def collect_topology(source, tasks=1):
    b = TopologyBuilder()
    b.set_spout("kafka", source, tasks)
    b.set_bolt("collect", Collect()).shuffle_grouping("kafka").shuffle_grouping(
        "kafka", "malformed")
    return b.create_topology()


def source(broker, topics, fields=("key", "value"), **kwargs):
    kwargs.setdefault("bounded", True)
    return KafkaSource(topics, fields, bootstrap_servers=broker.bootstrap, timeout=5,
                       **kwargs)


# ---- the source -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_topic(broker):
    """Three partitions of JSON values, two of them not JSON and one without the `n` field."""
    topic = new_topic(broker, 3)
    records = []
    for i in range(30):
        value = json.dumps({"word": f"w{i}", "n": i}).encode()
        if i == 7:
            value = b"not json"
        elif i == 20:
            value = b'{"word": "no-n"}'
        records.append((f"k{i}".encode(), value, i % 3))
    broker.produce(topic, records, headers=[("origin", b"test")], timestamp=1_700_000_000_000)
    return topic


def test_source_fields_and_malformed_records(runner, broker, mixed_topic):
    src = source(broker, [mixed_topic], ["key", "word", "n", "partition", "offset", "timestamp",
                                         "headers", "topic"], key_deserialiser="utf-8",
                 value_deserialiser="json")
    result = complete_topology(collect_topology(src, tasks=2), runner=runner)
    good = sorted((v for st, v in result.tuples("collect") if st == "default"),
                  key=lambda v: v[2])
    expected = []
    offsets = Counter()
    by_key = {}
    for i in range(30):
        p = i % 3
        by_key[i] = (p, offsets[p])
        offsets[p] += 1
        if i not in (7, 20):
            expected.append([f"k{i}", f"w{i}", i, p, by_key[i][1], 1_700_000_000_000,
                             [("origin", b"test")], mixed_topic])
    assert sorted(good, key=lambda v: v[2]) == expected
    bad = sorted(v for st, v in result.tuples("collect") if st == "malformed")
    p7, o7 = by_key[7]
    p20, o20 = by_key[20]
    assert [(b[0], b[1], b[2]) for b in bad] == sorted([
        (f"{mixed_topic}:{p7}", o7, "not json"), (f"{mixed_topic}:{p20}", o20,
                                                  '{"word": "no-n"}')])
    messages = sorted(b[3] for b in bad)
    assert any(f"{mixed_topic}:{p7} offset {o7}: the value does not deserialise" in m
               for m in messages), messages
    assert any(f"{mixed_topic}:{p20} offset {o20}: the value has no field 'n'" in m
               for m in messages), messages
    assert sorted((e.component, e.error.field) for e in result.errors) == [
        ("kafka", "n"), ("kafka", "value")]


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)],
                         indirect=True)
def test_max_records_per_partition_and_start_offsets(runner, broker):
    topic = new_topic(broker, 2)
    broker.produce(topic, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    src = source(broker, [topic], ["value", "partition", "offset"], max_records_per_partition=3,
                 start_offsets={f"{topic}:0": 5})
    result = complete_topology(collect_topology(src), runner=runner)
    got = sorted((v[1], v[2]) for _st, v in result.tuples("collect"))
    assert got == [(0, o) for o in range(5, 20)] + [(1, o) for o in range(20)]
    acked = result.acked("kafka")
    if runner == "spark":
        assert all(isinstance(r, Range) and r.end - r.start <= 3 for r in acked)
        assert sorted(r.start for r in acked if r.partition == f"{topic}:0") == list(
            range(5, 20, 3))
    else:
        assert sorted(acked) == sorted([(f"{topic}:0", o) for o in range(5, 20)]
                                       + [(f"{topic}:1", o) for o in range(20)])


def _reading():
    """(event, on_progress): the event is set once the run's sources read: at the first
    progress on the local runner (which opens its spouts before), once the first batch is done
    on Spark."""
    event = threading.Event()

    def on_progress(snapshot):
        if snapshot.runner == "local" or "first_batch_done_ms" in snapshot.startup:
            event.set()

    return event, on_progress


def test_source_start_latest_reads_only_what_comes_after(runner, broker, tmp_path):
    topic = new_topic(broker, 1)
    broker.produce(topic, [(None, f"old{i}".encode(), 0) for i in range(5)])
    out = tmp_path / "out"

    # The new records go in once the source has taken "latest" (the local runner opens its
    # spouts before the first progress; on Spark, once the first batch is done), not after a
    # fixed sleep: on a loaded machine Spark's start outlasted the sleep, and "latest" was then
    # taken after the new records.
    opened, on_progress = _reading()
    def produce_later():
        if opened.wait(60):
            broker.produce(topic, [(None, f"new{i}".encode(), 0) for i in range(3)])

    b = TopologyBuilder()
    b.set_spout("kafka", source(broker, [topic], ["value"], start="latest", bounded=False))
    b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("kafka")
    producer = threading.Thread(target=produce_later)
    producer.start()
    result = run_until(b.create_topology(), lambda: len(read_jsonl(out)) >= 3, runner=runner,
                       on_progress=on_progress)
    opened.set()  # the producer ends whatever happened
    producer.join()
    assert not result.errors
    assert sorted(r["value"] for r in read_jsonl(out)) == ["new0", "new1", "new2"]


@pytest.mark.xfail(strict=True, reason="Tansu does not implement offsets_for_times (ListOffsets "
                   "by timestamp answers offset 0 whatever the time); see "
                   "tests/support/kafka_broker.py")
def test_source_start_from_timestamp(runner, broker):
    topic = new_topic(broker, 1)
    for i in range(4):
        broker.produce(topic, [(None, f"v{i}".encode(), 0)], timestamp=1_700_000_000_000 + i)
    src = source(broker, [topic], ["value"], start_timestamp_ms=1_700_000_000_002)
    result = complete_topology(collect_topology(src), runner=runner)
    assert sorted(v[0] for _st, v in result.tuples("collect")) == ["v2", "v3"]


def test_a_bounded_read_with_the_defaults_reads_records_produced_in_batches(runner, broker,
                                                                           caplog):
    """Records produced in batches of several (Tansu's ListOffsets then answers the last
    batch's base offset + 1): the default end offsets (a fetch's high watermark) still read
    every one, and the read says what it read per partition."""
    from confluent_kafka import Producer

    topic = new_topic(broker, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(1000):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0
    src = source(broker, [topic], ["value"])
    with caplog.at_level(logging.INFO, logger="squall"):
        result = complete_topology(collect_topology(src), runner=runner)
    assert sorted(v[0] for _st, v in result.tuples("collect")) == sorted(
        f"v{i}" for i in range(1000))
    # On Spark the planner runs in the reader process, which hands its lines to the driver.
    told = [r.getMessage() for r in caplog.records if "bounded read of" in r.getMessage()]
    assert sorted(m.split(" planned")[0] for m in told) == [
        f"source 'kafka': bounded read of {topic}:{p}" for p in (0, 1)], told
    assert all("offsets 0 to 500 " in m for m in told), told


class FailOnce(Bolt):
    """Fails every record whose number ends in 3 the first time it sees it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = set()

    def execute(self, tup):
        n = int(tup["value"])
        if n % 10 == 3 and n not in self.seen:
            self.seen.add(n)
            self.collector.fail(tup)
            return
        self.collector.emit(Values(n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_failed_records_are_read_again_from_their_offsets(runner, broker):
    topic = new_topic(broker, 2)
    broker.produce(topic, [(None, str(i).encode(), i % 2) for i in range(40)])
    b = TopologyBuilder()
    b.set_spout("kafka", source(broker, [topic], ["value"], max_records_per_partition=5))
    b.set_bolt("check", FailOnce(), 2).fields_grouping("kafka", Fields("value"))
    result = complete_topology(b.create_topology(), {MAX_TUPLES: 10}, runner=runner)
    assert not result.errors
    passed = Counter(n for (n,) in result.tuples("check"))
    assert set(passed) == set(range(40))
    if runner == "local":
        assert sorted(passed.elements()) == list(range(40)), "only the failed records again"
        assert len(result.failed("kafka")) == 4


def test_new_partitions_are_picked_up(runner, broker, tmp_path):
    """Tansu cannot add partitions to a topic, so new partitions come as a new topic matching
    the source's pattern (each of its partitions is a new source partition)."""
    prefix = f"pat{next(_names)}x{time.monotonic_ns()}"
    first = broker.create_topic(f"{prefix}-a", 2)
    broker.produce(first, [(None, f"a{i}".encode(), i % 2) for i in range(6)])
    out = tmp_path / "out"

    # The new topic comes once the source reads (the first progress on the local runner, the
    # first batch done on Spark) and a little later, not at a fixed time a loaded machine's
    # Spark start may outlast (the topic would then exist before the source looked).
    reading, on_progress = _reading()
    def later():
        if not reading.wait(60):
            return
        time.sleep(2)
        second = broker.create_topic(f"{prefix}-b", 3)
        broker.produce(second, [(None, f"b{i}".encode(), i % 3) for i in range(9)])
        broker.produce(first, [(None, f"a{i}".encode(), i % 2) for i in range(6, 8)])

    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSource(None, ["value", "topic"], pattern=f"{prefix}-.*",
                                     bootstrap_servers=broker.bootstrap, timeout=5), 2)
    b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("kafka")
    thread = threading.Thread(target=later)
    thread.start()
    result = run_until(b.create_topology(), lambda: len(read_jsonl(out)) >= 17, runner=runner,
                       on_progress=on_progress)
    reading.set()  # the thread ends whatever happened
    thread.join()
    assert not result.errors
    assert sorted(r["value"] for r in read_jsonl(out)) == sorted(
        [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(9)])


def test_restart_reads_only_new_records(runner, broker, tmp_path):
    """Offsets live in squall's checkpoint on both runners: a restart reads only what is new."""
    topic = new_topic(broker, 2)
    broker.produce(topic, [(None, f"a{i}".encode(), i % 2) for i in range(10)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def topology():
        b = TopologyBuilder()
        b.set_spout("kafka", source(broker, [topic], ["value"]))
        b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("kafka")
        return b.create_topology()

    first = run(topology(), runner=runner, checkpoint_location=str(ckpt))
    assert not first.errors
    assert sorted(r["value"] for r in read_jsonl(out)) == sorted(f"a{i}" for i in range(10))
    broker.produce(topic, [(None, f"b{i}".encode(), i % 2) for i in range(6)])
    second = run(topology(), runner=runner, checkpoint_location=str(ckpt))
    assert not second.errors
    assert sorted(r["value"] for r in read_jsonl(out)) == sorted(
        [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(6)])


def test_group_offsets_committed_after_batches_commit(runner, broker):
    topic = new_topic(broker, 2)
    broker.produce(topic, [(None, f"v{i}".encode(), i % 2) for i in range(11)])
    group = f"lag-{topic}"
    src = source(broker, [topic], ["value"], commit_group=group, max_records_per_partition=2)
    result = complete_topology(collect_topology(src), runner=runner)
    assert len(result.tuples("collect")) == 11
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                     timeout=10)
    finally:
        reader.close()
    assert [tp.offset for tp in committed] == [6, 5]


def test_missing_topic_is_a_clear_error(runner, broker):
    topic = f"absent-{time.monotonic_ns()}"
    b = TopologyBuilder()
    b.set_spout("kafka", source(broker, [topic], ["value"], bounded=False))
    b.set_bolt("collect", Collect()).shuffle_grouping("kafka")
    # Until the error is out and the run has gone on polling for 3 s more (of its clock).
    seen = ErrorSeen(after_s=3)
    result = run_until(b.create_topology(), seen.done, runner=runner, on_progress=seen)
    messages = {str(e.error) for e in result.errors}
    assert len(result.errors) == 1, "reported once while it stays missing"
    (message,) = messages
    assert f"topic(s) ['{topic}'] do not exist on {broker.bootstrap}" in message
    assert "create them" in message and "[component 'kafka'" in message


def _run_unreachable(runner, bootstrap, config=None):
    """A topology whose source cannot get through to `bootstrap`: its one error, reported once
    while it lasts (not on every poll), and nothing read."""
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSource(["events"], ["value"], bootstrap_servers=bootstrap,
                                     timeout=1, config=config))
    b.set_bolt("collect", Collect()).shuffle_grouping("kafka")
    seen = ErrorSeen(after_s=4)
    result = run_until(b.create_topology(), seen.done, runner=runner, on_progress=seen)
    assert result.stats["collect"].executed == 0
    assert len({str(e.error) for e in result.errors}) == 1, result.errors
    return str(result.errors[0].error)


def test_broker_down_is_a_clear_error(runner):
    from support.kafka_broker import free_port

    port = free_port()  # nothing listens there
    message = _run_unreachable(runner, f"127.0.0.1:{port}")
    assert re.search(rf"could not list the topics \(topics \['events'\] on 127.0.0.1:{port}\)"
                     r".*start Kafka or fix bootstrap_servers.*Nothing is lost", message), message


def test_a_broker_requiring_authentication_is_a_clear_error(runner, tmp_path):
    """Tansu with --authentication closes connections whose SASL it does not share, which
    librdkafka reports as a transport failure: the error says to check the security settings
    too."""
    from support.kafka_broker import Broker

    secured = Broker(tmp_path, args=["--authentication"]).start()
    try:
        message = _run_unreachable(runner, secured.bootstrap, {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "squall", "sasl.password": "wrong"})
    finally:
        secured.stop()
    assert re.search(r"could not list the topics .*check security\.protocol and sasl\.\* in "
                     r"config", message), message


def test_bad_settings_are_refused_with_what_to_do(broker):
    with pytest.raises(SourceError, match="either topics or pattern"):
        KafkaSource(None, ["value"], bootstrap_servers=broker.bootstrap)
    with pytest.raises(SourceError, match="value_deserialiser='json'"):
        KafkaSource(["t"], ["user"], bootstrap_servers=broker.bootstrap)
    with pytest.raises(SourceError, match="start must be 'earliest' or 'latest'"):
        KafkaSource(["t"], ["value"], bootstrap_servers=broker.bootstrap, start="middle")
    with pytest.raises(SourceError, match="key_deserialiser must be one of"):
        KafkaSource(["t"], ["key"], bootstrap_servers=broker.bootstrap, key_deserialiser="avro")


# ---- the sink -------------------------------------------------------------------------------

WORDS = {"p0": [[f"w{i}", i, i % 2] for i in range(0, 25)],
         "p1": [[f"w{i}", i, i % 2] for i in range(25, 40)]}


def sink_topology(broker, topic, **kwargs):
    b = TopologyBuilder()
    b.set_spout("words", MemorySource(WORDS, Fields("word", "n", "p"), records_per_range=7), 2)
    # Partition p is written by out's task p alone: Tansu can lose the completion of
    # transactions that overlap on a partition and commit at the same moment (see
    # support/kafka_broker.py).
    b.set_bolt("out", KafkaSink(topic, bootstrap_servers=broker.bootstrap, key_field="word",
                                value_field=None, partition_field="p", **kwargs),
               2).fields_grouping("words", Fields("p"))
    return b.create_topology()


@pytest.mark.parametrize("transactional", [False, True])
def test_sink_writes_every_tuple(runner, broker, transactional):
    topic = new_topic(broker, 2)
    result = complete_topology(sink_topology(broker, topic, transactional=transactional),
                               {MAX_TUPLES: 9}, runner=runner)
    assert not result.errors
    got = sorted((m.key().decode(), json.loads(m.value())["n"])
                 for m in broker.read_all(topic))
    assert got == sorted((f"w{i}", i) for i in range(40))


def test_transactional_sink_skips_a_replayed_batch_it_committed(broker):
    """The same batch id run again from the snapshot the batch started from (what Spark does
    after a crash after the sink's transaction committed): skipped by its marker."""
    from support.sink_tasks import execute, replay, sink_task

    topic = new_topic(broker, 2)
    rows = [[1, "a", 10], [2, "b", 20], [3, "c", 30]]

    def sink():
        return KafkaSink(topic, bootstrap_servers=broker.bootstrap, key_field="word",
                         value_field="n", value_serialiser="json", transactional=True,
                         prefix=f"replay-{topic}")

    engine, task = sink_task(sink())
    replay(engine, task, rows, 4)
    assert task.instance.batches_skipped == 1
    assert task.stats.acked == 6 and task.stats.failed == 0 and engine.errors == []
    execute(engine, task, [[4, "d", 40]])
    task.end_batch(5)  # a new batch id is written
    # A fresh run (batch ids from 0 again, same prefix) is not mistaken for a replay.
    engine2, task2 = sink_task(sink())
    execute(engine2, task2, [[5, "e", 50]])
    task2.end_batch(4)
    assert task2.instance.batches_skipped == 0
    for t in (task, task2):
        t.cleanup()
    got = sorted((m.key().decode(), json.loads(m.value())) for m in broker.read_all(topic))
    assert got == [("a", 10), ("b", 20), ("c", 30), ("d", 40), ("e", 50)]


def test_sink_delivery_error_names_topic_and_partition(runner, broker):
    from squall.errors import SquallError

    topic = new_topic(broker, 1)
    b = TopologyBuilder()
    b.set_spout("words", MemorySource({"p0": [["a", 7]]}, Fields("word", "p")))
    b.set_bolt("out", KafkaSink(topic, bootstrap_servers=broker.bootstrap, key_field="word",
                                value_field="word", partition_field="p", timeout=5),
               ).shuffle_grouping("words")
    if runner == "local":
        # Not a transaction: the batch's tuples fail and are replayed (every time it fails).
        result = run(b.create_topology(), runner=runner, duration=3)
        errors = [str(e.error) for e in result.errors]
        assert result.stats["out"].failed >= 1 and result.stats["words"].acked == 0
    else:
        with pytest.raises(SquallError) as info:
            complete_topology(b.create_topology(), {"squall.spark.batch.max.attempts": 1},
                              runner=runner)
        errors = [str(info.value)]
    import re

    assert errors and all(re.search(
        rf"KafkaSink could not deliver batch \d+ of task \d+ to topic '{topic}' on "
        rf"{broker.bootstrap}: partition 7: .*Unknown partition.*\[component 'out'\]", m)
        for m in errors), errors
