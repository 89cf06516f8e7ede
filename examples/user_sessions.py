"""User sessions with a 30-minute gap, accumulating and retracting.

    squall run examples/user_sessions.py:topology -c sessions.events=1500

`clicks` emits `sessions.events` generated page views (user, page, ts), seeded, out of order by up
to 10 minutes. `sessions` (a `KeyedWindowedOperator` with `SessionWindows(30 min)`) counts the
views of each user's session: an early pane every 5 views and the on-time pane when the watermark
(largest timestamp minus 15 minutes) passes the session end. When a late view joins or bridges
sessions, the panes already emitted for them are retracted (a pane with `is_retraction` and the
negated count) before the merged session's pane. `report` applies panes and retractions to a
table of sessions and prints it when the topology stops: what remains is exactly the sessions of
the input.
"""

from __future__ import annotations

import random
from typing import Any

from squall import BasicBolt, Config, Duration, Fields, Spout, TopologyBuilder, Values
from squall.windows import KeyedWindowedOperator, SessionWindows, TriggerOption, accumulations

USERS = ["ana", "bo", "cy", "di", "ed"]
GAP_MS = 30 * 60_000


def generate(n: int, seed: int = 0) -> list[list[Any]]:
    """(user, page, ts ms) views in arrival order."""
    rnd = random.Random(seed)
    t = 1_700_000_000_000
    rows = []
    for _ in range(n):
        t += rnd.choice([5_000, 20_000, 60_000, 240_000, 900_000, 2_400_000])
        rows.append([rnd.choice(USERS), f"/p{rnd.randrange(20)}", t])
    # out of order by up to 10 minutes: sort by a jittered key
    jitter = [r[2] + rnd.randrange(0, 600_000) for r in rows]
    return [r for _j, r in sorted(zip(jitter, rows, strict=True), key=lambda p: p[0])]


def sessionize(rows: list[list[Any]], gap_ms: int = GAP_MS) -> dict[tuple[str, int, int], int]:
    """The sessions of `rows` computed directly: {(user, start, end): views}."""
    out: dict[tuple[str, int, int], int] = {}
    for user in sorted({r[0] for r in rows}):
        stamps = sorted(r[2] for r in rows if r[0] == user)
        start, end, n = stamps[0], stamps[0] + gap_ms, 0
        for ts in stamps:
            if ts < end:
                end, n = max(end, ts + gap_ms), n + 1
            else:
                out[(user, start, end)] = n
                start, end, n = ts, ts + gap_ms, 1
        out[(user, start, end)] = n
    return out


class ClickSpout(Spout):
    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.rows = generate(int(conf.get("sessions.events", 1500)),
                             int(conf.get("squall.random.seed", 0)))
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < len(self.rows):
            self.collector.emit(Values(*self.rows[self.i]), msg_id=self.i)
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= len(self.rows)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("user", "page", "ts"))


class SessionTable(BasicBolt):
    """Applies panes and retractions; prints the sessions when the topology stops."""

    def prepare(self, conf, context) -> None:
        super().prepare(conf, context)
        self.sessions: dict[tuple[str, int, int], int] = {}
        self.retractions = 0

    def execute(self, tup, collector) -> None:
        key = (tup["key"], tup["window_start"], tup["window_end"])
        if tup["is_retraction"]:
            self.retractions += 1
            del self.sessions[key]  # the value it takes back is the whole last pane
        else:
            self.sessions[key] = tup["value"]

    def cleanup(self) -> None:
        print(f"{len(self.sessions)} sessions, {sum(self.sessions.values())} views, "
              f"{self.retractions} retractions")
        for (user, start, end), views in sorted(self.sessions.items())[:10]:
            print(f"{user:>4} {start} +{(end - start) // 60_000:>4} min: {views} views")


def build() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("clicks", ClickSpout())
    sessions = KeyedWindowedOperator(
        window=SessionWindows(Duration.minutes(30)), accumulation=accumulations.Count(),
        trigger=(TriggerOption.at_watermark().with_early_firings_at_every(5)
                 .accumulating_and_retracting_fired_panes()),
        allowed_lateness=Duration.hours(2), watermark_delay=Duration.minutes(15),
        timestamp_field="ts", key_field="user",
    )
    builder.set_bolt("sessions", sessions, 2).fields_grouping("clicks", Fields("user"))
    builder.set_bolt("report", SessionTable()).global_grouping("sessions")
    return builder


def topology() -> tuple[Any, Config]:
    conf = Config()
    conf.set_num_ackers(1)
    return build().create_topology(), conf
