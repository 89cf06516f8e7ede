"""The runner protocol at every door: `make_runner`'s runners of each kind (Storm's API,
transactional, Trident) honour `run(should_stop=...)` on both runners, `complete_topology` asks
the protocol only, and the local runners pace Trident batches and transactions on a simulated
clock themselves and move it while they stay busy, so a spout that never ends runs into
`complete_topology`'s limit."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path
from typing import Any

import pytest
from support.examples import load_example

import squall.testing.complete
from squall import BasicBolt, Fields, Spout, TopologyBuilder
from squall.runners import make_runner
from squall.runtime.clock import SimulatedClock
from squall.runtime.local.engine import LocalEngine
from squall.testing import (
    CompleteTopologyTimeout,
    FixedTupleSpout,
    complete_topology,
    simulated_time,
)
from squall.transactional import (
    BatchBolt,
    PartitionedTransactionalSpout,
    TransactionalTopologyBuilder,
)
from squall.trident import FixedBatchSpout, Function, TridentTopology

gc = load_example("transactional_global_count")

CAP_MS = 120_000  # a run that ignores should_stop ends here, and fails the test


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


class Upper(Function):
    def execute(self, tup, collector):
        collector.emit([tup["w"].upper()])


def storm_topology() -> tuple[Any, dict]:
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([["a"], ["b"], ["c"]], Fields("w")))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("words")
    return b.create_topology(), {}


def transactional_topology(tmp: Path) -> tuple[Any, dict]:
    data = {0: [["a"], ["b"]], 1: [["c"]]}
    conf = {"global_count.db": {"provider": "durable", "dir": str(tmp / "db")}}
    return gc.build(data).create_topology(), conf


def trident_topology() -> tuple[Any, dict]:
    t = TridentTopology()
    t.new_stream("words", FixedBatchSpout(["w"], 2, ["a"], ["b"], ["c"])) \
        .each(["w"], Upper(), ["u"]).name("upper")
    return t.build(), {}


KINDS = {
    "storm": lambda tmp: storm_topology(),
    "transactional": transactional_topology,
    "trident": lambda tmp: trident_topology(),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_should_stop_ends_a_run_of_every_kind_on_its_runner(runner, kind, tmp_path):
    """A bounded topology run with `until_complete=False` would idle until its duration; the
    runner calls `should_stop` as it goes, and the run returns once it says so."""
    topology, conf = KINDS[kind](tmp_path)
    chosen = make_runner(topology, conf, runner=runner,
                         checkpoint_location=str(tmp_path / "ckpt"))
    asked = []

    def done() -> bool:
        asked.append(True)
        return chosen.complete()

    began = time.monotonic()
    result = chosen.run(until_complete=False, duration_ms=CAP_MS, should_stop=done)
    assert (time.monotonic() - began) * 1000 < CAP_MS / 2, "should_stop did not end the run"
    assert asked and chosen.complete() and chosen.incomplete() == []
    assert result.errors == []


def test_complete_topology_imports_no_runner():
    """`complete_topology` reaches its runner through `make_runner` and the runner protocol
    only: its module imports nothing from `squall.runtime.local` or `squall.runtime.spark`."""
    tree = ast.parse(Path(squall.testing.complete.__file__).read_text())
    imported = [node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names]
    assert "squall.runners" in imported
    assert [m for m in imported if m.startswith(("squall.runtime.local", "squall.runtime.spark"))
            ] == []


class _Sleeps(SimulatedClock):
    """A simulated clock that records its sleeps; `simulated` as the test says."""

    def __init__(self, simulated: bool) -> None:
        super().__init__()
        self.simulated = simulated
        self.sleeps: list[int] = []

    def sleep_ms(self, ms: int) -> None:
        self.sleeps.append(ms)
        super().sleep_ms(ms)


@pytest.mark.parametrize("simulated", [True, False])
def test_local_trident_batches_take_the_emit_interval_only_on_a_simulated_clock(simulated,
                                                                              tmp_path):
    """Storm's coordinator throttles batches to `topology.trident.batch.emit.interval.millis`:
    on a simulated clock each batch takes it, so a duration counts batches; on a real clock a
    batch that brought tuples is followed at once by the next."""
    topology, _ = trident_topology()  # three rows, two per batch: two batches, then exhausted
    clock = _Sleeps(simulated)
    chosen = make_runner(topology, {"topology.trident.batch.emit.interval.millis": 200},
                         runner="local", clock=clock, checkpoint_location=str(tmp_path))
    result = chosen.run()
    assert result.extra["committed"] == [1, 2]
    assert clock.sleeps == ([200, 200] if simulated else [])


@pytest.mark.parametrize("simulated", [True, False])
def test_local_transactions_take_the_emit_interval_only_on_a_simulated_clock(simulated,
                                                                             tmp_path):
    """The local runner's transactional coordinator is paced as a local Trident batch is: on a
    simulated clock each transaction it starts takes the batch emit interval; on a real clock a
    transaction is followed at once by the next."""
    data = {0: [["a"], ["b"], ["c"], ["d"]]}  # three a batch: two transactions, then exhausted
    conf = {"global_count.db": {"provider": "durable", "dir": str(tmp_path / "db")},
            "topology.trident.batch.emit.interval.millis": 200}
    clock = _Sleeps(simulated)
    chosen = make_runner(gc.build(data).create_topology(), conf, runner="local", clock=clock)
    result = chosen.run()
    assert result.errors == [] and chosen.complete()
    assert gc.open_db(conf).get(gc.GLOBAL) == 4
    assert clock.sleeps.count(200) == (2 if simulated else 0)


ENDLESS_CAP = 1000  # transactions: far beyond what the limit lets through (see the test)


class Endless(PartitionedTransactionalSpout):
    """One tuple per transaction, for ever: its partition never says it is exhausted (the cap
    only keeps a runner that does not pace transactions from running for ever)."""

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("attempt", "n"))

    def num_partitions(self) -> int:
        return 1

    def emit_partition_batch_new(self, attempt, collector, partition, last_meta):
        n = 0 if last_meta is None else last_meta + 1
        self.emit_partition_batch(attempt, collector, partition, n)
        return n

    def emit_partition_batch(self, attempt, collector, partition, meta) -> None:
        collector.emit([attempt, meta])

    def is_exhausted(self, partition, meta) -> bool:
        return meta is not None and meta >= ENDLESS_CAP


class Drop(BatchBolt):
    def prepare(self, conf, context, collector, attempt) -> None:
        pass

    def execute(self, tup) -> None:
        pass

    def finish_batch(self) -> None:
        pass


def test_complete_topology_gives_up_on_a_transactional_spout_that_never_ends(runner):
    """A transactional spout that never ends cannot complete: `complete_topology` raises its
    timeout, naming the spout, once `max_time_ms` of the runner's clock has passed: simulated
    time on the local runner (each transaction takes the batch emit interval of it, so the run
    ends after a few transactions), wall time on Spark."""
    builder = TransactionalTopologyBuilder("endless", "numbers", Endless(), 1)
    builder.set_bolt("drop", Drop()).global_grouping("numbers")
    interval, limit = 100, 2_000
    began = time.monotonic()
    with pytest.raises(CompleteTopologyTimeout) as raised:
        complete_topology(builder.create_topology(),
                          {"topology.trident.batch.emit.interval.millis": interval},
                          runner=runner, max_time_ms=limit)
    message = str(raised.value)
    assert f"did not complete within {limit} ms" in message
    assert "spout 'endless' not exhausted" in message
    counted = re.search(r"transactions committed: (\d+)", message)
    assert counted is not None, message
    committed = int(counted.group(1))
    if runner == "local":
        assert "simulated time" in message
        # Paced: the limit let about limit / interval transactions through, no more.
        assert 0 < committed <= limit // interval
        assert time.monotonic() - began < 10
    else:
        assert "wall time on Spark" in message and committed < ENDLESS_CAP


class Counter(Spout):
    """A plain Storm spout that emits the next number, tracked, on every call and never says
    it is done: the engine is never idle while it runs."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.n = 0

    def next_tuple(self) -> None:
        self.collector.emit([self.n], msg_id=self.n)
        self.n += 1

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("n"))


def counter_topology() -> Any:
    b = TopologyBuilder()
    b.set_spout("counter", Counter())
    b.set_bolt("sink", Sink()).shuffle_grouping("counter")
    return b.create_topology()


@pytest.mark.timeout(60, func_only=True)  # the old local runner looped here for ever
def test_complete_topology_gives_up_on_a_spout_that_emits_on_every_call(runner):
    """A spout that emits on every call keeps every round of the local runner busy; its
    simulated clock still moves (10 s per 10,000 busy rounds at one instant), so
    `max_time_ms` ends the run and the timeout names the spout with what it emitted and had
    acked. On Spark the limit is wall time: the run ends by it too, and names the spout and its
    counts the same way."""
    limit = 2_000
    began = time.monotonic()
    with simulated_time() as clock, pytest.raises(CompleteTopologyTimeout) as raised:
        complete_topology(counter_topology(), {"squall.spark.batch.max.tuples": 100},
                          runner=runner, max_time_ms=limit)
    message = str(raised.value)
    assert f"did not complete within {limit} ms" in message
    if runner == "local":
        assert "simulated time" in message and "spouts not exhausted: ['counter']" in message
        counts = re.search(r"spout 'counter': emitted (\d+), acked (\d+), failed 0", message)
        assert counts is not None, message
        emitted, acked = int(counts.group(1)), int(counts.group(2))
        # One busy step: the clock went from 0 past the limit once, after that many rounds.
        assert emitted == LocalEngine.BUSY_ROUNDS_PER_STEP and 0 < acked <= emitted
        assert clock.now_ms() == LocalEngine.BUSY_STEP_MS
        assert time.monotonic() - began < 10
    else:
        # Ended by its duration of wall time (a query's start included), not by the cap.
        assert "wall time on Spark" in message and time.monotonic() - began < 60
        # Named with its counts once a batch was planned (small batches: soon after the
        # query's start), or as still in its first planning round.
        counts = re.search(r"spout 'counter': emitted (\d+), acked (\d+), failed 0", message)
        assert ("spouts not exhausted: ['counter']" in message and counts is not None
                and int(counts.group(1)) > 0) or (
            "no batch planned yet: spouts ['counter'] still in their first planning round"
            in message), message


def test_a_busy_local_run_moves_its_simulated_clock_in_steps():
    """On a simulated clock the local runner does its work at one instant until it has been
    busy for `BUSY_ROUNDS_PER_STEP` rounds there; the clock then moves `BUSY_STEP_MS`, so a run
    that never goes idle ends by its duration. A bounded input shorter than that keeps the
    clock where it was, as before."""
    steps = 2
    clock = SimulatedClock()
    chosen = make_runner(counter_topology(), {}, runner="local", clock=clock)
    result = chosen.run(until_complete=False, duration_ms=steps * LocalEngine.BUSY_STEP_MS)
    assert clock.now_ms() == result.elapsed_ms == steps * LocalEngine.BUSY_STEP_MS
    assert result.stats["counter"].emitted == steps * LocalEngine.BUSY_ROUNDS_PER_STEP
    assert result.stats["sink"].executed == result.stats["counter"].emitted
    assert result.errors == []

    topology, _ = storm_topology()  # three tuples: done at the instant it began
    with simulated_time(5_000) as clock:
        result = complete_topology(topology)
    assert clock.now_ms() == 5_000 and result.elapsed_ms == 0
    assert result.acked("words") == [0, 1, 2]
