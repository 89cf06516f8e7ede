"""Source-aware watermarks (squall.partition_watermarks), a clickstream of two files out of step.

Two web servers each write a JSON-lines file covering the same five days, with at most two
minutes of disorder, plus ten very late events each (an hour behind their file). A
`JsonLinesSource` reads both into a `KeyedWindowedOperator` with session windows, allowed lateness
10 min and watermark delay 5 min. Every good event is in the panes and only the 20 very late ones
are late, whatever the spout's parallelism (1: one task reads one file to its end before the
other; 2 and 3: the files on different tasks, one task idle at 3) and on both runners; the panes
are the ones a sessionising of the good events gives, so they are the same at every parallelism.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from support.run_until import run_until

from squall import (
    BasicBolt,
    Bolt,
    Duration,
    Fields,
    Spout,
    StatefulWindowedBolt,
    TopologyBuilder,
    WindowedBolt,
)
from squall.connectors import JsonLinesSource
from squall.testing import complete_topology
from squall.windows import KeyedWindowedOperator, SessionWindows, accumulations

MINUTE = 60_000
DAY = 24 * 60 * MINUTE
GAP = 30 * MINUTE
USERS = [f"user{i}" for i in range(12)]
FIELDS = ["user", "ts", "page"]
CONF = {"topology.message.timeout.secs": 600, "spark.sql.shuffle.partitions": 2}
STORM_CONF = {**CONF, "topology.message.timeout.secs": 3 * 3600}  # above window + slide


def clickstream(seed: int) -> tuple[list[dict], list[dict]]:
    """One server's events in file order (good and very late), and its very late ones."""
    rnd = random.Random(seed)
    ts, events = 0, []
    while len(events) < 1510:
        ts += rnd.randrange(30_000, 5 * MINUTE)  # 1,510 events over about five days
        events.append({"user": rnd.choice(USERS), "ts": ts, "page": f"/p{rnd.randrange(40)}"})
    # At most two minutes of disorder: swap neighbours less than two minutes apart.
    for i in range(len(events) - 1):
        if events[i + 1]["ts"] - events[i]["ts"] < 2 * MINUTE and rnd.random() < 0.5:
            events[i], events[i + 1] = events[i + 1], events[i]
    late = []
    for k in range(10):  # an hour behind the file at its position, well past 5 + 10 min
        at = 100 + k * 140
        newest = max(e["ts"] for e in events[:at])
        late.append({"user": rnd.choice(USERS), "ts": newest - 60 * MINUTE - rnd.randrange(MINUTE),
                     "page": "/late"})
        events.insert(at, late[-1])
    return events, late


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Path, list[dict], list[dict]]:
    directory = tmp_path_factory.mktemp("clicks")
    good, late = [], []
    for server, seed in (("web1", 1), ("web2", 2)):
        events, very_late = clickstream(seed)
        (directory / f"{server}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        good += [e for e in events if e not in very_late]
        late += very_late
    assert len(good) == 3020 and len(late) == 20
    return directory, good, late


def sessions(events: list[dict]) -> set[tuple]:
    """Sessions per user (gap 30 min): (user, start, end, count), computed here directly."""
    out = set()
    for user in USERS:
        stamps = sorted(e["ts"] for e in events if e["user"] == user)
        start = end = None
        count = 0
        for ts in stamps:
            if end is not None and ts < end:
                end, count = max(end, ts + GAP), count + 1
                continue
            if end is not None:
                out.add((user, start, end, count))
            start, end, count = ts, ts + GAP, 1
        if end is not None:
            out.add((user, start, end, count))
    return out


def build(directory: Path, spout_parallelism: int, **operator):
    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(directory), FIELDS, bounded=True),
                spout_parallelism)
    b.set_bolt("sessions", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=SessionWindows(Duration(GAP)),
        allowed_lateness=Duration(10 * MINUTE), watermark_delay=Duration(5 * MINUTE),
        timestamp_field="ts", key_field="user", value_field="page", late_stream="late",
        **operator), 2).fields_grouping("clicks", ["user"])
    return b.create_topology()


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_only_the_truly_late_events_are_late_at_any_parallelism(runner, logs, parallelism):
    directory, good, late = logs
    result = complete_topology(build(directory, parallelism), CONF, runner=runner)
    assert not result.errors
    late_out = result.tuples("sessions", "late")
    assert sorted(r[:3] for r in late_out) == sorted([e["user"], e["ts"], e["page"]]
                                                     for e in late)
    panes = result.tuples("sessions")
    assert all(p[4] == "ON_TIME" and p[5] == 0 and not p[6] for p in panes)
    assert {tuple(p[:4]) for p in panes} == sessions(good)
    assert len(panes) == len(sessions(good))  # one pane per session, none twice
    if parallelism == 2:  # one file per task (a hash of the names had put both on one task)
        per_task = result.tuples_by_task("clicks")
        assert sorted(len(rows) for rows in per_task.values()) == [1520, 1520]


def test_the_watermark_of_the_input_as_a_whole_loses_good_events(logs):
    """What the issue saw: with `source_watermarks=False` the operator's watermark follows the
    largest timestamp of its input, so one task reading one file before the other makes good
    events late (the check that the test above tells the two apart)."""
    directory = logs[0]
    result = complete_topology(build(directory, 1, source_watermarks=False), CONF)
    assert len(result.tuples("sessions", "late")) > 1000


def _panes(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl"))
            for line in f.read_text().splitlines()]


def idle_topology(src: Path, out: Path):
    from squall.connectors import JsonLinesSink
    from squall.windows import TimeWindows

    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(src), FIELDS), 2)  # unbounded: never read out
    b.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration(MINUTE)),
        allowed_lateness=Duration(0), watermark_delay=Duration(0), timestamp_field="ts",
        key_field="user", value_field="page"), 1).fields_grouping("clicks", ["user"])
    b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("count")
    return b.create_topology()


@pytest.mark.parametrize(("runner", "idle_ms"), [
    ("local", None), ("local", 300), pytest.param("spark", 300, marks=pytest.mark.spark)],
    indirect=["runner"])
def test_an_idle_partition_stops_holding_the_watermark_back(runner, tmp_path, idle_ms):
    """One file gets ten minutes of clicks, the other nothing: without an idleness timeout the
    empty partition holds the watermark (an unbounded file may still grow), so no window fires;
    with `squall.watermark.idle.timeout.ms` it stops counting and the windows the first file
    passed fire on time."""
    from squall import run

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "web1.jsonl").write_text("".join(
        json.dumps({"user": "u", "ts": i * 20_000, "page": "/"}) + "\n" for i in range(30)))
    (src / "web2.jsonl").write_text("")
    conf = dict(CONF)
    if idle_ms is not None:
        conf["squall.watermark.idle.timeout.ms"] = idle_ms
    if runner == "spark":
        # The input never ends (a file may grow): until the nine on-time panes are out.
        run_until(idle_topology(src, out), lambda: len(_panes(out)) >= 9, conf, runner=runner,
                  checkpoint_location=str(tmp_path / "ckpt"))
    else:
        from squall.testing import simulated_time

        with simulated_time():  # 3 s of the runner's clock, whatever the machine's load
            run(idle_topology(src, out), conf, runner=runner, duration=3)
    panes = _panes(out) if out.exists() else []
    if idle_ms is None:
        assert panes == []
    else:
        # The newest click is at 580 s: windows ending at or before it are on time, 3 each.
        assert sorted((p["window_start"], p["value"], p["timing"]) for p in panes) == [
            (w * MINUTE, 3, "ON_TIME") for w in range(9)]


class HourlyClicks(WindowedBolt):
    """Storm's windowed bolt: clicks per hour of event time."""

    def execute(self, window):
        self.collector.emit([window.end_timestamp, len(window.get())])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("end", "clicks"))


def click_time(tup):
    return tup["ts"]


def storm_topology(directory: Path, spout_parallelism: int, source_watermarks: bool,
                   extractor: bool = False):
    """`extractor`: the timestamp comes from a function of the tuple, which the source cannot
    apply, so its records carry no positions."""
    bolt = HourlyClicks().with_tumbling_window(Duration(60 * MINUTE))
    bolt = (bolt.with_timestamp_extractor(click_time) if extractor
            else bolt.with_timestamp_field("ts"))
    bolt = bolt.with_lag(Duration(5 * MINUTE)).with_late_tuple_stream("late")
    if source_watermarks:
        bolt = bolt.with_source_watermarks()
    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(directory), FIELDS, bounded=True),
                spout_parallelism)
    b.set_bolt("hourly", bolt).shuffle_grouping("clicks")
    return b.create_topology()


@pytest.mark.parametrize(("runner", "parallelism"), [
    ("local", 1), ("local", 3), pytest.param("spark", 3, marks=pytest.mark.spark)],
    indirect=["runner"])
def test_storm_windowed_bolts_opt_in_to_source_watermarks(runner, logs, parallelism):
    """A windowed bolt keeps Storm's rule unless it opts in; with `with_source_watermarks()`
    only the very late clicks are late and every hour holds its clicks, at any parallelism."""
    directory, good, late = logs
    result = complete_topology(storm_topology(directory, parallelism, True), STORM_CONF,
                               runner=runner)
    assert sorted(r[:3] for r in result.tuples("hourly", "late")) == sorted(
        [e["user"], e["ts"], e["page"]] for e in late)
    assert sorted(map(tuple, result.tuples("hourly"))) == sorted(hourly(good).items())


def hourly(events: list[dict]) -> dict[int, int]:
    """Clicks per Storm window (end - 1 h, end], ends on the hour, computed here directly."""
    hours: dict[int, int] = {}
    for e in events:
        end = -(-e["ts"] // (60 * MINUTE)) * 60 * MINUTE
        end = end if end > e["ts"] else end + 60 * MINUTE
        hours[end] = hours.get(end, 0) + 1
    return hours


@pytest.mark.parametrize(("runner", "parallelism"), [
    ("local", 1), ("local", 2), pytest.param("spark", 2, marks=pytest.mark.spark)],
    indirect=["runner"])
def test_storm_windowed_bolts_judge_each_record_at_its_source_position(runner, logs,
                                                                       parallelism):
    """Without opting in, a windowed bolt whose timestamp field the source has judges each
    record by Storm's rule at its position in its own file: the 20 very late clicks are late,
    every hour exact, whatever the parallelism, runner and cut."""
    directory, good, late = logs
    result = complete_topology(storm_topology(directory, parallelism, False), STORM_CONF,
                               runner=runner)
    assert sorted(r[:3] for r in result.tuples("hourly", "late")) == sorted(
        [e["user"], e["ts"], e["page"]] for e in late)
    assert sorted(map(tuple, result.tuples("hourly"))) == sorted(hourly(good).items())


def test_storm_windowed_bolts_keep_storms_rule_without_positions(logs):
    """A timestamp extractor the source cannot apply: no positions, Storm's rule over the
    input stream as tuples arrive (one file read before the other: over 1,000 good clicks
    of the second are late)."""
    result = complete_topology(storm_topology(logs[0], 1, False, extractor=True), STORM_CONF)
    assert len(result.tuples("hourly", "late")) > 1000


class StatefulHourlyClicks(StatefulWindowedBolt):
    """Storm's stateful windowed bolt, its window kept in state (persistent mode)."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        self.collector.emit([window.end_timestamp, len(window.get())])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("end", "clicks"))


@pytest.mark.parametrize(("runner", "parallelism"), [
    ("local", 1), ("local", 3), pytest.param("spark", 3, marks=pytest.mark.spark)],
    indirect=["runner"])
def test_persistent_stateful_windowed_bolts_take_source_watermarks(runner, logs, parallelism):
    directory, good, late = logs
    bolt = (StatefulHourlyClicks().with_tumbling_window(Duration(60 * MINUTE))
            .with_timestamp_field("ts").with_lag(Duration(5 * MINUTE))
            .with_late_tuple_stream("late").with_persistence().with_source_watermarks())
    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(directory), FIELDS, bounded=True), parallelism)
    b.set_bolt("hourly", bolt).shuffle_grouping("clicks")
    result = complete_topology(b.create_topology(), STORM_CONF, runner=runner)
    assert sorted(r[:3] for r in result.tuples("hourly", "late")) == sorted(
        [e["user"], e["ts"], e["page"]] for e in late)
    assert sorted(map(tuple, result.tuples("hourly"))) == sorted(hourly(good).items())


def test_message_id_mode_refuses_source_watermarks(logs):
    from squall.errors import InvalidTopologyError

    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(logs[0]), FIELDS, bounded=True))
    b.set_bolt("s", StatefulHourlyClicks().with_tumbling_window(Duration(MINUTE))
               .with_timestamp_field("ts").with_message_id_field("ts")
               .with_source_watermarks()).shuffle_grouping("clicks")
    with pytest.raises(InvalidTopologyError, match=r"with_source_watermarks.*with_persistence"):
        b.create_topology()


# ---- the pure core and the source's events -----------------------------------------------------


def test_partition_watermarks_idle_wake_done_and_components():
    from squall.partition_watermarks import DONE, FROM, IDLE, OWN, PartitionWatermarks

    w = PartitionWatermarks(frozenset({1, 2, 3}), 0, {1: "a", 2: "a", 3: "b"})
    w.control(1, OWN, ["0"])
    w.control(2, OWN, [])  # a task with no partition holds nothing back
    assert w.control(3, OWN, ["0"]) is None  # b's "0" is another partition than a's
    w.control(1, FROM, ["0"])
    w.control(3, FROM, ["0"])
    assert w.observe(1, 100) is None  # b:0 has delivered nothing
    assert w.observe(3, 40) == 40
    assert w.before(1) == 100 and w.before(3) == 40
    assert w.control(3, IDLE, ["0"]) == 100  # idle: a:0 alone
    assert w.control(3, FROM, ["0"]) is None  # awake again, behind: the watermark stays
    assert w.value == 100 and w.observe(3, 50) is None
    assert w.observe(1, 300) is None  # b:0 at 50 holds it now
    assert w.control(3, DONE, ["0"]) == 300
    assert w.observe(2, 10**9) is None  # a tuple before its task said `from`: nothing learnt
    with pytest.raises(ValueError, match="unknown partition event 'bogus'"):
        w.control(1, "bogus", ["0"])


def test_a_source_says_own_from_and_done_in_order(tmp_path):
    """The events of a bounded source's task on the local runner, as a subscriber sees them."""
    from squall import Bolt
    from squall.partition_watermarks import PARTITIONS_STREAM

    class Listen(Bolt):
        def execute(self, tup):
            self.collector.emit([tup.source_stream_id, list(tup.values)])
            self.collector.ack(tup)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("stream", "values"))

    (tmp_path / "a.jsonl").write_text('{"user": "u", "ts": 1, "page": "/"}\n' * 2)
    (tmp_path / "b.jsonl").write_text("")
    b = TopologyBuilder()
    b.set_spout("clicks", JsonLinesSource(str(tmp_path), FIELDS, bounded=True))
    b.set_bolt("listen", Listen()).shuffle_grouping("clicks").all_grouping(
        "clicks", PARTITIONS_STREAM)
    result = complete_topology(b.create_topology(), {"squall.watermark.idle.timeout.ms": 0})
    seen = [tuple(row) for row in result.tuples("listen")]
    # `own` follows the first poll; `done` a poll after a partition is read out (the empty file
    # at once), never `idle` for a read-out partition, even with an idleness timeout of 0.
    assert seen == [(PARTITIONS_STREAM, ["from", ["a.jsonl"]]), ("default", ["u", 1, "/"]),
                    (PARTITIONS_STREAM, ["own", ["a.jsonl", "b.jsonl"]]),
                    ("default", ["u", 1, "/"]), (PARTITIONS_STREAM, ["done", ["b.jsonl"]]),
                    (PARTITIONS_STREAM, ["done", ["a.jsonl"]])], seen
    assert result.stats["clicks"].emitted == 2  # control tuples are not the source's output


# ---- Apex's processing-time watermark generator ------------------------------------------------


class Watermarks(Bolt):
    """Passes on the operator's watermarks and panes as rows (stream, value)."""

    def execute(self, tup):
        value = tup.values[0] if tup.source_stream_id == "_watermark" else tup.values[3]
        self.collector.emit([tup.source_stream_id, value])
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("stream", "value"))


class Paced(Spout):
    """Emits one click per poll every other poll: idle polls let the simulated clock move, so
    the local runner's batches end between clicks."""

    def __init__(self, clicks):
        self.clicks = clicks

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.polls = 0

    def next_tuple(self):
        self.polls += 1
        if self.polls % 2 == 0 and self.polls // 2 <= len(self.clicks):
            i = self.polls // 2 - 1
            self.collector.emit(self.clicks[i], msg_id=i)

    def is_exhausted(self):
        return self.polls // 2 >= len(self.clicks)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields(*FIELDS))


@pytest.mark.runners("local", "spark-1tuple")
def test_a_processing_time_watermark_trails_the_batch_time(runner, runner_conf):
    """`processing_time_watermark=d`: from the first batch end the watermark is the batch's
    processing time less d, whatever the event times; clicks of the distant past are on time only
    before it, late after (nothing is lost: each is in a pane or on the late stream)."""
    import time

    from squall.testing import simulated_time
    from squall.windows import TimeWindows

    clicks = [["u", 1000 + i, "/"] for i in range(8)]  # all in the window [0, 60 s)
    b = TopologyBuilder()
    b.set_spout("clicks", Paced(clicks))
    b.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration(MINUTE)),
        allowed_lateness=Duration(0), processing_time_watermark=Duration(DAY),
        timestamp_field="ts", key_field="user", value_field="page", late_stream="late"),
    ).shuffle_grouping("clicks")
    b.set_bolt("seen", Watermarks()).all_grouping("count", "_watermark").shuffle_grouping("count")
    start = 10**12  # the local runner's simulated clock; Spark's batches take the wall clock
    before = time.time() * 1000 if runner == "spark" else start
    with simulated_time(start):
        # A batch a millisecond (the local runner's idle polls move its clock by one).
        conf = {**CONF, **runner_conf, "squall.local.batch.ms": 1}
        result = complete_topology(b.create_topology(), conf, runner=runner)
    after = time.time() * 1000 if runner == "spark" else start + 10**9
    seen = result.tuples("seen")
    marks = [v for s, v in seen if s == "_watermark"]
    assert marks and before - DAY <= marks[0] <= after - DAY
    panes = [v for s, v in seen if s == "default"]
    late = result.tuples("count", "late")
    assert sum(panes) + len(late) == len(clicks)
    # One click per batch: the first batch end makes the rest late.
    assert panes == [1] and len(late) == 7


# ---- one lateness rule per operator, whatever the input -----------------------------------------


def lateness_rule_topology(spout: Spout, rule):
    """10 s windows, the maximum per key, allowed lateness 30 s, watermark delay 5 s."""
    from squall.windows import AfterCount, AfterWatermark, TimeWindows, accumulations

    b = TopologyBuilder()
    b.set_spout("events", spout)
    b.set_bolt("max", KeyedWindowedOperator(
        accumulation=accumulations.Max(), window=TimeWindows(Duration.seconds(10)),
        trigger=AfterWatermark(late=AfterCount(1)), lateness_rule=rule,
        allowed_lateness=Duration.seconds(30), watermark_delay=Duration.seconds(5),
        timestamp_field="ts", key_field="key", value_field="value", late_stream="late",
    ), 1).fields_grouping("events", ["key"])
    return b.create_topology()


@pytest.mark.parametrize("partitioned", [False, True], ids=["FixedTupleSpout", "MemorySource"])
def test_the_lateness_rule_holds_for_partitioned_sources(runner, partitioned):
    """Beam's rule (`WINDOW_EXPIRED`): 99 at 4 s is 31 s behind the watermark (40 - 5 s) but its
    window [0, 10 s) has not expired (10 + 30 > 35 s), so it is a LATE pane, from a partitioned
    source as from a plain spout; Apex's rule (`BEHIND_WATERMARK`) drops it to the late stream."""
    from squall.connectors import MemorySource
    from squall.testing import FixedTupleSpout
    from squall.windows import LatenessRule

    events = [["a", 10, 1_000], ["b", 5, 40_000], ["a", 99, 4_000]]
    fields = Fields("key", "value", "ts")
    for rule in (LatenessRule.WINDOW_EXPIRED, LatenessRule.BEHIND_WATERMARK):
        spout = MemorySource([events], fields) if partitioned else FixedTupleSpout(events, fields)
        result = complete_topology(lateness_rule_topology(spout, rule), CONF, runner=runner)
        assert not result.errors
        panes = sorted(tuple(p[:6]) for p in result.tuples("max"))
        late = [row[:3] for row in result.tuples("max", "late")]
        if rule is LatenessRule.WINDOW_EXPIRED:
            assert panes == [("a", 0, 10_000, 10, "ON_TIME", 0), ("a", 0, 10_000, 99, "LATE", 1),
                             ("b", 40_000, 50_000, 5, "ON_TIME", 0)], rule
            assert late == [], rule
        else:
            assert panes == [("a", 0, 10_000, 10, "ON_TIME", 0),
                             ("b", 40_000, 50_000, 5, "ON_TIME", 0)], rule
            assert late == [["a", 99, 4_000]], rule


# ---- a failed tuple holds the watermark until it is replayed or dead-lettered -------------------


def priced_topology():
    """40 prices a second apart, the sixth a string that `Sum` cannot add; 10 s windows,
    watermark delay and allowed lateness 0."""
    from squall.connectors import MemorySource
    from squall.windows import TimeWindows

    rows = [["k", i * 1000, 1] for i in range(40)]
    rows[5][2] = "oops"
    b = TopologyBuilder()
    b.set_spout("prices", MemorySource([rows], Fields("key", "ts", "price")))
    b.set_bolt("sum", KeyedWindowedOperator(
        accumulation=accumulations.Sum(), window=TimeWindows(Duration.seconds(10)),
        allowed_lateness=Duration(0), watermark_delay=Duration(0), timestamp_field="ts",
        key_field="key", value_field="price", late_stream="late",
    )).fields_grouping("prices", ["key"])
    return b.create_topology()


def test_a_poison_tuple_is_retried_and_dead_lettered_not_made_late_by_its_replay(runner):
    """Every attempt of the poison tuple is judged as its first (on time): it fails each time,
    is dead-lettered after 1 + 3 attempts, and never goes to the late stream, although the
    source read on past its window's end meanwhile (Beam's watermark hold)."""
    result = complete_topology(priced_topology(), {**CONF, "squall.retry.max.retries": 3},
                               runner=runner)
    assert result.tuples("sum", "late") == []
    assert result.stats["prices"].dead_lettered == 1
    assert len([e for e in result.errors if "unsupported operand" in str(e.error)]) == 4
    assert sorted(tuple(p[:5]) for p in result.tuples("sum")) == [
        ("k", w * 10_000, (w + 1) * 10_000, 9 if w == 0 else 10, "ON_TIME") for w in range(4)]


def test_without_a_retry_limit_a_poison_tuple_does_not_stop_the_windows(runner):
    """Replayed for ever, a held watermark would never move again: without a retry limit the
    operator holds nothing, the windows fire, and the replay that meets a watermark past its
    window goes to the late stream (its tree completes)."""
    result = complete_topology(priced_topology(), CONF, runner=runner)
    late = [row[:3] for row in result.tuples("sum", "late")]
    assert ["k", 5_000, "oops"] in late
    # Without a limit Spark replays the poison's whole range (at least once): its neighbours,
    # counted at their first delivery, come again, in a pane or behind the watermark.
    assert result.stats["prices"].dead_lettered == 0
    panes = sorted(tuple(p[:5]) for p in result.tuples("sum"))
    assert [(p[1], p[4]) for p in panes] == [(w * 10_000, "ON_TIME") for w in range(4)]
    if runner == "local":
        assert late == [["k", 5_000, "oops"]]
        assert [p[3] for p in panes] == [9, 10, 10, 10]


def test_holds_in_partition_watermarks():
    from squall.partition_watermarks import DONE, FROM, OWN, PartitionWatermarks

    w = PartitionWatermarks(frozenset({1}), 0, {1: "s"})
    w.control(1, OWN, ["0", "1"])
    w.control(1, FROM, ["1"])
    w.observe(1, 50)
    w.control(1, FROM, ["0"])
    assert w.observe(1, 10) == 10
    w.hold(1, ["x", 12], 10)  # a tuple of "0" failed, judged against 10
    assert w.held(1, ["x", 12]) == 10 and w.held(1, ["y", 12]) is None
    assert w.observe(1, 30) is None and w.value == 10  # held
    assert w.release(1, ["x", 12]) == 30
    w.hold(1, ["z", 31], 30)
    assert w.control(1, DONE, ["0"]) is None  # "1" at 50, but the hold keeps it at 30
    assert w.release(1, ["z", 31], partition="1") is None  # another partition's record
    assert w.release(1, ["z", 31], partition="0") == 50  # dead-lettered
    # A snapshot written before holds existed loads without any.
    state = dict(w.__dict__)
    del state["holds"]
    old = PartitionWatermarks.__new__(PartitionWatermarks)
    old.__setstate__(state)
    assert old.holds == [] and old.held(1, ["x"]) is None


# ---- property: the panes do not depend on the runner, the cut or the spout's parallelism -------

WINDOW, DELAY, LATENESS = 10_000, 3_000, 5_000


@st.composite
def partitioned_inputs(draw):
    """1-3 partitions of different speeds, each out of order by less than the delay, with a
    few very late records (beyond delay + allowed lateness against their own partition)."""
    parts = []
    for p in range(draw(st.integers(1, 3))):
        step = draw(st.sampled_from([300, 1_000, 3_000]))  # the partition's speed
        ts, rows, newest = 0, [], None
        for i in range(draw(st.integers(1, 14))):
            ts += step
            jitter = draw(st.integers(0, DELAY - 1))
            key = draw(st.sampled_from("abc"))
            if newest is not None and draw(st.integers(0, 9)) == 0:
                rows.append([key, newest - DELAY - LATENESS - 1 - jitter, f"{p}-{i}-late"])
                continue
            row_ts = max(ts - jitter, 0)
            newest = row_ts if newest is None else max(newest, row_ts)
            rows.append([key, row_ts, f"{p}-{i}"])
        parts.append(rows)
    return parts


def expected_panes(parts, beam_rule=False):
    """The panes and dropped records, computed here directly in each partition's own order.

    A record is judged against its partition's watermark before it (the largest timestamp
    before it less the delay): dropped when more than the allowed lateness behind it (Apex's
    rule) or, with `beam_rule`, when its window has expired too; a record kept whose window has
    ended below that watermark is a LATE pane of its own (discarding, a late firing per
    record); the rest are counted in their window's ON_TIME pane."""
    late, counts, late_panes = set(), {}, []
    for rows in parts:
        newest = None
        for key, ts, name in rows:
            w = ts - ts % WINDOW
            mark = None if newest is None else newest - DELAY
            if mark is not None and ts < mark - LATENESS and (
                    not beam_rule or w + WINDOW <= mark - LATENESS):
                late.add(name)
                continue
            newest = ts if newest is None else max(newest, ts)
            if mark is not None and w + WINDOW <= mark:
                late_panes.append((key, w, w + WINDOW, 1, "LATE"))
                continue
            counts[(key, w)] = counts.get((key, w), 0) + 1
    on_time = [(k, w, w + WINDOW, n, "ON_TIME") for (k, w), n in counts.items()]
    return sorted(on_time + late_panes), late


class KeyCounts(WindowedBolt):
    """Storm's windowed bolt: per window, the tuples of each key, as (key, end, count)."""

    def execute(self, window):
        counts: dict[str, int] = {}
        for tup in window.get():
            counts[tup["key"]] = counts.get(tup["key"], 0) + 1
        for key, n in sorted(counts.items()):
            self.collector.emit([key, window.end_timestamp, n])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("key", "end", "count"))


def expected_storm_windows(parts):
    """Storm's rule at each record's position in its partition (late below the largest
    timestamp before it, less the lag), the rest counted per key in Storm's windows
    (end - WINDOW, end]: computed here directly."""
    late, counts = set(), {}
    for rows in parts:
        newest = None
        for key, ts, name in rows:
            if newest is not None and ts < newest - DELAY:
                late.add(name)
                continue
            newest = ts if newest is None else max(newest, ts)
            end = -(-ts // WINDOW) * WINDOW
            counts[(key, end)] = counts.get((key, end), 0) + 1
    return sorted((k, end, n) for (k, end), n in counts.items()), late


def partitioned_topology(parts, spout_parallelism, chain=(), operator_parallelism=1,
                         beam_rule=False, two_sources=False, storm=False):
    """`chain`: pass-through bolts between source and operator, each `(parallelism,
    grouping)` with grouping "shuffle", "fields" (by key) or "local_or_shuffle". A late firing
    per late record; Apex's lateness rule, or Beam's with `beam_rule`. `two_sources`: the first
    partition read by one source component, the others by another, both into the first bolt
    (or the operator). `storm`: a Storm windowed bolt (tumbling, lag DELAY) instead of the
    operator."""
    from squall.connectors import MemorySource
    from squall.windows import AfterCount, AfterWatermark, LatenessRule, TimeWindows

    fields = ["key", "ts", "name"]
    b = TopologyBuilder()
    split = [parts[:1], parts[1:]] if two_sources and len(parts) > 1 else [parts]
    upstreams = [f"events{n}" for n in range(len(split))]
    for name, some in zip(upstreams, split, strict=True):
        b.set_spout(name, MemorySource(some, Fields(*fields), records_per_range=3),
                    spout_parallelism)

    def subscribe(declarer, grouping):
        for upstream in upstreams:
            if grouping == "fields":
                declarer.fields_grouping(upstream, ["key"])
            else:
                getattr(declarer, f"{grouping}_grouping")(upstream)

    for n, (parallelism, grouping) in enumerate(chain):
        subscribe(b.set_bolt(f"bolt{n}", Forward(fields), parallelism), grouping)
        upstreams = [f"bolt{n}"]
    if storm:
        bolt = (KeyCounts().with_tumbling_window(Duration(WINDOW)).with_timestamp_field("ts")
                .with_lag(Duration(DELAY)).with_late_tuple_stream("late"))
        subscribe(b.set_bolt("count", bolt, operator_parallelism), "fields")
        return b.create_topology()
    subscribe(b.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration(WINDOW)),
        allowed_lateness=Duration(LATENESS), watermark_delay=Duration(DELAY),
        trigger=AfterWatermark(late=AfterCount(1)),
        lateness_rule=(LatenessRule.WINDOW_EXPIRED if beam_rule
                       else LatenessRule.BEHIND_WATERMARK),
        timestamp_field="ts", key_field="key", value_field="name", late_stream="late"),
        operator_parallelism), "fields")
    return b.create_topology()


CHAINS = st.lists(st.tuples(st.integers(1, 3),
                            st.sampled_from(["shuffle", "fields", "local_or_shuffle"])),
                  max_size=2)


@pytest.mark.runners("local", "spark", "spark-1batch")
def test_panes_do_not_depend_on_runner_cut_or_parallelism(runner, runner_conf):
    """Against the panes and late records computed directly: 80 examples on the local runner
    (its cut is its own), three of a fixed seed on each Spark cut (one shared session), each
    with partitions out of step and very late records, read directly or through zero to two
    pass-through bolts (parallelism 1-3; shuffle, fields or local-or-shuffle grouping), by an
    operator of parallelism 1-3, under Apex's or Beam's lateness rule (Beam's keeps some very
    late records as LATE panes, which must come after their window's ON_TIME pane), or by a
    Storm windowed bolt of parallelism 1-3 under Storm's rule, from one source component or
    two."""
    local = runner == "local"
    # On Spark, inputs worth a run: partitions out of step and very late records.
    inputs = partitioned_inputs() if local else partitioned_inputs().filter(
        lambda parts: len(parts) > 1 and bool(expected_panes(parts)[1]))

    @hypothesis_seed(49)
    @settings(max_examples=80 if local else 3, deadline=None, derandomize=local,
              database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(parts=inputs, spout_parallelism=st.integers(1, 2), chain=CHAINS,
           operator_parallelism=st.integers(1, 3), rule=st.sampled_from(["apex", "beam", "storm"]),
           two_sources=st.booleans())
    def check(parts, spout_parallelism, chain, operator_parallelism, rule, two_sources):
        storm = rule == "storm"
        topology = partitioned_topology(parts, spout_parallelism, chain, operator_parallelism,
                                        rule == "beam", two_sources, storm)
        result = complete_topology(topology, {**CONF, **runner_conf}, runner=runner)
        assert not result.errors
        if storm:
            windows, late = expected_storm_windows(parts)
            assert sorted(map(tuple, result.tuples("count"))) == windows
            assert {row[2] for row in result.tuples("count", "late")} == late
            return
        panes, late = expected_panes(parts, rule == "beam")
        assert sorted(tuple(p[:5]) for p in result.tuples("count")) == panes
        assert {row[2] for row in result.tuples("count", "late")} == late

    check()


@pytest.mark.extended  # one tuple per micro-batch: CI's second run (the suite's budget)
@pytest.mark.runners("spark-1tuple")
def test_panes_do_not_depend_on_one_tuple_batches(runner, runner_conf):
    """The property above at the cut that differs most from the whole input."""
    test_panes_do_not_depend_on_runner_cut_or_parallelism(runner, runner_conf)


# ---- watermarks carried with the data: through bolts, per operator ----------------------------


class Split(BasicBolt):
    """Sentences to words, each word with its sentence's event time."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "ts"))

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word, tup[1]])


class Forward(BasicBolt):
    """Passes every tuple on as it is (a stand-in for any stateless bolt)."""

    def __init__(self, fields):
        self.fields = fields

    def declare_output_fields(self, declarer):
        declarer.declare(Fields(*self.fields))

    def execute(self, tup, collector):
        collector.emit(list(tup.values))


def sentences(n: int) -> list[list]:
    rnd = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    return [[" ".join(rnd.choice(words) for _ in range(8)), i * 100] for i in range(n)]


@pytest.mark.runners("local", "spark", "spark-1batch")
def test_a_parallel_bolt_upstream_makes_no_in_order_tuple_late(runner, runner_conf):
    """In-order sentences through a split of parallelism 2 into a keyed operator of
    parallelism 2 (watermark delay and allowed lateness 0): every word in its window, none
    late, although a Spark stage hands the operator one split task's rows and then the
    other's."""
    from squall.connectors import MemorySource
    from squall.windows import TimeWindows

    rows = sentences(300)
    b = TopologyBuilder()
    b.set_spout("sentences", MemorySource([rows], Fields("sentence", "ts")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration.seconds(10)),
        allowed_lateness=Duration(0), watermark_delay=Duration(0), timestamp_field="ts",
        key_field="word", value_field="word", late_stream="late"), 2).fields_grouping(
            "split", ["word"])
    result = complete_topology(b.create_topology(), {**CONF, **runner_conf}, runner=runner)
    assert not result.errors
    expected: dict[tuple, int] = {}
    for sentence, ts in rows:
        for word in sentence.split():
            key = (word, ts - ts % 10_000)
            expected[key] = expected.get(key, 0) + 1
    assert result.tuples("count", "late") == []
    assert {(p[0], p[1]): p[3] for p in result.tuples("count")} == expected


def skewed_topology(operator_parallelism: int, through_bolt: bool, rule):
    """Keys a-d at 1 s, then a at 100 s, then a-d at 2 s (value 50): the input's watermark is
    95 s, so [0, 10 s) has expired (allowed lateness 0) for the 2 s tuples."""
    from squall.connectors import MemorySource
    from squall.windows import TimeWindows

    rows = ([[k, 1_000, 1] for k in "abcd"] + [["a", 100_000, 1]]
            + [[k, 2_000, 50] for k in "abcd"])
    b = TopologyBuilder()
    b.set_spout("events", MemorySource([rows], Fields("key", "ts", "value")))
    upstream = "events"
    if through_bolt:
        b.set_bolt("forward", Forward(["key", "ts", "value"]), 2).shuffle_grouping("events")
        upstream = "forward"
    b.set_bolt("max", KeyedWindowedOperator(
        accumulation=accumulations.Max(), window=TimeWindows(Duration.seconds(10)),
        allowed_lateness=Duration(0), watermark_delay=Duration.seconds(5), lateness_rule=rule,
        timestamp_field="ts", key_field="key", value_field="value", late_stream="late",
    ), operator_parallelism).fields_grouping(upstream, ["key"])
    return b.create_topology()


@pytest.mark.parametrize("through_bolt", [False, True], ids=["direct", "through-bolt"])
def test_what_is_late_does_not_depend_on_the_operators_parallelism(runner, through_bolt):
    """The 2 s tuples are late at every operator parallelism (1 to 3), whichever task their key
    goes to, under both lateness rules: an operator's watermark is the input's, not its
    task's."""
    from squall.windows import LatenessRule

    for rule in (LatenessRule.BEHIND_WATERMARK, LatenessRule.WINDOW_EXPIRED):
        for parallelism in (1, 2, 3):
            result = complete_topology(skewed_topology(parallelism, through_bolt, rule),
                                       CONF, runner=runner)
            assert not result.errors
            assert sorted(tuple(p[:4]) for p in result.tuples("max")) == [
                ("a", 0, 10_000, 1), ("a", 100_000, 110_000, 1), ("b", 0, 10_000, 1),
                ("c", 0, 10_000, 1), ("d", 0, 10_000, 1)], (rule, parallelism)
            assert sorted(row[0] for row in result.tuples("max", "late")) == list("abcd")


@pytest.mark.parametrize("parallelism", [1, 2])
def test_the_lateness_rule_and_late_panes_hold_through_a_bolt(runner, parallelism):
    """The lateness-rule example through a pass-through bolt: under Beam's rule the 99 behind
    its partition's watermark is a LATE pane after the ON_TIME one, although the operator's
    own watermark has not reached the window's end when it arrives (it waits for it)."""
    from squall.connectors import MemorySource
    from squall.windows import AfterCount, AfterWatermark, LatenessRule, TimeWindows

    events = [["a", 10, 1_000], ["b", 5, 40_000], ["a", 99, 4_000]]
    b = TopologyBuilder()
    b.set_spout("events", MemorySource([events], Fields("key", "value", "ts")))
    b.set_bolt("forward", Forward(["key", "value", "ts"]), parallelism).shuffle_grouping(
        "events")
    b.set_bolt("max", KeyedWindowedOperator(
        accumulation=accumulations.Max(), window=TimeWindows(Duration.seconds(10)),
        trigger=AfterWatermark(late=AfterCount(1)), lateness_rule=LatenessRule.WINDOW_EXPIRED,
        allowed_lateness=Duration.seconds(30), watermark_delay=Duration.seconds(5),
        timestamp_field="ts", key_field="key", value_field="value", late_stream="late",
    ), parallelism).fields_grouping("forward", ["key"])
    result = complete_topology(b.create_topology(), CONF, runner=runner)
    assert not result.errors
    assert sorted(tuple(p[:6]) for p in result.tuples("max")) == [
        ("a", 0, 10_000, 10, "ON_TIME", 0), ("a", 0, 10_000, 99, "LATE", 1),
        ("b", 40_000, 50_000, 5, "ON_TIME", 0)]
    assert result.tuples("max", "late") == []


def test_a_source_without_the_operators_field_behind_a_bolt_is_named_in_a_warning(caplog):
    """The operator's timestamp field is made by the bolt: the source cannot give positions,
    and the builder says so, naming the operator, the source and the key to set."""
    from squall.connectors import MemorySource
    from squall.windows import TimeWindows

    b = TopologyBuilder()
    b.set_spout("events", MemorySource([[["a", 1]]], Fields("key", "when")))
    b.set_bolt("forward", Forward(["key", "ts"])).shuffle_grouping("events")
    b.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration.seconds(10)),
        watermark_delay=Duration(0), timestamp_field="ts", key_field="key",
        value_field="key")).fields_grouping("forward", ["key"])
    with caplog.at_level("WARNING", logger="squall"):
        topology = b.create_topology()
    assert "squall.source.event.time.field" in caplog.text and "'count'" in caplog.text
    assert "events" in caplog.text
    assert topology.components["events"].conf.get("squall.source.event.time.field") is None
    # Named by the user, the source carries positions.
    b2 = TopologyBuilder()
    b2.set_spout("events", MemorySource([[["a", 1]]], Fields("key", "when"))).add_configuration(
        "squall.source.event.time.field", "when")
    b2.set_bolt("forward", Forward(["key", "ts"])).shuffle_grouping("events")
    b2.set_bolt("count", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration.seconds(10)),
        watermark_delay=Duration(0), timestamp_field="ts", key_field="key",
        value_field="key")).fields_grouping("forward", ["key"])
    subscribed = {(s.component, s.stream) for s in b2.create_topology().components[
        "count"].inputs}
    assert ("events", "_partitions") in subscribed


class TenSecondCounts(WindowedBolt):
    """Storm's windowed bolt: words per 10 s of event time."""

    def execute(self, window):
        self.collector.emit([window.end_timestamp, len(window.get())])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("end", "words"))


class StatefulTenSecondCounts(StatefulWindowedBolt):
    """Storm's stateful windowed bolt: words per 10 s of event time."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        self.collector.emit([window.end_timestamp, len(window.get())])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("end", "words"))


@pytest.mark.runners("local", "spark", "spark-1batch")
@pytest.mark.parametrize(("parallelism", "stateful"), [(1, False), (2, False), (2, True)])
def test_a_storm_windowed_bolt_behind_a_parallel_bolt_gets_no_batching_lateness(
        runner, runner_conf, parallelism, stateful):
    """Storm's rule at each record's source position through a split of parallelism 2 (which
    a Spark stage delivers one task's rows after the other's): in-order sentences, lag 0,
    whatever the cut and the bolt's parallelism, nothing late and every window's count
    exact; a stateful windowed bolt keeping its window in state too."""
    from squall.connectors import MemorySource

    rows = sentences(200)
    bolt = (StatefulTenSecondCounts().with_persistence() if stateful else TenSecondCounts())
    bolt = (bolt.with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_lag(Duration(0)).with_late_tuple_stream("late"))
    b = TopologyBuilder()
    b.set_spout("sentences", MemorySource([rows], Fields("sentence", "ts")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", bolt, parallelism).fields_grouping("split", ["word"])
    result = complete_topology(b.create_topology(), {**CONF, **runner_conf}, runner=runner)
    assert not result.errors
    assert result.tuples("count", "late") == []
    counts: dict[int, int] = {}
    for end, words in result.tuples("count"):
        counts[end] = counts.get(end, 0) + words
    expected: dict[int, int] = {}
    for _sentence, ts in rows:
        end = -(-ts // 10_000) * 10_000  # Storm's windows: (end - 10 s, end]
        expected[end] = expected.get(end, 0) + 8
    assert counts == expected


@pytest.mark.runners("local", "spark", "spark-1batch")
def test_a_merge_operator_behind_parallel_bolts_takes_each_inputs_positions(runner, runner_conf):
    """Orders and payments, each in event-time order, each through a pass-through bolt of
    parallelism 2 into a join of 1 s windows (delay and allowed lateness 0): every order
    joined with its payments, nothing late, on both runners and at every cut; each input's
    watermark comes from its own source, the join's is the smaller."""
    from squall.connectors import MemorySource
    from squall.windows import AfterWatermark, TimeWindows, WindowedMergeOperator

    orders = [[f"o{i}", f"item{i}", i * 250] for i in range(40)]
    payments = [[f"o{i}", i, i * 250 + 100] for i in range(40) for _ in range(2)]
    b = TopologyBuilder()
    b.set_spout("orders", MemorySource([orders], Fields("order", "item", "ts")))
    b.set_spout("payments", MemorySource([payments], Fields("order", "amount", "ts")))
    b.set_bolt("o", Forward(["order", "item", "ts"]), 2).shuffle_grouping("orders")
    b.set_bolt("p", Forward(["order", "amount", "ts"]), 2).shuffle_grouping("payments")
    join = WindowedMergeOperator(
        input1="o", input2="p", window=TimeWindows(Duration.seconds(1)),
        accumulation=accumulations.InnerJoin(), trigger=AfterWatermark(),
        allowed_lateness=Duration(0), watermark_delay=Duration(0), timestamp_field="ts",
        key_field="order", value_field="item", value_field2="amount", late_stream="late")
    (b.set_bolt("join", join, 2).fields_grouping("o", Fields("order"))
     .fields_grouping("p", Fields("order")))
    topology = b.create_topology()
    subscribed = {(s.component, s.stream) for s in topology.components["join"].inputs}
    assert {("orders", "_partitions"), ("payments", "_partitions")} <= subscribed
    result = complete_topology(topology, {**CONF, **runner_conf}, runner=runner)
    assert not result.errors
    assert result.tuples("join", "late") == []
    joined = {(p[0], p[1]): p[3] for p in result.tuples("join")}
    assert joined == {(f"o{i}", i * 250 - i * 250 % 1000): [[f"item{i}", i], [f"item{i}", i]]
                      for i in range(40)}
