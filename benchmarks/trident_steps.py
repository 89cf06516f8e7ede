"""Where a Trident W1 transaction's time goes on Spark, against the same Spark job alone.

    .venv/bin/python benchmarks/trident_steps.py [--variant B] [--rounds 13] [--sentences 200000]

Variant A (per-tuple `Split`) or B (`BatchFunction` split), no partial aggregation, the whole
input as one batch, as in benchmarks/trident_w1.py. Each round runs, alternated in one Spark
session:

1. the Trident topology (`TridentSparkRunner`, durable transactional map state), its steps
   timed by wrapping them: the read's planning (`_read_files`), `mapInArrow`, the Spark job
   (`toArrow`), the driver's share (`BatchExecutor.run`: the state's update), and the whole
   transaction (`batch_seconds`);
2. the same job written by hand (A0 or B0 of trident_w1.py: read, split in `mapInArrow`,
   Spark's count, `toArrow`, a dict), whole and its `toArrow`;
3. the very DataFrame squall's transaction ran, run again outside it (a new Dataset over the
   same plan, so the shuffle is redone): the job without the transaction around it.

Round 1 is a warm-up; the medians of the others are printed. Every run's counts are checked.
The wrapping is for measuring only: it replaces module attributes in this process.
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import time
from typing import Any

import pyarrow as pa
import spark_jobs
import trident_w1 as tw
from pyspark.sql.classic.dataframe import DataFrame
from workloads import reference_counts, w1_sentences

import squall.runtime.spark.trident.launch as runtime
from squall.trident import execution

spent: dict[str, float] = collections.defaultdict(float)
last_job: list[Any] = []  # the DataFrame of the latest `toArrow`


def timed(owner: Any, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if name == "toArrow":
            last_job[:] = [args[0]]
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - t

    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=("A", "B"), default="B")
    ap.add_argument("--rounds", type=int, default=13)
    ap.add_argument("--sentences", type=int, default=200_000)
    args = ap.parse_args()
    for owner, name, label in ((runtime, "_read_files", "read planning"),
                               (DataFrame, "mapInArrow", "mapInArrow"),
                               (DataFrame, "toArrow", "job (toArrow)"),
                               (execution.BatchExecutor, "run", "driver (state)")):
        timed(owner, name, label)
    sentences = w1_sentences(args.sentences)
    ref = reference_counts(sentences)
    files = tw.write_files(sentences, len(sentences))
    function = tw.Split() if args.variant == "A" else tw.SplitColumns()
    split = spark_jobs.each_per_tuple(spark_jobs.Split(), 0, ["word"], [pa.string()]) \
        if args.variant == "A" else spark_jobs.split_vectorised
    spark = spark_jobs.session("squall-trident-steps")
    rows: list[dict[str, float]] = []
    for rnd in range(1, args.rounds + 1):
        spent.clear()
        transaction, _ = tw.run_trident(spark, sentences, len(sentences), files, function,
                                        False, "trident", ref)  # its final state checked
        row = {f"{args.variant} {k}": v for k, v in spent.items()}
        row[f"{args.variant} transaction"] = transaction
        job = last_job[0]
        spent.clear()
        row[f"{args.variant}0 whole"], _ = tw.run_alone(spark, files, split, "by hand", ref)
        row[f"{args.variant}0 job (toArrow)"] = spent["job (toArrow)"]
        spent.clear()
        job.toDF(*job.columns).toArrow()  # a new Dataset: its shuffle runs again
        row[f"{args.variant}'s job again, alone"] = spent["job (toArrow)"]
        print(f"round {rnd}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
        if rnd > 1:
            rows.append(row)
    print(f"\n| step (median of rounds 2-{args.rounds}) | seconds |\n|---|---|")
    for k in rows[0]:
        print(f"| {k} | {statistics.median(r[k] for r in rows):.3f} |")


if __name__ == "__main__":
    main()
