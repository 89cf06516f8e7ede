"""NEXMark (docs/nexmark.md): events per second per query, squall on Spark (`local[2]`) and on
the local runner, beside the same queries in PySpark Structured Streaming SQL (JVM operators)
over the same files and micro-batch sizes; every output checked against the reference.

    .venv/bin/python benchmarks/nexmark.py [--events 200000] [--batch 50000] [--partitions 2]
        [--queries q0,q1,...] [--runners spark,local,sql] [--source files|kafka] [--data DIR]
        [--storm-files parquet|json] [--trident-sink driver|tasks]

**The input.** The generator with Beam's defaults (events in order, nothing late), written once
per (`--events`, `--batch`, `--partitions`) under `--data` (default `benchmarks/.data/nexmark`,
reused when present) as rounds of `--batch` events in stream order, each round split into
`--partitions` strided files (`events-r<round>-p<part>`), in JSON lines (Beam's event JSON) and
Parquet (flat rows). A micro-batch is one round on every engine: squall's Trident queries read the
Parquet files with `FileBatchSpout(files_per_batch=partitions)`, its Storm-API and windowed
queries the same Parquet files (`NexmarkParquetSource`, one source partition per file, read on
the executors; `--storm-files json`: the JSON-lines files with `NexmarkJsonLinesSource`) with
`squall.spark.batch.max.tuples = --batch`; Structured Streaming reads the Parquet files with
`maxFilesPerTrigger = partitions`, in the rounds' order (their modification times). The files
are written one event at a time from the generator, never as a list of the stream. With
`--source kafka` the stream is produced once to a topic of `--partitions` partitions on a local
Tansu broker (the test suite's) and squall reads it with `KafkaSource` / `KafkaTransactionalSpout`
(`max_batch = --batch`); Structured Streaming is not run over Kafka (this environment has no
Kafka connector for Spark's JVM).

**What is measured.** One query per run, each run in a fresh process (a fresh JVM): the query's
topology alone (`query_topology`'s builders with one query, not the one topology of many
branches), so a query's figure is its own work. events/s = the events of the stream / the run's
time, from the run's start to its end (squall: `run()`; Structured Streaming: `start()` to the end
of an `availableNow` query), the Spark session's start excluded. Outputs go to files: squall's
Storm-API and windowed queries through a `JsonLinesSink` bolt, its Trident queries through a
`partition_persist` into a state that writes each batch's rows as Parquet files (`BatchFiles`:
JSON lines where a field has no one Arrow type; opened on the driver, so on Spark the
per-event Trident queries q0-q2, q13 and q14 run there; `--trident-sink tasks`: made per
partition, so they run in Spark's tasks, each writing its partition's files), Structured
Streaming's through `foreachBatch`
writing Parquet under the batch id. After the run the files are read back
in batch order, put in the reference's form (`squall.nexmark.queries.results.canonical`) and
compared with `squall.nexmark.reference` through an order-free fingerprint (the row count and the
sum of a hash per row), the stateless queries' reference computed chunk by chunk; a run whose
output differs is reported WRONG. Peak RSS (`VmHWM` from /proc, taken when the run ends): the
driver's Python process, the JVM, the largest Python worker.

**Structured Streaming's queries** are the ones its SQL expresses exactly (`SQL_QUERIES`); the
others are reported with the reason (`NOT_EXPRESSED`). Its unwindowed aggregates and sessions
run in update mode (the last row per key is the result), its sessions in complete mode (they
have no update mode; the last batch's table is the result), its joins in append mode.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from squall.nexmark import GeneratorConfig, events, kafka_records
from squall.nexmark.files import SCHEMA
from squall.nexmark.model import ROW_FIELDS, to_json, to_row
from squall.nexmark.queries import QUERIES, STORM_QUERIES, EventTimeSettings
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import QUERIES as REFERENCE
from squall.nexmark.reference import WINDOWED, EventTime
from squall.trident import StateUpdater

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trident_w5 import memory, peak_kb, run_marked  # W5's /proc readings, its child runner

DATA = Path(__file__).resolve().parent / ".data" / "nexmark"
MASTER = "local[2]"
RUNNERS = ("spark", "local", "sql")
TIME = EventTimeSettings()  # 1 s of watermark delay, 20 s of allowed lateness
STATELESS = ("q0", "q1", "q2", "q13", "q14")
ROWS = (*STATELESS, "q3", "q20")  # outputs that are rows, compared row by row
CHUNK = 100_000  # events per chunk of a stateless query's reference

NOT_EXPRESSED = {
    "q4": "the winning bids (a top-1 per auction under a join condition) feeding a second "
          "aggregation: no ranking and no chained non-windowed aggregation in streaming",
    "q5": "the top auctions per sliding window: a ranking of a windowed count, not supported "
          "on streams",
    "q6": "the last 10 winning bids per seller: a ranking after a top-1, not supported on streams",
    "q7": "the bids at their window's maximum: a windowed aggregate joined back to the bids, "
          "whose last windows append mode emits only once a later event moves the watermark",
    "q9": "the winning bid per auction: a top-1 per group (no ranking on streams)",
    "q10": "the shard is the CRC-32 of the event's Beam JSON, which Spark's SQL does not "
           "produce byte for byte without a Python function",
    "q12": "processing-time windows: Structured Streaming has none",
    "q15": "distinct counts (COUNT(DISTINCT ...)) are not supported in streaming aggregations",
    "q16": "distinct counts (COUNT(DISTINCT ...)) are not supported in streaming aggregations",
}
SQL_QUERIES = tuple(q for q in QUERIES if q not in NOT_EXPRESSED)


# ---- the input ------------------------------------------------------------------------------

def config_of(n: int) -> GeneratorConfig:
    return GeneratorConfig(max_events=n)


def data_dir(base: Path, n: int, batch: int, partitions: int) -> Path:
    """The stream's files (module doc), written once: `<root>/json` and `<root>/parquet`."""
    root = base / f"e{n}-b{batch}-p{partitions}"
    if (root / "_done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    (root / "json").mkdir(parents=True)
    (root / "parquet").mkdir()
    config = config_of(n)
    stamp = time.time() - math.ceil(n / batch) - 10
    for r in range(math.ceil(n / batch)):
        for i in range(partitions):
            name = f"events-r{r:06d}-p{i:03d}"
            part = list(events(config, r * batch + i, (r + 1) * batch, partitions))
            with open(root / "json" / f"{name}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(to_json(e) + "\n" for e in part)
            rows = [to_row(e) for e in part]
            table = pa.Table.from_arrays(
                [pa.array([row[k] for row in rows], type=field.type)
                 for k, field in enumerate(SCHEMA)], schema=SCHEMA)
            pq.write_table(table, str(root / "parquet" / f"{name}.parquet"))
            for kind in ("json/%s.jsonl", "parquet/%s.parquet"):  # the rounds' order for Spark
                os.utime(root / (kind % name), (stamp + r, stamp + r))
    (root / "_done").write_text("")
    return root


# ---- checking -------------------------------------------------------------------------------

_MASK = (1 << 64) - 1


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def fingerprint(result: Any) -> list[int]:
    """An order-free fingerprint of a canonical result (a list of rows, or a dict): the number
    of rows and the sum of a 64-bit hash of each (decimals compared as numbers)."""
    items = result.items() if isinstance(result, dict) else result
    n = h = 0
    for item in items:
        digest = hashlib.blake2b(repr(_plain(item)).encode(), digest_size=8).digest()
        n, h = n + 1, (h + int.from_bytes(digest, "big")) & _MASK
    return [n, h]


def _add(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], (a[1] + b[1]) & _MASK]


def _chunks(rows: Iterable[Any], size: int = CHUNK) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def reference_fingerprint(query: str, n: int, partitions: int) -> list[int]:
    """The reference's result for the stream, fingerprinted; a stateless query chunk by chunk."""
    stream = events(config_of(n))
    if query in STATELESS:
        total = [0, 0]
        for chunk in _chunks(stream):
            total = _add(total, fingerprint(REFERENCE[query](chunk)))
        return total
    if query in WINDOWED:
        return fingerprint(REFERENCE[query](stream, EventTime(
            partitions=partitions, watermark_delay_ms=TIME.watermark_delay_ms,
            allowed_lateness_ms=TIME.allowed_lateness_ms)))
    return fingerprint(REFERENCE[query](stream))


def output_fingerprint(query: str, rows: Iterable[Sequence[Any]]) -> list[int]:
    """The fingerprint of a run's output rows (in the order they were emitted)."""
    if query in ROWS:
        total = [0, 0]
        for chunk in _chunks(rows):
            total = _add(total, fingerprint(canonical(query, chunk)))
        return total
    return fingerprint(canonical(query, rows))


def read_output(directory: Path) -> Iterator[list[Any]]:
    """The rows of the output files under `directory`, in name (batch) order: JSON lines (an
    object or a list of values per row) and Parquet."""
    for path in sorted([*directory.glob("*.jsonl"), *directory.glob("*.parquet")]):
        if path.suffix == ".parquet":
            table = pq.read_table(str(path))
            yield from (list(r) for r in zip(*(c.to_pylist() for c in table.columns),
                                             strict=True))
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                yield list(row.values()) if isinstance(row, dict) else row


# ---- squall ---------------------------------------------------------------------------------

class BatchFiles:
    """A Trident state writing the rows of a batch it is given (a partition's at a time) as
    files under `directory`, `t<txid>-<id>-<n>`: Parquet, a column per field typed by pyarrow
    from the values, as Structured Streaming's `foreachBatch` writes its output; JSON lines of
    the rows' values where a field has no one Arrow type (q19's lists of bids). A replayed
    batch first removes the files its earlier attempt wrote: those of the same id, the state's
    name (made once, on the driver) or the partition's index when the state is made per
    partition (in the Spark tasks)."""

    def __init__(self, directory: str, ident: str) -> None:
        self.directory, self.id = directory, ident
        self.txid, self.written = 0, 0

    def begin_commit(self, txid: int) -> None:
        self.txid, self.written = txid, 0

    def commit(self, txid: int) -> None:
        pass  # each write is flushed when it returns

    def close(self) -> None:
        pass

    def write(self, tuples: Sequence[Any]) -> None:
        if not tuples:
            return
        os.makedirs(self.directory, exist_ok=True)
        stem = os.path.join(self.directory, f"t{self.txid:012d}-{self.id}-")
        if self.written == 0:  # an earlier attempt's files of this batch
            for old in Path(self.directory).glob(f"{Path(stem).name}*"):
                old.unlink()
        stem += f"{self.written:04d}"
        self.written += 1
        fields = list(tuples[0].fields)
        try:
            table = pa.Table.from_arrays([pa.array(c) for c in zip(*tuples, strict=True)],
                                         names=fields)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            with open(stem + ".jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(list(t), default=str) + "\n" for t in tuples)
            return
        pq.write_table(table, stem + ".parquet")


class BatchFilesFactory:
    """Makes a `BatchFiles` state writing under `directory`, opened once (on the Spark runner:
    on the driver, where the query's operations then run)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def make_state(self, name: str, location: str | None = None) -> BatchFiles:
        # Named by the state's name, the same in every run of the topology: a batch replayed
        # after a restart finds and replaces the files its killed attempt wrote.
        return BatchFiles(self.directory, "s" + re.sub(r"[^A-Za-z0-9_.]", "_", name))


class TaskBatchFilesFactory(BatchFilesFactory):
    """Makes a `BatchFiles` state per partition (a `TaskStateFactory`: on the Spark runner the
    query's operations and the writes run in the tasks, `--trident-sink tasks`)."""

    def make_task_state(self, name: str, location: str | None, partition_index: int,
                        num_partitions: int) -> BatchFiles:
        """A partition's state, made in the task that writes it (on Spark, in the Python
        workers): its files named by the partition's index, so that a task or batch run again
        replaces them."""
        return BatchFiles(self.directory, f"p{partition_index:05d}")


def squall_topology(query: str, source: str, root: Path | None, kafka: dict[str, Any],
                    batch: int, partitions: int, out: Path, storm_files: str = "parquet",
                    trident_sink: str = "driver") -> Any:
    """One query's topology over the files or the topic, its output written under `out`;
    `storm_files`: the files a Storm-API or windowed query reads, `parquet` or `json`;
    `trident_sink`: where a Trident query's output state opens on Spark, `driver` or `tasks`."""
    from squall import Fields
    from squall.connectors import KafkaSource
    from squall.connectors.sinks import JsonLinesSink
    from squall.nexmark.queries import storm_topology, trident_topology
    from squall.nexmark.sources import NexmarkJsonLinesSource, NexmarkParquetSource
    from squall.transactional import KafkaTransactionalSpout
    from squall.trident import FileBatchSpout

    if query in STORM_QUERIES:
        storm_source: Any = (
            (NexmarkJsonLinesSource(str(root / "json")) if storm_files == "json"
             else NexmarkParquetSource(str(root / "parquet")))
            if source == "files" and root is not None
            else KafkaSource([kafka["topic"]], ROW_FIELDS, bootstrap_servers=kafka["bootstrap"],
                             value_deserialiser="json", bounded=True))
        return storm_topology(storm_source, [query], time=TIME,
                              sink=lambda q: JsonLinesSink(str(out)))

    spout: Any = (
        FileBatchSpout(str(root / "parquet"), list(ROW_FIELDS), files_per_batch=partitions)
        if source == "files" and root is not None
        else KafkaTransactionalSpout([kafka["topic"]], Fields(*ROW_FIELDS),
                                     bootstrap_servers=kafka["bootstrap"],
                                     value_deserialiser="json", max_batch=batch,
                                     stop_when_empty=True, timeout=5))
    return trident_topology(spout, [query], sink=_write_rows(out, trident_sink == "tasks"))


class WriteRows(StateUpdater):
    """Writes each partition's rows of a batch to its `BatchFiles` state."""

    def update_state(self, state: Any, tuples: Sequence[Any], collector: Any) -> None:
        state.write(tuples)


def _write_rows(out: Path, in_tasks: bool) -> Callable[[str, Any], None]:
    factory = TaskBatchFilesFactory if in_tasks else BatchFilesFactory

    def sink(query: str, stream: Any) -> None:
        stream.partition_persist(factory(str(out)), list(stream.fields), WriteRows())
    return sink


def run_squall(runner: str, query: str, source: str, root: Path | None, kafka: dict[str, Any],
               batch: int, partitions: int, out: Path, work: str,
               storm_files: str = "parquet", trident_sink: str = "driver") -> float:
    """Runs one query on squall's `runner`; the run's seconds."""
    from squall.runners import make_runner

    topology = squall_topology(query, source, root, kafka, batch, partitions, out, storm_files,
                               trident_sink)
    conf = {"squall.spark.batch.max.tuples": batch} if query in STORM_QUERIES else {}
    chosen = make_runner(topology, conf, runner=runner,
                         checkpoint_location=work if runner == "spark" else None)
    t0 = time.perf_counter()
    result = chosen.run(until_complete=True)
    seconds = time.perf_counter() - t0
    if result.errors:
        raise RuntimeError(f"{query} on {runner}: {result.errors[:3]}")
    return seconds


# ---- Structured Streaming SQL ---------------------------------------------------------------

BID, AUCTION, PERSON = "event_type = 2", "event_type = 1", "event_type = 0"
BID_COLUMNS = "auction, bidder, price, channel, url, date_time, extra"
SQL = {
    "q0": f"SELECT {', '.join(ROW_FIELDS)} FROM events",
    "q1": f"SELECT auction, bidder, price * 89 DIV 100 AS price, date_time, extra FROM events "
          f"WHERE {BID}",
    "q2": f"SELECT auction, price FROM events WHERE {BID} AND auction % 123 = 0",
    "q3": f"SELECT P.name, P.city, P.state, A.id FROM "
          f"(SELECT id, seller FROM events WHERE {AUCTION} AND category = 10) A JOIN "
          f"(SELECT id, name, city, state FROM events WHERE {PERSON} "
          f"AND state IN ('OR', 'ID', 'CA')) P ON A.seller = P.id",
    "q8": f"SELECT unix_millis(P.w.start), unix_millis(P.w.end), P.id, P.name, A.reserve FROM "
          f"(SELECT id, name, window(ts, '10 seconds') AS w FROM events WHERE {PERSON}) P JOIN "
          f"(SELECT seller, reserve, window(ts, '10 seconds') AS w FROM events "
          f"WHERE {AUCTION}) A ON P.id = A.seller AND P.w = A.w",
    # Spark merges sessions that touch, Beam keeps them apart: on whole milliseconds a gap of
    # 9,999 ms merging on touch is 10 s merging on overlap, each session 1 ms shorter.
    "q11": f"SELECT bidder, unix_millis(session_window.start), "
           f"unix_millis(session_window.end) + 1, count(*) FROM events WHERE {BID} "
           f"GROUP BY bidder, session_window(ts, '9999 milliseconds')",
    "q13": f"SELECT B.auction, B.bidder, B.price, B.date_time, S.value FROM "
           f"(SELECT * FROM events WHERE {BID}) B JOIN side S ON B.auction % 10000 = S.key",
    "q14": f"SELECT auction, bidder, price * 908 / 1000 AS price_in_euros, "
           f"CASE WHEN hour(ts) BETWEEN 8 AND 18 THEN 'dayTime' "
           f"WHEN hour(ts) <= 6 OR hour(ts) >= 20 THEN 'nightTime' ELSE 'otherTime' END, "
           f"date_time, extra, length(extra) - length(replace(extra, 'c', '')) FROM events "
           f"WHERE {BID} AND price * 908 > 1000000000 AND price * 908 < 50000000000",
    "q17": f"SELECT auction, date_format(ts, 'yyyy-MM-dd') AS day, count(*), "
           f"count_if(price < 10000), count_if(price >= 10000 AND price < 1000000), "
           f"count_if(price >= 1000000), min(price), max(price), sum(price) DIV count(*), "
           f"sum(price) FROM events WHERE {BID} GROUP BY auction, date_format(ts, 'yyyy-MM-dd')",
    "q18": f"SELECT bidder, auction, b.auction, b.bidder, b.price, b.channel, b.url, "
           f"b.date_time, b.extra FROM (SELECT bidder, auction, max(named_struct("
           f"'t', date_time, 'auction', auction, 'bidder', bidder, 'price', price, 'channel', "
           f"channel, 'url', url, 'date_time', date_time, 'extra', extra)) AS b FROM events "
           f"WHERE {BID} GROUP BY bidder, auction)",
    "q19": f"SELECT auction, slice(array_sort(collect_list(named_struct('p', -price, 't', "
           f"date_time, 'auction', auction, 'bidder', bidder, 'price', price, 'channel', "
           f"channel, 'url', url, 'date_time', date_time, 'extra', extra))), 1, 10) AS top "
           f"FROM events WHERE {BID} GROUP BY auction",
    "q20": f"SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra, "
           f"A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, A.expires, "
           f"A.seller, A.category, A.extra FROM (SELECT {BID_COLUMNS} FROM events "
           f"WHERE {BID}) B JOIN (SELECT * FROM events WHERE {AUCTION} AND category = 10) A "
           f"ON B.auction = A.id",
}
"""Each query Structured Streaming expresses, in its SQL over the view `events` (the flat rows
with `ts`, the event time as a timestamp, under a watermark of `TIME.watermark_delay_ms`) and the
static view `side` (q13's side input)."""
MODES = {"q11": "complete", "q17": "update", "q18": "update", "q19": "update"}
"""The aggregations' output modes (the others append): update where Spark allows it (the last row
per key is the result), complete for sessions, which have no update mode (the last batch's
table is the result)."""
assert set(SQL) == set(SQL_QUERIES), sorted(set(SQL) ^ set(SQL_QUERIES))


def run_sql(spark: Any, query: str, root: Path, partitions: int, out: Path, work: str) -> float:
    """Runs one query in Structured Streaming over the Parquet files; the run's seconds."""
    from pyspark.sql import functions as F

    schema = spark.read.parquet(str(root / "parquet")).schema
    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", partitions)
              .parquet(str(root / "parquet"))
              .withColumn("ts", F.timestamp_millis("date_time"))
              .withWatermark("ts", f"{TIME.watermark_delay_ms} milliseconds"))
    stream.createOrReplaceTempView("events")
    spark.sql("SELECT id AS key, CAST(id AS STRING) AS value FROM range(10000)") \
        .createOrReplaceTempView("side")

    def write(df: Any, batch_id: int) -> None:
        names = [f"c{i}" for i in range(len(df.columns))]  # a join's columns repeat names
        df.toDF(*names).write.mode("overwrite").parquet(str(out / f"batch={batch_id:09d}"))

    t0 = time.perf_counter()
    running = (spark.sql(SQL[query]).writeStream
               .outputMode(MODES.get(query, "append")).foreachBatch(write)
               .option("checkpointLocation", os.path.join(work, "checkpoint"))
               .trigger(availableNow=True).start())
    running.awaitTermination()
    return time.perf_counter() - t0


def read_sql_output(query: str, out: Path) -> Iterator[list[Any]]:
    """Structured Streaming's output rows, batch by batch (complete mode: the last batch's)."""
    batches = sorted(out.glob("batch=*"))
    for d in batches[-1:] if MODES.get(query) == "complete" else batches:
        table = pq.read_table(str(d))
        yield from (list(row.values()) for row in table.to_pylist())


def sql_fingerprint(query: str, rows: Iterable[list[Any]]) -> list[int]:
    """Structured Streaming's output in the reference's form, fingerprinted."""
    if query == "q8":
        return fingerprint(sorted(tuple(r) for r in rows))
    if query == "q11":  # complete mode: the last batch's sessions
        return fingerprint(sorted(tuple(r) for r in rows))
    if query == "q19":  # squall's q19 rows: (auction, [bid, ...])
        rows = ([a, [tuple(v for k, v in bid.items() if k not in ("p", "t")) for bid in top]]
                for a, top in rows)
    return output_fingerprint(query, rows)


# ---- one run, in a child process ------------------------------------------------------------

def session_conf() -> dict[str, str]:
    return {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC", "spark.driver.memory": "4g"}


def child(args: argparse.Namespace) -> None:

    runner, query = args.child.split(":")
    root = Path(args.data) if args.data else None
    kafka = json.loads(args.kafka) if args.kafka else {}
    work = tempfile.mkdtemp(prefix=f"nexmark-{query}-{runner}-")
    out = Path(work) / "out"
    spark = None
    try:
        if runner in ("spark", "sql"):
            from squall.runtime.spark.session import get_session

            spark = get_session(MASTER, session_conf())
        if runner == "sql":
            assert root is not None
            seconds = run_sql(spark, query, root, args.partitions, out, work)
        else:
            seconds = run_squall(runner, query, args.source, root, kafka, args.batch,
                                 args.partitions, out, work, args.storm_files,
                                 args.trident_sink)
        mem = memory(spark) if spark is not None else {
            "driver_mb": peak_kb(os.getpid()) / 1024, "jvm_mb": 0.0, "worker_mb": 0.0}
        got = (sql_fingerprint(query, read_sql_output(query, out)) if runner == "sql"
               else output_fingerprint(query, read_output(out)))
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("NEXMARK " + json.dumps({"seconds": seconds, "fingerprint": got, **mem}), flush=True)


def run_child(args: argparse.Namespace, runner: str, query: str, root: Path | None,
              kafka: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", f"{runner}:{query}", "--source", args.source,
           "--batch", str(args.batch), "--partitions", str(args.partitions),
           "--storm-files", args.storm_files, "--trident-sink", args.trident_sink,
           *(["--data", str(root)] if root is not None else []),
           *(["--kafka", json.dumps(kafka)] if kafka else [])]
    return run_marked(cmd, "NEXMARK", args.timeout)


# ---- the sitting ----------------------------------------------------------------------------

def _rate(n: int, run: dict[str, Any] | None) -> str:
    if run is None:
        return ""
    if "error" in run:
        return "FAILED"
    return f"{n / run['seconds'] / 1000:,.1f}k" + ("" if run["ok"] else " WRONG")


def _memory(run: dict[str, Any] | None) -> str:
    if run is None or "error" in run:
        return ""
    return f"{run['driver_mb']:.0f}/{run['jvm_mb']:.0f}/{run['worker_mb']:.0f}"


def report(args: argparse.Namespace, results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The table: events/s per query and runner, squall on Spark / SQL, peak MB."""
    lines = [f"NEXMark, {args.events:,} events, {args.batch:,} per micro-batch, "
             f"{args.partitions} files a round, source {args.source} (Storm-API and windowed "
             f"queries: {args.storm_files}), Spark {MASTER}; "
             "events/s, ratio squall on Spark / Structured Streaming SQL; peak RSS MB "
             "driver/JVM/largest Python worker",
             "", "| query | squall Spark | squall local | SQL | squall/SQL ratio "
             "| MB squall Spark | MB SQL |", "|---|---|---|---|---|---|---|"]
    for query, runs in results.items():
        spark, local, sql = runs.get("spark"), runs.get("local"), runs.get("sql")
        ratio = ""
        if spark and sql and "error" not in spark and "error" not in sql:
            ratio = f"{sql['seconds'] / spark['seconds']:.2f}x"
        if "sql" in args.runners and query in NOT_EXPRESSED:
            sql_cell = "not expressed"
        elif "sql" in args.runners and args.source == "kafka":
            sql_cell = "not run (no Kafka connector)"
        else:
            sql_cell = _rate(args.events, sql)
        lines.append(f"| {query} | {_rate(args.events, spark)} | {_rate(args.events, local)} "
                     f"| {sql_cell} | {ratio} | {_memory(spark)} | {_memory(sql)} |")
    notes = [f"- {q}: SQL cannot express it: {NOT_EXPRESSED[q]}" for q in results
             if q in NOT_EXPRESSED and "sql" in args.runners]
    errors = [f"- {q} on {r}: {run['error']}" for q, runs in results.items()
              for r, run in runs.items() if "error" in run]
    return "\n".join([*lines, "", *notes, *errors])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=50_000, help="events per micro-batch")
    ap.add_argument("--partitions", type=int, default=2, help="files (topic partitions) a round")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--runners", default=",".join(RUNNERS), help="of spark, local, sql")
    ap.add_argument("--source", choices=("files", "kafka"), default="files")
    ap.add_argument("--data", help="the event files' cache directory (files are reused)")
    ap.add_argument("--trident-sink", choices=("driver", "tasks"), default="driver",
                    help="where the Trident queries' output state opens on Spark: on the "
                         "driver (q0-q2, q13, q14 then run there) or per partition in the "
                         "tasks")
    ap.add_argument("--storm-files", choices=("parquet", "json"), default="parquet",
                    help="the files squall's Storm-API and windowed queries read")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--kafka", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    queries = args.queries.split(",")
    args.runners = args.runners.split(",")
    bad = [q for q in queries if q not in QUERIES] + [r for r in args.runners if r not in RUNNERS]
    if bad or args.events < 1 or args.batch < 1 or args.partitions < 1:
        ap.error(f"nexmark: unknown {bad} (queries {list(QUERIES)}, runners {list(RUNNERS)}), "
                 "or a size below 1")
    with _input(args) as (root, kafka):
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for query in queries:
            want = reference_fingerprint(query, args.events, args.partitions)
            results[query] = {}
            for runner in args.runners:
                if runner == "sql" and (query in NOT_EXPRESSED or args.source == "kafka"):
                    continue
                print(f"# {query} on {runner}, load {os.getloadavg()[0]:.2f}", flush=True)
                run = run_child(args, runner, query, root, kafka)
                if "error" not in run:
                    run["ok"] = run["fingerprint"] == want
                    print(f"  {args.events / run['seconds']:,.0f} events/s in "
                          f"{run['seconds']:.2f} s, output {run['fingerprint'][0]:,} rows "
                          f"{'equal to' if run['ok'] else 'DIFFERENT from'} the reference's "
                          f"{want[0]:,}; peak MB driver/JVM/worker {_memory(run)}", flush=True)
                else:
                    print(f"  {run['error']}", flush=True)
                results[query][runner] = run
    print("\n" + report(args, results), flush=True)
    failed = any("error" in r or not r["ok"] for runs in results.values() for r in runs.values())
    return 1 if failed else 0


class _input:
    """The files (`--source files`) or a topic on a broker started for the sitting (`kafka`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stack: Any = None

    def __enter__(self) -> tuple[Path | None, dict[str, Any]]:
        args = self.args
        if args.source == "files":
            base = Path(args.data) if args.data else DATA
            return data_dir(base, args.events, args.batch, args.partitions), {}
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from contextlib import ExitStack

        from support.kafka_broker import running_broker  # the test suite's, stopped by pid

        self.stack = ExitStack()
        broker = self.stack.enter_context(running_broker(Path(tempfile.mkdtemp(
            prefix="nexmark-kafka-"))))
        topic = broker.create_topic("nexmark", args.partitions)
        broker.produce(topic, kafka_records(config_of(args.events), args.partitions))
        return None, {"bootstrap": broker.bootstrap, "topic": topic}

    def __exit__(self, *exc: Any) -> None:
        if self.stack is not None:
            self.stack.close()


if __name__ == "__main__":
    sys.exit(main())
