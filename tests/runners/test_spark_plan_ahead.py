"""The spouts' reader plans the next batch while the current one runs (Spark only).

When a plan fills the batch (`squall.spark.batch.max.tuples`), the reader plans the next segment
in a thread while Spark processes the one it returned: written with its spouts' snapshot before
any later offset is returned, so a kill at any moment restarts exactly (a segment with its
snapshot is processed by the next batch, one without is dropped and emitted again). The local
runner has no reader; its results are the reference (tests/runners/test_conformance.py runs the
reliability, timeout and max spout pending topologies with one tuple a batch, which plans ahead
every batch).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from squall import BasicBolt, Config, Fields, TopologyBuilder
from squall.connectors.sinks import JsonLinesSink, read_jsonl
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.spouts import SpoutReader, segment_path, spout_snapshot_path
from squall.testing import FixedTupleSpout, complete_topology

pytestmark = pytest.mark.spark

ITEMS, BATCH, KEYS = 20, 5, 3


class Tag(BasicBolt):
    """Passes each item on; item 0 first waits until `path` exists (at most 60 s), and says
    whether it did."""

    def __init__(self, path: str = "") -> None:
        self.path = path

    def execute(self, tup, collector):
        seen = None
        if tup["item"] == 0 and self.path:
            deadline = time.monotonic() + 60
            while not os.path.exists(self.path) and time.monotonic() < deadline:
                time.sleep(0.02)
            seen = os.path.exists(self.path)
        collector.emit([tup["item"], tup["key"], seen])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("item", "key", "seen"))


def topology(out: Path, wait_for: str = ""):
    b = TopologyBuilder()
    b.set_spout("items", FixedTupleSpout([[i, i % KEYS] for i in range(ITEMS)],
                                         Fields("item", "key"), replay_failed=True))
    b.set_bolt("tag", Tag(wait_for), 2).fields_grouping("items", Fields("key"))
    b.set_bolt("sink", JsonLinesSink(str(out)), 2).shuffle_grouping("tag")
    return b.create_topology()


def conf(**more) -> Config:
    return Config({"squall.spark.batch.max.tuples": BATCH, "squall.spark.plan.ahead": True,
                   **more})


def emitted(reader: SpoutReader) -> int:
    return sum(task.stats.emitted for task in reader.tasks.values())


def wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.01)


def test_the_next_segment_is_written_while_the_batch_before_runs(tmp_path, spark_session):
    """Item 0's batch waits in its bolt until segment 1 exists: planned ahead, it appears while
    batch 0 runs; planned only after batch 0's commit, it never would (the bolt gives up)."""
    ckpt = tmp_path / "ckpt"
    nxt = segment_path(str(ckpt), 1)
    runner = SparkRunner(topology(tmp_path / "out", nxt), conf(),
                         checkpoint_location=str(ckpt), session=spark_session)
    result = runner.run(duration_ms=240_000)
    rows = list(read_jsonl(tmp_path / "out"))
    assert [r["seen"] for r in rows if r["item"] == 0] == [True]
    assert sorted(r["item"] for r in rows) == list(range(ITEMS))
    assert result.stats["items"].acked == ITEMS and result.errors == []


@pytest.mark.parametrize("kill", ["planned-ahead", "half-planned-ahead"])
def test_a_kill_while_the_next_segment_is_planned_ahead_restarts_exactly(
        tmp_path, spark_session, kill):
    """The state a SIGKILL leaves while batch 1 runs and segment 2 is planned ahead: with its
    spouts' snapshot (Spark never logged it; the restart processes it) or without (the kill
    landed between the segment and its snapshot: dropped and emitted again)."""
    ckpt = tmp_path / "ckpt"
    build = topology(tmp_path / "out")
    SparkRunner(build, conf(), checkpoint_location=str(ckpt), session=spark_session)
    reader = SpoutReader({"dir": str(ckpt)})
    try:
        assert reader.latestOffset({"seg": -1}) == {"seg": 0}
        # Planned ahead: segment 1 and its snapshot, before any batch committed.
        wait_for(lambda: os.path.exists(spout_snapshot_path(str(ckpt), 1)), "planned ahead")
        assert emitted(reader) == 2 * BATCH
        # Batch 0 committed: the segment planned ahead is returned as it was written.
        assert reader.latestOffset({"seg": 0}) == {"seg": 1}
        wait_for(lambda: os.path.exists(spout_snapshot_path(str(ckpt), 2)), "planned ahead")
        assert emitted(reader) == 3 * BATCH
    finally:
        reader.stop()  # (the plan ahead joined: its files are complete, as a kill finds them)
    if kill == "half-planned-ahead":
        os.unlink(spout_snapshot_path(str(ckpt), 2))

    runner = SparkRunner(build, conf(), checkpoint_location=str(ckpt), session=spark_session)
    result = runner.run(duration_ms=240_000)
    items = Counter(r["item"] for r in read_jsonl(tmp_path / "out"))
    assert sorted(items) == list(range(ITEMS))
    assert [i for i, n in items.items() if n > 1] == []
    assert result.stats["items"].failed == 0 and result.errors == []
    local = complete_topology(topology(tmp_path / "local-out"), conf(), runner="local")
    assert sorted(local.tuples("tag")) == sorted([r["item"], r["key"], None]
                                                 for r in read_jsonl(tmp_path / "out"))


def test_off_plans_after_the_commit(tmp_path, spark_session):
    """squall.spark.plan.ahead=false: nothing is planned until Spark asks for the next offset."""
    ckpt = tmp_path / "ckpt"
    SparkRunner(topology(tmp_path / "out"), conf(**{"squall.spark.plan.ahead": False}),
                checkpoint_location=str(ckpt), session=spark_session)
    reader = SpoutReader({"dir": str(ckpt)})
    try:
        assert reader.latestOffset({"seg": -1}) == {"seg": 0}
        assert reader.ahead_thread is None
        assert not os.path.exists(segment_path(str(ckpt), 1))
        assert reader.latestOffset({"seg": 0}) == {"seg": 1}
    finally:
        reader.stop()
