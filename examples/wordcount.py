"""Word count: a reliable sentence spout, a splitter and a counter, with at-least-once processing.

    squall run examples/wordcount.py:topology -c wordcount.sentences=20000

The spout replays any sentence whose tuple tree fails or times out; `split` anchors every word to
its sentence (BasicBolt); `count` keeps a count per word (fields grouping sends each word to one
task) and anchors its updates; `report` (global grouping) keeps the latest count of every word and
prints the top ten and the total when the topology stops.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Bolt, Config, Fields, Spout, TopologyBuilder, Values

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Emits `wordcount.sentences` sentences (seeded), each once, replaying failed ones."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        total = int(conf.get("wordcount.sentences", 50_000))
        n, i = len(context.this_component_tasks), context.this_task_index
        rnd = random.Random(conf.get("squall.random.seed", 0))
        self.sentences = [rnd.choice(SENTENCES) for _ in range(total)]
        self.next_id = i
        self.step = n
        self.pending: dict[int, str] = {}
        self.replay: list[int] = []
        self.replayed = 0

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.pop()
            self.replayed += 1
        elif self.next_id < len(self.sentences):
            msg_id = self.next_id
            self.next_id += self.step
        else:
            return
        self.pending[msg_id] = self.sentences[msg_id]
        self.collector.emit(Values(self.sentences[msg_id]), msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        del self.pending[msg_id]

    def fail(self, msg_id: Any) -> None:
        self.pending.pop(msg_id, None)
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


class WordCount(Bolt):
    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup) -> None:
        word = tup["word"]
        n = self.counts.get(word, 0) + 1
        self.counts[word] = n
        self.collector.emit(Values(word, n), anchors=tup)
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
        print(f"word count: {sum(self.latest.values())} words, {len(self.latest)} distinct")
        for word, count in top:
            print(f"{count:>10}  {word}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(), parallelism=2)
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=3).fields_grouping("split", Fields("word"))
    builder.set_bolt("report", Report()).global_grouping("count")
    return builder


def topology():
    conf = Config()
    conf.set_num_ackers(1)
    conf.set_max_spout_pending(10_000)
    return build().create_topology(), conf
