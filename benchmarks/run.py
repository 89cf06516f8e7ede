"""Every benchmark workload (docs/benchmarks.md), one after another, each in a process
of its own, and the ratio each reports to its baseline.

    .venv/bin/python benchmarks/run.py                       # every workload at full size
    .venv/bin/python benchmarks/run.py --small               # every workload at a small size
    .venv/bin/python benchmarks/run.py --small w1-local w2-windowed-bolts
    .venv/bin/python benchmarks/run.py --list

Full size is each script's own default (W1's 200,000 sentences, ...), for measuring by hand on a
quiet machine; `--small` runs each on a few thousand sentences or events, which checks that every
workload runs and computes the right answer (each script checks its output against a plain
Python reference and fails when it differs) in a few minutes; tests/integration/test_benchmarks.py
runs the cheapest of them this way. The figures of a small run are not measurements.

A workload's output is shown as it runs; then a summary gives, per workload, its exit status,
its wall time (process and Spark session start included) and the lines in which it reports a
ratio to its baseline (the plain-Python loop, the hand-written PySpark job, Structured
Streaming, a confluent-kafka loop: the script's docstring says which). Exits 1 when a workload
failed. Extra arguments for one workload's script follow `--`, with `--only` naming it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Workload:
    """A benchmark script, its arguments at full size and at a small size, and what it needs."""

    name: str
    script: str
    small: tuple[str, ...]
    full: tuple[str, ...] = ()
    spark: bool = True  # starts a Spark session (or several) at the small size
    needs: str = ""  # an outside program it starts: "redis-server", "kafka broker"


SENTENCES = ("--sentences", "3000")

WORKLOADS = (
    Workload("w1-local", "w1_local.py", (*SENTENCES, "--runs", "1"), spark=False),
    Workload("w1-stages", "w1_stages.py", (*SENTENCES, "--runs", "1"), spark=False),
    # W2 and W3 on the local runner at the small size, on both runners at full size.
    Workload("w2-windowed-bolts", "w2_windowed_bolts.py", (*SENTENCES, "--runs", "1"),
             ("--spark",), spark=False),
    Workload("w2-w3-operators", "w2_w3_operators.py", (*SENTENCES, "--runs", "1"), ("--spark",),
             spark=False),
    Workload("latency-w4", "latency_w4.py",
             ("--runner", "local", "--rates", "1000", "--seconds", "1"), spark=False),
    Workload("transactional-w1", "transactional_w1.py", SENTENCES),
    Workload("state-w1", "state_w1.py", (*SENTENCES, "--runs", "1"), needs="redis-server"),
    Workload("w1-spark", "w1_spark.py", (*SENTENCES, "--runs", "1")),
    Workload("w1-spark-floor", "w1_spark_floor.py", (*SENTENCES, "--runs", "1", "--acking")),
    Workload("trident-chain", "trident_chain.py", (*SENTENCES, "--runs", "1"), spark=False),
    Workload("trident-w1", "trident_w1.py", (*SENTENCES, "--rounds", "2")),
    Workload("trident-w2", "trident_w2.py", (*SENTENCES, "--rounds", "2")),
    Workload("trident-steps", "trident_steps.py", (*SENTENCES, "--rounds", "2")),
    Workload("trident-w5", "trident_w5.py",
             ("--events", "4000", "--keys", "100", "--files", "2", "--rounds", "1")),
    Workload("state-apply", "state_apply.py",
             ("--keys", "2000", "--held", "20000", "--rounds", "1"), spark=False),
    Workload("kafka-w1", "kafka_w1.py", (*SENTENCES, "--runs", "1"), needs="kafka broker"),
    Workload("nexmark", "nexmark.py",
             ("--events", "2000", "--batch", "500", "--queries", "q1,q9,q11,q17")),
)
BY_NAME = {w.name: w for w in WORKLOADS}

# How a script reports its ratios: a line naming one ("ratio to ...", "77.5x the plain loops",
# "43% of the floor"), or a row of a table whose header does.
RATIO = re.compile(r"ratio|\dx the |\d% of ", re.IGNORECASE)


@dataclass
class Outcome:
    workload: Workload
    returncode: int
    seconds: float
    ratios: list[str]


def ratio_lines(lines: list[str]) -> list[str]:
    """The lines of a script's output that give a ratio: those naming one, and the rows of a
    Markdown table whose header, or the line above it, names one.

    >>> ratio_lines(["# start", "  squall 1.2 M words/s   ratio to plain loop 40.1%",
    ...              "| variant | ratio |", "|---|---|", "| A | 80% |", "", "done"])
    ['  squall 1.2 M words/s   ratio to plain loop 40.1%', '| variant | ratio |', '| A | 80% |']
    >>> ratio_lines(["Throughput ratios:", "", "| K | A/SS |", "|---|---|", "| 100 | 51% |"])
    ['Throughput ratios:', '| K | A/SS |', '| 100 | 51% |']
    """
    out: list[str] = []
    named = False  # the latest line that is neither blank nor a table row names a ratio
    in_table = False
    for line in lines:
        if line.startswith("|"):
            if named or RATIO.search(line):
                in_table = True
            if in_table and not set(line) <= set("|-: "):
                out.append(line)
            continue
        in_table = False
        if line.strip():
            named = bool(RATIO.search(line))
            if named:
                out.append(line)
    return out


def run(workload: Workload, small: bool, extra: list[str]) -> Outcome:
    args = [sys.executable, str(HERE / workload.script),
            *(workload.small if small else workload.full), *extra]
    print(f"\n===== {workload.name}: {' '.join(args[1:])}", flush=True)
    started = time.perf_counter()
    lines: list[str] = []
    with subprocess.Popen(args, cwd=HERE.parent, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line.rstrip("\n"))
    seconds = time.perf_counter() - started
    return Outcome(workload, proc.returncode, seconds, ratio_lines(lines))


def summary(outcomes: list[Outcome]) -> str:
    rows = ["", "===== summary"]
    for o in outcomes:
        status = "ok" if o.returncode == 0 else f"FAILED (exit {o.returncode})"
        rows.append(f"{o.workload.name:<20} {status:<18} {o.seconds:7.1f} s")
        rows.extend(f"    {line.strip()}" for line in o.ratios)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help="the workloads to run (default: all; --list names them)")
    parser.add_argument("--small", action="store_true", help="a small size of each workload")
    parser.add_argument("--no-spark", action="store_true",
                        help="only the workloads that start no Spark session")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument("--only", help="the workload the arguments after -- are for")
    args, extra = parser.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.list:
        for w in WORKLOADS:
            needs = ", ".join(x for x in ("Spark" if w.spark else "", w.needs) if x)
            print(f"{w.name:<20} benchmarks/{w.script:<22} {needs}")
        return 0
    unknown = [n for n in args.workloads if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown workloads {unknown}; --list names them")
    if extra and args.only is None:
        parser.error("arguments after -- need --only WORKLOAD")
    chosen = [BY_NAME[n] for n in args.workloads] if args.workloads else list(WORKLOADS)
    if args.no_spark:
        chosen = [w for w in chosen if not w.spark]
    outcomes = [run(w, args.small, extra if w.name == args.only else []) for w in chosen]
    print(summary(outcomes), flush=True)
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
