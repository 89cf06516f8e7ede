"""benchmarks/nexmark.py at a tiny size: it writes the event files, runs queries of each API
(Trident, Storm's, windowed operators) on the local runner, checks every output against the
reference and prints its table; the Spark runner and Structured Streaming SQL run in CI's second
run (`extended`); over Kafka, a topic on the test suite's broker. Its check tells a wrong output
from the reference's.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.processes import running

from squall.nexmark import GeneratorConfig, events
from squall.nexmark.reference import q1
from squall.trident.tuple import tuple_type

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "nexmark.py"


def _run(tmp_path: Path, *args: str, timeout: float) -> str:
    cmd = [sys.executable, str(SCRIPT), "--events", "1200", "--batch", "400", "--data",
           str(tmp_path / "data"), *args]
    with running(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 text=True) as proc:
        out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-6000:]
    return out


def test_the_benchmark_runs_each_api_on_the_local_runner_and_checks_the_outputs(tmp_path):
    out = _run(tmp_path, "--runners", "local", "--queries", "q1,q9,q11,q15", timeout=120)
    assert out.count("equal to the reference's") == 4, out
    table = out.split("| query |", 1)[1]
    for query in ("q1", "q9", "q11", "q15"):
        assert f"| {query} |  | " in table, table  # a local figure, no Spark one
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["e1200-b400-p2"]
    assert len(list((tmp_path / "data" / "e1200-b400-p2" / "parquet").iterdir())) == 6


@pytest.mark.kafka
def test_the_benchmark_reads_a_topic_of_two_partitions_on_the_local_runner(tmp_path):
    """Trident's batches then hold both partitions' rows: each reaches the output."""
    out = _run(tmp_path, "--source", "kafka", "--runners", "local,sql", "--queries", "q1,q5",
               timeout=180)
    assert out.count("equal to the reference's") == 2, out
    assert "| q1 |  | " in out and "not run (no Kafka connector)" in out


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("nexmark_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_tells_a_wrong_output_from_the_reference():
    module = _benchmark_module()
    stream = list(events(GeneratorConfig(max_events=300)))
    rows = [list(r) for r in q1(stream)]
    want = module.reference_fingerprint("q1", 300, 2)
    assert module.output_fingerprint("q1", reversed(rows)) == want
    rows[5][2] += 1
    assert module.output_fingerprint("q1", rows) != want
    assert module.output_fingerprint("q1", rows[:-1]) != want


def test_a_batch_replayed_after_a_restart_replaces_its_output_files(tmp_path):
    """The output state of a restarted run (a new process: a new factory and state) finds the
    files a killed attempt of the same batch wrote, by the state's name, and replaces them."""
    module = _benchmark_module()
    row = tuple_type(("id", "name"))

    def tuples(n):
        return [row((i, f"x{i}")) for i in range(n)]

    killed = module.BatchFilesFactory(str(tmp_path)).make_state("q1-out", None)
    killed.begin_commit(7)
    killed.write(tuples(3))  # the attempt is killed here, before its batch commits
    replay = module.BatchFilesFactory(str(tmp_path)).make_state("q1-out", None)
    replay.begin_commit(7)
    replay.write(tuples(2))
    replay.commit(7)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 1, files
    assert pq.read_table(tmp_path / files[0]).to_pylist() == [
        {"id": 0, "name": "x0"}, {"id": 1, "name": "x1"}]


@pytest.mark.spark
@pytest.mark.extended
def test_the_benchmark_runs_on_spark_and_structured_streaming(tmp_path):
    out = _run(tmp_path, "--runners", "spark,sql", "--queries", "q1,q11,q12", timeout=600)
    assert out.count("equal to the reference's") == 5, out
    assert "| q12 |" in out and "processing-time windows" in out
