"""The peers: W1, W2 and W5 (docs/benchmarks.md) on other Python stream processors, in one sitting.

    .venv/bin/python benchmarks/peers.py [--sentences 200000] [--runs 3] [--workloads W1,W2,W5]
        [--systems ...] [--events 4000000] [--keys 10000,4000000]

Each peer runs in a process of its own, in a virtual environment this script makes under
`benchmarks/.data/` on first use from the pinned requirements beside it (`peers-requirements.txt`
for Bytewax, Pathway, streamz and reactivex; `peers-flink-requirements.txt` for PyFlink, whose
pins conflict with Pathway's); the plain-Python and PySpark rows run in the interpreter that runs
this script (the repository's `.venv`, which has PySpark). Every process also times the
plain-Python per-word loop (W1, W2) or dict (W5) on the same data, and each figure is given as a
ratio to it: processes on a busy machine differ, the ratio in one process holds.

A figure is the median of `--runs` timed runs after one warm-up run in the same process, from
handing the input to the system to having its whole output back in Python, so process, JVM and
Spark session start are excluded; a system that starts a cluster or an engine for each job (a
Flink job, a Pathway run) pays that inside its figure. Every run's output is checked against a
plain-Python count of the same data (W1: per word; W2: per 10 s tumbling event-time window and
word; W5: count and sum per key); a run that differs is reported as WRONG and left out. The
slowest peers run on part of the sentences (reactivex a tenth, PyFlink's DataStream API a
hundredth; the table says how many words).

The systems, each written the way its own documentation counts words:

- `dict`: the per-word loop `d[w] = d.get(w, 0) + 1`; `counter`: `Counter.update(line.split())`;
- `spark-jvm`: a PySpark batch DataFrame, split and count in the JVM (`explode(split(...))`,
  `groupBy().count()`); `spark-arrow`: split in Python in `mapInArrow`, counted in the JVM;
  `ss-one`: Structured Streaming, the whole input in one micro-batch, JVM split; `ss-20`:
  Structured Streaming, 20 micro-batches, Python split in `mapInArrow`; all `local[2]`;
- `squall-trident`: squall's Trident with the vectorised split on the same session, the input
  as one transaction from a parquet file (W1 into a durable transactional map state, W2 through
  Trident's tumbling window); `squall-storm`: squall's Storm API on the same session, acking off,
  the input as one micro-batch (W1: spout, split, count; W2: a `WindowedBolt`); their figures
  are their transactions' or micro-batches' time, as their own benchmarks report;
- `bytewax`: `flat_map` -> `count_final` (W1), event-time `count_window` (W2), `stateful_map`
  (W5), two workers (`cluster_main`, `worker_count_per_proc=2`), its testing source giving
  1,000 items a poll; W2's event clock waits 60 s of system time (Bytewax moves the watermark on
  with the system clock, and with no wait some words arrive late and are dropped);
- `pathway`: `flatten` -> `groupby().reduce(count)` (W1), `windowby(tumbling)` (W2),
  `groupby(key).reduce(count, sum)` (W5), two threads (`PATHWAY_THREADS=2`);
- `streamz`: `map(str.split).flatten().accumulate(...)`; `reactivex`: `flat_map` ->
  `group_by` -> `count` (W1, W2);
- `flink-sql`: PyFlink's Table API in batch mode, the split and count in Flink's JVM operators
  (W1: `UNNEST(SPLIT(...))`; W2: the `TUMBLE` table function over an event-time column);
  `flink-ds`: PyFlink's DataStream API in batch mode with Python functions (`flat_map`, `key_by`,
  `reduce`) over a file source; parallelism 2; both return their result through `to_pandas`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workloads import reference_counts as ref_w1  # noqa: E402
from workloads import w1_sentences  # noqa: E402

DATA = HERE / ".data"
WINDOW_MS = 10_000
GROUPS = {  # which interpreter runs which systems
    "main": ("dict", "counter", "spark-jvm", "spark-arrow", "ss-one", "ss-20", "squall-trident",
             "squall-storm"),
    "streams": ("bytewax", "pathway", "streamz", "reactivex"),
    "flink": ("flink-sql", "flink-ds"),
}
REQUIREMENTS = {"streams": HERE / "peers-requirements.txt",
                "flink": HERE / "peers-flink-requirements.txt"}
W5_SYSTEMS = ("dict", "bytewax", "pathway")
SLOW = {"flink-ds": 100, "reactivex": 10}  # these run on 1/n of the sentences
BYTEWAX_BATCH = 1000  # items a poll of its testing source gives, as a Kafka source would


# ---- the data and its references -------------------------------------------------------------

def timestamps(n: int) -> list[int]:
    """Sentence i's event time, in milliseconds."""
    return [i * 10 for i in range(n)]


def ref_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    d: dict[tuple[int, str], int] = {}
    for i, line in enumerate(sentences):
        ts = i * 10
        start = ts - ts % WINDOW_MS
        for w in line.split():
            k = (start, w)
            d[k] = d.get(k, 0) + 1
    return d


def w5_events(events: int, keys: int) -> tuple[list[str], list[int]]:
    """W5's events, as trident_w5.py writes them (numpy's default_rng(42))."""
    import numpy as np

    rng = np.random.default_rng(42)
    ids = rng.integers(0, keys, size=events)
    values = rng.integers(1, 1001, size=events, dtype=np.int64)
    return [f"k{j}" for j in ids.tolist()], values.tolist()


def ref_w5(keys: list[str], values: list[int]) -> dict[str, tuple[int, int]]:
    counts: dict[str, int] = {}
    sums: dict[str, int] = {}
    for k, v in zip(keys, values, strict=True):
        counts[k] = counts.get(k, 0) + 1
        sums[k] = sums.get(k, 0) + v
    return {k: (n, sums[k]) for k, n in counts.items()}


# ---- plain Python -----------------------------------------------------------------------------

def dict_w1(sentences: list[str]) -> dict[str, int]:
    return ref_w1(sentences)


def dict_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    return ref_w2(sentences)


def counter_w1(sentences: list[str]) -> dict[str, int]:
    c: Counter[str] = Counter()
    for line in sentences:
        c.update(line.split())
    return dict(c)


def counter_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    c: Counter[tuple[int, str]] = Counter()
    for i, line in enumerate(sentences):
        ts = i * 10
        start = ts - ts % WINDOW_MS
        c.update((start, w) for w in line.split())
    return dict(c)


def dict_w5(keys: list[str], values: list[int]) -> dict[str, tuple[int, int]]:
    return ref_w5(keys, values)


# ---- PySpark ----------------------------------------------------------------------------------

_SPARK: Any = None


def spark() -> Any:
    global _SPARK
    if _SPARK is None:
        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers with this pyarrow
        _SPARK = (SparkSession.builder.master("local[2]").appName("peers")
                  .config("spark.sql.shuffle.partitions", "2")
                  .config("spark.ui.enabled", "false")
                  .config("spark.sql.adaptive.enabled", "false")
                  .config("spark.driver.memory", "4g").getOrCreate())
        _SPARK.sparkContext.setLogLevel("ERROR")
    return _SPARK


def _py_split(batches: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    for b in batches:
        words = pc.list_flatten(pc.split_pattern(b.column("line"), " "))
        cols = {"word": words}
        if "ts" in b.schema.names:
            lens = pc.list_value_length(pc.split_pattern(b.column("line"), " "))
            cols["ts"] = pa.array(
                [t for t, n in zip(b.column("ts").to_pylist(), lens.to_pylist(), strict=True)
                 for _ in range(n)], pa.int64())
        yield pa.RecordBatch.from_pydict(cols)


class SparkInput:
    """The sentences as a DataFrame in memory, and as `files` text files for streaming."""

    def __init__(self, sentences: list[str], files: int, root: Path) -> None:
        from pyspark.sql import functions as F

        s = spark()
        rows = list(zip(sentences, timestamps(len(sentences)), strict=True))
        self.df = s.createDataFrame(rows, "line string, ts long").cache()
        self.df.count()
        self.dirs: dict[int, Path] = {}
        for n in sorted({1, files}):
            d = root / f"in-{n}"
            d.mkdir(parents=True)
            step = -(-len(rows) // n)
            for i in range(n):
                chunk = rows[i * step:(i + 1) * step]
                (d / f"part-{i:05d}.csv").write_text(
                    "".join(f"{ts},{line}\n" for line, ts in chunk))
            self.dirs[n] = d
        self.F = F
        self.sentences = sentences
        self.parquet = str(root / "parquet")
        os.makedirs(self.parquet)
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"sentence": sentences, "ts": timestamps(len(sentences))}),
                       f"{self.parquet}/part-00000.parquet", row_group_size=25_000)
        self.seconds: float | None = None  # squall's own figure of its last run


def spark_batch(inp: SparkInput, workload: str, python_split: bool) -> dict:
    F = inp.F
    if python_split:
        words = inp.df.mapInArrow(_py_split, "word string, ts long")
    else:
        words = inp.df.select(F.explode(F.split("line", " ")).alias("word"), "ts")
    if workload == "W1":
        return {r[0]: r[1] for r in words.groupBy("word").count().collect()}
    w = words.groupBy((F.col("ts") - F.col("ts") % WINDOW_MS).alias("start"), "word").count()
    return {(r[0], r[1]): r[2] for r in w.collect()}


_QUERY = [0]


def spark_streaming(inp: SparkInput, workload: str, files: int, python_split: bool) -> dict:
    """A streaming query over the files, `maxFilesPerTrigger=1`, run until it has read them."""
    F = inp.F
    s = spark()
    lines = (s.readStream.schema("ts long, line string").option("maxFilesPerTrigger", 1)
             .csv(str(inp.dirs[files])))
    if python_split:
        words = lines.mapInArrow(_py_split, "word string, ts long")
    else:
        words = lines.select(F.explode(F.split("line", " ")).alias("word"), "ts")
    if workload == "W1":
        agg = words.groupBy("word").count()
    else:
        agg = words.groupBy((F.col("ts") - F.col("ts") % WINDOW_MS).alias("start"),
                            "word").count()
    _QUERY[0] += 1
    name = f"peers_{_QUERY[0]}"
    with tempfile.TemporaryDirectory() as cp:
        q = (agg.writeStream.outputMode("complete").format("memory").queryName(name)
             .option("checkpointLocation", cp).trigger(availableNow=True).start())
        q.awaitTermination()
        rows = s.sql(f"SELECT * FROM {name}").collect()
    if workload == "W1":
        return {r[0]: r[1] for r in rows}
    return {(r[0], r[1]): r[2] for r in rows}


# ---- squall, on the same session -------------------------------------------------------------

def squall_trident(inp: SparkInput, workload: str) -> dict:
    """Trident with the vectorised split (benchmarks/trident_w1.py's and trident_w2.py's B): the
    whole input as one transaction from a parquet file, W1 into a durable transactional map
    state, W2 through Trident's tumbling window; the transaction's time, as those scripts."""
    import shutil

    from trident_w1 import SplitColumns
    from trident_w1 import topology as w1_topology
    from trident_w2 import topology as w2_topology

    from squall.runtime.spark.trident import TridentSparkRunner
    from squall.trident.state import DurableMapState, StateType

    ckpt = tempfile.mkdtemp(prefix="peers-trident-")
    try:
        if workload == "W1":
            runner = TridentSparkRunner(w1_topology([], 0, SplitColumns(), inp.parquet), {},
                                        checkpoint_location=ckpt, session=spark())
            result = runner.run()
            state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state("counts", ckpt)
            got = {k[0]: v for k, v in state.items()}
            state.close()
        else:
            runner = TridentSparkRunner(w2_topology(inp.parquet, SplitColumns()), {},
                                        capture=True, checkpoint_location=ckpt, session=spark())
            result = runner.run()
            got = {(s, w): n for w, s, _, n in result.extra["outputs"]["windows"]}
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    inp.seconds = sum(result.extra["batch_seconds"])
    return got


def squall_storm(inp: SparkInput, workload: str) -> dict:
    """The Storm API on Spark, acking off, the whole input as one micro-batch: W1's topology of
    benchmarks/w1_spark.py, W2's windowed bolt of benchmarks/w2_windowed_bolts.py; the
    micro-batch's time, as those scripts."""
    if workload == "W1":
        from w1_spark import squall_run

        inp.seconds, _total, got = squall_run(spark(), inp.sentences, False)
        return got
    from w2_windowed_bolts import run_spark

    inp.seconds, got = run_spark(spark(), inp.sentences, len(inp.sentences) + 1)
    return got


# ---- Bytewax ----------------------------------------------------------------------------------

def _bytewax_run(build: Callable[[Any], Any]) -> list:
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, cluster_main

    out: list = []
    flow = Dataflow("peers")
    import bytewax.operators as op

    op.output("out", build(flow), TestingSink(out))
    cluster_main(flow, [], 0, worker_count_per_proc=2)
    return out


def bytewax_w1(sentences: list[str]) -> dict[str, int]:
    import bytewax.operators as op
    from bytewax.testing import TestingSource

    def build(flow: Any) -> Any:
        lines = op.input("in", flow, TestingSource(sentences, batch_size=BYTEWAX_BATCH))
        words = op.flat_map("split", lines, str.split)
        return op.count_final("count", words, lambda w: w)

    return dict(_bytewax_run(build))


def bytewax_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.testing import TestingSource

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    items = list(zip(timestamps(len(sentences)), sentences, strict=True))

    def build(flow: Any) -> Any:
        lines = op.input("in", flow, TestingSource(items, batch_size=BYTEWAX_BATCH))
        words = op.flat_map("split", lines, lambda item: [(item[0], w) for w in item[1].split()])
        clock = win.EventClock(lambda x: epoch + timedelta(milliseconds=x[0]),
                               wait_for_system_duration=timedelta(seconds=60))
        windower = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=epoch)
        counted = win.count_window("count", words, clock, windower, key=lambda x: x[1])
        # A tumbling window's id is its index from `align_to`.
        return op.map("row", counted.down, lambda kv: ((kv[1][0] * WINDOW_MS, kv[0]), kv[1][1]))

    return dict(_bytewax_run(build))


def bytewax_w5(keys: list[str], values: list[int]) -> dict[str, tuple[int, int]]:
    import bytewax.operators as op
    from bytewax.testing import TestingSource

    def add(state: tuple[int, int] | None, v: int) -> tuple[tuple[int, int], tuple[int, int]]:
        n, s = state or (0, 0)
        new = (n + 1, s + v)
        return new, new

    def build(flow: Any) -> Any:
        events = op.input("in", flow, TestingSource(list(zip(keys, values, strict=True)),
                                                    batch_size=BYTEWAX_BATCH))
        running = op.stateful_map("count_sum", events, add)
        return running

    final: dict[str, tuple[int, int]] = {}
    for k, state in _bytewax_run(build):
        final[k] = state  # the running values arrive in order per key: the last is the total
    return final


# ---- Pathway ----------------------------------------------------------------------------------

def _pathway() -> Any:
    os.environ.setdefault("PATHWAY_THREADS", "2")
    import pathway as pw

    pw.internals.parse_graph.G.clear()
    return pw


def pathway_w1(sentences: list[str]) -> dict[str, int]:
    import pandas as pd

    pw = _pathway()
    t = pw.debug.table_from_pandas(pd.DataFrame({"line": sentences}))
    words = t.select(word=pw.apply_with_type(str.split, list[str], pw.this.line)).flatten(
        pw.this.word)
    counts = words.groupby(pw.this.word).reduce(pw.this.word, n=pw.reducers.count())
    df = pw.debug.table_to_pandas(counts)
    return dict(zip(df["word"], df["n"].astype(int), strict=True))


def pathway_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    import pandas as pd

    pw = _pathway()
    t = pw.debug.table_from_pandas(
        pd.DataFrame({"line": sentences, "ts": timestamps(len(sentences))}))
    words = t.select(pw.this.ts, word=pw.apply_with_type(str.split, list[str], pw.this.line)
                     ).flatten(pw.this.word)
    windows = words.windowby(pw.this.ts, window=pw.temporal.tumbling(duration=WINDOW_MS),
                             instance=pw.this.word).reduce(
        start=pw.this._pw_window_start, word=pw.this._pw_instance, n=pw.reducers.count())
    df = pw.debug.table_to_pandas(windows)
    return {(int(s), w): int(n) for s, w, n in zip(df["start"], df["word"], df["n"], strict=True)}


def pathway_w5(keys: list[str], values: list[int]) -> dict[str, tuple[int, int]]:
    import pandas as pd

    pw = _pathway()
    t = pw.debug.table_from_pandas(pd.DataFrame({"key": keys, "value": values}))
    agg = t.groupby(pw.this.key).reduce(pw.this.key, n=pw.reducers.count(),
                                        s=pw.reducers.sum(pw.this.value))
    df = pw.debug.table_to_pandas(agg)
    return {k: (int(n), int(s)) for k, n, s in zip(df["key"], df["n"], df["s"], strict=True)}


# ---- streamz and reactivex --------------------------------------------------------------------

def streamz_w1(sentences: list[str]) -> dict[str, int]:
    from streamz import Stream

    def add(acc: dict, w: str) -> dict:
        acc[w] = acc.get(w, 0) + 1
        return acc

    source = Stream()
    out = source.map(str.split).flatten().accumulate(add, start={})
    final: list = [{}]
    out.sink(lambda acc: final.__setitem__(0, acc))
    for line in sentences:
        source.emit(line)
    return dict(final[0])


def streamz_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    from streamz import Stream

    def add(acc: dict, k: tuple[int, str]) -> dict:
        acc[k] = acc.get(k, 0) + 1
        return acc

    def keys(item: tuple[int, str]) -> list[tuple[int, str]]:
        start = item[0] - item[0] % WINDOW_MS
        return [(start, w) for w in item[1].split()]

    source = Stream()
    out = source.map(keys).flatten().accumulate(add, start={})
    final: list = [{}]
    out.sink(lambda acc: final.__setitem__(0, acc))
    for item in zip(timestamps(len(sentences)), sentences, strict=True):
        source.emit(item)
    return dict(final[0])


def _rx_count(items: Any, key: Callable[[Any], Any]) -> dict:
    """Count `items` per `key`: a group per key, each group's count when the source completes."""
    from reactivex import operators as ops

    out: dict = {}
    items.pipe(
        ops.group_by(key),
        ops.flat_map(lambda g: g.pipe(ops.count(), ops.map(lambda n, g=g: (g.key, n)))),
    ).subscribe(lambda kv: out.__setitem__(kv[0], kv[1]))
    return out


def reactivex_w1(sentences: list[str]) -> dict[str, int]:
    import reactivex as rx
    from reactivex import operators as ops

    words = rx.from_iterable(sentences).pipe(ops.flat_map(lambda s: s.split()))
    return _rx_count(words, lambda w: w)


def reactivex_w2(sentences: list[str]) -> dict[tuple[int, str], int]:
    import reactivex as rx
    from reactivex import operators as ops

    items = zip(timestamps(len(sentences)), sentences, strict=True)
    words = rx.from_iterable(items).pipe(
        ops.flat_map(lambda it: [(it[0] - it[0] % WINDOW_MS, w) for w in it[1].split()]))
    return _rx_count(words, lambda k: k)


# ---- Flink ------------------------------------------------------------------------------------

class FlinkInput:
    """The sentences as one CSV file of `ts,line` for Flink's filesystem connector."""

    def __init__(self, sentences: list[str], root: Path) -> None:
        self.path = root / "flink.csv"
        self.path.write_text("".join(
            f"{ts},{line}\n" for ts, line in zip(timestamps(len(sentences)), sentences,
                                                  strict=True)))
        self.sentences = sentences


_FLINK_TABLE: Any = None


def flink_table_env() -> Any:
    global _FLINK_TABLE
    if _FLINK_TABLE is None:
        from pyflink.table import EnvironmentSettings, TableEnvironment

        _FLINK_TABLE = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
        _FLINK_TABLE.get_config().set("parallelism.default", "2")
        _FLINK_TABLE.get_config().set("table.local-time-zone", "UTC")
    return _FLINK_TABLE


def flink_sql(inp: FlinkInput, workload: str) -> dict:
    t_env = flink_table_env()
    t_env.execute_sql("DROP TEMPORARY TABLE IF EXISTS src")
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE src (ts BIGINT, line STRING,
            rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
        WITH ('connector' = 'filesystem', 'path' = '{inp.path}', 'format' = 'csv')""")
    if workload == "W1":
        sql = ("SELECT word, COUNT(*) FROM src CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t(word) "
               "GROUP BY word")
    else:
        t_env.execute_sql("DROP TEMPORARY VIEW IF EXISTS words")
        t_env.execute_sql("CREATE TEMPORARY VIEW words AS SELECT rt, word FROM src "
                          "CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t(word)")
        sql = ("SELECT window_start, word, COUNT(*) "
               "FROM TABLE(TUMBLE(TABLE words, DESCRIPTOR(rt), INTERVAL '10' SECOND)) "
               "GROUP BY window_start, window_end, word")
    # to_pandas moves the result as Arrow batches; collect() would fetch it a row at a time.
    df = t_env.sql_query(sql).to_pandas()
    if workload == "W1":
        return {w: int(n) for w, n in zip(df.iloc[:, 0], df.iloc[:, 1], strict=True)}
    starts = df.iloc[:, 0].astype("datetime64[ms]").astype("int64")  # the session's zone: UTC
    return {(int(ms), w): int(n)
            for ms, w, n in zip(starts, df.iloc[:, 1], df.iloc[:, 2], strict=True)}


_FLINK_STREAM: Any = None


def flink_ds(inp: FlinkInput, workload: str) -> dict:
    global _FLINK_STREAM
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
    from pyflink.table import StreamTableEnvironment

    if _FLINK_STREAM is None:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        env.set_parallelism(2)
        env.set_python_executable(sys.executable)  # the workers' Python: this environment's
        _FLINK_STREAM = (env, StreamTableEnvironment.create(env))
    env, tables = _FLINK_STREAM
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                 str(inp.path)).build()
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "sentences")
    pair = Types.TUPLE([Types.STRING(), Types.LONG()])
    if workload == "W1":
        pairs = lines.flat_map(lambda row: [(w, 1) for w in row.split(",", 1)[1].split()],
                               output_type=pair)
    else:
        def keyed(row: str) -> list[tuple[str, int]]:
            ts, line = row.split(",", 1)
            start = int(ts) - int(ts) % WINDOW_MS
            return [(f"{start} {w}", 1) for w in line.split()]

        pairs = lines.flat_map(keyed, output_type=pair)
    counted = (pairs.key_by(lambda p: p[0], key_type=Types.STRING())
               .reduce(lambda a, b: (a[0], a[1] + b[1]))
               .map(lambda p: p, output_type=pair))  # typed, for the Arrow transfer
    df = tables.from_data_stream(counted).to_pandas()
    if workload == "W1":
        return {w: int(n) for w, n in zip(df.iloc[:, 0], df.iloc[:, 1], strict=True)}
    out = {}
    for k, n in zip(df.iloc[:, 0], df.iloc[:, 1], strict=True):
        start, word = k.split(" ")
        out[(int(start), word)] = int(n)
    return out


# ---- one process: its systems, timed against the plain loop --------------------------------

def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        if isinstance(result, OwnTime):
            seconds, result = result.seconds, result.result
        times.append(seconds)
    return times, result


def worker(args: argparse.Namespace) -> None:
    """Measure `args.systems` in this process; one JSON line per figure."""
    systems = args.systems.split(",")
    workloads = args.workloads.split(",")
    all_sentences = w1_sentences(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs: dict[str, Any] = {}
        for workload in (w for w in workloads if w in ("W1", "W2")):
            for system in systems:
                sentences = all_sentences[:len(all_sentences) // SLOW.get(system, 1)]
                ref = ref_w1(sentences) if workload == "W1" else ref_w2(sentences)
                base, _ = timed(lambda s=sentences, w=workload: (
                    ref_w1(s) if w == "W1" else ref_w2(s)), args.runs)
                fn = _w12(system, workload, sentences, root, inputs)
                emit(system, workload, len(sentences) * 10, "words", fn, ref, base, args.runs)
        if "W5" in workloads:
            for k in (int(x) for x in args.keys.split(",")):
                keys, values = w5_events(args.events, k)
                ref5 = ref_w5(keys, values)
                base, _ = timed(lambda ks=keys, vs=values: ref_w5(ks, vs), args.runs)
                for system in (s for s in systems if s in W5_SYSTEMS):
                    fn5 = {"dict": dict_w5, "bytewax": bytewax_w5, "pathway": pathway_w5}[system]
                    emit(system, f"W5 K={k}", args.events, "events",
                         lambda f=fn5, ks=keys, vs=values: f(ks, vs), ref5, base, args.runs)


def _w12(system: str, workload: str, sentences: list[str], root: Path,
         inputs: dict[str, Any]) -> Callable[[], dict]:
    if system.startswith(("spark", "ss-", "squall")):
        key = f"spark-{len(sentences)}"
        if key not in inputs:
            inputs[key] = SparkInput(sentences, 20, root / key)
        inp = inputs[key]
        return {
            "spark-jvm": lambda: spark_batch(inp, workload, False),
            "spark-arrow": lambda: spark_batch(inp, workload, True),
            "ss-one": lambda: spark_streaming(inp, workload, 1, False),
            "ss-20": lambda: spark_streaming(inp, workload, 20, True),
            "squall-trident": _own_time(inp, lambda: squall_trident(inp, workload)),
            "squall-storm": _own_time(inp, lambda: squall_storm(inp, workload)),
        }[system]
    if system.startswith("flink"):
        key = f"flink-{len(sentences)}"
        if key not in inputs:
            (root / key).mkdir()
            inputs[key] = FlinkInput(sentences, root / key)
        finp = inputs[key]
        if system == "flink-sql":
            return lambda: flink_sql(finp, workload)
        return lambda: flink_ds(finp, workload)
    fn = globals()[f"{system.replace('-', '_')}_{workload.lower()}"]
    return lambda: fn(sentences)


class OwnTime:
    """A run that reports its own time (squall's: its batches', start-up excluded)."""

    def __init__(self, seconds: float, result: dict) -> None:
        self.seconds, self.result = seconds, result


def _own_time(inp: SparkInput, run: Callable[[], dict]) -> Callable[[], OwnTime]:
    def timed_run() -> OwnTime:
        result = run()
        assert inp.seconds is not None
        return OwnTime(inp.seconds, result)

    return timed_run


def emit(system: str, workload: str, items: int, unit: str, fn: Callable[[], Any], ref: Any,
         base: list[float], runs: int) -> None:
    try:
        times, result = timed(fn, runs)
    except Exception as exc:  # a peer that fails is reported, not hidden
        error = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps({"system": system, "workload": workload, "error": error}), flush=True)
        return
    wrong = "" if result == ref else f"{len(result)} keys against {len(ref)}"
    if not wrong:
        ok = {k for k in ref if result.get(k) != ref[k]}
        wrong = f"{len(ok)} keys differ" if ok else ""
    median, base_median = statistics.median(times), statistics.median(base)
    print(json.dumps({
        "system": system, "workload": workload, "items": items, "unit": unit,
        "per_s": items / median, "ratio": base_median / median, "times": times,
        "baseline_per_s": items / base_median, "wrong": wrong}), flush=True)


# ---- the sitting --------------------------------------------------------------------------------

def interpreter(group: str) -> str:
    """The Python of a group's environment, made on first use."""
    if group == "main":
        return sys.executable
    venv = DATA / f"venv-peers-{group}"
    python = venv / "bin" / "python"
    done = venv / ".installed"
    if not done.exists() or done.read_text() != REQUIREMENTS[group].read_text():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r",
                        str(REQUIREMENTS[group])], check=True)
        done.write_text(REQUIREMENTS[group].read_text())
    return str(python)


NAMES = {
    "dict": "plain Python, per-word dict loop",
    "counter": "plain Python, `Counter.update(line.split())`",
    "spark-jvm": "PySpark batch DataFrame (JVM split and count)",
    "spark-arrow": "PySpark batch, Python split in `mapInArrow`, JVM count",
    "ss-one": "PySpark Structured Streaming, whole input in one micro-batch",
    "ss-20": "PySpark Structured Streaming, 20 micro-batches, Python split",
    "bytewax": "Bytewax (2 workers)",
    "pathway": "Pathway (2 threads)",
    "streamz": "streamz",
    "reactivex": "reactivex",
    "flink-sql": "Apache Flink SQL via PyFlink (JVM operators)",
    "flink-ds": "Apache Flink PyFlink DataStream, Python functions",
    "squall-trident": "**squall Trident on Spark, vectorised split**",
    "squall-storm": "**squall Storm API on Spark, acking off**",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default="W1,W2,W5")
    p.add_argument("--systems", default=",".join(s for g in GROUPS.values() for s in g))
    p.add_argument("--events", type=int, default=4_000_000)
    p.add_argument("--keys", default="10000,4000000")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    wanted = args.systems.split(",")
    unknown = [s for s in wanted if s not in NAMES]
    if unknown:
        p.error(f"unknown systems {unknown}; known: {', '.join(NAMES)}")
    rows: list[dict] = []
    for group, members in GROUPS.items():
        systems = [s for s in members if s in wanted]
        if not systems:
            continue
        python = interpreter(group)
        cmd = [python, __file__, "--worker", "--systems", ",".join(systems),
               "--sentences", str(args.sentences), "--runs", str(args.runs),
               "--workloads", args.workloads, "--events", str(args.events), "--keys", args.keys]
        load = os.getloadavg()[0]
        print(f"# {group}: {', '.join(systems)} (load {load:.2f})", flush=True)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:  # as each figure comes
                if line.startswith("{"):
                    row = json.loads(line)
                    rows.append(row)
                    print("  " + _describe(row), flush=True)
        if proc.returncode:
            print(f"# {group} exited {proc.returncode}", flush=True)
    print()
    print("| system | workload | per second | ratio to the plain loop in its process | runs (s) |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {NAMES[r['system']]} | {r['workload']} | failed: {r['error']} | | |")
            continue
        figure = "WRONG: " + r["wrong"] if r["wrong"] else f"{r['per_s'] / 1e6:.3f} M {r['unit']}"
        scale = "" if r["items"] in (args.sentences * 10, args.events) else \
            f" ({r['items']:,} {r['unit']})"
        print(f"| {NAMES[r['system']]} | {r['workload']}{scale} | {figure} | "
              f"{r['ratio'] * 100:.0f} % | {', '.join(f'{t:.2f}' for t in r['times'])} |")


def _describe(row: dict) -> str:
    if "error" in row:
        return f"{row['system']} {row['workload']}: failed: {row['error']}"
    state = f"WRONG ({row['wrong']})" if row["wrong"] else "checked"
    return (f"{row['system']} {row['workload']}: {row['per_s'] / 1e6:.3f} M {row['unit']}/s, "
            f"{row['ratio'] * 100:.0f} % of the plain loop ({row['baseline_per_s'] / 1e6:.2f} M), "
            f"{state}")


if __name__ == "__main__":
    main()
