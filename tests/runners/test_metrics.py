"""Metrics: every figure of a `MetricsSnapshot` checked on a topology whose answer is
known, on both runners: counters per component, task and stream, tuple-level acks for built-in
sources, complete latency above zero at sub-millisecond resolution, sampled execute and process
latencies, capacity, pending while trees are in flight, and the snapshot's JSON form.
"""

from __future__ import annotations

import json
import time

import pytest

from squall import (
    Bolt,
    Duration,
    Fields,
    StatefulBolt,
    TopologyBuilder,
    Values,
    WindowedBolt,
    run,
)
from squall.connectors import JsonLinesSource, MemorySource
from squall.metrics import LatencyHistogram, MetricsSnapshot
from squall.metrics.user import CountMetric, MeanReducer, MultiCountMetric, ReducedMetric
from squall.testing import FixedTupleSpout

PER_PARTITION = 100


class Split(Bolt):
    """Every record on `default`, the odd ones also on `odd`; counts in its own metrics."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = context.register_metric("seen", CountMetric())
        self.parity = context.register_metric("parity", MultiCountMetric())
        self.mean_i = context.register_metric("mean_i", ReducedMetric(MeanReducer()))

    def execute(self, tup):
        i = tup["i"]
        self.seen.incr()
        self.parity.scope("odd" if i % 2 else "even").incr()
        self.mean_i.update(i)
        self.collector.emit(Values(i), anchors=tup)
        if i % 2:
            self.collector.emit(Values(i), anchors=tup, stream="odd")
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("i"))
        declarer.declare_stream("odd", Fields("i"))


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def known_topology():
    data = {p: [[i] for i in range(PER_PARTITION)] for p in ("a", "b")}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("i"), records_per_range=25))
    b.set_bolt("split", Split(), 2).shuffle_grouping("numbers")
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("split").shuffle_grouping("split", "odd")
    return b.create_topology()


@pytest.mark.runners("local", "spark")
def test_every_figure_of_a_known_topology(runner):
    snapshots: list[MetricsSnapshot] = []
    result = run(known_topology(), {"squall.spark.batch.max.tuples": 60}, runner=runner,
                 on_progress=snapshots.append, progress_every_ms=100)
    assert snapshots and all(isinstance(s, MetricsSnapshot) for s in snapshots)
    last = snapshots[-1]
    assert last.runner == runner
    # The last snapshot is the run's end: its time is the result's, and it says so.
    assert 0 < last.elapsed_ms == result.elapsed_ms and last.status == "finished"
    assert all(s.status != "finished" for s in snapshots[:-1])
    total = 2 * PER_PARTITION
    numbers, split, sink = (last.components[c] for c in ("numbers", "split", "sink"))

    # Spout: acks count tuples (on Spark a range of 25 records is one tree, 25 acks).
    assert (numbers.emitted, numbers.acked, numbers.failed, numbers.pending) == (total, total,
                                                                                 0, 0)
    assert numbers.streams == {"default": total}
    lat = numbers.complete_latency
    # Spark: the trees that waited for the first micro-batch's start-up are left out.
    assert lat is not None and lat.count == total - last.startup.get("tuples", 0)
    assert 0 < lat.p50_ms <= lat.p99_ms <= lat.max_ms, "latency above zero, sub-ms resolution"
    assert lat.mean_ms == pytest.approx(result.stats["numbers"].complete_latency_ms, abs=1e-4)

    # Bolts: per stream, transferred (one receiving task per tuple), sampled latencies.
    assert (split.executed, split.acked, split.emitted, split.transferred) == (
        total, total, total * 3 // 2, total * 3 // 2)
    assert split.streams == {"default": total, "odd": total // 2}
    assert (sink.executed, sink.acked, sink.emitted) == (total * 3 // 2, total * 3 // 2, 0)
    for bolt in (split, sink):
        assert bolt.execute_latency is not None and bolt.execute_latency.count >= 1
        assert bolt.execute_latency.max_ms > 0
        assert bolt.process_latency is not None, "acked in execute: process = execute latency"
        assert bolt.capacity is not None and bolt.capacity >= 0

    # Per task: one entry per task, summing to the component's counters.
    for c in (numbers, split, sink):
        assert len(c.per_task) == c.tasks
        for name in ("emitted", "transferred", "executed", "acked", "failed"):
            assert sum(getattr(t, name) for t in c.per_task.values()) == getattr(c, name), (
                c.component, name)
    for cid, stats in result.stats.items():
        c = last.components[cid]
        assert (c.emitted, c.executed, c.acked, c.failed) == (
            stats.emitted, stats.executed, stats.acked, stats.failed)

    # The bolt's own metrics, summed over its tasks (and Spark's batches).
    assert last.user_metrics == {"split": {"seen": total, "parity": {"odd": total // 2,
                                                                     "even": total // 2},
                                           "mean_i": (PER_PARTITION - 1) / 2}}
    # Spark's micro-batches, as Spark reported them.
    if runner == "spark":
        assert last.batches and sum(b.input_rows for b in last.batches) > 0
        assert all(b.duration_ms >= b.processing_ms >= 0 for b in last.batches)
        # Start-up: the session (shared here, so about 0), then the query and its first batch.
        up = last.startup
        assert set(up) == {"session_ms", "query_ms", "first_batch_started_ms",
                           "first_batch_done_ms", "tuples"}
        assert 0 < up["tuples"] < total
        assert up["query_ms"] <= up["first_batch_started_ms"] <= up["first_batch_done_ms"]
    else:
        assert last.batches == [] and last.startup == {}

    # The snapshot is plain JSON and comes back equal.
    text = json.dumps(last.to_dict())
    assert MetricsSnapshot.from_dict(json.loads(text)) == last
    # Counters only grow from one snapshot to the next.
    emitted = [s.components["numbers"].emitted for s in snapshots]
    assert emitted == sorted(emitted)


class Slow(Bolt):
    def execute(self, tup):
        time.sleep(0.005)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.runners("local", "spark")
def test_pending_counts_trees_in_flight(runner):
    # A user spout (one tree per tuple) into a slow bolt: while it runs, trees are in flight.
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[f"w{i}"] for i in range(200)], Fields("word")))
    b.set_bolt("slow", Slow()).shuffle_grouping("words")
    seen: list[tuple[int, int, int]] = []

    def progress(s: MetricsSnapshot) -> None:
        w = s.components["words"]
        seen.append((w.emitted, w.acked, w.pending))

    run(b.create_topology(), {"squall.spark.batch.max.tuples": 50,
                              "topology.max.spout.pending": 50},
        runner=runner, on_progress=progress, progress_every_ms=50)
    assert any(p > 0 for _, _, p in seen), seen
    for emitted, acked, pending in seen:
        assert pending <= 50 and acked + pending <= emitted, seen
    assert seen[-1] == (200, 200, 0)


class Window(WindowedBolt):
    def execute(self, window):
        self.collector.emit(Values(len(window.get())))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


@pytest.mark.runners("local", "spark")
def test_malformed_late_and_windowed_counts(runner, tmp_path):
    # Three records and a line that is not JSON; then a tuple behind the watermark.
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"v": 1, "ts": 5000}\nnot json\n'
                                             '{"v": 2, "ts": 6000}\n{"v": 3, "ts": 3000}\n')
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSource(str(tmp_path / "in"), ["v", "ts"], bounded=True))
    b.set_bolt("w", Window().with_tumbling_window(Duration.seconds(10))
               .with_timestamp_field("ts")).shuffle_grouping("lines")
    snapshots: list[MetricsSnapshot] = []
    run(b.create_topology(), {"squall.spark.batch.max.tuples": 1}, runner=runner,
        on_progress=snapshots.append)
    lines, w = snapshots[-1].components["lines"], snapshots[-1].components["w"]
    assert (lines.emitted, lines.malformed, lines.streams) == (4, 1, {"default": 3,
                                                                      "malformed": 1})
    # Three tuples acked, one of them late. Executed may count tick tuples too, as Storm's UI
    # does (a time window's bolt gets ticks; on Spark a run lasts long enough for some).
    assert (w.acked, w.late) == (3, 1) and w.executed >= 3
    assert w.in_windows is not None and w.in_windows >= 0


class KeyCount(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup["k"], self.state.get(tup["k"], 0) + 1)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.runners("local", "spark")
def test_state_size_counts_the_keys_of_a_stateful_bolt(runner, tmp_path):
    # 7 keys, all in the first 60 records; the state's size is its committed keys, so later
    # batches see all 7.
    data = {"p": [[f"k{i % 7}"] for i in range(300)]}
    b = TopologyBuilder()
    b.set_spout("keys", MemorySource(data, Fields("k"), records_per_range=30))
    b.set_bolt("count", KeyCount(), 2).fields_grouping("keys", Fields("k"))
    snapshots: list[MetricsSnapshot] = []
    run(b.create_topology(), {"squall.spark.batch.max.tuples": 60,
                              "topology.state.checkpoint.interval.ms": 100},
        runner=runner, checkpoint_location=str(tmp_path / "ckpt"), on_progress=snapshots.append,
        progress_every_ms=100)
    count = snapshots[-1].components["count"]
    assert count.state_size == 7
    assert len(count.per_task) == 2 and sum(t.state_size for t in count.per_task.values()) == 7


def test_histogram_percentiles_within_a_sixteenth():
    h = LatencyHistogram()
    values = [17, 250, 999, 1_000, 1_001, 5_000, 77_777, 1_000_000, 3_600_000_000]
    for us in values:
        h.record_us(us)
    for p in (10, 50, 90, 99, 100):
        rank = max(1, -(-len(values) * p // 100))
        exact = sorted(values)[rank - 1] / 1000
        assert abs(h.percentile_ms(p) - exact) <= exact / 16, p
    merged = LatencyHistogram.from_state(h.state())
    merged.merge(h)
    assert (merged.count, merged.max_us, merged.sum_us) == (2 * len(values), 3_600_000_000,
                                                           2 * sum(values))
    assert merged.percentile_ms(50) == h.percentile_ms(50)
