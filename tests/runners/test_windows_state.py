"""Windowed operators whose windows live in a state provider (`stateful=True`), on both runners.

The operators of test_windows_operators (hand-traced panes) run with their windows, accumulators
and sessions in the memory, durable (SQLite) and redis (a real redis-server) providers, with a
checkpoint (local) or a micro-batch (Spark) every one or two tuples, so that nearly every tuple
finds its window in the store rather than in memory: the panes must be exactly the hand-traced
ones. A state larger than the store's read cache (100 000 entries) gives exact panes, and on
Spark the task snapshots stay small: the windows are in the store, not in the snapshot.
"""

from __future__ import annotations

import glob
import os
import pickle
import sqlite3
import types

import pytest
from support.redis_server import start_redis
from test_windows_operators import (
    AT_WM,
    BASE_CONF,
    EVENTS,
    EXPECTED_FIXED,
    EXPECTED_SESSIONS,
    FIELDS,
    keyed,
)

from squall import Duration, Fields, TopologyBuilder
from squall.panes.state_mapping import META_KEY
from squall.state.backends import _CACHE_MAX, SqliteStore
from squall.state.providers import new_state
from squall.testing import FixedTupleSpout, complete_topology
from squall.windows import (
    KeyedWindowedOperator,
    SessionWindows,
    TimeWindows,
    WindowedOperator,
    accumulations,
)

# Local: at most one tuple in flight, acks held until their checkpoint commits, so every tuple
# waits for a checkpoint (interval 100 ms of simulated time). Spark: two tuples per batch.
LOCAL_STEPS = {"topology.max.spout.pending": 1, "topology.state.checkpoint.interval.ms": 100}
SPARK_STEPS = {"squall.spark.batch.max.tuples": 2}

EXPECTED_DISCARDING_TOTALS = {  # per (user, window): what the discarding panes add up to
    ("a", 0): 1 + 3 + 7, ("b", 0): 2 + 5, ("a", 1000): 4 + 6, ("b", 2000): 8,
    ("a", 3000): 10, ("b", 3000): 11}


def stored_topology():
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(EVENTS, FIELDS))
    b.set_bolt("fixed", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_early_firings_at_every(2).with_late_firings_at_every(1)
        .accumulating_fired_panes(),
        allowed_lateness=Duration.seconds(2), late_stream="late", stateful=True,
    ), 2).fields_grouping("events", Fields("user"))
    b.set_bolt("sessions", keyed(
        window=SessionWindows(Duration(300)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_early_firings_at_every(1).accumulating_and_retracting_fired_panes()
        .fire_only_updated_panes(),
        allowed_lateness=Duration.seconds(5), stateful=True,
    )).fields_grouping("events", Fields("user"))
    b.set_bolt("discarding", keyed(
        window=TimeWindows(Duration.seconds(1)), accumulation=accumulations.Sum(),
        trigger=AT_WM.with_late_firings_at_every(1), allowed_lateness=Duration.seconds(2),
        stateful=True,
    )).fields_grouping("events", Fields("user"))
    # Window propagation downstream of a stored operator, stored too: per window, all users.
    b.set_bolt("per_window", WindowedOperator(
        accumulation=accumulations.Sum(), value_field="value",
        trigger=AT_WM.with_late_firings_at_every(1).accumulating_fired_panes(), stateful=True,
    )).shuffle_grouping("discarding")
    return b.create_topology()


def run_spark(topology, conf, checkpoint):
    """`complete_topology` on Spark, in a checkpoint location the test can inspect."""
    from squall.runtime.spark.driver import SparkRunner

    runner = SparkRunner(topology, conf, capture=True, checkpoint_location=str(checkpoint))
    result = runner.run(until_complete=True, duration_ms=300_000)
    assert runner.completed
    tuples: dict[str, list] = {}
    for task, rows in runner.captures.items():
        cid = next(c for c in topology.components if task in topology.component_tasks(c))
        for _seq, stream, values in sorted(rows, key=lambda r: r[0]):
            tuples.setdefault((cid, stream), []).append((_seq, values))
    return types.SimpleNamespace(
        errors=result.errors,
        tuples=lambda cid, stream="default": [v for _s, v in sorted(tuples.get((cid, stream),
                                                                               []))])


def run(runner, topology, conf, tmp_path, steps=True):
    if runner == "spark":
        return run_spark(topology, {**BASE_CONF, **(SPARK_STEPS if steps else {}), **conf},
                         tmp_path / "ckpt")
    return complete_topology(topology, {**BASE_CONF, **(LOCAL_STEPS if steps else {}), **conf})


def namespaces(topology, component):
    return [f"{component}-{t}" for t in topology.component_tasks(component)]


def panes(result, component, stream="default"):
    return [tuple(r) for r in result.tuples(component, stream)]


def check_traced_panes(result):
    assert result.errors == []
    # Two tasks for "fixed": each user's panes keep their order; the sets are exact.
    fixed = panes(result, "fixed")
    assert sorted(fixed) == sorted(EXPECTED_FIXED)
    for user in "ab":
        assert [p for p in fixed if p[0] == user] == [p for p in EXPECTED_FIXED if p[0] == user]
    assert panes(result, "sessions") == EXPECTED_SESSIONS
    assert [late[:3] for late in result.tuples("fixed", "late")] == [["a", 9, 50]]
    totals: dict = {}
    for user, start, _end, value, _timing, _index, _retraction in panes(result, "discarding"):
        totals[(user, start)] = totals.get((user, start), 0) + value
    assert totals == EXPECTED_DISCARDING_TOTALS
    per_window: dict = {}
    for start, _end, value, *_ in panes(result, "per_window"):
        per_window[start] = value  # accumulating: the last pane is the window's total
    assert per_window == {0: 18, 1000: 10, 2000: 8, 3000: 21}


def committed_batches(path: str) -> int | None:
    return SqliteStore(path).committed_txid()


def durable(runner, tmp_path):
    """The durable provider: on Spark in its default place, `<checkpoint>/state`."""
    if runner == "spark":
        return {"topology.state.provider": "durable"}, tmp_path / "ckpt" / "state"
    return ({"topology.state.provider": "durable",
             "topology.state.provider.config": {"dir": str(tmp_path / "state")}},
            tmp_path / "state")


# The memory provider on Spark travels in the task snapshots, as the operators' default store.
@pytest.mark.parametrize("runner,provider", [
    ("local", "memory"), ("local", "durable"),
    pytest.param("spark", "durable", marks=pytest.mark.spark)], indirect=["runner"])
def test_stored_operators_give_the_traced_panes(tmp_path, runner, provider):
    conf, base = durable(runner, tmp_path)
    conf["topology.state.provider"] = provider
    topology = stored_topology()
    result = run(runner, topology, conf, tmp_path)
    check_traced_panes(result)
    if provider != "durable":
        return
    # The windows really went through the store: many commits, and what is left is committed.
    files = {os.path.basename(f): f for f in glob.glob(str(base / "*.sqlite"))}
    names = [n for c in ("fixed", "sessions", "discarding", "per_window")
             for n in namespaces(topology, c)]
    assert {f"{n}.sqlite" for n in names} <= set(files)
    [sessions] = namespaces(topology, "sessions")
    assert committed_batches(files[f"{sessions}.sqlite"]) >= 5
    meta = dict(new_state(conf, sessions, default="durable", base_dir=str(base)))[META_KEY]
    assert pickle.loads(meta)["engine"]["watermark"] == 2**63 - 1  # ended


def test_stored_operators_in_redis(tmp_path, runner):
    with start_redis(tmp_path) as r:
        conf = {"topology.state.provider": "redis",
                "topology.state.provider.config": {"host": r.host, "port": r.port,
                                                   "prefix": "w:"}}
        topology = stored_topology()
        result = run(runner, topology, conf, tmp_path)
        check_traced_panes(result)
        # One committed hash per task (namespace), and no version left uncommitted.
        keys = set(r.client.keys("w:*"))
        names = [n for c in ("fixed", "sessions", "discarding", "per_window")
                 for n in namespaces(topology, c)]
        assert {f"w:{n}" for n in names} <= keys
        assert not [k for k in keys if ":v:" in k or ":x:" in k]
        [sessions] = namespaces(topology, "sessions")
        assert int(r.client.get(f"w:{sessions}:committed")) >= 5


# ---- a state larger than the read cache ------------------------------------------------------
N_KEYS = _CACHE_MAX // 10 + 500  # x 10 sliding windows: more (key, window) entries than cached


def big_topology():
    # Every user once, at ts = 20 * i: each tuple falls into 10 windows (10 s sliding by 1 s),
    # never purged (no allowed lateness), so the state ends with N_KEYS * 10 entries.
    rows = [[f"u{i}", 1, 20 * i] for i in range(N_KEYS)]
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout(rows, FIELDS))
    b.set_bolt("big", KeyedWindowedOperator(
        window=TimeWindows(Duration.seconds(10)).slide_by(Duration.seconds(1)),
        accumulation=accumulations.Count(), trigger=AT_WM, allowed_lateness=None,
        watermark_delay=Duration(0), timestamp_field="ts", key_field="user",
        value_field="amount", stateful=True,
    )).fields_grouping("events", Fields("user"))
    # The panes are summed per window downstream, so that only a few tuples are captured.
    b.set_bolt("per_window", WindowedOperator(
        accumulation=accumulations.Sum(), value_field="value", trigger=AT_WM,
    )).global_grouping("big")
    return b.create_topology()


def test_state_larger_than_the_read_cache(tmp_path, runner):
    conf, base = durable(runner, tmp_path)
    conf["squall.spark.batch.max.tuples"] = 4000
    topology = big_topology()
    result = run(runner, topology, conf, tmp_path, steps=False)
    assert result.errors == []
    expected: dict[int, int] = {}
    for i in range(N_KEYS):
        last = 20 * i - 20 * i % 1000
        for start in range(last - 9000, last + 1, 1000):
            expected[start] = expected.get(start, 0) + 1
    got = {start: value for start, _end, value, *_ in panes(result, "per_window")}
    assert got == expected
    [big] = namespaces(topology, "big")
    db = sqlite3.connect(str(base / f"{big}.sqlite"))
    kinds: dict[str, int] = {}
    for (raw,) in db.execute("SELECT k FROM kv"):
        kind = pickle.loads(raw)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds["p"] == N_KEYS * 10 > _CACHE_MAX  # every (key, window), committed
    assert kinds["m"] == 1 and kinds["i"] < N_KEYS  # an index chunk per window and flush
    if runner == "spark":
        # The task's snapshots carry a reference to the store, not the windows.
        [task] = topology.component_tasks("big")
        snapshots = glob.glob(str(tmp_path / "ckpt" / "tasks" / f"task={task}" / "*.pkl"))
        assert snapshots
        assert max(os.path.getsize(s) for s in snapshots) < 200_000
        assert os.path.getsize(base / f"{big}.sqlite") > 5_000_000
