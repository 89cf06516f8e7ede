"""Transactional topologies end to end on both runners: exact counts under failures, commit
order, cancellation of later batches, stale attempts, opaque spouts whose data changes."""

from __future__ import annotations

import logging
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.examples import load_example

from squall import FailedException, Fields, run
from squall.runtime.clock import SimulatedClock
from squall.runtime.local.engine import LocalEngine
from squall.transaction_kernel.progress_store import MemoryStore, open_store
from squall.transactional import (
    BatchBolt,
    Committer,
    Coordinator,
    MemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    OpaqueValue,
    TransactionalTopologyBuilder,
    TransactionalValue,
    TransactionAttempt,
    TransactionOrderError,
)

gc = load_example("transactional_global_count")
tw = load_example("transactional_words")


def _run(runner: str, topology: Any, conf: dict, tmp: Path, spark_session: Any = None) -> Any:
    if runner == "local":
        # Simulated time: a batch whose tree times out is replayed without real waiting.
        engine = LocalEngine(topology, conf, clock=SimulatedClock())
        result = engine.run()
        return result, engine
    from squall.runtime.spark.transactional import TransactionalSparkRunner

    r = TransactionalSparkRunner(topology, conf, session=spark_session,
                                 checkpoint_location=str(tmp / "ckpt"))
    return r.run(duration_ms=240_000), r


@pytest.fixture
def session_for(request):
    """The module's Spark session, only for the spark runner."""
    def get(runner: str) -> Any:
        return request.getfixturevalue("spark_session") if runner == "spark" else None
    return get


def _chance(conf: Any, attempt: TransactionAttempt, task: int, salt: int) -> float:
    # Deterministic per (seed, transaction, attempt, task): replays get fresh draws.
    seed = int(conf.get("test.seed", 0))
    return random.Random(hash((seed, attempt.transaction_id, attempt.attempt_id, task,
                               salt))).random()


# ---- faulty versions of the examples' bolts --------------------------------------------------
class FaultyCount(gc.BatchCount):
    """Fails its batch at random: FailedException in execute, a bug in finish_batch."""

    def prepare(self, conf, context, collector, attempt) -> None:
        super().prepare(conf, context, collector, attempt)
        self.draw = _chance(conf, attempt, context.this_task_id, 1)
        self.p = float(conf.get("test.fail", 0))

    def execute(self, tup) -> None:
        if self.draw < self.p / 2 and self.count == 1:
            raise FailedException("injected")
        super().execute(tup)

    def finish_batch(self) -> None:
        if self.p / 2 <= self.draw < self.p:
            raise RuntimeError("injected bug in finish_batch")
        super().finish_batch()


class FaultySum(gc.UpdateGlobalCount):
    """Fails in the commit phase, sometimes after the store was written (a commit that happened
    but was not recorded: the replay must skip it)."""

    def finish_batch(self) -> None:
        draw = _chance(self.conf if hasattr(self, "conf") else {}, self.attempt, 0, 2)
        super().finish_batch()
        if draw < float(self.conf.get("test.fail", 0)):
            raise FailedException("injected after the commit was written")

    def prepare(self, conf, context, collector, attempt) -> None:
        self.conf = conf
        super().prepare(conf, context, collector, attempt)


def _global_count_builder(data: dict, max_batch: int) -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(data, Fields("word"), max_batch)
    b = TransactionalTopologyBuilder("tgc-test", "spout", spout, 2)
    b.set_bolt("partial-count", FaultyCount(), 3).shuffle_grouping("spout")
    b.set_bolt("sum", FaultySum()).global_grouping("partial-count")
    return b


def _data(seed: int, partitions: int, size: int) -> dict[int, list[list[str]]]:
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(40)]
    return {p: [[rnd.choice(words)] for _ in range(rnd.randint(size // 2, size))]
            for p in range(partitions)}


def test_global_count_is_exact_under_random_failures(runner, tmp_path, session_for, caplog):
    caplog.set_level(logging.CRITICAL)  # injected bugs are logged as errors
    seeds = range(6) if runner == "local" else range(1)
    for seed in seeds:
        data = _data(seed, 3, 40)
        conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / f"db{seed}")},
                "test.seed": seed, "test.fail": 0.25,
                "topology.max.spout.pending": 1 + seed % 3,
                "topology.message.timeout.secs": 5,
                "squall.transactional.progress_store": {"dir": str(tmp_path / f"tx{seed}")}}
        # Spark: fewer, larger transactions (each is a micro-batch of about a second).
        topology = _global_count_builder(
            data, max_batch=7 if runner == "local" else 15).create_topology()
        result, driver = _run(runner, topology, conf, tmp_path / f"r{seed}",
                              session_for(runner))
        total = sum(len(rows) for rows in data.values())
        assert gc.open_db(conf).get(gc.GLOBAL) == total, seed
        # Failures really happened, and only the injected ones.
        assert all("injected" in str(e.error) for e in result.errors)
        if runner == "spark":
            assert driver.failed_attempts, "no attempt failed: the test injected nothing"
        else:
            assert result.stats["$coord-tgc-test"].failed > 0


def test_complete_topology_runs_a_transactional_topology_on_its_runner(runner, tmp_path):
    """`complete_topology` takes its runner from make_runner: on Spark a transactional
    topology runs on the transactional runner (one transaction a micro-batch), every tuple
    counted once, and the committer's emits are captured per transaction."""
    from squall.testing import complete_topology

    conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / "db")}}
    result = complete_topology(gc.build().create_topology(), conf, runner=runner)
    total = sum(len(rows) for rows in gc.DATA.values())
    assert result.errors == []
    assert gc.open_db(conf).get(gc.GLOBAL) == total
    sums = result.tuples("sum")
    assert [a.transaction_id for a, _ in sums] == list(range(1, len(sums) + 1))
    assert sums[-1][1] == total


@pytest.mark.spark
def test_global_count_example_on_both_runners_agree(tmp_path, spark_session):
    totals = []
    for runner in ("local", "spark"):
        conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / runner)}}
        topology, _ = gc.topology()
        result = run(topology, conf, runner=runner,
                     checkpoint_location=str(tmp_path / f"ck-{runner}"))
        assert result.errors == []
        totals.append(gc.open_db(conf).get(gc.GLOBAL))
    assert totals == [19, 19]


# ---- TransactionalWords ------------------------------------------------------------------------
class FaultyKeyedCount(tw.KeyedCountUpdater):
    def finish_batch(self) -> None:
        draw = _chance(self.conf, self.attempt, self.task, 3)
        p = float(self.conf.get("test.fail", 0))
        if draw < p / 2:
            raise FailedException("injected before the commit")
        super().finish_batch()
        if draw < p:
            raise RuntimeError("injected after the word counts were written")

    def prepare(self, conf, context, collector, attempt) -> None:
        super().prepare(conf, context, collector, attempt)
        self.task = context.this_task_id


class FaultyBuckets(tw.BucketCountUpdater):
    def finish_batch(self) -> None:
        if _chance(self.conf, self.attempt, 0, 4) < float(self.conf.get("test.fail", 0)) / 2:
            raise FailedException("injected in the second store's commit")
        super().finish_batch()


class FileOpaqueSpout(OpaquePartitionedTransactionalSpout):
    """Partitions are text files, one word a line; a batch is up to `max_batch` lines from where
    the previous transaction ended. Files may grow between attempts."""

    def __init__(self, directory: str, partitions: int, max_batch: int) -> None:
        self.directory, self.n, self.max_batch = directory, partitions, max_batch

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("attempt", "word"))

    def num_partitions(self) -> int:
        return self.n

    def _lines(self, p: int) -> list[str]:
        with open(os.path.join(self.directory, f"p{p}.txt")) as f:
            return f.read().split()

    def emit_partition_batch(self, attempt, collector, partition, last_meta):
        start = last_meta or 0
        lines = self._lines(partition)[start:start + self.max_batch]
        for word in lines:
            collector.emit([attempt, word])
        return start + len(lines)

    def is_exhausted(self, partition, meta) -> bool:
        return (meta or 0) >= len(self._lines(partition))


class GrowingFaultyKeyedCount(FaultyKeyedCount):
    """On an injected failure, first appends a word to partition 0: the replay of this
    transaction reads different data than the failed attempt did."""

    def finish_batch(self) -> None:
        try:
            super().finish_batch()
        except Exception:
            with open(os.path.join(self.conf["test.dir"], "p0.txt"), "a") as f:
                f.write(f"grown{self.attempt.transaction_id}\n")
            raise


def _words_builder(spout: Any, counter: Any = FaultyKeyedCount) -> TransactionalTopologyBuilder:
    b = TransactionalTopologyBuilder("tw-test", "spout", spout, 2)
    b.set_bolt("count", counter(), 3).fields_grouping("spout", Fields("word"))
    b.set_bolt("bucketize", tw.Bucketize()).none_grouping("count")
    b.set_bolt("buckets", FaultyBuckets(), 2).fields_grouping("bucketize", Fields("bucket"))
    return b


class Lower(BatchBolt):
    """Each word lower-cased, in the batch's transaction (a stage of its own, or fused)."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.collector, self.attempt = collector, attempt

    def execute(self, tup) -> None:
        self.collector.emit([self.attempt, tup["word"].lower()])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "word"))


def _check_words(conf: dict, expected: Counter) -> None:
    counts = tw.open_db(conf, "word-counts").values()
    assert counts == dict(expected)
    buckets = {b: n for b, n in tw.open_db(conf, "bucket-counts").values().items() if n}
    assert buckets == tw.histogram(counts)


def _skewed(seed: int, partitions: int, size: int) -> dict[int, list[list[str]]]:
    # Zipf-like, so counts spread over several buckets of 10.
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    weights = [1 / (i + 1) for i in range(30)]
    return {p: [[w] for w in rnd.choices(words, weights, k=size)] for p in range(partitions)}


def test_words_exact_under_failures_transactional_spout(runner, tmp_path, session_for, caplog):
    caplog.set_level(logging.CRITICAL)
    for seed in (range(4) if runner == "local" else range(1)):
        data = _skewed(seed, 3, 60)
        conf = {"transactional_words.db": {"provider": "durable",
                                           "dir": str(tmp_path / f"db{seed}")},
                "test.seed": seed, "test.fail": 0.3, "topology.max.spout.pending": 2,
                "squall.transactional.progress_store": {"dir": str(tmp_path / f"tx{seed}")}}
        spout = MemoryTransactionalSpout(data, Fields("word"),
                                         max_batch=9 if runner == "local" else 20)
        _run(runner, _words_builder(spout).create_topology(), conf, tmp_path / f"r{seed}",
             session_for(runner))
        _check_words(conf, Counter(r[0] for rows in data.values() for r in rows))


def test_a_local_or_shuffle_bolt_in_a_transaction_is_exact_and_not_fused(
        runner, tmp_path, session_for, caplog):
    # Lower has as many tasks as the emitter and takes it by local_or_shuffle, and failed
    # attempts replay. Every emitter task also tells every Lower task how many tuples it sent
    # (the $coord stream, a direct grouping), so on Spark Lower keeps a stage of its own.
    caplog.set_level(logging.CRITICAL)
    data = {p: [[w.upper() if i % 3 else w] for i, (w,) in enumerate(rows)]
            for p, rows in _skewed(5, 3, 40).items()}
    conf = {"transactional_words.db": {"provider": "durable", "dir": str(tmp_path / "db")},
            "test.seed": 5, "test.fail": 0.3, "topology.max.spout.pending": 2,
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    b = TransactionalTopologyBuilder("tw-lower", "spout", MemoryTransactionalSpout(
        data, Fields("word"), max_batch=9 if runner == "local" else 20), 2)
    b.set_bolt("lower", Lower(), 2).local_or_shuffle_grouping("spout")
    b.set_bolt("count", FaultyKeyedCount(), 3).fields_grouping("lower", Fields("word"))
    b.set_bolt("bucketize", tw.Bucketize()).none_grouping("count")
    b.set_bolt("buckets", FaultyBuckets(), 2).fields_grouping("bucketize", Fields("bucket"))
    result, r = _run(runner, b.create_topology(), conf, tmp_path / "r", session_for(runner))
    assert result.errors, "no attempt failed: nothing was replayed"
    _check_words(conf, Counter(row[0].lower() for rows in data.values() for row in rows))
    if runner == "spark":
        assert ("lower",) in r.chain.groups


def test_words_exact_with_opaque_spout_whose_data_changes(runner, tmp_path, session_for,
                                                          caplog):
    caplog.set_level(logging.CRITICAL)
    data = _skewed(7, 3, 50)
    files = tmp_path / "files"
    files.mkdir()
    for p, rows in data.items():
        (files / f"p{p}.txt").write_text("".join(f"{r[0]}\n" for r in rows))
    conf = {"transactional_words.db": {"provider": "durable", "dir": str(tmp_path / "db")},
            "test.seed": 7, "test.fail": 0.35, "test.dir": str(files),
            "topology.max.spout.pending": 3,
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    spout = FileOpaqueSpout(str(files), 3, max_batch=8 if runner == "local" else 16)
    _run(runner, _words_builder(spout, GrowingFaultyKeyedCount).create_topology(), conf,
         tmp_path / "r", session_for(runner))
    final = Counter(w for p in range(3) for w in (files / f"p{p}.txt").read_text().split())
    grown = [w for w in final if w.startswith("grown")]
    assert grown, "no attempt failed: the partition never changed between attempts"
    _check_words(conf, final)


# ---- ordering ------------------------------------------------------------------------------
class Log(BatchBolt):
    """Writes `<event> <txid> <attempt>` lines to a file (works on Spark executors too)."""

    event = "finish"

    def prepare(self, conf, context, collector, attempt) -> None:
        self.conf, self.collector, self.attempt = conf, collector, attempt

    def execute(self, tup) -> None:
        fail = self.conf.get("test.fail.once")
        if fail and tuple(fail) == (self.attempt.transaction_id, self.attempt.attempt_id):
            raise FailedException("fail this attempt once")

    def finish_batch(self) -> None:
        with open(self.conf["test.log"], "a") as f:
            f.write(f"{self.event} {self.attempt.transaction_id} {self.attempt.attempt_id}\n")
        if self.event == "process":
            self.collector.emit([self.attempt, 1])

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("id", "n"))


class ProcessLog(Log):
    event = "process"


class CommitLog(Log, Committer):
    event = "commit"


def test_commits_in_order_failure_cancels_later_and_stale_attempts_ignored(
        runner, tmp_path, session_for):
    data = {p: [[f"x{p}-{i}"] for i in range(30)] for p in range(2)}
    log_path = tmp_path / "events.log"
    conf = {"test.log": str(log_path), "topology.max.spout.pending": 4,
            "test.fail.once": [3, 1],  # attempt 1 of transaction 3 fails
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    b = TransactionalTopologyBuilder("order", "spout",
                                     MemoryTransactionalSpout(data, Fields("w"), 2), 2)
    b.set_bolt("process", ProcessLog(), 2).shuffle_grouping("spout")
    b.set_bolt("commit", CommitLog()).global_grouping("process")
    _run(runner, b.create_topology(), conf, tmp_path, session_for(runner))
    events = [line.split() for line in log_path.read_text().splitlines()]
    commits = [(int(t), int(a)) for e, t, a in events if e == "commit"]
    # Strictly in id order, each once, 15 transactions of 2 + 2 tuples.
    assert [t for t, _ in commits] == list(range(1, 16))
    # Transaction 3 committed with a later attempt; attempt 1 never reached the commit.
    assert dict(commits)[3] >= 2
    # Processing of attempt (3, 1) never finished in the failing tasks... and nothing of any
    # attempt other than the committed one is committed (stale attempts are ignored).
    processed = {(int(t), int(a)) for e, t, a in events if e == "process"}
    assert set(commits) <= processed
    if runner == "local":
        # Several batches were in flight: a transaction's processing finished before the
        # previous one committed.
        pos = {(e, int(t), int(a)): i for i, (e, t, a) in enumerate(events)}
        overlap = [t for t, a in commits[1:]
                   if any(pos[("process", t, a2)] < pos[("commit", t - 1, dict(commits)[t - 1])]
                          for (t2, a2) in processed if t2 == t)]
        assert overlap, "no pipelining happened with max spout pending 4"
        # The failure of 3 cancelled the later transactions in flight: 4 (and 5, 6 if started)
        # ran again with new attempts before committing.
        assert dict(commits)[4] >= 2
    else:
        # One transaction per micro-batch, no overlap: every commit directly follows its
        # transaction's processing.
        order = [(e, int(t)) for e, t, _ in events]
        for t in range(2, 16):
            assert order.index(("commit", t - 1)) < min(
                i for i, (e, tx) in enumerate(order) if tx == t)


# ---- the core and the values -------------------------------------------------------------------
def test_coordinator_rules():
    c = Coordinator(MemoryStore("unit", id(object())), max_active=3)
    started = c.sync()
    assert [(k, a.transaction_id) for k, a in started] == [("batch", 1), ("batch", 2),
                                                           ("batch", 3)]
    a1, a2, a3 = (a for _, a in started)
    c.ack("batch", a2)
    c.ack("batch", a3)
    assert c.sync() == []  # 1 not processed: nothing commits, even if 2 and 3 are
    c.fail("batch", a2)  # a live failure of 2 removes 3 as well
    assert sorted(c.active) == [1]
    again = c.sync()
    assert [a.transaction_id for _, a in again] == [2, 3]
    assert all(a.attempt_id == 2 for _, a in again)
    c.ack("batch", a3)  # stale: ignored
    assert c.active[3].status == "PROCESSING"
    c.fail("batch", a3)  # a stale fail still removes its id (Storm), but not later ones
    c.ack("batch", a1)
    ((kind, commit),) = [x for x in c.sync() if x[0] == "commit"]
    assert (kind, commit) == ("commit", a1)
    c.ack("commit", a1)
    assert c.curr == 2 and c.committed == [1]


def test_coordinator_progress_is_durable(tmp_path):
    conf = {"squall.transactional.progress_store": {"dir": str(tmp_path)}}
    c = Coordinator(open_store(conf, "t"), 1)
    ((_, a),) = c.sync()
    c.ack("batch", a)
    ((_, a),) = c.sync()
    c.ack("commit", a)
    ((_, b),) = c.sync()  # transaction 2 started, then the process dies
    again = Coordinator(open_store(conf, "t"), 1)
    assert again.curr == 2
    ((_, b2),) = again.sync()
    assert b2.transaction_id == 2 and b2.attempt_id == b.attempt_id + 1


def test_values_rules():
    v = TransactionalValue.initial(0).update(4, lambda x: x + 1)
    assert v.update(4, lambda x: x + 100) is v
    o = OpaqueValue.initial(0).update(4, lambda x: x + 1).update(4, lambda x: x + 3)
    assert (o.current, o.previous, o.txid) == (3, 0, 4)
    with pytest.raises(TransactionOrderError, match="transaction 3"):
        o.update(3, lambda x: x)


def test_bad_input_is_named():
    from squall.errors import EmitError, InvalidTopologyError

    spout = MemoryTransactionalSpout({0: [["a"]]}, Fields("w"))
    b = TransactionalTopologyBuilder("bad", "spout", spout)
    with pytest.raises(InvalidTopologyError, match="BatchBolt"):
        b.set_bolt("x", object())  # type: ignore[arg-type]
    b.set_bolt("y", ProcessLog()).shuffle_grouping("nowhere")
    with pytest.raises(InvalidTopologyError, match="nowhere"):
        b.create_topology()

    class NoAttempt(ProcessLog):
        def finish_batch(self):
            self.collector.emit(["not an attempt", 1])

    b = TransactionalTopologyBuilder("bad2", "spout", spout)
    b.set_bolt("y", NoAttempt()).shuffle_grouping("spout")
    engine = LocalEngine(b.create_topology(), {"topology.max.spout.pending": 1,
                                               "topology.message.timeout.secs": 1})
    engine.run(duration_ms=300)
    errors = [e for e in engine.errors if isinstance(e.error, EmitError)]
    assert errors and errors[0].component == "y" and "TransactionAttempt" in str(errors[0].error)
