"""Clear errors: before Spark starts (unreachable master, missing Java, foreign checkpoint), and
a Trident operation's error in a running `squall run`, told in one line with the user's file and
line, its full traceback in the run's log file, and a stop that is not an error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.examples import ROOT
from support.ports import free_port
from support.processes import running

from squall import Fields, TopologyBuilder
from squall.runtime.fingerprint import CheckpointMismatchError
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.session import SparkUnavailableError, get_session
from squall.testing import FixedTupleSpout
from squall.tracebacks import TRACE_NOTE


def _topology(spout_id: str):
    b = TopologyBuilder()
    b.set_spout(spout_id, FixedTupleSpout([[1]], Fields("n")))
    return b.create_topology()


def test_unreachable_master_says_what_is_wrong():
    port = free_port()  # nothing listens there
    with pytest.raises(SparkUnavailableError, match=f"cannot reach the Spark master spark://127.0.0.1:{port}"):
        get_session(f"spark://127.0.0.1:{port}")


def test_checkpoint_of_another_topology_is_refused_and_left_intact(tmp_path):
    (tmp_path / "topology.json").write_text('{"other": {"kind": "spout"}}')
    with pytest.raises(CheckpointMismatchError, match="written by a different topology"):
        SparkRunner(_topology("numbers"), checkpoint_location=str(tmp_path))
    assert (tmp_path / "topology.json").read_text() == '{"other": {"kind": "spout"}}'


def test_missing_java_is_reported_by_the_cli(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    proc = subprocess.run(
        [sys.executable, "-m", "squall.cli.main", "run", "examples/wordcount.py:topology"],
        cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "Java was not found" in proc.stderr
    assert "--runner local" in proc.stderr


# Trident's word count, endless, whose `Split` fails once: the first time it meets "moon" (the
# marker file `failed` does not exist yet). The retry of that batch succeeds, and every
# sentence split after it touches `healthy`.
TRIDENT_ONCE = textwrap.dedent('''\
    import os

    from squall.trident import Count, FixedBatchSpout, Function, TridentTopology
    from squall.trident.state import DurableMapState, StateType

    HERE = os.environ["ERRORS_TEST_DIR"]


    class Split(Function):
        def execute(self, tup, collector):
            failed = os.path.join(HERE, "failed")
            if "moon" in tup[0] and not os.path.exists(failed):
                open(failed, "w").close()
                raise ValueError("no moons yet")
            if os.path.exists(failed):
                open(os.path.join(HERE, "healthy"), "w").close()
            for word in tup[0].split(" "):
                collector.emit([word])


    def topology():
        t = TridentTopology()
        spout = FixedBatchSpout(["sentence"], 2, ["the cow"], ["over the moon"], cycle=True)
        (t.new_stream("spout1", spout).each(["sentence"], Split(), ["word"]).group_by(["word"])
         .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(),
                               ["count"]))
        return t.build()
    ''')
RAISE_LINE = 14  # raise ValueError("no moons yet")


@pytest.mark.runners(spark_session=False)
def test_a_trident_error_is_one_line_with_the_users_file_and_a_stop_is_no_error(runner, tmp_path):
    path = tmp_path / "moons.py"
    path.write_text(TRIDENT_ONCE)
    err_path = tmp_path / "stderr"
    env = dict(os.environ, ERRORS_TEST_DIR=str(tmp_path), SQUALL_RUN_DIR=str(tmp_path / "run"),
               SQUALL_LOG_DIR=str(tmp_path / "logs"))
    with open(err_path, "w") as err, running(
            [sys.executable, "-m", "squall.cli.main", "run", f"{path}:topology",
             "--runner", runner, "--progress-every", "0"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err) as proc:
        deadline = time.monotonic() + 240
        while not (tmp_path / "healthy").exists():  # failed once, then went on
            assert proc.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the failed batch was not retried"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    stderr = err_path.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    told = [line for line in stderr.splitlines() if "no moons yet" in line]
    assert len(told) == 2, stderr  # the attempt's line, and the summary's
    assert told[0].startswith("ERROR squall: Trident transaction ")
    assert f"ValueError: no moons yet (at {path}:{RAISE_LINE}, in execute)" in told[0]
    for marker in ("Traceback", "<dynamic-code>", "py4j", "Py4J", "Exception", "\tat "):
        assert marker not in stderr.replace("Py4J, Python workers", ""), stderr[-3000:]
    summary = stderr.split("squall: summary")[1]
    assert "errors reported: 1;" in summary, summary  # the stop added none
    assert "b-1-each TridentOperationError: 1" in " ".join(summary.split())
    assert "stopped on request (SIGINT): every tuple tree in flight finished" in summary
    if runner == "spark":  # the full traceback, with the user's file, in the run's log file
        (log,) = (tmp_path / "logs").iterdir()
        text = log.read_text()
        assert TRACE_NOTE in text
        assert f'  File "{path}", line {RAISE_LINE}, in execute' in text
