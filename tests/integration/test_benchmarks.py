"""The benchmarks' entry point (benchmarks/run.py) at the small size: each workload runs, checks its
output against its plain-Python reference (a script fails on a wrong answer) and reports its
ratio to its baseline. The default run takes the workloads that start no Spark session (about
half a minute); `-m long` runs every workload, Spark, Redis and the Kafka broker included
(several minutes).
"""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"


def _run(*args: str, timeout: float) -> str:
    proc = subprocess.run([sys.executable, str(RUN), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    return proc.stdout.split("===== summary", 1)[1]


def _names(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, str(RUN), "--list", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return [line.split()[0] for line in proc.stdout.splitlines()]


def test_the_summary_picks_the_ratio_lines():
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert doctest.testmod(module).failed == 0


def test_the_workloads_without_spark_run_at_the_small_size_and_report_their_ratios():
    summary = _run("--small", "--no-spark", timeout=300)
    lines = summary.splitlines()
    for name in ("w1-local", "w1-stages", "w2-windowed-bolts", "w2-w3-operators", "latency-w4",
                 "trident-chain"):
        assert any(line.split()[:2] == [name, "ok"] for line in lines), summary
    assert "ratio to plain loop" in summary
    assert "ratio to the plain loop" in summary


@pytest.mark.long
@pytest.mark.spark
@pytest.mark.kafka
def test_every_workload_runs_at_the_small_size():
    summary = _run("--small", timeout=1800)
    lines = summary.splitlines()
    for name in _names():
        assert any(line.split()[:2] == [name, "ok"] for line in lines), summary
    assert "ratio to the hand-written job" in summary
