"""Q5: where a user's Spout (open/next_tuple/ack/fail, driver-side) can live.

    /work/main/.venv/bin/python benchmarks/spark_design/q5_spout_hosting.py [--rows 100000] [--batches 6]

Part A (spout inside a Python DataSourceStreamReader): the reader owns a Spout instance, pulls
`--rows` tuples per batch from next_tuple() in latestOffset(), ships them to the executors inside the
InputPartition (as Arrow IPC bytes, read() yields a RecordBatch) and acks tuples whose msg ids the
foreachBatch callback (driver process) wrote to <dir>/acks/batch=<id>.arrow. Every reader method logs
its pid and the id() of the reader and spout instances, so we see which process hosts the spout and
whether it lives across batches.
Part B (spout on the driver, our own write-ahead log): per batch the driver pulls `--rows` tuples from
the same Spout, writes them to <dir>/wal/batch=<id>.arrow (fsync) and builds the batch with
spark.createDataFrame(pyarrow.Table), then runs one action (count). Ratio: Part A's per-batch time
(triggerExecution) over Part B's, and createDataFrame(pa.Table) against createDataFrame(list of tuples).
"""

import argparse
import json
import os
import shutil
import tempfile
import time

import common
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class DemoSpout:
    """Stand-in for a user's Spout subclass: a replayable counter of sentences."""

    def open(self, conf, context):
        self.seq = 0
        self.pending = set()
        self.acked = 0
        self.failed = 0

    def next_tuple(self, emit):
        i = self.seq
        self.seq += 1
        self.pending.add(i)
        emit(["sentence number %d of the demo spout" % i], msg_id=i)

    def ack(self, msg_id):
        self.pending.discard(msg_id)
        self.acked += 1

    def fail(self, msg_id):
        self.failed += 1


class SpoutPartition(InputPartition):
    def __init__(self, ipc):
        self.ipc = ipc


def pull(spout, n):
    ids, vals = [], []

    def emit(values, msg_id=None):
        ids.append(msg_id)
        vals.append(values[0])

    for _ in range(n):
        spout.next_tuple(emit)
    return pa.table({"msg_id": pa.array(ids, pa.int64()), "sentence": pa.array(vals, pa.string())})


def to_ipc(tbl):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue().to_pybytes()


class SpoutReader(DataSourceStreamReader):
    def __init__(self, options):
        self.dir = options["dir"]
        self.rows = int(options["rows"])
        self.spout = DemoSpout()
        self.spout.open({}, None)
        self.batches = {}
        self.acked_files = set()

    def _log(self, method, **kw):
        rec = dict(
            method=method,
            pid=os.getpid(),
            reader=id(self),
            spout=id(self.spout),
            t=time.time(),
            **kw,
        )
        with open(os.path.join(self.dir, "reader.log"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    def _deliver_acks(self):
        d = os.path.join(self.dir, "acks")
        n = 0
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith(".arrow") and name not in self.acked_files:
                with pa.OSFile(os.path.join(d, name)) as f:
                    ids = pa.ipc.open_file(f).read_all().column(0).to_pylist()
                for i in ids:
                    self.spout.ack(i)
                n += len(ids)
                self.acked_files.add(name)
        return n

    def initialOffset(self):
        self._log("initialOffset")
        return {"seq": 0}

    def latestOffset(self, start, limit):
        t0 = time.perf_counter()
        acked = self._deliver_acks()
        tbl = pull(self.spout, self.rows)
        end = start["seq"] + tbl.num_rows
        self.batches[start["seq"]] = to_ipc(tbl)
        self._log(
            "latestOffset",
            start=start["seq"],
            end=end,
            acked_now=acked,
            acked_total=self.spout.acked,
            pending=len(self.spout.pending),
            ms=(time.perf_counter() - t0) * 1e3,
        )
        return {"seq": end}

    def partitions(self, start, end):
        self._log("partitions", start=start["seq"], end=end["seq"])
        # a real runner must rebuild the range from its own log on replay (the reader restarts empty)
        return [SpoutPartition(self.batches[start["seq"]])]

    def read(self, partition):
        with open(os.path.join(self.dir, "read.log"), "a") as f:
            f.write(json.dumps({"method": "read", "pid": os.getpid()}) + "\n")
        yield from pa.ipc.open_stream(partition.ipc).read_all().to_batches()

    def commit(self, end):
        self._log("commit", end=end["seq"])
        for k in [k for k in self.batches if k < end["seq"]]:
            del self.batches[k]


class SpoutSource(DataSource):
    @classmethod
    def name(cls):
        return "squall_design_spout"

    def schema(self):
        return "msg_id long, sentence string"

    def streamReader(self, schema):
        return SpoutReader(self.options)


def part_a(spark, root, rows, batches):
    common.header(
        "Q5A spout hosted in a Python DataSourceStreamReader (%d tuples per batch)" % rows
    )
    spark.dataSource.register(SpoutSource)
    os.makedirs(os.path.join(root, "acks"), exist_ok=True)
    fb_pids = []

    def fb(df, bid):
        tbl = df.select("msg_id").toArrow()
        fb_pids.append(os.getpid())
        path = os.path.join(root, "acks", "batch=%06d.arrow" % bid)
        with pa.OSFile(path + ".tmp", "wb") as f, pa.ipc.new_file(f, tbl.schema) as w:
            w.write_table(tbl)
        os.replace(path + ".tmp", path)

    q = (
        spark.readStream.format("squall_design_spout")
        .option("dir", root)
        .option("rows", rows)
        .load()
        .writeStream.trigger(processingTime="0 seconds")
        .option("checkpointLocation", os.path.join(root, "ck"))
        .foreachBatch(fb)
        .start()
    )
    while q.lastProgress is None or q.lastProgress["batchId"] < batches - 1:
        time.sleep(0.1)
        if q.exception():
            raise q.exception()
    progs = list(q.recentProgress)
    q.stop()
    with open(os.path.join(root, "reader.log")) as f:
        log = [json.loads(line) for line in f]
    with open(os.path.join(root, "read.log")) as f:
        read_pids = sorted({json.loads(line)["pid"] for line in f})
    print("driver pid %d; foreachBatch callback pids %s" % (os.getpid(), sorted(set(fb_pids))))
    by_method = {}
    for rec in log:
        by_method.setdefault(rec["method"], set()).add((rec["pid"], rec["reader"], rec["spout"]))
    for m, s in by_method.items():
        print("reader.%-14s (pid, reader id, spout id): %s" % (m, sorted(s)))
    print(f"reader.read (executor side) pids: {read_pids}")
    for rec in log:
        if rec["method"] == "latestOffset":
            print(
                "  latestOffset start=%d end=%d acked_now=%d acked_total=%d pending=%d (%.0f ms in latestOffset)"
                % (
                    rec["start"],
                    rec["end"],
                    rec["acked_now"],
                    rec["acked_total"],
                    rec["pending"],
                    rec["ms"],
                )
            )
    durs = [
        p["durationMs"]["triggerExecution"]
        for p in progs
        if p["batchId"] >= 1 and p["numInputRows"] > 0
    ]
    lat = [
        p["durationMs"].get("latestOffset", 0)
        for p in progs
        if p["batchId"] >= 1 and p["numInputRows"] > 0
    ]
    print(
        "per batch (batches 1..): triggerExecution median %d ms, of which latestOffset median %d ms, rows/batch %s"
        % (common.median(durs), common.median(lat), sorted({p["numInputRows"] for p in progs}))
    )
    return common.median(durs) / 1e3


def part_b(spark, root, rows, batches):
    common.header(
        "Q5B spout on the driver: next_tuple -> WAL (Arrow IPC + fsync) -> createDataFrame(pa.Table) -> count"
    )
    spout = DemoSpout()
    spout.open({}, None)
    wal = os.path.join(root, "wal")
    os.makedirs(wal, exist_ok=True)
    parts = {"pull": [], "wal": [], "createDataFrame": [], "count": [], "total": []}
    for bid in range(batches):
        t0 = time.perf_counter()
        tbl = pull(spout, rows)
        t1 = time.perf_counter()
        path = os.path.join(wal, "batch=%06d.arrow" % bid)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, tbl.schema) as w:
            w.write_table(tbl)
        with open(path + ".tmp", "wb") as raw:
            raw.write(sink.getvalue())
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(path + ".tmp", path)
        t2 = time.perf_counter()
        df = spark.createDataFrame(tbl)
        t3 = time.perf_counter()
        n = df.count()
        t4 = time.perf_counter()
        assert n == rows
        for k, v in (
            ("pull", t1 - t0),
            ("wal", t2 - t1),
            ("createDataFrame", t3 - t2),
            ("count", t4 - t3),
            ("total", t4 - t0),
        ):
            parts[k].append(v)
    for k, v in parts.items():
        print(
            "%-16s median %7.1f ms  (batches 2..%d: %s)"
            % (k, common.median(v[1:]) * 1e3, batches, " ".join("%.0f" % (x * 1e3) for x in v[1:]))
        )
    # replay from the WAL
    t0 = time.perf_counter()
    with pa.memory_map(os.path.join(wal, "batch=%06d.arrow" % (batches - 1))) as f:
        replay = pa.ipc.open_file(f).read_all()
    print(
        "WAL replay read of one batch: %.1f ms (%d rows)"
        % ((time.perf_counter() - t0) * 1e3, replay.num_rows)
    )
    # createDataFrame from a list of tuples with an explicit schema, for comparison
    tbl = pull(spout, rows)
    pyrows = list(zip(tbl.column(0).to_pylist(), tbl.column(1).to_pylist(), strict=False))
    ca = [common.timed(lambda: spark.createDataFrame(tbl).count())[0] for _ in range(3)]
    cl = [
        common.timed(lambda: spark.createDataFrame(pyrows, "msg_id long, sentence string").count())[
            0
        ]
        for _ in range(3)
    ]
    print(
        "createDataFrame+count, %d rows: pa.Table median %.0f ms, list of tuples median %.0f ms, ratio %.1fx"
        % (
            rows,
            common.median(ca) * 1e3,
            common.median(cl) * 1e3,
            common.median(cl) / common.median(ca),
        )
    )
    return common.median(parts["total"][1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--batches", type=int, default=6)
    args = ap.parse_args()
    spark = common.spark_session()
    root = tempfile.mkdtemp(prefix="squall-q5-")
    try:
        a = part_a(spark, root, args.rows, args.batches)
        b = part_b(spark, root, args.rows, args.batches)
        print(
            "\n# per-batch time for %d tuples: reader-hosted spout %.0f ms vs driver loop %.0f ms: ratio %.2f"
            % (args.rows, a * 1e3, b * 1e3, a / b)
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
