"""The best of N runs of one workload in one process, in seconds: for comparing two checkouts
interleaved in one session (run it in each checkout's tree, alternating).

    .venv/bin/python benchmarks/best_of.py w1-off|w1-on|w2 [--sentences 30000] [--runs 5]

Prints `<workload> <seconds>`. The workloads are benchmarks/w1_local.py's `squall_run` (acking
off or on) and benchmarks/w2_windowed_bolts.py's `run_local`, both checked against their
references there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import squall_run
from w2_windowed_bolts import run_local
from workloads import w1_sentences


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=("w1-off", "w1-on", "w2"))
    parser.add_argument("--sentences", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    if args.workload == "w2":
        def once() -> float:
            return run_local(sentences)[0]
    else:
        acking = args.workload == "w1-on"

        def once() -> float:
            return squall_run(sentences, acking)[0]
    once()  # warm-up
    print(f"{args.workload} {min(once() for _ in range(args.runs)):.3f}")


if __name__ == "__main__":
    main()
