"""Stopping `squall run` the way an operator does: SIGTERM, SIGINT, a second signal, and the
lifecycle verbs (`list`, `deactivate`, `activate`, `kill`), on both runners, as real processes.

Every run is `tests/support/stop_topology.py` (JSON lines -> slow bolt -> running count in durable
state -> JSON lines sink) with a checkpoint, so a restart after a stop can be checked exactly: every
record once in the output, every key's running counts 1..n.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import spawn, stop_group

from squall import Fields, TopologyBuilder
from squall.cli.control import request
from squall.cli.run import _rebalance
from squall.cli.rundir import lookup
from squall.connectors import read_jsonl
from squall.errors import SquallError
from squall.testing import FixedTupleSpout

# Each test runs `squall run` in subprocesses of its own: they may go to different workers.
pytestmark = pytest.mark.spread

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/support/stop_topology.py:build"
POISON_TRIDENT = "tests/support/poison_trident.py:build"
POISON_TRANSACTIONAL = "tests/support/poison_transactional.py:build"
KEYS = 7


def _input(tmp: Path, files: int = 30, per_file: int = 30) -> int:
    (tmp / "in").mkdir(parents=True)
    i = 0
    for f in range(files):
        lines = []
        for _ in range(per_file):
            lines.append(json.dumps({"id": i, "key": f"k{i % KEYS}"}) + "\n")
            i += 1
        (tmp / "in" / f"part-{f:04d}.jsonl").write_text("".join(lines))
    return i


def _env(tmp: Path, bounded: bool = True) -> dict[str, str]:
    return dict(os.environ, STOP_TEST_DIR=str(tmp), STOP_TEST_BOUNDED="1" if bounded else "0",
                SQUALL_RUN_DIR=str(tmp / "run"), SQUALL_LOG_DIR=str(tmp / "logs"))


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _runs_stopped() -> Iterator[None]:
    """Every run a test started is killed with its process group when the test ends, also when
    it fails (a failed stop test once left its run and JVM going for half an hour)."""
    yield
    while _STARTED:
        stop_group(_STARTED.pop())


def _start(tmp: Path, runner: str, *extra: str, bounded: bool = True,
           name: str = "stoptest") -> subprocess.Popen:
    """`squall run` in the background; its output goes to files (a pipe nobody reads while
    the test waits would fill up and block the run)."""
    n = len(list(tmp.glob("stderr-*")))
    proc = spawn(
        [sys.executable, "-m", "squall.cli.main", "run", TARGET, "--runner", runner,
         "--checkpoint", str(tmp / "ckpt"), "--name", name, "--progress-every", "0.5", *extra],
        cwd=ROOT, env=_env(tmp, bounded), stdout=open(tmp / f"stdout-{n}", "w"),  # noqa: SIM115
        stderr=open(tmp / f"stderr-{n}", "w"))  # noqa: SIM115
    proc.stderr_path = tmp / f"stderr-{n}"  # type: ignore[attr-defined]
    _STARTED.append(proc)
    return proc


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Kill the run (its process group: its JVM too) if the test ends before it does."""
    try:
        yield proc
    finally:
        stop_group(proc)


def _finish(proc: subprocess.Popen, timeout_s: float = 300) -> str:
    """Wait for the run to end; its stderr."""
    proc.wait(timeout=timeout_s)
    return proc.stderr_path.read_text()  # type: ignore[attr-defined]


def _squall(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "squall.cli.main", *args], cwd=ROOT,
                          env=_env(tmp), capture_output=True, text=True, timeout=120)


def _stats(tmp: Path, name: str = "stoptest") -> dict[str, dict[str, int]]:
    """Every component's counters, asked of the run's control endpoint."""
    entry = lookup(name, tmp / "run")
    assert entry is not None, "the run is not registered"
    out = {}
    for line in request(entry, "GET", "/status")["components"]:
        parts = line.split()
        out[parts[0]] = {k: int(v) for k, _, v in (p.partition("=") for p in parts[3:])
                         if v.isdigit()}
    return out


def _status(tmp: Path, name: str = "stoptest") -> str:
    return request(lookup(name, tmp / "run"), "GET", "/status")["status"]


def _wait_for(predicate, timeout_s: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _started(tmp: Path, proc: subprocess.Popen) -> None:
    """Wait until the run has processed some records (and is still running)."""
    def some() -> bool:
        assert proc.poll() is None, proc.stderr_path.read_text()[-3000:]
        try:
            return _stats(tmp)["count"]["executed"] > 0
        except (AssertionError, OSError, KeyError):
            return False
    _wait_for(some, 300, what="the first records to be processed")


def _summary_counts(summary: str, component: str) -> dict[str, int]:
    """A component's counters in a summary printed by `squall run`."""
    line = next(ln for ln in summary.splitlines() if ln.split()[:1] == [component])
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)(?![.\w])", line)}


def _no_traceback(stderr: str) -> None:
    for marker in ("Traceback", "Exception", "py4j", "EOFError", "KeyboardInterrupt"):
        assert marker not in stderr, stderr[-3000:]


def _check_exact(tmp: Path, total: int) -> None:
    records = read_jsonl(tmp / "out")
    ids = Counter(r["id"] for r in records)
    assert [i for i, c in ids.items() if c > 1] == [], "records written twice"
    assert sorted(ids) == list(range(total)), f"{total - len(ids)} records lost"
    true = Counter(f"k{i % KEYS}" for i in range(total))
    for key, n in true.items():
        assert sorted(r["n"] for r in records if r["key"] == key) == list(range(1, n + 1)), key


# Both signals take the same path on Spark once the CLI caught them: SIGTERM on Spark is a
# minute and a half of the suite for no new line, so it runs with the long ones (-m long).
# SIGINT on Spark runs in CI's second run (`extended`): the default run has each of its parts
# on Spark, a signal's graceful stop (test_sigint_then_a_second_signal_stops_at_once and
# test_sigterm_stops_a_transactional_batch_that_keeps_failing) and an exact restart on the
# checkpoint after a graceful stop (the rebalance test below).
@pytest.mark.runners(spark_session=False)
@pytest.mark.parametrize(("runner", "signum"), [
    pytest.param("local", signal.SIGTERM, id="local-SIGTERM"),
    pytest.param("local", signal.SIGINT, id="local-SIGINT"),
    pytest.param("spark", signal.SIGINT, id="spark-SIGINT",
                 marks=[pytest.mark.spark, pytest.mark.extended]),
    pytest.param("spark", signal.SIGTERM, id="spark-SIGTERM",
                 marks=[pytest.mark.spark, pytest.mark.long]),
], indirect=["runner"])
def test_a_signal_stops_gracefully_and_a_restart_resumes_exactly(runner, signum, tmp_path):
    total = _input(tmp_path)
    # The signal must come mid-run: 20 ms per record, and on Spark micro-batches of at most 60
    # records (a first batch takes the whole input otherwise, and a stop waits for the trees
    # in flight: a quiet machine then finished the input before the stop began).
    proc = _start(tmp_path, runner, "-c", "stop.test.sleep.ms=20",
                  "-c", "squall.spark.batch.max.tuples=60")
    _started(tmp_path, proc)
    proc.send_signal(signum)
    err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    _no_traceback(err)
    assert f"{signum.name} received: stopping gracefully" in err
    assert f"stopped on request ({signum.name}): every tuple tree in flight finished" in err
    summary = err.split("squall: summary")[1]
    assert "count            bolt  x2" in summary and "errors reported: 0" in summary
    done = len(read_jsonl(tmp_path / "out"))
    assert 0 < done < total, "the stop was not mid-run"
    assert lookup("stoptest", tmp_path / "run") is None  # unregistered
    # The restart, without a signal, finishes the input: each record exactly once. It ends
    # normally, also without a traceback (PySpark's source runner torn down at the query's
    # stop printed an EOFError on some runs). The stop is over: the rest of the input need not
    # wait (without `fast` the restart too took 20 ms a record, half a minute).
    (tmp_path / "fast").touch()
    again = _start(tmp_path, runner)
    err = _finish(again, 300)
    assert again.returncode == 0, err[-3000:]
    _no_traceback(err)
    _check_exact(tmp_path, total)


@pytest.mark.runners(spark_session=False)
def test_sigint_then_a_second_signal_stops_at_once(runner, tmp_path):
    _input(tmp_path)
    # The record with id 0 is never acked: a graceful stop waits for it until --stop-timeout.
    proc = _start(tmp_path, runner, "-c", "stop.test.hold=true", "--stop-timeout", "300")
    _started(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _wait_for(lambda: _status(tmp_path) == "stopping", 30, "the stop to begin")
    time.sleep(1.0)
    assert proc.poll() is None, "the graceful stop did not wait for the tree in flight"
    asked = time.monotonic()
    proc.send_signal(signal.SIGINT)
    err = _finish(proc, 60)
    assert time.monotonic() - asked < 10, "the second signal did not stop at once"
    assert proc.returncode == 130, err[-3000:]
    _no_traceback(err)
    assert "SIGINT received again: stopping at once" in err
    assert "squall: counters at the stop" in err and "src              spout x2" in err


def test_a_stop_timeout_with_work_in_flight_exits_with_the_signal_status(tmp_path):
    _input(tmp_path, files=4)
    proc = _start(tmp_path, "local", "-c", "stop.test.hold=true", "--stop-timeout", "0.5")
    _started(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    err = _finish(proc, 60)
    assert proc.returncode == 143, err[-3000:]
    _no_traceback(err)
    assert "with work still in flight after the stop timeout" in err
    assert "squall: summary" in err


def _start_retrying(tmp: Path, runner: str, target: str, failed: str) -> subprocess.Popen:
    """`squall run TARGET` whose first transaction fails on every attempt; returns once its
    log shows `failed` (a failed attempt)."""
    proc = spawn(
        [sys.executable, "-m", "squall.cli.main", "run", target, "--runner", runner,
         "--checkpoint", str(tmp / "ckpt"), "--name", "retrying", "--progress-every", "0.5",
         "--stop-timeout", "30"],
        cwd=ROOT, env=_env(tmp), stdout=open(tmp / "stdout", "w"),  # noqa: SIM115
        stderr=open(tmp / "stderr", "w"))  # noqa: SIM115
    proc.stderr_path = tmp / "stderr"  # type: ignore[attr-defined]
    _STARTED.append(proc)

    def retrying() -> bool:
        err = (tmp / "stderr").read_text()
        assert proc.poll() is None, err[-3000:]
        return failed in err

    _wait_for(retrying, 300, "the first failed attempt")
    return proc


def _stopped_within(proc: subprocess.Popen, seconds: float) -> str:
    """SIGTERM the run; its stderr once it ended, within `seconds`."""
    proc.send_signal(signal.SIGTERM)
    asked = time.monotonic()
    err = _finish(proc, 60)
    assert time.monotonic() - asked < seconds, "the stop did not end the retries"
    return err


@pytest.mark.runners(spark_session=False)
def test_sigterm_stops_a_trident_batch_that_keeps_failing(runner, tmp_path):
    # Storm's default tries a failed Trident batch again for ever: the stop must still end the
    # run within its timeout (the attempt that fails during the stop is not tried again, and
    # the pause before the next one ends), with exit 0 as the transactional runners' stop (a
    # failed attempt is settled, as a failed tuple tree is; a restart replays it).
    # The retries are logged once with the key that bounds them, not once per attempt.
    proc = _start_retrying(tmp_path, runner, POISON_TRIDENT, "Trident transaction 1 failed")
    err = _stopped_within(proc, 20)
    assert proc.returncode == 0, err[-3000:]
    _no_traceback(err)
    assert "SIGTERM received: stopping gracefully" in err
    assert ("stopped on request (SIGTERM): a transaction that failed during the stop was not "
            "tried again; a restart with the same checkpoint replays it") in err
    assert "is not tried again: the run is stopping" in err
    assert err.count("set squall.trident.max.attempts to bound its attempts") == 1, err[-3000:]
    assert "TypeError: can't multiply sequence" in err
    summary = err.split("squall: summary")[1]
    assert "total" in summary and "acked=0" in summary


@pytest.mark.runners(spark_session=False)
def test_sigterm_stops_a_transactional_batch_that_keeps_failing(runner, tmp_path):
    # The same for a transactional topology: its stop ends the retries of a transaction that
    # fails on every attempt, within the stop timeout, and exits 0 (replayed by a restart).
    proc = _start_retrying(tmp_path, runner, POISON_TRANSACTIONAL, "cannot handle")
    err = _stopped_within(proc, 20)
    assert proc.returncode == 0, err[-3000:]
    _no_traceback(err)
    assert "SIGTERM received: stopping gracefully" in err and "squall: summary" in err
    assert "boom RuntimeError" in err.split("squall: summary")[1]


@pytest.mark.runners(spark_session=False)
def test_list_deactivate_activate_and_kill(runner, tmp_path):
    total = _input(tmp_path, files=60)
    # 20 ms per record in `slow`: the 1,800 records take at least 18 s, so the spouts cannot have
    # emitted all of them before the deactivation arrives (with the default 2 ms a loaded machine
    # let a Spark run emit everything first, and "nothing new is emitted" proved nothing).
    # At most 60 records a Spark micro-batch: the batch in flight when a verb arrives (which
    # `deactivate` and `kill` wait for) is a second of `slow`, not several.
    proc = _start(tmp_path, runner, "-c", "stop.test.sleep.ms=20",
                  "-c", "squall.spark.batch.max.tuples=60", bounded=False)
    with _reaped(proc):
        _started(tmp_path, proc)
        listed = _squall(tmp_path, "list")
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()[:2]
        assert header.split() == ["NAME", "RUNNER", "UPTIME", "STATUS", "PID", "CHECKPOINT"]
        assert row.split()[:2] == ["stoptest", runner]
        assert row.split()[3:] == ["active", str(proc.pid), str(tmp_path / "ckpt")]

        done = _squall(tmp_path, "deactivate", "stoptest")
        assert (done.returncode, done.stdout.strip()) == (0, "squall deactivate: stoptest is "
                                                             "inactive")
        # Once the spouts are no longer pulled (on Spark: once their reader, a process of its
        # own, has seen the request), in-flight trees finish; then nothing new is emitted.
        _wait_for(lambda: _status(tmp_path) == "inactive", 60, "the deactivation")
        _wait_for(lambda: _stats(tmp_path)["src"]["pending"] == 0, 60, "trees to settle")
        time.sleep(1.0)
        before = _stats(tmp_path)["src"]["emitted"]
        time.sleep(2.0)
        paused = _stats(tmp_path)["src"]["emitted"]
        assert paused == before < total, "a deactivated spout kept emitting"
        assert "inactive" in _squall(tmp_path, "list").stdout

        done = _squall(tmp_path, "activate", "stoptest")
        assert done.returncode == 0, done.stderr
        _wait_for(lambda: _stats(tmp_path)["src"]["emitted"] > paused, 60,
                  "the spouts to emit again")

        killed = _squall(tmp_path, "kill", "stoptest", "--wait", "60")
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.splitlines()[-1] == "squall kill: stoptest stopped"
        err = _finish(proc, 60)
        assert proc.returncode == 0, err[-3000:]
        _no_traceback(err)
        assert "stopped on request (squall kill)" in err and "squall: summary" in err
        assert "no topology is running" in _squall(tmp_path, "list").stdout
        # The spouts' own hooks were called, in order, by whatever hosts them (on Spark the
        # streaming source's reader, a process of its own).
        hooks = sorted(tmp_path.glob("hooks-*.txt"))
        assert len(hooks) == 2
        for path in hooks:
            assert path.read_text().split() == ["activate", "deactivate", "activate",
                                                "deactivate"], path.name
        missing = _squall(tmp_path, "kill", "stoptest")
        assert missing.returncode == 1 and "no running topology named 'stoptest'" in (
            missing.stderr)


@pytest.mark.runners(spark_session=False)
def test_rebalance_restarts_on_the_checkpoint_with_the_new_parallelism(runner, tmp_path):
    # 1,800 records at 20 ms each in `slow`: the input lasts well past the rebalance request,
    # which comes after five `squall` commands (with 900, a loaded machine's Spark run finished
    # its whole input while stopping for the rebalance, and a run that has finished its input
    # is not started again). At most 300 records a Spark micro-batch: once the rebalance is
    # under way, the rest of the input goes in a few batches, not thirty (each has its cost).
    total = _input(tmp_path, files=60)
    proc = _start(tmp_path, runner, "-c", "stop.test.sleep.ms=20",
                  "-c", "squall.spark.batch.max.tuples=300")
    with _reaped(proc):
        _started(tmp_path, proc)
        # Refused before anything stops, with what to do; the run goes on.
        spout = _squall(tmp_path, "rebalance", "stoptest", "-n", "src=3")
        assert spout.returncode == 1
        assert "parallelism of 'src' changed from 2 to 3, but a spout's tasks own" in (
            spout.stderr)
        unknown = _squall(tmp_path, "rebalance", "stoptest", "-n", "cuont=3")
        assert unknown.returncode == 1
        assert "no component 'cuont'; the topology has 'count', 'out', 'slow', 'src'" in (
            unknown.stderr)
        same = _squall(tmp_path, "rebalance", "stoptest", "-n", "count=2")
        assert same.returncode == 1 and "'count' has 2 tasks already" in same.stderr
        bad = _squall(tmp_path, "rebalance", "stoptest", "-n", "count=0")
        assert bad.returncode == 2 and "-n takes COMPONENT=N" in bad.stderr
        assert _status(tmp_path) == "active"

        done = _squall(tmp_path, "rebalance", "stoptest", "-n", "count=3", "-e", "out=1",
                       "--wait", "120")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == ("squall rebalance: stoptest: stopping to start again "
                                       "with count 2 -> 3, out 2 -> 1 tasks")
        (tmp_path / "fast").touch()  # the stop is under way: the rest of the input need not wait
        err = _finish(proc, 300)
    assert proc.returncode == 0, err[-3000:]
    _no_traceback(err)
    before, after = err.split("squall: rebalancing 'stoptest' (count 2 -> 3, out 2 -> 1 tasks): "
                              f"starting again on checkpoint {tmp_path / 'ckpt'}")
    assert "count            bolt  x2" in before and "out              bolt  x2" in before
    summary = after.split("squall: summary")[1]
    assert "count            bolt  x3" in summary and "out              bolt  x1" in summary
    # The summary is the run's, across both starts: every record emitted and acked once (the
    # second start alone showed part of them, acked more than emitted on Spark).
    src = _summary_counts(summary, "src")
    assert (src["emitted"], src["acked"], src["failed"]) == (total, total, 0), summary
    assert "no rates" not in summary
    # The state was redistributed and the input resumed where the stop left it: every record
    # once, every key's running count 1..n.
    _check_exact(tmp_path, total)


def test_a_rebalance_needs_a_checkpoint():
    # The check the control endpoint runs before it stops anything.
    topology = TopologyBuilder()
    topology.set_spout("words", FixedTupleSpout([["a"]], Fields("word")))
    stopped = []
    with pytest.raises(SquallError, match="Start it with --checkpoint DIR to rebalance it"):
        _rebalance(topology.create_topology(), {}, None, {"words": 2}, {},
                   lambda: stopped.append(1))
    assert stopped == []


def test_the_control_endpoint_wants_the_runs_token_and_listens_on_loopback(tmp_path):
    _input(tmp_path, files=60)
    proc = _start(tmp_path, "local", bounded=False)
    try:
        _started(tmp_path, proc)
        entry = lookup("stoptest", tmp_path / "run")
        assert entry is not None
        path = tmp_path / "run" / "stoptest.json"
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        forged = type(entry)(**{**entry.__dict__, "token": "0" * 32})
        with pytest.raises(Exception, match="wrong or missing token"):
            request(forged, "POST", "/kill")
        listening = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
        lines = [ln for ln in listening.splitlines() if f":{entry.port} " in ln]
        assert lines and all("127.0.0.1:" in ln for ln in lines), listening
        # A second run under the same name is refused while the first runs.
        second = _squall(tmp_path, "run", TARGET, "--runner", "local", "--name", "stoptest")
        assert second.returncode == 2 and "already running" in second.stderr
        # On Spark too, in one line, before Spark starts (its output is not even routed).
        on_spark = _squall(tmp_path, "run", TARGET, "--runner", "spark", "--name", "stoptest")
        lines = on_spark.stderr.strip().splitlines()
        assert on_spark.returncode == 2 and len(lines) == 1 and "already running" in lines[0], \
            on_spark.stderr
    finally:
        stop_group(proc)
    # The killed run's entry is stale: ignored and removed.
    assert lookup("stoptest", tmp_path / "run") is None
    assert not (tmp_path / "run" / "stoptest.json").exists()


@pytest.mark.spark
@pytest.mark.long  # a third minute of Spark on the path the SIGINT case takes
def test_submit_forwards_sigterm_to_the_driver_as_a_graceful_stop(tmp_path):
    total = _input(tmp_path)
    err_path = tmp_path / "submit-stderr"
    proc = spawn(
        [sys.executable, "-m", "squall.cli.main", "submit", TARGET, "--master", "local[2]",
         "--checkpoint", str(tmp_path / "ckpt"), "--name", "stoptest",
         "--progress-every", "0.5"],
        cwd=ROOT, env=_env(tmp_path), stdout=open(tmp_path / "submit-stdout", "w"),  # noqa: SIM115
        stderr=open(err_path, "w"))  # noqa: SIM115
    proc.stderr_path = err_path  # type: ignore[attr-defined]
    with _reaped(proc):
        _started(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)
        err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    _no_traceback(err)
    assert "asking 'stoptest' to stop gracefully" in err
    assert "stopped on request (squall kill): every tuple tree in flight finished" in err
    assert "squall: summary" in err
    assert 0 < len(read_jsonl(tmp_path / "out")) < total


def test_submit_passes_the_name_and_the_stop_timeout_to_the_driver(tmp_path):
    proc = _squall(tmp_path, "submit", TARGET, "--master", "local[2]", "--name", "nightly",
                   "--stop-timeout", "5", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.split()
    assert argv[argv.index("--name") + 1] == "nightly"
    assert argv[argv.index("--stop-timeout") + 1] == "5.0"
    assert argv[argv.index("run") - 1].endswith("submit_entry.py")


# ---- in process: the Runner controls on the local runner -------------------------------------


def test_local_engine_calls_the_spouts_deactivate_and_activate_and_drains_on_stop():
    from squall import Fields, Spout, TopologyBuilder, Values
    from squall.runtime.local.engine import LocalEngine

    class Numbers(Spout):
        def open(self, conf, context, collector):
            super().open(conf, context, collector)
            self.n, self.hooks = 0, []

        def activate(self):
            self.hooks.append("activate")

        def deactivate(self):
            self.hooks.append("deactivate")

        def next_tuple(self):
            self.n += 1
            self.collector.emit(Values(self.n), msg_id=self.n)

        def declare_output_fields(self, d):
            d.declare(Fields("n"))

    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    # Real time: a spout that always emits never lets a simulated clock move.
    engine = LocalEngine(b.create_topology(), {"topology.max.spout.pending": 5})
    seen: list[tuple[str, int]] = []

    def step(snapshot):  # called by the run loop (its thread) every 100 ms
        emitted = snapshot.components["numbers"].emitted
        seen.append((snapshot.status, emitted))
        if len(seen) == 2:
            engine.deactivate()
        elif len(seen) == 5:
            engine.activate()
        elif len(seen) == 7:
            engine.request_stop(timeout_s=60)

    result = engine.run(on_progress=step, progress_every_ms=100)
    spout = engine.spouts[0].spout
    assert spout.hooks == ["activate", "deactivate", "activate", "deactivate"]
    inactive = [e for s, e in seen[2:5]]
    assert seen[2][0] == "inactive" and len(set(inactive)) == 1, seen  # no emit while inactive
    assert seen[5][1] > inactive[0], seen  # emitting again
    assert engine.stopped() == "drained" and engine.status() == "stopping"
    assert result.stats["numbers"].pending == 0
    assert result.stats["numbers"].acked == result.stats["numbers"].emitted
