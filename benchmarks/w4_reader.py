"""W4's spout reader in this process, without Spark: what a batch's planning costs its tuples.

    .venv/bin/python benchmarks/w4_reader.py [--tuples 8600] [--batches 12] [--log-ms 50]

Plans `--batches` batches of `--tuples` sentences each with W4's spout (`latency_w4.RateSpout`,
acking on, as fast as it goes) in a `SpoutReader` on a fresh run directory, as Spark's streaming
process does: before each plan every tree of the batch before is acked through an outcome file
(as the driver writes it), then `latestOffset`; then a pause of `--log-ms` standing in for Spark
writing the offset to its log, then `partitions` (which Spark calls before any task reads the
batch), then `commit`. Prints the medians (and minimum) over the batches after the first two of
`latestOffset` (its tuples are emitted inside it, and wait for the rest of it) and of what
`partitions` waited after the pause.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cloudpickle
from latency_w4 import Count, RateSpout, Split

from squall import Config, Fields, TopologyBuilder
from squall.atomic_files import write_atomic
from squall.reliability.acker import Outcome
from squall.runtime.spark.spouts import SpoutReader, write_outcomes


def reader(tuples: int, sentences: int) -> SpoutReader:
    """A reader of W4's topology whose plan file is written as the driver writes it."""
    out = tempfile.mkdtemp(prefix="w4-reader-out-")
    b = TopologyBuilder()
    b.set_spout("sentences", RateSpout(sentences, 0, out))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(out), 2).fields_grouping("split", Fields("word"))
    topology = b.create_topology()
    conf = Config()
    conf.set_num_ackers(1)
    run_dir = tempfile.mkdtemp(prefix="w4-reader-")
    keys = {cid: list(range(topology.components[cid].num_tasks)) for cid in topology.components}
    plan = {"topology": topology, "conf": dict(conf), "keys": keys, "seed": 0, "tracking": True,
            "capture": False, "run": "bench", "max_batch": tuples, "driver_pid": os.getpid()}
    write_atomic(os.path.join(run_dir, "plan.pkl"), cloudpickle.dumps(plan))
    return SpoutReader({"dir": run_dir})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuples", type=int, default=8600, help="sentences a batch")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--log-ms", type=float, default=50.0,
                        help="the pause standing in for Spark's offset log")
    args = parser.parse_args()
    r = reader(args.tuples, args.tuples * (args.batches + 1))
    end = r.latestOffset({"seg": -1})
    planned, waited = [], []
    try:
        for batch_id in range(args.batches):
            acked = [tuple(Outcome("ack", root, task.task_id, 100))
                     for task in r.tasks.values() for root, _ in task.pending.items()]
            write_outcomes(r.run_dir, batch_id, acked)
            start = end
            t0 = time.perf_counter()
            end = r.latestOffset(start)
            t1 = time.perf_counter()
            time.sleep(args.log_ms / 1000)
            t2 = time.perf_counter()
            r.partitions(start, end)
            t3 = time.perf_counter()
            r.commit(end)
            planned.append((t1 - t0) * 1000)
            waited.append((t3 - t2) * 1000)
    finally:
        r.stop()
    steady = planned[2:]
    print(f"W4's reader, {args.tuples:,} sentences a batch, {len(steady)} batches: latestOffset "
          f"p50 {statistics.median(steady):.1f} ms (min {min(steady):.1f}); partitions waited "
          f"p50 {statistics.median(waited[2:]):.1f} ms after {args.log_ms:g} ms")


if __name__ == "__main__":
    main()
