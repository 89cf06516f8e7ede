"""The spouts' snapshot of a planned segment is written while Spark logs its offset (Spark only).

`SpoutReader.latestOffset` returns once the segment is written; the spouts' snapshot after the
plan is written in a thread, and `partitions` (before any task reads the segment), `commit`, the
next `latestOffset` and `stop` wait for it. A kill between the offset's return and the snapshot
leaves a segment without a snapshot that no batch read: dropped, by a restarted reader's first
`partitions` (Spark replaying its last logged batch) as by its first plan, and its tuples emitted
again by the restored spouts. The local runner has no reader; its results are the reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from squall import BasicBolt, Config, Fields, TopologyBuilder
from squall.connectors.sinks import JsonLinesSink, read_jsonl
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.spouts import (
    SegmentPartition,
    SpoutReader,
    segment_path,
    spout_snapshot_path,
)
from squall.testing import FixedTupleSpout, complete_topology

pytestmark = pytest.mark.spark

ITEMS, BATCH = 12, 4


class Pass(BasicBolt):
    def execute(self, tup, collector):
        collector.emit([tup["item"]])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("item"))


def topology(out: Path):
    b = TopologyBuilder()
    b.set_spout("items", FixedTupleSpout([[i] for i in range(ITEMS)], Fields("item"),
                                         replay_failed=True))
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("items")
    b.set_bolt("sink", JsonLinesSink(str(out)), 2).shuffle_grouping("pass")
    return b.create_topology()


def conf() -> Config:
    return Config({"squall.spark.batch.max.tuples": BATCH})


def test_partitions_waits_for_the_snapshot_and_a_restart_drops_a_segment_without_one(
        tmp_path, spark_session):
    ckpt = str(tmp_path / "ckpt")
    build = topology(tmp_path / "out")
    SparkRunner(build, conf(), checkpoint_location=ckpt, session=spark_session)
    reader = SpoutReader({"dir": ckpt})
    try:
        assert reader.latestOffset({"seg": -1}) == {"seg": 0}
        assert os.path.exists(segment_path(ckpt, 0))
        assert [p.path for p in reader.partitions({"seg": -1}, {"seg": 0})
                if isinstance(p, SegmentPartition)] == [segment_path(ckpt, 0)]
        assert os.path.exists(spout_snapshot_path(ckpt, 0))  # partitions waited for it
        assert reader.snapshot_thread is None
        assert reader.latestOffset({"seg": 0}) == {"seg": 1}
    finally:
        reader.stop()  # (the snapshot joined: its file is complete)
    # A kill after segment 1's offset was returned (and maybe logged by Spark), before its
    # snapshot was written.
    os.unlink(spout_snapshot_path(ckpt, 1))

    restarted = SpoutReader({"dir": ckpt})
    try:
        # Spark replays its last logged batch first, without asking for an offset: the segment
        # was never read, so it goes, and the batch runs without it.
        assert [p for p in restarted.partitions({"seg": 0}, {"seg": 1})
                if isinstance(p, SegmentPartition)] == []
        assert not os.path.exists(segment_path(ckpt, 1))
        assert os.path.exists(segment_path(ckpt, 0))
    finally:
        restarted.stop()

    result = SparkRunner(build, conf(), checkpoint_location=ckpt,
                         session=spark_session).run(duration_ms=240_000)
    written = sorted(r["item"] for r in read_jsonl(tmp_path / "out"))
    local = complete_topology(topology(tmp_path / "local-out"), conf(), runner="local")
    # Nothing lost, nothing twice, as on the local runner.
    assert written == sorted(values[0] for values in local.tuples("pass")) == list(range(ITEMS))
    assert (result.stats["items"].failed, result.errors) == (0, [])
