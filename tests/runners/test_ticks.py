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


class PingsUntilControlTimesOut(FixedTupleSpout):
    """Emits "hold" and "control" together, then a "ping" each time the previous one is acked,
    and "release" once "control" has timed out.

    Both are held by the bolt and start their message timeouts with the same batch; only "hold"
    is reset by the pings. The control's timeout is the condition waited on: when the spout
    sees it fail, "hold" has outlived the timeout it would have had without the resets.
    """

    def __init__(self):
        super().__init__([], Fields("text"))

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.started = self.done = False
        self.ping_acked = True
        self.pings = 0

    def next_tuple(self):
        if not self.started:
            self.started = True
            self.collector.emit(["hold"], msg_id="hold")
            self.collector.emit(["control"], msg_id="control")
        elif self.done:
            return
        elif "control" in self.failed:
            self.collector.emit(["release"], msg_id="release")
            self.done = True
        elif self.ping_acked:
            self.ping_acked = False
            self.pings += 1
            self.collector.emit(["ping"], msg_id=f"ping{self.pings}")

    def ack(self, msg_id):
        super().ack(msg_id)
        if str(msg_id).startswith("ping"):
            self.ping_acked = True

    def is_exhausted(self):
        return self.done


class HoldWithResets(Bolt):
    """Holds "hold" and "control"; each "ping" resets the timeout of "hold" only; "release"
    acks "hold" (the control has timed out by then)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = None

    def execute(self, tup):
        if tup["text"] == "hold":
            self.held = tup
        elif tup["text"] == "ping":
            self.collector.reset_timeout(self.held)
        elif tup["text"] == "release":
            self.collector.ack(self.held)
        if tup["text"] != "control":
            self.collector.ack(tup)


@pytest.mark.spark
def test_reset_timeout_on_spark_postpones_the_spout_timeout(spark_session):
    b = TopologyBuilder()
    b.set_spout("spout", PingsUntilControlTimesOut())
    b.set_bolt("bolt", HoldWithResets()).shuffle_grouping("spout")
    conf = {"topology.message.timeout.secs": 8, "spark.sql.shuffle.partitions": 2}
    # The cap only ends a run whose control never times out.
    result = complete_topology(b.create_topology(), conf, runner="spark", max_time_ms=120_000)
    assert result.failed("spout") == ["control"], "the control times out; hold must not"
    acked = result.acked("spout")
    assert "hold" in acked and "release" in acked
    assert any(str(m).startswith("ping") for m in acked)
