"""`squall run` with its default options, for every kind of topology, on both runners.

One small example per kind (basic bolts, a stateful bolt, windowed bolts, a stateful windowed
bolt, windowed operators, a transactional topology) runs as a user runs it: a subprocess, real
time, live progress on (`--progress-every` left at its default). Each run must exit 0, print at
least one progress block, whose figures for each component as last printed agree with the
summary's (the final counters), and print or store the example's known result, computed here from
the example's own input generator. Off a terminal a block lists only the components whose line
changed, so each component's last line is found across the blocks.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.examples import ROOT, load_example

# Each test runs `squall run` in subprocesses of its own: they may go to different workers.
pytestmark = pytest.mark.spread

SQUALL = [sys.executable, "-m", "squall.cli.main"]
HEADER = re.compile(r"^\[\s*\d+\.\d+s\]( .*)?$")  # a block's first line (with the status)
COMPONENT = re.compile(r"^(\S+)\s+(spout|bolt)\s+x(\d+)\s+(.*)$")

Counters = dict[str, dict[str, str]]  # component -> counter name -> value as printed


@dataclass
class Run:
    """What one `squall run` printed, parsed."""

    runner: str
    stdout: str
    progress: list[Counters]  # every progress block, in order
    summary: Counters
    tmp: Path


def _components(lines: list[str]) -> Counters:
    out: Counters = {}
    for line in lines:
        m = COMPONENT.match(line.strip())
        if m is None:
            break
        # `name=value` figures; rates ("1,234/s") and labels ("execute") are not counters.
        counters = dict(part.split("=", 1) for part in m.group(4).split() if "=" in part)
        out[m.group(1)] = {"kind": m.group(2), "tasks": m.group(3), **counters}
    return out


def squall_run(target: str, runner: str, tmp: Path, *conf: str) -> Run:
    """`squall run TARGET --runner RUNNER [-c ...]` with every other option at its default.

    TMPDIR points into the test's directory, so the default checkpoint location (a fresh
    temporary directory) and the examples' default stores are removed with it.
    """
    args = [*SQUALL, "run", target, "--runner", runner]
    for c in conf:
        args += ["-c", c]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"on the {runner} runner" in proc.stderr
    lines = proc.stderr.splitlines()
    progress = [_components(lines[i + 1:]) for i, line in enumerate(lines) if HEADER.match(line)]
    assert progress, f"no progress block was printed:\n{proc.stderr[-4000:]}"
    assert "squall: summary" in lines, proc.stderr[-4000:]
    after = lines[lines.index("squall: summary") + 1:]
    summary = _components(after)
    # After the components: on Spark the last batch and, for a topology of spouts and bolts,
    # its start-up (Trident and transactional runs track no tuple trees), then the errors line.
    rest = after[len(summary):]
    if runner == "spark":
        assert rest[0].startswith("spark: last batch"), proc.stderr[-4000:]
        rest = rest[1:]
        if rest[0].startswith("start-up: Spark "):
            rest = rest[1:]
    assert rest[0].startswith("errors reported: 0;"), proc.stderr[-4000:]
    return Run(runner, proc.stdout, progress, summary, tmp)


def _check_progress(run: Run, components: set[str]) -> None:
    # The blocks name every component, and each component's last printed line (the last block
    # is printed once the run ended) shows the same final figures as the summary.
    last: Counters = {}
    for block in run.progress:
        assert set(block) <= components, block
        last.update(block)
    assert set(last) == components == set(run.summary)
    for cid, figures in last.items():
        shared = set(figures) & set(run.summary[cid])
        assert {"kind", "tasks"} < shared, (cid, figures, run.summary[cid])
        assert {k: figures[k] for k in shared} == {k: run.summary[cid][k] for k in shared}, cid


# ---- the examples and their known results ---------------------------------------------------
def _top_lines(counts: Counter[str]) -> list[str]:
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return [f"{count:>10}  {word}" for word, count in top]


def _words(sentences: list[str], n: int) -> Counter[str]:
    rnd = random.Random(0)
    return Counter(w for _ in range(n) for w in rnd.choice(sentences).split())


def basic(runner: str, tmp: Path) -> None:
    ex = load_example("wordcount")
    run = squall_run("examples/wordcount.py:topology", runner, tmp, "wordcount.sentences=200")
    _check_progress(run, {"sentences", "split", "count", "report"})
    counts = _words(ex.SENTENCES, 200)
    assert run.stdout.splitlines() == [
        f"word count: {sum(counts.values())} words, {len(counts)} distinct", *_top_lines(counts)]
    assert run.summary["sentences"]["acked"] == "200"
    assert run.summary["sentences"]["failed"] == "0"
    assert run.summary["split"]["executed"] == "200"
    assert run.summary["count"]["executed"] == str(sum(counts.values()))


def stateful(runner: str, tmp: Path) -> None:
    ex = load_example("stateful_wordcount")
    run = squall_run("examples/stateful_wordcount.py:topology", runner, tmp,
                     "stateful_wordcount.sentences=50")
    _check_progress(run, {"sentences", "split", "count", "report"})
    counts = _words(ex.SENTENCES, 50)
    assert run.stdout.splitlines() == [
        f"stateful word count: {len(counts)} distinct words updated", *_top_lines(counts)]
    assert run.summary["sentences"]["acked"] == "50"
    assert run.summary["sentences"]["failed"] == "0"


def windowed(runner: str, tmp: Path) -> None:
    run = squall_run("examples/sliding_window.py:topology", runner, tmp, "sliding.count=300")
    _check_progress(run, {"integers", "slidingsum", "tumblingavg", "printer"})
    rnd = random.Random(0)
    values = [rnd.randrange(1000) for _ in range(300)]
    sums = [sum(values[max(0, k - 30):k]) for k in range(10, 301, 10)]  # Count(30) by Count(10)
    avgs = [sum(sums[i:i + 3]) / 3 for i in range(0, len(sums), 3)]  # tumbling Count(3)
    assert run.stdout.splitlines() == [f"avg of sums: {a:.2f}" for a in avgs]
    assert run.summary["integers"]["acked"] == "300"
    assert run.summary["integers"]["failed"] == "0"


def stateful_windowed(runner: str, tmp: Path) -> None:
    run = squall_run("examples/stateful_windowing.py:topology", runner, tmp,
                     "stateful_windowing.count=60")
    _check_progress(run, {"integers", "sumbolt", "printer"})
    rnd = random.Random(0)
    values = [rnd.randrange(100) for _ in range(60)]
    # Count(5) sliding Count(3): a running total of every window's sum (60 is a multiple of 3).
    totals = [sum(values[max(0, end - 5):end]) for end in range(3, 61, 3)]
    assert run.stdout.splitlines() == [f"stateful windowing: 20 windows, running sum {sum(totals)}"]
    assert run.summary["integers"]["acked"] == "60"


def windowed_operator(runner: str, tmp: Path) -> None:
    ex = load_example("user_sessions")
    run = squall_run("examples/user_sessions.py:topology", runner, tmp, "sessions.events=300")
    _check_progress(run, {"clicks", "sessions", "report"})
    sessions = ex.sessionize(ex.generate(300))
    out = run.stdout.splitlines()
    assert out[0].startswith(f"{len(sessions)} sessions, 300 views, ")
    assert out[1:] == [f"{user:>4} {start} +{(end - start) // 60_000:>4} min: {views} views"
                       for (user, start, end), views in sorted(sessions.items())[:10]]
    assert run.summary["clicks"]["acked"] == "300"


def transactional(runner: str, tmp: Path) -> None:
    ex = load_example("transactional_global_count")
    db = {"provider": "durable", "dir": str(tmp / "db")}
    run = squall_run("examples/transactional_global_count.py:topology", runner, tmp,
                     f"global_count.db={json.dumps(db)}")
    coord = "$coord-global-count"
    _check_progress(run, {coord, "spout", "partial-count", "sum"})
    # Every tuple of the input counted exactly once, in the store the committer writes.
    assert ex.open_db({"global_count.db": db}).get(ex.GLOBAL) == sum(map(len, ex.DATA.values()))
    # Three partitions of at most 9 tuples, 3 per batch: 3 transactions, every one committed.
    # Each is one batch tuple to each of the 3 emitter tasks.
    assert run.summary["spout"]["executed"] == "9"
    stats = run.summary[coord]
    # Every transaction's tree completed (the last progress line's pending), with a latency.
    last_line = [block[coord] for block in run.progress if coord in block][-1]
    assert stats["failed"] == "0" and last_line["pending"] == "0" and "p50" in stats
    if runner == "local":  # a batch tuple and a commit tuple per transaction, both tracked
        assert stats["emitted"] == stats["acked"] == "6"
    else:  # a micro-batch per transaction; its commit phase runs in the same Spark action
        assert stats["emitted"] == stats["acked"] == "3"


KINDS: dict[str, Callable[[str, Path], None]] = {
    "basic": basic, "stateful": stateful, "windowed": windowed,
    "stateful_windowed": stateful_windowed, "windowed_operator": windowed_operator,
    "transactional": transactional,
}


# Kinds whose Spark case runs in CI's second run (`extended`), each with what the default run
# keeps of it on Spark: the progress and summary of `squall run` here (the windowed operator
# and transactional kinds); the word count example through `squall run` (test_cli.py's main
# job: its result equal to the local runner's, its summary); a stateful bolt's running counts
# in durable state through `squall run`, exact across a stop and a restart, with its summary
# (test_stop.py, tests/support/stop_topology.py); the stateful windowing example's result
# (test_stateful_windowing_example.py); windowed bolts' count windows, sliding and tumbling,
# equal to the local runner's (test_windowed_bolts.py).
EXTENDED_ON_SPARK = {"basic", "stateful", "stateful_windowed", "windowed"}


def _marks(kind: str, runner: str) -> list:
    if runner == "local":
        return []
    return [pytest.mark.spark, *([pytest.mark.extended] if kind in EXTENDED_ON_SPARK else [])]


CASES = [pytest.param(kind, runner, id=f"{runner}-{kind}", marks=_marks(kind, runner))
         for runner in ("local", "spark") for kind in KINDS]


@pytest.mark.runners(spark_session=False)
@pytest.mark.parametrize(("kind", "runner"), CASES, indirect=["runner"])
def test_squall_run_with_default_options(kind: str, runner: str, tmp_path: Path) -> None:
    KINDS[kind](runner, tmp_path)
