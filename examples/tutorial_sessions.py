"""Tutorial: Beam-style session windows with early and late panes (the sessions tutorial).

    squall run examples/tutorial_sessions.py:topology --runner local
    python examples/tutorial_sessions.py [local|spark]      # run it and check every pane

`clicks` emits a small, fixed list of page views `(user, ts)` in arrival order, one of them
late. `sessions` counts each user's views per session (a gap of 60 s) with Beam's trigger
model: an early pane every 2 views, the on-time pane when the watermark (the largest timestamp
seen minus 30 s) passes the session's end, and a late pane for each view that arrives after
that, within 10 minutes of allowed lateness. Panes accumulate (each carries the session's count
so far) and carry Beam's pane info. `main` runs it with `complete_topology` and checks the panes.
"""

from __future__ import annotations

import sys
from typing import Any

from squall import BasicBolt, Config, Duration, Fields, Spout, TopologyBuilder, Values
from squall.windows import (
    AccumulationMode,
    AfterCount,
    AfterWatermark,
    KeyedWindowedOperator,
    SessionWindows,
    accumulations,
)

S = 1000  # one second in milliseconds
# (user, ts) in arrival order. The view of ana at 50 s arrives after the view at 300 s has moved
# the watermark to 270 s, past the end of ana's first session [0 s, 80 s + 60 s gap): it is late.
VIEWS = [("ana", 0), ("bo", 5 * S), ("ana", 10 * S), ("ana", 20 * S), ("ana", 300 * S),
         ("ana", 50 * S)]


class ClickSpout(Spout):
    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(VIEWS):
            self.collector.emit(Values(*VIEWS[self.i]), msg_id=self.i)
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(VIEWS)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("user", "ts"))


class PrintPanes(BasicBolt):
    def execute(self, tup, collector) -> None:
        print(f"{tup['key']:>4} [{tup['window_start'] // S:>3} s, {tup['window_end'] // S:>3} s)"
              f" {tup['timing']:<8} views={tup['value']}"
              f"{'  (last)' if tup['is_last'] else ''}")


def sessions() -> KeyedWindowedOperator:
    return KeyedWindowedOperator(
        window=SessionWindows(Duration.seconds(60)), accumulation=accumulations.Count(),
        trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
        accumulation_mode=AccumulationMode.ACCUMULATING, pane_info=True,
        allowed_lateness=Duration.minutes(10), watermark_delay=Duration.seconds(30),
        timestamp_field="ts", key_field="user")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("clicks", ClickSpout())
    builder.set_bolt("sessions", sessions()).fields_grouping("clicks", Fields("user"))
    builder.set_bolt("print", PrintPanes()).global_grouping("sessions")
    return builder


def topology() -> tuple[Any, Config]:
    return build().create_topology(), Config()


def main(runner: str = "local") -> None:
    from squall.testing import complete_topology  # noqa: PLC0415

    topo, conf = topology()
    result = complete_topology(topo, conf, runner=runner)
    panes = [(p[0], p[1] // S, p[2] // S, p[4], p[3]) for p in result.tuples("sessions")]
    # (user, session start s, session end s, timing, views so far)
    expected = [
        ("ana", 0, 70, "EARLY", 2),     # ana's 2nd view: an early pane
        ("ana", 0, 80, "ON_TIME", 3),   # the watermark passes 80 s: the on-time pane
        ("bo", 5, 65, "ON_TIME", 1),
        ("ana", 0, 110, "LATE", 4),     # the late view at 50 s extends the session: a late pane
        ("ana", 300, 360, "ON_TIME", 1),  # end of input: the watermark goes to the end of time
    ]
    assert sorted(panes) == sorted(expected), panes
    assert result.errors == []
    print(f"OK: {len(panes)} panes as expected")


if __name__ == "__main__":
    main(*sys.argv[1:])
