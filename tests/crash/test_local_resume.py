"""The local runner with a checkpoint location: resume, and exactly-once under SIGKILL.

Pipeline (the issue's): `JsonLinesSource` over a directory of files of records with unique ids
-> a `StatefulBolt` counting per key (state provider memory, durable or redis), passing each
record on with its running count -> a sink (JSON lines, Parquet or Redis). A driver subprocess
is killed with SIGKILL (its process group) at random moments or at chosen points (after a sink
staged a batch and before the commit record; after the commit record, before the state is
promoted or the sink published; during a restart's recovery), and restarted on the same
checkpoint until it completes. Then every input id must be in the sink exactly once, the final
state must hold the true counts, and, per key, the running counts written with the ids must be
exactly 1..n (an update applied twice, or lost, shows as a gap or a repeat).

Fast in-process tests: a restart reads only what is new (new files, lines appended to a file),
positions count read-ahead records as unread, another topology's checkpoint is refused, and
`squall run --runner local --checkpoint` is accepted.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.bolts import RunningCount
from support.crash import Restarts
from support.examples import load_example
from support.redis_server import start_redis

from squall import Config, Fields, TopologyBuilder, Values, WindowedBolt, run
from squall import Count as CountWindow
from squall.connectors import (
    JsonLinesSink,
    JsonLinesSource,
    MemorySource,
    read_jsonl,
    read_parquet,
)
from squall.runtime.local.transactions import LocalCheckpointError

KEYS = 7

DRIVER = r'''
import json, os, signal, sys, time
from squall import Config, Fields, StatefulBolt, TopologyBuilder, Values, run
from squall.connectors import JsonLinesSink, JsonLinesSource, ParquetSink, RedisSink

ARGS = json.loads(sys.argv[1])
DIR = ARGS["dir"]


def maybe_die(point):
    # Read from the environment at call time: restored instances carry their class by value,
    # with the globals of the process that pickled them.
    if os.environ.get("KILL_POINT") != point:
        return
    n = int(os.environ.get("KILL_SEEN", "0")) + 1
    os.environ["KILL_SEEN"] = str(n)
    if n >= int(os.environ.get("KILL_AFTER", "1")):
        os.kill(os.getpid(), signal.SIGKILL)


class Count(StatefulBolt):
    def init_state(self, state):
        self.state = state
    def execute(self, tup):
        key = tup["key"]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        if ARGS.get("pause") and tup["id"] % 50 == 0:
            time.sleep(ARGS["pause"])  # a run long enough for kills to land in it
        self.collector.emit(Values(tup["id"], key, n), anchors=tup)
        self.collector.ack(tup)
    def pre_prepare(self, txid):
        maybe_die("pre_prepare")
    def pre_commit(self, txid):
        maybe_die("pre_commit")
    def cleanup(self):
        # After the run's last commit: the state as committed.
        with open(os.path.join(DIR, "state-%d.json" % self.context.this_task_id), "w") as f:
            json.dump(dict(self.state.items()), f)
    def declare_output_fields(self, d):
        d.declare(Fields("id", "key", "n"))


def killing(cls):
    class Killing(cls):
        def stage_batch(self, batch_id, tuples):
            super().stage_batch(batch_id, tuples)
            maybe_die("stage")
        def publish_batch(self, batch_id):
            maybe_die("publish")
            super().publish_batch(batch_id)
        def recover(self, committed, run_id):
            super().recover(committed, run_id)
            maybe_die("recover")
    return Killing


out = os.path.join(DIR, "out")
if ARGS["sink"] == "jsonl":
    sink = killing(JsonLinesSink)(out)
elif ARGS["sink"] == "parquet":
    sink = killing(ParquetSink)(out)
else:
    sink = killing(RedisSink)("127.0.0.1", ARGS["redis_port"], key_field="id",
                              value_field="entry", hash_name="out")

b = TopologyBuilder()
b.set_spout("src", JsonLinesSource(os.path.join(DIR, "in"), ["id", "key"], bounded=True), 2)
b.set_bolt("count", Count(), 2).fields_grouping("src", Fields("key"))
if ARGS["sink"] == "redis":
    from squall import BasicBolt

    class Entry(BasicBolt):  # one field for the Redis value: "key:n"
        def execute(self, tup, collector):
            collector.emit(Values(tup["id"], "%s:%d" % (tup["key"], tup["n"])))
        def declare_output_fields(self, d):
            d.declare(Fields("id", "entry"))

    b.set_bolt("entry", Entry(), 2).shuffle_grouping("count")
    b.set_bolt("out", sink, 2).fields_grouping("entry", Fields("id"))
else:
    b.set_bolt("out", sink, 2).shuffle_grouping("count")
# max.spout.pending bounds a batch (its tuples are acked at its commit), so the input spans
# many batches however fast the machine reads it and a kill point's n-th occurrence comes.
conf = {"squall.local.batch.ms": ARGS["batch_ms"], "topology.max.spout.pending": 40,
        "topology.state.provider": ARGS["provider"]}
if ARGS["provider"] == "durable":
    conf["topology.state.provider.config"] = {"dir": os.path.join(DIR, "state")}
elif ARGS["provider"] == "redis":
    conf["topology.state.provider.config"] = {"port": ARGS["redis_port"], "retry_timeout": 5}
result = run(b.create_topology(), Config(conf), runner="local",
             checkpoint_location=os.path.join(DIR, "ckpt"))
with open(os.path.join(DIR, "done.json.tmp"), "w") as f:
    json.dump({"errors": [str(e.error) for e in result.errors]}, f)
os.replace(os.path.join(DIR, "done.json.tmp"), os.path.join(DIR, "done.json"))
'''


def _write_input(directory: Path, files: int, per_file: int, first: int = 0) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    i = first
    for f in range(files):
        lines = []
        for _ in range(per_file):
            lines.append(json.dumps({"id": i, "key": f"k{i % KEYS}"}) + "\n")
            i += 1
        (directory / f"part-{first + f * per_file:08d}.jsonl").write_text("".join(lines))
    return i


def _restarts(tmp: Path, args: dict) -> Restarts:
    """The harness for `tmp/driver.py` with `args`. A start dies at the `KILL_AFTER`-th
    occurrence of kill point `KILL_POINT` (environment; "none" by default)."""
    env = {k: v for k, v in os.environ.items() if k != "KILL_SEEN"}
    return Restarts(tmp, [sys.executable, str(tmp / "driver.py"), json.dumps(args)],
                    env=dict(env, KILL_POINT="none", KILL_AFTER="1"))


def _sink_entries(tmp: Path, args: dict, redis_client=None) -> list[tuple[int, str, int]]:
    """(id, key, running count) of every record the sink holds."""
    if args["sink"] == "jsonl":
        return [(r["id"], r["key"], r["n"]) for r in read_jsonl(tmp / "out")]
    if args["sink"] == "parquet":
        return [(r["id"], r["key"], r["n"]) for r in read_parquet(tmp / "out")]
    out = []
    for k, v in redis_client.hgetall("out").items():
        key, _, n = v.rpartition(":")
        out.append((int(k), key, int(n)))
    return out


def _committed(tmp: Path) -> int:
    """The batch id of the checkpoint's commit record (-1 before the first)."""
    try:
        return pickle.loads((tmp / "ckpt" / "commit.pkl").read_bytes())["batch_id"]
    except FileNotFoundError:
        return -1


def _check(tmp: Path, args: dict, total: int, redis_client=None) -> None:
    done = json.loads((tmp / "done.json").read_text())
    assert done["errors"] == []
    entries = _sink_entries(tmp, args, redis_client)
    ids = Counter(i for i, _k, _n in entries)
    assert [i for i, c in ids.items() if c > 1] == [], "ids written more than once"
    assert sorted(ids) == list(range(total)), f"{total - len(ids)} ids lost"
    true = Counter(f"k{i % KEYS}" for i in range(total))
    state: dict[str, int] = {}
    for path in tmp.glob("state-*.json"):
        state.update(json.loads(path.read_text()))
    assert state == dict(true), "the state's counts are not the true counts"
    ranks: dict[str, list[int]] = {}
    for _i, key, n in entries:
        ranks.setdefault(key, []).append(n)
    for key, ns in ranks.items():
        assert sorted(ns) == list(range(1, true[key] + 1)), f"running counts of {key}"


def _prepare(tmp: Path, provider: str, sink: str, files: int, per_file: int,
             batch_ms: int = 20, redis_port: int = 0) -> tuple[dict, int]:
    (tmp / "driver.py").write_text(DRIVER)
    total = _write_input(tmp / "in", files, per_file)
    return {"dir": str(tmp), "provider": provider, "sink": sink, "batch_ms": batch_ms,
            "redis_port": redis_port}, total


def test_sigkill_at_random_moments_then_exactly_once(tmp_path):
    """The issue's pipeline: 30 files of 1,000 records, durable state, JSON lines sink, killed
    at random moments, alternately while it processes (after a commit) and while it starts
    (imports, recovery), then left to finish."""
    args, total = _prepare(tmp_path, "durable", "jsonl", files=30, per_file=1000,
                           batch_ms=50)
    args["pause"] = 0.003
    rng = random.Random(12)
    kills = mid_run = 0
    with _restarts(tmp_path, args) as crash:
        for life in range(8):
            proc = crash.start()
            if life % 2:  # start-up, recovery, or the first batches
                crash.kill_after(proc, rng.uniform(0.0, 0.4))
            else:  # after progress (a new commit, or 1.5 s), a random moment later
                before = _committed(tmp_path)
                crash.wait_until(proc, lambda b=before: _committed(tmp_path) > b, 1.5)
                crash.kill_after(proc, rng.uniform(0.0, 0.15))
            rc = crash.finish(proc, 120)
            if rc == 0:
                break
            assert rc == -signal.SIGKILL, crash.output()
            kills += 1
            mid_run += life % 2 == 0
        else:
            assert crash.finish(crash.start(), 120) == 0, crash.output()
        assert mid_run >= 3, f"only {mid_run} kills landed while the run processed records"
        committed = sorted(n for n in os.listdir(tmp_path / "out") if n.startswith("part-"))
        assert len(committed) > 2 * kills, "the kills should fall between commits"
        _check(tmp_path, args, total)
        # A restart after completion reads nothing new and changes nothing.
        (tmp_path / "done.json").unlink()
        assert crash.finish(crash.start(), 120) == 0, crash.output()
    _check(tmp_path, args, total)


# (provider, sink, kill points of consecutive starts, the occurrence each kills at)
KILL_CASES = [
    ("durable", "jsonl", ["stage"], 3),  # a sink wrote its batch, no commit record yet
    ("durable", "jsonl", ["pre_commit"], 3),  # commit record written, state not promoted
    ("durable", "jsonl", ["publish", "recover"], 2),  # committed, not published; then killed
    ("durable", "jsonl", ["pre_prepare", "stage", "pre_commit"], 2),  # in the restart's recovery
    ("memory", "jsonl", ["stage", "pre_commit"], 2),  # memory state travels in the record
    ("memory", "parquet", ["publish", "stage"], 2),
    ("redis", "redis", ["stage", "publish", "recover"], 2),
    ("redis", "jsonl", ["pre_commit"], 2),
]


@pytest.mark.parametrize(("provider", "sink", "points", "after"), KILL_CASES,
                         ids=[f"{p}-{s}-{'+'.join(k)}" for p, s, k, _ in KILL_CASES])
def test_sigkill_at_a_commit_point_then_exactly_once(tmp_path, provider, sink, points, after):
    with start_redis(tmp_path) if "redis" in (provider, sink) else _nothing() as redis:
        port = redis.port if redis is not None else 0
        args, total = _prepare(tmp_path, provider, sink, files=4, per_file=250,
                               batch_ms=10, redis_port=port)
        with _restarts(tmp_path, args) as crash:
            for point in points:
                proc = crash.start(KILL_POINT=point, KILL_AFTER=str(after))
                assert crash.finish(proc, 120) == -signal.SIGKILL, (point, crash.output())
            assert crash.finish(crash.start(), 120) == 0, crash.output()
        _check(tmp_path, args, total, redis.client if redis is not None else None)
        if sink == "redis":
            assert redis.client.keys("squall:out:staged:*") == [], "staged batches left"
        else:
            assert [n for n in os.listdir(tmp_path / "out") if n.startswith(".")] == []


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- in process: what a restart reads -------------------------------------------------------



def _pipeline(tmp: Path, bounded: bool = True):
    b = TopologyBuilder()
    b.set_spout("src", JsonLinesSource(str(tmp / "in"), ["id", "key"], bounded=bounded), 2)
    b.set_bolt("count", RunningCount(), 2).fields_grouping("src", Fields("key"))
    b.set_bolt("out", JsonLinesSink(tmp / "out"), 2).shuffle_grouping("count")
    conf = Config({"topology.state.provider": "durable",
                   "topology.state.provider.config": {"dir": str(tmp / "state")}})
    return b.create_topology(), conf


def _emitted(result) -> int:
    return result.stats["src"].emitted


def test_restart_reads_only_new_files_and_appended_lines(tmp_path):
    topology, conf = _pipeline(tmp_path)
    ckpt = str(tmp_path / "ckpt")
    n = _write_input(tmp_path / "in", files=3, per_file=100)
    first = run(topology, conf, runner="local", checkpoint_location=ckpt)
    assert (_emitted(first), first.errors) == (300, [])
    again = run(topology, conf, runner="local", checkpoint_location=ckpt)
    assert _emitted(again) == 0  # nothing new: nothing read
    n = _write_input(tmp_path / "in", files=2, per_file=50, first=n)
    with open(tmp_path / "in" / "part-00000000.jsonl", "a") as f:  # lines appended to a file
        for i in range(n, n + 7):
            f.write(json.dumps({"id": i, "key": f"k{i % KEYS}"}) + "\n")
    n += 7
    second = run(topology, conf, runner="local", checkpoint_location=ckpt)
    assert (_emitted(second), second.errors) == (107, [])
    records = read_jsonl(tmp_path / "out")
    assert sorted(r["id"] for r in records) == list(range(n))
    true = Counter(f"k{i % KEYS}" for i in range(n))
    for key in true:
        assert sorted(r["n"] for r in records if r["key"] == key) == list(range(1, true[key] + 1))
    # A run without the checkpoint location starts over (and says so by reading everything).
    fresh = run(topology, conf, runner="local")
    assert _emitted(fresh) == n


def test_a_fresh_checkpoint_removes_part_files_it_did_not_commit(tmp_path):
    topology, conf = _pipeline(tmp_path)
    _write_input(tmp_path / "in", files=2, per_file=20)
    run(topology, conf, runner="local")  # no checkpoint: batch ids from 0, part files left
    conf["topology.state.provider.config"] = {"dir": str(tmp_path / "state2")}
    run(topology, conf, runner="local", checkpoint_location=str(tmp_path / "ckpt"))
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out")) == list(range(40))


def test_position_counts_read_ahead_records_as_unread():
    source = MemorySource({"p0": [[i] for i in range(5)], "p1": [[9]]}, ["x"])
    emitted: list = []

    class Collector:
        def emit(self, values, msg_id=None, stream="default"):
            emitted.append(msg_id)

    source.collector = Collector()
    source.next_tuple()  # plans and buffers everything, emits ('p0', 0)
    source.next_tuple()
    source.fail(("p0", 0))
    position = source.position()
    assert position["offsets"] == {"p0": 2, "p1": 0}
    assert position["replay"] == [("p0", 0)]
    fresh = MemorySource({"p0": [[i] for i in range(5)], "p1": [[9]]}, ["x"])
    fresh.collector = Collector()
    fresh.seek(position)
    emitted.clear()
    while not fresh.is_exhausted():
        fresh.next_tuple()
    assert emitted == [("p0", 0), ("p0", 2), ("p0", 3), ("p0", 4), ("p1", 0)]


def test_another_topologys_checkpoint_is_refused(tmp_path):
    topology, conf = _pipeline(tmp_path)
    _write_input(tmp_path / "in", files=1, per_file=5)
    ckpt = str(tmp_path / "ckpt")
    run(topology, conf, runner="local", checkpoint_location=ckpt)
    b = TopologyBuilder()
    b.set_spout("src", JsonLinesSource(str(tmp_path / "in"), ["id", "key"], bounded=True), 3)
    b.set_bolt("out", JsonLinesSink(tmp_path / "out2")).shuffle_grouping("src")
    with pytest.raises(LocalCheckpointError, match="different topology"):
        run(b.create_topology(), conf, runner="local", checkpoint_location=ckpt)


def test_cli_local_runner_accepts_a_checkpoint(tmp_path):
    _write_input(tmp_path / "in", files=2, per_file=10)
    (tmp_path / "topo.py").write_text(
        "import os\n"
        "from squall import TopologyBuilder\n"
        "from squall.connectors import JsonLinesSink, JsonLinesSource\n"
        "D = os.path.dirname(os.path.abspath(__file__))\n"
        "b = TopologyBuilder()\n"
        "b.set_spout('src', JsonLinesSource(os.path.join(D, 'in'), ['id', 'key'],"
        " bounded=True))\n"
        "b.set_bolt('out', JsonLinesSink(os.path.join(D, 'out'))).shuffle_grouping('src')\n"
        "topology = b.create_topology()\n")
    squall = [sys.executable, "-c", "from squall.cli.main import main; main()"]
    cmd = [*squall, "run", str(tmp_path / "topo.py:topology"), "--runner", "local",
                    "--checkpoint", str(tmp_path / "ckpt"), "--progress-every", "0"]
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out")) == list(range(20))


def test_local_cluster_resumes_from_its_checkpoint(tmp_path):
    from squall import LocalCluster

    topology, conf = _pipeline(tmp_path)
    ckpt = str(tmp_path / "ckpt")
    n = _write_input(tmp_path / "in", files=2, per_file=30)
    emitted = []
    for _ in range(2):
        with LocalCluster() as cluster:
            cluster.submit_topology("t", conf, topology, checkpoint_location=ckpt)
            assert cluster.wait_until_complete("t", timeout_s=60)
            emitted.append(cluster.get_stats("t")["src"].emitted)
        if len(emitted) == 1:
            n = _write_input(tmp_path / "in", files=1, per_file=30, first=n)
    assert emitted == [60, 30]
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out")) == list(range(n))


def test_transactional_topologies_resume_from_their_own_store_with_a_checkpoint(tmp_path):
    """A transactional topology keeps its transactions in its coordinator's store; a local
    checkpoint location is accepted (every kind runs with the same options) and a second run
    on the same store and checkpoint applies nothing twice."""
    gc = load_example("transactional_global_count")
    conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / "db")},
            "squall.transactional.progress_store": {"dir": str(tmp_path / "tx")}}
    for _ in range(2):
        topology, _ = gc.topology()
        result = run(topology, conf, runner="local", checkpoint_location=str(tmp_path / "ckpt"))
        assert result.errors == []
        assert gc.open_db(conf).get(gc.GLOBAL) == 19


class _Span(WindowedBolt):
    def execute(self, window):
        ids = [t["id"] for t in window.get()]
        self.collector.emit(Values(min(ids), max(ids), len(ids)))

    def declare_output_fields(self, d):
        d.declare(Fields("lo", "hi", "n"))


def test_a_window_holding_tuples_across_a_restart_keeps_them_and_their_trees(tmp_path):
    """An unbounded run stops with tuples in a window: the restart restores the window and the
    tuple trees it holds (ledger and spout pending), so they are neither lost nor read again,
    and their acks reach the source when the window expires them."""
    b = TopologyBuilder()
    b.set_spout("src", JsonLinesSource(str(tmp_path / "in"), ["id", "key"]))
    b.set_bolt("w", _Span().with_tumbling_window(CountWindow.of(50))).shuffle_grouping("src")
    b.set_bolt("out", JsonLinesSink(tmp_path / "out")).shuffle_grouping("w")
    topology, conf = b.create_topology(), {"squall.local.batch.ms": 20}
    ckpt = str(tmp_path / "ckpt")
    n = _write_input(tmp_path / "in", files=1, per_file=105)
    first = run(topology, conf, runner="local", duration=0.5, checkpoint_location=ckpt)
    assert (first.stats["src"].emitted, first.errors) == (105, [])
    held = first.stats["src"].pending
    assert held >= 5  # at least 100..104 wait in the window
    _write_input(tmp_path / "in", files=1, per_file=45, first=n)
    second = run(topology, conf, runner="local", duration=0.5, checkpoint_location=ckpt)
    assert (second.stats["src"].emitted, second.errors) == (45, [])
    # The window [100, 150) fired and expired the previous window's tuples, restored trees.
    assert second.stats["src"].acked == held - 5
    assert read_jsonl(tmp_path / "out") == [{"lo": 0, "hi": 49, "n": 50},
                                            {"lo": 50, "hi": 99, "n": 50},
                                            {"lo": 100, "hi": 149, "n": 50}]
