"""Tick tuples (`topology.tick.tuple.freq.secs`) on both runners.

The bolt holds its data tuples until a tick arrives, then acks them and emits how many it held,
so the topology can only complete if ticks are delivered.
"""

from __future__ import annotations

import pytest

from squall import Bolt, Fields, TopologyBuilder, Values, is_tick_tuple
from squall.testing import FixedTupleSpout, complete_topology, simulated_time


class FlushOnTick(Bolt):
    def get_component_configuration(self):
        return {"topology.tick.tuple.freq.secs": 1}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        if is_tick_tuple(tup):
            assert tup.source_component == "__system" and tup.source_stream_id == "__tick"
            if self.held:
                self.collector.emit(Values(len(self.held), tup["rate_secs"]), anchors=self.held)
                for held in self.held:
                    self.collector.ack(held)
                self.held = []
            self.collector.ack(tup)
        else:
            self.held.append(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("flushed", "rate"))


def topology():
    b = TopologyBuilder()
    b.set_spout("items", FixedTupleSpout([[n] for n in range(5)], Fields("n")))
    b.set_bolt("flush", FlushOnTick()).shuffle_grouping("items")
    return b.create_topology()


def test_ticks_on_the_local_runner_arrive_every_period_of_simulated_time():
    with simulated_time() as clock:
        result = complete_topology(topology(), runner="local")
        assert clock.now_ms() == 1000  # the first tick, one period after start, flushed all
    assert result.tuples("flush") == [[5, 1]]
    assert sorted(result.acked("items")) == list(range(5))
    assert result.stats["flush"].executed == 6  # five items and one tick




@pytest.mark.spark
def test_ticks_on_spark_are_planned_with_the_batches(spark_session):
    result = complete_topology(topology(), runner="spark")
    flushed = result.tuples("flush")
    assert sum(n for n, _rate in flushed) == 5 and all(rate == 1 for _n, rate in flushed)
    assert sorted(result.acked("items")) == list(range(5))
    assert result.errors == []


# ---- reset_timeout on Spark: the reset reaches the spout reader's pending map ------------------


class WallClockPings(FixedTupleSpout):
    """Emits "hold", then a "ping" every second of wall time for 20 s, then "release".

    Test code only: it paces itself on the wall clock so that the hold tuple outlives its 8 s
    message timeout unless the pings reset it (a reset reaches the spout a batch or two later).
    """

    def __init__(self):
        super().__init__([], Fields("text"))

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        import time

        self.clock = time.monotonic
        self.start = None
        self.sent = 0
        self.done = False

    def next_tuple(self):
        now = self.clock()
        if self.start is None:
            self.start = now
            self.collector.emit(["hold"], msg_id="hold")
        elif self.done:
            return
        elif now - self.start >= 20.0:
            self.collector.emit(["release"], msg_id="release")
            self.done = True
        elif now - self.start >= self.sent + 1:
            self.sent += 1
            self.collector.emit(["ping"], msg_id=f"ping{self.sent}")

    def is_exhausted(self):
        return self.done


class HoldWithResets(Bolt):
    """Holds "hold"; each "ping" resets its timeout; "release" acks it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        if tup["text"] == "hold":
            self.held.append(tup)
            return
        for held in self.held:
            if tup["text"] == "ping":
                self.collector.reset_timeout(held)
            else:
                self.collector.ack(held)
        if tup["text"] == "release":
            self.held = []
        self.collector.ack(tup)


@pytest.mark.spark
def test_reset_timeout_on_spark_postpones_the_spout_timeout(spark_session):
    b = TopologyBuilder()
    b.set_spout("spout", WallClockPings())
    b.set_bolt("bolt", HoldWithResets()).shuffle_grouping("spout")
    conf = {"topology.message.timeout.secs": 8, "spark.sql.shuffle.partitions": 2}
    result = complete_topology(b.create_topology(), conf, runner="spark", max_time_ms=120_000)
    assert result.failed("spout") == [], "without the resets, hold would time out after 8 s"
    assert "hold" in result.acked("spout") and "release" in result.acked("spout")
