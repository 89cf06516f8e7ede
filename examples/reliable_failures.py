"""At-least-once under injected failures: every spout tuple is fully processed at least once.

    squall run examples/reliable_failures.py:topology -c failures.rate=0.2

`flaky` fails a random share of its inputs (explicit fail) and drops another share without
acking (so their trees time out); the spout replays both. `ledger` records every item that made it
through; when the topology stops the spout prints how many items were fully processed, how many
replays that took, and whether any item was lost.
"""

from __future__ import annotations

import random
from typing import Any

from squall import Bolt, Config, Fields, Spout, TopologyBuilder, Values


class ItemSpout(Spout):
    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.total = int(conf.get("failures.items", 2_000))
        self.next_item = 0
        self.replay: list[int] = []
        self.acked: set[int] = set()
        self.fails = 0

    def next_tuple(self) -> None:
        if self.replay:
            item = self.replay.pop(0)
        elif self.next_item < self.total:
            item = self.next_item
            self.next_item += 1
        else:
            return
        self.collector.emit(Values(item), msg_id=item)

    def ack(self, msg_id: Any) -> None:
        self.acked.add(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.fails += 1
        self.replay.append(msg_id)

    def is_exhausted(self) -> bool:
        return self.next_item >= self.total and not self.replay

    def close(self) -> None:
        lost = self.total - len(self.acked)
        print(f"items fully processed: {len(self.acked)}/{self.total}; "
              f"failures replayed: {self.fails}; lost: {lost}")

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("item"))


class FlakyBolt(Bolt):
    """Fails `failures.rate` of its inputs and silently drops `failures.drop_rate` of them."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.rate = float(conf.get("failures.rate", 0.2))
        self.drop_rate = float(conf.get("failures.drop_rate", 0.05))
        self.rnd = random.Random(1000 + context.this_task_id)

    def execute(self, tup) -> None:
        r = self.rnd.random()
        if r < self.rate:
            self.collector.fail(tup)
        elif r < self.rate + self.drop_rate:
            pass  # never acked: the tree times out and the spout replays it
        else:
            self.collector.emit(Values(tup["item"]), anchors=tup)
            self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("item"))


class LedgerBolt(Bolt):
    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.seen: dict[int, int] = {}

    def execute(self, tup) -> None:
        item = tup["item"]
        self.seen[item] = self.seen.get(item, 0) + 1
        self.collector.emit(Values(item, self.seen[item]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("item", "times"))


def topology():
    builder = TopologyBuilder()
    builder.set_spout("items", ItemSpout())
    builder.set_bolt("flaky", FlakyBolt(), parallelism=2).shuffle_grouping("items")
    builder.set_bolt("ledger", LedgerBolt(), parallelism=2).fields_grouping("flaky", Fields("item"))
    conf = Config({"topology.message.timeout.secs": 2})
    conf.set_max_spout_pending(200)
    return builder.create_topology(), conf
