"""Storm's SlidingWindowTopology: a sliding-window sum feeding a tumbling-window average.

    squall run examples/sliding_window.py:topology -c sliding.count=300

`integers` emits `sliding.count` random integers (seeded), each tracked; `slidingsum` keeps the sum
of the last 30 of them, updated every 10 from the window's new and expired tuples (Count(30)
sliding Count(10)); `tumblingavg` averages every 3 sums (a tumbling Count(3) window); `printer`
prints the averages when the topology stops. Every emit inside a window is anchored to the window's
tuples, and each input is acked when it leaves its window, so spout tuples complete once no window
needs them.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Config, Count, Fields, Spout, TopologyBuilder, Values, WindowedBolt


class RandomIntegerSpout(Spout):
    """Emits `sliding.count` (default 300) integers in [0, 1000), seeded, each once."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.total = int(conf.get("sliding.count", 300))
        self.rnd = random.Random(conf.get("squall.random.seed", 0))
        self.n = 0

    def next_tuple(self) -> None:
        if self.n < self.total:
            self.collector.emit(Values(self.rnd.randrange(1000), self.n), msg_id=self.n)
            self.n += 1

    def is_exhausted(self) -> bool:
        return self.n >= self.total

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("value", "seq"))


class SlidingWindowSumBolt(WindowedBolt):
    """The sum of the window, kept incrementally: add what is new, subtract what expired."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.sum = 0

    def execute(self, window) -> None:
        self.sum += sum(t["value"] for t in window.get_new())
        self.sum -= sum(t["value"] for t in window.get_expired())
        self.collector.emit(Values(self.sum))  # anchored to the window's tuples

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sum"))


class TumblingWindowAvgBolt(WindowedBolt):
    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, window) -> None:
        sums = [t["sum"] for t in window.get()]
        self.collector.emit(Values(sum(sums) / len(sums)))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("avg"))


class Printer(BasicBolt):
    """Keeps the averages and prints them when the topology stops.

    Printing in `cleanup` puts the result on the driver's stdout on Spark too, where `execute`
    runs on executors whose output goes to their logs.
    """

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.averages: list[float] = []

    def execute(self, tup, collector) -> None:
        self.averages.append(tup["avg"])

    def cleanup(self) -> None:
        for avg in self.averages:
            print(f"avg of sums: {avg:.2f}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("integers", RandomIntegerSpout())
    builder.set_bolt("slidingsum", SlidingWindowSumBolt().with_window(Count(30), Count(10))
                     ).shuffle_grouping("integers")
    builder.set_bolt("tumblingavg", TumblingWindowAvgBolt().with_tumbling_window(Count(3))
                     ).shuffle_grouping("slidingsum")
    builder.set_bolt("printer", Printer()).shuffle_grouping("tumblingavg")
    return builder


def topology() -> tuple[Any, Config]:
    conf = Config()
    conf.set_num_ackers(1)
    return build().create_topology(), conf
