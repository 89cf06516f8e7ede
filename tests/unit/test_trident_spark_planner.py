"""The Trident Spark runner's planner (`squall.runtime.spark.trident.planner`): which operations
of a plan run in Spark, and which fields and partials their workers pass on. The plans are built
through the public Trident API; no Spark session runs."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow.compute as pc

from squall.runtime.spark.trident import planner
from squall.runtime.spark.trident.jobs import (
    AggregateJob,
    PersistJob,
    QueryJob,
    StateJob,
    Tuning,
    WindowJob,
)
from squall.trident import (
    ROW,
    BatchFunction,
    CombinerAggregator,
    Consumer,
    Count,
    Filter,
    First,
    FixedBatchSpout,
    Function,
    MapFunction,
    MapGet,
    MapPut,
    Min,
    StateUpdater,
    Sum,
    TridentTopology,
)
from squall.trident.plan import (
    Node,
    PersistNode,
    Plan,
    SpoutNode,
    StateQueryNode,
    trident_plan,
)
from squall.trident.state import DurableMapState, MemoryMapState
from squall.trident.state.partitioned import PARTITIONS_KEY, open_state


class Split(Function):
    def execute(self, tup, collector):
        for w in tup[0].split():
            collector.emit([w])


class SplitColumns(BatchFunction):
    output_types: ClassVar[dict[str, type]] = {"word": str}

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}


class Long(Filter):
    def is_keep(self, tup):
        return len(tup[0]) > 1


class Upper(MapFunction):
    def execute(self, tup):
        return [tup[0].upper()]


class Show(Consumer):
    def accept(self, tup):
        pass


class SumOfSquares(CombinerAggregator):
    """A user's combiner: the planner looks at its type only, and runs none of it."""


def sentences(t: TridentTopology, name: str = "s") -> Any:
    return t.new_stream(name, FixedBatchSpout(["sentence", "n", "ts"], 2, ["a b", 1, 10]))


def words(t: TridentTopology, name: str = "s") -> Any:
    return sentences(t, name).each(["sentence"], Split(), ["word"])


def plan_of(t: TridentTopology) -> Plan:
    return trident_plan(t.build())


def one(plan: Plan, kind: str) -> Node:
    (node,) = [n for n in plan.nodes if n.label == kind]
    return node


def kinds(path: list[Node]) -> list[str]:
    return [n.label for n in path]


# ---- spark_segments ------------------------------------------------------------------------

def test_a_word_count_runs_in_spark_from_its_spout_to_its_aggregation():
    t = TridentTopology()
    (words(t).filter(["word"], Long()).group_by(["word"])
     .persistent_aggregate(MemoryMapState.factory(), Count(), ["count"]))
    plan = plan_of(t)
    paths, inside = planner.spark_segments(plan)
    agg = one(plan, "persistent_aggregate")
    assert list(paths) == [agg.cid]
    assert kinds(paths[agg.cid]) == ["spout", "each", "filter", "persistent_aggregate"]
    assert inside == {n.cid for n in paths[agg.cid][:-1]}


def test_every_aggregation_of_a_spout_gets_its_own_path_sharing_the_operations_before_it():
    t = TridentTopology()
    grouped = words(t).group_by(["word"])
    grouped.aggregate(Count(), ["count"])
    grouped.aggregate(["n"], Sum(), ["sum"])
    plan = plan_of(t)
    paths, inside = planner.spark_segments(plan)
    assert sorted(map(kinds, paths.values())) == [["spout", "each", "group_aggregate"]] * 2
    assert {plan.node(c).label for c in inside} == {"spout", "each"}


def test_rows_a_driver_operation_reads_keep_their_whole_spout_on_the_driver():
    """An operation runs in Spark only if every operation reading its output does too: a
    `peek` at the end of a stream, or an aggregation Spark does not run (`First` is no
    combiner), takes the spout's rows to the driver, and its other paths with them."""
    for ending in ("peek", "first"):
        t = TridentTopology()
        stream = words(t)
        stream.group_by(["word"]).aggregate(Count(), ["count"])
        if ending == "peek":
            stream.peek(Show())
        else:
            stream.aggregate(["word"], First(), ["first"])
        paths, inside = planner.spark_segments(plan_of(t))
        assert (paths, inside) == ({}, frozenset()), ending


def test_each_spout_is_planned_on_its_own():
    t = TridentTopology()
    words(t, "counted").group_by(["word"]).aggregate(Count(), ["count"])
    words(t, "shown").peek(Show())
    plan = plan_of(t)
    paths, inside = planner.spark_segments(plan)
    assert [p[0].cid for p in paths.values()] == ["counted"]
    assert "shown" not in inside and "counted" in inside


def test_a_state_query_ends_a_path_when_it_is_read_in_the_tasks():
    t = TridentTopology()
    state = (words(t, "counted").group_by(["word"])
             .persistent_aggregate(MemoryMapState.factory(), Count(), ["count"]))
    words(t, "asked").state_query(state, ["word"], MapGet(), ["count"])
    plan = plan_of(t)
    query = one(plan, "state_query")

    paths, inside = planner.spark_segments(plan)
    assert query.cid not in paths and "asked" not in inside
    paths, inside = planner.spark_segments(plan, lambda node: node is query)
    assert kinds(paths[query.cid]) == ["spout", "each", "state_query"]
    assert "asked" in inside and query.cid not in inside


def test_which_aggregations_spark_can_end_a_path_with():
    t = TridentTopology()
    stream = sentences(t)
    stream.group_by(["sentence"]).aggregate(Count(), ["count"]).name("builtin")
    stream.group_by(["sentence"]).aggregate(["n"], SumOfSquares(), ["sq"]).name("combiner")
    stream.aggregate(["n"], First(), ["first"]).name("aggregator")
    stream.tumbling_window(100, ["n"], Sum(), ["sum"], timestamp_field="ts").name("event")
    stream.tumbling_window(100, ["n"], SumOfSquares(), ["sq"],
                           timestamp_field="ts").name("event-combiner")
    stream.tumbling_window(100, ["n"], Sum(), ["sum"]).name("processing")
    stream.tumbling_count_window(3, ["n"], Sum(), ["sum"]).name("count")
    plan = plan_of(t)
    terminal = {n.cid: planner._spark_terminal(n) for n in plan.nodes
                if not isinstance(n, SpoutNode)}
    assert terminal == {"builtin": True, "combiner": True, "aggregator": False, "event": True,
                        "event-combiner": False, "processing": False, "count": False}


# ---- the fields a worker passes on ---------------------------------------------------------

def test_a_repartition_passes_on_only_the_fields_read_after_it():
    t = TridentTopology()
    words(t).partition_by(["word"]).group_by(["word"]).aggregate(["n"], Sum(), ["sum"])
    plan = plan_of(t)
    (path,) = planner.spark_segments(plan)[0].values()
    assert planner._needed(path, one(plan, "partition_by")) == ("n", "word")


def test_row_operations_after_a_repartition_may_read_any_field():
    t = TridentTopology()
    (words(t).partition_by(["word"]).filter(["word"], Long()).group_by(["word"])
     .aggregate(Count(), ["count"]))
    plan = plan_of(t)
    (path,) = planner.spark_segments(plan)[0].values()
    assert planner._needed(path, one(plan, "partition_by")) == ("sentence", "n", "ts", "word")


def test_a_chain_drops_the_fields_nothing_after_it_reads():
    t = TridentTopology()
    (words(t).filter(["word"], Long()).project(["word"])
     .group_by(["word"]).aggregate(Count(), ["count"]))
    plan = plan_of(t)
    chain = [one(plan, "each"), one(plan, "filter"), one(plan, "project")]
    # After the split only `word` is read: the sentence need not travel on.
    assert planner._live(chain, ("word",)) == [frozenset({"word"})] * 3
    # A field from before the chain that its output holds stays live through it.
    assert planner._live(chain[:2], ("word", "n")) == [frozenset({"word", "n"})] * 2


def test_a_map_reads_the_whole_tuple():
    t = TridentTopology()
    words(t).map(Upper(), ["upper"]).group_by(["upper"]).aggregate(Count(), ["count"])
    plan = plan_of(t)
    assert planner._live([one(plan, "each"), one(plan, "map")], ("upper",)) == [
        frozenset({"sentence", "n", "ts", "word"}), frozenset({"upper"})]


def test_typed_fields_after_each_kind_of_operation():
    t = TridentTopology()
    (sentences(t).each(["sentence"], SplitColumns(), ["word"]).project(["word"])
     .map(Upper(), ["upper"]).shuffle().peek(Show()))
    plan = plan_of(t)
    before = {"sentence": "s", "n": "i"}
    after = {n.label: planner._types_after(n, before) for n in plan.nodes
             if not isinstance(n, SpoutNode)}
    assert after["each"] == {**before, "word": "s"}  # the batch function's declared type
    assert planner._types_after(one(plan, "project"), after["each"]) == {"word": "s"}
    assert after["project"] == {}  # `word` was not typed before it
    assert after["map"] == {}  # new values
    assert after["shuffle"] == after["peek"] == before
    t = TridentTopology()
    sentences(t).each(["sentence"], Split(), ["word"]).peek(Show())
    assert planner._types_after(one(plan_of(t), "each"), before) == before  # none declared


# ---- partials ------------------------------------------------------------------------------

def aggregations() -> dict[str, Node]:
    t = TridentTopology()
    grouped = sentences(t).group_by(["sentence"])
    grouped.aggregate(Count(), ["count"]).name("count")
    grouped.aggregate(["n"], Sum(), ["sum"]).name("sum")
    grouped.aggregate(["n"], Min(), ["min"]).name("min")
    grouped.aggregate(["n"], SumOfSquares(), ["sq"]).name("combiner")
    sentences(t, "t").tumbling_window(100, ["n"], Sum(), ["sum"], timestamp_field="ts") \
        .name("window")
    return {n.cid: n for n in plan_of(t).nodes if not isinstance(n, SpoutNode)}


def test_what_a_partial_aggregation_reads():
    nodes = aggregations()
    assert planner._partial_reads(nodes["count"]) == ("sentence",)  # a count reads no value
    assert planner._partial_reads(nodes["sum"]) == ("sentence", "n")
    assert planner._partial_reads(nodes["window"]) == ("n", "ts")  # and the event time
    assert planner._partial_reads(None) == ()


def test_the_column_type_of_a_combiners_partials():
    nodes = aggregations()
    kind = planner._partial_kind
    assert kind(nodes["count"], {}) == "i"
    assert [kind(nodes["sum"], {"n": k}) for k in ("i", "d", "s")] == ["i", "d", None]
    assert kind(nodes["sum"], {}) is None  # untyped values: pickled partials
    assert kind(nodes["min"], {"n": "s"}) == "s"
    assert kind(nodes["combiner"], {"n": "i"}) is None


def test_spark_aggregates_only_exact_builtins_in_the_jvm():
    """Counts and integer sums keyed by typed fields: a float sum's rounding depends on the
    order, and a `Min` or an untyped key is left to the workers."""
    nodes = aggregations()
    count, total, least = nodes["count"], nodes["sum"], nodes["min"]
    jvm = planner._jvm_builtins
    assert jvm([count, total], {"sentence": "s", "n": "i"})
    assert jvm([count], {"sentence": "i"})
    assert not jvm([count, total], {"sentence": "s", "n": "d"})
    assert not jvm([count], {})
    assert not jvm([least], {"sentence": "s", "n": "i"})


def opened(plan: Plan, tmp_path, partitions: int = 4) -> dict[str, Any]:
    """Every state of `plan`, opened as a run opens it (a partitioned factory's: `partitions`)."""
    return {n.state: open_state(n.factory, n.state, str(tmp_path),
                                {PARTITIONS_KEY: partitions})
            for n in plan.nodes if isinstance(n, PersistNode)}


def counted(t: TridentTopology, factory: Any, name: str = "counts") -> Any:
    return (words(t, f"{name}-words").group_by(["word"])
            .persistent_aggregate(factory, Count(), ["count"]).name(name))


def test_a_keyed_aggregate_into_a_partitioned_state_is_applied_in_the_tasks(tmp_path):
    t = TridentTopology()
    counted(t, DurableMapState.factory(), "partitioned")
    counted(t, MemoryMapState.factory(), "in-memory")  # one store: applied on the driver
    (words(t, "global").persistent_aggregate(  # no key: one value, on the driver
        DurableMapState.factory(), Count(), ["count"]).name("whole"))
    plan = plan_of(t)
    paths, _ = planner.spark_segments(plan)
    states = opened(plan, tmp_path)
    applied = {n.cid: planner.applied_in_tasks(n, plan, paths, states)
               for n in plan.nodes if isinstance(n, PersistNode)}
    assert applied == {"partitioned": True, "in-memory": False, "whole": False}


def test_a_state_the_driver_queries_in_the_same_transaction_is_updated_on_the_driver(tmp_path):
    t = TridentTopology()
    state = counted(t, DurableMapState.factory(), "queried")
    words(t, "asked").state_query(state, ["word"], MapGet(), ["count"])
    plan = plan_of(t)
    query = one(plan, "state_query")
    update = one(plan, "persistent_aggregate")
    states = opened(plan, tmp_path / "q")
    # Read on the driver (not one of the paths), in the same transaction: before the update,
    # which must then be the driver's too.
    paths, _ = planner.spark_segments(plan)
    assert not planner.applied_in_tasks(update, plan, paths, states)
    # Read in the tasks, in an earlier job: the update is applied in the tasks after it.
    assert planner.query_in_tasks(query)
    paths, _ = planner.spark_segments(plan, planner.query_in_tasks)
    assert planner.applied_in_tasks(update, plan, paths, states)
    assert not planner.query_in_tasks(
        next(n for n in plan_of(in_memory_query()).nodes if n.cid == "asked-query"))


def in_memory_query() -> TridentTopology:
    t = TridentTopology()
    state = counted(t, MemoryMapState.factory(), "memory")
    words(t, "asked").state_query(state, ["word"], MapGet(), ["count"]).name("asked-query")
    return t


def test_aggregates_of_one_path_and_keys_into_states_alike_share_a_job(tmp_path):
    t = TridentTopology()
    grouped = words(t, "shared-words").group_by(["word"])
    grouped.persistent_aggregate(DurableMapState.factory(), Count(), ["count"]).name("count")
    grouped.persistent_aggregate(DurableMapState.factory(), Sum(), ["n"]).name("sum")
    # Other keys: a job of its own.
    words(t, "other-words").group_by(["word"]).persistent_aggregate(
        DurableMapState.factory(), Count(), ["count"]).name("other")
    plan = plan_of(t)
    paths, _ = planner.spark_segments(plan)
    states = opened(plan, tmp_path)
    applied = [c for c, p in paths.items() if planner.applied_in_tasks(p[-1], plan, paths, states)]
    assert sorted(applied) == ["count", "other", "sum"]
    jobs = planner.state_jobs(paths, applied, states)
    assert jobs["count"] == ["count", "sum"] and jobs["sum"] == ["sum", "count"]
    assert jobs["other"] == ["other"]
    # States of other partition counts cannot share the job's one repartition.
    states["sum"] = opened(plan, tmp_path / "eight", partitions=8)["sum"]
    assert planner.state_jobs(paths, applied, states)["count"] == ["count"]


# ---- spark_jobs ------------------------------------------------------------------------------

def test_the_planner_emits_one_typed_job_per_kind_of_spark_work(tmp_path):
    """A state query read in the tasks, aggregates into one state job, an aggregation whose
    aggregates come back, an event-time window: each a typed job, in the order they run (the
    query first: it reads its state before the batch's updates)."""
    t = TridentTopology()
    grouped = words(t, "counted").group_by(["word"])
    counts = grouped.persistent_aggregate(DurableMapState.factory(), Count(), ["count"]) \
        .name("count")
    grouped.persistent_aggregate(DurableMapState.factory(), Sum(), ["n"]).name("sum")
    words(t, "asked").state_query(counts, ["word"], MapGet(), ["c"]).name("ask")
    words(t, "plain").group_by(["word"]).aggregate(Count(), ["k"]).name("agg")
    sentences(t, "timed").tumbling_window(10, ["n"], Sum(), ["total"], timestamp_field="ts") \
        .name("win")
    plan = plan_of(t)
    paths, _ = planner.spark_segments(plan, planner.query_in_tasks)
    paths = dict(sorted(paths.items(), key=lambda p: not isinstance(p[1][-1],
                                                                    StateQueryNode)))
    states = opened(plan, tmp_path)
    jobs = planner.spark_jobs(plan, paths, states, Tuning())
    assert [(type(j).__name__, j.operations) for j in jobs] == [
        ("QueryJob", ("ask",)), ("AggregateJob", ("agg",)), ("StateJob", ("count", "sum")),
        ("WindowJob", ("win",))]
    query, aggregate, state, window = jobs
    assert isinstance(query, QueryJob) and query.partitions == 4
    assert [n.cid for n in query.path] == [n.cid for n in paths["ask"]]
    assert isinstance(aggregate, AggregateJob) and aggregate.partial \
        and aggregate.driver_combine == Tuning().driver_combine
    # Nothing reads the states' updates: their new rows stay in the tasks (or go to a caller
    # that captures every operation's rows).
    assert isinstance(state, StateJob) and state.partitions == 4
    assert state.collect == (False, False)
    assert planner.spark_jobs(plan, paths, states, Tuning(), capture=True)[2].collect \
        == (True, True)
    assert isinstance(window, WindowJob)
    # Partial aggregation or the executors' state off: the aggregates come to the driver.
    for tuning in (Tuning(partial=False), Tuning(in_executors=False)):
        kinds_of = [type(j).__name__ for j in planner.spark_jobs(plan, paths, states, tuning)]
        assert "StateJob" not in kinds_of and kinds_of.count("AggregateJob") == 3, tuning


class TaskFiles:
    """A `partition_persist` factory whose state opens in the task of its partition."""

    def make_state(self, name, location=None):
        raise AssertionError("opened per partition only")

    def make_task_state(self, name, location, partition_index, num_partitions):
        raise AssertionError("not opened by the planner")


class Keep(StateUpdater):
    def update_state(self, state, tuples, collector):
        for t in tuples:
            collector.emit([t[0]])


def test_a_partition_persist_whose_state_opens_in_the_tasks_ends_a_spark_path():
    """A `partition_persist` into a `TaskStateFactory`'s state ends a Spark path (its stream
    runs in the workers, the update in their tasks); its rows are collected when a later
    operation reads them. Into a state that opens on the driver only (a map state), the stream
    stays on the driver."""
    t = TridentTopology()
    kept = words(t, "in-tasks").filter(["word"], Long()).partition_persist(
        TaskFiles(), ["word"], Keep(), ["kept"]).name("files")
    kept.new_values_stream().each(["kept"], Split(), ["part"]).name("after")
    words(t, "on-driver").partition_persist(MemoryMapState.factory(), ["word", "n"], MapPut(),
                                            ["word", "n"]).name("map")
    plan = plan_of(t)
    assert planner.spark_segments(plan)[0] == {}  # not asked for: the driver's
    paths, inside = planner.spark_segments(plan, persists=planner.persist_in_tasks)
    assert list(paths) == ["files"]
    assert kinds(paths["files"]) == ["spout", "each", "filter", "partition_persist"]
    assert "after" not in inside and "map" not in paths
    (job,) = planner.spark_jobs(plan, paths, {}, Tuning())
    assert isinstance(job, PersistJob) and job.operations == ("files",) and job.collect
