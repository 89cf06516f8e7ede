"""The Trident plan (`squall.trident.plan`): one typed node per family of operations, their
partition attributes, pickling, and the refusal of a checkpoint whose progress was recorded under
another plan format."""

from __future__ import annotations

import dataclasses

import cloudpickle
import pytest

from squall.topology.description import Topology
from squall.transaction_kernel.progress_store import CURR, STORE, open_store
from squall.trident import (
    Consumer,
    Count,
    Filter,
    FixedBatchSpout,
    FlatMapFunction,
    Function,
    MapFunction,
    MapGet,
    StateUpdater,
    Sum,
    TridentTopology,
)
from squall.trident.coordinator import FORMAT, BatchCoordinator
from squall.trident.plan import (
    PLAN_FORMAT,
    AggregateNode,
    Aggregation,
    Global,
    JoinNode,
    MergeNode,
    PartitionBy,
    Persist,
    PersistNode,
    PlanFormatError,
    PlanNode,
    RepartitionNode,
    RowNode,
    RowOp,
    Scope,
    SpoutNode,
    StateQueryNode,
    WindowBy,
    WindowNode,
    trident_plan,
)
from squall.trident.state import MemoryMapState


class Split(Function):
    def execute(self, tup, collector):
        for w in tup[0].split():
            collector.emit([w])


class Keep(Filter):
    def is_keep(self, tup):
        return True


class Upper(MapFunction):
    def execute(self, tup):
        return [tup[0].upper()]


class Twice(FlatMapFunction):
    def execute(self, tup):
        return [[tup[0]], [tup[0]]]


class Look(Consumer):
    def accept(self, tup):
        pass


class Put(StateUpdater):
    def update_state(self, state, tuples, collector):
        pass


class First:
    def choose_tasks(self, task, values):
        return [0]


# Each Trident operation's node family (the 23 operations a plan holds).
FAMILIES = {
    "spout": SpoutNode,
    "shuffle": RepartitionNode, "partition_by": RepartitionNode, "broadcast": RepartitionNode,
    "global": RepartitionNode, "batch_global": RepartitionNode, "partition": RepartitionNode,
    "each": RowNode, "filter": RowNode, "map": RowNode, "flat_map": RowNode, "peek": RowNode,
    "project": RowNode,
    "partition_aggregate": AggregateNode, "aggregate": AggregateNode,
    "group_aggregate": AggregateNode, "chained_agg": AggregateNode,
    "persistent_aggregate": PersistNode, "partition_persist": PersistNode,
    "state_query": StateQueryNode,
    "window": WindowNode,
    "merge": MergeNode,
    "join": JoinNode,
}


def every_operation() -> Topology:
    t = TridentTopology()
    s = t.new_stream("s", FixedBatchSpout(["sentence", "ts"], 2, ["a b", 1], ["b c", 2]))
    static = t.new_static_state(MemoryMapState.factory(), "static")
    words = s.each(["sentence"], Split(), ["word"]).parallelism_hint(2)
    counts = words.group_by(["word"]).persistent_aggregate(
        MemoryMapState.factory(), Count(), ["n"]).name("counts")
    words.state_query(counts, ["word"], MapGet(), ["c"]).name("query")
    words.state_query(static, ["word"], MapGet(), ["c"])
    upper = (words.filter(Keep()).map(Upper(), ["up"]).flat_map(Twice()).peek(Look())
             .project(["up"]))
    (upper.shuffle().partition_by(["up"]).broadcast().global_().batch_global()
     .partition(First()))
    words.partition_aggregate(["word"], Count(), ["pc"])
    words.aggregate(Count(), ["total"]).name("total")
    words.min_by("word")
    words.group_by(["word"]).aggregate(Count(), ["gc"])
    (words.group_by(["word"]).chained_agg().aggregate(Count(), ["c1"])
     .aggregate(["ts"], Sum(), ["s1"]).chain_end().name("chained"))
    words.partition_persist(MemoryMapState.factory(), ["word"], Put(), ["x"])
    (words.group_by(["word"]).tumbling_window(10, ["word"], Count(), ["wn"],
                                              timestamp_field="ts", lag=3).name("windows"))
    words.group_by(["word"]).sliding_count_window(4, 2, ["word"], Count(), ["wc"])
    t.merge(words.project(["word"]), upper)
    t.join(words.project(["word"]), ["word"], upper, ["up"], ["k"], join_type="left")
    return t.build()


def test_every_operation_is_a_node_of_its_family():
    plan = trident_plan(every_operation())
    assert {n.label: type(n) for n in plan.nodes} == FAMILIES
    assert plan.spouts == [plan.node("s")]
    assert plan.states() == {"counts": plan.node("counts").factory,
                             "static": plan.node("b-5-state_query").factory,
                             **{n.state: n.factory for n in plan.nodes
                                if isinstance(n, (PersistNode, WindowNode))}}


def test_node_attributes_carry_the_partition_rules():
    plan = trident_plan(every_operation())
    keeps = {n.label for n in plan.nodes if n.keeps_partitioning}
    single = {n.label for n in plan.nodes if n.single_partition}
    assert keeps == {"each", "filter", "map", "flat_map", "peek", "project", "state_query"}
    assert single == {"aggregate", "global", "batch_global"}
    # The hint reaches back through row operations; a state query keeps its parent's count.
    assert plan.node("b-2-each").parallelism == plan.node("query").parallelism == 2
    assert plan.node("total").parallelism == plan.node("b-15-batch_global").parallelism == 1
    assert plan.node("windows").parallelism == 1  # Storm's default, no hint


def test_the_fields_of_each_family():
    plan = trident_plan(every_operation())
    each, total, chained = plan.node("b-2-each"), plan.node("total"), plan.node("chained")
    assert isinstance(each, RowNode) and each.row_op is RowOp.EACH
    assert (each.input, each.output, type(each.op)) == (("sentence",), ("word",), Split)
    assert isinstance(total, AggregateNode) and total.scope is Scope.BATCH
    assert isinstance(chained, AggregateNode) and chained.chained
    assert chained.scope is Scope.GROUP and chained.keys == ("word",)
    assert [(a.input, a.output) for a in chained.aggregations] == [
        (("sentence", "ts", "word"), ("c1",)), (("ts",), ("s1",))]
    query = plan.node("query")
    assert isinstance(query, StateQueryNode) and query.writer == "counts"
    windows = plan.node("windows")
    assert isinstance(windows, WindowNode)
    assert (windows.by, windows.size, windows.lag, windows.timestamp_field) == (
        WindowBy.EVENT, 10, 3, "ts")
    by = next(n for n in plan.nodes if n.label == "partition_by")
    assert isinstance(by, RepartitionNode) and by.scheme == PartitionBy(("up",))
    persisted = plan.node("counts")
    assert isinstance(persisted, PersistNode) and persisted.persist is Persist.AGGREGATE
    assert (persisted.keys, persisted.state, persisted.input) == (("word",), "counts",
                                                                  ("sentence", "ts", "word"))


def test_nodes_travel_pickled():
    plan = trident_plan(every_operation())
    again = cloudpickle.loads(cloudpickle.dumps(plan))
    for before, after in zip(plan.nodes, again.nodes, strict=True):
        assert type(after) is type(before) and after.label == before.label
        assert (after.cid, after.parents, after.fields) == (before.cid, before.parents,
                                                           before.fields)
        assert after.order == before.order and after.parallelism == before.parallelism
        assert [f.name for f in dataclasses.fields(after)] == [
            f.name for f in dataclasses.fields(before)]


def test_a_new_node_is_made_by_its_family():
    node = AggregateNode(cid="n", parents=("s",), fields=("n",), scope=Scope.BATCH,
                         aggregations=(Aggregation(("x",), Count(), ("n",)),))
    assert node.single_partition and node.label == "aggregate" and node.order == 0
    assert RepartitionNode(fields=("x",), scheme=Global(per_batch=True)).label == "batch_global"


# ---- the plan format ----------------------------------------------------------------------------

def counting() -> Topology:
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["word"], 2, ["a"], ["b"], ["a"]))
     .group_by(["word"]).persistent_aggregate(MemoryMapState.factory(), Count(), ["n"]))
    return t.build()


def written_by_an_older_squall(ckpt: str, runner: str) -> None:
    """The Trident progress an older squall left in checkpoint location `ckpt`: its next txid,
    and no plan format (recorded since format 2)."""
    open_store({STORE: {"dir": f"{ckpt}/trident"}}, f"trident-{runner}").put(CURR, 3)


def test_the_coordinator_records_the_plan_format_with_the_progress(tmp_path):
    conf = {STORE: {"dir": str(tmp_path)}}
    coordinator = BatchCoordinator(trident_plan(counting()), conf, "doc")
    coordinator.commit(1)
    assert open_store(conf, "trident-doc").get(FORMAT) == PLAN_FORMAT
    assert BatchCoordinator(trident_plan(counting()), conf, "doc").next_txid == 2  # resumes


def test_a_checkpoint_of_an_older_plan_format_is_refused_by_the_local_runner(tmp_path):
    from squall.runtime.local.trident import LocalTridentRunner

    ckpt = str(tmp_path / "ckpt")
    written_by_an_older_squall(ckpt, "local")
    with pytest.raises(PlanFormatError) as refused:
        LocalTridentRunner(counting(), checkpoint_location=ckpt)
    message = str(refused.value)
    assert f"Trident checkpoint {ckpt}/trident/trident-local was written by an older squall " \
           f"(plan format 1, this squall's is {PLAN_FORMAT})" in message
    assert "use a new checkpoint location" in message


def test_a_checkpoint_of_an_older_plan_format_is_refused_by_the_spark_runner(tmp_path):
    """Refused when the runner is made, before its Spark session: the topology's shape is the
    same (the plan format is not part of it), the progress's format is not."""
    from squall.runtime.fingerprint import check_fingerprint
    from squall.runtime.spark.trident import TridentSparkRunner

    ckpt = str(tmp_path / "ckpt")
    check_fingerprint(ckpt, counting())  # the older run recorded this topology
    written_by_an_older_squall(ckpt, "spark")
    with pytest.raises(PlanFormatError, match=f"Trident checkpoint {ckpt}/trident/trident-spark "
                                              "was written by an older squall"):
        TridentSparkRunner(counting(), checkpoint_location=ckpt,
                           session=object())  # never reached


def test_a_checkpoint_of_a_newer_plan_format_is_refused(tmp_path):
    conf = {STORE: {"dir": str(tmp_path)}}
    store = open_store(conf, "trident-doc")
    store.put(CURR, 2)
    store.put(FORMAT, PLAN_FORMAT + 1)
    with pytest.raises(PlanFormatError, match="written by a newer squall"):
        BatchCoordinator(trident_plan(counting()), conf, "doc")


def test_a_payload_of_an_untyped_node_is_refused():
    """A node pickled under plan format 1 (`PlanNode` with a kind and arguments) loads as the
    base class, not a family: the plan refuses it, naming the component."""
    topology = counting()
    spec = topology.components["s"]
    untyped = object.__new__(PlanNode)
    untyped.__dict__.update(cid="s", kind="spout", parents=(), fields=("word",), parallelism=1,
                            args={"op": FixedBatchSpout(["word"], 1, ["a"]), "order": 0})
    old = Topology({**topology.components,
                    "s": dataclasses.replace(spec, payload=cloudpickle.dumps(untyped))})
    with pytest.raises(PlanFormatError, match=r"component 's' holds a Trident plan node of "
                                              r"another plan format \(PlanNode\)"):
        trident_plan(old)
