"""Shared helpers for the Trident-on-Spark design measurements (docs/design/trident.md).

Not part of squall: these scripts measure the Spark mechanisms `squall.trident` would use, each
against the hand-written PySpark W1 job of benchmarks.md run in the same session, interleaved.
Run each script from the repository root with the project virtualenv, e.g.

    .venv/bin/python benchmarks/trident_design/a_per_tuple.py

Conventions (all scripts):
- W1 from benchmarks/workloads.py; every run's counts are checked against the reference dict.
- "batch" mode: the whole input (200,000 sentences) as one batch, a cached DataFrame of 2
  partitions, one Spark action (`toArrow`) per run; source cost excluded.
- "stream" mode: a Structured Streaming query over parquet files (2 files per micro-batch,
  `maxFilesPerTrigger=2`, `availableNow`), the plan run in `foreachBatch` with
  txid = batch id + 1; timed is the sum of `triggerExecution` of the data batches; query start
  is reported separately.
- Round 1 is a warm-up; the figures are the median over the timed rounds, and the ratio per
  round is the hand-written job's time in that round divided by the variant's.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle
from workloads import reference_counts, w1_sentences

from squall.state.backends import SqliteStore, StoreKeyValueState

# Functions defined here run in Python workers; ship them by value (this folder is not on the
# workers' path). PySpark pickles with its own copy of cloudpickle, so register there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

__all__ = ["reference_counts", "w1_sentences"]

SHUFFLE_PARTITIONS = 2
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # as squall's Spark runner: no adaptive coalescing, one partition per task
    "spark.sql.adaptive.enabled": "false",
}


def session(app: str = "squall-trident-design"):
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master("local[2]").appName(app)
    for k, v in SESSION_CONF.items():
        b = b.config(k, v)
    t0 = time.perf_counter()
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"# session start {time.perf_counter() - t0:.1f} s (local[2], pyspark {spark.version}, "
          f"shuffle partitions {SHUFFLE_PARTITIONS}, AQE off)", flush=True)
    return spark


def header(title: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n## {title}\n# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load}",
          flush=True)


def median(xs):
    return statistics.median(xs)


def table_counts(t) -> dict:
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))


def check(name: str, counts: dict, ref: dict) -> None:
    if counts != ref:
        raise AssertionError(f"{name}: counts differ from the reference ({len(counts)} words, "
                             f"{sum(counts.values())} in all)")


# ---------------------------------------------------------------- the hand-written job
def b_split(batches):
    for rb in batches:
        words = [w for s in rb.column(0).to_pylist() for w in s.split()]
        yield pa.RecordBatch.from_arrays([pa.array(words, pa.string())], ["word"])


def b_count(batches):
    d: dict = {}
    for rb in batches:
        for w in rb.column(0).to_pylist():
            d[w] = d.get(w, 0) + 1
    yield pa.RecordBatch.from_arrays(
        [pa.array(list(d.keys()), pa.string()), pa.array(list(d.values()), pa.int64())],
        ["word", "count"],
    )


def baseline_plan(df):
    """benchmarks.md: Python split in mapInArrow, repartition by word, dict count per partition."""
    return (df.mapInArrow(b_split, "word string").repartition(SHUFFLE_PARTITIONS, "word")
            .mapInArrow(b_count, "word string, count long"))


# ---------------------------------------------------------------- Trident-shaped pieces
class TridentTuple:
    """The per-tuple view a user Function gets (values by position, like Storm's TridentTuple)."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = values

    def get_value(self, i):
        return self.values[i]

    def get_string(self, i):
        return self.values[i]


class ColumnCollector:
    """Trident's TridentCollector for one output field set: emit() appends to column lists."""

    __slots__ = ("cols", "emit")

    def __init__(self, n_fields):
        self.cols = [[] for _ in range(n_fields)]
        if n_fields == 1:
            col = self.cols[0]
            self.emit = lambda values: col.append(values[0])
        else:
            cols = self.cols

            def emit(values):
                for c, v in zip(cols, values, strict=True):
                    c.append(v)

            self.emit = emit


class Split:
    """Storm's Trident word-count Split, as a user would write it (per tuple)."""

    def execute(self, tup, collector):
        for word in tup.get_string(0).split(" "):
            collector.emit([word])


def each_per_tuple(fn, in_col, out_names, out_types):
    """`each(Fields(in), fn, Fields(out))` as a mapInArrow function: a Python loop per Arrow batch
    calling fn.execute(tuple, collector) for every input tuple; emitted values are appended to the
    input tuple's values (Trident's `each` semantics) -- here only the output columns are kept, as
    the W1 stream projects to the word."""

    def run(batches):
        for rb in batches:
            col = ColumnCollector(len(out_names))
            execute = fn.execute
            for v in rb.column(in_col).to_pylist():
                execute(TridentTuple((v,)), col)
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, t) for c, t in zip(col.cols, out_types, strict=True)], out_names)

    return run


def split_vectorised(batches):
    """A batch function: the whole sentence column split with pyarrow.compute, no Python loop."""
    for rb in batches:
        words = pc.list_flatten(pc.split_pattern(rb.column(0), " "))
        yield pa.RecordBatch.from_arrays([words], ["word"])


def split_and_combine_arrow(batches):
    """Vectorised split plus Count's partial aggregation in the worker (Arrow group_by over the
    whole partition), so only (word, partial count) rows cross to the JVM."""
    parts = []
    for rb in batches:
        parts.append(pc.list_flatten(pc.split_pattern(rb.column(0), " ")))
    if not parts:
        return
    words = pa.chunked_array(parts, pa.string())
    t = pa.table({"word": words}).group_by("word").aggregate([([], "count_all")])
    yield from t.rename_columns(["word", "count"]).to_batches()


def split_and_combine_python(batches):
    """Per-tuple Split (as in A) plus a Python dict combiner per partition (Storm's
    CombinerAggregator Count run before the shuffle)."""
    fn = Split()
    d: dict = {}
    col = ColumnCollector(1)
    execute = fn.execute
    for rb in batches:
        col.cols[0].clear()
        for v in rb.column(0).to_pylist():
            execute(TridentTuple((v,)), col)
        for w in col.cols[0]:
            d[w] = d.get(w, 0) + 1
    yield pa.RecordBatch.from_arrays(
        [pa.array(list(d.keys()), pa.string()), pa.array(list(d.values()), pa.int64())],
        ["word", "count"],
    )


def jvm_count(words_df):
    """group_by(word).aggregate(Count): Spark's partial + final hash aggregation in the JVM."""
    return words_df.groupBy("word").count()


def jvm_sum(partials_df):
    from pyspark.sql import functions as F

    return partials_df.groupBy("word").agg(F.sum("count").alias("count"))


# ---------------------------------------------------------------- map states (driver side)
# Each applies one batch's partial aggregates (keys, values) for txid, exactly once, durably:
# a batch is committed atomically (one SQLite transaction or one renamed file) with its txid, and a
# txid at or below the committed one is a replay and changes nothing. The foreachBatch callback
# runs on another thread than the one that made a state, so connections are opened per thread.
class KvTransactionalMap:
    """Storm's TransactionalMap over squall's existing durable store (`SqliteStore` through
    `StoreKeyValueState`): value = (count, txid) pickled per key, one `get` per key, the batch
    written as a version (prepare) and promoted (commit): two SQLite transactions."""

    name = "kv: squall SqliteStore + StoreKeyValueState, per-key get/put"

    def __init__(self, path):
        self.path = path
        self._local = threading.local()

    @property
    def kv(self):
        if getattr(self._local, "kv", None) is None:
            self._local.kv = StoreKeyValueState(SqliteStore(self.path))
        return self._local.kv

    def apply(self, txid, keys, values):
        kv = self.kv
        committed = kv.store.committed_txid()
        if committed is not None and committed >= txid:
            return 0  # the whole batch is in the state already (a replay)
        get, put = kv.get, kv.put
        for k, v in zip(keys, values, strict=True):
            old = get(k)
            if old is None:
                put(k, (v, txid))
            elif old[1] != txid:  # Storm's rule: same txid = this batch was applied already
                put(k, (old[0] + v, txid))
        kv.prepare_commit(txid)
        kv.commit(txid)
        return len(keys)

    def counts(self):
        return {k: v[0] for k, v in self.kv}


class _SqlMap:
    def __init__(self, path):
        self.path = path
        self._local = threading.local()

    @property
    def conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")  # as SqliteStore: a commit survives a crash
            conn.execute(self.DDL)
            conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, txid INTEGER)")
            self._local.conn = conn
        return conn

    def apply(self, txid, keys, values):
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT txid FROM meta WHERE name = 'committed'").fetchone()
            if row is not None and row[0] >= txid:
                conn.execute("ROLLBACK")
                return 0
            conn.executemany(self.UPSERT, zip(keys, values, itertools.repeat(txid)))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('committed', ?)", (txid,))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return len(keys)

    def counts(self):
        return dict(self.conn.execute(self.READ))


class SqlTransactionalMap(_SqlMap):
    """Storm's TransactionalMap as one SQLite table (key, count, txid); the batch is applied by one
    executemany upsert whose WHERE is Storm's txid rule, in one transaction with the txid."""

    name = "sql-tx: SQLite table, executemany upsert, transactional (value, txid)"
    DDL = "CREATE TABLE IF NOT EXISTS m (k TEXT PRIMARY KEY, v INTEGER, txid INTEGER)"
    UPSERT = ("INSERT INTO m VALUES (?1, ?2, ?3) ON CONFLICT(k) DO UPDATE SET v = m.v + excluded.v,"
              " txid = excluded.txid WHERE m.txid < excluded.txid")
    READ = "SELECT k, v FROM m"


class SqlOpaqueMap(_SqlMap):
    """Storm's OpaqueMap: (curr, prev, txid); a batch with the stored txid is re-applied on prev,
    so a replay with different content (opaque spout) replaces the earlier attempt."""

    name = "sql-opaque: SQLite table, executemany upsert, opaque (curr, prev, txid)"
    DDL = ("CREATE TABLE IF NOT EXISTS m (k TEXT PRIMARY KEY, curr INTEGER, prev INTEGER, "
           "txid INTEGER)")
    UPSERT = ("INSERT INTO m VALUES (?1, ?2, 0, ?3) ON CONFLICT(k) DO UPDATE SET "
              "curr = CASE WHEN m.txid = excluded.txid THEN m.prev ELSE m.curr END + excluded.curr,"
              " prev = CASE WHEN m.txid = excluded.txid THEN m.prev ELSE m.curr END,"
              " txid = excluded.txid WHERE m.txid <= excluded.txid")
    READ = "SELECT k, curr FROM m"

    def apply_attempt(self, txid, keys, values):
        """An opaque re-attempt of txid (the batch-level txid check would skip it)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(self.UPSERT, zip(keys, values, itertools.repeat(txid)))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('committed', ?)", (txid,))
        conn.execute("COMMIT")


class FileTransactionalMap:
    """The map in a driver dict; each batch's changed entries (word, new count) written as one
    Arrow IPC file named by txid (temporary name, fsync, rename, fsync of the directory).
    Recovery reads the files in txid order (a compaction into a snapshot file would bound it)."""

    name = "file: driver dict + one Arrow IPC file per batch (fsync + rename)"

    def __init__(self, path):
        self.dir = path + ".d"
        os.makedirs(self.dir, exist_ok=True)
        self.map: dict = {}
        self.committed = 0

    def apply(self, txid, keys, values):
        if txid <= self.committed:
            return 0
        m = self.map
        new = [m.get(k, 0) + v for k, v in zip(keys, values, strict=True)]
        tmp = os.path.join(self.dir, f".{txid}.tmp")
        t = pa.table({"k": pa.array(keys, pa.string()), "v": pa.array(new, pa.int64())})
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        fd = os.open(tmp, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(self.dir, f"{txid:020d}.arrow"))
        dfd = os.open(self.dir, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        m.update(zip(keys, new, strict=True))
        self.committed = txid
        return len(keys)

    def counts(self):
        return dict(self.map)

    def recover(self):
        m: dict = {}
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".arrow"):
                t = pa.ipc.open_file(os.path.join(self.dir, name)).read_all()
                m.update(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
        return m


STATES = {"kv": KvTransactionalMap, "sql-tx": SqlTransactionalMap, "sql-opaque": SqlOpaqueMap,
          "file": FileTransactionalMap}
STATE = "sql-tx"  # the state A-C apply their partial aggregates to (see d_state.py)


def new_state(root, kind=None):
    return STATES[kind or STATE](os.path.join(tempfile.mkdtemp(dir=root), "counts.sqlite"))


# ---------------------------------------------------------------- stream mode
def write_stream_input(sentences, per_batch, root):
    """The input as parquet files, two per micro-batch (one per core)."""
    import pyarrow.parquet as pq

    d = tempfile.mkdtemp(prefix=f"in-{per_batch}-", dir=root)
    half = per_batch // 2
    for i, start in enumerate(range(0, len(sentences), half)):
        pq.write_table(pa.table({"sentence": sentences[start:start + half]}),
                       os.path.join(d, f"part-{i:05d}.parquet"))
    return d


def run_stream(spark, src_dir, plan, state=None, root=None):
    """One streaming query over src_dir; foreachBatch runs plan(df).toArrow() and applies the
    result to `state` (txid = batch id + 1) or, for the hand-written job, adds it to a dict.

    Returns (sum of triggerExecution of data batches in s, query wall time in s, a note on the
    data batches and their partitions, counts)."""
    merged: dict = {}
    parts = set()

    def each_batch(df, batch_id):
        parts.add(df.rdd.getNumPartitions())
        t = plan(df).toArrow()
        if state is not None:
            state.apply(batch_id + 1, t.column(0).to_pylist(), t.column(1).to_pylist())
        else:
            for w, c in zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True):
                merged[w] = merged.get(w, 0) + c

    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=root)
    t0 = time.perf_counter()
    q = (spark.readStream.schema("sentence string").option("maxFilesPerTrigger", 2)
         .parquet(src_dir).writeStream.foreachBatch(each_batch)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    busy = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    shutil.rmtree(ckpt, ignore_errors=True)
    counts = state.counts() if state is not None else merged
    note = f"{len(progress)} batches of {'/'.join(map(str, sorted(parts)))} partitions"
    return busy, wall, note, counts


def report(title, n_words, results, base_name):
    """results: name -> list of (seconds, baseline seconds of the same round); round 1 dropped."""
    print(f"\n# {title}: median of rounds 2..n (round 1 is warm-up); ratio = hand-written / "
          "variant in the same round", flush=True)
    for name, rows in results.items():
        timed = rows[1:] if len(rows) > 1 else rows
        secs = median([s for s, _ in timed])
        ratios = [b / s for s, b in timed]
        label = "(the hand-written job)" if name == base_name else ""
        print(f"{name:<64} {secs:6.2f} s {n_words / secs / 1e6:6.2f} M words/s  ratio median "
              f"{median(ratios):6.0%}  per round {' '.join(f'{r:.0%}' for r in ratios)} {label}",
              flush=True)


# ---------------------------------------------------------------- the comparison every script runs
def compare(title, variants, argv=None):
    """Run the hand-written job and `variants` (name -> plan(df) giving (word, count)) interleaved,
    in batch mode and in stream mode, checking every run's counts; print the figures."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--per-batch", default="200000,100000",
                    help="stream mode: sentences per micro-batch (comma-separated)")
    ap.add_argument("--rounds", type=int, default=4, help="batch mode rounds (1st is warm-up)")
    ap.add_argument("--stream-rounds", type=int, default=3)
    ap.add_argument("--state", default=STATE, choices=sorted(STATES),
                    help="the map state the variants apply their partial aggregates to")
    args = ap.parse_args(argv)
    header(title)
    sentences = w1_sentences(args.sentences)
    ref = reference_counts(sentences)
    n_words = sum(ref.values())
    print(f"# W1: {len(sentences):,} sentences, {n_words:,} words, {len(ref):,} distinct; "
          f"state {STATES[args.state].name}", flush=True)
    root = tempfile.mkdtemp(prefix="trident-design-")
    spark = session()
    src_df = spark.createDataFrame(pa.table({"sentence": sentences})).repartition(2).cache()
    src_df.count()

    base_name = "hand-written job"
    plans = {base_name: baseline_plan, **variants}
    results: dict = {}
    for rnd in range(1, args.rounds + 1):
        line = []
        base_s = None
        for name, plan in plans.items():
            t0 = time.perf_counter()
            t = plan(src_df).toArrow()
            dt = time.perf_counter() - t0
            counts = table_counts(t)
            check(name, counts, ref)
            if base_s is None:
                base_s = dt
            results.setdefault(name, []).append((dt, base_s))
            line.append(f"{name} {dt:.2f}s")
            if name != base_name:
                state = new_state(root, args.state)
                t1 = time.perf_counter()
                state.apply(1, t.column(0).to_pylist(), t.column(1).to_pylist())
                ds = time.perf_counter() - t1
                check(name + " + state", state.counts(), ref)
                results.setdefault(name + " + state (txid 1)", []).append((dt + ds, base_s))
                line.append(f"+state {ds:.2f}s")
        print(f"batch round {rnd}: " + ", ".join(line), flush=True)
    report("batch mode, the whole input as one batch (cached DataFrame, one toArrow)", n_words,
           results, base_name)

    for per_batch in [int(x) for x in args.per_batch.split(",") if x]:
        src_dir = write_stream_input(sentences, min(per_batch, len(sentences)), root)
        results = {}
        walls: dict = {}
        for rnd in range(1, args.stream_rounds + 1):
            line = []
            base_s = None
            for name, plan in plans.items():
                state = None if name == base_name else new_state(root, args.state)
                busy, wall, n_batches, counts = run_stream(spark, src_dir, plan, state, root)
                check(name + " (stream)", counts, ref)
                if base_s is None:
                    base_s = busy
                label = name if name == base_name else name + " + state"
                results.setdefault(label, []).append((busy, base_s))
                walls.setdefault(label, []).append(wall - busy)
                line.append(f"{label} {busy:.2f}s ({n_batches}, query {wall:.1f}s)")
            print(f"stream {per_batch} round {rnd}: " + ", ".join(line), flush=True)
        report(f"stream mode, {per_batch:,} sentences per micro-batch (sum of triggerExecution)",
               n_words, results, base_name)
        for label, rest in walls.items():
            print(f"  {label:<62} query start/stop outside the batches: median "
                  f"{median(rest[1:] or rest):.1f} s", flush=True)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
