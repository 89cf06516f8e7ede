"""The cost of live metrics: the same run with and without its snapshots reported, alternated.

    .venv/bin/python benchmarks/metrics_cost.py [--sentences 100000] [--runs 5] [--spark]

Every squall run keeps Storm's counters and sampled latencies (there is no switch: they are what
`RunResult`, `squall list` and the end-of-run summary read); what a user turns on is reporting
them live: `squall run --metrics-json FILE`, `--metrics-port` for Prometheus and `--ui` all take a
`MetricsSnapshot` every progress interval. This script measures that: each workload run plainly
and with `on_progress` writing every snapshot as a JSON line (`--metrics-json`'s writer) every
100 ms, ten times the CLI's default interval, the modes alternated run by run in one process
after a warm-up round. On the local runner W1 also runs with the sampling of execute latencies
turned up ("timed every round": a tuple of each bolt task timed every scheduling round instead of
every 1,024), the alternative to sampling that timing more tuples would be. Workloads: W1 on the
local runner with acking off and on (benchmarks/w1_local.py) and W2's windowed bolts
(benchmarks/w2_windowed_bolts.py); with `--spark`, W1 on the Spark runner, acking off, the whole
input as one micro-batch (benchmarks/w1_spark.py; the figure is the micro-batch's time). Every
run's counts are checked. Prints each workload's median seconds in each mode and each mode's time
against the plain run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import squall_run
from w2_w3_operators import reference
from w2_windowed_bolts import run_local
from workloads import reference_counts, w1_sentences

from squall.cli.metrics_file import MetricsFile
from squall.runtime.local.engine import LocalEngine

EVERY_MS = 100


def reported(once: Callable[..., tuple[float, Any]], tmp: str) -> Callable[[], tuple[float, Any]]:
    """`once` with every snapshot written as a JSON line every `EVERY_MS`, checked to be there."""
    runs = [0]

    def run() -> tuple[float, Any]:
        runs[0] += 1
        report = MetricsFile(f"{tmp}/reported-{runs[0]}.jsonl")
        try:
            result = once(on_progress=report, progress_every_ms=EVERY_MS)
        finally:
            report.close()
        if not Path(report.path).read_text().count("\n"):
            raise AssertionError("no snapshot was reported")
        return result

    return run


def every_round(once: Callable[[], tuple[float, Any]]) -> Callable[[], tuple[float, Any]]:
    """`once` with the local runner timing a tuple of every bolt task every scheduling round."""
    def run() -> tuple[float, Any]:
        LocalEngine.SAMPLE_ROUNDS, before = 1, LocalEngine.SAMPLE_ROUNDS
        try:
            return once()
        finally:
            LocalEngine.SAMPLE_ROUNDS = before

    return run


def alternated(name: str, modes: dict[str, Callable[[], tuple[float, Any]]], want: Any,
               runs: int) -> None:
    """Run each mode in turn, `runs` rounds after a warm-up round; print the medians."""
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    order = list(modes)
    for i in range(runs + 1):  # round 0 is the warm-up
        for mode in order if i % 2 else order[::-1]:
            seconds, got = modes[mode]()
            if got != want:
                raise AssertionError(f"{name} ({mode}): wrong result")
            if i:
                times[mode].append(seconds)
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    base = medians[order[0]]
    print(f"{name} (median of {runs}): " + ", ".join(
        f"{mode} {m:.3f} s" + (f" ({(m / base - 1) * 100:+.1f} %)" if mode != order[0] else "")
        for mode, m in medians.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spark", action="store_true")
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    counts = reference_counts(sentences)
    with tempfile.TemporaryDirectory() as tmp:
        for acking in (False, True):
            def w1(acking: bool = acking, **kw: Any) -> tuple[float, Any]:
                return squall_run(sentences, acking, **kw)

            alternated(f"W1 local, acking {'on' if acking else 'off'}", {
                "plain": w1, "reported": reported(w1, tmp), "timed every round": every_round(w1),
            }, counts, args.runs)

        def w2(**kw: Any) -> tuple[float, Any]:
            return run_local(sentences, **kw)

        alternated("W2 local, windowed bolts", {"plain": w2, "reported": reported(w2, tmp)},
                   reference(sentences, "W2")[1], args.runs)
    if args.spark:
        from w1_spark import squall_run as spark_run

        from squall.runtime.spark.session import get_session

        spark = get_session("local[2]", {"spark.ui.enabled": "false"})

        def on_spark(**kw: Any) -> tuple[float, dict[str, int]]:
            batch_s, _total, got = spark_run(spark, sentences, False, **kw)
            return batch_s, got

        with tempfile.TemporaryDirectory() as tmp:
            alternated("W1 Spark, acking off",
                       {"plain": on_spark, "reported": reported(on_spark, tmp)}, counts,
                       args.runs)


if __name__ == "__main__":
    main()
