"""How the Spark runner's stages run a component's tasks: as many Spark tasks as the application
has cores, each running whole Storm tasks in turn, and a snapshot per task only for a batch that
changed its state (a retried batch's leftovers never shadow the last committed one)."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import pytest

from squall import Bolt, Fields, TopologyBuilder, Values
from squall.atomic_files import snapshot_ids
from squall.errors import BatchRetryError
from squall.runtime.spark import stage
from squall.runtime.spark.driver import SparkRunner
from squall.testing import FixedTupleSpout, complete_topology
from squall.topology.graph import bolt_order

pytestmark = pytest.mark.spark

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def partition() -> int:
    """The Spark partition running the caller, -1 on the local runner."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return -1 if context is None else context.partitionId()


class Where(Bolt):
    """Emits each word with its task and the Spark partition that ran it."""

    def execute(self, tup):
        self.collector.emit(Values(tup["word"], self.context.this_task_id, partition()))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "task", "partition"))


class Pass(Bolt):
    """Stateless: passes each word on."""

    def execute(self, tup):
        self.collector.emit(Values(tup["word"]))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Tally(Bolt):
    """Counts the words it executed (its state changes with every tuple)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + 1
        self.collector.emit(Values(tup["word"], self.counts[tup["word"]]))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "n"))


def run(topology, conf, tmp_path: Path, session) -> tuple[SparkRunner, Path]:
    ckpt = tmp_path / "ckpt"
    runner = SparkRunner(topology, conf, checkpoint_location=str(ckpt), capture=True,
                         session=session)
    runner.run(until_complete=True, duration_ms=120_000)
    assert runner.complete()
    return runner, ckpt


def test_a_component_with_more_tasks_than_cores_runs_a_spark_task_per_core(
        tmp_path, spark_session):
    cores = spark_session.sparkContext.defaultParallelism
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS * 3], Fields("word")))
    b.set_bolt("where", Where(), cores + 2).fields_grouping("words", Fields("word"))
    runner, _ = run(b.create_topology(), {}, tmp_path, spark_session)
    seen = [v for t in runner.topology.component_tasks("where")
            for s, v in runner.captured().get(t, []) if s == "default"]
    assert sorted(w for w, _, _ in seen) == sorted(WORDS * 3)
    assert {p for _, _, p in seen} <= set(range(cores))
    assert len({t for _, t, _ in seen}) == cores + 2  # every Storm task ran, each in its own
    by_word: dict[str, set[int]] = {}
    for w, t, _ in seen:
        by_word.setdefault(w, set()).add(t)
    assert all(len(tasks) == 1 for tasks in by_word.values())  # fields grouping held


def pass_then_tally(tmp_path: Path, session) -> tuple[SparkRunner, Path, int]:
    """WORDS through Pass then Tally, two words a batch; the runner, its checkpoint location
    and the Tally task, whose output is checked."""
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS], Fields("word")))
    b.set_bolt("pass", Pass(), 1).shuffle_grouping("words")
    b.set_bolt("tally", Tally(), 1).shuffle_grouping("pass")
    runner, ckpt = run(b.create_topology(), {"squall.spark.batch.max.tuples": 2}, tmp_path,
                       session)
    [tally] = runner.topology.component_tasks("tally")
    assert Counter(w for s, (w, _) in runner.captured()[tally] if s == "default") \
        == Counter(WORDS)
    return runner, ckpt, tally


def test_a_task_whose_state_did_not_change_writes_no_snapshot(tmp_path, spark_session):
    runner, ckpt, tally = pass_then_tally(tmp_path, spark_session)
    [passing] = runner.topology.component_tasks("pass")
    assert runner.batches >= 4
    # The stateless bolt keeps the snapshot of the first batch it ran; the counting one the
    # snapshot of its last batch.
    assert snapshot_ids(str(ckpt), passing) == [0]
    assert snapshot_ids(str(ckpt), tally)[-1] > 0


class RefusesOnce(Bolt):
    """Passes words on with how many commits it refused: when it sees `after` and `flag` does not
    exist, it creates it, counts the refusal in its state and refuses the batch. The refusing
    attempt is never committed, so every committed output says 0."""

    def __init__(self, flag: str, after: str) -> None:
        self.flag, self.after = flag, after
        self.refused = 0
        self.refuse = False

    def execute(self, tup):
        if tup["word"] == self.after and not Path(self.flag).exists():
            Path(self.flag).touch()
            self.refuse = True
            self.refused += 1
        self.collector.emit(Values(tup["word"], self.refused))
        self.collector.ack(tup)

    def on_batch_end(self, batch_id):
        if self.refuse:
            self.refuse = False
            raise BatchRetryError("the store is down")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "refused"))


def test_a_retried_batch_that_changes_nothing_leaves_no_snapshot_of_its_failed_attempt(
        tmp_path, spark_session):
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS], Fields("word")))
    b.set_bolt("guard", RefusesOnce(str(tmp_path / "refused"), after="e"), 1) \
        .shuffle_grouping("words")
    conf = {"squall.spark.batch.max.tuples": 2, "squall.spark.batch.retry.backoff.ms": 1}
    runner, _ = run(b.create_topology(), conf, tmp_path, spark_session)
    assert (tmp_path / "refused").exists()  # the batch of "e" was refused once, then retried
    [guard] = runner.topology.component_tasks("guard")
    out = [v for s, v in runner.captured()[guard] if s == "default"]
    assert sorted(w for w, _ in out) == sorted(WORDS)
    assert [r for _, r in out] == [0] * len(WORDS)


def test_the_first_bolt_runs_where_the_spouts_rows_are_read(tmp_path, spark_session):
    """A batch's rows reach the first bolt without a shuffle of their own: every job the query
    ran has one Spark stage per bolt (the spouts' rows read in the first bolt's stage), and each
    of the first bolt's tasks still sees all its words (fields grouping) in one partition."""
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS * 3], Fields("word")))
    b.set_bolt("where", Where(), 2).fields_grouping("words", Fields("word"))
    b.set_bolt("tally", Tally(), 2).fields_grouping("where", Fields("word"))
    runner, _ = run(b.create_topology(), {}, tmp_path, spark_session)
    seen = [v for t in runner.topology.component_tasks("where")
            for s, v in runner.captured().get(t, []) if s == "default"]
    assert sorted(w for w, _, _ in seen) == sorted(WORDS * 3)
    assert len({(t, p) for _, t, p in seen}) == 2  # a task's tuples in one partition
    tracker = spark_session.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(runner.query.runId))
    assert jobs
    stages = {len(tracker.getJobInfo(j).stageIds) for j in jobs}
    assert stages == {2}, f"Spark stages per job: {stages}, not one per bolt"


class WhereNext(Bolt):
    """Passes `Where`'s tuple on with its own task and Spark partition appended."""

    def execute(self, tup):
        self.collector.emit(Values(*tup.values, self.context.this_task_id, partition()),
                            anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "task", "partition", "task2", "partition2"))


def local_chain(cores: int):
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS * 3], Fields("word")))
    b.set_bolt("where", Where(), cores).fields_grouping("words", Fields("word"))
    b.set_bolt("next", WhereNext(), cores).local_or_shuffle_grouping("where")
    b.set_bolt("tally", Tally(), cores).local_or_shuffle_grouping("next")
    return b.create_topology()


@pytest.mark.parametrize("fusion", [True, False], ids=["fusion", "no-fusion"])
def test_local_or_shuffle_bolts_run_in_their_upstreams_stage(tmp_path, spark_session, fusion):
    """where -local_or_shuffle-> next -local_or_shuffle-> tally, as many tasks each: fused, the
    three run in one Spark stage per job (the spouts' rows read in it), task i of each in the
    Spark task of where's task i; with squall.spark.fusion false, a stage each, same output."""
    cores = spark_session.sparkContext.defaultParallelism
    runner, _ = run(local_chain(cores), {"squall.spark.fusion": fusion}, tmp_path, spark_session)
    assert runner.chain is not None
    assert runner.chain.groups == ([("where", "next", "tally")] if fusion else
                                   [("where",), ("next",), ("tally",)])
    topology = runner.topology
    index = {t: i for cid in ("where", "next", "tally")
             for i, t in enumerate(topology.component_tasks(cid))}
    seen = [v for t in topology.component_tasks("next")
            for s, v in runner.captured().get(t, []) if s == "default"]
    assert sorted(w for w, *_ in seen) == sorted(WORDS * 3)
    for _, task, partition, task2, partition2 in seen:
        assert index[task] == index[task2]  # task i to task i
        assert partition2 == partition if fusion else True
    tallied = {t: sorted(v for s, v in runner.captured().get(t, []) if s == "default")
               for t in topology.component_tasks("tally")}
    by_word = {w: index[task] for w, task, *_ in seen}
    assert tallied == {t: sorted([w, n] for w in sorted(set(WORDS)) if by_word[w] == index[t]
                                 for n in (1, 2, 3))
                       for t in topology.component_tasks("tally")}
    tracker = spark_session.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(runner.query.runId))
    assert jobs
    stages = {len(tracker.getJobInfo(j).stageIds) for j in jobs}
    assert stages == ({1} if fusion else {3}), f"Spark stages per job: {stages}"


def shuffle_chain(cores: int, conf: dict):
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS * 3], Fields("word")))
    b.set_bolt("where", Where(), cores).fields_grouping("words", Fields("word"))
    b.set_bolt("next", WhereNext(), cores).shuffle_grouping("where")
    b.set_bolt("tally", Tally(), cores + 1).shuffle_grouping("next")
    return b.create_topology()


@pytest.mark.parametrize("plain", [False, True], ids=["locality-aware", "plain"])
def test_a_shuffle_between_as_many_tasks_runs_in_its_upstreams_stage(
        tmp_path, spark_session, plain):
    """where(n) -shuffle-> next(n) -shuffle-> tally(n + 1): next runs in where's stage, task i
    of next in the Spark task of where's task i; tally, with another task count, gets a stage of
    its own. Every task's output is the local runner's. With
    `topology.disable.loadaware.messaging` true the shuffle spreads and nothing fuses."""
    cores = spark_session.sparkContext.defaultParallelism
    conf = {"topology.disable.loadaware.messaging": plain}
    runner, _ = run(shuffle_chain(cores, conf), conf, tmp_path, spark_session)
    assert runner.chain is not None
    assert runner.chain.groups == ([("where",), ("next",), ("tally",)] if plain else
                                   [("where", "next"), ("tally",)])
    topology = runner.topology
    index = {t: i for cid in ("where", "next")
             for i, t in enumerate(topology.component_tasks(cid))}
    seen = [v for t in topology.component_tasks("next")
            for s, v in runner.captured().get(t, []) if s == "default"]
    assert sorted(w for w, *_ in seen) == sorted(WORDS * 3)
    if not plain:
        assert all(index[task] == index[task2] and partition == partition2
                   for _, task, partition, task2, partition2 in seen)
    local = complete_topology(shuffle_chain(cores, conf), conf, runner="local")
    # A plain shuffle's choice follows the emitting task's own order; next's tasks execute
    # where's tasks' tuples interleaved as each runner delivers them, so which tally task counts
    # a word (hence its counts) is not the same on both runners, only the spread is: tally's
    # words compared as a whole.
    assert (sorted(v[0] for t in topology.component_tasks("tally")
                   for s, v in runner.captured().get(t, []) if s == "default")
            == sorted(v[0] for v in local.tuples("tally")) == sorted(WORDS * 3))
    for cid in ("where", "next") if plain else ("where", "next", "tally"):
        by_task = {t: sorted(v for s, v in runner.captured().get(t, []) if s == "default")
                   for t in topology.component_tasks(cid)}
        # The Spark partitions are where's and next's own outputs: compared without them.
        strip = {"where": lambda v: v[:2], "next": lambda v: [v[0], v[1], v[3]],
                 "tally": lambda v: v}[cid]
        assert ({t: sorted(strip(v) for v in rows) for t, rows in by_task.items()}
                == {t: sorted(strip(v) for v in rows)
                    for t, rows in local.tuples_by_task(cid).items()}), cid
    tracker = spark_session.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(runner.query.runId))
    stages = {len(tracker.getJobInfo(j).stageIds) for j in jobs}
    assert stages == ({3} if plain else {2}), f"Spark stages per job: {stages}"


def test_fusion_groups_take_only_a_forwarding_grouping_from_one_bolt_with_as_many_tasks():
    """A local_or_shuffle or (locality-aware) shuffle grouping between equal task counts fuses;
    fewer tasks, a fields grouping, two upstreams, ticks, or Storm's plain shuffle do not."""
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([["a"]], Fields("word")))
    b.set_bolt("from_spout", Pass(), 2).local_or_shuffle_grouping("words")
    b.set_bolt("fused", Pass(), 2).local_or_shuffle_grouping("from_spout")
    b.set_bolt("fewer", Pass(), 1).local_or_shuffle_grouping("fused")
    b.set_bolt("fewer_shuffled", Pass(), 1).shuffle_grouping("fused")
    b.set_bolt("more_shuffled", Pass(), 3).shuffle_grouping("fused")
    b.set_bolt("shuffled", Pass(), 2).shuffle_grouping("fused")
    b.set_bolt("by_field", Pass(), 2).fields_grouping("fused", Fields("word"))
    b.set_bolt("two_inputs", Pass(), 2).local_or_shuffle_grouping("fused") \
        .local_or_shuffle_grouping("by_field")
    b.set_bolt("ticked", Pass(), 2).local_or_shuffle_grouping("fused") \
        .add_configuration("topology.tick.tuple.freq.secs", 1)
    b.set_bolt("chained", Pass(), 2).local_or_shuffle_grouping("fused")
    topology = b.create_topology()
    order = bolt_order(topology)
    groups = stage.fusion_groups(topology, order, {})
    unfused = [("fewer",), ("fewer_shuffled",), ("more_shuffled",), ("by_field",),
               ("two_inputs",), ("ticked",)]
    assert sorted(groups) == sorted([("from_spout", "fused", "chained", "shuffled"), *unfused])
    plain = stage.fusion_groups(topology, order, {"topology.disable.loadaware.messaging": True})
    assert sorted(plain) == sorted([("from_spout", "fused", "chained"), ("shuffled",), *unfused])
    assert stage.fusion_groups(topology, order, {"squall.spark.fusion": False}) == [
        (cid,) for cid in order]


def test_a_stage_ships_its_plan_without_the_topology(tmp_path):
    """A stage's closure is pickled every batch: it carries the run id, and the topology (here a
    spout holding a megabyte of data) travels once, in a file a worker reads once per run."""
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([["x" * 1000]] * 1000, Fields("word")))
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("words")
    topology = b.create_topology()
    plan = stage.StagePlan(
        run_id="r1", topology=topology, conf={}, component="pass", batch_id=3, committed=2,
        state_dir=str(tmp_path), keys={"pass": [0, 1]}, seed=1, tracking=True, capture=False,
        checkpoint_id="c")
    blob = pickle.dumps(plan)
    assert len(blob) < 2_000
    assert Path(stage.topology_path(str(tmp_path), "r1")).exists()
    stage._TOPOLOGIES.clear()  # as in a fresh Python worker
    shipped = pickle.loads(blob)
    assert shipped.batch_id == 3 and shipped.component == "pass"
    assert shipped.topology.component_tasks("pass") == topology.component_tasks("pass")
    assert pickle.loads(blob).topology is shipped.topology  # read once per run
    again = stage.StagePlan(**{**plan.__dict__, "run_id": "r2"})  # a restart: another run
    pickle.dumps(again)
    assert sorted(p.name for p in Path(stage.topology_path(str(tmp_path), "r2")).parent.iterdir()
                  ) == ["topology-r2.pkl"]  # the earlier run's file removed


def test_a_runs_stages_are_made_once_and_each_batch_brings_its_ids(
        tmp_path, spark_session, monkeypatch):
    """The driver makes each stage's Spark function once per run, not once per batch; each
    batch's tasks still run under that batch's id (their snapshots are named by it)."""
    from pyspark.sql.udf import UserDefinedFunction

    made: list[str] = []
    init = UserDefinedFunction.__init__

    def counted(self, *args, **kwargs):
        made.append(kwargs.get("name") or "?")
        init(self, *args, **kwargs)

    monkeypatch.setattr(UserDefinedFunction, "__init__", counted)
    runner, ckpt, tally = pass_then_tally(tmp_path, spark_session)
    assert runner.batches >= 4
    # One per stage for the whole run: pass and tally, a task each joined by a shuffle, are
    # one stage (a shuffle between as many tasks forwards task i to task i, and fuses).
    assert runner.chain is not None and runner.chain.groups == [("pass", "tally")]
    assert made == ["squall_pass"]
    assert snapshot_ids(str(ckpt), tally)[-1] == runner.committed  # the last batch's id


def test_a_stage_whose_batch_comes_from_its_job_refuses_to_run_outside_one(tmp_path):
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([["a"]], Fields("word")))
    b.set_bolt("pass", Pass(), 1).shuffle_grouping("words")
    plan = stage.StagePlan(
        run_id="r1", topology=b.create_topology(), conf={}, component="pass", batch_id=-1,
        committed=-1, state_dir=str(tmp_path), keys={"pass": [0]}, seed=1, tracking=False,
        capture=False, checkpoint_id="c", batch_from_job=True)
    with pytest.raises(RuntimeError, match=r"'pass'.*squall\.stage\.batch.*StageChain"):
        list(stage.run_stage(plan, iter([])))
