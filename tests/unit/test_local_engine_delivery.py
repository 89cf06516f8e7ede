"""How the local runner delivers tuples (`squall.runtime.local.engine.LocalEngine`): executed as
they are sent in an acyclic topology, queued when the topology has a cycle. Either way a tuple
is counted as executed by its task, and it carries the event-time position of the source record
it derives from (`collector.source_at()`, squall.partition_watermarks): a queued tuple takes
the position in force when it was sent along, and `drain` puts it back when it executes it.
"""

from __future__ import annotations

import pytest

from squall import Bolt, Config, Fields, Spout, TopologyBuilder
from squall.runtime.local.engine import LocalEngine

N = 6  # records, two per `next_tuple`
HOPS = 2  # times each record goes around the cycle


class PositionedSpout(Spout):
    """Emits records 0 .. N-1, two per call, each with its source position (its number x 10),
    as a partitioned source does."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self):
        if self.i >= N:
            return
        for _ in range(2):
            i, self.i = self.i, self.i + 1
            self.collector.set_source_at(i * 10)
            try:
                self.collector.emit([i], msg_id=i)
            finally:
                self.collector.set_source_at(None)

    def is_exhausted(self):
        return self.i >= N

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class Loop(Bolt):
    """Sends each record around `HOPS` times (to itself, stream "again"), then on; notes the
    position each tuple executes with."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list[tuple[int, int, int | None]] = []

    def execute(self, tup):
        n = tup.values[0]
        hop = tup.values[1] if len(tup.values) > 1 else 0
        self.seen.append((n, hop, self.collector.source_at()))
        if hop < HOPS:
            self.collector.emit([n, hop + 1], anchors=tup, stream="again")
        else:
            self.collector.emit([n, hop], anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "hop"))
        declarer.declare_stream("again", Fields("n", "hop"))


class Record(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list[tuple[int, int, int | None]] = []

    def execute(self, tup):
        self.seen.append((tup.values[0], tup.values[1], self.collector.source_at()))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.parametrize("cycle", [True, False], ids=["queued", "executed-as-sent"])
def test_a_tuple_carries_its_source_position_and_is_counted_however_it_is_delivered(cycle):
    b = TopologyBuilder()
    b.set_spout("source", PositionedSpout())
    loop = b.set_bolt("loop", Loop()).shuffle_grouping("source")
    if cycle:
        loop.shuffle_grouping("loop", "again")
    else:  # the same hops, each by a bolt of its own
        for hop in range(1, HOPS + 1):
            b.set_bolt(f"loop{hop}", Loop()).shuffle_grouping(
                "loop" if hop == 1 else f"loop{hop - 1}", "again")
    b.set_bolt("record", Record()).shuffle_grouping("loop" if cycle else f"loop{HOPS}")
    conf = Config()
    conf.set_num_ackers(1)
    engine = LocalEngine(b.create_topology(), conf)
    assert engine.direct is not cycle
    result = engine.run(until_complete=True)
    assert not result.errors
    loops = [bolt.seen for t in engine.bolts if t.component_id.startswith("loop")
             for bolt in [t.instance]]
    seen = sorted(s for part in loops for s in part)
    assert seen == [(n, hop, n * 10) for n in range(N) for hop in range(HOPS + 1)]
    (record,) = [t.instance for t in engine.bolts if t.component_id == "record"]
    assert sorted(record.seen) == [(n, HOPS, n * 10) for n in range(N)]
    stats = result.stats
    assert sum(s.executed for cid, s in stats.items() if cid.startswith("loop")) == len(seen)
    assert stats["record"].executed == N
    assert stats["source"].acked == N  # every record's tree completed
