"""Clear errors before Spark starts: unreachable master, missing Java, foreign checkpoint."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from support.examples import ROOT

from squall import Fields, TopologyBuilder
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.fingerprint import CheckpointMismatchError
from squall.runtime.spark.session import SparkUnavailableError, get_session
from squall.testing import FixedTupleSpout


def _topology(spout_id: str):
    b = TopologyBuilder()
    b.set_spout(spout_id, FixedTupleSpout([[1]], Fields("n")))
    return b.create_topology()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_master_says_what_is_wrong():
    port = _free_port()  # nothing listens there
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
