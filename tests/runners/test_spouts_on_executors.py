"""User spouts pulled on the executors (`squall.spark.spouts` = `executors`): the same results as
the local runner for the conformance suite's reliability topologies (acking, `fail` and replay,
no ackers, max spout pending, timeouts, multi-anchoring), a spout with two tasks that read their
own files in parallel, and a restart that resumes each task from its own snapshot."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from test_conformance import (
    max_pending_topology,
    multi_anchor_topology,
    no_acker_topology,
    reliability_topology,
    timeout_topology,
)

from squall import Bolt, Fields, Spout, TopologyBuilder, Values
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.pulls import task_snapshots
from squall.testing import complete_topology

pytestmark = pytest.mark.spark

ON_EXECUTORS = {"squall.spark.spouts": "executors"}

CASES = {
    "reliability": (reliability_topology, {}),
    "no_ackers": (no_acker_topology,
                  {"topology.acker.executors": 0, "topology.message.timeout.secs": 1}),
    "max_pending": (max_pending_topology, {"topology.max.spout.pending": 2}),
    "timeout": (timeout_topology, {"topology.message.timeout.secs": 2}),
    "multi_anchor": (multi_anchor_topology, {}),
}


def summary(result) -> dict:
    """What a run shows a user: per component its counters and captured tuples, per spout the
    message ids acked and failed, the errors."""
    topology = result.topology
    out: dict = {"errors": sorted((e.component, e.task, type(e.error).__name__, str(e.error))
                                  for e in result.errors)}
    for cid in topology.components:
        stats = result.stats[cid]
        out[cid] = (stats.emitted, stats.acked, stats.failed, stats.timed_out,
                    sorted(map(repr, result.tuples(cid))))
        if cid in topology.spouts:
            out[cid + ".settled"] = (sorted(result.acked(cid)), sorted(result.failed(cid)))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_pulled_spouts_give_the_local_runners_results(case, spark_session):
    build, conf = CASES[case]
    local = complete_topology(build(), conf, runner="local")
    spark = complete_topology(build(), {**conf, **ON_EXECUTORS}, runner="spark")
    assert summary(spark) == summary(local)


class PartSpout(Spout):
    """A spout over text files: task i of n reads the files at positions i, i + n, ...; its
    state is the file and the byte offset it reached."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        paths = sorted(str(p) for p in Path(self.folder).iterdir())
        index = context.this_task_index
        n = len(context.get_component_tasks(context.this_component_id))
        self.paths = paths[index::n]
        self.index, self.offset = 0, 0

    def next_tuple(self):
        if self.index >= len(self.paths):
            return
        with open(self.paths[self.index], "rb") as f:
            f.seek(self.offset)
            line = f.readline()
        if line:
            self.offset += len(line)
            self.collector.emit(Values(line.decode().strip(), os.getpid()),
                                msg_id=(self.index, self.offset))
        else:
            self.index, self.offset = self.index + 1, 0

    def is_exhausted(self):
        return self.index >= len(self.paths)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("line", "pid"))


class CountWords(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        for word in tup["line"].split():
            self.counts[word] = self.counts.get(word, 0) + 1
            self.collector.emit(Values(word, self.counts[word]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


def lines_topology(folder: str):
    builder = TopologyBuilder()
    builder.set_spout("lines", PartSpout(folder), 2)
    builder.set_bolt("count", CountWords(), 2).shuffle_grouping("lines")
    return builder.create_topology()


@pytest.fixture
def lines(tmp_path) -> str:
    folder = tmp_path / "lines"
    folder.mkdir()
    for i in range(4):
        (folder / f"part-{i}.txt").write_text(
            "".join(f"w{i} w{(i + j) % 5} w{j % 3}\n" for j in range(25)))
    return str(folder)


def test_a_spouts_tasks_are_pulled_on_the_executors_each_from_its_snapshot(
        lines, tmp_path, spark_session):
    conf = {**ON_EXECUTORS, "squall.spark.batch.max.tuples": 20}
    local = complete_topology(lines_topology(lines), conf, runner="local")
    spark = complete_topology(lines_topology(lines), conf, runner="spark")
    words = {w for (line, _pid) in local.tuples("lines") for w in line.split()}
    assert words and summary_without_pids(spark) == summary_without_pids(local)
    # Pulled in the executors' Python workers, not in the driver or the reader.
    assert os.getpid() not in {pid for (_line, pid) in spark.tuples("lines")}
    # A run on a checkpoint: each spout task keeps snapshots of its own, per segment.
    checkpoint = str(tmp_path / "ckpt")
    runner = SparkRunner(lines_topology(lines), conf, checkpoint_location=checkpoint,
                         session=spark_session)
    runner.run(until_complete=True)
    tasks = runner.topology.component_tasks("lines")
    assert all(task_snapshots(runner.dir, t) for t in tasks)
    with open(os.path.join(runner.dir, "spout-status.pkl"), "rb") as f:
        status = pickle.load(f)
    assert sorted(status) == list(tasks) and all(s["exhausted"] for s in status.values())
    assert sum(s["stats"]["emitted"] for s in status.values()) == 100


def summary_without_pids(result) -> tuple:
    return (sorted(line for (line, _pid) in result.tuples("lines")),
            sorted(map(tuple, result.tuples("count"))),
            sorted(map(repr, result.acked("lines"))), result.failed("lines"),
            result.stats["lines"].emitted, result.stats["count"].acked)


@pytest.mark.parametrize("plain", [False, True], ids=["forwarded", "plain"])
def test_a_first_bolt_fed_task_i_to_task_i_runs_where_its_spout_is_pulled(
        lines, tmp_path, spark_session, plain):
    """lines(2) -shuffle-> count(2), the spout pulled on the executors: a shuffle between as many
    tasks sends spout task i's lines to count's task i alone, so count runs in the Spark task
    that pulled them (one Spark stage a job, no shuffle of the pulls' rows), each task's output
    the local runner's. With Storm's plain shuffle (`topology.disable.loadaware.messaging`) the
    pulls' rows are shuffled to count's tasks: two stages a job, the same words."""
    conf = {**ON_EXECUTORS, "squall.spark.batch.max.tuples": 20,
            "topology.disable.loadaware.messaging": plain}
    local = complete_topology(lines_topology(lines), conf, runner="local")
    runner = SparkRunner(lines_topology(lines), conf, checkpoint_location=str(tmp_path / "ckpt"),
                         capture=True, session=spark_session)
    runner.run(until_complete=True, duration_ms=120_000)
    assert runner.complete()
    assert ("pulled" in runner.source_options) is not plain
    topology = runner.topology
    spark = {t: sorted(tuple(v) for s, v in runner.captured().get(t, []) if s == "default")
             for cid in ("lines", "count") for t in topology.component_tasks(cid)}
    expected = {t: sorted(tuple(v) for v in rows) for cid in ("lines", "count")
                for t, rows in local.tuples_by_task(cid).items()}
    lines_of = {t: sorted(line for line, _pid in rows) for t, rows in spark.items()
                if t in topology.component_tasks("lines")}
    assert lines_of == {t: sorted(line for line, _pid in expected[t]) for t in lines_of}
    words = {t: rows for t, rows in spark.items() if t in topology.component_tasks("count")}
    if plain:  # which task counts a line follows the runner's interleaving: words as a whole
        assert (sorted(w for rows in words.values() for w, _ in rows)
                == sorted(w for t in words for w, _ in expected[t]))
    else:
        assert words == {t: expected[t] for t in words}
    tracker = spark_session.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(runner.query.runId))
    assert jobs
    stages = {len(tracker.getJobInfo(j).stageIds) for j in jobs}
    assert stages == ({2} if plain else {1}), f"Spark stages per job: {stages}"
