"""Poison tuples: retries with a limit, backoff, the dead-letter stream, error logging that
does not drown the log, and a warning naming a message replayed for ever, on both runners.

A bolt that raises on one value used to have that tuple replayed for ever: on the local runner
the other partition was never read, on Spark the whole range was replayed again and again and
the run never ended.
"""

from __future__ import annotations

import logging
import pickle
from collections import Counter

import pytest
from support.poison_trident import build as poison_trident
from support.run_until import run_until
from test_sources import FailOnce  # fails the first delivery of every multiple of 5

from squall import (
    DEAD_LETTER,
    DEAD_LETTER_FIELDS,
    Bolt,
    DeadLetterError,
    Fields,
    TopologyBuilder,
    Values,
)
from squall.connectors import JsonLinesSource, MemorySource
from squall.errors import TransactionFailedError
from squall.reliability.retries import Retries, RetryPolicy
from squall.results import RunResult
from squall.runtime.clock import SimulatedClock
from squall.runtime.local.engine import LocalEngine
from squall.runtime.local.trident import LocalTridentRunner
from squall.testing import FixedTupleSpout, complete_topology, current_clock, simulated_time

MAX_TUPLES = "squall.spark.batch.max.tuples"
POISON = ("1", 1234)  # partition "1", offset 1234
PER_PARTITION = 5000
PARTITIONS = ("0", "1")
RANGE = 200


class Flaky(Bolt):
    """Raises on the poison value, passes every other one on."""

    def execute(self, tup):
        p, i = tup["p"], tup["i"]
        if (p, i) == POISON:
            raise ZeroDivisionError(f"cannot handle {p}:{i}")
        self.collector.emit(Values(p, i), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("p", "i"))


class DeadLetters(Bolt):
    """A sink of the dead-letter stream: passes every field on, so the test sees columns."""

    def execute(self, tup):
        self.collector.emit(Values(*[tup[f] for f in DEAD_LETTER_FIELDS]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(DEAD_LETTER_FIELDS)


def poisoned_topology():
    data = {p: [[p, i] for i in range(PER_PARTITION)] for p in PARTITIONS}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("p", "i"), records_per_range=RANGE))
    b.set_bolt("flaky", Flaky(), 2).shuffle_grouping("numbers")
    b.set_bolt("dead", DeadLetters()).shuffle_grouping("numbers", DEAD_LETTER)
    return b.create_topology()


def partition_one(cid, bolt, offsets, *, dead_letters=False):
    """Partition "1" of `MemorySource` "numbers" (records `["1", i]` for each of `offsets`) into
    `bolt`, and its dead letters into `DeadLetters` if asked."""
    data = {"1": [["1", i] for i in offsets]}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("p", "i"), records_per_range=RANGE))
    b.set_bolt(cid, bolt).shuffle_grouping("numbers")
    if dead_letters:
        b.set_bolt("dead", DeadLetters()).shuffle_grouping("numbers", DEAD_LETTER)
    return b.create_topology()


@pytest.mark.runners("local", "spark")
def test_a_poison_tuple_is_dead_lettered_after_exactly_n_attempts(runner):
    retries = 3
    conf = {"squall.retry.max.retries": retries, MAX_TUPLES: 5000}
    result = complete_topology(poisoned_topology(), conf, runner=runner, max_time_ms=240_000)

    passed = Counter((p, i) for p, i in result.tuples("flaky"))
    good = {(p, i) for p in ("0", "1") for i in range(PER_PARTITION)} - {POISON}
    assert set(passed) == good, "every good record got through, both partitions finished"
    # Every good record exactly once on both runners: locally each record is its own tree; on
    # Spark a range is one tree, but with a limit its records are told apart, so the poison's
    # failure replays the poison alone and its range's other records complete.
    assert set(passed.values()) == {1}

    dead = result.tuples("dead")
    assert len(dead) == 1
    record = dict(zip(DEAD_LETTER_FIELDS, dead[0], strict=True))
    assert record["values"] == list(POISON)
    assert record["component"] == "numbers" and record["stream"] == "default"
    assert (record["partition"], record["offset"]) == POISON
    assert record["attempts"] == retries + 1
    assert record["error_kind"] == "ZeroDivisionError" and "cannot handle 1:1234" in record["error"]

    stats = result.stats
    assert stats["numbers"].dead_lettered == 1
    assert "dead_lettered=1" in stats["numbers"].line()
    poison_errors = [e for e in result.errors if "cannot handle" in str(e.error)]
    assert len(poison_errors) == retries + 1, "one error per attempt"


@pytest.mark.runners("local", "spark")
def test_with_no_retries_the_poison_is_dead_after_its_one_attempt(runner):
    # On Spark the poison's first attempt is inside its range; its failure names it, so with
    # no retries it goes to the dead-letter stream at once and its neighbours are not replayed.
    topology = partition_one("flaky", Flaky(), range(1000, 1400), dead_letters=True)
    conf = {"squall.retry.max.retries": 0, MAX_TUPLES: 1000}
    result = complete_topology(topology, conf, runner=runner, max_time_ms=120_000)
    passed = Counter((p, i) for p, i in result.tuples("flaky"))
    assert passed == Counter({("1", i): 1 for i in range(1000, 1400) if ("1", i) != POISON})
    (dead,) = result.tuples("dead")
    record = dict(zip(DEAD_LETTER_FIELDS, dead, strict=True))
    assert record["offset"] == POISON[1] - 1000 and record["attempts"] == 1
    assert record["values"] == list(POISON)


# ---- user spouts: backoff on the runner's clock, per-spout limits ------------------------------


class FailsOn(Bolt):
    """Fails (by raising) every delivery of `bad`; records the clock time of each."""

    def __init__(self, bad):
        self.bad = bad

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen_at: list[int] = []

    def execute(self, tup):
        if tup["n"] == self.bad:
            clock = current_clock()  # the test's simulated clock (the local runner's)
            if clock is not None:
                self.seen_at.append(clock.now_ms())
            raise ValueError(f"{self.bad} is poison")
        self.collector.emit(Values(tup["n"]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def user_spout_topology(*, dead_letter_stream, spout_conf=None):
    streams = {"default": [[n] for n in range(20)]}
    fields = {"default": ("n",)}
    if dead_letter_stream:
        streams[DEAD_LETTER] = []
        fields[DEAD_LETTER] = DEAD_LETTER_FIELDS
    b = TopologyBuilder()
    spout = b.set_spout("numbers", FixedTupleSpout(streams, fields, replay_failed=True))
    if spout_conf:
        spout.add_configurations(spout_conf)
    b.set_bolt("check", FailsOn(7)).shuffle_grouping("numbers")
    if dead_letter_stream:
        b.set_bolt("dead", DeadLetters()).shuffle_grouping("numbers", DEAD_LETTER)
    return b.create_topology()


def test_backoff_between_replays_runs_on_the_simulated_clock():
    conf = {"squall.retry.max.retries": 3, "squall.retry.initial.delay.ms": 100,
            "squall.retry.multiplier": 2, "squall.retry.max.delay.ms": 250}
    topology = user_spout_topology(dead_letter_stream=True)
    with simulated_time() as clock:
        engine = LocalEngine(topology, conf, clock=clock, capture=True)
        engine.run()
    assert engine.complete()
    (check,) = [t for t in engine.bolts if t.component_id == "check"]
    # The first attempt, then replays after 100, 200 and (capped) 250 ms: simulated time,
    # which only the backoff made move.
    assert check.instance.seen_at == [0, 100, 300, 550]

    def emitted(component):
        return [v for t in topology.component_tasks(component)
                for s, v in engine.captures[t] if s == "default"]

    (dead,) = emitted("dead")
    record = dict(zip(DEAD_LETTER_FIELDS, dead, strict=True))
    assert record["values"] == [7] and record["attempts"] == 4 and record["ts"] == 550
    assert record["message_id"] == 7 and record["partition"] is None
    assert record["error_kind"] == "ValueError" and record["error"] == "7 is poison"
    assert sorted(n for (n,) in emitted("check")) == [n for n in range(20) if n != 7]
    # The spout saw three fails (each replayed) and then an ack: it moved on.
    settled = engine.spouts[0].settled_ids
    assert settled["fail"] == [7] * 3 and 7 in settled["ack"]


@pytest.mark.runners("local", "spark")
def test_a_spout_s_own_limit_and_no_dead_letter_stream(runner):
    # The topology replays for ever; the spout's component config limits it to 1 retry. It
    # declares no dead-letter stream: the dead tuple is reported as an error, not dropped.
    # Its one replay waits 1.5 s: simulated time locally, the reader's planning time on Spark.
    conf = {"squall.retry.max.retries": None}
    topology = user_spout_topology(dead_letter_stream=False, spout_conf={
        "squall.retry.max.retries": 1, "squall.retry.initial.delay.ms": 1500})
    result = complete_topology(topology, conf, runner=runner, max_time_ms=120_000)
    assert result.elapsed_ms >= 1500
    assert sorted(n for (n,) in result.tuples("check")) == [n for n in range(20) if n != 7]
    dead = [e for e in result.errors if isinstance(e.error, DeadLetterError)]
    assert len(dead) == 1
    assert dead[0].component == "numbers"
    assert "failed 2 times" in str(dead[0].error) and "7 is poison" in str(dead[0].error)
    assert result.stats["numbers"].dead_lettered == 1
    assert len([e for e in result.errors if isinstance(e.error, ValueError)
                and "poison" in str(e.error)]) == 2


# ---- error logging: rate-limited per component and kind, counted in the summary ---------------


class AlwaysFails(Bolt):
    def execute(self, tup):
        raise KeyError(f"no such key {tup['i']}")

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.runners("local", "spark")
def test_errors_are_logged_rate_limited_and_counted_in_the_summary(runner, caplog):
    data = {"0": [["0", i] for i in range(150)], "1": [["1", i] for i in range(150)]}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("p", "i"), records_per_range=50))
    b.set_bolt("broken", AlwaysFails(), 2).shuffle_grouping("numbers")
    conf = {"squall.retry.max.retries": 1, MAX_TUPLES: 1000}
    with caplog.at_level(logging.ERROR, logger="squall"):
        result = complete_topology(b.create_topology(), conf, runner=runner,
                                   max_time_ms=120_000)
    errors = [e for e in result.errors if e.component == "broken"]
    # Each record twice: once, then once more as its one retry.
    assert len(errors) == 600
    assert result.stats["numbers"].dead_lettered == 300
    assert "  broken KeyError: 600" in RunResult(result.stats, result.errors).summary()
    lines = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
    full = [m for m in lines if "KeyError" in m and "more" not in m]
    assert len(full) == 5, "the first five in full"
    # Then one line a minute of the runner's clock at most: none on simulated time (the run
    # takes no simulated time worth speaking of); on Spark a few, never one per error.
    assert len(lines) - len(full) <= (0 if runner == "local" else 1 + result.elapsed_ms // 60_000)


# ---- restarts and starvation ------------------------------------------------------------------


def test_failure_counts_and_waiting_replays_survive_a_restart_from_a_checkpoint(tmp_path):
    # Stopped while the poison waits for its second replay, restarted on the same checkpoint:
    # the count goes on (4 attempts in all, not 4 more) and the waiting replay is not lost.
    conf = {"squall.retry.max.retries": 3, "squall.retry.initial.delay.ms": 5_000,
            "squall.retry.multiplier": 1}
    ckpt = str(tmp_path / "ckpt")
    topology = poisoned_topology()
    first = LocalEngine(topology, conf, clock=SimulatedClock(), capture=True,
                        checkpoint_location=ckpt)
    poison_errors = lambda engine: [e for e in engine.errors if "cannot handle" in str(e.error)]  # noqa: E731
    first.run(should_stop=lambda: len(poison_errors(first)) >= 2)
    assert len(poison_errors(first)) == 2
    assert first.spouts[0].retries.waiting == 1

    second = LocalEngine(topology, conf, clock=SimulatedClock(), capture=True,
                         checkpoint_location=ckpt)
    result = second.run()
    assert second.complete()
    assert len(poison_errors(second)) == 2
    (dead,) = [v for t in topology.component_tasks("dead")
               for s, v in second.captures[t] if s == "default"]
    record = dict(zip(DEAD_LETTER_FIELDS, dead, strict=True))
    assert record["attempts"] == 4 and (record["partition"], record["offset"]) == POISON
    assert record["values"] == list(POISON)  # read again: the pending values are not kept
    assert result.stats["numbers"].dead_lettered == 1


def test_a_record_replayed_for_ever_does_not_starve_the_other_partitions():
    # Storm's default (no limit): the poison is replayed for ever, but replays and new records
    # take turns, so every good record of both partitions gets through meanwhile.
    engine = LocalEngine(poisoned_topology(), {}, clock=SimulatedClock(), capture=True)
    good = len(PARTITIONS) * PER_PARTITION - 1

    def passed() -> int:
        return sum(len(engine.captures[t]) for t in engine.topology.component_tasks("flaky"))

    def executed() -> int:
        return sum(engine.received[t] for t in engine.topology.component_tasks("flaky"))

    engine.run(should_stop=lambda: passed() >= good or executed() > 5 * good)
    assert passed() == good
    assert engine.spouts[0].stats.failed > 0 and not engine.complete()


class FailsPoison(Bolt):
    """Fails (without raising) the poison value, acks the others."""

    def execute(self, tup):
        if (tup["p"], tup["i"]) == POISON:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.runners("local", "spark")
def test_a_message_replayed_for_ever_is_named_with_the_key_that_bounds_it(runner, caplog):
    # Storm's default replays for ever, so a poison tuple keeps a bounded run from ending:
    # after 10 failures (then 100, 1,000...) one warning says which message, how often, the
    # last error and the keys that bound and space its replays.
    data = {p: [[p, i] for i in range(1300)] for p in PARTITIONS}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("p", "i"), records_per_range=RANGE))
    b.set_bolt("check", FailsPoison()).shuffle_grouping("numbers")

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if "replayed for ever" in r.getMessage()]

    # Without a backoff (the default's would take 43 s to reach 10 failures).
    conf = {MAX_TUPLES: 1000, "squall.retry.initial.delay.ms": 0}
    with caplog.at_level(logging.WARNING, logger="squall"):
        result = run_until(b.create_topology(), lambda: bool(told()), conf, runner=runner,
                           cap_s=240)
    assert result.stats["numbers"].failed >= 10
    line = told()[0]  # then 100, 1,000... times, if the run got there before it stopped
    assert all(" has failed 10" in m and m.split(" has failed ")[1].split()[0].strip("0") == "1"
               for m in told()), told()
    assert line.startswith("spout 'numbers' task ") and "has failed 10 times" in line, line
    # Which message: the record on the local runner, its range (Spark's unit) on Spark.
    assert ("('1', 1234)" in line) if runner == "local" else ("1200" in line), line
    assert "squall.retry.max.retries" in line and "'dead_letter' stream" in line, line


def test_a_message_replayed_for_ever_backs_off_by_default(caplog):
    # Storm's default replays for ever; squall's default spaces the replays as Storm's Kafka
    # spout does (100 ms, doubling, at most 10 s), on the runner's clock: over ten minutes of
    # simulated time the poison is tried 66 times, not once per round (724,397 times in 20 s
    # without a backoff), its replays' count grows with the logarithm of the time until the
    # cap, and the log gets a few lines, not one per replay.
    topology = user_spout_topology(dead_letter_stream=False)
    with simulated_time() as clock, caplog.at_level(logging.WARNING, logger="squall"):
        engine = LocalEngine(topology, {}, clock=clock, capture=True)
        engine.run(should_stop=lambda: clock.now_ms() >= 600_000
                   or engine.spouts[0].stats.failed > 1_000)  # a loop: time stands still
    (check,) = [t for t in engine.bolts if t.component_id == "check"]
    seen = check.instance.seen_at
    assert seen[:10] == [0, 100, 300, 700, 1_500, 3_100, 6_300, 12_700, 22_700, 32_700]
    assert [sum(1 for t in seen if t < 100 * 2 ** k) for k in range(8)] == [1, 2, 3, 4, 5, 6,
                                                                              7, 8]
    assert len(seen) == 8 + (600_000 - 12_700 - 1) // 10_000  # then one per 10 s: 66
    assert sorted(n for (n,) in [v for t in topology.component_tasks("check")
                                 for _s, v in engine.captures[t]]) == [
        n for n in range(20) if n != 7]
    lines = [r.getMessage() for r in caplog.records if "7 is poison" in r.getMessage()]
    # The first five errors, then a line a minute; and the warning at the 10th failure.
    assert len(lines) <= 5 + 10 + 1, lines
    (told,) = [m for m in lines if "replayed for ever" in m]
    assert "has failed 10 times" in told and "squall.retry.max.retries" in told
    assert "each replay waits up to 10000 ms (squall.retry.max.delay.ms)" in told


class FlakyTimed(Flaky):
    """`Flaky`, recording the simulated clock's time of each of the poison's failures."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.failed_at: list[int] = []

    def execute(self, tup):
        clock = current_clock()
        if (tup["p"], tup["i"]) == POISON and clock is not None:
            self.failed_at.append(clock.now_ms())
        super().execute(tup)


@pytest.mark.runners("local", "spark")
def test_a_source_s_poison_record_backs_off_by_default_on_both_runners(runner):
    # A built-in source's poison record (a range of records on Spark) replayed for ever with
    # the default backoff, on each runner's clock (simulated locally, the reader's planning
    # time on Spark): its 7th failure comes 100 + 200 + ... + 3200 = 6.3 s after its first,
    # whatever the runner's cadence (Spark replayed it with every micro-batch before).
    topology = partition_one("check", FlakyTimed(), range(1200, 1300))
    if runner == "local":
        with simulated_time() as clock:
            engine = LocalEngine(topology, {}, clock=clock)
            engine.run(should_stop=lambda: len(engine.errors) >= 7)
        assert len(engine.errors) == 7
        (check,) = [t for t in engine.bolts if t.component_id == "check"]
        assert check.instance.failed_at == [0, 100, 300, 700, 1_500, 3_100, 6_300]
        return
    # On Spark the poison's range fails as a whole (its tuples all count as failed): its
    # attempts are the errors its record raised, one per attempt.
    times: dict[int, int] = {}  # attempts so far -> when first seen (the run's clock)

    def progress(snapshot) -> None:
        check = snapshot.components.get("check")
        if check is not None and check.errors:
            times.setdefault(check.errors, snapshot.elapsed_ms)

    run_until(topology, lambda: max(times, default=0) >= 7, {MAX_TUPLES: 1000},
              runner=runner, cap_s=180, on_progress=progress)
    # The k-th attempt is due 100 * (2^(k-1) - 1) ms after the first; each is seen at most a
    # progress interval (0.2 s) after it happened (and the first few soon enough to tell).
    k, last = min(times), max(times)
    due = lambda n: 100 * (2 ** (n - 1) - 1)  # noqa: E731
    assert k <= 4 and last >= 7, times
    assert times[last] - times[k] >= due(7) - due(k) - 200, times


def test_a_replay_that_succeeds_is_forgotten():
    # Fails the first delivery of every multiple of 5, then passes it: nothing dies, and no
    # count is left behind (a long run must not keep one per message that ever failed).
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[n] for n in range(20)], ("n",), replay_failed=True))
    b.set_bolt("check", FailOnce()).shuffle_grouping("numbers")
    engine = LocalEngine(b.create_topology(), {"squall.retry.max.retries": 1},
                         clock=SimulatedClock(), capture=True)
    result = engine.run()
    assert sorted(v[0] for t in engine.topology.component_tasks("check")
                  for _s, v in engine.captures[t]) == list(range(20))
    assert result.stats["numbers"].dead_lettered == 0
    assert engine.spouts[0].retries.counted == 0
    # The four first deliveries failed and were replayed once each.
    assert result.stats["numbers"].failed == 4


def test_retries_pickle_with_their_counts_and_waiting_replays():
    # What the Spark reader's spout snapshot and the local checkpoint keep across a restart.
    retries = Retries(RetryPolicy(max_retries=2, initial_delay_ms=100))
    assert retries.failed("a", now_ms=0) == 100
    assert retries.failed("b", now_ms=10) == 110
    assert retries.due(now_ms=100) == ["a"]  # replayed, and it fails again
    assert retries.failed("a", now_ms=100) == 300
    restored = pickle.loads(pickle.dumps(retries))
    assert (restored.attempts("a"), restored.attempts("b"), restored.waiting) == (2, 1, 2)
    assert restored.due(now_ms=110) == ["b"]
    assert restored.failed("c", now_ms=200) == 300  # due with "a": after it, in order
    assert restored.due(now_ms=300) == ["a", "c"]
    assert restored.failed("a", now_ms=300) is None and restored.last_dead_attempts == 3


class DeletesItsInput(Bolt):
    """Fails "b" after deleting the file it came from: its replay cannot be read."""

    def __init__(self, path):
        self.path = path

    def execute(self, tup):
        if tup["w"] == "b":
            self.path.unlink(missing_ok=True)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def test_a_replay_of_a_deleted_file_backs_off(tmp_path):
    # The replay of a record whose file was deleted raises FileNotFoundError in the source's
    # next_tuple on every call: the calls back off as replays do (0.1 s, doubling, at most
    # 10 s), on the runner's clock, instead of one per round (16,441 in 20 s before).
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.jsonl"
    path.write_text('{"w": "a"}\n{"w": "b"}\n{"w": "c"}\n')
    b = TopologyBuilder()
    b.set_spout("in", JsonLinesSource(str(tmp_path / "in"), ["w"], bounded=True))
    b.set_bolt("check", DeletesItsInput(path)).shuffle_grouping("in")
    with simulated_time() as clock:
        engine = LocalEngine(b.create_topology(), {}, clock=clock)
        engine.run(should_stop=lambda: clock.now_ms() >= 60_000 or len(engine.errors) > 1_000)
    missing = [e.time_ms for e in engine.errors if isinstance(e.error, FileNotFoundError)]
    assert len(missing) == len(engine.errors)
    # Its replay is handed back after 0.1 s, then read at 0.1, 0.2, 0.4, ... 12.8 s, and then
    # every 10 s.
    assert missing == [100 * 2 ** k for k in range(8)] + [22_800, 32_800, 42_800, 52_800]


# ---- Trident: a batch that keeps failing ---------------------------------------------------------


@pytest.mark.runners("local", "spark")
def test_a_trident_batch_that_keeps_failing_is_logged_once_with_the_key_that_bounds_it(
        runner, caplog):
    # Its attempts are logged once with the key that bounds them, not once per attempt, and
    # the error that ends the run names the key and its value.
    with caplog.at_level(logging.INFO, logger="squall"), \
            pytest.raises(TransactionFailedError) as failed:
        complete_topology(poison_trident(), {"squall.trident.max.attempts": 4}, runner=runner,
                          max_time_ms=120_000)
    assert failed.value.component == "total"
    assert "Trident transaction 1 failed 4 attempts (squall.trident.max.attempts=4)" in str(
        failed.value)
    assert "can't multiply sequence" in str(failed.value)
    lines = [r.getMessage() for r in caplog.records if "Trident transaction" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "can't multiply sequence" in lines[0]
    assert "tried again after a pause" in lines[0] and (
        "up to 4 attempts in all (squall.trident.max.attempts)" in lines[0])


class StopAt(SimulatedClock):
    """Simulated time that asks the run to stop once it reaches `at_ms` (in a pause), and
    gives up past `give_up_ms` (a run that never sees the stop fails instead of spinning)."""

    def __init__(self, at_ms: int, give_up_ms: int) -> None:
        super().__init__()
        self.at_ms, self.give_up_ms = at_ms, give_up_ms
        self.stop = lambda: None

    def sleep_ms(self, ms: int) -> None:
        super().sleep_ms(ms)
        if self.now_ms() >= self.at_ms:
            self.stop()
        if self.now_ms() > self.give_up_ms:
            raise AssertionError(f"still retrying at {self.now_ms()} ms: the stop was not seen")


def test_a_stop_ends_the_pause_between_trident_attempts(caplog):
    # Retried for ever (Storm's default), attempts at 0, 0.1, 0.3, ... 6.3 s of the runner's
    # clock; the stop comes 1.7 s into the 6.4 s pause after the 7th: the pause ends there, no
    # 8th attempt starts, and the stop ends the run (`abandoned`: replayed by a restart).
    clock = StopAt(at_ms=8_000, give_up_ms=60_000)
    runner = LocalTridentRunner(poison_trident(), {}, clock=clock)
    clock.stop = lambda: runner.request_stop(30)
    with caplog.at_level(logging.WARNING, logger="squall"):
        result = runner.run()
    assert 8_000 <= clock.now_ms() < 8_000 + 100
    assert runner.stopped() == "abandoned"
    assert result.extra["failed_attempts"] == 7 and result.extra["batches"] == 0
    assert any("failed 7 attempts and is not tried again: the run is stopping" in r.getMessage()
               for r in caplog.records)
