"""Per-user spend in 10-minute windows sliding by 2 minutes, with early and late firings.

    squall run examples/user_spend.py:topology -c spend.events=2000

`purchases` emits `spend.events` generated purchases (user, amount, ts), seeded, with event
timestamps a few seconds apart, out of order by up to a minute, and one in twenty delayed by 2 to
8 minutes. `spend` (a `KeyedWindowedOperator`, per user) sums amounts in 10-minute windows sliding
by 2 minutes: an early pane every 10 s of processing time, the on-time pane when the watermark
(largest timestamp minus 1 minute) reaches the window end, and a late pane for every late purchase
within the allowed lateness (5 minutes); later purchases are dropped to the `late` stream.
Panes accumulate, so the last pane of each (user, window) is its total. `report` prints, when
the topology stops, the panes by timing, the dropped purchases and the biggest windows.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Config, Duration, Fields, Spout, TopologyBuilder, Values
from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption, accumulations

USERS = [f"user{i}" for i in range(12)]


def generate(n: int, seed: int = 0) -> list[list[Any]]:
    """(user, amount in cents, ts ms) purchases in arrival order."""
    rnd = random.Random(seed)
    t = 1_700_000_000_000
    rows = []
    for _ in range(n):
        t += rnd.randrange(0, 6_000)
        delay = rnd.randrange(0, 60_000)
        if rnd.random() < 0.05:
            delay = rnd.randrange(120_000, 480_000)
        rows.append([rnd.choice(USERS), rnd.randrange(100, 10_000), t - delay])
    return rows


class PurchaseSpout(Spout):
    """Emits the generated purchases (tracked), each once."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.rows = generate(int(conf.get("spend.events", 2000)),
                             int(conf.get("squall.random.seed", 0)))
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(self.rows):
            self.collector.emit(Values(*self.rows[self.i]), msg_id=self.i)
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("user", "amount", "ts"))


class Report(BasicBolt):
    """Keeps the last pane per (user, window); prints a summary when the topology stops (on
    Spark `execute` runs on executors, `cleanup` on the driver)."""

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.totals: dict[tuple[str, int], int] = {}
        self.timings: dict[str, int] = {}
        self.dropped = 0

    def execute(self, tup, collector) -> None:
        if tup.source_stream_id == "late":
            self.dropped += 1
            return
        self.totals[(tup["key"], tup["window_start"])] = tup["value"]
        self.timings[tup["timing"]] = self.timings.get(tup["timing"], 0) + 1

    def cleanup(self) -> None:
        print(f"panes: {dict(sorted(self.timings.items()))}; dropped late purchases: "
              f"{self.dropped}")
        top = sorted(self.totals.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        for (user, start), cents in top:
            print(f"{user:>7} window from {start}: {cents / 100:10.2f}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("purchases", PurchaseSpout())
    spend = KeyedWindowedOperator(
        window=TimeWindows(Duration.minutes(10)).slide_by(Duration.minutes(2)),
        accumulation=accumulations.Sum(),
        trigger=(TriggerOption.at_watermark()
                 .with_early_firings_at_every(Duration.seconds(10))
                 .with_late_firings_at_every(1)
                 .accumulating_fired_panes()),
        allowed_lateness=Duration.minutes(5), watermark_delay=Duration.minutes(1),
        timestamp_field="ts", key_field="user", value_field="amount", late_stream="late",
    )
    builder.set_bolt("spend", spend).fields_grouping("purchases", Fields("user"))
    (builder.set_bolt("report", Report()).global_grouping("spend")
     .global_grouping("spend", "late"))
    return builder


def topology() -> tuple[Any, Config]:
    conf = Config()
    conf.set_num_ackers(1)
    return build().create_topology(), conf
