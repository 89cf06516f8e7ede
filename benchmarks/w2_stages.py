"""W2's Spark stages run in this process, without Spark: the Python cost per word of each part.

    .venv/bin/python benchmarks/w2_stages.py [--sentences 200000] [--runs 3] [--cpu]
        [--workloads W2,W2dict,W2dictemit,W2bolt] [--profile 25]

The Python side of W2 on the Spark runner (benchmarks/w2_w3_operators.py's topology: list spout
-> split -> operator x2 by word -> sink x2) as `benchmarks/w1_stages.py` runs W1's: the spout
reader's host and task, then each component's `run_stage` over the rows the previous one
produced, the whole input as one micro-batch, no JVM. W2dict is the same topology with the
operator replaced by a bolt that counts per (window, word) in a dict (the windowing's share:
the operator's stage against that bolt's), W2dictemit the same bolt emitting each window's
counts to the sink when the window closes (a hand-written windowed count); W2bolt is W2 with
Storm's windowed bolt (benchmarks/w2_windowed_bolts.py's topology: `execute(window)` counts
the window's words and emits a row per word). Counts are checked against the plain-Python
reference every run. Reported: the median over `--runs` of each stage's time in microseconds
per word; `--profile N` also prints the N most expensive functions (cumulative) of the windowed
stage under cProfile (one more run), which splits it into decoding packets, building tuples or
columns, the window work, the panes' packets and the snapshot. `--cpu`: process CPU time
instead of wall time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import w1_stages
import w2_windowed_bolts
from w2_w3_operators import DictCount, DictCountEmit, reference, topology
from workloads import w1_sentences

from squall import Config
from squall.runtime.spark import row_schema
from squall.runtime.spark import stage as stage_mod
from squall.runtime.spark.stage import StagePlan, run_stage

clock = time.perf_counter  # time.process_time with --cpu


def stages_once(sentences: list[str], workload: str, profile: cProfile.Profile | None = None
                ) -> tuple[dict[str, float], dict[tuple[int, str], int]]:
    topo = (w2_windowed_bolts.topology(sentences) if workload == "W2bolt"
            else topology(sentences, workload))
    conf = Config()
    conf.set_num_ackers(0)
    keys = {cid: list(range(topo.components[cid].num_tasks)) for cid in topo.components}
    times: dict[str, float] = {}
    times["spout (reader)"], batch = w1_stages.spout_batch(topo, conf, False, end_of_input=True)
    state_dir = tempfile.mkdtemp(prefix="w2-stages-")
    stage_mod._TASKS.clear()
    for cid in ("split", "windows", "sink"):
        plan = StagePlan(run_id="bench", topology=topo, conf=dict(conf), component=cid,
                         batch_id=0, committed=-1, state_dir=state_dir, keys=keys, seed=0,
                         tracking=False, capture=False, checkpoint_id="bench")
        profiled = profile if cid == "windows" else None
        t0 = clock()
        if profiled is not None:
            profiled.enable()
        out = list(run_stage(plan, iter([batch])))
        if profiled is not None:
            profiled.disable()
        times[cid] = clock() - t0
        table = pa.Table.from_batches(out, schema=row_schema.SCHEMA)
        batch = table.combine_chunks().to_batches()[0]
    counts: dict[tuple[int, str], int] = {}
    for cached in stage_mod._TASKS.values():
        task = cached[2]  # (snapshot batch, batch, task, state blob)
        if task.component_id == "sink" or isinstance(task.instance, (DictCount, DictCountEmit)):
            for k, v in task.instance.counts.items():
                counts[k] = counts.get(k, 0) + v
    return times, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default="W2,W2dict")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    parser.add_argument("--profile", type=int, default=0,
                        help="print this many functions of the windowed stage's profile")
    args = parser.parse_args()
    global clock
    if args.cpu:
        clock = w1_stages.clock = time.process_time
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    workloads = args.workloads.split(",")
    expected = reference(sentences, "W2")[1]
    rows: dict[str, list[dict[str, float]]] = {w: [] for w in workloads}
    for _ in range(args.runs):
        for workload in workloads:  # interleaved
            times, counts = stages_once(sentences, workload)
            if counts != expected:
                raise AssertionError(f"{workload}: counts differ from the reference")
            rows[workload].append(times)
    print(f"W2 stages in-process, {words:,} words, whole input as one batch, median of "
          f"{args.runs}{', CPU time' if args.cpu else ''} (us/word)")
    for workload in workloads:
        med = {k: statistics.median(r[k] for r in rows[workload]) / words * 1e6
               for k in rows[workload][0]}
        parts = "  ".join(f"{k} {v:.3f}" for k, v in med.items())
        print(f"  {workload:<7} {parts}  total {sum(med.values()):.3f}")
    if args.profile:
        for workload in workloads:
            profile = cProfile.Profile()
            stages_once(sentences, workload, profile)
            print(f"\n{workload}: the windowed stage's profile")
            stats: Any = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
