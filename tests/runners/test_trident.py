"""Trident (`squall.trident`): Storm's batch API, checked against plain-Python references.

Tests taking `runner` run on the local runner and on Spark (tests/conftest.py) and read what
each operation emitted through `complete_topology` (rows in batch order). Where the order of
rows inside a batch is not part of Storm's semantics (after a repartitioning), rows carry their
batch number `b` and are compared as multisets. Tests without `runner` check the API's
validation and the per-batch executor directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support.examples import load_example
from support.redis_server import start_redis

import squall
from squall import Fields
from squall.errors import InvalidTopologyError, SquallError
from squall.testing import MockedSources, complete_topology, simulated_time
from squall.transactional import (
    MemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    RedisStreamOpaqueSpout,
    RedisStreamTransactionalSpout,
)
from squall.trident import (
    ROW,
    Aggregator,
    BatchFunction,
    BatchSpout,
    CombinerAggregator,
    Consumer,
    Count,
    Filter,
    FilterNull,
    First,
    FixedBatchSpout,
    FlatMapFunction,
    Function,
    MapFunction,
    MapGet,
    MapPut,
    Max,
    Min,
    ReducerAggregator,
    Sum,
    TridentTopology,
)
from squall.trident.execution import BatchExecutor
from squall.trident.plan import trident_plan
from squall.trident.state import DurableMapState, MemoryMapState, StateType

ROOT = Path(__file__).resolve().parents[2]
TX, OPAQUE, NON_TX = StateType.TRANSACTIONAL, StateType.OPAQUE, StateType.NON_TRANSACTIONAL
MAX_ATTEMPTS = "squall.trident.max.attempts"

# Storm's TridentWordCount sentences.
SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]


# ---- helpers ------------------------------------------------------------------------------------

class Split(Function):
    """Storm's Split: a word per space-separated token of the first input field."""

    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


class Batches(BatchSpout):
    """Batch `b` is `batches[b - 1]` (possibly empty); exhausted after the last. Transactional:
    a batch id always gives the same rows."""

    transactional = True

    def __init__(self, fields: list[str], *batches: list[tuple]) -> None:
        self.fields, self.batches = tuple(fields), [list(b) for b in batches]

    def get_output_fields(self):
        return self.fields

    def emit_batch(self, batch_id, collector):
        if batch_id <= len(self.batches):
            for row in self.batches[batch_id - 1]:
                collector.emit(row)

    def is_exhausted(self, batch_id):
        return batch_id > len(self.batches)


class LooseBatches(Batches):
    """The same rows, but the spout does not promise to replay a batch identically."""

    transactional = False


class MemoryOpaqueSpout(OpaquePartitionedTransactionalSpout):
    """An opaque partitioned spout over in-memory partitions, `max_batch` rows per partition
    and batch; metadata is the end offset."""

    def __init__(self, data: dict[int, list[list[Any]]], fields: Fields, max_batch: int) -> None:
        self.data, self.fields, self.max_batch = data, fields, max_batch

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("attempt", *self.fields))

    def num_partitions(self):
        return len(self.data)

    def emit_partition_batch(self, attempt, collector, partition, last_meta):
        start = last_meta or 0
        rows = self.data[partition][start:start + self.max_batch]
        for row in rows:
            collector.emit([attempt, *row])
        return start + len(rows)

    def is_exhausted(self, partition, meta):
        return (meta or 0) >= len(self.data[partition])


def run(t: TridentTopology, runner: str, conf: dict | None = None, **kwargs: Any):
    return complete_topology(t.build(), conf or {}, runner=runner, **kwargs)


def rows(result, component: str) -> list[tuple]:
    return [tuple(r) for r in result.tuples(component)]


def words_of(sentences) -> Counter:
    return Counter(w for s in sentences for w in s.split(" "))


def read_state(factory, name: str, location) -> dict:
    state = factory.make_state(name, str(location))
    try:
        return dict(state.items())
    finally:
        state.close()


# ---- word count (Storm's TridentWordCount) ------------------------------------------------

def test_word_count_state_new_values_and_query_equal_a_dict_count(runner, tmp_path):
    """Storm's TridentWordCount: persistent counts over several batches; the counts read back
    by a query stream (MapGet, after the last sentence batch), the new-values stream and the
    state itself all equal a plain dict count; the DRPC-style query sums the counts of its
    words as of the batch before."""
    factory = DurableMapState.factory(TX, directory=str(tmp_path / "states"))
    all_words = sorted(words_of(SENTENCES))
    query = "cat the dog jumped"
    t = TridentTopology()
    counts = (t.new_stream("spout1", FixedBatchSpout(["sentence"], 2, *[[s] for s in SENTENCES]))
              .each(["sentence"], Split(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(factory, Count(), ["count"]).name("counts"))
    # Batches 1-3 hold the sentences; batch 4 asks for every word (it sees batches 1-3).
    (t.new_stream("lookup", Batches(["word"], [], [], [], [(w,) for w in all_words]))
     .partition_by(["word"])
     .state_query(counts, ["word"], MapGet(), ["count"]).name("lookup-counts"))
    # Storm's DRPC query, one query per batch: batch 1 sees an empty state, batch 4 all.
    (t.new_stream("queries", FixedBatchSpout(["args"], 1, *[[query]] * 4))
     .each(["args"], Split(), ["word"])
     .partition_by(["word"])  # what Storm's GroupedStream.stateQuery does
     .state_query(counts, ["word"], MapGet(), ["count"])
     .each(["count"], FilterNull())
     .aggregate(["count"], Sum(), ["sum"]).name("query-sum"))
    result = run(t, runner)

    expected = words_of(SENTENCES)
    assert result.extra["committed"] == [1, 2, 3, 4]
    assert sorted(rows(result, "lookup-counts")) == sorted(expected.items())
    # The new-values stream: each batch's updated words with their counts after the batch.
    running: Counter = Counter()
    new_values = []
    for batch in (SENTENCES[0:2], SENTENCES[2:4], SENTENCES[4:]):
        running += words_of(batch)
        new_values += [(w, running[w]) for w in words_of(batch)]
    assert sorted(rows(result, "counts")) == sorted(new_values)
    assert read_state(factory, "counts", tmp_path) == {(w,): c for w, c in expected.items()}
    # The query's sum per batch, each seeing the counts as of the batch before.
    seen = [Counter(), words_of(SENTENCES[:2]), words_of(SENTENCES[:4]), expected]
    assert rows(result, "query-sum") == [(sum(c[w] for w in query.split(" ")),) for c in seen]


@pytest.mark.spark
@pytest.mark.parametrize("staged", [True, False], ids=["local-mode-staged", "cluster-dataframe"])
def test_driver_batches_reach_spark_staged_or_as_dataframes(staged, tmp_path):
    """A batch built on the driver (a FixedBatchSpout's) reaches Spark as a parquet file staged
    under the checkpoint location in local mode, deleted once the batch's jobs ran; a cluster's
    runner (whose executors cannot read the driver's disk) sends it with `createDataFrame`.
    Both count exactly, with a per-tuple and a batch function in the same topology."""
    from squall.runtime.spark.trident import TridentSparkRunner

    factory = DurableMapState.factory(TX, directory=str(tmp_path / "states"))
    t = TridentTopology()
    stream = t.new_stream("s", FixedBatchSpout(["sentence"], 2, *[[s] for s in SENTENCES]))
    (stream.each(["sentence"], Split(), ["word"]).group_by(["word"])
     .persistent_aggregate(factory, Count(), ["count"]).name("counts"))
    (stream.each(["sentence"], Split(), ["word"]).each(["word"], ArrowLength(), ["len"])
     .aggregate(["len"], Sum(), ["letters"]).name("letters"))
    runner = TridentSparkRunner(t.build(), {}, checkpoint_location=str(tmp_path / "ckpt"),
                                capture=True)
    launcher = runner.launcher
    staging = launcher.staging
    assert staging == str(tmp_path / "ckpt" / "trident" / "staged")
    if not staged:
        launcher.staging = None  # as on a cluster master
    written: list[int] = []
    dataframe = launcher.dataframe
    launcher.dataframe = lambda table, ddl: (written.append(table.num_rows),
                                             dataframe(table, ddl))[1]
    result = runner.run()
    assert result.extra["committed"] == [1, 2, 3]
    assert written == [2, 2, 2, 2, 1, 1], "one DataFrame per Spark path and batch"
    assert read_state(factory, "counts", tmp_path) == {
        (w,): c for w, c in words_of(SENTENCES).items()}
    letters = [sum(len(s.replace(" ", "")) for s in b) for b in (
        SENTENCES[0:2], SENTENCES[2:4], SENTENCES[4:])]
    assert [r[0] for r in result.extra["outputs"]["letters"]] == letters
    assert os.path.isdir(staging) == staged
    if staged:
        assert os.listdir(staging) == [], "staged files are deleted after their batch"


def test_storm_drpc_query_is_written_as_in_storm(runner):
    t = TridentTopology()
    counts = (t.new_stream("spout1", FixedBatchSpout(["sentence"], 5, *[[s] for s in SENTENCES]))
              .each(["sentence"], Split(), ["word"]).group_by(["word"])
              .persistent_aggregate(MemoryMapState.factory(), Count(), ["count"]))
    (t.new_stream("queries", FixedBatchSpout(["args"], 1, ["cat the dog jumped"], ["the"]))
     .each(["args"], Split(), ["word"]).group_by(["word"])
     .state_query(counts, ["word"], MapGet(), ["count"])
     .each(["count"], FilterNull()).aggregate(["count"], Sum(), ["sum"]).name("sum"))
    # Batch 1's query sees no counts yet (0); batch 2's sees all five sentences: "the" x5.
    assert rows(run(t, runner), "sum") == [(0,), (5,)]


# ---- row operations ---------------------------------------------------------------------------

class Repeat(Function):
    """Emits (n, n * 10) as many times as `n` says: 0 drops the tuple, 2 doubles it."""

    def execute(self, tup, collector):
        for i in range(tup["n"]):
            collector.emit([i, tup["n"] * 10])


class Odd(Filter):
    """Keeps tuples whose first field is an odd int."""

    def is_keep(self, tup):
        return isinstance(tup[0], int) and tup[0] % 2 == 1


class Describe(MapFunction):
    def execute(self, tup):
        return [f"{tup['name']}:{tup['n']}"]


class Upper(MapFunction):
    def execute(self, tup):
        return [tup["name"].upper(), tup["n"]]


class Letters(FlatMapFunction):
    def execute(self, tup):
        return [[c] for c in tup["name"]]


class AppendTo(Consumer):
    """Appends each tuple to a file: observable from the test on both runners."""

    def __init__(self, path: str) -> None:
        self.path = path

    def accept(self, tup):
        with open(self.path, "a") as out:
            out.write(repr(tuple(tup)) + "\n")


def test_each_filter_map_flat_map_peek_and_project(runner, tmp_path):
    """`each` appends the function's values to the input tuple, once per emission (a tuple
    emitting nothing is dropped); a filter keeps tuples by `is_keep`; map and flat_map replace
    tuples; peek sees every tuple and changes nothing; project keeps and orders fields."""
    data = [[("ab", 0), ("c", 1), ("de", 2)], [("f", 3), ("gh", 1)]]
    peeked = tmp_path / "peeked.txt"
    t = TridentTopology()
    s = t.new_stream("s", Batches(["name", "n"], *data))
    s.each(["n"], Repeat(), ["i", "ten"]).name("each")
    s.each(["n"], Odd()).name("filter")
    s.filter(Odd()).name("filter-all-fields")
    s.map(Describe(), ["text"]).name("map")
    s.map(Upper()).name("map-same-fields")
    s.flat_map(Letters(), ["letter"]).name("flat_map")
    s.peek(AppendTo(str(peeked))).name("peek")
    s.project(["n", "name"]).name("project")
    result = run(t, runner)

    flat = [r for batch in data for r in batch]
    assert rows(result, "each") == [(name, n, i, n * 10) for name, n in flat for i in range(n)]
    assert rows(result, "filter") == [r for r in flat if r[1] % 2 == 1]
    assert rows(result, "filter-all-fields") == []  # the first field is a string: no odd ones
    assert rows(result, "map") == [(f"{name}:{n}",) for name, n in flat]
    assert rows(result, "map-same-fields") == [(name.upper(), n) for name, n in flat]
    assert rows(result, "flat_map") == [(c,) for name, _ in flat for c in name]
    assert rows(result, "peek") == flat
    assert sorted(peeked.read_text().splitlines()) == sorted(repr(r) for r in flat)
    assert rows(result, "project") == [(n, name) for name, n in flat]


# ---- aggregation ---------------------------------------------------------------------------

def test_global_aggregate_builtins_and_empty_batch(runner):
    """`aggregate` over each whole batch: Count, Sum, Min, Max emit one tuple per batch, the
    combiner's zero on an empty batch (Count 0, Sum 0, Min/Max None); First emits the batch's
    first tuple, nothing for an empty batch; the output holds only the function fields."""
    data = [[(5, "a"), (2, "b"), (9, "c")], [], [(7, "d")]]
    t = TridentTopology()
    s = t.new_stream("s", Batches(["v", "name"], *data))
    s.aggregate(Count(), ["n"]).name("count")
    s.aggregate(["v"], Sum(), ["sum"]).name("sum")
    s.aggregate(["v"], Min(), ["min"]).name("min")
    s.aggregate(["v"], Max(), ["max"]).name("max")
    s.aggregate(First(), ["v", "name"]).name("first")
    result = run(t, runner)

    assert result.extra["committed"] == [1, 2, 3]
    assert rows(result, "count") == [(3,), (0,), (1,)]
    assert rows(result, "sum") == [(16,), (0,), (7,)]
    assert rows(result, "min") == [(2,), (None,), (7,)]
    assert rows(result, "max") == [(9,), (None,), (7,)]
    assert rows(result, "first") == [(5, "a"), (7, "d")]
    assert result.topology.components["count"].streams["default"].fields.to_list() == ["n"]


@pytest.mark.parametrize("plan", ["driver-combine", "spark-combine", "no-partials"])
def test_builtin_combiners_agree_whatever_the_spark_plan(runner, plan):
    """A built-in combiner's partials combined on the driver by Arrow (a few partitions, the
    default), by Spark's JVM (more partitions than `DRIVER_COMBINE`), or every row aggregated
    by the JVM (partial aggregation off): the same per-key values, of the same types, as the
    local runner; typed and mixed-type keys and values."""
    from squall.runtime.spark.trident import DRIVER_COMBINE, PARTIAL

    conf = {"driver-combine": {}, "spark-combine": {DRIVER_COMBINE: 0},
            "no-partials": {PARTIAL: False}}[plan]
    typed = [(f"w{i % 5}", i, f"s{i % 7}") for i in range(40)]
    # (Without partials, Spark groups keys of no one type as tagged bytes: every kind here.)
    mixed = [(k, v, f"s{i % 3}") for i, (k, v) in enumerate(
        zip([1, "1", 2.5, None, (1, "a"), b"1", 2 ** 70, -3.5, ""] * 3,
            [1, 2.5, 3, 4.0, 5, 6, 7.5, 8, 9] * 3, strict=True))]
    t = TridentTopology()
    for name, data in (("typed", typed), ("mixed", mixed)):
        g = t.new_stream(name, Batches(["k", "v", "s"], data[:25], data[25:])).group_by(["k"])
        g.aggregate(Count(), ["n"]).name(f"{name}-count")
        g.aggregate(["v"], Sum(), ["sum"]).name(f"{name}-sum")
        g.aggregate(["s"], Min(), ["min"]).name(f"{name}-min")
        g.aggregate(["v"], Max(), ["max"]).name(f"{name}-max")
    result = run(t, runner, conf)
    for name, data in (("typed", typed), ("mixed", mixed)):
        for agg, fold, col in (("count", lambda vs: len(vs), 1), ("sum", sum, 1),
                               ("min", min, 2), ("max", max, 1)):
            want = []
            for batch in (data[:25], data[25:]):
                groups: dict = {}
                for r in batch:
                    groups.setdefault(r[0], []).append(r[col])
                want.extend((k, fold(vs)) for k, vs in groups.items())
            got = rows(result, f"{name}-{agg}")
            assert sorted(got, key=repr) == sorted(want, key=repr), (name, agg)
    # On Spark, the plan took the route asked for: the typed count's partials combined on the
    # driver only when at most DRIVER_COMBINE partitions hold them.
    routes = {(j["operations"], j["route"]) for j in result.extra.get("spark_jobs", [])}
    if runner.startswith("spark"):
        want_route = {"driver-combine": "driver", "spark-combine": "jvm",
                      "no-partials": "jvm"}[plan]
        assert (("typed-count",), want_route) in routes, routes
    else:
        assert routes == set()


class SumOfSquares(CombinerAggregator):
    def init(self, tup):
        return tup[0] * tup[0]

    def combine(self, a, b):
        return a + b

    def zero(self):
        return 0


class Distinct(ReducerAggregator):
    """The sorted distinct values (of the first field, or of all fields when there are
    several); a reducer folds the tuples in one at a time."""

    def init(self):
        return ()

    def reduce(self, current, tup):
        value = tup[0] if len(tup) == 1 else tuple(tup)
        return tuple(sorted(set(current) | {value}))


class Spread(Aggregator):
    """Emits (min, max) and then (count, -1): an aggregator may emit several tuples."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, state, tup, collector):
        state.append(tup[0])

    def complete(self, state, collector):
        collector.emit([min(state), max(state)])
        collector.emit([len(state), -1])


def _grouped_reference(data):
    out = {}
    for b, batch in enumerate(data, 1):
        for k, v in batch:
            out.setdefault((b, k), []).append(v)
    return out


GROUPED_DATA = [[("x", 3), ("y", 1), ("x", 4), ("z", 2), ("x", 3)], [("y", 5), ("y", 6)]]


def test_group_by_aggregate_with_combiner_reducer_and_aggregator(runner):
    """`group_by(...).aggregate` per group of each batch: the keys then the function fields,
    for a user CombinerAggregator, ReducerAggregator and Aggregator (several tuples per
    group); `partition_aggregate` after `partition_by` of the same keys gives the same; a
    chained aggregation computes several aggregates of the same groups in one pass."""
    data = [[(b, k, v) for k, v in batch] for b, batch in enumerate(GROUPED_DATA, 1)]
    t = TridentTopology()
    s = t.new_stream("s", Batches(["b", "k", "v"], *data))
    g = s.group_by(["b", "k"])
    g.aggregate(["v"], SumOfSquares(), ["sq"]).name("combiner")
    g.aggregate(["v"], Distinct(), ["distinct"]).name("reducer")
    g.aggregate(["v"], Spread(), ["lo", "hi"]).name("aggregator")
    (s.partition_by(["b", "k"]).parallelism_hint(2).group_by(["b", "k"])
     .partition_aggregate(["v"], Sum(), ["sum"]).name("partition"))
    (g.chained_agg().aggregate(["v"], Sum(), ["sum"]).aggregate(Count(), ["n"])
     .aggregate(["v"], Max(), ["max"]).chain_end().name("chained"))
    s.chained_agg().aggregate(["v"], Sum(), ["sum"]).aggregate(Count(), ["n"]).chain_end() \
        .name("chained-global")
    result = run(t, runner)

    ref = _grouped_reference(GROUPED_DATA)
    assert sorted(rows(result, "combiner")) == sorted(
        (*k, sum(v * v for v in vs)) for k, vs in ref.items())
    assert sorted(rows(result, "reducer")) == sorted(
        (*k, tuple(sorted(set(vs)))) for k, vs in ref.items())
    assert sorted(rows(result, "aggregator")) == sorted(
        [(*k, min(vs), max(vs)) for k, vs in ref.items()]
        + [(*k, len(vs), -1) for k, vs in ref.items()])
    assert sorted(rows(result, "partition")) == sorted((*k, sum(vs)) for k, vs in ref.items())
    assert sorted(rows(result, "chained")) == sorted(
        (*k, sum(vs), len(vs), max(vs)) for k, vs in ref.items())
    assert rows(result, "chained-global") == [(13, 5), (11, 2)]


def test_partition_aggregate_aggregates_each_partition_separately(runner):
    """After `partition_by(k)` into two partitions, `partition_aggregate` runs once per
    partition and batch: the partitions' distinct keys are disjoint (equal keys meet in one
    partition) and together every key of the batch; their counts add up to the batch."""
    data = [[(b, f"k{i % 7}") for i in range(20)] for b in (1, 2)] + [[(3, "k0")]]
    t = TridentTopology()
    s = t.new_stream("s", Batches(["b", "k"], *data)).partition_by(["k"]).parallelism_hint(2)
    s.partition_aggregate(["b", "k"], Distinct(), ["keys"]).name("keys")
    s.partition_aggregate(Count(), ["n"]).name("counts")
    result = run(t, runner)

    per_batch: dict[int, list[set]] = {}
    for (keys,) in rows(result, "keys"):
        if keys:  # an empty partition's reducer emits its init()
            per_batch.setdefault(keys[0][0], []).append({k for _, k in keys})
    for b, batch in enumerate(data, 1):
        parts = per_batch[b]
        assert 1 <= len(parts) <= 2
        assert set().union(*parts) == {k for _, k in batch}
        assert sum(len(p) for p in parts) == len(set().union(*parts))
    counts = [n for (n,) in rows(result, "counts")]
    assert sum(counts) == 41 and len([n for n in counts if n]) <= 6


def test_min_by_and_max_by_keep_the_whole_tuple(runner):
    data = [[("ann", 31), ("bob", 25), ("cid", 40)], [("dan", 18)]]
    t = TridentTopology()
    s = t.new_stream("s", Batches(["name", "age"], *data))
    s.min_by("age").name("youngest")
    s.max_by("age").name("oldest")
    result = run(t, runner)
    assert rows(result, "youngest") == [("bob", 25), ("dan", 18)]
    assert rows(result, "oldest") == [("cid", 40), ("dan", 18)]


# ---- merge and join ------------------------------------------------------------------------

def test_merge_and_joins_work_per_batch(runner):
    """`merge` gives the tuples of the same batch of both streams (named by the first, or
    `output_fields`); `join` joins the tuples of the same batch on equal keys: inner, left
    (missing right: None) and outer. A key in another batch does not join."""
    left = [[("x", 1), ("y", 2), ("y", 3), ("z", 4)], [("w", 5)]]
    right = [[("y", "p"), ("y", "q"), ("w", "r")], [("x", "s")]]
    t = TridentTopology()
    a = t.new_stream("left", Batches(["k", "a"], *left))
    b = t.new_stream("right", Batches(["key", "b"], *right))
    merged = t.merge(a, b.each(["b"], _Len(), ["len"]).project(["key", "len"]),
                     output_fields=["k", "n"]).name("merged")
    merged.aggregate(Count(), ["count"]).name("merged-count")
    for how in ("inner", "left", "outer"):
        t.join(a, ["k"], b, ["key"], ["k", "a", "b"], join_type=how).name(f"join-{how}")
    result = run(t, runner)

    assert sorted(rows(result, "merged")) == sorted(
        [r for batch in left for r in batch] + [("y", 1), ("y", 1), ("w", 1), ("x", 1)])
    assert rows(result, "merged-count") == [(7,), (2,)]
    inner = [("y", 2, "p"), ("y", 2, "q"), ("y", 3, "p"), ("y", 3, "q")]
    assert sorted(rows(result, "join-inner")) == sorted(inner)
    lefts = [*inner, ("x", 1, None), ("z", 4, None), ("w", 5, None)]
    assert sorted(rows(result, "join-left"), key=repr) == sorted(lefts, key=repr)
    outer = [*lefts, ("w", None, "r"), ("x", None, "s")]
    assert sorted(rows(result, "join-outer"), key=repr) == sorted(outer, key=repr)


class _Len(Function):
    def execute(self, tup, collector):
        collector.emit([len(tup[0])])


# ---- states --------------------------------------------------------------------------------

def test_partition_persist_with_map_put_and_its_new_values(runner, tmp_path):
    """`partition_persist(MapPut)` writes each tuple's value under its key, a later batch
    overwriting; the state's new-values stream has what each batch wrote."""
    factory = DurableMapState.factory(TX, directory=str(tmp_path))
    data = [[("a", 1), ("b", 2)], [("a", 3)], [("c", 4), ("b", 5)]]
    t = TridentTopology()
    (t.new_stream("s", Batches(["k", "v"], *data))
     .partition_persist(factory, ["k", "v"], MapPut(), ["k", "v"]).name("latest"))
    result = run(t, runner)
    assert sorted(rows(result, "latest")) == sorted(r for batch in data for r in batch)
    assert read_state(factory, "latest", tmp_path) == {("a",): 3, ("b",): 5, ("c",): 4}


def test_map_put_of_a_key_twice_in_a_batch_keeps_the_last(runner, tmp_path):
    factory = DurableMapState.factory(TX, directory=str(tmp_path))
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["k", "v"], 3, ["a", 1], ["b", 2], ["a", 3]))
     .partition_persist(factory, ["k", "v"], MapPut(), ["k", "v"]).name("latest"))
    run(t, runner, {MAX_ATTEMPTS: 1})
    assert read_state(factory, "latest", tmp_path) == {("a",): 3, ("b",): 2}


def test_each_state_type_with_durable_state_runs_once_per_checkpoint(runner, tmp_path):
    """Transactional, opaque and non-transactional durable states over a transactional spout
    count exactly; a second run on the finished checkpoint emits no batch and changes
    nothing; `squall.run` puts the states under the checkpoint location."""
    ckpt = tmp_path / "ckpt"
    factories = {kind: DurableMapState.factory(kind) for kind in (TX, OPAQUE, NON_TX)}
    t = TridentTopology()
    words = (t.new_stream("spout1", FixedBatchSpout(["sentence"], 2, *[[s] for s in SENTENCES]))
             .each(["sentence"], Split(), ["word"]).group_by(["word"]))
    for kind, factory in factories.items():
        words.persistent_aggregate(factory, Count(), ["count"]).name(f"counts-{kind.value}")
    topology = t.build()
    expected = {(w,): c for w, c in words_of(SENTENCES).items()}

    with simulated_time():
        first = squall.run(topology, {}, runner=runner, checkpoint_location=str(ckpt))
        assert first.extra["committed"] == [1, 2, 3]
        for kind, factory in factories.items():
            assert read_state(factory, f"counts-{kind.value}", ckpt) == expected
        again = squall.run(topology, {}, runner=runner, checkpoint_location=str(ckpt))
    assert again.extra["batches"] == 0 and again.extra["committed"] == []
    for kind, factory in factories.items():
        assert read_state(factory, f"counts-{kind.value}", ckpt) == expected


def test_restart_on_a_checkpoint_continues_at_the_next_txid(runner, tmp_path):
    """A run stopped after two batches, restarted on its checkpoint once more input is there,
    continues with transaction 3: counts continue, nothing is counted twice."""
    ckpt = str(tmp_path / "ckpt")

    def topology(sentences):
        t = TridentTopology()
        (t.new_stream("spout1", FixedBatchSpout(["sentence"], 2, *[[s] for s in sentences]))
         .each(["sentence"], Split(), ["word"]).group_by(["word"])
         .persistent_aggregate(DurableMapState.factory(TX), Count(), ["count"]).name("counts"))
        return t.build()

    with simulated_time():
        first = squall.run(topology(SENTENCES[:4]), {}, runner=runner, checkpoint_location=ckpt)
        assert first.extra["committed"] == [1, 2]
        assert read_state(DurableMapState.factory(TX), "counts", ckpt) == {
            (w,): c for w, c in words_of(SENTENCES[:4]).items()}
        second = squall.run(topology(SENTENCES), {}, runner=runner, checkpoint_location=ckpt)
    assert second.extra["committed"] == [3]
    assert read_state(DurableMapState.factory(TX), "counts", ckpt) == {
        (w,): c for w, c in words_of(SENTENCES).items()}


@pytest.mark.parametrize("kind", [TX, OPAQUE, NON_TX], ids=lambda k: k.value)
def test_a_replayed_batch_is_applied_once_by_transactional_and_opaque_states(kind, tmp_path):
    """`BatchExecutor.run` twice for the same txid (a replay after a crash before the commit):
    transactional and opaque states apply it once, a non-transactional state twice (Storm's
    at-least-once). A replay with other tuples (an opaque spout's) replaces the first attempt
    in an opaque state (keys only the first attempt wrote included); a transactional state keeps
    the first (it trusts the spout to replay the same batch)."""
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["word"], 3, ["a"]))
     .group_by(["word"]).persistent_aggregate(DurableMapState.factory(kind), Count(), ["count"])
     .name("counts"))
    plan = trident_plan(t.build())
    batch = {"s": [[("a",), ("b",), ("a",)]]}

    def counts(executor):
        return dict(executor.states["counts"].items())

    ex = BatchExecutor(plan, {}, location=str(tmp_path / "one"))
    first = ex.run(1, batch)
    replay = ex.run(1, batch)
    assert sorted(r for p in first["counts"] for r in p) == [("a", 2), ("b", 1)]
    twice = {("a",): 4, ("b",): 2}
    once = {("a",): 2, ("b",): 1}
    assert counts(ex) == (twice if kind is NON_TX else once)
    assert sorted(r for p in replay["counts"] for r in p) == sorted(
        (k[0], v) for k, v in counts(ex).items())
    ex.run(2, {"s": [[("b",)]]})
    assert counts(ex)[("b",)] == (3 if kind is NON_TX else 2)
    ex.close()

    ex = BatchExecutor(plan, {}, location=str(tmp_path / "two"))
    ex.run(1, batch)
    ex.run(1, {"s": [[("a",), ("c",)]]})  # the replay of txid 1 differs
    assert counts(ex) == {
        TX: {("a",): 2, ("b",): 1, ("c",): 1},  # a key already at txid 1 is left alone
        # Recomputed from the values before txid 1: "b", which only the first attempt had,
        # is rolled back (OpaqueMap.begin_commit).
        OPAQUE: {("a",): 1, ("c",): 1},
        NON_TX: {("a",): 3, ("b",): 1, ("c",): 1},  # applied again
    }[kind]
    ex.close()


class CountReducer(ReducerAggregator):
    def init(self):
        return 0

    def reduce(self, current, tup):
        return current + 1


class FailOnce(Function):
    """Raises the first time it sees `word` (a marker file remembers it, across processes),
    then passes every tuple on."""

    def __init__(self, word: str, marker: str) -> None:
        self.word, self.marker = word, marker

    def execute(self, tup, collector):
        if tup[0] == self.word and not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError(f"failing once on {self.word!r}")
        collector.emit([True])


def test_a_failed_batch_is_replayed_and_counted_once(runner, tmp_path):
    """An operation after the state updates fails the first attempt of batch 2: the batch is
    replayed (same txid) and the transactional and opaque states count it once, with a
    combiner and with a reducer, grouped and global; a non-transactional state may count it
    twice (at least once), never less."""
    t = TridentTopology()
    words = (t.new_stream("spout1", FixedBatchSpout(["sentence"], 2, *[[s] for s in SENTENCES]))
             .each(["sentence"], Split(), ["word"]))
    grouped = words.group_by(["word"])
    states = {
        "tx": grouped.persistent_aggregate(MemoryMapState.factory(TX), Count(), ["count"]),
        "opaque": grouped.persistent_aggregate(MemoryMapState.factory(OPAQUE), Count(),
                                               ["count"]),
        "reducer": grouped.persistent_aggregate(MemoryMapState.factory(TX), CountReducer(),
                                                ["count"]),
        "nt": grouped.persistent_aggregate(MemoryMapState.factory(NON_TX), Count(), ["count"]),
        "total": words.persistent_aggregate(MemoryMapState.factory(TX), Count(), ["total"]),
    }
    for name, state in states.items():
        state.name(name)
    (states["nt"].new_values_stream()
     .each(["word"], FailOnce("four", str(tmp_path / "failed")), ["ok"]).name("fail-once"))
    result = run(t, runner)

    expected = words_of(SENTENCES)
    assert result.extra["committed"] == [1, 2, 3]
    assert result.extra["failed_attempts"] == 1
    assert any("failing once on 'four'" in str(e.error) for e in result.errors)
    for name in ("tx", "opaque", "reducer"):
        assert _final(result, name) == dict(expected), name
    batch2 = words_of(SENTENCES[2:4])
    assert all(expected[w] <= n <= expected[w] + batch2[w] for w, n in _final(result, "nt").items())
    running = [len(" ".join(SENTENCES[:k]).split(" ")) for k in (2, 4, 5)]
    assert rows(result, "total") == [(n,) for n in running]


def test_state_query_of_a_static_state(runner, tmp_path):
    """`new_static_state`: a state the topology only reads, filled beforehand; MapGet gives
    None for a missing key."""
    factory = DurableMapState.factory(TX, directory=str(tmp_path))
    prefill = factory.make_state("capitals", None)
    prefill.multi_put(1, [("fr",), ("de",)], ["paris", "berlin"])
    prefill.close()
    t = TridentTopology()
    capitals = t.new_static_state(factory, "capitals")
    (t.new_stream("s", Batches(["country"], [("de",), ("it",)], [("fr",)]))
     .state_query(capitals, ["country"], MapGet(), ["capital"]).name("lookup"))
    result = run(t, runner)
    assert rows(result, "lookup") == [("de", "berlin"), ("it", None), ("fr", "paris")]


# ---- Redis Streams spouts -----------------------------------------------------------------

@pytest.mark.parametrize("opaque", [False, True])
def test_redis_streams_spouts_feed_exactly_once_counts(runner, opaque, tmp_path):
    """squall's Redis Streams transactional and opaque spouts as Trident spouts (two streams,
    one partition each): counts in a durable transactional (opaque spout: opaque) map are
    exact although one batch fails once after the state update and is replayed."""
    with start_redis(tmp_path) as r:
        words = [f"w{i % 7}" for i in range(90)]
        for i, w in enumerate(words):
            r.client.xadd(f"words:{i % 2}", {"word": w})
        kind = RedisStreamOpaqueSpout if opaque else RedisStreamTransactionalSpout
        spout = kind(["words:0", "words:1"], Fields("word"), max_batch=10, host=r.host,
                     port=r.port, stop_when_empty=True)
        state = DurableMapState.factory(StateType.OPAQUE if opaque else StateType.TRANSACTIONAL)
        t = TridentTopology()
        counts = (t.new_stream("words", spout).group_by(["word"])
                  .persistent_aggregate(state, Count(), ["count"]).name("counts"))
        (counts.new_values_stream()
         .each(["word"], FailOnce("w3", str(tmp_path / "failed")), ["ok"]).name("after"))
        result = run(t, runner)
        assert result.extra["failed_attempts"] == 1
        assert _final(result, "counts") == dict(Counter(words))
        assert result.extra["batches"] == 5  # 45 entries per stream, 10 per batch


# ---- Storm's spout x state table -----------------------------------------------------------

def _one_state(spout, kind) -> TridentTopology:
    t = TridentTopology()
    (t.new_stream("words", spout).group_by(["word"])
     .persistent_aggregate(MemoryMapState.factory(kind), Count(), ["count"]).name("counts"))
    return t


def test_a_state_its_spout_cannot_give_exactly_once_is_refused(runner):
    """An opaque spout with a transactional state, and a non-transactional BatchSpout with a
    transactional or opaque state, are refused before any batch, naming the state and spout."""
    opaque = MemoryOpaqueSpout({0: [["a"]]}, Fields("word"), 2)
    loose = LooseBatches(["word"], [("a",)])
    for spout, kind, guarantee in ((opaque, TX, "opaque"), (loose, TX, "non-transactional"),
                                   (loose, OPAQUE, "non-transactional")):
        with pytest.raises(InvalidTopologyError) as err:
            run(_one_state(spout, kind), runner)
        message = str(err.value)
        assert f"'counts' is {kind.name}" in message, message
        assert f"spout 'words' is {guarantee}" in message, message
        assert err.value.component == "counts"


PARTS = {0: [["a"], ["b"], ["a"], ["c"], ["a"]], 1: [["b"], ["b"]]}


def _final(result, component: str) -> dict:
    """The last value per key of a state's new-values stream (its value after the run)."""
    return {k: v for k, v in rows(result, component)}


def test_the_allowed_spout_and_state_combinations_count_exactly(runner):
    """Storm's table, the allowed cells: a transactional partitioned spout
    (MemoryTransactionalSpout) with a transactional state, a non-transactional BatchSpout with
    a non-transactional state, an opaque spout with opaque and non-transactional states. Each
    counts every tuple once; the partitioned spouts emit `max_batch` rows per partition and
    batch, without their attempt field."""
    flat = Counter(w for p in PARTS.values() for (w,) in p)
    t = TridentTopology()
    tx = t.new_stream("tx", MemoryTransactionalSpout(PARTS, Fields("word"), max_batch=2))
    (tx.group_by(["word"])
     .persistent_aggregate(MemoryMapState.factory(TX), Count(), ["count"]).name("tx-counts"))
    tx.aggregate(Count(), ["n"]).name("tx-batch-sizes")
    (t.new_stream("loose", LooseBatches(["word"], [("a",), ("a",)], [("b",)]))
     .group_by(["word"]).persistent_aggregate(MemoryMapState.factory(NON_TX), Count(), ["count"])
     .name("loose-counts"))
    result = run(t, runner)
    assert result.topology.components["tx"].streams["default"].fields.to_list() == ["word"]
    assert sorted(rows(result, "tx")) == sorted((w,) for p in PARTS.values() for (w,) in p)
    assert rows(result, "tx-batch-sizes") == [(4,), (2,), (1,)]
    assert _final(result, "tx-counts") == dict(flat)
    assert sorted(rows(result, "loose-counts")) == [("a", 2), ("b", 1)]

    t = TridentTopology()
    op = t.new_stream("opaque", MemoryOpaqueSpout(PARTS, Fields("word"), 2))
    op.aggregate(Count(), ["n"]).name("op-batch-sizes")
    words = op.group_by(["word"])
    words.persistent_aggregate(MemoryMapState.factory(OPAQUE), Count(), ["count"]).name("op")
    words.persistent_aggregate(MemoryMapState.factory(NON_TX), Count(), ["count"]).name("op-nt")
    result = run(t, runner)
    assert rows(result, "op-batch-sizes") == [(4,), (2,), (1,)]
    assert _final(result, "op") == _final(result, "op-nt") == dict(flat)


def test_two_partitioned_spouts_in_one_topology(runner):
    t = TridentTopology()
    (t.new_stream("tx", MemoryTransactionalSpout(PARTS, Fields("word"), max_batch=2))
     .aggregate(Count(), ["n"]).name("tx-n"))
    (t.new_stream("opaque", MemoryOpaqueSpout(PARTS, Fields("word"), 2))
     .aggregate(Count(), ["n"]).name("op-n"))
    result = run(t, runner, {MAX_ATTEMPTS: 1})
    assert rows(result, "tx-n") == rows(result, "op-n") == [(4,), (2,), (1,)]


# ---- batch functions -------------------------------------------------------------------------

class ArrowLength(BatchFunction):
    """One output row per input row (no ROW column)."""

    def execute_batch(self, table):
        return pa.table({"len": pc.utf8_length(table["word"])})


class ArrowSplit(BatchFunction):
    """Several output rows per input row, none for an empty sentence (ROW column)."""

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        flat = pc.list_flatten(words)
        parents = pc.list_parent_indices(words)
        keep = pc.not_equal(flat, "")
        return pa.table({"word": pc.filter(flat, keep), ROW: pc.filter(parents, keep)})


class PandasUpper(BatchFunction):
    format = "pandas"

    def execute_batch(self, df):
        assert isinstance(df, pd.DataFrame)
        return pd.DataFrame({"upper": df["word"].str.upper()})


class PandasLongWordsTwice(BatchFunction):
    """Each word of more than three letters twice, shorter ones not at all (ROW column)."""

    format = "pandas"

    def execute_batch(self, df):
        long = df.index[df["word"].str.len() > 3]
        rows = [i for i in long for _ in range(2)]
        return pd.DataFrame({"copy": [k % 2 for k in range(len(rows))], ROW: rows})


class Initial(Function):
    def execute(self, tup, collector):
        collector.emit([tup["word"][:1]])


def test_batch_functions_on_arrow_and_pandas_with_and_without_row(runner):
    """`each` with a BatchFunction appends its columns like a Function: without a ROW column one
    output row per input row; with one, output row i belongs to input row ROW[i] (several or
    none). Arrow and pandas formats; mixed with per-tuple functions in one chain."""
    sentences = [[("the cow jumped",), ("",), ("over the moon",)], [("a bird",)]]
    t = TridentTopology()
    words = (t.new_stream("s", Batches(["sentence"], *sentences))
             .each(["sentence"], ArrowSplit(), ["word"]).name("arrow-row"))
    words.each(["word"], ArrowLength(), ["len"]).name("arrow")
    words.each(["word"], PandasUpper(), ["upper"]).name("pandas")
    words.each(["word"], PandasLongWordsTwice(), ["copy"]).name("pandas-row")
    # per-tuple -> batch -> per-tuple
    (t.new_stream("t", Batches(["sentence"], *sentences))
     .each(["sentence"], Split(), ["word"])
     .each(["word"], ArrowLength(), ["len"])
     .each(["word"], Initial(), ["initial"]).name("mixed"))
    result = run(t, runner)

    pairs = [(s, w) for batch in sentences for (s,) in batch for w in s.split(" ") if w]
    assert rows(result, "arrow-row") == pairs
    assert rows(result, "arrow") == [(s, w, len(w)) for s, w in pairs]
    assert rows(result, "pandas") == [(s, w, w.upper()) for s, w in pairs]
    assert rows(result, "pandas-row") == [
        (s, w, k) for s, w in pairs if len(w) > 3 for k in (0, 1)]
    # Split keeps the empty sentence's one empty word, ArrowSplit drops it.
    all_words = [(s, w) for batch in sentences for (s,) in batch for w in s.split(" ")]
    assert rows(result, "mixed") == [(s, w, len(w), w[:1]) for s, w in all_words]


class TypedSplit(BatchFunction):
    """Declares its outputs' types: on Spark each travels as one typed column."""

    output_types: ClassVar = {"word": str, "length": int}

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        flat = pc.list_flatten(words)
        return {"word": flat, "length": pc.utf8_length(flat), ROW: pc.list_parent_indices(words)}


class MisTyped(BatchFunction):
    """Declares an int but returns strings."""

    output_types: ClassVar = {"word": int}

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}


def test_declared_output_types_give_the_same_values_and_are_checked(runner):
    """A BatchFunction's `output_types`: grouped and summed (on Spark, as typed columns in the
    worker's partial aggregation and the JVM's), the values are those of the local runner; a
    value of another type fails the batch naming the operation and the field on both runners."""
    sentences = [[("the cow jumped",), ("over the moon",)], [("the end",)]]
    t = TridentTopology()
    words = (t.new_stream("s", Batches(["sentence"], *sentences))
             .each(["sentence"], TypedSplit(), ["word", "length"]))
    words.group_by(["word"]).aggregate(["length"], Sum(), ["letters"]).name("letters")
    words.group_by(["length"]).aggregate(Count(), ["n"]).name("by-length")
    result = run(t, runner)
    per_batch = [Counter(w for (s,) in batch for w in s.split(" ")) for batch in sentences]
    assert sorted(rows(result, "letters")) == sorted(
        (w, len(w) * n) for c in per_batch for w, n in c.items())
    assert sorted(rows(result, "by-length")) == sorted(
        (k, n) for c in per_batch for k, n in Counter(len(w) for w in c.elements()).items())
    assert all(type(k) is int and type(n) is int for k, n in rows(result, "by-length"))

    t = TridentTopology()
    (t.new_stream("s", Batches(["sentence"], *sentences))
     .each(["sentence"], MisTyped(), ["word"]).group_by(["word"]).aggregate(Count(), ["n"])
     .name("counts"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 1})
    assert "MisTyped.execute_batch: field 'word' is declared int but holds a str value" \
        in str(err.value)


class NoColumn(BatchFunction):
    """Returns a column of another name than the one it declares."""

    def execute_batch(self, table):
        return {"size": pc.utf8_length(table["sentence"])}


class Shorter(BatchFunction):
    """Returns fewer rows than its input, without a ROW column naming their input rows."""

    def execute_batch(self, table):
        return {"length": pc.utf8_length(table["sentence"]).slice(1)}


@pytest.mark.parametrize("op, message", [
    (NoColumn(), "NoColumn.execute_batch returned no column 'length' (needs ['length'])"),
    (Shorter(), "Shorter.execute_batch returned 1 rows for 2 input rows; add a '$row' column "
                "naming each output row's input row when the counts differ")],
    ids=["missing-column", "row-count"])
def test_a_batch_functions_result_of_the_wrong_shape_fails_naming_it(runner, op, message):
    """Both runners check a BatchFunction's result the same way: every declared output column,
    and one row per input row unless a ROW column maps them; the batch fails naming the
    operation's component."""
    t = TridentTopology()
    (t.new_stream("s", Batches(["sentence"], [("the cow",), ("a moon",)]))
     .each(["sentence"], op, ["length"]).name("lengths")
     .group_by(["length"]).aggregate(Count(), ["n"]).name("counts"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 1})
    assert message in str(err.value)
    assert err.value.component == "lengths"


class TypedSplitRows(Function):
    """A per-tuple split that declares its outputs' types."""

    output_types: ClassVar = {"word": str, "length": int}

    def execute(self, tup, collector):
        for w in tup[0].split(" "):
            collector.emit((w, len(w)))


class MisTypedRows(Function):
    """Declares an int, emits a string for words starting with "m"."""

    output_types: ClassVar = {"word": int}

    def execute(self, tup, collector):
        for w in tup[0].split(" "):
            collector.emit((w if w.startswith("m") else len(w),))


def test_a_per_tuple_functions_declared_output_types_are_kept_and_checked(runner):
    """A per-tuple Function's `output_types`: the values are those of the local runner, whether
    the input tuple's fields go on with the emitted values (`sentence` read later) or not; a
    value of another type fails the batch naming the function and the field."""
    sentences = [[("the cow jumped",), ("over the moon",)], [("the end",)]]
    t = TridentTopology()
    words = (t.new_stream("s", Batches(["sentence"], *sentences))
             .each(["sentence"], TypedSplitRows(), ["word", "length"]))
    words.group_by(["word"]).aggregate(["length"], Sum(), ["letters"]).name("letters")
    words.group_by(["sentence", "length"]).aggregate(Count(), ["n"]).name("per-sentence")
    result = run(t, runner)
    per_batch = [Counter(w for (s,) in batch for w in s.split(" ")) for batch in sentences]
    assert sorted(rows(result, "letters")) == sorted(
        (w, len(w) * n) for c in per_batch for w, n in c.items())
    assert sorted(rows(result, "per-sentence")) == sorted(
        (s, k, n) for batch in sentences for (s,) in batch
        for k, n in Counter(len(w) for w in s.split(" ")).items())
    assert all(type(w) is str and type(n) is int for w, n in rows(result, "letters"))

    t = TridentTopology()
    (t.new_stream("s", Batches(["sentence"], *sentences))
     .each(["sentence"], MisTypedRows(), ["word"]).group_by(["word"]).aggregate(Count(), ["n"])
     .name("counts"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 1})
    assert "MisTypedRows.execute: field 'word' is declared int but holds a str value ('moon')" \
        in str(err.value)


class Emits(Function):
    """Emits the values listed for its input: `(value,)` tuples, lists, or a generator."""

    def execute(self, tup, collector):
        for i, v in enumerate(tup[0]):
            collector.emit((v,) if i % 3 == 0 else [v] if i % 3 == 1 else iter([v]))


# Values of one Python type per batch (Arrow columns on Spark), then mixed or beyond a typed
# column (Python values). No two values are equal across types (1 == 1.0 would be one key in
# a dict, two in a typed column).
EMITTED = [
    [(["a", "b", "a"],), (["c", None],)],
    [([7, 2.5, 7],), ([None, 8],)],
    [([2 ** 70, 5, 2 ** 70],)],
    [([(1, 2), b"z", "q"],), ([(1, 2), -(2 ** 63)],)],
    [([2 ** 63 - 1, 3, None],)],
    [([0.5, float("inf")],)],
]


@pytest.mark.parametrize("partial", [True, False])
def test_a_per_tuple_functions_values_keep_their_types_through_an_aggregation(runner, partial):
    """A per-tuple Function whose input nothing later reads (on Spark its emitted values travel
    as Arrow columns when a batch's values share one native type, as Python values
    otherwise): grouped and counted, every value comes back as it went in, with or without
    the worker's partial aggregation; emits of any sequence or iterable count alike."""
    t = TridentTopology()
    (t.new_stream("s", Batches(["values"], *EMITTED)).each(["values"], Emits(), ["v"])
     .group_by(["v"]).aggregate(Count(), ["n"]).name("counts"))
    result = run(t, runner, {"squall.trident.spark.partial.aggregation": partial})
    want = [(v, n) for batch in EMITTED
            for v, n in Counter(v for (vs,) in batch for v in vs).items()]
    got = rows(result, "counts")
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    assert Counter(type(v) for v, _ in got) == Counter(type(v) for v, _ in want)


class WrongWidth(Function):
    def execute(self, tup, collector):
        for w in tup[0].split(" "):
            collector.emit([w, len(w)] if w == "moon" else [w])


def test_an_emit_of_the_wrong_width_before_an_aggregation_names_the_operation(runner):
    t = TridentTopology()
    (t.new_stream("s", Batches(["sentence"], [(s,) for s in SENTENCES]))
     .each(["sentence"], WrongWidth(), ["word"]).name("split")
     .group_by(["word"]).aggregate(Count(), ["n"]).name("counts"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 1})
    assert "'split' emitted 2 values ['moon', 4] but declares 1 output fields ['word']" \
        in str(err.value)


# ---- validation ----------------------------------------------------------------------------------

def _stream():
    t = TridentTopology()
    return t, t.new_stream("s", FixedBatchSpout(["sentence", "n"], 1, ["a b", 1]))


def test_unknown_input_fields_are_refused_naming_the_stream_fields():
    _, s = _stream()
    with pytest.raises(InvalidTopologyError, match=r"no field 'words'.*\['sentence', 'n'\]"):
        s.each(["words"], Split(), ["word"])
    with pytest.raises(InvalidTopologyError, match="no field 'x'"):
        s.group_by(["x"])
    with pytest.raises(InvalidTopologyError, match="no field 'x'"):
        s.project(["sentence", "x"])
    with pytest.raises(InvalidTopologyError, match="no field 'x'"):
        s.aggregate(["x"], Sum(), ["sum"])


def test_field_names_starting_with_a_dollar_are_refused():
    """'$' starts squall's own column names on Spark ('$partial', '$v#i')."""
    _, s = _stream()
    with pytest.raises(InvalidTopologyError, match=r"field names starting with '\$' are "
                                                   r"reserved.*rename '\$partial'"):
        s.each(["sentence"], Split(), ["$partial"])
    with pytest.raises(InvalidTopologyError, match=r"rename '\$n'"):
        s.group_by(["sentence"]).aggregate(Count(), ["$n"])
    with pytest.raises(InvalidTopologyError, match=r"new_stream\('d'\): the spout's fields"):
        TridentTopology().new_stream("d", FixedBatchSpout(["$v"], 1, [1]))


def test_declared_output_types_are_checked_when_the_topology_is_built():
    _, s = _stream()

    class Undeclared(TypedSplit):
        output_types: ClassVar = {"words": str}

    class Bytes(TypedSplit):
        output_types: ClassVar = {"word": bytes}

    with pytest.raises(InvalidTopologyError, match=r"names 'words', which is not one of its "
                                                   r"output fields \['word', 'length'\]"):
        s.each(["sentence"], Undeclared(), ["word", "length"])
    with pytest.raises(InvalidTopologyError, match=r"output_types\['word'\] is <class 'bytes'>; "
                                                   "declare str, int or float"):
        s.each(["sentence"], Bytes(), ["word", "length"])

    class UndeclaredRows(TypedSplitRows):
        output_types: ClassVar = {"words": str}

    with pytest.raises(InvalidTopologyError, match=r"UndeclaredRows.output_types names 'words'"):
        s.each(["sentence"], UndeclaredRows(), ["word", "length"])


def test_output_fields_that_clash_are_refused():
    t, s = _stream()
    with pytest.raises(InvalidTopologyError, match="output field 'n' is already a field"):
        s.each(["sentence"], Split(), ["n"])
    with pytest.raises(InvalidTopologyError, match="output field 'sentence' is already a field"):
        s.group_by(["sentence"]).aggregate(Count(), ["sentence"])
    with pytest.raises(InvalidTopologyError, match="name a field twice"):
        s.each(["sentence"], Split(), ["w", "w"])
    counts = s.group_by(["sentence"]).persistent_aggregate(MemoryMapState.factory(), Count(),
                                                           ["count"])
    with pytest.raises(InvalidTopologyError, match="output field 'n' is already a field"):
        s.state_query(counts, ["sentence"], MapGet(), ["n"])
    with pytest.raises(InvalidTopologyError, match="the output has 2 fields"):
        t.join(s, ["sentence"], s.project(["sentence"]), ["sentence"], ["sentence", "n", "x"])


def test_operations_of_the_wrong_type_are_refused():
    _, s = _stream()
    with pytest.raises(InvalidTopologyError, match="must be a Function or Filter or "
                                                   "BatchFunction, got Count"):
        s.each(["sentence"], Count(), ["c"])
    with pytest.raises(InvalidTopologyError, match="must be a MapFunction, got Split"):
        s.map(Split())
    with pytest.raises(InvalidTopologyError, match="must be a CombinerAggregator or "
                                                   "ReducerAggregator or Aggregator, got Split"):
        s.group_by(["sentence"]).aggregate(Split(), ["x"])
    with pytest.raises(InvalidTopologyError, match="Split needs its output fields"):
        s.each(["sentence"], Split())
    with pytest.raises(InvalidTopologyError, match="a Filter emits no fields"):
        s.each(["sentence"], FilterNull(), ["x"])
    with pytest.raises(InvalidTopologyError, match="needs a state factory"):
        s.group_by(["sentence"]).persistent_aggregate(object(), Count(), ["c"])
    with pytest.raises(InvalidTopologyError, match=r"the spout must be a squall\.trident"):
        TridentTopology().new_stream("x", object())


def test_persistent_aggregate_needs_a_combiner_or_reducer():
    _, s = _stream()
    with pytest.raises(InvalidTopologyError,
                       match="updated by a CombinerAggregator or a ReducerAggregator, got First"):
        s.group_by(["sentence"]).persistent_aggregate(MemoryMapState.factory(), First(),
                                                      ["first"])
    with pytest.raises(InvalidTopologyError, match="one function field"):
        s.group_by(["sentence"]).persistent_aggregate(MemoryMapState.factory(), Count(),
                                                      ["a", "b"])


class TwoValues(Function):
    def execute(self, tup, collector):
        collector.emit([tup[0], "extra"])


class Boom(Function):
    def execute(self, tup, collector):
        raise ValueError(f"cannot handle {tup[0]!r}")


def test_operation_errors_name_the_component(runner):
    """A function emitting more values than its output fields, and a function that raises
    (with `squall.trident.max.attempts` 2), fail the run with a SquallError naming the
    operation's component."""
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence"], 1, ["a b"]))
     .each(["sentence"], TwoValues(), ["word"]).name("two-values"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 1})
    assert err.value.component == "two-values"
    assert "emitted 2 values" in str(err.value)

    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence"], 1, ["a b"]))
     .each(["sentence"], Boom(), ["word"]).name("boom"))
    with pytest.raises(SquallError) as err:
        run(t, runner, {MAX_ATTEMPTS: 2})
    assert err.value.component == "boom"
    assert "failed 2 attempts" in str(err.value)
    assert "cannot handle 'a b'" in str(err.value)


# ---- complete_topology -------------------------------------------------------------------------

def test_complete_topology_mocks_a_trident_spout_as_one_batch():
    t = TridentTopology()
    (t.new_stream("sentences", FixedBatchSpout(["sentence"], 1, ["x y"], ["z"], cycle=True))
     .each(["sentence"], Split(), ["word"]).name("split")
     .aggregate(Count(), ["n"]).name("count"))
    result = complete_topology(
        t.build(), mocked_sources=MockedSources({"sentences": [["a b"], ["c"]]}))
    assert result.tuples("split") == [["a b", "a"], ["a b", "b"], ["c", "c"]]
    assert result.tuples("count") == [[3]]
    assert result.extra["committed"] == [1]
    empty = complete_topology(t.build(), mocked_sources=MockedSources({"sentences": []}))
    assert empty.extra["committed"] == [] and empty.tuples("count") == []  # no batch at all
    with pytest.raises(KeyError, match="not a spout"):
        complete_topology(t.build(), mocked_sources=MockedSources({"split": [["a"]]}))


def test_complete_topology_gives_a_failing_trident_batch_ten_attempts():
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence"], 1, ["a b"]))
     .each(["sentence"], Boom(), ["word"]).name("boom"))
    with pytest.raises(SquallError, match=r"transaction 1 failed 10 attempts.*cannot handle"):
        complete_topology(t.build())


def test_complete_topology_of_an_endless_trident_spout_times_out():
    from squall.testing import CompleteTopologyTimeout

    t = TridentTopology()
    t.new_stream("forever", FixedBatchSpout(["x"], 1, [1], cycle=True)).name("forever")
    with pytest.raises(CompleteTopologyTimeout, match=r"spouts not exhausted: \['forever'\]"):
        complete_topology(t.build(), max_time_ms=5_000)


# ---- the examples, through the CLI -----------------------------------------------------------

def _squall_run(target: str, runner: str, ckpt: Path) -> subprocess.CompletedProcess:
    # A batch that keeps failing fails the run (instead of being replayed for ever).
    args = [sys.executable, "-m", "squall.cli.main", "run", target, "--runner", runner,
            "--checkpoint", str(ckpt), "--progress-every", "0", "-c", f"{MAX_ATTEMPTS}=3"]
    if runner == "spark":
        args += ["-c", "spark.master=local[2]"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _printed(proc: subprocess.CompletedProcess, prefix: str) -> list[str]:
    # Operations print on the runner's workers: Spark sends a Python worker's stdout to stderr.
    return [line for line in (proc.stdout + "\n" + proc.stderr).splitlines()
            if line.startswith(prefix)]


# On Spark in CI's second run (`extended`). The default run keeps on Spark: the reach example
# through the CLI (below: a Trident topology's state and output from `squall run`), this
# example through `squall submit` (test_cli.py) and a word count's state in process:
# test_word_count_state_new_values_and_query_equal_a_dict_count.
@pytest.mark.runners(spark_session=False)
@pytest.mark.parametrize("runner", ["local", pytest.param(
    "spark", marks=[pytest.mark.spark, pytest.mark.extended])], indirect=True)
def test_trident_wordcount_example_through_the_cli(runner, tmp_path):
    wc = load_example("trident_wordcount")
    proc = _squall_run("examples/trident_wordcount.py:topology", runner, tmp_path / "ckpt")
    expected_counts = words_of(wc.SENTENCES)
    assert read_state(DurableMapState.factory(TX), "word-counts", tmp_path / "ckpt") == {
        (w,): c for w, c in expected_counts.items()}
    assert _printed(proc, "trident_wordcount:") == wc.expected_lines()
    assert wc.expected_lines() == [f"trident_wordcount: 'cat the dog jumped' -> {n}"
                                   for n in (0, 5, 6)]


@pytest.mark.runners(spark_session=False)
def test_trident_reach_example_through_the_cli(runner, tmp_path):
    reach = load_example("trident_reach")
    proc = _squall_run("examples/trident_reach.py:topology", runner, tmp_path / "ckpt")
    expected = reach.expected_reach()
    assert read_state(DurableMapState.factory(TX), "reach", tmp_path / "ckpt") == {
        (url,): n for url, n in expected[-1].items()}
    printed = _printed(proc, "trident_reach:")
    assert sorted(printed) == sorted(reach.expected_lines())
    assert printed.count("trident_reach: foo.com/blog/1 -> 16") == 2  # Storm's answer
    assert "trident_reach: tech.backtype.com/blog/123 -> 11" in printed


@pytest.mark.parametrize("partial", [True, False])
def test_a_user_combiner_aggregates_with_or_without_partial_aggregation(runner, partial):
    """A user's CombinerAggregator per group, and into a map state, with the worker's partial
    aggregation on or off (`squall.trident.spark.partial.aggregation`): the same values."""
    t = TridentTopology()
    g = t.new_stream("s", Batches(["k", "v"], *GROUPED_DATA)).group_by(["k"])
    g.aggregate(["v"], SumOfSquares(), ["sq"]).name("squares")
    state = g.persistent_aggregate(MemoryMapState.factory(), ["v"], SumOfSquares(), ["sq"])
    state.new_values_stream().name("running")
    result = run(t, runner, {"squall.trident.spark.partial.aggregation": partial})
    per_batch = [(b, k, sum(v * v for kk, v in batch if kk == k))
                 for b, batch in enumerate(GROUPED_DATA, 1) for k in {k for k, _ in batch}]
    assert sorted(rows(result, "squares")) == sorted((k, sq) for _, k, sq in per_batch)
    assert sorted(rows(result, "running")) == [("x", 34), ("y", 1), ("y", 62), ("z", 4)]


def test_a_value_of_another_type_names_the_operation_field_and_value(runner):
    """A string price among numbers: the aggregation's TypeError names the operation, the
    field and the value, on both runners (Spark: raised in the worker's partial aggregation)."""
    from squall.errors import TransactionFailedError
    from squall.trident import Max

    t = TridentTopology()
    (t.new_stream("bids", FixedBatchSpout(["item", "price"], 3, ["a", 10], ["a", "12.50"],
                                          ["b", 3], cycle=False))
     .group_by(["item"]).aggregate(["price"], Max(), ["max"]).name("max"))
    with pytest.raises(TransactionFailedError) as failed:
        complete_topology(t.build(), {"squall.trident.max.attempts": 1}, runner=runner)
    assert failed.value.component == "max"
    assert ("Trident operation group_aggregate failed on batch 1: TypeError: '>' not "
            "supported between instances of 'str' and 'int'; field 'price' holds values of "
            "different types (number and str: '12.50'); convert it to one type before this "
            "operation") in failed.value.message


def test_every_operation_counts_what_it_executed_and_emitted(runner, tmp_path):
    """Storm's TridentWordCount: every operation's executed and emitted counts, the ones Spark
    runs in its own jobs (a partition_by, a state query) included, as the local runner counts
    them: a tuple per query word goes through the repartition into the state query."""
    wc = load_example("trident_wordcount")
    top, conf = wc.topology()
    result = squall.run(top, conf, runner=runner, checkpoint_location=str(tmp_path / "ckpt"))
    words = sum(len(s.split(" ")) for s in wc.SENTENCES)
    queried = len(wc.QUERY.split(" ")) * wc.QUERY_BATCHES
    counts = {cid: (s.executed, s.emitted) for cid, s in result.stats.items()
              if cid.startswith("b-")}
    assert counts == {"b-1-each": (len(wc.SENTENCES), words),
                      "b-4-each": (wc.QUERY_BATCHES, queried),
                      "b-5-partition_by": (queried, queried),
                      "b-6-state_query": (queried, queried),
                      "b-7-filter": (queried, counts["b-7-filter"][1])}
    assert result.errors == []
