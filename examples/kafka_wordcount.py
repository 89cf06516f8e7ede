"""Word count from Kafka to Kafka: sentences in, running word counts out, exactly once.

    KAFKA_BOOTSTRAP=broker1:9092,broker2:9092 KAFKA_INPUT=sentences KAFKA_OUTPUT=word-counts \
        squall run examples/kafka_wordcount.py:topology --checkpoint /data/kafka-wc

`sentences` is a `KafkaSource`: one source partition per Kafka partition of the input topic, its
offsets kept in squall's checkpoint (a restart with the same `--checkpoint` reads only what is
new, and replays exactly what an interrupted batch had read). `split` splits each record's value
into words, `count` keeps a count per word (fields grouping: each word on one task; its counts
are part of the checkpoint too) and `out` writes `word -> count` records to the output topic
with a transactional producer: each micro-batch's records commit together or not at all, and a
batch replayed after a crash is not written twice. Read the output with
`isolation.level=read_committed` (librdkafka's default).

Settings, from the environment: `KAFKA_BOOTSTRAP` (default 127.0.0.1:9092), `KAFKA_INPUT`
(default `sentences`), `KAFKA_OUTPUT` (default `word-counts`), `KAFKA_CONFIG` (librdkafka
settings as JSON, for both the source and the sink, e.g. `{"security.protocol": "SASL_SSL",
"sasl.mechanism": "PLAIN", "sasl.username": "...", "sasl.password": "..."}`) and
`KAFKA_BOUNDED=1` (read what the input holds at the start, then stop).
"""

from __future__ import annotations

import json
import os
from typing import Any

from squall import BasicBolt, Bolt, Fields, TopologyBuilder, Values
from squall.connectors import KafkaSink, KafkaSource


class Split(BasicBolt):
    def execute(self, tup, collector) -> None:
        for word in (tup["value"] or "").split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word"))


class Count(Bolt):
    """A running count per word; emits `(word, count)` anchored to the word."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup) -> None:
        word = tup["word"]
        n = self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit(Values(word, n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


def build(bootstrap: str = "127.0.0.1:9092", source_topic: str = "sentences",
          sink_topic: str = "word-counts", config: dict[str, Any] | None = None,
          bounded: bool = False, tasks: int = 2) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSource([source_topic], ["value"],
                                               bootstrap_servers=bootstrap, config=config,
                                               bounded=bounded), tasks)
    builder.set_bolt("split", Split(), tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), tasks).fields_grouping("split", Fields("word"))
    builder.set_bolt("out", KafkaSink(sink_topic, bootstrap_servers=bootstrap, config=config,
                                      key_field="word", value_field="count",
                                      transactional=True), tasks).shuffle_grouping("count")
    return builder.create_topology()


def topology() -> Any:
    """For `squall run`: settings from the environment (see the module docstring)."""
    env = os.environ
    return build(env.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"), env.get("KAFKA_INPUT", "sentences"),
                 env.get("KAFKA_OUTPUT", "word-counts"), json.loads(env.get("KAFKA_CONFIG", "{}")),
                 env.get("KAFKA_BOUNDED", "") not in ("", "0"))
