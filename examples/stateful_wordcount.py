"""Stateful word count: the counts are checkpointed state, so they survive a restart.

    squall run examples/stateful_wordcount.py:topology --checkpoint /tmp/swc
    squall run examples/stateful_wordcount.py:topology --runner local \
        -c topology.state.provider=durable -c 'topology.state.provider.config={"dir": "/tmp/swc"}'

On Spark the state is durable under the checkpoint location by default and every micro-batch is a
checkpoint: run it twice on the same checkpoint and the second run's counts continue from the
first's, each sentence counted once. On the local runner Storm's checkpoint protocol runs (every
`topology.state.checkpoint.interval.ms`); with the durable provider and a directory, as above,
the counts survive a restart there too (in memory otherwise). `report` prints the top counts
when the topology stops.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Config, Fields, Spout, StatefulBolt, TopologyBuilder, Values

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Emits `stateful_wordcount.sentences` seeded sentences once each, replaying failed ones."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        total = int(conf.get("stateful_wordcount.sentences", 2_000))
        rnd = random.Random(conf.get("squall.random.seed", 0))
        self.sentences = [rnd.choice(SENTENCES) for _ in range(total)]
        self.next_id = 0
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.pop()
        elif self.next_id < len(self.sentences):
            msg_id, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        self.collector.emit(Values(self.sentences[msg_id]), msg_id=msg_id)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def is_exhausted(self) -> bool:
        return self.next_id >= len(self.sentences) and not self.replay

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence"))


class SplitSentence(BasicBolt):
    def execute(self, tup, collector) -> None:
        for word in tup.get_string(0).split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word"))


class WordCount(StatefulBolt):
    """The count of every word is in the bolt's `KeyValueState`."""

    def init_state(self, state) -> None:
        self.counts = state

    def execute(self, tup) -> None:
        word = tup["word"]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.collector.emit(Values(word, n), anchors=tup)  # stateful topologies anchor
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


class Report(BasicBolt):
    """Keeps the latest count per word; prints the top ten when the topology stops."""

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.latest: dict[str, int] = {}

    def execute(self, tup, collector) -> None:
        self.latest[tup["word"]] = tup["count"]

    def cleanup(self) -> None:
        top = sorted(self.latest.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        print(f"stateful word count: {len(self.latest)} distinct words updated")
        for word, count in top:
            print(f"{count:>10}  {word}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout())
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=2).fields_grouping("split", Fields("word"))
    builder.set_bolt("report", Report()).global_grouping("count")
    return builder


def topology():
    conf = Config({"topology.state.checkpoint.interval.ms": 200})
    return build().create_topology(), conf
