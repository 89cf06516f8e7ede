"""W2's Spark stages run in this process, without Spark: the Python cost per word of each part.

    .venv/bin/python benchmarks/w2_stages.py [--sentences 200000] [--runs 3] [--cpu]
        [--workloads W2,W2dict,W2dictemit,W2bolt] [--profile 25] [--profile-stage windows]

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
stage (or of `--profile-stage`: split, windows, sink) under cProfile (one more run), which
splits it into decoding packets, building tuples or columns, the window work, the panes'
packets and the snapshot; cProfile's cost per call inflates the parts made of many small calls
(the emits), which `--parts` does not: it times a few functions of each stage by the clock
(decoding packets, the bolt's calls with their emits, the column path, the window work, the
panes out, encoding the output packets, the batch end and snapshot) and the split stage again
with its bolt emitting nothing, without the reference check (W3 may be given). `--cpu`:
process CPU time instead of wall time.

    .venv/bin/python benchmarks/w2_stages.py --sentences 50000 --runs 3 --cpu --parts \
        --workloads W2,W3,W2dictemit,W2bolt
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
import w2_w3_operators
import w2_windowed_bolts
from w2_w3_operators import DictCount, DictCountEmit, reference, topology
from workloads import w1_sentences

from squall import Config
from squall.runtime.spark import row_schema, window_columns
from squall.runtime.spark import stage as stage_mod
from squall.runtime.spark.stage import StagePlan, run_stage
from squall.task.roles import operator as operator_role
from squall.task.roles import windowed as windowed_role

clock = time.perf_counter  # time.process_time with --cpu


def stages_once(sentences: list[str], workload: str, profile: cProfile.Profile | None = None,
                profile_stage: str = "windows", on_stage: Any = None,
                ) -> tuple[dict[str, float], dict[tuple[int, str], int]]:
    topo = (w2_windowed_bolts.topology(sentences) if workload == "W2bolt"
            else topology(sentences, workload))
    conf = Config()
    conf.set_num_ackers(0)
    keys = {cid: list(range(topo.components[cid].num_tasks)) for cid in topo.components}
    times: dict[str, float] = {}
    if on_stage is not None:
        on_stage(0, "spout (reader)")
    times["spout (reader)"], batch = w1_stages.spout_batch(topo, conf, False, end_of_input=True)
    state_dir = tempfile.mkdtemp(prefix="w2-stages-")
    stage_mod._TASKS.clear()
    for cid in ("split", "windows", "sink"):
        if on_stage is not None:
            on_stage(0, cid)
        plan = StagePlan(run_id="bench", topology=topo, conf=dict(conf), component=cid,
                         batch_id=0, committed=-1, state_dir=state_dir, keys=keys, seed=0,
                         tracking=False, capture=False, checkpoint_id="bench")
        profiled = profile if cid == profile_stage else None
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


# --parts: the functions timed inside each stage, (label, owner, attribute); a part's time
# includes the parts it calls, which the table lists beneath it.
PARTS = [
    ("decode packets", row_schema, "decode_values"),
    ("user execute (with its emits)", w2_w3_operators.Split, "execute"),
    ("columns path (run_packet)", window_columns, "run_packet"),
    ("  operator execute_columns", operator_role.OperatorRole, "execute_columns"),
    ("    window work (process_columns)", operator_role, "process_columns"),
    ("    panes out (_emit_rows)", operator_role.OperatorRole, "_emit_rows"),
    ("      engine panes as rows (_emit_panes)", operator_role.OperatorRole, "_emit_panes"),
    ("  windowed bolt execute_columns", windowed_role.WindowedRole, "execute_columns"),
    ("    window manager (process_columns)", windowed_role, "process_columns"),
    ("    user execute(window), its emits", w2_windowed_bolts.WindowWordCount, "execute"),
    ("encode packets (output rows)", row_schema.Packets, "rows"),
    ("batch end, snapshot", stage_mod, "_finish_task"),
]


def timed_parts(spent: dict[tuple[str, str], float], stage: list[str]
                ) -> list[tuple[Any, str, Any]]:
    """Wrap each of PARTS to add its time to `spent[(stage[0], label)]`; returns what to
    restore."""
    saved = []
    for label, owner, name in PARTS:
        inner = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
        if inner is None:  # older code without this part
            continue

        def wrapper(*args: Any, __inner: Any = inner, __label: str = label, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return __inner(*args, **kwargs)
            finally:
                key = (stage[0], __label)
                spent[key] = spent.get(key, 0.0) + clock() - t0

        saved.append((owner, name, inner))
        setattr(owner, name, wrapper)
    return saved


def stage_parts(sentences: list[str], workload: str, runs: int) -> None:
    """Each stage's parts (PARTS), medians over `runs`, us a word; and the split stage again
    with its bolt's emits left out (what its emits cost)."""
    words = sum(len(s.split()) for s in sentences)
    samples: dict[tuple[str, str], list[float]] = {}
    split = w2_w3_operators.Split.execute

    def no_emits(self: Any, tup: Any, collector: Any) -> None:
        sentence, _ts = tup.values
        for _w in sentence.split():
            pass

    for _ in range(runs):
        spent: dict[tuple[str, str], float] = {}
        stage = [""]
        saved = timed_parts(spent, stage)
        try:
            times, _ = stages_once(sentences, workload, on_stage=stage.__setitem__)
        finally:
            for owner, name, inner in saved:
                setattr(owner, name, inner)
        for cid, v in times.items():
            samples.setdefault((cid, "the stage"), []).append(v)
        for key, v in spent.items():
            samples.setdefault(key, []).append(v)
        w2_w3_operators.Split.execute = no_emits  # type: ignore[method-assign]
        try:
            times, _ = stages_once(sentences, workload)
        finally:
            w2_w3_operators.Split.execute = split  # type: ignore[method-assign]
        samples.setdefault(("split", "the stage, its bolt emitting nothing"), []).append(
            times["split"])
    print(f"{workload}: the parts of each stage, {words:,} words, median of {runs}, "
          f"{'CPU' if clock is time.process_time else 'wall'} us/word")
    order = {cid: k for k, cid in enumerate(("spout (reader)", "split", "windows", "sink"))}
    for (cid, label), values in sorted(samples.items(), key=lambda kv: order[kv[0][0]]):
        print(f"  {cid:<15} {label:<40} {statistics.median(values) / words * 1e6:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default="W2,W2dict")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    parser.add_argument("--profile", type=int, default=0,
                        help="print this many functions of the windowed stage's profile")
    parser.add_argument("--profile-stage", default="windows", choices=("split", "windows", "sink"),
                        help="the stage --profile profiles")
    parser.add_argument("--parts", action="store_true",
                        help="time each stage's parts (decoding, the bolt's calls and emits, "
                        "the window work, the panes out, encoding, the batch end) instead")
    args = parser.parse_args()
    global clock
    if args.cpu:
        clock = w1_stages.clock = time.process_time
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    workloads = args.workloads.split(",")
    if args.parts:
        for workload in workloads:
            stage_parts(sentences, workload, args.runs)
        return
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
            stages_once(sentences, workload, profile, args.profile_stage)
            print(f"\n{workload}: the {args.profile_stage} stage's profile")
            stats: Any = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
