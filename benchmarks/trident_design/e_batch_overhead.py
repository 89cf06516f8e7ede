"""E: per-batch overhead of a Trident batch on Spark: a streaming query (`rate-micro-batch`, 2
partitions, trigger 0 s) whose `foreachBatch` runs the plan of A, B or C (or the hand-written
job's) and applies the partial aggregates to the durable transactional map state (txid = batch id
+ 1; an empty batch still commits its txid), on empty micro-batches (0 sentences) and on small ones
(100 W1 sentences). Reported: median and p90 `triggerExecution` from the 4th batch on, and start-up
separately (query start to the end of its first batch; the session start is printed first).

    .venv/bin/python benchmarks/trident_design/e_batch_overhead.py [--batches 25]
"""

import argparse
import statistics
import tempfile
import time

import a_per_tuple
import b_vectorised
import c_combiner
import common

PLANS = {
    "hand-written job (no state)": common.baseline_plan,
    "A per-tuple Split + JVM count + state": a_per_tuple.per_tuple_split_jvm_count,
    "B pyarrow split + JVM count + state": b_vectorised.vectorised_split_jvm_count,
    "C Arrow combiner + JVM sum + state": c_combiner.arrow_combiner_jvm_sum,
    "foreachBatch: pass (no plan, no state)": None,
}


def run(spark, plan, rows, batches, root, state_kind):
    from pyspark.sql import functions as F

    small = common.w1_sentences(100)
    src = (spark.readStream.format("rate-micro-batch")
           .option("rowsPerBatch", max(rows, 1)).option("numPartitions", 2).load())
    if rows == 0:
        src = src.where("value < 0")
    df = src.select(F.element_at(F.array(*[F.lit(s) for s in small]),
                                 (F.col("value") % 100 + 1).cast("int")).alias("sentence"))
    use_state = plan is not None and plan is not common.baseline_plan
    state = common.new_state(root, state_kind) if use_state else None
    seen = {"words": 0}

    def each_batch(bdf, batch_id):
        if plan is None:
            return
        t = plan(bdf).toArrow()
        seen["words"] += sum(t.column(1).to_pylist())
        if state is not None:
            state.apply(batch_id + 1, t.column(0).to_pylist(), t.column(1).to_pylist())

    t0 = time.perf_counter()
    q = (df.writeStream.foreachBatch(each_batch)
         .option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-", dir=root))
         .trigger(processingTime="0 seconds").start())
    first = None
    while len(q.recentProgress) < batches:
        if first is None and q.recentProgress:
            first = time.perf_counter() - t0
        if q.exception() is not None:
            raise q.exception()
        time.sleep(0.02)
    q.stop()
    progress = q.recentProgress[:batches]
    durs = [p["durationMs"]["triggerExecution"] for p in progress]
    steady = durs[3:]
    n_batches = len(q.recentProgress)
    if plan is not None:  # every batch's words were counted: 10 per sentence
        expected = rows * 10 * n_batches
        if not (seen["words"] == expected or seen["words"] == rows * 10 * (n_batches + 1)):
            raise AssertionError(f"counted {seen['words']} words, expected {expected}")
        if state is not None and rows and sum(state.counts().values()) != seen["words"]:
            raise AssertionError("state total differs from the words counted")
    p90 = statistics.quantiles(steady, n=10)[-1]
    return first, durs[0], statistics.median(steady), p90


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=25)
    ap.add_argument("--state", default=common.STATE, choices=sorted(common.STATES))
    args = ap.parse_args()
    common.header("E: per-batch overhead through foreachBatch")
    print(f"# state: {common.STATES[args.state].name}", flush=True)
    spark = common.session()
    root = tempfile.mkdtemp(prefix="trident-overhead-")
    # the session's first query starts the Python workers: reported apart, as cold start-up
    first, first_ms, med, _ = run(spark, common.baseline_plan, 100, 6, root, args.state)
    print(f"cold: the session's first query (hand-written job, 100 sentences/batch): first batch "
          f"ends {first:.1f} s after start(), its triggerExecution {first_ms / 1000:.1f} s; "
          f"then median {med:.0f} ms", flush=True)
    for rows in (0, 100):
        for name, plan in PLANS.items():
            first, first_ms, med, p90 = run(spark, plan, rows, args.batches, root, args.state)
            print(f"{rows:>3} sentences/batch  {name:<42} median {med:5.0f} ms  p90 {p90:5.0f} ms"
                  f"   start-up: first batch ends {first:4.1f} s after start(), its "
                  f"triggerExecution {first_ms / 1000:.1f} s", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
