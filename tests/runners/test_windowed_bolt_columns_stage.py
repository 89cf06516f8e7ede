"""A windowed bolt's input as columns in a Spark stage (squall.runtime.spark.window_columns).

A stage gives a task of a Storm windowed bolt whose window manager the column-wise core covers
(here event-time tumbling and sliding windows, by field and by extractor, and processing-time
count windows, also beside a stateful bolt) its packets' rows through
`WindowedRole.execute_columns`, and keeps the per-tuple path where it does not cover them (a
stateful windowed bolt, whose window its state keeps): the stage driven in this process
(no Spark) takes each path as said (the log says which once, and the covered role's `execute`
sees no tuple), and what it sends (windows, late and error records, their anchors) and the
tasks' snapshots equal the per-tuple path's. On both runners the windows equal the local
runner's (the per-tuple reference) and a plain-Python computation from the input.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from typing import Any

import pytest
from support.bolts import Describe
from support.runs import complete_cached
from support.stages import stage_outputs

from squall import (
    Bolt,
    Count,
    Duration,
    Fields,
    StatefulWindowedBolt,
    TopologyBuilder,
    Values,
)
from squall.components.windowed import ERROR_STREAM
from squall.runtime.spark import window_columns
from squall.task.roles.windowed import WindowedRole
from squall.testing import FixedTupleSpout

FIELDS = Fields("v", "key", "ts")  # `v`: the event's number
WINDOW_MS = 1_000
COVERED = ["tumbling", "sliding", "counts"]  # the windowed bolts of `topology`
CONF = {"topology.message.timeout.secs": 120, "spark.sql.shuffle.partitions": 2}


def events() -> list[list[Any]]:
    """80 events of three keys, time rising by 50 ms with some 600 to 2,500 ms behind (late
    for a window that has fired, or still on time), and two without a valid timestamp. No
    timestamp is on a window's end (so a tuple that is not late is never behind its window's
    firing)."""
    rnd = random.Random(11)
    out: list[list[Any]] = []
    for i in range(80):
        ts: Any = max(i * 50 + 7 - (rnd.choice([600, 2_500]) if rnd.random() < 0.15 else 0), 3)
        if i in (17, 53):
            ts = "never"
        out.append([i, f"k{rnd.randrange(3)}", ts])
    return out


class StatefulDescribe(StatefulWindowedBolt):
    """`Describe` with a count of its windows in its state."""

    def init_state(self, state):
        self.state = state

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        n = self.state.get("windows", 0) + 1
        self.state.put("windows", n)
        self.collector.emit(Values(window.start_timestamp, window.end_timestamp,
                                   [t["v"] for t in window.get()], n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("start", "end", "ids", "n"))


class Sink(Bolt):
    """Takes the windows and the side records (so that a stage sends them on)."""

    def execute(self, tup: Any) -> None:
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: Any) -> None:
        """Declares nothing."""


def event_time(tup: Any) -> Any:
    """The timestamp, read by an extractor (not by field position)."""
    return tup["ts"]


def topology() -> Any:
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(events(), FIELDS))
    b.set_bolt("tumbling", Describe().with_tumbling_window(Duration(WINDOW_MS))
               .with_timestamp_field("ts").with_watermark_interval(Duration(0))
               .with_late_tuple_stream("late")).shuffle_grouping("events")
    b.set_bolt("sliding", Describe().with_window(Duration(2_000), Duration(500))
               .with_timestamp_extractor(event_time).with_lag(Duration(300))
               .with_watermark_interval(Duration(0)), 2).fields_grouping("events", Fields("key"))
    b.set_bolt("counts", Describe().with_window(Count(7), Count(3))).shuffle_grouping("events")
    sink = b.set_bolt("sink", Sink())
    sink.shuffle_grouping("tumbling", "late").shuffle_grouping("counts")
    for cid in ("tumbling", "sliding"):  # event time: an error stream
        sink.shuffle_grouping(cid).shuffle_grouping(cid, ERROR_STREAM)
    return b.create_topology()


def stateful_topology() -> Any:
    """A plain and a stateful windowed bolt (so a stateful topology)."""
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(events(), FIELDS))
    b.set_bolt("plain", Describe().with_tumbling_window(Duration(WINDOW_MS))
               .with_timestamp_field("ts")).shuffle_grouping("events")
    b.set_bolt("stateful", StatefulDescribe().with_tumbling_window(Duration(WINDOW_MS))
               .with_timestamp_field("ts").with_message_id_field("v")
               ).shuffle_grouping("events")
    sink = b.set_bolt("sink", Sink())
    for cid in ("plain", "stateful"):
        sink.shuffle_grouping(cid).shuffle_grouping(cid, ERROR_STREAM)
    return b.create_topology()


def expected_tumbling() -> tuple[list[tuple], list[int], list[int]]:
    """`tumbling`'s windows ((start, end, ids), sorted), late ids and error ids from the input
    (one task, lag 0, watermark interval 0): a tuple is late when its timestamp is below the
    largest one before it; each other tuple is in the window (end - 1 s, end] over its
    timestamp, and a window is evaluated with what it holds."""
    windows: dict[int, list[int]] = defaultdict(list)
    late, errors = [], []
    watermark = None
    for i, _v, ts in events():
        if not isinstance(ts, int):
            errors.append(i)
            continue
        if watermark is not None and ts < watermark:
            late.append(i)
            continue
        end = -(-ts // WINDOW_MS) * WINDOW_MS
        windows[end].append(i)
        watermark = ts if watermark is None else max(watermark, ts)
    return (sorted((end - WINDOW_MS, end, ids) for end, ids in windows.items()), late, errors)


def tumbling_seen(sent: list[Any]) -> tuple[list[tuple], list[int], list[int]]:
    """What `tumbling` sent as `expected_tumbling`'s three lists: windows with tuples,
    the ids of its late and error records."""
    windows = sorted((w[0], w[1], w[2]) for w in sent["default"] if w[2])
    return windows, sorted(r[0] for r in sent["late"]), sorted(r[0] for r in sent[ERROR_STREAM])


def by_stream(packets: list[Any]) -> dict[str, list[Any]]:
    """A stage's decoded packets (`row_schema.Packets`: a header names the stream of the rows
    that follow it) as each stream's rows."""
    out: dict[str, list[Any]] = defaultdict(list)
    for _task, items in packets:
        stream = None
        for item in items:
            if item.__class__ is tuple and len(item) == 3:
                stream = item[0]
            else:
                out[stream].append(item if item.__class__ is list else item[0])
    return out


def counted_packets(monkeypatch) -> dict[str, int]:
    """The rows each component's tasks take through the column path, counted from now on."""
    rows: dict[str, int] = defaultdict(int)
    run_packet = window_columns.run_packet

    def counted(task, role, host, items, origin_of, sample_every):
        n = run_packet(task, role, host, items, origin_of, sample_every)
        rows[task.component_id] += n
        return n

    monkeypatch.setattr(window_columns, "run_packet", counted)
    return rows


def test_a_stage_takes_columns_for_covered_windowed_bolts_with_the_per_tuple_results(
        caplog, monkeypatch):
    executed: list[int] = []
    execute = WindowedRole.execute

    def each(self: WindowedRole, tup: Any, now_ms: int) -> None:
        executed.append(tup["v"])
        execute(self, tup, now_ms)

    monkeypatch.setattr(WindowedRole, "execute", each)
    columns = counted_packets(monkeypatch)
    caplog.set_level(logging.INFO, logger="squall")
    by_columns, snapshots = stage_outputs(topology(), "events", COVERED, "sink", True,
                                          "bolt-columns-run", tracking=True)
    lines = [r.getMessage() for r in caplog.records if "on Spark" in r.getMessage()]
    assert lines == [f"windowed bolt {cid!r}: its tasks take their input on Spark as columns"
                     for cid in COVERED]
    n = len(events())
    assert dict(columns) == dict.fromkeys(COVERED, n) and executed == []
    columns.clear()
    by_tuple, reference = stage_outputs(topology(), "events", COVERED, "sink", False,
                                        "bolt-per-tuple-run", tracking=True)
    assert columns == {} and len(executed) == 3 * n
    assert by_columns == by_tuple
    assert all(by_columns[cid] for cid in COVERED)
    assert snapshots == reference
    assert tumbling_seen(by_stream(by_columns["tumbling"])) == expected_tumbling()


def test_a_stage_keeps_the_per_tuple_path_for_a_stateful_windowed_bolt(caplog, monkeypatch,
                                                                       tmp_path):
    """In a stateful topology the stage executes without checkpoint tuples (batches are the
    transactions), so a plain windowed bolt takes columns there too; the stateful one, whose
    window is kept in its state, goes tuple by tuple."""
    columns = counted_packets(monkeypatch)
    caplog.set_level(logging.INFO, logger="squall")
    stages = ["plain", "stateful"]
    # Two checkpoint locations whose paths differ in one name of the same length: the stateful
    # task's snapshot names its state files.
    by_stage, snapshots = stage_outputs(stateful_topology(), "events", stages, "sink", True,
                                        "bolt-stateful-run", True, str(tmp_path / "cols"))
    lines = [r.getMessage() for r in caplog.records if "on Spark" in r.getMessage()]
    assert lines == [
        "windowed bolt 'plain': its tasks take their input on Spark as columns",
        "windowed bolt 'stateful': its tasks take their input on Spark tuple by tuple, not as "
        "columns, for role StatefulWindowedRole (it adds tuples its own way)"]
    assert dict(columns) == {"plain": len(events())}
    by_tuple, reference = stage_outputs(stateful_topology(), "events", stages, "sink", False,
                                        "bolt-stateful-per-tuple-run", True,
                                        str(tmp_path / "tups"))
    assert by_stage == by_tuple and by_stage["plain"] and by_stage["stateful"]
    assert {t: s.replace(b"/cols/", b"/tups/") for t, s in snapshots.items()} == reference


def comparable(row: list[Any]) -> str:
    """A row as text, without a processing-time window's end (the runner's clock, the only
    thing of a count window that depends on the runner)."""
    return repr(row if row[0] is not None else [None, *row[2:]])


@pytest.mark.runners("local", "spark")
def test_covered_windowed_bolts_give_the_local_runners_windows(request, runner):
    """On Spark in micro-batches of 40 events (the columns cut where the batches are)."""
    cut = {"squall.spark.batch.max.tuples": 40} if runner == "spark" else {}
    result: Any = complete_cached(request, "bolts", runner, topology, {**CONF, **cut})
    reference: Any = complete_cached(request, "bolts", "local", topology, CONF)
    sent = {s: result.tuples("tumbling", s) for s in ("default", "late", ERROR_STREAM)}
    assert tumbling_seen(sent) == expected_tumbling()
    for component in COVERED:
        for stream in ("default", "late", ERROR_STREAM):
            if stream not in result.topology.components[component].streams:
                continue
            assert (sorted(map(comparable, result.tuples(component, stream)))
                    == sorted(map(comparable, reference.tuples(component, stream)))), (
                        component, stream)
    assert sorted(result.acked("events")) == list(range(len(events())))
    assert result.errors == [] and result.failed("events") == []
