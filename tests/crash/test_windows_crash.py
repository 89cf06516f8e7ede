"""Crash and restart of a stored keyed windowed operator (`stateful=True`): SIGKILL, then resume.

Spark: a driver subprocess reads a JSON-lines directory (a built-in replayable source) through a
slow bolt into a keyed operator (1 s tumbling windows, count per user, on-time panes) and writes
the panes with `JsonLinesSink` (idempotent per batch). It is killed with SIGKILL while a batch is
half done (a task has written its snapshot for a batch the driver has not committed), restarted
on the same checkpoint location, and the panes written must be exactly those of an uninterrupted
run: none lost, none twice (counts would show a tuple applied twice).

Local runner (redis provider, a real redis-server that outlives the driver): Storm's protocol is
at-least-once, so the operator collects the item ids per window
(`ToSet`: applying an item twice changes nothing) and its spout replays every item not acked in an
earlier run. The driver kills itself after some panes; the restarted run resumes the windows from
the last commit, and the panes (deduplicated by key, window and pane index, as an idempotent sink
would) must be exactly the uninterrupted run's: an item acked before the crash is not replayed,
so a restart that lost the committed windows would miss it.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from support.crash import ACKED_ITEMS_SPOUT, Restarts
from support.redis_server import start_redis

ITEMS = 400
USERS = 5

COMMON = '''
import json, os, signal, sys, time
from squall import (BasicBolt, Bolt, Config, Duration, Fields, Spout, TopologyBuilder, Values,
                    run)
from squall.windows import KeyedWindowedOperator, TimeWindows, TriggerOption, accumulations

DIR = sys.argv[1]
KILL_AFTER = int(sys.argv[2])  # panes; 0: never

class Slow(BasicBolt):
    """Slow enough that a kill lands in the middle of the run."""
    def execute(self, tup, collector):
        time.sleep(0.004)
        collector.emit(list(tup.values))
    def declare_output_fields(self, d):
        d.declare(Fields("user", "n", "ts"))

def operator(accumulation):
    return KeyedWindowedOperator(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulation,
        trigger=TriggerOption.at_watermark(), allowed_lateness=Duration(0),
        watermark_delay=Duration(0), timestamp_field="ts", key_field="user", value_field="n",
        stateful=True)
'''

SPARK_DRIVER = COMMON + '''
from squall.connectors.sinks import JsonLinesSink
from squall.connectors.sources import JsonLinesSource

b = TopologyBuilder()
b.set_spout("events", JsonLinesSource(os.path.join(DIR, "in"), ["user", "n", "ts"],
                                      bounded=True, bytes_per_range=3000))
b.set_bolt("slow", Slow()).shuffle_grouping("events")
b.set_bolt("counts", operator(accumulations.Count()), 2).fields_grouping("slow", Fields("user"))
b.set_bolt("sink", JsonLinesSink(os.path.join(DIR, "out"))).shuffle_grouping("counts")
conf = Config({"spark.sql.shuffle.partitions": 2, "topology.message.timeout.secs": 120})
result = run(b.create_topology(), conf, runner="spark", master="local[2]",
             checkpoint_location=os.path.join(DIR, "ckpt"))
with open(os.path.join(DIR, "done.json.tmp"), "w") as f:
    json.dump({"errors": [str(e.error) for e in result.errors]}, f)
os.replace(os.path.join(DIR, "done.json.tmp"), os.path.join(DIR, "done.json"))
'''

LOCAL_DRIVER = (COMMON + '''
ITEMS, USERS = __ITEMS__, __USERS__
ACKED = os.path.join(DIR, "acked.txt")

''' + ACKED_ITEMS_SPOUT + '''
class Items(AckedItems):
    def values(self, i):
        return Values("u%d" % (i % USERS), i, 10 * i)
    def declare_output_fields(self, d):
        d.declare(Fields("user", "n", "ts"))

class Sink(Bolt):
    """Appends every pane as one JSON line (one write: a kill cannot cut it)."""
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = 0
    def execute(self, tup):
        user, start, end, value, timing, index, _retraction = tup.values
        line = json.dumps([user, start, end, sorted(value), timing, index]) + "\\n"
        fd = os.open(os.path.join(DIR, "panes.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line.encode())
        os.close(fd)
        self.seen += 1
        if KILL_AFTER and self.seen >= KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        self.collector.ack(tup)

b = TopologyBuilder()
b.set_spout("events", Items())
b.set_bolt("slow", Slow()).shuffle_grouping("events")
b.set_bolt("sets", operator(accumulations.ToSet()), 2).fields_grouping("slow", Fields("user"))
b.set_bolt("sink", Sink()).shuffle_grouping("sets")
conf = Config({"topology.state.provider": "redis",
               "topology.state.provider.config": {"port": int(os.environ["REDIS_PORT"])},
               "topology.state.checkpoint.interval.ms": 100})
result = run(b.create_topology(), conf, runner="local")
with open(os.path.join(DIR, "done.json.tmp"), "w") as f:
    json.dump({"errors": [str(e.error) for e in result.errors]}, f)
os.replace(os.path.join(DIR, "done.json.tmp"), os.path.join(DIR, "done.json"))
''').replace("__ITEMS__", str(ITEMS)).replace("__USERS__", str(USERS))


def _restarts(tmp: Path, kill_after: list[int], redis_port: int = 0) -> Restarts:
    """The harness for `tmp/driver.py`: start n kills itself after `kill_after[n]` panes (0:
    never)."""
    return Restarts(tmp, lambda n: [sys.executable, str(tmp / "driver.py"), str(tmp),
                                    str(kill_after[n])],
                    env=dict(os.environ, PYSPARK_PYTHON=sys.executable,
                             REDIS_PORT=str(redis_port)))


def _windows() -> dict[tuple[str, int], list[int]]:
    """The uninterrupted run: items per (user, window start)."""
    out: dict[tuple[str, int], list[int]] = {}
    for i in range(ITEMS):
        out.setdefault((f"u{i % USERS}", 10 * i - 10 * i % 1000), []).append(i)
    return out


def _done(tmp: Path, output: str) -> None:
    assert (tmp / "done.json").exists(), output
    assert json.loads((tmp / "done.json").read_text())["errors"] == []


@pytest.mark.spark
def test_spark_sigkill_mid_batch_gives_exactly_the_uninterrupted_panes(tmp_path):
    from squall.connectors.sinks import read_jsonl

    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "events.jsonl", "w") as f:
        for i in range(ITEMS):
            f.write(json.dumps({"user": f"u{i % USERS}", "n": i, "ts": 10 * i}) + "\n")
    (tmp_path / "driver.py").write_text(SPARK_DRIVER)
    ckpt = tmp_path / "ckpt"
    with _restarts(tmp_path, [0, 0]) as crash:
        first = crash.start()
        assert crash.kill_mid_batch(first, ckpt), crash.output()
        assert not (tmp_path / "done.json").exists()
        # The stored operator prepared state for the batch the driver had not committed.
        import sqlite3

        committed = pickle.loads((ckpt / "commit.pkl").read_bytes())["batch_id"]
        versions = [r[0] for db in (ckpt / "state").glob("counts-*.sqlite")
                    for r in sqlite3.connect(db).execute("SELECT DISTINCT txid FROM pending")]
        snapshots = [int(s.stem[6:]) for s in (ckpt / "tasks").glob("task=*/batch=*.pkl")]
        assert max(snapshots) > committed, (snapshots, committed)
        second = crash.start()
        assert crash.finish(second, 300) == 0, crash.output(tail=4000)
        _done(tmp_path, crash.output(tail=4000))
    panes = sorted((r["key"], r["window_start"], r["window_end"], r["value"], r["timing"],
                    r["pane_index"], r["is_retraction"]) for r in read_jsonl(tmp_path / "out"))
    expected = sorted((user, start, start + 1000, len(items), "ON_TIME", 0, False)
                      for (user, start), items in _windows().items())
    assert panes == expected, (versions, committed)


def test_local_restart_resumes_the_windows_from_the_last_commit(tmp_path):
    (tmp_path / "driver.py").write_text(LOCAL_DRIVER)
    # The state outlives the driver, as a real Redis would.
    with start_redis(tmp_path) as r, _restarts(tmp_path, [12, 0], redis_port=r.port) as crash:
        first = crash.start()
        assert crash.finish(first, 120) == -signal.SIGKILL, crash.output()
        assert not (tmp_path / "done.json").exists()
        acked = {int(x) for x in (tmp_path / "acked.txt").read_text().split()}
        assert 0 < len(acked) < ITEMS  # a commit before the crash, and work left after it
        second = crash.start()
        assert crash.finish(second, 120) == 0, crash.output()
        _done(tmp_path, crash.output())
    panes: dict[tuple[str, int, int], list] = {}
    for line in (tmp_path / "panes.jsonl").read_text().splitlines():
        user, start, end, value, timing, index = json.loads(line)
        assert (end, timing) == (start + 1000, "ON_TIME")
        panes[(user, start, index)] = value  # an idempotent sink: a replayed pane overwrites
    assert panes == {(user, start, 0): items for (user, start), items in _windows().items()}


def test_driver_sources_are_valid_python():
    compile(textwrap.dedent(LOCAL_DRIVER), "local", "exec")
    compile(textwrap.dedent(SPARK_DRIVER), "spark", "exec")
