"""examples/stateful_windowing.py does what its docstring says, on both runners and across a
restart, checked against a direct computation."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from support.examples import ROOT, load_example

from squall import run
from squall.testing import complete_topology


def expected_totals(n: int, first: int = 0, total: int = 0) -> list[int]:
    rnd = random.Random(0)
    values = [rnd.randrange(100) for _ in range(first + n)][first:]
    totals = []
    for end in range(3, n + 1, 3):  # Count(5) sliding Count(3)
        total += sum(values[max(0, end - 5):end])
        totals.append(total)
    if n % 3:  # the partial window at end of input
        total += sum(values[max(0, n - 5 + 3 - n % 3):n])
        totals.append(total)
    return totals


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_running_sum_of_sliding_windows(request, runner, capsys):
    if runner == "spark":
        request.getfixturevalue("spark_session")
    ex = load_example("stateful_windowing")
    topology, conf = ex.topology()
    conf["stateful_windowing.count"] = 300 if runner == "local" else 60
    result = complete_topology(topology, conf, runner=runner)
    totals = expected_totals(conf["stateful_windowing.count"])
    assert result.errors == []
    assert result.tuples("sumbolt") == [[t] for t in totals]
    assert result.stats["integers"].acked == conf["stateful_windowing.count"]
    out = capsys.readouterr().out
    assert f"stateful windowing: {len(totals)} windows, running sum {totals[-1]}" in out


def test_cli_prints_the_result():
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "squall"), "run", "examples/stateful_windowing.py:topology",
         "--runner", "local"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    totals = expected_totals(300)
    assert f"stateful windowing: 100 windows, running sum {totals[-1]}" in proc.stdout


def test_total_survives_a_restart_with_the_durable_provider(tmp_path, capsys):
    ex = load_example("stateful_windowing")
    topology, conf = ex.topology()
    conf.update({"stateful_windowing.count": 60, "topology.state.provider": "durable",
                 "topology.state.provider.config": json.loads(json.dumps({"dir": str(tmp_path)}))})
    total = 0
    for first in (0, 60):  # a restart that continues the ids adds to the first run's total
        conf["stateful_windowing.first_id"] = first
        total = expected_totals(60, first, total)[-1]
        result = run(topology, conf, runner="local")
        assert result.errors == []
        assert f"20 windows, running sum {total}" in capsys.readouterr().out
    conf["stateful_windowing.first_id"] = 0  # ids it has seen: replays, dropped
    result = run(topology, conf, runner="local")
    assert "0 windows, running sum None" in capsys.readouterr().out
    assert result.stats["integers"].acked == 60
