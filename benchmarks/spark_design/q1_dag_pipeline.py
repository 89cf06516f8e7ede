"""Q1: a 2-stage bolt DAG (split -> count, fields grouping) as per-task mapInArrow stages vs the
hand-written PySpark baseline of benchmarks.md, on W1 (200,000 sentences, 2,000,000 words) as one batch.

    /work/main/.venv/bin/python benchmarks/spark_design/q1_dag_pipeline.py [--reps 2] [--only typed,RDD]

Prints: which physical partition each task index lands in under each repartitioning method, then
words/s of every variant per repetition (rep 1 is warm-up; the design doc reports rep 2, "steady state"),
with the ratio to the baseline run in the same repetition.

Tuple wire format between stages (one Arrow row per tuple):
    task int (target task = Spark partition index of the next stage), stream string, src int,
    values binary (pickle of the values list) or string (JSON of it),
    anchors list<struct<root:long, edge:long>> (null when unanchored).
"""

import argparse
import json
import pickle
import random
import sys
import time
import zlib

import common
import pyarrow as pa
import pyarrow.compute as pc

N_TASKS = 2  # parallelism of split and of count (= Spark partitions of each stage)


def tuple_schema(encoding):
    vtype = "binary" if encoding == "pickle" else "string"
    return f"task int, stream string, src int, values {vtype}, anchors array<struct<root:bigint,edge:bigint>>"


def arrow_schema(encoding):
    return pa.schema(
        [
            ("task", pa.int32()),
            ("stream", pa.string()),
            ("src", pa.int32()),
            ("values", pa.binary() if encoding == "pickle" else pa.string()),
            ("anchors", pa.list_(pa.struct([("root", pa.int64()), ("edge", pa.int64())]))),
        ]
    )


# ---------------------------------------------------------------- a minimal squall-shaped task runtime
class Tup:
    __slots__ = ("values", "anchors", "src", "stream")

    def __init__(self, values, anchors, src, stream):
        self.values, self.anchors, self.src, self.stream = values, anchors, src, stream


class Collector:
    """Buffers emitted tuples into Arrow columns; fields grouping computes the target task."""

    def __init__(
        self, encoding, anchored, fields_idx, n_targets, my_task, schema, flush_rows=10000
    ):
        self.enc = pickle.dumps if encoding == "pickle" else json.dumps
        self.anchored, self.fields_idx, self.n, self.me = anchored, fields_idx, n_targets, my_task
        self.schema, self.flush_rows = schema, flush_rows
        self.rnd = random.Random(my_task)
        self.ack_xor = {}  # root -> xor of edges created for children (sent with the input's ack, see q3)
        self._reset()

    def _reset(self):
        self.t, self.v, self.a = [], [], []

    def target(self, values):
        if self.fields_idx is None:
            return -1
        k = values[self.fields_idx]
        h = zlib.crc32(k.encode()) if isinstance(k, str) else zlib.crc32(pickle.dumps(k))
        return h % self.n

    def emit(self, values, anchors=None):
        self.t.append(self.target(values))
        self.v.append(self.enc(values))
        if self.anchored and anchors:
            out = []
            for anc in anchors:
                for root, _edge in anc.anchors:
                    e = self.rnd.getrandbits(63)
                    out.append({"root": root, "edge": e})
                    self.ack_xor[root] = self.ack_xor.get(root, 0) ^ e
            self.a.append(out)
        else:
            self.a.append(None)
        if len(self.t) >= self.flush_rows:
            return self.flush()
        return None

    def flush(self):
        n = len(self.t)
        if not n:
            return None
        rb = pa.RecordBatch.from_arrays(
            [
                pa.array(self.t, pa.int32()),
                pa.array(["default"] * n, pa.string()),
                pa.array([self.me] * n, pa.int32()),
                pa.array(self.v, self.schema.field("values").type),
                pa.array(self.a, self.schema.field("anchors").type),
            ],
            schema=self.schema,
        )
        self._reset()
        return rb


class SplitBolt:
    def execute(self, tup, collector):
        out = []
        for w in tup.values[0].split():
            rb = collector.emit([w], anchors=[tup])
            if rb is not None:
                out.append(rb)
        return out

    def finish_batch(self, collector):
        return []


class CountBolt:
    def __init__(self):
        self.counts = {}

    def execute(self, tup, collector):
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        return []

    def finish_batch(self, collector):
        out = []
        for w, c in self.counts.items():
            rb = collector.emit([w, c])
            if rb is not None:
                out.append(rb)
        return out


def task_stage(bolt_factory, encoding, anchored, fields_idx, n_targets, strict=True):
    """mapInArrow function: this Spark partition is task `partitionId()` of the component."""

    def run(batches):
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        schema = arrow_schema(encoding)
        dec = pickle.loads if encoding == "pickle" else json.loads
        bolt = bolt_factory()
        col = Collector(encoding, anchored, fields_idx, n_targets, me, schema)
        for rb in batches:
            tasks = rb.column(0)
            if (
                strict
                and len(tasks)
                and (pc.min(tasks).as_py() != me or pc.max(tasks).as_py() != me)
            ):
                raise AssertionError("tuple for another task in partition %d" % me)
            srcs = rb.column(2).to_pylist()
            vals = rb.column(3).to_pylist()
            ancs = rb.column(4).to_pylist()
            for src, v, a in zip(srcs, vals, ancs, strict=False):
                tup = Tup(dec(v), [(x["root"], x["edge"]) for x in a] if a else (), src, "default")
                for out in bolt.execute(tup, col):
                    yield out
        for out in bolt.finish_batch(col):
            yield out
        last = col.flush()
        if last is not None:
            yield last

    return run


# ---------------------------------------------------------------- typed-column variant
# Values travel as the stream's declared fields, one Arrow column each (no per-tuple pickling), and a
# fields grouping is left to Spark: repartition(n, *fields) hashes the declared fields (murmur3), so the
# receiving Spark partition index is the target task and no Python hashing is needed.
def typed_schema(fields_ddl, anchored=True):
    return f"stream string, src int, {fields_ddl}, anchors array<struct<root:bigint,edge:bigint>>"


class TypedCollector(Collector):
    def __init__(self, out_fields, out_types, anchored, my_task, flush_rows=10000):
        self.out_fields, self.out_types = out_fields, out_types
        self.anchored, self.me, self.flush_rows = anchored, my_task, flush_rows
        self.rnd = random.Random(my_task)
        self.ack_xor = {}
        self._reset()

    def _reset(self):
        self.cols = [[] for _ in self.out_fields]
        self.a = []

    def emit(self, values, anchors=None):
        for c, v in zip(self.cols, values, strict=False):
            c.append(v)
        if self.anchored and anchors:
            out = []
            for anc in anchors:
                for root, _edge in anc.anchors:
                    e = self.rnd.getrandbits(63)
                    out.append({"root": root, "edge": e})
                    self.ack_xor[root] = self.ack_xor.get(root, 0) ^ e
            self.a.append(out)
        else:
            self.a.append(None)
        if len(self.a) >= self.flush_rows:
            return self.flush()
        return None

    def flush(self):
        n = len(self.a)
        if not n:
            return None
        arrays = [pa.array(["default"] * n, pa.string()), pa.array([self.me] * n, pa.int32())]
        arrays += [pa.array(c, t) for c, t in zip(self.cols, self.out_types, strict=False)]
        arrays.append(pa.array(self.a, arrow_schema("pickle").field("anchors").type))
        rb = pa.RecordBatch.from_arrays(arrays, ["stream", "src"] + self.out_fields + ["anchors"])
        self._reset()
        return rb


def typed_stage(bolt_factory, in_fields, out_fields, out_types, anchored):
    def run(batches):
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        bolt = bolt_factory()
        col = TypedCollector(out_fields, out_types, anchored, me)
        for rb in batches:
            srcs = rb.column("src").to_pylist()
            vals = zip(*[rb.column(f).to_pylist() for f in in_fields], strict=False)
            ancs = rb.column("anchors").to_pylist()
            for src, v, a in zip(srcs, vals, ancs, strict=False):
                tup = Tup(v, [(x["root"], x["edge"]) for x in a] if a else (), src, "default")
                for out in bolt.execute(tup, col):
                    yield out
        for out in bolt.finish_batch(col):
            yield out
        last = col.flush()
        if last is not None:
            yield last

    return run


def run_typed(df, anchored):
    stage1 = df.mapInArrow(
        typed_stage(SplitBolt, ["sentence"], ["word"], [pa.string()], anchored),
        typed_schema("word string"),
    )
    stage2 = stage1.repartition(N_TASKS, "word").mapInArrow(
        typed_stage(CountBolt, ["word"], ["word", "count"], [pa.string(), pa.int64()], anchored),
        typed_schema("word string, count bigint"),
    )
    t = stage2.select("word", "count").toArrow()
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=False))


# ---------------------------------------------------------------- typed columns + flat anchor columns
# As above, but a single-root anchor travels as two int64 columns `root`, `edge` (null when unanchored)
# instead of list<struct> (see q1b_anchor_column.py). Tuples with several roots would need another
# representation; W1 has one root per tuple, which is all this variant supports.
def flat_schema(fields_ddl):
    return f"stream string, src int, {fields_ddl}, root bigint, edge bigint"


class FlatCollector(TypedCollector):
    def _reset(self):
        self.cols = [[] for _ in self.out_fields]
        self.a = []
        self.e = []

    def emit(self, values, anchors=None):
        for c, v in zip(self.cols, values, strict=False):
            c.append(v)
        if self.anchored and anchors:
            roots = [r for anc in anchors for r, _e in anc.anchors]
            if len(roots) != 1:
                raise NotImplementedError("flat anchors carry exactly one root")
            e = self.rnd.getrandbits(63)
            self.a.append(roots[0])
            self.e.append(e)
            self.ack_xor[roots[0]] = self.ack_xor.get(roots[0], 0) ^ e
        else:
            self.a.append(None)
            self.e.append(None)
        if len(self.a) >= self.flush_rows:
            return self.flush()
        return None

    def flush(self):
        n = len(self.a)
        if not n:
            return None
        arrays = [pa.array(["default"] * n, pa.string()), pa.array([self.me] * n, pa.int32())]
        arrays += [pa.array(c, t) for c, t in zip(self.cols, self.out_types, strict=False)]
        arrays += [pa.array(self.a, pa.int64()), pa.array(self.e, pa.int64())]
        rb = pa.RecordBatch.from_arrays(
            arrays, ["stream", "src"] + self.out_fields + ["root", "edge"]
        )
        self._reset()
        return rb


def flat_stage(bolt_factory, in_fields, out_fields, out_types, anchored):
    def run(batches):
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        bolt = bolt_factory()
        col = FlatCollector(out_fields, out_types, anchored, me)
        for rb in batches:
            srcs = rb.column("src").to_pylist()
            vals = zip(*[rb.column(f).to_pylist() for f in in_fields], strict=False)
            roots = rb.column("root").to_pylist()
            edges = rb.column("edge").to_pylist()
            for src, v, r, e in zip(srcs, vals, roots, edges, strict=False):
                tup = Tup(v, ((r, e),) if r is not None else (), src, "default")
                for out in bolt.execute(tup, col):
                    yield out
        for out in bolt.finish_batch(col):
            yield out
        last = col.flush()
        if last is not None:
            yield last

    return run


def run_flat(df, anchored):
    stage1 = df.mapInArrow(
        flat_stage(SplitBolt, ["sentence"], ["word"], [pa.string()], anchored),
        flat_schema("word string"),
    )
    stage2 = stage1.repartition(N_TASKS, "word").mapInArrow(
        flat_stage(CountBolt, ["word"], ["word", "count"], [pa.string(), pa.int64()], anchored),
        flat_schema("word string, count bigint"),
    )
    t = stage2.select("word", "count").toArrow()
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=False))


# ---------------------------------------------------------------- repartition by an explicit task column
def salt_table(spark, n):
    """For each task t, the smallest long k with pmod(murmur3(k), n) == t, computed by Spark itself, so
    that repartition(n, salt[task]) puts task t in partition t (identity partitioning via hash exchange)."""
    from pyspark.sql import functions as F

    rows = (
        spark.range(0, 64 * n)
        .select("id", F.expr("pmod(hash(id), %d)" % n).alias("p"))
        .groupBy("p")
        .agg(F.min("id").alias("k"))
        .collect()
    )
    salts = {r.p: r.k for r in rows}
    assert len(salts) == n
    return [salts[t] for t in range(n)]


def by_task(df, n, method, salts=None):
    from pyspark.sql import functions as F

    if method == "salted-hash":
        key = F.element_at(F.array(*[F.lit(s).cast("long") for s in salts]), F.col("task") + 1)
        return df.repartition(n, key)
    if method == "hash(task)":
        return df.repartition(n, "task")
    if method == "range(task)":
        return df.repartitionByRange(n, "task")
    raise ValueError(method)


def partition_map(spark, n, method, salts):
    from pyspark.sql import functions as F

    df = spark.range(n).selectExpr("cast(id as int) as task")
    rows = by_task(df, n, method, salts).select("task", F.spark_partition_id().alias("p")).collect()
    return {r.task: r.p for r in rows}


# ---------------------------------------------------------------- hand-written baseline (benchmarks.md)
def b_split(batches):
    for rb in batches:
        words = [w for s in rb.column(0).to_pylist() for w in s.split()]
        yield pa.RecordBatch.from_arrays([pa.array(words, pa.string())], ["word"])


def b_count(batches):
    d = {}
    for rb in batches:
        for w in rb.column(0).to_pylist():
            d[w] = d.get(w, 0) + 1
    yield pa.RecordBatch.from_arrays(
        [pa.array(list(d.keys()), pa.string()), pa.array(list(d.values()), pa.int64())],
        ["word", "count"],
    )


def run_baseline(src_df):
    t = (
        src_df.mapInArrow(b_split, "word string")
        .repartition(N_TASKS, "word")
        .mapInArrow(b_count, "word string, count long")
        .toArrow()
    )
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=False))


def run_squall(spark_df, encoding, anchored, method, salts):
    stage1 = spark_df.mapInArrow(
        task_stage(SplitBolt, encoding, anchored, 0, N_TASKS), tuple_schema(encoding)
    )
    # only salted-hash is an identity map (see the partition map printed first): check only there
    strict = method == "salted-hash"
    stage2 = by_task(stage1, N_TASKS, method, salts).mapInArrow(
        task_stage(CountBolt, encoding, anchored, None, 1, strict), tuple_schema(encoding)
    )
    t = stage2.select("values").toArrow()
    dec = pickle.loads if encoding == "pickle" else json.loads
    return dict(dec(v) for v in t.column(0).to_pylist())


# ---------------------------------------------------------------- RDD alternative (pickled Python objects)
def r_split(it):
    import zlib as _z

    for root, sentence in it:
        for w in sentence.split():
            yield (_z.crc32(w.encode()) % N_TASKS, ((w,), root))


def r_count(it):
    d = {}
    for _task, (vals, _root) in it:
        w = vals[0]
        d[w] = d.get(w, 0) + 1
    return iter(d.items())


def run_rdd(rdd):
    return dict(
        rdd.mapPartitions(r_split)
        .partitionBy(N_TASKS, lambda k: k)
        .mapPartitions(r_count)
        .collect()
    )


class _FakeTaskContext:
    def partitionId(self):
        return 0


def python_only(sentences):
    """The same stage functions run in this process on 20,000 sentences, without Spark: the Python cost
    per word of each stage, and the baseline's."""
    from unittest import mock

    import pyspark

    sent = sentences[:20000]
    rnd = random.Random(7)
    anchors = pa.array(
        [[{"root": rnd.getrandbits(63), "edge": 1}] for _ in sent],
        arrow_schema("pickle").field("anchors").type,
    )
    n_words = 10 * len(sent)
    with mock.patch.object(pyspark.TaskContext, "get", return_value=_FakeTaskContext()):
        for enc in ("pickle", "json"):
            f = pickle.dumps if enc == "pickle" else json.dumps
            tbl = pa.table(
                [
                    pa.array([0] * len(sent), pa.int32()),
                    pa.array(["default"] * len(sent)),
                    pa.array([0] * len(sent), pa.int32()),
                    pa.array([f([x]) for x in sent], arrow_schema(enc).field("values").type),
                    anchors,
                ],
                schema=arrow_schema(enc),
            )
            for anchored in (True, False):
                t0 = time.perf_counter()
                mid = pa.Table.from_batches(
                    list(
                        task_stage(SplitBolt, enc, anchored, 0, N_TASKS)(
                            iter(tbl.to_batches(10000))
                        )
                    )
                )
                t1 = time.perf_counter()
                mid = mid.set_column(0, "task", pa.array([0] * mid.num_rows, pa.int32()))
                t2 = time.perf_counter()
                list(task_stage(CountBolt, enc, anchored, None, 1)(iter(mid.to_batches(10000))))
                t3 = time.perf_counter()
                print(
                    "python-only squall %-6s anchored=%-5s split %.2f us/word, count %.2f us/word"
                    % (enc, anchored, (t1 - t0) / n_words * 1e6, (t3 - t2) / n_words * 1e6)
                )
        typed = pa.table(
            {
                "stream": ["default"] * len(sent),
                "src": pa.array([0] * len(sent), pa.int32()),
                "sentence": sent,
                "anchors": anchors,
            }
        )
        for anchored in (True, False):
            t0 = time.perf_counter()
            mid = pa.Table.from_batches(
                list(
                    typed_stage(SplitBolt, ["sentence"], ["word"], [pa.string()], anchored)(
                        iter(typed.to_batches(10000))
                    )
                )
            )
            t1 = time.perf_counter()
            list(
                typed_stage(
                    CountBolt, ["word"], ["word", "count"], [pa.string(), pa.int64()], anchored
                )(iter(mid.to_batches(10000)))
            )
            t2 = time.perf_counter()
            print(
                "python-only squall typed  anchored=%-5s split %.2f us/word, count %.2f us/word"
                % (anchored, (t1 - t0) / n_words * 1e6, (t2 - t1) / n_words * 1e6)
            )
        flat = pa.table(
            {
                "stream": ["default"] * len(sent),
                "src": pa.array([0] * len(sent), pa.int32()),
                "sentence": sent,
                "root": pa.array([a[0]["root"] for a in anchors.to_pylist()], pa.int64()),
                "edge": pa.array([1] * len(sent), pa.int64()),
            }
        )
        for anchored in (True, False):
            t0 = time.perf_counter()
            mid = pa.Table.from_batches(
                list(
                    flat_stage(SplitBolt, ["sentence"], ["word"], [pa.string()], anchored)(
                        iter(flat.to_batches(10000))
                    )
                )
            )
            t1 = time.perf_counter()
            list(
                flat_stage(
                    CountBolt, ["word"], ["word", "count"], [pa.string(), pa.int64()], anchored
                )(iter(mid.to_batches(10000)))
            )
            t2 = time.perf_counter()
            print(
                "python-only squall flat   anchored=%-5s split %.2f us/word, count %.2f us/word"
                % (anchored, (t1 - t0) / n_words * 1e6, (t2 - t1) / n_words * 1e6)
            )
    t0 = time.perf_counter()
    mid = list(b_split(iter(pa.table({"s": sent}).to_batches(10000))))
    t1 = time.perf_counter()
    list(b_count(iter(mid)))
    t2 = time.perf_counter()
    print(
        f"python-only baseline               split {(t1 - t0) / n_words * 1e6:.2f} us/word, count {(t2 - t1) / n_words * 1e6:.2f} us/word"
    )


def routing_check(spark, df, salts):
    """Rows per (task, Spark partition) after each repartition method, on the split stage's real output."""
    from pyspark.sql import functions as F

    for m in ("salted-hash", "hash(task)", "range(task)"):
        rows = (
            by_task(df, N_TASKS, m, salts)
            .groupBy("task", F.spark_partition_id().alias("p"))
            .count()
            .orderBy("task", "p")
            .collect()
        )
        misrouted = sum(r["count"] for r in rows if r.task != r.p)
        print(
            "routing %-12s (task, partition, rows): %s  rows not in their task's partition: %d"
            % (m, [(r.task, r.p, r["count"]) for r in rows], misrouted)
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated substrings: run the baseline and the matching variants only",
    )
    args = ap.parse_args()

    common.header("Q1 2-stage DAG split -> count (fields grouping), W1 as one batch")
    sentences = common.w1_sentences()
    ref = common.reference_counts(sentences)
    n_words = sum(ref.values())
    python_only(sentences)
    spark = common.spark_session()
    salts = salt_table(spark, N_TASKS)
    print("# salts (long key per task for identity partitioning through hash exchange):", salts)
    for n in (2, 4, 8):
        s = salt_table(spark, n)
        for m in ("hash(task)", "range(task)", "salted-hash"):
            pm = partition_map(spark, n, m, s)
            ident = all(pm[t] == t for t in range(n))
            print(
                "partition map n=%d %-12s task->partition %s identity=%s distinct=%d"
                % (n, m, [pm[t] for t in range(n)], ident, len(set(pm.values())))
            )

    # inputs, built once and cached (source cost excluded): baseline sentences, and spout tuples in the wire format
    src_df = spark.createDataFrame(pa.table({"sentence": sentences})).repartition(N_TASKS).cache()
    src_df.count()
    rnd = random.Random(7)
    roots = [rnd.getrandbits(63) for _ in sentences]
    anchors = [[{"root": r, "edge": rnd.getrandbits(63)}] for r in roots]
    tuple_inputs = {}
    for enc in ("pickle", "json"):
        enc_f = pickle.dumps if enc == "pickle" else json.dumps
        tbl = pa.table(
            [
                pa.array([i % N_TASKS for i in range(len(sentences))], pa.int32()),
                pa.array(["default"] * len(sentences)),
                pa.array([0] * len(sentences), pa.int32()),
                pa.array([enc_f([s]) for s in sentences], arrow_schema(enc).field("values").type),
                pa.array(anchors, arrow_schema(enc).field("anchors").type),
            ],
            schema=arrow_schema(enc),
        )
        df = by_task(spark.createDataFrame(tbl), N_TASKS, "salted-hash", salts).cache()
        df.count()
        tuple_inputs[enc] = df
    typed_df = (
        spark.createDataFrame(
            pa.table(
                [
                    pa.array(["default"] * len(sentences)),
                    pa.array([0] * len(sentences), pa.int32()),
                    pa.array(sentences),
                    pa.array(anchors, arrow_schema("pickle").field("anchors").type),
                ],
                names=["stream", "src", "sentence", "anchors"],
            )
        )
        .repartition(N_TASKS)
        .cache()
    )
    typed_df.count()
    flat_df = (
        spark.createDataFrame(
            pa.table(
                [
                    pa.array(["default"] * len(sentences)),
                    pa.array([0] * len(sentences), pa.int32()),
                    pa.array(sentences),
                    pa.array(roots, pa.int64()),
                    pa.array([a[0]["edge"] for a in anchors], pa.int64()),
                ],
                names=["stream", "src", "sentence", "root", "edge"],
            )
        )
        .repartition(N_TASKS)
        .cache()
    )
    flat_df.count()
    rdd = spark.sparkContext.parallelize(list(zip(roots, sentences, strict=False)), N_TASKS).cache()
    rdd.count()

    variants = [
        ("baseline (benchmarks.md hand-written)", lambda: run_baseline(src_df)),
        (
            "squall pickle+anchors, salted-hash",
            lambda: run_squall(tuple_inputs["pickle"], "pickle", True, "salted-hash", salts),
        ),
        (
            "squall pickle, unanchored, salted-hash",
            lambda: run_squall(tuple_inputs["pickle"], "pickle", False, "salted-hash", salts),
        ),
        (
            "squall json+anchors, salted-hash",
            lambda: run_squall(tuple_inputs["json"], "json", True, "salted-hash", salts),
        ),
        (
            "squall pickle+anchors, repartition(n,task)",
            lambda: run_squall(tuple_inputs["pickle"], "pickle", True, "hash(task)", salts),
        ),
        (
            "squall pickle+anchors, repartitionByRange",
            lambda: run_squall(tuple_inputs["pickle"], "pickle", True, "range(task)", salts),
        ),
        ("RDD pipeline, partitionBy(identity)", lambda: run_rdd(rdd)),
        ("squall typed columns+anchors, repartition(word)", lambda: run_typed(typed_df, True)),
        ("squall typed columns, unanchored", lambda: run_typed(typed_df, False)),
        ("squall typed + flat root/edge anchors", lambda: run_flat(flat_df, True)),
        ("squall typed + flat root/edge, unanchored", lambda: run_flat(flat_df, False)),
    ]
    if args.only:
        keys = args.only.split(",")
        variants = [variants[0]] + [v for v in variants[1:] if any(k in v[0] for k in keys)]
    results = {name: [] for name, _ in variants}
    for rep in range(1, args.reps + 1):
        base = None
        for name, fn in variants:
            with common.JobCounter(spark) as jc:
                dt, counts = common.timed(fn)
            ok = counts == ref
            if base is None:
                base = dt
            results[name].append(dt)
            print(
                "rep %d  %-48s %6.2f s  %5.2f M words/s  ratio %.2f  jobs %d  correct=%s"
                % (rep, name, dt, n_words / dt / 1e6, base / dt, jc.jobs, ok)
            )
            if not ok:
                print("  MISMATCH", len(counts), sum(counts.values()), file=sys.stderr)
    print("\n# summary: rep 2 (steady state), throughput and ratio to the baseline of rep 2")
    b2 = results[variants[0][0]][1] if args.reps > 1 else results[variants[0][0]][0]
    for name, _ in variants:
        d = results[name][1] if args.reps > 1 else results[name][0]
        print("%-48s %5.2f M words/s  ratio %.2f" % (name, n_words / d / 1e6, b2 / d))
    routing_check(
        spark,
        tuple_inputs["pickle"].mapInArrow(
            task_stage(SplitBolt, "pickle", False, 0, N_TASKS), tuple_schema("pickle")
        ),
        salts,
    )
    spark.stop()


if __name__ == "__main__":
    main()
