"""A windowed join of orders and payments (`WindowedMergeOperator` with `InnerJoin`).

    squall run examples/orders_payments.py:topology -c orders.count=300

`orders` emits (order, user, total, ts) and `payments` (order, amount, ts), generated and seeded;
most orders are paid within 3 minutes, some never. `join` keys both inputs by order id and joins
them in 10-minute windows: when the watermark (the smaller of the two inputs' watermarks, each
trailing its largest timestamp by 2 minutes) passes a window's end, each order of the window emits
its [order, payment] pairs, or an empty list when no payment fell in the same window. `report`
prints matched and unmatched orders when the topology stops.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Config, Duration, Fields, Spout, TopologyBuilder, Values
from squall.windows import TimeWindows, TriggerOption, WindowedMergeOperator, accumulations

WINDOW_MS = 10 * 60_000


def generate(n: int, seed: int = 0) -> tuple[list[list[Any]], list[list[Any]]]:
    """(orders, payments), each in event-time order."""
    rnd = random.Random(seed)
    t = 1_700_000_000_000
    orders, payments = [], []
    for i in range(n):
        t += rnd.randrange(1_000, 30_000)
        total = rnd.randrange(500, 50_000)
        orders.append([f"o{i}", f"u{rnd.randrange(30)}", total, t])
        if rnd.random() < 0.85:
            payments.append([f"o{i}", total, t + rnd.randrange(0, 180_000)])
    payments.sort(key=lambda p: p[2])
    return orders, payments


class ListSpout(Spout):
    """Emits one of the generated lists (`which`: 0 orders, 1 payments), tracked."""

    def __init__(self, which: int, fields: Fields) -> None:
        self.which = which
        self.fields = fields

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.rows = generate(int(conf.get("orders.count", 300)),
                             int(conf.get("squall.random.seed", 0)))[self.which]
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(self.rows):
            self.collector.emit(Values(*self.rows[self.i]), msg_id=self.i)
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(self.fields)


class Report(BasicBolt):
    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.matched: dict[str, list] = {}
        self.unmatched: list[str] = []

    def execute(self, tup, collector) -> None:
        if tup["value"]:
            self.matched[tup["key"]] = tup["value"]
        else:
            self.unmatched.append(tup["key"])

    def cleanup(self) -> None:
        print(f"{len(self.matched)} orders matched a payment in their window, "
              f"{len(self.unmatched)} did not")
        for order, pairs in sorted(self.matched.items())[:5]:
            print(f"{order}: {pairs}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("orders", ListSpout(0, Fields("order", "user", "total", "ts")))
    builder.set_spout("payments", ListSpout(1, Fields("order", "amount", "ts")))
    join = WindowedMergeOperator(
        input1="orders", input2="payments", window=TimeWindows(WINDOW_MS),
        accumulation=accumulations.InnerJoin(), trigger=TriggerOption.at_watermark(),
        allowed_lateness=Duration(0), watermark_delay=Duration.minutes(2),
        timestamp_field="ts", key_field="order",
        value_extractor=lambda t: [t["user"], t["total"]], value_field2="amount",
    )
    (builder.set_bolt("join", join, 2).fields_grouping("orders", Fields("order"))
     .fields_grouping("payments", Fields("order")))
    builder.set_bolt("report", Report()).global_grouping("join")
    return builder


def topology() -> tuple[Any, Config]:
    conf = Config()
    conf.set_num_ackers(1)
    return build().create_topology(), conf
