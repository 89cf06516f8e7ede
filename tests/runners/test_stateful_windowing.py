"""Stateful windowed bolts without crashes, on both runners and with every state provider.

One topology holds a plain `WindowedBolt` and `StatefulWindowedBolt`s in message-id and
persistent mode over the same input (a count window and an event-time window): the stateful bolts
must see exactly the plain bolt's windows, keep a per-window counter in their `KeyValueState`, ack
every input, and (persistent mode) never hold more window events in memory than allowed although
the windows are three times larger. Crash and restart: tests/crash/test_stateful_windowing_crash.py.
"""

from __future__ import annotations

import os
import pickle
import random
import time

import pytest
from support.redis_server import start_redis
from support.run_until import run_until
from support.runs import complete_cached

from squall import (
    Count,
    Duration,
    Fields,
    InvalidTopologyError,
    Spout,
    StatefulWindowedBolt,
    TopologyBuilder,
    Values,
    WindowedBolt,
)
from squall.state.base import MemoryKeyValueState
from squall.testing import FixedTupleSpout, complete_topology
from squall.tuple_windows.persistent import PartitionedQueue

N = 240
MAX_IN_MEMORY = 10  # partitions of one event; windows hold 30


class Plain(WindowedBolt):
    def execute(self, window):
        self.collector.emit(Values(window.end_timestamp if window.start_timestamp is not None
                                   else None, [t["id"] for t in window.get()], 0, 0))

    def declare_output_fields(self, d):
        d.declare(Fields("end", "ids", "n", "in_memory"))


class Stateful(StatefulWindowedBolt):
    """Emits the window and how many windows its state has counted so far."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        ids = [t["id"] for t in window]  # persistent windows stream their partitions
        n = self.state.get("windows", 0) + 1
        self.state.put("windows", n)
        self.collector.emit(Values(window.end_timestamp if window.start_timestamp is not None
                                   else None, ids, n, self.events_in_memory()))

    def declare_output_fields(self, d):
        d.declare(Fields("end", "ids", "n", "in_memory"))


def count_window(bolt):
    return bolt.with_window(Count(30), Count(7))


def time_window(bolt):
    return (bolt.with_window(Duration.seconds(3), Duration.seconds(1)).with_timestamp_field("ts")
            .with_watermark_interval(Duration.milliseconds(0)))


def build():
    rnd = random.Random(7)
    # Event time in order per source, with gaps (empty windows are skipped, not evaluated).
    ts, rows = 0, []
    for i in range(N):
        ts += rnd.choice([10, 100, 400, 1900])
        rows.append([i, ts])
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout(rows, Fields("id", "ts")))
    for name, window in (("count", count_window), ("time", time_window)):
        b.set_bolt(f"{name}_plain", window(Plain())).global_grouping("s")
        b.set_bolt(f"{name}_ids", window(Stateful()).with_message_id_field("id")) \
            .global_grouping("s")
        b.set_bolt(f"{name}_persistent", window(Stateful()).with_persistence()
                   .with_max_events_in_memory(MAX_IN_MEMORY)).global_grouping("s")
    return b.create_topology()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def _conf(provider, tmp_path_factory, redis_server=None):
    conf = {"topology.state.provider": provider, "topology.state.checkpoint.interval.ms": 100}
    if provider == "durable":
        conf["topology.state.provider.config"] = {"dir": str(tmp_path_factory.mktemp("state"))}
    if provider == "redis":
        conf["topology.state.provider.config"] = {
            "host": redis_server.host, "port": redis_server.port,
            "prefix": f"sw-{random.Random().getrandbits(32)}:"}
    return conf


@pytest.mark.parametrize("provider", ["memory", "durable", "redis"])
def test_stateful_windows_equal_plain_windows(request, runner, provider, tmp_path_factory):
    redis_server = request.getfixturevalue("redis_server") if provider == "redis" else None
    conf = _conf(provider, tmp_path_factory, redis_server)
    result = complete_cached(request, ("all", provider), runner, build, conf)
    assert result.errors == []
    assert sorted(result.acked("s")) == list(range(N))
    for name in ("count", "time"):
        plain = [row[:2] for row in result.tuples(f"{name}_plain")]
        assert len(plain) > 20
        assert all(len(ids) == 30 for _, ids in plain[4:-4]) or name == "time"
        for mode in ("ids", "persistent"):
            rows = result.tuples(f"{name}_{mode}")
            assert [row[:2] for row in rows] == plain, (name, mode)
            # The counter in the bolt's state: one per window, no window evaluated twice.
            assert [row[2] for row in rows] == list(range(1, len(plain) + 1))
        largest = max(len(ids) for _, ids in plain)
        in_memory = max(row[3] for row in result.tuples(f"{name}_persistent"))
        assert largest > MAX_IN_MEMORY >= in_memory, (largest, in_memory)
    if provider != "memory":
        # The window contents went through the provider: each persistent task's window
        # namespace holds its committed manager (trigger, eviction, partition index), whose
        # queue is empty once input ended.
        from squall.state.providers import new_state

        for name in ("count", "time"):
            ns = f"{name}_persistent-{_task(result, name)}-window"
            if runner == "spark" and provider == "durable":
                continue  # under the run's own checkpoint location (tested below)
            manager = pickle.loads(new_state(conf, ns).get("manager"))
            assert len(manager.queue) == 0 and manager.queue.next_pid > 0, ns


def _task(result, name):
    return result.topology.component_tasks(f"{name}_persistent")[0]


class Numbers(Spout):
    """Emits every id below the limit in `<test.dir>/limit` not acked yet (acks are written to
    `<test.dir>/acked` at once), then waits for the limit to grow (never exhausted)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.dir = conf["test.dir"]
        path = os.path.join(self.dir, "acked")
        acked: set[int] = set()
        if os.path.exists(path):
            with open(path) as f:
                acked = {int(x) for x in f.read().split()}
        self.limit = self._limit()
        self.todo = [i for i in range(self.limit) if i not in acked]
        self.recheck = 0.0

    def _limit(self):
        with open(os.path.join(self.dir, "limit")) as f:
            return int(f.read())

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop(0)
            self.collector.emit(Values(i), msg_id=i)
        elif time.monotonic() > self.recheck:  # test pacing only: how often to reread
            self.recheck = time.monotonic() + 0.05
            limit = self._limit()
            self.todo, self.limit = list(range(self.limit, limit)), max(limit, self.limit)

    def ack(self, i):
        with open(os.path.join(self.dir, "acked"), "a") as f:
            f.write(f"{i}\n")

    def declare_output_fields(self, d):
        d.declare(Fields("id"))


class Log(StatefulWindowedBolt):
    """Appends (first id, last id, size) of every window to a list in its state."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        ids = [t["id"] for t in window]
        self.state.put("log", [*self.state.get("log", []), (ids[0], ids[-1], len(ids))])


@pytest.mark.parametrize("mode", ["ids", "persistent"])
def test_window_contents_survive_a_restart(runner, mode, tmp_path):
    """Two runs on one state: the first leaves 20 events in the window (committed in the durable
    provider), the second's first window is made of them and the new events. The spout never
    ends: each run stops once the ids below its limit are acked, all of them with persistent
    windows (acked at the checkpoint), all but the last window's 20 by ids (a tuple is acked
    when it leaves the window: those 20 stay in flight, and the stop ends at its deadline)."""
    from squall.state.providers import new_state

    bolt = Log().with_window(Count(20), Count(5))
    bolt = (bolt.with_persistence().with_max_events_in_memory(10) if mode == "persistent"
            else bolt.with_message_id_field("id"))
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("w", bolt).global_grouping("numbers")
    topology = b.create_topology()
    conf = {"topology.state.provider": "durable",
            "topology.state.provider.config": {"dir": str(tmp_path / "state")},
            "topology.state.checkpoint.interval.ms": 100}
    kwargs = {}
    if runner == "spark":
        kwargs = {"master": "local[2]", "checkpoint_location": str(tmp_path / "ckpt")}
    acked = tmp_path / "acked"
    in_window = 0 if mode == "persistent" else 20
    for limit in (60, 80):
        (tmp_path / "limit").write_text(str(limit))
        result = run_until(topology,
                           lambda n=limit - in_window: _acked_ids(acked) >= set(range(n)),
                           {**conf, "test.dir": str(tmp_path)}, runner=runner,
                           stop_timeout_s=60 if mode == "persistent" else 2, **kwargs)
        assert result.errors == []
    task = topology.component_tasks("w")[0]
    log = new_state(conf, f"w-{task}").get("log")
    assert log == [(max(0, end - 19), end, min(20, end + 1)) for end in range(4, 80, 5)]


def _acked_ids(path) -> set[int]:
    return {int(x) for x in path.read_text().split()}


def test_validation_names_the_component():
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[1]], Fields("id")))
    b.set_bolt("sums", Stateful().with_tumbling_window(Count(2))).shuffle_grouping("s")
    with pytest.raises(InvalidTopologyError, match=r"sums.*with_message_id_field|"
                       r"with_message_id_field.*sums"):
        b.create_topology()
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[1]], Fields("id")))
    b.set_bolt("sums", Stateful().with_tumbling_window(Count(2)).with_message_id_field("id")
               .with_max_events_in_memory(5)).shuffle_grouping("s")
    with pytest.raises(InvalidTopologyError, match="with_persistence"):
        b.create_topology()
    with pytest.raises(ValueError, match="positive int"):
        Stateful().with_max_events_in_memory(0)
    with pytest.raises(ValueError, match="non-empty"):
        Stateful().with_message_id_field("")


def test_persistent_windows_are_limited_by_the_checkpoint_interval_not_their_length(runner):
    """Storm's PersistentWindowedBoltExecutor: tuples are acked at the checkpoint, so a window
    longer than the message timeout is fine, but a checkpoint interval beyond it is not."""
    def topology(bolt):
        b = TopologyBuilder()
        b.set_spout("s", FixedTupleSpout([[i, i * 10_000] for i in range(12)], Fields("id", "ts")))
        b.set_bolt("w", bolt.with_tumbling_window(Duration.seconds(40))
                   .with_timestamp_field("ts")).shuffle_grouping("s")
        return b.create_topology()

    conf = {"topology.message.timeout.secs": 30, "spark.sql.shuffle.partitions": 2}
    with pytest.raises(InvalidTopologyError, match=r"'w'.*80000 ms.*message.timeout"):
        complete_topology(topology(Plain()), conf, runner=runner)
    with pytest.raises(InvalidTopologyError, match=r"persistent windowed bolt 'w'.*"
                       r"checkpoint.interval.ms \(31000 ms\).*\(30000 ms\)"):
        complete_topology(topology(Stateful().with_persistence()),
                          {**conf, "topology.state.checkpoint.interval.ms": 31_000},
                          runner=runner)
    result = complete_topology(topology(Stateful().with_persistence()),
                               {**conf, "topology.state.checkpoint.interval.ms": 30_000},
                               runner=runner)
    assert [(row[0], row[1]) for row in result.tuples("w")] == [  # (end - 40 s, end]
        (0, [0]), (40_000, [1, 2, 3, 4]), (80_000, [5, 6, 7, 8]), (120_000, [9, 10, 11])]
    assert sorted(result.acked("s")) == list(range(12))


@pytest.mark.parametrize(("rows", "message"), [
    ([["a", 1]], "message id field 'msg'.*must be an int, got 'a'"),
    ([[1, 1]], None),
])
def test_bad_message_id_is_reported_with_component_stream_and_field(rows, message):
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout(rows, Fields("msg", "n")))
    b.set_bolt("sums", Stateful().with_tumbling_window(Count(1))
               .with_message_id_field("msg" if message else "nope")).shuffle_grouping("numbers")
    result = complete_topology(b.create_topology())
    assert len(result.errors) == 1
    text = str(result.errors[0].error)
    assert "'sums'" in text and "'numbers'" in text and "'default'" in text
    if message:
        import re

        assert re.search(message, text), text
    else:
        assert "no message id field 'nope'" in text and "['msg', 'n']" in text
    assert result.failed("numbers") == [0]


def test_persistent_window_has_no_new_or_expired():
    class NewOnly(Stateful):
        def execute(self, window):
            window.get_new()

    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[i] for i in range(4)], Fields("id")))
    b.set_bolt("w", NewOnly().with_tumbling_window(Count(2)).with_persistence()) \
        .shuffle_grouping("s")
    result = complete_topology(b.create_topology())
    assert [type(e.error).__name__ for e in result.errors] == ["UnsupportedWindowOperation"] * 2
    assert "get_new() is not supported" in str(result.errors[0].error)
    assert sorted(result.acked("s")) == [0, 1, 2, 3]  # queued in state: acked all the same


def test_partitioned_queue_matches_a_sorted_list_and_bounds_memory():
    rnd = random.Random(3)
    state = MemoryKeyValueState()
    queue = PartitionedQueue(max_events=12, partition_size=3)
    queue.attach(state)
    model: list[tuple[int, int]] = []
    for step in range(3000):
        op = rnd.random()
        if op < 0.6:
            key = (rnd.randrange(200), step)  # mostly out of order: inserts split partitions
            queue.insert(key, -step)
            model.append((key, -step))
            model.sort(key=lambda e: e[0])
        elif op < 0.75 and model:
            k = rnd.randrange(len(model) + 1)
            queue.pop_front(k)
            del model[:k]
        elif op < 0.85:
            queue.flush()
            queue = pickle.loads(pickle.dumps(queue))  # a snapshot: index only
            queue.attach(state)
        else:
            lo = rnd.randrange(len(model) + 1)
            assert list(queue.entries(lo)) == model[lo:]
        assert len(queue) == len(model)
        assert queue.events_in_memory() <= 12 + 3
        if model:
            i = rnd.randrange(len(model))
            assert queue.entry(i) == model[i]
    queue.flush()
    stored = sorted(e for k, v in state if k[0] == "part" for e in v)
    assert stored == sorted(model)  # dropped partitions were deleted from the state
