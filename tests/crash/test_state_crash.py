"""Crash tests of stateful bolts: kill the process at random points, restart, check the state.

Local runner (Storm's protocol, durable state): a driver subprocess is killed with SIGKILL during
execute, between prepare and commit, during a commit (one task committed, the other not), or at a
random moment, then restarted on the same state directory. Its spout replays every item it has
not seen acked (acks are written to a file at once). After the restart the committed state must be
consistent (every count equals the applications recorded with it, in one commit), nothing may be
lost, and an item acked before the crash must have been applied exactly once.

Spark: the driver is killed mid-batch (a task has prepared the batch's state, the driver has not
committed the batch); after the restart every count is exact.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from support.crash import ACKED_ITEMS_SPOUT, Restarts

KEYS = 5  # the drivers' `i % 5`

COMMON = '''
import json, os, signal, sys, time
from squall import Config, Fields, Spout, StatefulBolt, TopologyBuilder, Values, run

DIR = sys.argv[1]
ITEMS = int(sys.argv[2])
KILL_POINT, KILL_AFTER = sys.argv[3], int(sys.argv[4])
ACKED = os.path.join(DIR, "acked.txt")
SLEEP = float(sys.argv[5])  # per tuple: slow enough that kills land mid-run

''' + ACKED_ITEMS_SPOUT + '''
class Items(AckedItems):
    def values(self, i):
        return Values(i, i % 5)
    def declare_output_fields(self, d):
        d.declare(Fields("item", "key"))

class Count(StatefulBolt):
    """count:<key> and, in the same commit, how often each item was applied."""
    def init_state(self, state):
        self.state = state
        self.calls = {}
    def _maybe_die(self, point):
        if point != KILL_POINT:
            return
        if point == "pre_commit_second" and self.context.this_task_index != 1:
            return
        n = self.calls[point] = self.calls.get(point, 0) + 1
        if n >= KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
    def execute(self, tup):
        self._maybe_die("execute")
        time.sleep(SLEEP)
        i, k = tup["item"], tup["key"]
        self.state.put(("item", i), self.state.get(("item", i), 0) + 1)
        self.state.put(("count", k), self.state.get(("count", k), 0) + 1)
        self.collector.emit(Values(i), anchors=tup)
        self.collector.ack(tup)
    def pre_prepare(self, txid):
        self._maybe_die("pre_prepare")
    def pre_commit(self, txid):
        self._maybe_die("pre_commit")
        self._maybe_die("pre_commit_second")
    def declare_output_fields(self, d):
        d.declare(Fields("item"))

b = TopologyBuilder()
b.set_spout("items", Items())
b.set_bolt("count", Count(), 2).fields_grouping("items", Fields("key"))
topology = b.create_topology()
'''

LOCAL_DRIVER = COMMON + '''
from squall.state.providers import new_state
conf = Config({"topology.state.provider": "durable",
               "topology.state.provider.config": {"dir": os.path.join(DIR, "state")},
               "topology.state.checkpoint.interval.ms": 100})
result = run(topology, conf, runner="local")
state = {}
for task in topology.component_tasks("count"):
    for key, value in new_state(conf, "count-%d" % task):
        state[repr(key)] = value
with open(os.path.join(DIR, "done.json.tmp"), "w") as f:
    json.dump({"state": state, "errors": [str(e.error) for e in result.errors]}, f)
os.replace(os.path.join(DIR, "done.json.tmp"), os.path.join(DIR, "done.json"))
'''

SPARK_DRIVER = COMMON + '''
from squall.state.providers import new_state
ckpt = os.path.join(DIR, "ckpt")
conf = Config({"squall.spark.batch.max.tuples": 40, "spark.sql.shuffle.partitions": 2})
result = run(topology, conf, runner="spark", master="local[2]", checkpoint_location=ckpt)
state = {}
for task in topology.component_tasks("count"):
    for key, value in new_state(conf, "count-%d" % task, default="durable",
                                base_dir=os.path.join(ckpt, "state")):
        state[repr(key)] = value
with open(os.path.join(DIR, "done.json.tmp"), "w") as f:
    json.dump({"state": state, "errors": [str(e.error) for e in result.errors]}, f)
os.replace(os.path.join(DIR, "done.json.tmp"), os.path.join(DIR, "done.json"))
'''


def _restarts(tmp: Path, items: int, starts: list[tuple[str, int, float]]) -> Restarts:
    """The harness for `tmp/driver.py` on `items` items: start n dies at kill point
    `starts[n][0]` (its `starts[n][1]`-th occurrence; "none": never) and pauses `starts[n][2]`
    seconds per tuple."""
    def argv(n: int) -> list[str]:
        point, after, sleep = starts[n]
        return [sys.executable, str(tmp / "driver.py"), str(tmp), str(items), point, str(after),
                str(sleep)]
    return Restarts(tmp, argv, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))


def _acked(tmp: Path) -> set[int]:
    path = tmp / "acked.txt"
    return {int(x) for x in path.read_text().split()} if path.exists() else set()


def _check(tmp: Path, items: int, acked_before: set[int], exact: bool) -> None:
    done = json.loads((tmp / "done.json").read_text())
    assert done["errors"] == []
    state = done["state"]
    applied = {i: state.get(repr(("item", i)), 0) for i in range(items)}
    assert all(n >= 1 for n in applied.values()), "an item was lost"
    for k in range(KEYS):  # the counts and the per-item record were committed together
        assert state[repr(("count", k))] == sum(n for i, n in applied.items() if i % KEYS == k)
    for i in acked_before:
        assert applied[i] == 1, f"item {i} was acked before the crash, then applied again"
    if exact:
        assert set(applied.values()) == {1}
    assert _acked(tmp) == set(range(items)), "every item acked in the end"


LOCAL_CASES = ([("execute", n) for n in (1, 40, 170)]
               + [("pre_prepare", n) for n in (1, 3)]
               + [("pre_commit", n) for n in (1, 2, 4)]
               + [("pre_commit_second", n) for n in (1, 2, 3)]
               + [("random", n) for n in range(6)])


@pytest.mark.parametrize(("point", "after"), LOCAL_CASES)
def test_local_kill_and_restart_keeps_committed_state_consistent(tmp_path, point, after):
    items = 600 if point == "random" else 300
    (tmp_path / "driver.py").write_text(LOCAL_DRIVER)
    rng = random.Random(after)
    with _restarts(tmp_path, items, [(point, after, 0.0005), ("none", 0, 0.0005)]) as crash:
        first = crash.start()
        if point == "random":
            # The spout has opened: the topology is running.
            crash.wait_until(first, lambda: (tmp_path / "acked.txt").exists(), 60)
            crash.kill_after(first, rng.uniform(0.0, 0.8))
        rc = crash.finish(first, 120)
        if point != "random":
            assert rc == -signal.SIGKILL, crash.output()
            assert not (tmp_path / "done.json").exists()
        else:  # a random kill may land after the run's end: the restart must then change nothing
            assert rc in (0, -signal.SIGKILL), crash.output()
            (tmp_path / "done.json").unlink(missing_ok=True)
        acked_before = _acked(tmp_path)
        second = crash.start()
        assert crash.finish(second, 120) == 0, crash.output()
    _check(tmp_path, items, acked_before, exact=False)


@pytest.mark.spark
def test_spark_sigkill_mid_batch_counts_are_exact(tmp_path):
    items = 300
    (tmp_path / "driver.py").write_text(SPARK_DRIVER)
    ckpt = tmp_path / "ckpt"
    with _restarts(tmp_path, items, [("none", 0, 0.004)] * 2) as crash:
        first = crash.start()
        assert crash.kill_mid_batch(first, ckpt), crash.output()
        # A task prepared the uncommitted batch's state: a version above the committed batch.
        versions = []
        for db in (ckpt / "state").glob("count-*.sqlite"):
            import sqlite3

            versions += [r[0] for r in sqlite3.connect(db).execute("SELECT txid FROM pending")]
        committed = pickle.loads((ckpt / "commit.pkl").read_bytes())["batch_id"]
        assert any(v > committed for v in versions), (versions, committed)
        second = crash.start()
        assert crash.finish(second, 300) == 0, crash.output(tail=4000)
    _check(tmp_path, items, set(), exact=True)


def test_driver_sources_are_valid_python():
    compile(textwrap.dedent(LOCAL_DRIVER), "local", "exec")
    compile(textwrap.dedent(SPARK_DRIVER), "spark", "exec")
