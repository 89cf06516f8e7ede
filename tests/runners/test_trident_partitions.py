"""Trident's partitioned durable map states (`squall.trident.state.partitioned`) on both runners:
each partition's store holds exactly the keys of its partition, a `persistent_aggregate` is
applied on Spark by the tasks that hold the keys (not by the driver), counts equal a dict count
for every state type and for a user's combiner, and the number of partitions is a property of
the checkpoint."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cli import squall as squall_cli
from support.redis_server import start_redis
from support.state_kills import KillsAWorker

import squall
from squall.errors import ConfigError
from squall.testing import simulated_time
from squall.trident import (
    CombinerAggregator,
    Count,
    FixedBatchSpout,
    Function,
    Sum,
    TridentTopology,
)
from squall.trident.state import DurableMapState, StateType
from squall.trident.state.durable import DurableMapStateFactory
from squall.trident.state.partitioned import PARTITIONS_KEY, partition_indexes
from squall.trident.state.redis_map import RedisMapStateFactory

IN_EXECUTORS = "squall.trident.spark.state.in.executors"
WORDS = [f"w{i % 97}" for i in range(600)]  # 97 distinct keys over 6 batches
SENTENCES = [" ".join(WORDS[i:i + 20]) for i in range(0, len(WORDS), 20)]


class Split(Function):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word, len(word)])


class LongestSum(CombinerAggregator):
    """A user's combiner (not a built-in): the sum of the lengths, as a one-item list."""

    def init(self, tup):
        return [tup[0]]

    def combine(self, a, b):
        return [a[0] + b[0]]

    def zero(self):
        return [0]


@dataclass(frozen=True)
class Recording(DurableMapStateFactory):
    """A durable factory that notes which process opens which single partition (what a Spark
    task does to apply its keys)."""

    log: str = ""

    def make_partition(self, name, location, index):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {name} {index}\n")
        return super().make_partition(name, location, index)


def topology(factories: dict[str, Any]):
    t = TridentTopology()
    words = (t.new_stream("sentences", FixedBatchSpout(["sentence"], 4, *[[s] for s in SENTENCES]))
             .each(["sentence"], Split(), ["word", "length"]).name("split").group_by(["word"]))
    for name, factory in factories.items():
        if name.startswith("lengths"):
            words.persistent_aggregate(factory, ["length"], LongestSum(), ["lengths"]).name(name)
        elif name.startswith("sums"):
            words.persistent_aggregate(factory, ["length"], Sum(), ["sum"]).name(name)
        else:
            words.persistent_aggregate(factory, Count(), ["count"]).name(name)
    return t.build()


def parts_of(factory: DurableMapStateFactory, name: str, location: Path) -> list[dict]:
    state = factory.make_state(name, str(location))
    try:
        return [dict(p.items()) for p in state.parts]
    finally:
        state.close()


def test_each_partition_holds_its_keys_and_spark_applies_them_in_its_tasks(runner, tmp_path):
    ckpt = tmp_path / "ckpt"
    log = str(tmp_path / "opened.log")
    factories: dict[str, DurableMapStateFactory] = {
        "counts-tx": Recording(StateType.TRANSACTIONAL, log=log),
        "counts-opaque": Recording(StateType.OPAQUE, log=log),
        "counts-nontx": Recording(StateType.NON_TRANSACTIONAL, log=log),
        "sums-tx": Recording(StateType.TRANSACTIONAL, log=log),
        "lengths-opaque": Recording(StateType.OPAQUE, log=log),
    }
    counts = Counter(WORDS)
    expected = {
        "counts": {(w,): n for w, n in counts.items()},
        "sums": {(w,): n * len(w) for w, n in counts.items()},
        "lengths": {(w,): [n * len(w)] for w, n in counts.items()},
    }
    with simulated_time():
        result = squall.run(topology(factories), {PARTITIONS_KEY: 4}, runner=runner,
                            checkpoint_location=str(ckpt))
    assert result.extra["committed"] == [1, 2, 3, 4, 5, 6, 7, 8]
    # The five states' aggregates come from one pass over the input per transaction (one Spark
    # job): each sentence is split once, on both runners.
    assert result.stats["split"].executed == len(SENTENCES)
    assert result.stats["split"].emitted == len(WORDS)
    for name, factory in factories.items():
        parts = parts_of(factory, name, ckpt)
        assert len(parts) == 4
        for index, part in enumerate(parts):  # every key in the store of its partition
            assert set(partition_indexes(list(part), 4)) <= {index}
        merged = {k: v for part in parts for k, v in part.items()}
        assert merged == expected[name.split("-")[0]], name
    opened = [line.split() for line in Path(log).read_text().splitlines()] \
        if os.path.exists(log) else []
    if runner == "spark":
        # Every state's keys were applied by Spark's tasks, in Python workers, one partition
        # at a time: 8 batches x 4 partitions per state at most, every partition at least once.
        assert opened and all(int(pid) != os.getpid() for pid, _, _ in opened)
        for name in factories:
            seen = {int(i) for _, n, i in opened if n == name}
            assert seen == {0, 1, 2, 3}, name
    else:
        assert opened == []  # the local runner applies each partition from its own process


def test_the_number_of_partitions_is_fixed_by_the_checkpoint(runner, tmp_path):
    """... and the driver applies the aggregates itself when
    squall.trident.spark.state.in.executors is false (kept for measuring)."""
    ckpt = str(tmp_path / "ckpt")
    log = tmp_path / "opened.log"
    factories: dict[str, DurableMapStateFactory] = {"counts": Recording(log=str(log))}
    with simulated_time():
        squall.run(topology(factories), {PARTITIONS_KEY: 3, IN_EXECUTORS: False},
                   runner=runner, checkpoint_location=ckpt)
    assert not log.exists()  # no task applied a partition: the driver did
    with simulated_time():
        with pytest.raises(ConfigError, match=r"durable map state 'counts' has 3 partitions .* "
                                              r"this run asks for 5 \(squall.trident.state"
                                              r".partitions"):
            squall.run(topology(factories), {PARTITIONS_KEY: 5}, runner=runner,
                       checkpoint_location=ckpt)
        # Unset, the checkpoint's number holds; the finished run has nothing more to do.
        again = squall.run(topology(factories), {}, runner=runner, checkpoint_location=ckpt)
    assert again.extra["committed"] == []
    state = factories["counts"].make_state("counts", ckpt)
    try:
        assert state.partitions == 3
        assert dict(state.items()) == {(w,): n for w, n in Counter(WORDS).items()}
    finally:
        state.close()


# The opaque state's case in CI's second run (`extended`): the default run kills this moment with
# the transactional state, and the opaque path on Spark with its driver killed at random points
# (tests/crash/test_trident_crash.py, spark-opaque-opaque).
@pytest.mark.runners("spark")
@pytest.mark.parametrize("state_type", [StateType.TRANSACTIONAL,
                                        pytest.param(StateType.OPAQUE, marks=pytest.mark.extended)])
def test_a_python_worker_killed_after_its_partition_write_counts_once(runner, tmp_path,
                                                                       state_type):
    """SIGKILL of the Python worker applying a partition, after its write and before its task
    ends: the transaction is applied again (a task retry or a new attempt of the txid) and the
    partition written twice by it counts each key once."""
    ckpt = tmp_path / "ckpt"
    marker = tmp_path / "killed"
    (index,) = partition_indexes([("w0",)], 4)  # a partition that has keys in every batch
    factories: dict[str, DurableMapStateFactory] = {
        "counts": KillsAWorker(state_type, marker=str(marker), index=index),
        "sums": KillsAWorker(state_type, marker=str(tmp_path / "killed-sums"), index=index,
                             txid=5),
    }
    with simulated_time():
        result = squall.run(topology(factories), {PARTITIONS_KEY: 4}, runner=runner,
                            checkpoint_location=str(ckpt))
    assert int(marker.read_text()) != os.getpid()  # a worker process died, not the driver
    assert (tmp_path / "killed-sums").exists()
    assert result.extra["committed"] == [1, 2, 3, 4, 5, 6, 7, 8]
    counts = Counter(WORDS)
    plain = DurableMapState.factory(state_type)
    assert dict(plain.make_state("counts", str(ckpt)).items()) == {
        (w,): n for w, n in counts.items()}
    assert dict(plain.make_state("sums", str(ckpt)).items()) == {
        (w,): n * len(w) for w, n in counts.items()}


def test_squall_state_repartition_changes_the_partitions_and_the_run_goes_on(runner, tmp_path):
    """A state written with 3 partitions, rewritten offline into 5 by `squall state
    repartition`, and a run over more input on the same checkpoint asking for 5: every key
    exact, each in the store of its new partition."""
    ckpt = str(tmp_path / "ckpt")
    factory = DurableMapState.factory(StateType.OPAQUE)

    def topology_of(sentences):
        t = TridentTopology()
        (t.new_stream("sentences", FixedBatchSpout(["sentence"], 4, *[[s] for s in sentences]))
         .each(["sentence"], Split(), ["word", "length"]).group_by(["word"])
         .persistent_aggregate(factory, Count(), ["count"]).name("counts"))
        return t.build()

    with simulated_time():
        first = squall.run(topology_of(SENTENCES[:16]), {PARTITIONS_KEY: 3}, runner=runner,
                           checkpoint_location=ckpt)
    assert first.extra["committed"] == [1, 2, 3, 4]
    listed = squall_cli("state", "list", ckpt)
    assert listed.returncode == 0 and listed.stdout.splitlines() == ["counts\t3 partitions"]
    done = squall_cli("state", "repartition", ckpt, "counts", "--partitions", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "state 'counts': 3 -> 5 partitions"
    missing = squall_cli("state", "repartition", ckpt, "nope", "-n", "2")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (f"squall state: no durable state 'nope' under {ckpt} "
                                      "(states: counts)")
    with simulated_time():
        second = squall.run(topology_of(SENTENCES), {PARTITIONS_KEY: 5}, runner=runner,
                            checkpoint_location=ckpt)
    assert second.extra["committed"] == [5, 6, 7, 8]
    parts = parts_of(factory, "counts", Path(ckpt))
    assert len(parts) == 5
    for index, part in enumerate(parts):
        assert set(partition_indexes(list(part), 5)) <= {index}
    assert {k: v for p in parts for k, v in p.items()} == {
        (w,): n for w, n in Counter(WORDS).items()}


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def test_a_redis_state_is_partitioned_and_applied_where_its_keys_are(runner, tmp_path,
                                                                     redis_server):
    """Redis states (a hash per partition) take the same path as durable ones: on Spark the
    tasks apply their partitions' keys; every key is in the hash of its partition and exact."""
    prefix = f"test:{uuid.uuid4().hex}:"
    log = str(tmp_path / "opened.log")
    factories: dict[str, Any] = {
        "counts-tx": RecordingRedis(StateType.TRANSACTIONAL, port=redis_server.port,
                                    key_prefix=prefix, log=log),
        "sums-opaque": RecordingRedis(StateType.OPAQUE, port=redis_server.port,
                                      key_prefix=prefix, log=log),
    }
    with simulated_time():
        result = squall.run(topology(factories), {PARTITIONS_KEY: 4}, runner=runner,
                            checkpoint_location=str(tmp_path / "ckpt"))
    assert result.extra["committed"] == [1, 2, 3, 4, 5, 6, 7, 8]
    counts = Counter(WORDS)
    expected = {"counts-tx": {(w,): n for w, n in counts.items()},
                "sums-opaque": {(w,): n * len(w) for w, n in counts.items()}}
    for name, factory in factories.items():
        state = factory.make_state(name, None)
        parts = [dict(p.items()) for p in state.parts]
        state.close()
        for index, part in enumerate(parts):
            assert set(partition_indexes(list(part), 4)) <= {index}
        assert {k: v for p in parts for k, v in p.items()} == expected[name]
        # A field per key (and an opaque partition's record of what its last txid wrote).
        record = 1 if name.endswith("opaque") else 0
        assert redis_server.client.hlen(f"{prefix}{name}:p0") == len(parts[0]) + record
    opened = Path(log).read_text().split() if os.path.exists(log) else []
    assert bool(opened) == (runner == "spark")


@dataclass(frozen=True)
class RecordingRedis(RedisMapStateFactory):
    """A Redis factory that notes the processes that open a single partition."""

    log: str = ""

    def make_partition(self, name, location, index):
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()}\n")
        return super().make_partition(name, location, index)


@pytest.mark.spark
def test_keys_of_several_fields_hash_as_sparks_own_hash(spark_session):
    """A state's keys of several fields (ints and strings, as NEXMark's (auction, day) and
    (bidder, auction)) get their partitions from `key_hashes`' column-wise numpy pass: it must
    equal Spark's `hash(c1, c2)` of the same columns, and the one-key-at-a-time `key_hash`."""
    import random

    from pyspark.sql import functions as F

    from squall.murmur3 import key_hash, key_hashes

    r = random.Random(7)
    keys = [(r.choice([r.randrange(-2**63, 2**63), r.randrange(-999, 999)]),
             "".join(r.choice("ab\u00e9\u65e5") for _ in range(r.randrange(0, 9))),
             r.randrange(1000, 3000)) for _ in range(300)]
    rows = spark_session.createDataFrame(keys, "a long, s string, b long").select(
        "a", "s", "b", F.expr("hash(a, s, b)").alias("h"), F.expr("hash(b, a)").alias("ba"))
    got = {(row.a, row.s, row.b): (row.h, row.ba) for row in rows.collect()}
    assert key_hashes(keys) == [got[k][0] for k in keys] == [key_hash(k) for k in keys]
    swapped = [(b, a) for a, _, b in keys]
    assert key_hashes(swapped) == [got[(b_a[1], s, b_a[0])][1]
                                   for b_a, (_, s, _) in zip(swapped, keys, strict=True)]
