"""`LocalCluster` and `squall.run` on the local runner, with real (short) and simulated time."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from squall import (
    BasicBolt,
    Bolt,
    Config,
    Duration,
    Fields,
    LocalCluster,
    Spout,
    TopologyBuilder,
    Values,
    run,
)
from squall.results import RunResult
from squall.runtime.clock import SimulatedClock
from squall.testing import (
    CompleteTopologyTimeout,
    FixedTupleSpout,
    complete_topology,
    current_clock,
    simulated_time,
)

# ---- helpers -------------------------------------------------------------------------------

LIFECYCLE: list[tuple[str, str, int]] = []


@pytest.fixture
def lifecycle():
    LIFECYCLE.clear()
    yield LIFECYCLE
    LIFECYCLE.clear()


class Endless(Spout):
    """Never exhausted; emits one tracked tuple per call (or nothing when `quiet`)."""

    def __init__(self, quiet=False):
        self.quiet = quiet

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        self.acked = []
        LIFECYCLE.append(("open", context.this_component_id, context.this_task_id))

    def activate(self):
        LIFECYCLE.append(("activate", self.context.this_component_id, self.context.this_task_id))

    def deactivate(self):
        LIFECYCLE.append(
            ("deactivate", self.context.this_component_id, self.context.this_task_id)
        )

    def close(self):
        LIFECYCLE.append(("close", self.context.this_component_id, self.context.this_task_id))

    def next_tuple(self):
        if not self.quiet:
            self.collector.emit(Values(self.n), msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class Count(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        LIFECYCLE.append(("prepare", context.this_component_id, context.this_task_id))

    def execute(self, tup):
        self.collector.ack(tup)

    def cleanup(self):
        LIFECYCLE.append(("cleanup", self.context.this_component_id, self.context.this_task_id))

    def declare_output_fields(self, declarer):
        pass


class Double(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(tup[0] * 2))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n2"))


class Drop(Bolt):
    def execute(self, tup):
        pass  # never acks: the tree times out

    def declare_output_fields(self, declarer):
        pass


class TimedFixed(FixedTupleSpout):
    """A FixedTupleSpout that also records the simulated time of each fail."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.fail_times = []

    def fail(self, msg_id):
        super().fail(msg_id)
        clock = current_clock()
        self.fail_times.append(clock.now_ms() if clock is not None else None)


def bounded_topology(n=10):
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[i] for i in range(n)], Fields("n")))
    b.set_bolt("double", Double(), 2).shuffle_grouping("numbers")
    b.set_bolt("count", Count()).global_grouping("double")
    return b.create_topology()


def endless_topology(quiet=False):
    b = TopologyBuilder()
    b.set_spout("endless", Endless(quiet))
    b.set_bolt("count", Count(), 2).shuffle_grouping("endless")
    return b.create_topology()


def dropping_topology():
    b = TopologyBuilder()
    b.set_spout("spout", TimedFixed([[1]], Fields("n")))
    b.set_bolt("drop", Drop()).shuffle_grouping("spout")
    return b.create_topology()


def run_in_thread(fn, timeout_s=30.0):
    """Run `fn` in a thread so that a runner that never stops fails the test, not the suite."""
    box = {}

    def target():
        box["result"] = fn()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the runner did not stop"
    return box["result"]


# ---- LocalCluster --------------------------------------------------------------------------


def test_local_cluster_runs_bounded_topology_until_killed(lifecycle):
    cluster = LocalCluster()
    try:
        cluster.submit_topology("numbers", Config(), bounded_topology(10))
        assert cluster.wait_until_complete("numbers", timeout_s=10)
        stats = cluster.get_stats("numbers")
        assert stats["double"].executed == 10
        assert stats["count"].executed == 10
        assert stats["numbers"].acked == 10
        result = cluster.kill_topology("numbers")
    finally:
        cluster.shutdown()
    assert isinstance(result, RunResult)
    assert result.errors == []
    assert (result.stats["numbers"].acked, result.stats["numbers"].pending) == (10, 0)
    assert result.stats["double"].emitted == 10 and result.stats["count"].acked == 10
    assert ("prepare", "count", 1) in lifecycle and ("cleanup", "count", 1) in lifecycle
    with pytest.raises(KeyError):
        cluster.get_stats("numbers")


def test_local_cluster_unbounded_topology_runs_until_killed(lifecycle):
    with LocalCluster() as cluster:
        cluster.submit_topology("endless", {}, endless_topology())
        assert not cluster.wait_until_complete("endless", timeout_s=0.2)
        result = cluster.kill_topology("endless")
    spout = result.stats["endless"]
    count = result.stats["count"]
    assert spout.emitted > 0
    # every emitted tuple was executed, and each tree was acked or is still pending
    assert count.executed == spout.emitted == count.acked
    assert spout.acked + spout.pending == spout.emitted
    assert spout.pending <= 1
    assert result.errors == []
    spout_events = [e for e in lifecycle if e[1] == "endless"]
    assert spout_events == [
        ("open", "endless", 3), ("activate", "endless", 3),
        ("deactivate", "endless", 3), ("close", "endless", 3),
    ]
    assert sorted(e for e in lifecycle if e[1] == "count") == [
        ("cleanup", "count", 1), ("cleanup", "count", 2),
        ("prepare", "count", 1), ("prepare", "count", 2),
    ]


def test_local_cluster_names_and_shutdown(lifecycle):
    cluster = LocalCluster()
    cluster.submit_topology("a", None, endless_topology(quiet=True))
    cluster.submit_topology("b", None, bounded_topology(3))
    with pytest.raises(ValueError, match="already running"):
        cluster.submit_topology("a", None, bounded_topology(1))
    assert cluster.wait_until_complete("b", timeout_s=10)
    cluster.shutdown()
    with pytest.raises(KeyError):
        cluster.kill_topology("a")
    with pytest.raises(KeyError):
        cluster.get_stats("b")
    # both topologies were stopped: every open spout was closed
    assert [e for e in lifecycle if e[0] == "close"] == [("close", "endless", 3)]
    cluster.shutdown()  # a second shutdown has nothing to do


def test_local_cluster_uses_the_active_simulated_clock():
    conf = Config({"topology.message.timeout.secs": 0.2})
    with simulated_time() as clock, LocalCluster() as cluster:
        cluster.submit_topology("drop", conf, dropping_topology())
        assert cluster.wait_until_complete("drop", timeout_s=10)
        result = cluster.kill_topology("drop")
        # the timeout moved the simulated clock (on wall time nothing moves it)
        assert clock.now_ms() >= 200
    assert result.stats["spout"].timed_out == 1


def test_local_cluster_with_explicit_simulated_clock():
    clock = SimulatedClock(start_ms=1_000)
    conf = Config({"topology.message.timeout.secs": 5})
    with LocalCluster(clock=clock) as cluster:
        cluster.submit_topology("drop", conf, dropping_topology())
        assert cluster.wait_until_complete("drop", timeout_s=10)
        result = cluster.kill_topology("drop")
    assert clock.now_ms() >= 6_000
    stats = result.stats["spout"]
    assert (stats.emitted, stats.failed, stats.timed_out, stats.acked) == (1, 1, 1, 0)


class SlowOpen(FixedTupleSpout):
    """Exhausted until `open` fills its queue, and slow to open."""

    def open(self, conf, context, collector):
        threading.Event().wait(0.3)
        super().open(conf, context, collector)


def test_wait_until_complete_does_not_answer_before_the_spouts_are_open():
    b = TopologyBuilder()
    b.set_spout("spout", SlowOpen([[i] for i in range(5)], Fields("n")))
    b.set_bolt("count", Count()).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        cluster.submit_topology("slow", Config(), b.create_topology())
        assert cluster.wait_until_complete("slow", timeout_s=10)
        result = cluster.kill_topology("slow")
    assert result.stats["spout"].emitted == 5
    assert result.stats["spout"].acked == 5


# ---- run -----------------------------------------------------------------------------------


def test_run_bounded_topology_returns_when_complete():
    result = run_in_thread(lambda: run(bounded_topology(25), Config(), runner="local"))
    assert result.errors == []
    assert result.stats["numbers"].emitted == 25
    assert result.stats["numbers"].acked == 25
    assert result.stats["numbers"].pending == 0
    assert result.stats["double"].executed == 25 and result.stats["double"].emitted == 25
    assert result.stats["count"].executed == 25
    assert "numbers" in result.summary() and "errors reported: 0" in result.summary()


@pytest.mark.parametrize(
    "duration", [0.2, Duration.milliseconds(200), timedelta(milliseconds=200)],
    ids=["seconds", "Duration", "timedelta"],
)
def test_run_with_duration_stops_an_unbounded_topology(duration, lifecycle):
    result = run_in_thread(lambda: run(endless_topology(), runner="local", duration=duration))
    assert result.elapsed_ms >= 200
    spout = result.stats["endless"]
    assert spout.emitted > 0
    assert result.stats["count"].executed == spout.emitted
    assert spout.acked + spout.pending == spout.emitted
    assert ("close", "endless", 3) in lifecycle and ("cleanup", "count", 2) in lifecycle


def test_run_with_duration_on_a_simulated_clock_is_exact():
    clock = SimulatedClock()
    result = run_in_thread(
        lambda: run(endless_topology(quiet=True), runner="local", duration=Duration.seconds(2),
                    clock=clock)
    )
    assert result.elapsed_ms == 2_000
    assert clock.now_ms() == 2_000
    assert result.stats["endless"].emitted == 0


def test_run_with_simulated_clock_times_out_without_waiting():
    clock = SimulatedClock()
    # The timed-out tree's fail reaches the spout at once (no replay backoff), as in Storm.
    conf = Config({"topology.message.timeout.secs": 30, "squall.retry.initial.delay.ms": 0})
    result = run_in_thread(lambda: run(dropping_topology(), conf, runner="local", clock=clock))
    assert clock.now_ms() == 30_000 and result.elapsed_ms == 30_000
    assert result.stats["spout"].timed_out == 1


def test_run_uses_the_active_simulated_clock():
    conf = Config({"topology.message.timeout.secs": 0.2, "squall.retry.initial.delay.ms": 0})
    with simulated_time() as clock:
        result = run_in_thread(lambda: run(dropping_topology(), conf, runner="local"))
        assert clock.now_ms() == 200
    assert result.elapsed_ms == 200


def test_run_unknown_runner():
    with pytest.raises(ValueError, match="unknown runner 'nope'"):
        run(bounded_topology(1), runner="nope")


def test_complete_topology_gives_up_on_a_spout_that_never_ends():
    with pytest.raises(CompleteTopologyTimeout, match=r"spouts not exhausted: \['endless'\]"):
        complete_topology(endless_topology(quiet=True), max_time_ms=1_000)


# ---- LocalCluster hosts every kind of topology (the runner make_runner gives) --------------


def test_local_cluster_runs_storms_trident_wordcount(tmp_path):
    """Storm's TridentWordCount pattern: a Trident topology submitted to a LocalCluster."""
    from examples import trident_wordcount as twc
    from squall.trident.state import DurableMapState, StateType

    top, conf = twc.topology()
    with LocalCluster() as cluster:
        cluster.submit_topology("twc", conf, top, checkpoint_location=str(tmp_path))
        assert cluster.wait_until_complete("twc", timeout_s=60)
        stats = cluster.get_stats("twc")
        result = cluster.kill_topology("twc")
    assert result.errors == []
    assert result.extra["committed"] == list(range(1, len(result.extra["committed"]) + 1))
    assert stats["spout1"].emitted == len(twc.SENTENCES)
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state(twc.STATE, str(tmp_path))
    try:
        counts = {key[0]: n for key, n in state.items()}
    finally:
        state.close()
    assert counts == Counter(w for s in twc.SENTENCES for w in s.split(" "))


def test_local_cluster_runs_a_transactional_topology(tmp_path):
    """Storm's TransactionalGlobalCount submitted to a LocalCluster: every tuple counted once."""
    from examples import transactional_global_count as tgc

    db = {"provider": "durable", "dir": str(tmp_path / "db")}
    conf = Config({"global_count.db": db})
    with LocalCluster() as cluster:
        cluster.submit_topology("tgc", conf, tgc.build().create_topology())
        assert cluster.wait_until_complete("tgc", timeout_s=60)
        result = cluster.kill_topology("tgc")
    assert result.errors == []
    store = tgc.open_db(conf)
    try:
        total = store.get(tgc.GLOBAL)
    finally:
        store.close()
    assert total == sum(len(rows) for rows in tgc.DATA.values())


def test_a_topology_that_fails_at_start_is_not_waited_on_and_kill_raises_its_error():
    b = TopologyBuilder()
    b.set_spout("spout", FailsToOpen([[1]], Fields("n")))
    b.set_bolt("count", Count()).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        cluster.submit_topology("broken", Config(), b.create_topology())
        assert not cluster.wait_until_complete("broken", timeout_s=30)
        with pytest.raises(RuntimeError, match="cannot open"):
            cluster.kill_topology("broken")


class FailsToOpen(FixedTupleSpout):
    def open(self, conf, context, collector):
        raise RuntimeError("cannot open the source")
