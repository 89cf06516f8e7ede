"""Trident W1 on Spark, interleaved in one session with the hand-written PySpark job.

W1 as `each(Split) -> group_by(word) -> persistent_aggregate(durable transactional map state,
Count)`, run by squall's Trident Spark runner (`squall.runtime.spark.trident`), in four forms:

- A: a per-tuple `Split` Function, no partial aggregation in the worker (every word to Spark's
  JVM count): `squall.trident.spark.partial.aggregation=false`;
- At: the per-tuple `Split` declaring `output_types = {"word": str}` (its words travel as one
  typed column instead of four), no partial aggregation;
- A+: the same Function with the worker's partial aggregation (the default);
- B: a vectorised `BatchFunction` split (pyarrow), no partial aggregation;
- C: the vectorised split with the worker's partial aggregation (the default);
- B0 (with `--input parquet`): B's Spark job alone, written by hand (each file read with its
  schema, the pyarrow split in `mapInArrow`, Spark's count, `toArrow`, merged in a dict): no
  transaction, no state, no planning of squall's. B's time less B0's is Trident's per-batch
  overhead (the spout's batch, planning, the durable state's update, the commit);
- A0 (with `--input parquet`): the same for the per-tuple split: the bare per-tuple `each`
  of benchmarks/spark_jobs.py (Storm's `Split` called per sentence with a tuple and a collector
  appending to a list, one typed word column) in `mapInArrow`, Spark's count: At's Spark job alone.

The hand-written job (docs/benchmarks.md: Python split in mapInArrow, repartition by
word, dict count per partition in mapInArrow, toArrow) reads the same input in the same session,
batch by batch as Trident does (one job per batch, its counts merged in a driver dict): with
`--input parquet` (the default) W1's sentences in parquet files of `--per-batch` sentences (row
groups of 25,000), read by Spark (`spark.read.parquet` for the hand-written job, a
`FileBatchSpout` taking one file per transaction for Trident); with `--input driver` a Python
list on the driver (`createDataFrame` for the hand-written job, a `FixedBatchSpout` for
Trident). A Trident figure is the driver's time for the transactions
(`RunResult.extra["batch_seconds"]`: spout batch, Spark job, state update and commit), so query
start-up is excluded; it is reported apart with the whole run's wall time.
Every run's final map state is checked against a plain dict count. Every Trident run is
timed between two runs of the hand-written job, and its ratio is to their mean.

    .venv/bin/python benchmarks/trident_w1.py [--sentences 200000] [--per-batch 200000]
        [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import spark_jobs
from workloads import reference_counts, w1_sentences

from squall.runtime.spark.trident import PARTIAL, TridentSparkRunner
from squall.trident import (
    ROW,
    BatchFunction,
    Count,
    FileBatchSpout,
    FixedBatchSpout,
    Function,
    TridentTopology,
)
from squall.trident.state import DurableMapState, StateType


class Split(Function):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit((word,))


class TypedSplit(Split):
    output_types: ClassVar = {"word": str}  # one typed column on Spark, as SplitColumns


class SplitColumns(BatchFunction):
    output_types: ClassVar = {"word": str}  # one typed column on Spark

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}


def job_alone(spark, files, split):
    """A Spark job of B0's or A0's shape, one per file, with no squall around it."""
    counts: dict = {}
    for f in sorted(os.listdir(files)):
        df = spark.read.schema("sentence string").parquet(os.path.join(files, f))
        t = df.mapInArrow(split, "word string").groupBy("word").count().toArrow()
        for w, n in spark_jobs.table_counts(t).items():
            counts[w] = counts.get(w, 0) + n
    return counts


def topology(sentences, per_batch, function, files=None):
    t = TridentTopology()
    spout = FileBatchSpout(files, ["sentence"]) if files else \
        FixedBatchSpout(["sentence"], per_batch, *[(s,) for s in sentences])
    (t.new_stream("sentences", spout).each(["sentence"], function, ["word"])
     .group_by(["word"])
     .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(), ["count"])
     .name("counts"))
    return t.build()


def hand_written(spark, sentences, files=None, per_batch=None):
    """The hand-written job, run the same way as Trident: once per batch (a file, or a slice of
    the sentences), its counts merged in a driver dict."""
    if files:
        inputs = [spark.read.parquet(os.path.join(files, f)) for f in sorted(os.listdir(files))]
    else:
        step = per_batch or len(sentences)
        inputs = [spark.createDataFrame(pa.table({"sentence": sentences[i:i + step]}))
                  for i in range(0, len(sentences), step)]
    counts: dict = {}
    for df in inputs:
        for w, n in spark_jobs.table_counts(spark_jobs.baseline_plan(df).toArrow()).items():
            counts[w] = counts.get(w, 0) + n
    return counts


def write_files(sentences, per_batch):
    root = tempfile.mkdtemp(prefix="trident-w1-input-")
    for i in range(0, len(sentences), per_batch):
        pq.write_table(pa.table({"sentence": sentences[i:i + per_batch]}),
                       os.path.join(root, f"part-{i // per_batch:05d}.parquet"),
                       row_group_size=25_000)
    return root


def run_alone(spark, files, split, name, ref):
    """A0's or B0's time (checked), and nothing more to report."""
    t0 = time.perf_counter()
    got = job_alone(spark, files, split)
    dt = time.perf_counter() - t0
    spark_jobs.check(name, got, ref)
    return dt, ""


def run_trident(spark, sentences, per_batch, files, function, partial, name, ref):
    """A Trident variant's transactions' time (its final state checked), and their parts."""
    root = tempfile.mkdtemp(prefix="trident-w1-")
    runner = TridentSparkRunner(topology(sentences, per_batch, function, files),
                                {PARTIAL: partial}, checkpoint_location=root, session=spark)
    t0 = time.perf_counter()
    result = runner.run()
    wall = time.perf_counter() - t0
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state("counts", root)
    got = {k[0]: v for k, v in state.items()}
    state.close()
    spark_jobs.check(name, got, ref)
    shutil.rmtree(root, ignore_errors=True)
    parts = " ".join(f"{k} {v:.2f}" for k, v in result.extra["timing"].items())
    return sum(result.extra["batch_seconds"]), (
        f" ({parts}; run {wall:.2f}s, {len(result.extra['batch_seconds'])} batches)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--per-batch", type=int, default=0, help="0: the whole input as one batch")
    ap.add_argument("--rounds", type=int, default=4, help="the first is a warm-up")
    ap.add_argument("--input", choices=("parquet", "driver"), default="parquet")
    ap.add_argument("--max-partition-bytes", type=int, default=0,
                    help="spark.sql.files.maxPartitionBytes for both jobs; 0: Spark's default "
                         "(a file split in one partition per core)")
    ap.add_argument("--only", default="",
                    help="comma-separated variant letters to run (A,At,A+,B,C); default all")
    args = ap.parse_args()
    sentences = w1_sentences(args.sentences)
    ref = reference_counts(sentences)
    n_words = sum(ref.values())
    per_batch = args.per_batch or len(sentences)
    t0 = time.perf_counter()
    spark = spark_jobs.session("squall-trident-w1")
    if args.max_partition_bytes:  # both jobs read the files with the same split size
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(args.max_partition_bytes))
    files = write_files(sentences, per_batch) if args.input == "parquet" else None
    print(f"# Trident W1: {len(sentences):,} sentences, {n_words:,} words, {per_batch:,} "
          f"sentences per batch, input {args.input}, maxPartitionBytes "
          f"{args.max_partition_bytes or 'default'}; Spark session "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    variants = {
        "A per-tuple Split, no partial": (Split(), False),
        "At per-tuple Split declaring output_types, no partial": (TypedSplit(), False),
        "A+ per-tuple Split, partial (default)": (Split(), True),
        "B BatchFunction split, no partial": (SplitColumns(), False),
        "C BatchFunction split, partial (default)": (SplitColumns(), True),
    }
    if files:
        variants["A0 At's Spark job alone (no squall)"] = (
            spark_jobs.each_per_tuple(spark_jobs.Split(), 0, ["word"], [pa.string()]), None)
        variants["B0 B's Spark job alone (no squall)"] = (spark_jobs.split_vectorised, None)
    if args.only:
        wanted = set(args.only.split(","))
        variants = {k: v for k, v in variants.items() if k.split()[0] in wanted}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    times: dict[str, list[float]] = {name: [] for name in variants}
    def timed_hand_written() -> float:
        t1 = time.perf_counter()
        counts = hand_written(spark, sentences, files, per_batch)
        took = time.perf_counter() - t1
        spark_jobs.check("hand-written", counts, ref)
        return took

    for rnd in range(1, args.rounds + 1):
        # Every timed run between two runs of the hand-written job: a variant's ratio is to the
        # mean of its two neighbours, so the machine's drift within a round (other tenants, the
        # JIT warming up) touches both sides of a ratio alike.
        before = timed_hand_written()
        line = [f"hand-written {before:.2f}s"]
        for name, (function, partial) in variants.items():
            if partial is None:  # A0, B0: the job alone
                dt, detail = run_alone(spark, files, function, name, ref)
            else:
                dt, detail = run_trident(spark, sentences, per_batch, files, function, partial,
                                         name, ref)
            after = timed_hand_written()
            base = (before + after) / 2
            if rnd > 1:
                ratios[name].append(base / dt)
                times[name].append(dt)
            line.append(f"{name.split()[0]} {dt:.2f}s{detail} {base / dt:.0%}, "
                        f"hand-written {after:.2f}s")
            before = after
        print(f"round {rnd}: " + ", ".join(line), flush=True)
    print("\n| variant | M words/s (median) | ratio to the hand-written job: median (range) |")
    print("|---|---|---|")
    for name in variants:
        med = statistics.median(times[name])
        r = ratios[name]
        print(f"| {name} | {n_words / med / 1e6:.2f} | {statistics.median(r):.0%} "
              f"({min(r):.0%}-{max(r):.0%}) |")


if __name__ == "__main__":
    main()
