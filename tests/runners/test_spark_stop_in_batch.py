"""A run on Spark stopped while a batch's job runs ends cleanly, and a restart runs that batch.

The local runner stops between steps, never inside one, so only Spark has a batch in flight at
a stop: its job is cancelled, nothing of the batch commits (its effects are applied at the
commit or not at all), the run returns without an error and a restart on the same checkpoint
location runs the batch again. Here a bolt holds the first batch until the test releases it,
so the stop always lands inside the batch, whatever the machine's speed.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
from support.examples import load_example

from squall import BasicBolt, Fields, TopologyBuilder
from squall.connectors.sinks import JsonLinesSink, read_jsonl
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.transactional import TransactionalSparkRunner
from squall.testing import FixedTupleSpout
from squall.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder

pytestmark = pytest.mark.spark

gc = load_example("transactional_global_count")

NUMBERS = 20


def wait_for_release(entered: str, release: str) -> None:
    """Until `release` exists, mark `entered` and wait (at most a minute: a task the stop's
    cancellation did not end gives up by itself)."""
    if not os.path.exists(release):
        Path(entered).touch()
        deadline = time.monotonic() + 60
        while not os.path.exists(release):
            if time.monotonic() > deadline:
                raise RuntimeError("the gate was never released")
            time.sleep(0.05)


class Gate(BasicBolt):
    """Passes its input on once the test releases it."""

    def __init__(self, entered: str, release: str) -> None:
        self.entered, self.release = entered, release

    def execute(self, tup, collector) -> None:
        wait_for_release(self.entered, self.release)
        collector.emit([tup.values[0]])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("n"))


def gated_topology(tmp_path: Path):
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[i] for i in range(NUMBERS)], ["n"]))
    b.set_bolt("gate", Gate(str(tmp_path / "entered"), str(tmp_path / "release"))) \
        .shuffle_grouping("numbers")
    b.set_bolt("sink", JsonLinesSink(str(tmp_path / "out"))).shuffle_grouping("gate")
    return b.create_topology()


def test_a_stop_during_a_batch_ends_the_run_cleanly_and_a_restart_runs_the_batch(
        tmp_path, spark_session, caplog):
    topology, ckpt = gated_topology(tmp_path), str(tmp_path / "ckpt")
    first = SparkRunner(topology, {}, checkpoint_location=ckpt, session=spark_session)
    with caplog.at_level("INFO", logger="squall"):
        result = first.run(duration_ms=240_000,
                           should_stop=lambda: (tmp_path / "entered").exists())
    assert (tmp_path / "entered").exists(), "the run ended before the batch began"
    # No error and no failure: the stop cancelled the batch, which is not committed.
    assert result.errors == [] and first.failure is None
    assert first.committed == -1
    assert not any("not committed (attempt" in r.getMessage() for r in caplog.records)
    assert any("the run stopped during a batch: nothing of it was committed"
               in r.getMessage() for r in caplog.records)
    out = tmp_path / "out"
    assert not out.exists() or read_jsonl(out) == []

    (tmp_path / "release").touch()
    second = SparkRunner(topology, {}, checkpoint_location=ckpt, session=spark_session)
    second.run(duration_ms=240_000)
    assert second.complete(), second.incomplete()
    counts = Counter(r["n"] for r in read_jsonl(out))
    assert counts == Counter(range(NUMBERS)), "every number once"


class GatedBatchCount(gc.BatchCount):
    """The global count's partial count, which waits for the test's release first."""

    def __init__(self, entered: str, release: str) -> None:
        self.entered, self.release = entered, release

    def execute(self, tup) -> None:
        wait_for_release(self.entered, self.release)
        super().execute(tup)


def test_a_stop_during_a_transaction_ends_the_run_cleanly_and_a_restart_commits_it(
        tmp_path, spark_session):
    data = {0: [[w] for w in "abcde"], 1: [[w] for w in "fgh"]}
    builder = TransactionalTopologyBuilder(
        "gated", "spout", MemoryTransactionalSpout(data, Fields("word"), 3), 2)
    builder.set_bolt("partial-count", GatedBatchCount(
        str(tmp_path / "entered"), str(tmp_path / "release")), 2).none_grouping("spout")
    builder.set_bolt("sum", gc.UpdateGlobalCount()).global_grouping("partial-count")
    topology = builder.create_topology()
    conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / "db")}}
    ckpt = str(tmp_path / "ckpt")

    first = TransactionalSparkRunner(topology, conf, checkpoint_location=ckpt,
                                     session=spark_session)
    result = first.run(duration_ms=240_000, should_stop=lambda: (tmp_path / "entered").exists())
    assert (tmp_path / "entered").exists(), "the run ended before the transaction began"
    assert result.errors == [] and first.committed_txids == []

    (tmp_path / "release").touch()
    second = TransactionalSparkRunner(topology, conf, checkpoint_location=ckpt,
                                      session=spark_session)
    second.run(duration_ms=240_000)
    assert second.complete(), second.incomplete()
    db = gc.open_db(conf)
    try:
        assert db.get(gc.GLOBAL) == sum(len(rows) for rows in data.values())
    finally:
        db.close()
