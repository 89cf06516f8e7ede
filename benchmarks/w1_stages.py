"""W1's Spark stages run in this process, without Spark: the Python cost per word of each part.

    .venv/bin/python benchmarks/w1_stages.py [--sentences 200000] [--runs 3] [--acking] [--cpu]
        [--reader] [--reader-fresh] [--profile-reader]

The Spark runner's time per word is the JVM's (rows, shuffles) plus the Python work of the
spout reader and of each stage's `mapInArrow` function. This script runs exactly those Python
functions (`SpoutReader`'s host and tasks, `run_stage`) on W1's data, one after the other in one
process, so that changes to the hot path can be measured without Spark's start-up, scheduling
and noise; the plain split and count loops of the hand-written job run in the same process as
the baseline. Counts are checked against the reference every run. Reported: the median over
`--runs` of each part's time in microseconds per word, and the ratio of the whole to the plain
loops. `--cpu` times the parts in this process's CPU time instead of wall time, which other
processes on a shared machine disturb less. `--reader` also times the whole plan of the data
batch as Spark's streaming process makes it (`SpoutReader.latestOffset` on a fresh run
directory: the plan file read, the spout opened, the `next_tuple` loop, the segment and the
spouts' snapshot written), the part Spark reports as `latestOffset`; `--reader-fresh` times that
plan in a fresh interpreter instead, as Spark's reader process makes it (a process of its own per
query, which has imported Spark's streaming source runner and squall's reader, nothing else:
what the plan imports the first time counts, as it does on Spark); `--profile-reader` prints
cProfile's top functions of one more plan in this process, by their own time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cloudpickle
import pyarrow as pa
from w1_local import Count, ListSpout, Split
from workloads import reference_counts, w1_sentences

from squall import Config, Fields, TopologyBuilder
from squall.atomic_files import write_atomic
from squall.runtime.gc_pause import gc_paused
from squall.runtime.spark import row_schema
from squall.runtime.spark import stage as stage_mod
from squall.runtime.spark.spouts import ReaderHost, SpoutReader, end_of_input_rows
from squall.runtime.spark.stage import StagePlan, run_stage
from squall.task.tasks import SpoutTask

clock = time.perf_counter  # time.process_time with --cpu


def topology(sentences: list[str], acking: bool):
    builder = TopologyBuilder()
    builder.set_spout("sentences", ListSpout(sentences, reliable=acking))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def plain(sentences: list[str]) -> tuple[float, float]:
    """The hand-written job's Python work: split every sentence, then count every word."""
    t0 = clock()
    words = [w for s in sentences for w in s.split()]
    t1 = clock()
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return t1 - t0, clock() - t1


def spout_batch(topo: Any, conf: Config, tracking: bool, end_of_input: bool = False
                ) -> tuple[float, pa.RecordBatch]:
    """The spout reader's rows of the whole input as one micro-batch (with `end_of_input`: and
    the rows that tell every bolt task input ended, as the driver plans them when every spout
    is exhausted), and the time it took."""
    key_of = dict.fromkeys(topo.task_ids, 0)
    host = ReaderHost(key_of, capture=False)
    (spout_task_id,) = topo.component_tasks("sentences")
    spout = SpoutTask(topo, spout_task_id, dict(conf), host, seed=0, tracking=tracking)
    spout.open()
    t0 = clock()
    with gc_paused():
        while not spout.exhausted():
            spout.next_tuple()
        host.rows.rows.extend(host.packets.rows())
        if host.messages:
            host.rows.append(row_schema.messages_row(host.messages, host.now))
        if end_of_input:
            host.rows.rows.extend(end_of_input_rows(topo, key_of, host.now, host.seq + 1))
        batch = host.rows.to_batch()
    return clock() - t0, batch


# The first plan in a fresh interpreter (--reader-fresh), as in Spark's reader process.
FRESH_PLAN = """
import sys, time
import pyspark.sql.streaming.python_streaming_source_runner
from squall.runtime.spark.spouts import SpoutReader
clock = time.process_time if sys.argv[2] == "cpu" else time.perf_counter
reader = SpoutReader({"dir": sys.argv[1]})
t0 = clock()
if reader.latestOffset({"seg": -1}) != {"seg": 0}:
    raise AssertionError("the reader planned no segment")
print(clock() - t0)
"""


def reader_plan(topo: Any, conf: Config, tracking: bool, sentences: int,
                fresh: bool = False) -> float:
    """The time of the first `latestOffset` of a run's `SpoutReader`, whose plan file is written
    as the driver writes it (whole input in one batch); `fresh`: in a new interpreter."""
    run_dir = tempfile.mkdtemp(prefix="w1-reader-")
    keys = {cid: list(range(topo.components[cid].num_tasks)) for cid in topo.components}
    plan = {"topology": topo, "conf": dict(conf), "keys": keys, "seed": 0, "tracking": tracking,
            "capture": False, "run": "bench", "max_batch": sentences + 1,
            "driver_pid": os.getpid()}
    write_atomic(os.path.join(run_dir, "plan.pkl"), cloudpickle.dumps(plan))
    if fresh:
        here = str(Path(__file__).resolve().parent)  # the spout's module, as Spark ships it
        path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), here]))
        out = subprocess.run(
            [sys.executable, "-c", FRESH_PLAN, run_dir,
             "cpu" if clock is time.process_time else "wall"],
            check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
        return float(out.stdout.split()[-1])
    reader = SpoutReader({"dir": run_dir})
    t0 = clock()
    if reader.latestOffset({"seg": -1}) != {"seg": 0}:
        raise AssertionError("the reader planned no segment")
    return clock() - t0


def squall_once(sentences: list[str], acking: bool) -> tuple[dict[str, float], dict[str, int]]:
    topo = topology(sentences, acking)
    conf = Config()
    conf.set_num_ackers(1 if acking else 0)
    keys = {cid: list(range(topo.components[cid].num_tasks)) for cid in topo.components}
    times: dict[str, float] = {}
    times["spout (reader)"], batch = spout_batch(topo, conf, acking)
    state_dir = tempfile.mkdtemp(prefix="w1-stages-")
    stage_mod._TASKS.clear()
    for cid in ("split", "count"):
        plan = StagePlan(run_id="bench", topology=topo, conf=dict(conf), component=cid,
                         batch_id=0, committed=-1, state_dir=state_dir, keys=keys, seed=0,
                         tracking=acking, capture=False, checkpoint_id="bench")
        t0 = clock()
        out = list(run_stage(plan, iter([batch])))
        times[cid] = clock() - t0
        table = pa.Table.from_batches(out, schema=row_schema.SCHEMA)
        batch = table.combine_chunks().to_batches()[0]
    counts: dict[str, int] = {}
    for cached in stage_mod._TASKS.values():
        task = cached[2]  # (snapshot batch, batch, task, state blob)
        if task.component_id == "count":
            counts.update(task.instance.counts)
    return times, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--acking", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    parser.add_argument("--reader", action="store_true",
                        help="also time the reader's whole plan of the batch (latestOffset)")
    parser.add_argument("--reader-fresh", action="store_true",
                        help="time the reader's plan in a fresh interpreter, as on Spark")
    parser.add_argument("--profile-reader", action="store_true",
                        help="print cProfile's top functions of one reader plan")
    args = parser.parse_args()
    global clock
    if args.cpu:
        clock = time.process_time
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    rows: list[dict[str, float]] = []
    for _ in range(args.runs):
        split_s, count_s = plain(sentences)
        times, counts = squall_once(sentences, args.acking)
        if counts != expected:
            raise AssertionError("counts differ from the reference")
        if args.reader or args.reader_fresh:
            conf = Config()
            conf.set_num_ackers(1 if args.acking else 0)
            times["reader plan"] = reader_plan(topology(sentences, args.acking), conf,
                                               args.acking, len(sentences), args.reader_fresh)
        rows.append({"plain split": split_s, "plain count": count_s, **times})
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    us = {k: v / words * 1e6 for k, v in med.items()}
    print(f"W1 stages in-process, {words:,} words, acking {'on' if args.acking else 'off'}, "
          f"median of {args.runs}{', CPU time' if args.cpu else ''}")
    for k, v in us.items():
        print(f"  {k:<16} {v:6.3f} us/word")
    base = us["plain split"] + us["plain count"]
    total = us["spout (reader)"] + us["split"] + us["count"]
    print(f"  squall total {total:.3f} us/word = {total / base:.1f}x the plain loops "
          f"({base:.3f} us/word)")
    if args.profile_reader:
        conf = Config()
        conf.set_num_ackers(1 if args.acking else 0)
        topo = topology(sentences, args.acking)
        profile = cProfile.Profile()
        profile.runcall(reader_plan, topo, conf, args.acking, len(sentences))
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
