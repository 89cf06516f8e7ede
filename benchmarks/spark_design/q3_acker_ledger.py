"""Q3: cost of the XOR acker ledger per batch for W1 (200,000 roots, 2,200,000 ack messages).

    /work/main/.venv/bin/python benchmarks/spark_design/q3_acker_ledger.py [--reps 3]

Pipeline per batch: spout tuples (root id, spout edge e0, sentence) -> split tasks (mapInArrow) ->
repartition by target task (fields grouping on word, identity partitioning) -> count tasks (mapInArrow).
Ack messages (Storm's XOR scheme):
  * split acks each sentence: (root, e0 ^ e1 ^ ... ^ e10), e1..e10 the edges of its 10 child tuples
    -> 200,000 messages; they ride along the repartition to the count tasks (target task = root % n)
    so that the DAG stays one lineage, and leave with the count stage's output;
  * count acks every word tuple: (root, e_i) -> 2,000,000 messages.
The driver keeps the pending-roots table (root -> e0 from the spout, plus xor of earlier batches) and
merges the batch's ack xors into it; roots whose xor becomes 0 are complete.
To check correctness, count tasks do not ack words of roots with root % 200 == 0 (about 1,000 roots):
exactly those must stay pending.

Variants (the same DAG; only the ack output changes):
  no-acking   : no edges, no ack messages (baseline, the data path only)
  raw+bit_xor : every ack message is an output row; stage output persisted; action 1 collects counts,
                action 2 = groupBy(root).agg(bit_xor) collected; driver merge
  raw+collect : every ack message collected to the driver with the counts (one action); driver merge
  pre+collect : each task XOR-aggregates its ack messages per root in a dict and outputs one row per
                root it touched; one action collects counts and those rows; driver merge
  pre+bit_xor : as pre, then persisted; counts action + groupBy(root).agg(bit_xor) action; driver merge
"""

import argparse
import random
import zlib

import common
import numpy as np
import pyarrow as pa

N = 2
OUT_SCHEMA = "kind int, root bigint, x bigint, word string, cnt bigint"
MID_SCHEMA = "task int, kind int, root bigint, x bigint, word string"
OUT_ARROW = pa.schema(
    [
        ("kind", pa.int32()),
        ("root", pa.int64()),
        ("x", pa.int64()),
        ("word", pa.string()),
        ("cnt", pa.int64()),
    ]
)
MID_ARROW = pa.schema(
    [
        ("task", pa.int32()),
        ("kind", pa.int32()),
        ("root", pa.int64()),
        ("x", pa.int64()),
        ("word", pa.string()),
    ]
)


def split_stage(acking, pre):
    def run(batches):
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        rnd = random.Random(1000 + me)
        acc = {}
        for rb in batches:
            roots = rb.column(0).to_pylist()
            e0s = rb.column(1).to_pylist()
            sents = rb.column(2).to_pylist()
            t, k, r, x, w = [], [], [], [], []
            for root, e0, s in zip(roots, e0s, sents, strict=False):
                ackv = e0
                for word in s.split():
                    t.append(zlib.crc32(word.encode()) % N)
                    k.append(0)
                    w.append(word)
                    r.append(root)
                    if acking:
                        e = rnd.getrandbits(63)
                        ackv ^= e
                        x.append(e)
                    else:
                        x.append(0)
                if acking:
                    if pre:
                        acc[root] = acc.get(root, 0) ^ ackv
                    else:
                        t.append(root % N)
                        k.append(1)
                        w.append(None)
                        r.append(root)
                        x.append(ackv)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(t, pa.int32()),
                    pa.array(k, pa.int32()),
                    pa.array(r, pa.int64()),
                    pa.array(x, pa.int64()),
                    pa.array(w, pa.string()),
                ],
                schema=MID_ARROW,
            )
        if acc:
            keys = list(acc.keys())
            n = len(keys)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([kk % N for kk in keys], pa.int32()),
                    pa.array([1] * n, pa.int32()),
                    pa.array(keys, pa.int64()),
                    pa.array(list(acc.values()), pa.int64()),
                    pa.array([None] * n, pa.string()),
                ],
                schema=MID_ARROW,
            )

    return run


def count_stage(acking, pre):
    def run(batches):
        counts = {}
        acc = {}
        for rb in batches:
            kinds = rb.column(1).to_pylist()
            roots = rb.column(2).to_pylist()
            xs = rb.column(3).to_pylist()
            words = rb.column(4).to_pylist()
            out_r, out_x = [], []
            for kind, root, x, word in zip(kinds, roots, xs, words, strict=False):
                if kind == 0:
                    counts[word] = counts.get(word, 0) + 1
                    if not acking or root % 200 == 0:
                        continue
                # an ack message: this stage's ack of the word tuple, or a ride-along ack of the split stage
                if pre:
                    acc[root] = acc.get(root, 0) ^ x
                else:
                    out_r.append(root)
                    out_x.append(x)
            if out_r:
                n = len(out_r)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([1] * n, pa.int32()),
                        pa.array(out_r, pa.int64()),
                        pa.array(out_x, pa.int64()),
                        pa.array([None] * n, pa.string()),
                        pa.array([None] * n, pa.int64()),
                    ],
                    schema=OUT_ARROW,
                )
        if acc:
            n = len(acc)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([1] * n, pa.int32()),
                    pa.array(list(acc.keys()), pa.int64()),
                    pa.array(list(acc.values()), pa.int64()),
                    pa.array([None] * n, pa.string()),
                    pa.array([None] * n, pa.int64()),
                ],
                schema=OUT_ARROW,
            )
        n = len(counts)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([0] * n, pa.int32()),
                pa.array([None] * n, pa.int64()),
                pa.array([None] * n, pa.int64()),
                pa.array(list(counts.keys()), pa.string()),
                pa.array(list(counts.values()), pa.int64()),
            ],
            schema=OUT_ARROW,
        )

    return run


def pipeline(src, salts, acking, pre):
    from pyspark.sql import functions as F

    s1 = src.mapInArrow(split_stage(acking, pre), MID_SCHEMA)
    key = F.element_at(F.array(*[F.lit(s).cast("long") for s in salts]), F.col("task") + 1)
    return s1.repartition(N, key).mapInArrow(count_stage(acking, pre), OUT_SCHEMA)


def merge_into_pending(pending_roots, pending_x, roots, xs):
    """Driver ledger: pending (sorted root array, xor array) XOR-merged with this batch's (root, x) rows.
    Returns (completed roots, new pending roots, new pending xors)."""
    allr = np.concatenate([pending_roots, roots])
    allx = np.concatenate([pending_x, xs])
    order = np.argsort(allr, kind="stable")
    allr, allx = allr[order], allx[order]
    starts = np.flatnonzero(np.r_[True, allr[1:] != allr[:-1]])
    ur = allr[starts]
    ux = np.bitwise_xor.reduceat(allx, starts)
    done = ux == 0
    return ur[done], ur[~done], ux[~done]


def run_variant(spark, src, salts, name, pending):
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    acking = name != "no-acking"
    pre = name.startswith("pre")
    out = pipeline(src, salts, acking, pre)
    t = {}
    t0 = common.time.perf_counter()
    if name in ("no-acking", "raw+collect", "pre+collect"):
        tbl = out.toArrow()
        counts_tbl = tbl.filter(pa.compute.equal(tbl.column("kind"), 0))
        acks_tbl = tbl.filter(pa.compute.equal(tbl.column("kind"), 1))
        actions = 1
    else:
        out = out.persist(StorageLevel.MEMORY_AND_DISK)
        counts_tbl = out.filter("kind = 0").toArrow()
        acks_tbl = out.filter("kind = 1").groupBy("root").agg(F.bit_xor("x").alias("x")).toArrow()
        out.unpersist()
        actions = 2
    t["spark"] = common.time.perf_counter() - t0
    t1 = common.time.perf_counter()
    done = None
    if acking:
        roots = acks_tbl.column("root").to_numpy()
        xs = acks_tbl.column("x").to_numpy()
        done, pr, px = merge_into_pending(pending[0], pending[1], roots, xs)
    t["merge"] = common.time.perf_counter() - t1
    counts = dict(
        zip(
            counts_tbl.column("word").to_pylist(),
            counts_tbl.column("cnt").to_pylist(),
            strict=False,
        )
    )
    info = {"ack_rows": acks_tbl.num_rows, "actions": actions}
    if acking:
        info.update(
            completed=len(done),
            pending=len(pr),
            pending_expected=int((pending[0] % 200 == 0).sum()),
            pending_ok=bool(
                np.array_equal(np.sort(pr), np.sort(pending[0][pending[0] % 200 == 0]))
            ),
        )
    return t, counts, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    common.header("Q3 acker ledger for W1: 200k roots, 2.2M ack messages per batch")
    sentences = common.w1_sentences()
    ref = common.reference_counts(sentences)
    rnd = random.Random(5)
    roots = [rnd.getrandbits(63) for _ in sentences]
    e0s = [rnd.getrandbits(63) for _ in sentences]
    # pending table as the driver holds it after the spout emitted the batch: root -> spout edge
    order = np.argsort(np.array(roots, dtype=np.int64))
    pending = (np.array(roots, dtype=np.int64)[order], np.array(e0s, dtype=np.int64)[order])

    spark = common.spark_session()
    import q1_dag_pipeline as q1  # salt table helper

    salts = q1.salt_table(spark, N)
    src = (
        spark.createDataFrame(pa.table({"root": roots, "e0": e0s, "sentence": sentences}))
        .repartition(N)
        .cache()
    )
    src.count()

    names = ["no-acking", "raw+bit_xor", "raw+collect", "pre+collect", "pre+bit_xor"]
    res = {n: [] for n in names}
    for rep in range(1, args.reps + 1):
        for name in names:
            with common.JobCounter(spark) as jc:
                dt, (t, counts, info) = common.timed(run_variant, spark, src, salts, name, pending)
            res[name].append(dt)
            print(
                "rep %d %-12s total %5.2f s (spark %5.2f, driver merge %.3f)  jobs %d  %s  counts ok=%s"
                % (rep, name, dt, t["spark"], t["merge"], jc.jobs, info, counts == ref)
            )
    print(
        "\n# summary (median over reps 2..%d): batch time, ledger overhead over no-acking"
        % args.reps
    )
    med = {n: common.median(res[n][1:] if args.reps > 1 else res[n]) for n in names}
    for n in names:
        print(
            "%-12s %5.2f s  overhead %+5.2f s  ratio to no-acking %.2f"
            % (n, med[n], med[n] - med["no-acking"], med["no-acking"] / med[n])
        )
    # driver merge alone, and a Python dict variant of it, for 200k roots
    r = pending[0]
    xs = pending[1]
    dt_np = common.median(
        [common.timed(merge_into_pending, pending[0], pending[1], r, xs)[0] for _ in range(5)]
    )
    d = dict(zip(r.tolist(), xs.tolist(), strict=False))
    rl, xl = r.tolist(), xs.tolist()

    def dict_merge():
        p = dict(d)
        for a, b in zip(rl, xl, strict=False):
            p[a] ^= b
        return [k for k, v in p.items() if v == 0]

    dt_dict = common.median([common.timed(dict_merge)[0] for _ in range(5)])
    print(
        f"driver merge of 200k rows into 200k pending: numpy sort+reduceat {dt_np:.3f} s, python dict {dt_dict:.3f} s"
    )
    spark.stop()


if __name__ == "__main__":
    main()
