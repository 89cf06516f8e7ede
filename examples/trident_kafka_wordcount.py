"""Trident word count from Kafka to Kafka: exact counts, each batch's new counts in a topic.

    KAFKA_BOOTSTRAP=broker1:9092 KAFKA_INPUT=sentences KAFKA_OUTPUT=word-counts \\
        squall run examples/trident_kafka_wordcount.py:topology --checkpoint /data/trident-kafka

squall's fast path on Spark (Storm's Trident API): a `KafkaTransactionalSpout` reads up to
`max_batch` records of every partition per transaction (a replay reads the same offsets), a
vectorised `BatchFunction` splits whole Arrow columns of sentences into words (in Spark's
Python workers), `Count` runs as partial aggregates in the workers and Spark's JVM, and the
counts live in a durable transactional map under the checkpoint location, updated exactly once
per transaction. Each transaction's changed counts are written to `KAFKA_OUTPUT` by a
`KafkaStateFactory` state (Storm's `TridentKafkaState`), keyed by word, in one Kafka transaction
per Trident transaction: exactly once (readers use `isolation.level=read_committed`, librdkafka's
default), so the last record of a word is its count.

Settings, from the environment: `KAFKA_BOOTSTRAP` (default 127.0.0.1:9092), `KAFKA_INPUT`
(default `sentences`), `KAFKA_OUTPUT` (default `word-counts`), `KAFKA_CONFIG` (librdkafka
settings as JSON: security.protocol, sasl.*, ...) and `KAFKA_BOUNDED=1` (stop once every
partition has been read to its end).
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import pyarrow.compute as pc

from squall import Fields
from squall.connectors import KafkaStateFactory, KafkaStateUpdater
from squall.transactional import KafkaTransactionalSpout
from squall.trident import ROW, BatchFunction, Count, TridentTopology
from squall.trident.state import DurableMapState, StateType


class SplitSentences(BatchFunction):
    """Sentences -> words, a whole Arrow column at a time (`ROW`: each word's sentence)."""

    output_types: ClassVar = {"word": str}

    def execute_batch(self, table):
        words = pc.split_pattern_regex(table["value"], r"\s+")
        flat, rows = pc.list_flatten(words), pc.list_parent_indices(words)
        keep = pc.not_equal(flat, "")  # around leading, trailing or no whitespace
        return {"word": pc.filter(flat, keep), ROW: pc.filter(rows, keep)}


def build(bootstrap: str = "127.0.0.1:9092", source: str = "sentences",
          sink: str = "word-counts", config: dict[str, Any] | None = None,
          bounded: bool = False, max_batch: int = 100_000) -> Any:
    spout = KafkaTransactionalSpout([source], Fields("value"), bootstrap_servers=bootstrap,
                                    config=config, max_batch=max_batch, stop_when_empty=bounded)
    t = TridentTopology()
    counts = (t.new_stream("sentences", spout)
              .each(["value"], SplitSentences(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(),
                                    ["count"]).name("counts"))
    counts.new_values_stream().partition_persist(
        KafkaStateFactory(sink, bootstrap_servers=bootstrap, key_field="word",
                          value_field="count", transactional=True, config=config),
        ["word", "count"], KafkaStateUpdater()).name("out")
    return t.build()


def topology() -> Any:
    """For `squall run`: settings from the environment (see the module docstring)."""
    env = os.environ
    return build(env.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                 env.get("KAFKA_INPUT", "sentences"), env.get("KAFKA_OUTPUT", "word-counts"),
                 json.loads(env.get("KAFKA_CONFIG", "{}")),
                 env.get("KAFKA_BOUNDED", "") not in ("", "0"))
