"""A windowed operator's input as columns in a Spark stage (squall.runtime.spark.window_columns).

A stage gives a task of an operator whose windowing the column-wise core covers (here `fixed`:
tumbling time windows under Apex's trigger options) its packets' rows as columns, no tuple
object each, and keeps the per-tuple path for one it does not cover (`sessions`): the stage
driven in this process (no Spark) takes each path as said (the log says which once, and the
covered role's `execute` sees no tuple), and its output rows, panes and late records, and the
tasks' snapshots equal the per-tuple path's. On both runners the panes equal the local runner's
(the per-tuple reference) and, for `fixed`, a plain-Python computation from the input.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from typing import Any

import pytest
from support.runs import complete_cached
from support.stages import stage_outputs

from squall import Bolt, Duration, Fields, TopologyBuilder
from squall.task.roles.operator import OperatorRole
from squall.testing import FixedTupleSpout
from squall.windows import KeyedWindowedOperator, SessionWindows, TimeWindows, TriggerOption
from squall.windows import accumulations as acc

FIELDS = Fields("user", "amount", "ts")
WINDOW_MS = 1_000
STAGES = ["fixed", "sessions"]  # the operators, whose stages run in process


def events() -> list[list[Any]]:
    """80 events of three users, time rising by 50 ms with some 600 to 2,500 ms behind (late
    for a window that has fired, or still on time)."""
    rnd = random.Random(5)
    out = []
    for i in range(80):
        ts = i * 50 - (rnd.choice([600, 2_500]) if rnd.random() < 0.15 else 0)
        out.append([f"u{rnd.randrange(3)}", rnd.randrange(1, 9), max(ts, 0)])
    return out


class Sink(Bolt):
    """Takes the operators' panes and late records (so that a stage sends them on)."""

    def execute(self, tup: Any) -> None:
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: Any) -> None:
        """Declares nothing."""


def topology() -> Any:
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(events(), FIELDS))
    common = {"timestamp_field": "ts", "key_field": "user", "value_field": "amount",
              "watermark_delay": Duration(0), "allowed_lateness": Duration(0),
              "accumulation": acc.Sum(), "late_stream": "late"}
    b.set_bolt("fixed", KeyedWindowedOperator(
        window=TimeWindows(Duration(WINDOW_MS)), trigger=TriggerOption.at_watermark()
        .discarding_fired_panes(), **common), 2).fields_grouping("events", Fields("user"))
    b.set_bolt("sessions", KeyedWindowedOperator(
        window=SessionWindows(Duration(300)), trigger=TriggerOption.at_watermark()
        .accumulating_fired_panes(), **common), 2).fields_grouping("events", Fields("user"))
    sink = b.set_bolt("sink", Sink())
    for cid in ("fixed", "sessions"):
        sink.shuffle_grouping(cid).shuffle_grouping(cid, "late")
    return b.create_topology()


def expected_fixed() -> tuple[list[tuple], list[list[Any]]]:
    """`fixed`'s panes (sorted) and late events from the input: a tuple is late when its
    timestamp is below the largest one before it (the watermark, delay 0); the others sum per
    (user, window)."""
    sums: dict[tuple[str, int], int] = defaultdict(int)
    late = []
    watermark = None
    for user, amount, ts in events():
        if watermark is not None and ts < watermark:
            late.append([user, amount, ts])
        else:
            sums[(user, ts - ts % WINDOW_MS)] += amount
        watermark = ts if watermark is None else max(watermark, ts)
    panes = sorted((u, s, s + WINDOW_MS, v, "ON_TIME", 0, False) for (u, s), v in sums.items())
    return panes, sorted(late)


def test_a_stage_takes_columns_for_a_covered_operator_with_the_per_tuple_results(
        caplog, monkeypatch):
    executed: dict[str, int] = defaultdict(int)
    execute = OperatorRole.execute

    def counted(self: OperatorRole, tup: Any, now_ms: int) -> None:
        executed[self._late_log.component] += 1  # (the operator's name)
        execute(self, tup, now_ms)

    monkeypatch.setattr(OperatorRole, "execute", counted)
    caplog.set_level(logging.INFO, logger="squall")
    by_columns, snapshots = stage_outputs(topology(), "events", STAGES, "sink", True,
                                          "columns-run")
    lines = [r.getMessage() for r in caplog.records if "windowed operator" in r.getMessage()]
    assert lines == [
        "windowed operator 'fixed': its tasks take their input on Spark as columns",
        "windowed operator 'sessions': its tasks take their input on Spark tuple by tuple, not "
        "as columns, for window SessionWindows(300 ms) (only tumbling and sliding time "
        "windows are)"]
    n = len(events())
    assert dict(executed) == {"sessions": n}  # `fixed`'s tuples: none through execute
    executed.clear()
    by_tuple, reference = stage_outputs(topology(), "events", STAGES, "sink", False,
                                          "per-tuple-run")
    assert dict(executed) == {"fixed": n, "sessions": n}
    assert by_columns == by_tuple
    assert by_columns["fixed"] and by_columns["sessions"]
    assert snapshots == reference
    # What `fixed` sent is W2's answer: its panes and late records.
    panes, late = expected_fixed()
    sent = [item for _task, items in by_columns["fixed"] for item in items
            if item.__class__ is list]
    assert sorted(tuple(p) for p in sent if len(p) == 7) == panes
    assert late and sorted(r[:3] for r in sent if len(r) != 7) == late


@pytest.mark.runners("local", "spark")
def test_covered_and_per_tuple_operators_give_the_local_runners_panes(request, runner):
    """On Spark in micro-batches of 25 events (the columns cut where the batches are)."""
    conf = {"topology.message.timeout.secs": 120, "spark.sql.shuffle.partitions": 2}
    cut = {"squall.spark.batch.max.tuples": 25} if runner == "spark" else {}
    result: Any = complete_cached(request, "both", runner, topology, {**conf, **cut})
    reference: Any = complete_cached(request, "both", "local", topology, conf)
    panes, late = expected_fixed()
    assert sorted(tuple(r) for r in result.tuples("fixed")) == panes
    assert sorted(r[:3] for r in result.tuples("fixed", "late")) == late
    for component in ("fixed", "sessions"):
        for stream in ("default", "late"):
            assert (sorted(map(tuple, result.tuples(component, stream)))
                    == sorted(map(tuple, reference.tuples(component, stream)))), (component,
                                                                                  stream)
    assert result.errors == []
