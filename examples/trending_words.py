"""Rolling top-N trending words over a sliding event-time window.

    squall run examples/trending_words.py:topology -c trending.words=2000

`words` emits `trending.words` words (seeded) with event timestamps that advance about 100 ms per
word and arrive up to 2 s out of order; `rolling` counts words over a 30 s window sliding every 10
s in event time (lag 2 s, so the disorder is absorbed) and emits the top `trending.top` (default 3)
of each window; `report` prints every window's ranking when the topology stops. The windows do not
depend on how the input is cut into micro-batches, so every runner prints the same rankings.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from squall import BasicBolt, Config, Duration, Fields, Spout, TopologyBuilder, Values, WindowedBolt

WORDS = ["storm", "spark", "squall", "window", "tuple", "stream", "bolt", "spout"]
START_MS = 1_700_000_000_000


def generate(n: int, seed: int = 0) -> list[tuple[str, int]]:
    """The (word, timestamp) stream: skewed word choice, timestamps jittered within 2 s."""
    rnd = random.Random(seed)
    weights = [8, 6, 5, 3, 2, 2, 1, 1]
    out = []
    for i in range(n):
        word = rnd.choices(WORDS, weights)[0]
        out.append((word, START_MS + i * 100 + rnd.randrange(-2000, 1)))
    return out


class WordSpout(Spout):
    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.rows = generate(int(conf.get("trending.words", 2000)),
                             int(conf.get("squall.random.seed", 0)))
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(self.rows):
            self.collector.emit(Values(*self.rows[self.i]), msg_id=self.i)
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "ts"))


class RollingTopWords(WindowedBolt):
    """Counts words in each window and emits the top N as (window end, [[word, count], ...])."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.top = int(conf.get("trending.top", 3))

    def execute(self, window) -> None:
        counts = Counter(t["word"] for t in window.get())
        ranking = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top]
        self.collector.emit(Values(window.end_timestamp, [list(kv) for kv in ranking]))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("end", "ranking"))


class Report(BasicBolt):
    """Keeps each window's ranking; prints them in window order when the topology stops (on the
    driver's stdout, also on Spark, where `execute` runs on executors)."""

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.rankings: dict[int, str] = {}

    def execute(self, tup, collector) -> None:
        self.rankings[tup["end"]] = ", ".join(f"{w} {c}" for w, c in tup["ranking"])

    def cleanup(self) -> None:
        for end, ranking in sorted(self.rankings.items()):
            print(f"window ending +{(end - START_MS) / 1000:.0f}s: {ranking}")


def build() -> TopologyBuilder:
    rolling = (RollingTopWords().with_window(Duration.seconds(30), Duration.seconds(10))
               .with_timestamp_field("ts").with_lag(Duration.seconds(2)))
    builder = TopologyBuilder()
    builder.set_spout("words", WordSpout())
    builder.set_bolt("rolling", rolling).global_grouping("words")
    builder.set_bolt("report", Report()).global_grouping("rolling")
    return builder


def topology() -> tuple[Any, Config]:
    conf = Config()
    conf.set_num_ackers(1)
    conf.set_message_timeout_secs(120)
    return build().create_topology(), conf
