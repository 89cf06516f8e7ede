"""Storm's StatefulWindowingTopology: a sliding-window sum whose running total is state.

    squall run examples/stateful_windowing.py:topology
    squall run examples/stateful_windowing.py:topology --runner local

`integers` emits `stateful_windowing.count` (default 300) seeded random integers, each with a
message id `msgid` (`stateful_windowing.first_id`, default 0, then 1, 2, ...) that a replay
repeats. `sumbolt` is a `StatefulWindowedBolt`
over a window of the last 5 integers sliding every 3 (Count(5), Count(3)), with
`with_message_id_field("msgid")`: for each window it adds the window's values to a running total
kept in its `KeyValueState` under `"sum"`, and emits the total. `printer` prints how many windows it
saw and the last total when the topology stops; both runners print the same.

The total is checkpointed state, so it survives a restart. On Spark it is durable under the
checkpoint location by default (`--checkpoint DIR`; a restart resumes there). On the local runner
give the durable provider a directory; a second run that continues the ids (as a source read
from its offsets would) adds its windows to the first run's total:

    squall run examples/stateful_windowing.py:topology --runner local \
        -c topology.state.provider=durable -c 'topology.state.provider.config={"dir": "/tmp/sw"}'
    squall run ... (the same) -c stateful_windowing.first_id=300

Ids the state has already seen are replays to the bolt: run again from id 0 and it drops them.

After a crash the message ids let the bolt rebuild its window from the replayed tuples without
evaluating any window twice (docs/design/state.md, "Stateful windowing").
"""

from __future__ import annotations

import random
from typing import Any

from squall import (
    BasicBolt,
    Config,
    Count,
    Fields,
    Spout,
    StatefulWindowedBolt,
    TopologyBuilder,
    Values,
)


class RandomIntegerSpout(Spout):
    """Emits `stateful_windowing.count` integers in [0, 100), seeded, with ids; replays fails."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.first = int(conf.get("stateful_windowing.first_id", 0))
        total = int(conf.get("stateful_windowing.count", 300))
        rnd = random.Random(conf.get("squall.random.seed", 0))
        self.values = [rnd.randrange(100) for _ in range(self.first + total)]
        self.next_id = self.first
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            msgid = self.replay.pop()
        elif self.next_id < len(self.values):
            msgid, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        self.collector.emit(Values(self.values[msgid], msgid), msg_id=msgid)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def is_exhausted(self) -> bool:
        return self.next_id >= len(self.values) and not self.replay

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("value", "msgid"))


class WindowSumBolt(StatefulWindowedBolt):
    """Adds every window's values to the running total in its state, and emits the total."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def init_state(self, state) -> None:
        self.state = state
        self.sum = state.get("sum", 0)

    def execute(self, window) -> None:
        self.sum += sum(t["value"] for t in window.get())
        self.state.put("sum", self.sum)
        self.collector.emit(Values(self.sum))  # anchored to the window's tuples

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sum"))


class Printer(BasicBolt):
    """Prints, when the topology stops, how many totals it saw and the last one.

    Printing in `cleanup` puts the result on the driver's stdout on Spark too.
    """

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.windows = 0
        self.last: int | None = None

    def execute(self, tup, collector) -> None:
        self.windows += 1
        self.last = tup["sum"]

    def cleanup(self) -> None:
        print(f"stateful windowing: {self.windows} windows, running sum {self.last}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("integers", RandomIntegerSpout())
    builder.set_bolt("sumbolt", WindowSumBolt().with_window(Count(5), Count(3))
                     .with_message_id_field("msgid")).shuffle_grouping("integers")
    builder.set_bolt("printer", Printer()).shuffle_grouping("sumbolt")
    return builder


def topology():
    conf = Config({"topology.state.checkpoint.interval.ms": 200})
    return build().create_topology(), conf
