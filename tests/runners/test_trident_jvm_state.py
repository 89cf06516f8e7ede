"""Built-in aggregates into a partitioned state, computed by Spark's JVM: `Count` and integer
`Sum`s keyed by typed columns are routed to the task of their state partition by Spark's own
`repartition` (a key's partition is Spark's hash of its fields), grouped and aggregated in the
JVM, and applied by the tasks holding the partitions (`trident_state.ApplyColumns`). Both
runners give the same state, key by key, and each partition's store holds exactly its keys.
A `state_query` of such a state reads it in the tasks too (`trident_query`), before the
batch's update."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.state_kills import KillsAWorker

import squall
from squall.runtime.spark.trident import state as ts
from squall.testing import complete_topology, simulated_time
from squall.trident import Count, FileBatchSpout, MapGet, QueryFunction, Sum, TridentTopology
from squall.trident.state import DurableMapState, StateType
from squall.trident.state.partitioned import PARTITIONS_KEY, partition_indexes

STRINGS = ["", "a", "k1", "é", "日本語", "x" * 255, "x" * 256, "y" * 300, "z" * 4000, None]
INTS = [0, 1, 255, 256, 65535, 65536, -1, -256, -(1 << 31), (1 << 31) - 1, 1 << 31,
        -(1 << 31) - 1, (1 << 39) - 1, 1 << 39, -(1 << 39), -(1 << 39) - 1, 1 << 47,
        -(1 << 47) - 1, 1 << 55, -(1 << 55) - 1, (1 << 63) - 1, -(1 << 63), None]


@pytest.mark.spark
def test_spark_places_every_key_in_the_partition_python_computes(spark_session):
    """Spark's `hash` of the key columns (and `repartition` by them) against
    `partition_indexes`, for every width of string and integer, nulls, alone and in tuples."""
    from pyspark.sql import functions as F

    rows = [(s, i) for s in STRINGS for i in INTS]
    df = spark_session.createDataFrame(rows, "`k#s` string, `n#i` bigint")
    shapes = {1: ["k#s"], 2: ["k#s", "n#i"], 3: ["n#i", "n#i", "k#s"], 5: ["n#i"] * 5}
    got = df.select("`k#s`", "`n#i`", *(F.expr(ts.partition_sql(c, 7)).alias(f"p{size}")
                                         for size, c in shapes.items())).toArrow().to_pylist()
    for size, columns in shapes.items():
        keys = [tuple(r[c] for c in columns) for r in got]
        assert [r[f"p{size}"] for r in got] == partition_indexes(keys, 7), columns
    placed = df.repartition(7, "`k#s`", "`n#i`").select(
        F.spark_partition_id().alias("task"), "`k#s`", "`n#i`").toArrow().to_pylist()
    assert [r["task"] for r in placed] == partition_indexes(
        [(r["k#s"], r["n#i"]) for r in placed], 7)


def write_files(root: Path) -> list[tuple[str, int, int]]:
    """Four parquet files of (user, region, amount); the rows, in order."""
    root.mkdir()
    rows = [(f"u{(i * 7) % 41}", (i * 13) % 5 - 2, i % 17) for i in range(800)]
    for f in range(4):
        part = rows[f * 200:(f + 1) * 200]
        pq.write_table(pa.table({"user": [r[0] for r in part],
                                 "region": pa.array([r[1] for r in part], pa.int64()),
                                 "amount": pa.array([r[2] for r in part], pa.int64())}),
                       str(root / f"part-{f:05d}.parquet"))
    return rows


def jvm_state_jobs(result) -> list[tuple[str, ...]]:
    """The state jobs the Spark runner ran by its JVM path (Spark's aggregation, applied by
    `ApplyColumns`), in order: the operations each applied (none on the local runner)."""
    return [tuple(j["operations"]) for j in result.extra.get("spark_jobs", [])
            if j["kind"] == "state" and j["route"] == "jvm"]


def test_count_and_sum_of_typed_columns_match_on_both_runners(runner, tmp_path):
    rows = write_files(tmp_path / "in")
    factories = {name: DurableMapState.factory(kind) for name, kind in (
        ("counts", StateType.TRANSACTIONAL), ("sums", StateType.OPAQUE),
        ("plain", StateType.NON_TRANSACTIONAL))}
    t = TridentTopology()
    keyed = t.new_stream("sales", FileBatchSpout(str(tmp_path / "in"),
                                                 ["user", "region", "amount"])) \
        .group_by(["user", "region"])
    keyed.persistent_aggregate(factories["counts"], Count(), ["n"]).name("counts")
    keyed.persistent_aggregate(factories["sums"], ["amount"], Sum(), ["total"]).name("sums")
    keyed.persistent_aggregate(factories["plain"], ["amount"], Sum(), ["total"]).name("plain")
    ckpt = tmp_path / "ckpt"
    with simulated_time():
        result = squall.run(t.build(), {PARTITIONS_KEY: 5}, runner=runner,
                            checkpoint_location=str(ckpt))
    assert result.extra["committed"] == [1, 2, 3, 4]
    counts = Counter((u, r) for u, r, _ in rows)
    sums: Counter = Counter()
    for u, r, a in rows:
        sums[(u, r)] += a
    for name, want in (("counts", counts), ("sums", sums), ("plain", sums)):
        state = factories[name].make_state(name, str(ckpt))
        try:
            assert len(state.parts) == 5
            for index, part in enumerate(state.parts):
                assert set(partition_indexes(list(dict(part.items())), 5)) <= {index}
            assert dict(state.items()) == dict(want), name
        finally:
            state.close()
    # On Spark the three aggregations ran as one JVM job per transaction.
    assert jvm_state_jobs(result) == ([("counts", "plain", "sums")] * 4 if runner == "spark"
                                      else [])


def test_a_sum_over_a_none_fails_its_batch_on_both_runners(runner, tmp_path):
    """`1 + None` fails the batch (a key's only value None would be kept as its partial)."""
    root = tmp_path / "in"
    root.mkdir()
    pq.write_table(pa.table({"user": ["a", "b", "a"],
                             "amount": pa.array([1, 3, None], pa.int64())}),
                   str(root / "part-00000.parquet"))
    t = TridentTopology()
    t.new_stream("sales", FileBatchSpout(str(root), ["user", "amount"])) \
        .group_by(["user"]) \
        .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), ["amount"],
                              Sum(), ["total"]).name("sums")
    with simulated_time(), pytest.raises(squall.SquallError, match="sums"):
        squall.run(t.build(), {"squall.trident.max.attempts": 1}, runner=runner,
                   checkpoint_location=str(tmp_path / "ckpt"))


@pytest.mark.runners("spark")
@pytest.mark.parametrize("state_type", [StateType.TRANSACTIONAL, StateType.OPAQUE])
def test_a_worker_killed_after_its_partition_write_counts_once(runner, tmp_path, state_type):
    """SIGKILL of the Python worker applying a partition in the JVM path, after its write and
    before its task ends: the transaction is applied again (a task retry or a new attempt of
    the txid), and every key counts once."""
    rows = write_files(tmp_path / "in")
    (index,) = partition_indexes([("u0", rows[0][1])], 5)
    killers = {"counts": KillsAWorker(state_type, marker=str(tmp_path / "killed"), index=index,
                                      txid=2),
               "sums": KillsAWorker(state_type, marker=str(tmp_path / "killed-sums"),
                                    index=index, txid=3)}
    t = TridentTopology()
    keyed = t.new_stream("sales", FileBatchSpout(str(tmp_path / "in"),
                                                 ["user", "region", "amount"])) \
        .group_by(["user", "region"])
    keyed.persistent_aggregate(killers["counts"], Count(), ["n"]).name("counts")
    keyed.persistent_aggregate(killers["sums"], ["amount"], Sum(), ["total"]).name("sums")
    ckpt = tmp_path / "ckpt"
    with simulated_time():
        result = squall.run(t.build(), {PARTITIONS_KEY: 5}, runner=runner,
                            checkpoint_location=str(ckpt))
    assert int((tmp_path / "killed").read_text()) != os.getpid()  # a worker died, not the driver
    assert (tmp_path / "killed-sums").exists()
    assert result.extra["committed"] == [1, 2, 3, 4]
    sums: Counter = Counter()
    for u, r, a in rows:
        sums[(u, r)] += a
    plain = DurableMapState.factory(state_type)
    assert dict(plain.make_state("counts", str(ckpt)).items()) == dict(
        Counter((u, r) for u, r, _ in rows))
    assert dict(plain.make_state("sums", str(ckpt)).items()) == dict(sums)


class WhereRead(MapGet):
    """MapGet, with the process that read the state."""

    def execute(self, tup, result, collector):
        collector.emit([result, os.getpid()])


class ReadsOneKey(QueryFunction):
    """The count of one key (of one state partition) for every tuple, whichever task reads."""

    def batch_retrieve(self, state, tuples):
        return state.multi_get([("u0", -2)] * len(tuples))

    def execute(self, tup, result, collector):
        collector.emit([result])


def query_topology(root: Path, factory, query=None, out=("n", "pid")):
    """Counts per (user, region) of the files under `root`, queried by the same stream; the
    topology and its state."""
    t = TridentTopology()
    sales = t.new_stream("sales", FileBatchSpout(str(root), ["user", "region", "amount"]))
    counts = sales.group_by(["user", "region"]).persistent_aggregate(
        factory, Count(), ["n"]).name("counts")
    sales.state_query(counts, ["user", "region"], query or WhereRead(), list(out)).name("lookup")
    return t, counts


@pytest.mark.parametrize("state_type", [StateType.TRANSACTIONAL, StateType.OPAQUE])
def test_a_state_query_reads_in_the_tasks_before_the_update(runner, tmp_path, state_type):
    """A query of the stream that updates the state sees each key as of the batch before, on
    both runners; on Spark it reads in the Python workers (not the driver) and the update
    still runs in the tasks (the JVM path), after the query."""
    rows = write_files(tmp_path / "in")
    factory = DurableMapState.factory(state_type, directory=str(tmp_path / "states"))
    t, counts = query_topology(tmp_path / "in", factory)
    t.new_stream("again", FileBatchSpout(str(tmp_path / "in"), ["user", "region", "amount"])) \
        .state_query(counts, ["user", "region"], ReadsOneKey(), ["u0"]).name("one-key")
    with simulated_time():
        result = complete_topology(t.build(), {PARTITIONS_KEY: 5}, runner=runner)
    assert result.extra["committed"] == [1, 2, 3, 4]
    before: Counter = Counter()
    want, one_key = [], []
    for b in range(4):
        batch = rows[b * 200:(b + 1) * 200]
        want += [(u, r, a, before[(u, r)] or None) for u, r, a in batch]
        one_key += [(u, r, a, before[("u0", -2)] or None) for u, r, a in batch]
        before.update((u, r) for u, r, _ in batch)
    got = [tuple(r) for r in result.tuples("lookup")]
    assert sorted(r[:4] for r in got) == sorted(want)
    pids = {r[4] for r in got}
    assert (pids == {os.getpid()}) == (runner == "local"), pids
    assert sorted(tuple(r) for r in result.tuples("one-key")) == sorted(one_key)
    assert jvm_state_jobs(result) == ([("counts",)] * 4 if runner == "spark" else [])
    state = factory.make_state("counts", None)
    try:
        assert dict(state.items()) == dict(before)
    finally:
        state.close()


class Writes(QueryFunction):
    def batch_retrieve(self, state, tuples):
        state.multi_put([("x", 0)], [1])
        return [None] * len(tuples)

    def execute(self, tup, result, collector):
        collector.emit([result])


def test_a_query_that_writes_its_state_fails_on_both_runners(runner, tmp_path):
    """A query reads (`multi_get`); a write from one fails its batch, naming the query."""
    write_files(tmp_path / "in")
    t, _ = query_topology(tmp_path / "in", DurableMapState.factory(StateType.TRANSACTIONAL),
                          Writes(), ["w"])
    with simulated_time(), pytest.raises(squall.SquallError, match=r"lookup.*multi_put"):
        squall.run(t.build(), {"squall.trident.max.attempts": 1}, runner=runner,
                   checkpoint_location=str(tmp_path / "ckpt"))
