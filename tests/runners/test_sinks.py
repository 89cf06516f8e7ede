"""Built-in sinks (squall.connectors): exact output on both runners, no duplicates on replay.

Everything is real: files in tmp directories, a `redis-server` started here on a free loopback
port (no persistence, stopped by pid at the end), one SparkSession for the module, and a Spark
driver subprocess that is SIGKILLed in the middle of a batch and restarted on its checkpoint.
One topology feeds all the sinks at once, so each runner runs it once (`_run`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.crash import Restarts
from support.redis_server import free_port, start_redis
from support.runs import MAX_TUPLES
from support.sink_tasks import execute, replay, sink_task

from squall import (
    BasicBolt,
    Fields,
    Spout,
    SquallError,
    StatefulBolt,
    TopologyBuilder,
    Values,
)
from squall.connectors import (
    JsonLinesSink,
    ParquetSink,
    RedisSink,
    SinkError,
    read_jsonl,
    read_parquet,
)
from squall.connectors.sources import MemorySource
from squall.testing import MockedSources, complete_topology
from squall.topology.tuple import Tuple

PASSWORD = "s3cret"
PART = re.compile(r"^part-b(\d{12})-t(\d+)\.(jsonl|parquet)$")


# ---- fixtures: Spark session, redis-server ------------------------------------------------------




@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server with a password, on a free loopback port, without persistence."""
    with start_redis(tmp_path_factory.mktemp("redis"), PASSWORD) as server:
        yield server


# ---- one topology feeding every sink -------------------------------------------------------------

WORDS = ["apple", "pear", "fig", "plum", "kiwi"]
ROWS = [[i, WORDS[i % len(WORDS)], i] for i in range(24)]


class Events(Spout):
    """Replaced by MockedSources in every run."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class Double(BasicBolt):
    def execute(self, tup, collector):
        i = tup["id"]
        collector.emit(Values(i, tup["word"], tup["n"] * 2, f"item:{i}"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n", "key"))


def sinks_topology(out: Path, server, runner: str):
    b = TopologyBuilder()
    b.set_spout("events", Events())
    b.set_bolt("double", Double(), parallelism=2).shuffle_grouping("events")
    b.set_bolt("jsonl", JsonLinesSink(out / "jsonl"), parallelism=2).fields_grouping(
        "double", Fields("word"))
    b.set_bolt("parquet", ParquetSink(out / "parquet", fields=["id", "n"]),
               parallelism=2).shuffle_grouping("double")
    b.set_bolt("rhash", RedisSink(server.host, server.port, password=server.password,
                                  key_field="id", value_field="n", hash_name=f"{runner}:doubled",
                                  prefix=f"{runner}:rhash"),
               parallelism=2).fields_grouping("double", Fields("id"))
    b.set_bolt("rset", RedisSink(server.host, server.port, password=server.password,
                                 key_field="key", value_field="word", prefix=f"{runner}:rset"),
               parallelism=1).shuffle_grouping("double")
    return b.create_topology()


_RESULTS: dict[str, tuple] = {}


def _run(request, runner: str):
    """Run the sinks topology once per runner for the whole module."""
    if runner not in _RESULTS:
        server = request.getfixturevalue("redis_server")
        out = request.getfixturevalue("tmp_path_factory").mktemp(f"sinks-{runner}")
        conf = {MAX_TUPLES: 12} if runner == "spark" else {"squall.local.batch.ms": 1000}
        result = complete_topology(sinks_topology(out, server, runner), conf, runner=runner,
                                   mocked_sources=MockedSources({"events": ROWS}))
        _RESULTS[runner] = (result, out, server)
    return _RESULTS[runner]


def _parts(directory: Path) -> list[tuple[int, int, str]]:
    names = sorted(os.listdir(directory))
    assert all(PART.match(n) for n in names), names  # no temporary files left behind
    return [(int(m[1]), int(m[2]), m[3]) for m in map(PART.match, names)]


def test_every_tuple_is_acked_and_no_errors(request, runner):
    result, _, _ = _run(request, runner)
    assert [(e.component, str(e.error)) for e in result.errors] == []
    assert sorted(result.acked("events")) == list(range(len(ROWS)))
    assert result.failed("events") == []
    for sink in ("jsonl", "parquet", "rhash", "rset"):
        assert result.stats[sink].acked == len(ROWS)
        assert result.tuples(sink) == []  # sinks emit nothing


def test_jsonl_sink_writes_every_tuple_once(request, runner):
    result, out, _ = _run(request, runner)
    records = read_jsonl(out / "jsonl")
    assert sorted(records, key=lambda r: r["id"]) == [
        {"id": i, "word": w, "n": 2 * n, "key": f"item:{i}"} for i, w, n in ROWS
    ]
    parts = _parts(out / "jsonl")
    assert {t for _, t, _ in parts} <= set(result.topology.component_tasks("jsonl"))
    assert {s for _, _, s in parts} == {"jsonl"}
    if runner == "spark":
        assert len({b for b, _, _ in parts}) > 1  # 12 spout tuples a batch: several batches
    # A word's tuples all went to one task (fields grouping), so to that task's files.
    task_of: dict[str, set[int]] = {}
    for b, t, _ in parts:
        path = out / "jsonl" / f"part-b{b:012d}-t{t}.jsonl"
        for line in path.read_text().splitlines():
            task_of.setdefault(json.loads(line)["word"], set()).add(t)
    assert all(len(tasks) == 1 for tasks in task_of.values()), task_of


class DropAll(BasicBolt):
    def execute(self, tup, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


def test_a_sink_that_wrote_nothing_reads_as_empty(runner, tmp_path):
    """A file sink that received nothing leaves its directory, empty: reading it gives no
    records; a directory no sink wrote to is an error naming it."""
    b = TopologyBuilder()
    b.set_spout("events", Events())
    b.set_bolt("drop", DropAll()).shuffle_grouping("events")
    b.set_bolt("jsonl", JsonLinesSink(tmp_path / "jsonl"), parallelism=2).shuffle_grouping("drop")
    b.set_bolt("parquet", ParquetSink(tmp_path / "parquet")).shuffle_grouping("drop")
    result = complete_topology(b.create_topology(), mocked_sources=MockedSources(
        {"events": ROWS[:3]}), runner=runner)
    assert result.errors == [] and result.stats["drop"].executed == 3
    assert read_jsonl(tmp_path / "jsonl") == [] and read_parquet(tmp_path / "parquet") == []
    for read in (read_jsonl, read_parquet):
        with pytest.raises(FileNotFoundError, match=r"no directory .*elsewhere: nothing was "
                           r"written there; a file sink creates its directory when it starts"):
            read(tmp_path / "elsewhere")


def test_parquet_sink_writes_the_listed_fields_once(request, runner):
    _, out, _ = _run(request, runner)
    rows = read_parquet(out / "parquet")
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "n": 2 * n} for i, _, n in ROWS]
    assert {s for _, _, s in _parts(out / "parquet")} == {"parquet"}


def test_redis_sink_hset_and_set(request, runner):
    result, _, server = _run(request, runner)
    r = server.client
    assert r.hgetall(f"{runner}:doubled") == {str(i): str(2 * n) for i, _, n in ROWS}
    keys = [f"item:{i}" for i, _, _ in ROWS]
    assert r.mget(keys) == [w for _, w, _ in ROWS]
    # The last applied batch id of every task that wrote, recorded in the same transactions.
    for sink, tasks in (("rhash", result.topology.component_tasks("rhash")),
                        ("rset", result.topology.component_tasks("rset"))):
        markers = [r.get(f"{runner}:{sink}:batch:{t}") for t in tasks]
        assert all(m is not None and int(m) >= 0 for m in markers), (sink, markers)


# ---- replays: the same batch id twice ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_file_sink_replayed_batch_overwrites(tmp_path, kind):
    sink = JsonLinesSink(tmp_path) if kind == "jsonl" else ParquetSink(tmp_path)
    engine, task = sink_task(sink)
    execute(engine, task, ROWS[:3])
    task.end_batch(6)
    replay(engine, task, ROWS[3:8], 7)
    read = read_jsonl if kind == "jsonl" else read_parquet
    expected = [{"id": i, "word": w, "n": n} for i, w, n in ROWS[:8]]
    assert read(tmp_path) == expected
    assert sorted(os.listdir(tmp_path)) == [f"part-b{b:012d}-t{task.task_id}.{kind}"
                                             for b in (6, 7)]
    assert task.stats.acked == 3 + 2 * 5 and task.stats.failed == 0
    assert engine.errors == []


def test_redis_replayed_batch_is_skipped_and_acked(redis_server):
    r = redis_server.client
    sink = RedisSink(redis_server.host, redis_server.port, password=PASSWORD,
                     key_field="word", value_field="n", hash_name="replay", prefix="replay")
    engine, task = sink_task(sink)
    rows = [[1, "a", 10], [2, "b", 20], [3, "a", 30]]  # within a batch the last "a" wins

    def written_later():  # what a later batch wrote; a re-applied replay would overwrite it
        r.hset("replay", "a", "later")

    replay(engine, task, rows, 4, between=written_later)
    assert r.hgetall("replay") == {"a": "later", "b": "20"}
    assert r.get(f"replay:batch:{task.task_id}") == "4"
    assert task.instance.batches_skipped == 1
    assert task.stats.acked == 6 and task.stats.failed == 0
    assert engine.errors == []
    # A new batch id is applied.
    execute(engine, task, [[4, "a", 40]])
    task.end_batch(5)
    assert r.hget("replay", "a") == "40" and r.get(f"replay:batch:{task.task_id}") == "5"

    # A fresh run (batch ids from 0 again, same prefix) is not mistaken for a replay.
    engine2, task2 = sink_task(RedisSink(redis_server.host, redis_server.port,
                                          password=PASSWORD, key_field="word", value_field="n",
                                          hash_name="replay", prefix="replay"))
    execute(engine2, task2, [[5, "b", 50]])
    task2.end_batch(0)
    assert r.hget("replay", "b") == "50" and r.get(f"replay:batch:{task2.task_id}") == "0"
    assert task2.instance.batches_skipped == 0
    for t in (task, task2):
        t.cleanup()


def test_redis_set_mode_without_hash(redis_server):
    sink = RedisSink(redis_server.host, redis_server.port, password=PASSWORD,
                     key_field="word", value_field="n", prefix="plain")
    engine, task = sink_task(sink, fields=("word", "n"))
    spout_task = engine.topology.component_tasks("events")[0]
    for values in (["set:x", {"a": [1, 2]}], ["set:y", 2.5], ["set:z", b"raw"]):
        task.execute(Tuple(values, Fields("word", "n"), "events", "default", spout_task,
                           task=task.task_id))
    task.end_batch(0)
    assert redis_server.client.mget("set:x", "set:y", "set:z") == ['{"a": [1, 2]}', "2.5", "raw"]
    assert engine.errors == []


def test_sink_with_a_missing_field_fails_in_prepare(tmp_path):
    with pytest.raises(SinkError, match=r"needs field 'nope'.*component 'sink'"):
        sink_task(JsonLinesSink(tmp_path, fields=["id", "nope"]))
    with pytest.raises(SinkError, match=r"needs field 'k'"):
        sink_task(RedisSink(key_field="k", value_field="n"))


def test_redis_sink_pickles_without_a_connection(redis_server):
    import pickle

    sink = RedisSink(redis_server.host, redis_server.port, password=PASSWORD)
    assert pickle.loads(pickle.dumps(sink)).port == redis_server.port
    assert sink.declared_streams() == {}


# ---- Redis unreachable or refusing the password --------------------------------------------------


def redis_only_topology(port: int, password: str | None):
    b = TopologyBuilder()
    b.set_spout("events", Events())
    b.set_bolt("store", RedisSink("127.0.0.1", port, password=password, key_field="id",
                                  value_field="n", hash_name="never", timeout=2.0),
               parallelism=2).shuffle_grouping("events")
    return b.create_topology()


RETRY_TWICE = {MAX_TUPLES: 100, "squall.spark.batch.max.attempts": 2,
               "squall.spark.batch.retry.backoff.ms": 10}


def _run_with_store_refusing(request, runner: str, topology, pattern: str) -> None:
    """Local runner (no checkpoint): the batch's tuples fail, with the error reported. Spark (a
    batch is a transaction): the batch is not committed but run again, and once its attempts are
    used up the run stops with the sink's error, nothing of the batch applied."""
    if runner == "local":
        result = complete_topology(topology, {MAX_TUPLES: 100}, runner=runner,
                                   mocked_sources=MockedSources({"events": ROWS}))
        _assert_failed_with(result, pattern)
        return
    with pytest.raises(SquallError) as info:
        complete_topology(topology, RETRY_TWICE, runner=runner,
                          mocked_sources=MockedSources({"events": ROWS}))
    message = str(info.value)
    assert re.match(r"batch \d+ could not commit in 2 attempts \(squall\.spark\.batch\."
                    r"max\.attempts=2\); last error: \[store:", message), message
    last = message.split("]", 1)[1].split(". Nothing of it was committed")[0]
    assert re.search(pattern.replace("^", "^ SinkWriteError: "), last), last
    assert message.endswith("a restart with the same checkpoint location runs it again")


def _assert_failed_with(result, pattern: str) -> None:
    assert result.acked("events") == []
    assert sorted(result.failed("events")) == list(range(len(ROWS)))
    assert result.stats["store"].acked == 0 and result.stats["store"].failed == len(ROWS)
    assert result.errors, "the failure must be reported"
    for e in result.errors:
        assert isinstance(e.error, SinkError), repr(e.error)
        assert e.component == "store" and e.error.component == "store"
        assert re.search(pattern, str(e.error)), str(e.error)


def test_redis_down_is_a_clear_error_and_nothing_is_committed(request, runner):
    port = free_port()  # nothing listens there
    _run_with_store_refusing(
        request, runner, redis_only_topology(port, None),
        rf"^RedisSink cannot reach Redis at 127\.0\.0\.1:{port} \(db 0\) for batch \d+ "
        rf"of task \d: .*tuples are not written \[component 'store'\]$")


def test_redis_wrong_password_is_a_clear_error(request, runner, redis_server):
    port = redis_server.port
    _run_with_store_refusing(
        request, runner, redis_only_topology(port, "wrong"),
        rf"^RedisSink authentication to Redis at 127\.0\.0\.1:{port} \(db 0\) failed "
        r"\(wrong or missing password\).*\[component 'store'\]$")
    assert not redis_server.client.exists("never")


# ---- a real crash: SIGKILL the Spark driver mid-batch, restart on the checkpoint ----------------

DRIVER = textwrap.dedent(
    '''
    import json, os, sys, time
    from squall import Bolt, Config, Fields, Spout, TopologyBuilder, Values, run
    from squall.connectors import JsonLinesSink, RedisSink

    OUT, ITEMS, PORT, PASSWORD = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    class Items(Spout):
        def open(self, conf, context, collector):
            super().open(conf, context, collector)
            self.next = 0
            self.replay = []
        def next_tuple(self):
            if self.replay:
                item = self.replay.pop()
            elif self.next < ITEMS:
                item = self.next
                self.next += 1
            else:
                return
            self.collector.emit(Values(item, item % 7), msg_id=item)
        def fail(self, msg_id):
            self.replay.append(msg_id)
        def is_exhausted(self):
            return self.next >= ITEMS and not self.replay
        def declare_output_fields(self, d):
            d.declare(Fields("item", "key"))

    class Slow(Bolt):
        """Runs after the sinks' stages: widens the window in which a batch is uncommitted."""
        def execute(self, tup):
            time.sleep(0.005)
            self.collector.ack(tup)

    class Store(RedisSink):
        def cleanup(self):
            out = os.path.join(OUT, "skipped-%d.json" % self.context.this_task_id)
            with open(out, "w") as f:
                json.dump(self.batches_skipped, f)
            super().cleanup()

    b = TopologyBuilder()
    b.set_spout("items", Items())
    # Stages run in component id order: redis, then sink_files, then zz_slow.
    b.set_bolt("sink_files", JsonLinesSink(os.path.join(OUT, "jsonl")), 2).fields_grouping(
        "items", Fields("key"))
    b.set_bolt("redis", Store("127.0.0.1", PORT, password=PASSWORD, key_field="item",
                              value_field="key", hash_name="crash", prefix="crash"),
               2).fields_grouping("items", Fields("key"))
    b.set_bolt("zz_slow", Slow(), 2).shuffle_grouping("items")
    conf = Config({"squall.spark.batch.max.tuples": 40, "spark.sql.shuffle.partitions": 2})
    result = run(b.create_topology(), conf, runner="spark", master="local[2]",
                 checkpoint_location=os.path.join(OUT, "ckpt"))
    # The outcome goes to a file: stdout is shared with the JVM's and the workers' stderr, whose
    # partial lines can interleave with ours.
    with open(os.path.join(OUT, "done.json.tmp"), "w") as f:
        json.dump({"acked": result.stats["items"].acked, "errors": len(result.errors)}, f)
    os.replace(os.path.join(OUT, "done.json.tmp"), os.path.join(OUT, "done.json"))
    print("DONE", flush=True)
    '''
)


def _uncommitted_part(tmp: Path) -> int | None:
    """A batch whose sink files exist while the driver has not committed it, after the sinks
    wrote in a committed batch (so their tasks resume from a snapshot, not from `prepare`)."""
    import pickle

    commit = tmp / "ckpt" / "commit.pkl"
    committed = pickle.loads(commit.read_bytes())["batch_id"] if commit.exists() else -1
    if committed < 0 or not (tmp / "jsonl").exists():
        return None
    batches = {int(m[1]) for m in map(PART.match, os.listdir(tmp / "jsonl")) if m}
    if not any(b <= committed for b in batches):
        return None
    later = [b for b in batches if b > committed]
    return min(later) if later else None


@pytest.mark.spark
def test_sigkill_mid_batch_then_restart_writes_every_item_once(tmp_path, redis_server):
    items = 120
    (tmp_path / "driver.py").write_text(DRIVER)
    caught: list[int] = []

    def uncommitted() -> bool:
        part = _uncommitted_part(tmp_path)
        if part is not None:
            caught.append(part)
        return part is not None

    argv = [sys.executable, str(tmp_path / "driver.py"), str(tmp_path), str(items),
            str(redis_server.port), PASSWORD]
    with Restarts(tmp_path, argv, env=dict(os.environ, PYSPARK_PYTHON=sys.executable)) as crash:
        first = crash.start()
        assert crash.kill_when(first, uncommitted, 180), \
            f"never caught a half-done batch: {crash.output()}"
        killed_in = caught[-1]
        assert first.returncode == -signal.SIGKILL
        assert not (tmp_path / "done.json").exists()
        written = {p.name: p.stat().st_ino for p in (tmp_path / "jsonl").glob(
            f"part-b{killed_in:012d}-t*.jsonl")}
        records_before = read_jsonl(tmp_path / "jsonl")

        second = crash.start()
        assert crash.finish(second, 240) == 0, crash.output(tail=4000)
    assert (tmp_path / "done.json").exists(), crash.output(tail=4000)
    done = json.loads((tmp_path / "done.json").read_text())
    # Counters are the run's (docs/metrics.md): the restart acks what the first run had not
    # committed; that every item reached the sink once is checked on the records below.
    assert done["errors"] == 0 and 0 < done["acked"] <= items, crash.output(tail=4000)

    # The killed batch was replayed: its files were replaced (new inodes), not added to.
    rewritten = {p.name: p.stat().st_ino for p in (tmp_path / "jsonl").glob(
        f"part-b{killed_in:012d}-t*.jsonl")}
    assert set(written) <= set(rewritten)
    assert all(rewritten[name] != ino for name, ino in written.items())
    records = read_jsonl(tmp_path / "jsonl")
    assert len(records_before) < items
    assert sorted(r["item"] for r in records) == list(range(items)), "every item exactly once"
    assert all(r["key"] == r["item"] % 7 for r in records)
    # Redis: every item, and the replayed batch was skipped by the task(s) that had applied it.
    assert redis_server.client.hgetall("crash") == {str(i): str(i % 7) for i in range(items)}
    skipped = sum(json.loads(p.read_text()) for p in tmp_path.glob("skipped-*.json"))
    assert skipped >= 1


# ---- the sink's store down, then back: nothing applied twice upstream -------------------------


class RunningCount(StatefulBolt):
    """Counts per word in its state; passes each record on with the word's running count."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word = tup["word"]
        n = self.state.get(word, 0) + 1
        self.state.put(word, n)
        self.collector.emit(Values(f"{tup['id']}", f"{word}:{n}"), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "count"))


@pytest.mark.spark
def test_redis_sink_down_then_back_on_spark_applies_every_batch_once(tmp_path, spark_session):
    """On Spark a batch whose sink cannot write is not committed but run again: the stateful
    bolt upstream counts each record once (with failed tuples replayed by the spout, as before,
    its counts went past the true totals), and every record reaches Redis once the store is
    back."""
    import threading

    from squall.runtime.spark.driver import SparkRunner

    port = free_port()
    b = TopologyBuilder()
    b.set_spout("events", MemorySource({"p0": ROWS[:12], "p1": ROWS[12:]},
                                       Fields("id", "word", "n")), 2)
    b.set_bolt("count", RunningCount(), 2).fields_grouping("events", Fields("word"))
    b.set_bolt("store", RedisSink("127.0.0.1", port, key_field="id", value_field="count",
                                  hash_name="out", timeout=1.0), 2).shuffle_grouping("count")
    conf = {MAX_TUPLES: 8, "topology.state.provider": "durable",
            "squall.spark.batch.retry.backoff.ms": 200}
    spark_runner = SparkRunner(b.create_topology(), conf,
                               checkpoint_location=str(tmp_path / "ckpt"), session=spark_session)
    results: list = []
    runner = threading.Thread(target=lambda: results.append(spark_runner.run()))
    runner.start()
    deadline = time.monotonic() + 180
    # Nothing listens on the port yet: wait until a batch has failed to write (and so was not
    # committed), then start Redis there.
    while not any(isinstance(e.error, SinkError) for e in list(spark_runner.errors)):
        assert runner.is_alive() and time.monotonic() < deadline
        time.sleep(0.1)
    assert spark_runner.committed == -1
    with start_redis(tmp_path, port=port) as server:
        runner.join(240)
        assert not runner.is_alive() and results
        stored = server.client.hgetall("out")
    result = results[0]
    assert sorted(int(i) for i in stored) == list(range(len(ROWS)))
    per_word: dict[str, list[int]] = {}
    for value in stored.values():
        word, n = value.rsplit(":", 1)
        per_word.setdefault(word, []).append(int(n))
    # Each word's running counts are 1..its number of records: counted once each, none lost.
    assert {w: sorted(ns) for w, ns in per_word.items()} == {
        w: list(range(1, sum(r[1] == w for r in ROWS) + 1)) for w in WORDS}
    assert any(isinstance(e.error, SinkError) for e in result.errors), result.errors
    assert result.stats["events"].failed == 0
