"""The programs the documentation's getting-started page and tutorials tell users to run
(examples/check_wordcount.py, examples/tutorial_*.py) do what the pages say, on the local
runner: each checks its own result and prints OK. (Their Spark runs are the same code on the
Spark runner, which the conformance suite holds to the local runner's results.)"""

from __future__ import annotations

import pytest
from support.examples import load_example


def test_getting_started_check(capsys):
    load_example("check_wordcount").main("local")
    assert "OK: 12780 words, 27 distinct, 2000 sentences acked" in capsys.readouterr().out


def test_storm_tutorial_reads_the_stateful_bolts_totals(tmp_path, capsys):
    load_example("tutorial_storm").main(str(tmp_path / "clicks"), "local")
    assert "OK: 400 views in the state" in capsys.readouterr().out


@pytest.mark.timeout(300)
def test_trident_tutorial_counts_exactly_once_across_a_restart(tmp_path, capsys):
    load_example("tutorial_trident").main(str(tmp_path), "local")
    out = capsys.readouterr().out
    assert "OK: 150 orders counted once each" in out
    assert "lookup: " in out


def test_sessions_tutorial_panes(capsys):
    load_example("tutorial_sessions").main("local")
    out = capsys.readouterr().out
    assert "OK: 5 panes as expected" in out
    assert "LATE" in out and "EARLY" in out
