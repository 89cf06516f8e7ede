"""A transactional word count from Kafka: exact counts in a durable map, whatever fails.

    KAFKA_BOOTSTRAP=broker1:9092 KAFKA_INPUT=words \\
        squall run examples/kafka_transactional_count.py:topology --checkpoint /data/kafka-tx

The spout is a `KafkaTransactionalSpout`: each transaction takes up to `max_batch` records of
every Kafka partition and stores their offsets `[start, end)` before the transaction starts, so
a replayed transaction reads exactly the same records. `count` (a committer, fields-grouped by
word) counts the words of a batch and adds them to the map `kafka-word-counts` in the commit
phase, in transaction order, with the transaction id stored beside each count: a commit that is
replayed after a failure is not applied twice. Each record's value is one word
(`value_deserialiser="utf-8"`); use `KafkaOpaqueSpout` when the topic may lose records before a
failed transaction is replayed (its replays start where the previous transaction ended).

Settings, from the environment: `KAFKA_BOOTSTRAP` (default 127.0.0.1:9092), `KAFKA_INPUT`
(default `words`), `KAFKA_CONFIG` (librdkafka settings as JSON: security.protocol, sasl.*, ...),
`KAFKA_COUNTS_DIR` (where the counts live; default a new temporary directory per run) and
`KAFKA_BOUNDED=1` (stop once every partition has been read to its end).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from typing import Any

from squall import Config, Fields
from squall.transactional import (
    BatchBolt,
    Committer,
    KafkaTransactionalSpout,
    TransactionalTopologyBuilder,
    open_map,
)


class CountWords(BatchBolt, Committer):
    """Counts its words of a batch; adds them to the durable map in the commit phase."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.dir, self.attempt = conf["kafka_count.dir"], attempt
        self.counts: Counter[str] = Counter()

    def execute(self, tup) -> None:
        self.counts[tup["value"]] += 1

    def finish_batch(self) -> None:
        counts = open_map("kafka-word-counts", provider="durable", config={"dir": self.dir})
        counts.update(self.attempt.transaction_id,
                      {w: (lambda n, c=c: n + c) for w, c in self.counts.items()}, initial=0)
        counts.close()

    def declare_output_fields(self, declarer) -> None:
        pass


def build(bootstrap: str = "127.0.0.1:9092", topic: str = "words",
          config: dict[str, Any] | None = None, bounded: bool = False,
          max_batch: int = 1000) -> Any:
    spout = KafkaTransactionalSpout([topic], ["value"], bootstrap_servers=bootstrap,
                                    config=config, max_batch=max_batch,
                                    stop_when_empty=bounded)
    builder = TransactionalTopologyBuilder("kafka-count", "spout", spout, 2)
    builder.set_bolt("count", CountWords(), 2).fields_grouping("spout", Fields("value"))
    return builder.create_topology()


def read_counts(directory: str) -> dict[str, int]:
    """The committed counts (what the topology wrote under `directory`)."""
    counts = open_map("kafka-word-counts", provider="durable", config={"dir": directory})
    try:
        return dict(counts.values())
    finally:
        counts.close()


def topology() -> Any:
    """For `squall run`: settings from the environment (see the module docstring)."""
    env = os.environ
    directory = env.get("KAFKA_COUNTS_DIR") or tempfile.mkdtemp(prefix="squall-kafka-count-")
    topo = build(env.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"), env.get("KAFKA_INPUT", "words"),
                 json.loads(env.get("KAFKA_CONFIG", "{}")),
                 env.get("KAFKA_BOUNDED", "") not in ("", "0"))
    return topo, Config({"kafka_count.dir": directory})
