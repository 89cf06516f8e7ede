"""Tutorial: a Storm topology with a windowed bolt and a stateful bolt (the Storm tutorial).

    squall run examples/tutorial_storm.py:topology --checkpoint /tmp/clicks
    python examples/tutorial_storm.py /tmp/clicks          # run on Spark, then check the state

`clicks` emits page views `(page, ts)`, one every 250 ms of event time; `per_window` counts the
views of each page in tumbling windows of 10 s of event time (a `WindowedBolt`); `totals` adds
each window's counts to a running total per page kept in its `KeyValueState` (a
`StatefulBolt`), which survives restarts. `main` runs it, reads the totals from the state after
the run, and checks them against a plain count.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from squall import (
    BasicBolt,
    Config,
    Duration,
    Fields,
    Spout,
    StatefulBolt,
    TopologyBuilder,
    Values,
    WindowedBolt,
    run,
)
from squall.state import new_state

PAGES = ["home", "search", "cart", "checkout"]
VIEWS = 400  # 100 s of event time


def view(i: int) -> tuple[str, int]:
    """The i-th page view: a page and its event time in milliseconds."""
    return PAGES[(i * i + i // 3) % len(PAGES)], i * 250


class ClickSpout(Spout):
    """Emits VIEWS page views in event-time order, each with a message id; replays failures."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.next_id = 0
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop()
        elif self.next_id < VIEWS:
            i, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        self.collector.emit(Values(*view(i)), msg_id=i)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def is_exhausted(self) -> bool:
        return self.next_id >= VIEWS and not self.replay

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("page", "ts"))


class ViewsPerWindow(WindowedBolt):
    """For each 10 s window of event time, the number of views of each page in it."""

    def execute(self, window) -> None:
        counts = Counter(t["page"] for t in window.get())
        for page, n in sorted(counts.items()):
            # Anchored to the window's tuples: they are acked when they leave the window.
            self.collector.emit(Values(page, window.end_timestamp, n))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("page", "window_end", "views"))


class RunningTotals(StatefulBolt):
    """A running total of views per page, in the bolt's checkpointed KeyValueState."""

    def init_state(self, state) -> None:
        self.totals = state

    def execute(self, tup) -> None:
        total = self.totals.get(tup["page"], 0) + tup["views"]
        self.totals.put(tup["page"], total)
        self.collector.emit(Values(tup["page"], total), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("page", "total"))


class Print(BasicBolt):
    def execute(self, tup, collector) -> None:
        print(f"{tup['page']:>10} total {tup['total']}")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("clicks", ClickSpout())
    windowed = (ViewsPerWindow().with_tumbling_window(Duration.seconds(10))
                .with_timestamp_field("ts").with_lag(Duration.seconds(1)))
    builder.set_bolt("per_window", windowed).global_grouping("clicks")
    builder.set_bolt("totals", RunningTotals(), parallelism=2).fields_grouping(
        "per_window", Fields("page"))
    builder.set_bolt("print", Print()).global_grouping("totals")
    return builder


def topology():
    return build().create_topology(), Config()


def read_totals(checkpoint: str) -> dict[str, int]:
    """The running totals, read from the `totals` tasks' durable state after the run."""
    topo, _ = topology()
    conf = {"topology.state.provider": "durable",
            "topology.state.provider.config": {"dir": f"{checkpoint}/state"}}
    totals: dict[str, int] = {}
    for task in topo.component_tasks("totals"):  # Storm's task ids
        totals.update(new_state(conf, f"totals-{task}").items())
    return totals


def main(checkpoint: str, runner: str = "spark") -> None:
    topo, conf = topology()
    result = run(topo, conf, runner=runner, checkpoint_location=checkpoint)
    assert result.stats["clicks"].acked == VIEWS and result.errors == []

    totals = read_totals(checkpoint)
    expected = Counter(view(i)[0] for i in range(VIEWS))
    assert totals == dict(expected), (totals, expected)
    print(f"OK: {sum(totals.values())} views in the state, {totals}")


if __name__ == "__main__":
    main(*sys.argv[1:])
