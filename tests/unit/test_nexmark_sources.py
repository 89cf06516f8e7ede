"""The NEXMark sources: `NexmarkSource` read by a windowed operator that takes its watermark from
the source's partitions (every event in its window, none late, on both runners), and
`NexmarkBatchSpout` in Trident batches."""

from __future__ import annotations

from collections import Counter

import pytest

from squall import Duration, TopologyBuilder
from squall.nexmark import BID, ROW_FIELDS, GeneratorConfig, events
from squall.nexmark.sources import NexmarkBatchSpout, NexmarkSource
from squall.testing import complete_topology
from squall.trident import Count, TridentTopology
from squall.windows import KeyedWindowedOperator, TimeWindows, accumulations

WINDOW = 2_000
# 1,500 events over 15 s of event time, each group of 30 shuffled: a partition's events are up
# to 290 ms out of order, which the operator's watermark delay covers; some groups straddle
# window ends.
CONFIG = GeneratorConfig(max_events=1500, out_of_order_group_size=30)
CONF = {"topology.message.timeout.secs": 600, "spark.sql.shuffle.partitions": 2}


def per_window(config: GeneratorConfig) -> set[tuple[int, int, int, int]]:
    counts = Counter((e.event_type, e.date_time // WINDOW * WINDOW) for e in events(config))
    return {(kind, start, start + WINDOW, n) for (kind, start), n in counts.items()}


def windowed(delay_ms: int):
    b = TopologyBuilder()
    b.set_spout("events", NexmarkSource(CONFIG, partitions=3, records_per_range=200), 2)
    b.set_bolt("counts", KeyedWindowedOperator(
        accumulation=accumulations.Count(), window=TimeWindows(Duration(WINDOW)),
        watermark_delay=Duration(delay_ms), timestamp_field="date_time",
        key_field="event_type", late_stream="late"), 2).fields_grouping("events", ["event_type"])
    return b.create_topology()


def test_every_event_is_in_its_window_and_none_is_late(runner):
    result = complete_topology(windowed(CONFIG.out_of_orderness_ms), CONF, runner=runner)
    assert not result.errors
    assert result.tuples("counts", "late") == []
    panes = result.tuples("counts")
    assert {tuple(p[:4]) for p in panes} == per_window(CONFIG)
    assert len(panes) == len(per_window(CONFIG))
    assert all(p[4] == "ON_TIME" for p in panes)


def test_partitions_are_strided_positions_of_the_stream():
    source = NexmarkSource(GeneratorConfig(max_events=10), partitions=3)
    assert source.discover() == ["nexmark-0", "nexmark-1", "nexmark-2"]
    assert [source.end_offset(p, 0) for p in source.discover()] == [4, 3, 3]
    stream = [e.date_time for e in events(GeneratorConfig(max_events=10))]
    read = [row[1] for _off, row in source.read("nexmark-1", 0, 3)]
    assert read == stream[1::3]
    with pytest.raises(ValueError, match="NexmarkSource: partitions must be a positive int"):
        NexmarkSource(partitions=0)


def test_the_batch_spout_gives_trident_the_stream_in_batches():
    config = GeneratorConfig(max_events=700)
    spout = NexmarkBatchSpout(config, batch_size=300)
    assert [spout.is_exhausted(b) for b in (1, 3, 4)] == [False, False, True]
    t = TridentTopology()
    s = t.new_stream("nexmark", spout)
    s.group_by(["event_type"]).aggregate(Count(), ["n"]).name("kinds")
    result = complete_topology(t.build(), {}, runner="local")
    got: Counter = Counter()
    for kind, n in result.tuples("kinds"):
        got[kind] += n
    assert got == Counter(e.event_type for e in events(config))
    assert got[BID] == 644
    assert list(spout.get_output_fields()) == list(ROW_FIELDS)
