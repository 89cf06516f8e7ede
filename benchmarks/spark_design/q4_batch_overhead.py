"""Q4: fixed cost of a micro-batch, and Spark jobs per batch for a 2-stage DAG inside foreachBatch.

    /work/main/.venv/bin/python benchmarks/spark_design/q4_batch_overhead.py [--batches 30]

Part A: streaming queries over `rate-micro-batch` (1 row per batch) filtered to zero rows, so every
batch is an idle (empty) micro-batch; trigger processingTime='0 seconds'. Reported: median and p90 of
`triggerExecution` from lastProgress over the batches after the first 3, and Spark jobs per batch
(counted through the query's job group = its runId).
  noop sink                      : no Python callback at all (reference)
  foreachBatch: pass             : trivial driver-side callback
  foreachBatch: ledger callback  : callback that updates a driver-side pending dict and writes a marker
                                   file named by batch id (what the runner does per batch besides the DAG)
  foreachBatch: df.count()       : one Spark action
  foreachBatch: DAG, 1 action    : split mapInArrow -> repartition(task) -> count mapInArrow -> toArrow
  foreachBatch: DAG, persist     : stage-1 output persisted, fanned out to two consumers (ack side output
                                   and data path) -> 2 actions, then unpersist
Part B: the same two DAG callbacks on one batch of W1 data (20,000 sentences) run as batch code, to
count jobs per action with data present (AQE may add jobs).
"""

import argparse
import os
import shutil
import tempfile
import time

import common
import pyarrow as pa

N = 2


def s1(batches):
    from pyspark import TaskContext

    me = TaskContext.get().partitionId()
    for rb in batches:
        words = (
            [w for s in rb.column("sentence").to_pylist() for w in s.split()]
            if "sentence" in rb.schema.names
            else []
        )
        import zlib

        yield pa.RecordBatch.from_pydict(
            {
                "task": pa.array([zlib.crc32(w.encode()) % N for w in words], pa.int32()),
                "kind": pa.array([0] * len(words), pa.int32()),
                "word": pa.array(words, pa.string()),
                "src": pa.array([me] * len(words), pa.int32()),
            }
        )


def s2(batches):
    d = {}
    for rb in batches:
        for w in rb.column("word").to_pylist():
            d[w] = d.get(w, 0) + 1
    yield pa.RecordBatch.from_pydict(
        {
            "word": pa.array(list(d.keys()), pa.string()),
            "cnt": pa.array(list(d.values()), pa.int64()),
        }
    )


def dag(df, persist):
    from pyspark.sql import functions as F

    st1 = df.mapInArrow(s1, "task int, kind int, word string, src int")
    if persist:
        st1 = st1.persist()
        st1.groupBy("src").count().toArrow()  # stand-in for the ack side output of stage 1
    st2 = st1.repartition(N, F.col("task")).mapInArrow(s2, "word string, cnt long")
    out = st2.toArrow()
    if persist:
        st1.unpersist()
    return out


def part_a(spark, batches, root):
    common.header("Q4A idle micro-batch cost (0 rows per batch), trigger 0 s")
    pending = {}

    def ledger_cb(df, bid):
        pending[bid] = 0
        for k in [k for k in pending if k < bid - 10]:
            del pending[k]
        with open(os.path.join(root, "marker"), "w") as f:
            f.write(str(bid))

    variants = [
        ("noop sink", None),
        ("foreachBatch: pass", lambda df, bid: None),
        ("foreachBatch: ledger callback", ledger_cb),
        ("foreachBatch: df.count()", lambda df, bid: df.count()),
        (
            "foreachBatch: DAG, 1 action",
            lambda df, bid: dag(df.selectExpr("cast(value as string) as sentence"), False),
        ),
        (
            "foreachBatch: DAG, persist",
            lambda df, bid: dag(df.selectExpr("cast(value as string) as sentence"), True),
        ),
    ]
    sc = spark.sparkContext
    for i, (name, fn) in enumerate(variants):
        df = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 1)
            .option("numPartitions", 1)
            .load()
            .where("value < 0")
        )
        w = df.writeStream.trigger(processingTime="0 seconds").option(
            "checkpointLocation", os.path.join(root, "ck%d" % i)
        )
        w = w.format("noop") if fn is None else w.foreachBatch(fn)
        q = w.start()
        t0 = time.perf_counter()
        while q.lastProgress is None or q.lastProgress["batchId"] < batches - 1:
            time.sleep(0.05)
            if q.exception():
                raise q.exception()
        wall = time.perf_counter() - t0
        progs = [p for p in q.recentProgress if p["numInputRows"] == 0 or True]
        q.stop()
        durs = sorted(p["durationMs"]["triggerExecution"] for p in progs if p["batchId"] >= 3)
        nb = max(p["batchId"] for p in progs) + 1
        jobs = len(sc.statusTracker().getJobIdsForGroup(str(q.runId)))
        print(
            "%-32s median %4d ms  p90 %4d ms  (%d batches, %.1f batches/s incl. start)  jobs/batch %.2f"
            % (
                name,
                durs[len(durs) // 2],
                durs[int(len(durs) * 0.9)],
                len(durs),
                nb / wall,
                jobs / nb,
            )
        )


def part_b(spark):
    common.header("Q4B jobs per DAG callback with data (20,000 W1 sentences as one batch)")
    sents = common.w1_sentences(20000)
    df = spark.createDataFrame(pa.table({"sentence": sents})).repartition(N).cache()
    df.count()
    for persist in (False, True, False, True):
        with common.JobCounter(spark) as jc:
            dt, out = common.timed(dag, df, persist)
        print(
            "DAG persist=%-5s actions %d  Spark jobs %d  %.2f s  (%d words counted)"
            % (persist, 2 if persist else 1, jc.jobs, dt, sum(out.column("cnt").to_pylist()))
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=30)
    args = ap.parse_args()
    spark = common.spark_session()
    root = tempfile.mkdtemp(prefix="squall-q4-")
    try:
        part_a(spark, args.batches, root)
        part_b(spark)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
