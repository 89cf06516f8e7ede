"""W5, state at scale: squall Trident's durable map state on Spark against Structured Streaming.

Events `(key, value)` over K distinct keys (docs/benchmarks.md, W5: key ids drawn
uniformly with numpy's `default_rng(42)`, then the values, int64 uniform in [1, 1000]; key
strings `"k<id>"`), written in event order as `--files` parquet files, one file per micro-batch
(transaction); the job keeps a running count and sum per key, exactly once. Contenders, each
run in its own fresh process (a fresh JVM), interleaved round by round in one sitting:

- A: squall Trident, `FileBatchSpout` (one file per transaction) -> `group_by(key)` -> two
  `persistent_aggregate`s (`Count()`, `Sum()` of value), each into
  `DurableMapState.factory(StateType.TRANSACTIONAL)` (8 state partitions), run with
  `squall.run(..., runner="spark")`: the aggregates applied in the Spark tasks where their
  keys live (the default);
- B: the same with `squall.trident.spark.state.in.executors: False` (the aggregates collected
  to the driver, which applies them);
- R: A with both states `RedisMapState.factory(StateType.TRANSACTIONAL)` (8 partitions, a hash
  each) on a redis-server this script starts on loopback for the run (no persistence) and stops;
- SS: Spark Structured Streaming on the same files, `maxFilesPerTrigger=1` ->
  `groupBy(key).agg(count, sum)` -> update mode -> `foreachBatch` writing each batch's updated
  rows under its batch id, RocksDB state store, `availableNow`;
- SS-hdfs (only with `--contenders`): SS with Spark's default HDFS-backed state store;
- F (only with `--contenders`): the floor of A's Spark job, no state: each file read,
  repartitioned by key into the state partitions, counted and summed by Spark's JVM, coalesced
  to one task per core as A's job is, and handed to a Python `mapInArrow` that only adds up the
  counts (checked: they add up to the events); F-8 the same with one Python task per partition.
  F's total includes the process's first Spark jobs, which A's query start partly absorbs:
  compare the median batch (printed for A and F) for the steady state.

Every process builds the same session (squall's `get_session`: `local[2]`, AQE off, UI off, the
RocksDB provider, `spark.sql.shuffle.partitions` = the state partitions). A figure is the time
of the micro-batches (squall: `RunResult.extra["batch_seconds"]`, each transaction's spout
batch, Spark jobs, state update and commit; SS: the data batches' `triggerExecution`), so
session and query start are excluded; the run's wall time (session start excluded) is shown
too. Memory is the peak RSS (`VmHWM`, taken when the run ends, before the check) of the driver's
Python process, of the JVM and of the largest Python worker; "machine CPU busy" is how many of
the machine's cores were busy during the run (from /proc/stat): a run that keeps every core busy
is bound by the machine, not by its executors. Every run's final state is checked
key by key against a plain Python count and sum of the files; a wrong run is reported as WRONG
and left out of the table. The load average is printed before each run.

    .venv/bin/python benchmarks/trident_w5.py [--events 200000] [--keys 1000] [--files 4]
        [--rounds 1] [--contenders A,B,SS] [--cluster]

`--cluster` runs every contender on a Spark standalone cluster on loopback instead (a master and
two one-core workers this script starts and stops), a contender `X@n` with `spark.cores.max=n`
(one or two one-core executors), e.g. `--cluster --contenders A@1,A@2,SS@1,SS@2`: how each
engine's time scales with its executors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MASTER = "local[2]"
DATA = Path(__file__).resolve().parent / ".data"
NAMES = {"A": "squall A, state in the executors", "B": "squall B, state on the driver",
         "R": "squall R, Redis state in the executors",
         "SS": "Structured Streaming, RocksDB", "SS-hdfs": "Structured Streaming, HDFS store",
         "F": "floor: A's Spark job without state", "F-8": "floor, one Python task a partition"}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


# ---- the data -------------------------------------------------------------------------------

def data_dir(events: int, keys: int, files: int) -> Path:
    """W5's files for these sizes, written once (benchmarks/.data is not committed)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = DATA / f"w5-e{events}-k{keys}-f{files}"
    if (root / "_done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(42)
    ids = rng.integers(0, keys, size=events)
    values = rng.integers(1, 1001, size=events, dtype=np.int64)
    for i in range(files):
        lo, hi = i * events // files, (i + 1) * events // files
        key = pa.array([f"k{j}" for j in ids[lo:hi].tolist()], pa.string())
        pq.write_table(pa.table({"key": key, "value": pa.array(values[lo:hi])}),
                       str(root / f"part-{i:05d}.parquet"))
    (root / "_done").write_text("")
    return root


def reference(root: Path) -> dict[str, tuple[int, int]]:
    """Count and sum per key of the files, in plain Python."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    sums: dict[str, int] = {}
    for f in sorted(root.glob("part-*.parquet")):
        t = pq.read_table(f)
        for k, v in zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                        strict=True):
            counts[k] = counts.get(k, 0) + 1
            sums[k] = sums.get(k, 0) + v
    return {k: (n, sums[k]) for k, n in counts.items()}


def compare(got: dict, want: dict) -> str:
    """'' if `got` equals `want` key by key, else what differs."""
    if got == want:
        return ""
    missing = [k for k in want if k not in got][:3]
    extra = [k for k in got if k not in want][:3]
    wrong = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]
    return (f"{len(got)} keys against {len(want)}; missing {missing}, extra {extra}, "
            f"wrong {wrong}")


# ---- one run, in a child process ------------------------------------------------------------

def session_conf(partitions: int, provider: str, cores: int | None = None) -> dict[str, str]:
    cluster = {} if cores is None else {
        "spark.cores.max": str(cores), "spark.executor.cores": "1",
        "spark.executor.memory": "1g", "spark.default.parallelism": str(cores)}
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.default.parallelism": "2",
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.memory": "2g",
        "spark.sql.streaming.stateStore.providerClass": provider,
        **cluster,
    }


def cpu_ticks() -> tuple[int, int]:
    """The machine's (busy, total) CPU time from /proc/stat, in clock ticks."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def busy_since(start: tuple[int, int]) -> float:
    """The share of the machine's CPU time busy since `start` (`cpu_ticks()`), in cores."""
    busy, total = cpu_ticks()
    return (busy - start[0]) / max(1, total - start[1]) * (os.cpu_count() or 1)


def peak_kb(pid: int) -> int:
    """A live process's peak RSS (VmHWM), in KB; 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def memory(spark) -> dict[str, float]:
    """Peak RSS in MB: this (the driver's Python) process, the JVM, the largest Python worker."""
    jvm = spark.sparkContext._gateway.proc.pid
    workers = [peak_kb(p) for p in descendants(jvm)]
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child
    # would report its parent's peak (the benchmark's, after writing the data) as its own.
    return {"driver_mb": peak_kb(os.getpid()) / 1024,
            "jvm_mb": peak_kb(jvm) / 1024, "worker_mb": max(workers, default=0) / 1024}


def run_squall(spark, root: Path, work: str, partitions: int, in_executors: bool,
               redis_port: int | None = None, master: str = MASTER) -> dict:
    import squall
    from squall.trident import Count, FileBatchSpout, Sum, TridentTopology
    from squall.trident.state import DurableMapState, RedisMapState, StateType

    factory = DurableMapState.factory(StateType.TRANSACTIONAL) if redis_port is None else \
        RedisMapState.factory(StateType.TRANSACTIONAL, port=redis_port, timeout=60)
    t = TridentTopology()
    keyed = t.new_stream("events", FileBatchSpout(str(root), ["key", "value"])) \
        .group_by(["key"])
    keyed.persistent_aggregate(factory, Count(), ["count"]).name("counts")
    keyed.persistent_aggregate(factory, ["value"], Sum(), ["sum"]).name("sums")
    conf = {"squall.trident.state.partitions": partitions,
            "squall.trident.spark.state.in.executors": in_executors}
    t0, ticks = time.perf_counter(), cpu_ticks()
    result = squall.run(t.build(), conf, runner="spark", master=master, checkpoint_location=work)
    wall, cores = time.perf_counter() - t0, busy_since(ticks)
    mem = memory(spark)
    out = {"seconds": sum(result.extra["batch_seconds"]), "wall": wall, "cores": cores,
           "batches": len(result.extra["batch_seconds"]),
           "detail": {**{k: round(v, 2) for k, v in result.extra["timing"].items()},
                      "median batch s": round(statistics.median(
                          result.extra["batch_seconds"]), 3)}, **mem}

    def read(name: str) -> dict:
        state = factory.make_state(name, work)
        try:
            return {k[0]: v for k, v in state.items()}
        finally:
            state.close()

    counts, sums = read("counts"), read("sums")
    out["state"] = {k: (n, sums.get(k)) for k, n in counts.items()}
    if len(sums) != len(counts):
        out["state"]["<sums without a count>"] = len(sums) - len(counts)
    return out


def run_ss(spark, root: Path, work: str) -> dict:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    outputs = os.path.join(work, "out")

    def write(df, batch_id):  # each batch's updated rows under its batch id
        df.write.mode("overwrite").parquet(os.path.join(outputs, f"batch={batch_id:06d}"))

    t0, ticks = time.perf_counter(), cpu_ticks()
    events = (spark.readStream.schema("key string, value long")
              .option("maxFilesPerTrigger", 1).parquet(str(root)))
    query = (events.groupBy("key").agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
             .writeStream.outputMode("update").foreachBatch(write)
             .option("checkpointLocation", os.path.join(work, "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall, cores = time.perf_counter() - t0, busy_since(ticks)
    mem = memory(spark)
    data = [p for p in query.recentProgress if p["numInputRows"] > 0]
    parts: dict[str, float] = {}
    for p in data:
        for k, v in p["durationMs"].items():
            if k != "triggerExecution":
                parts[k] = parts.get(k, 0) + v / 1000
    out = {"seconds": sum(p["durationMs"]["triggerExecution"] for p in data) / 1000,
           "wall": wall, "cores": cores, "batches": len(data),
           "events_read": sum(p["numInputRows"] for p in data),
           "detail": {k: round(v, 2) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
                      if v >= 0.05}, **mem}
    state: dict = {}
    for d in sorted(os.listdir(outputs)):  # later batches' rows replace earlier ones
        t = pq.read_table(os.path.join(outputs, d))
        for k, n, s in zip(*(t.column(c).to_pylist() for c in ("key", "count", "sum")),
                           strict=True):
            state[k] = (n, s)
    out["state"] = state
    return out


def _count_rows(batches):  # shipped by value to the Python workers
    import pyarrow as pa

    n = 0
    for b in batches:
        n += sum(b.column("count").to_pylist())
    yield pa.RecordBatch.from_pydict({"n": pa.array([n], pa.int64())})


def run_floor(spark, root: Path, partitions: int, per_partition: bool) -> dict:
    """A's Spark job without the state, one job per file; `events` is what the Python tasks
    counted (the check)."""
    from pyspark.sql import functions as F

    from squall.runtime.spark.trident.state import partition_sql

    t0, ticks = time.perf_counter(), cpu_ticks()
    times: list[float] = []
    events = 0
    cores = spark.sparkContext.defaultParallelism
    for f in sorted(root.glob("part-*.parquet")):
        t = time.perf_counter()
        grouped = (spark.read.schema("key string, value long").parquet(str(f))
                   .repartition(partitions, "key").groupBy("key")
                   .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
                   .withColumn("$sp", F.expr(partition_sql(["key"], partitions))))
        if not per_partition and cores < partitions:
            grouped = grouped.coalesce(cores)
        table = grouped.mapInArrow(_count_rows, "n long").toArrow()
        times.append(time.perf_counter() - t)
        events += sum(table.column("n").to_pylist())
    wall, cores_busy = time.perf_counter() - t0, busy_since(ticks)
    return {"seconds": sum(times), "wall": wall, "cores": cores_busy, "batches": len(times),
            "events": events, "detail": {"median batch s": round(statistics.median(times), 3)},
            **memory(spark)}


def child(args: argparse.Namespace) -> None:
    from squall.runtime.spark.session import get_session

    root = Path(args.data)
    name, _, cores = args.child.partition("@")
    master = args.master or MASTER
    provider = HDFS if name == "SS-hdfs" else ROCKSDB
    work = tempfile.mkdtemp(prefix="w5-")
    t0 = time.perf_counter()
    spark = get_session(master, session_conf(args.partitions, provider,
                                             int(cores) if cores else None))
    started = time.perf_counter() - t0
    try:
        if name in ("A", "B"):
            out = run_squall(spark, root, work, args.partitions, name == "A", master=master)
        elif name == "R":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from support.redis_server import start_redis  # the test suite's, stopped by pid

            with start_redis(Path(work)) as server:
                out = run_squall(spark, root, work, args.partitions, True, server.port, master)
        elif name in ("F", "F-8"):
            out = run_floor(spark, root, args.partitions, name == "F-8")
        else:
            out = run_ss(spark, root, work)
        out["session"] = started
        if "state" in out:
            state = out.pop("state")
            out["wrong"] = compare(state, reference(root))
            out["keys"] = len(state)
        else:  # the floor keeps no state: its Python tasks must have seen every event
            want = sum(n for n, _ in reference(root).values())
            out["wrong"] = "" if out["events"] == want else \
                f"the floor's tasks counted {out['events']} events of {want}"
            out["keys"] = 0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("W5RESULT " + json.dumps(out), flush=True)


# ---- the sitting ----------------------------------------------------------------------------

def run_marked(cmd: list[str], marker: str, timeout: float) -> dict:
    """Runs `cmd` in a session of its own (on a timeout the child, its JVM and its workers all
    go); the JSON after `marker` on its output, or {"error": ...} with the exceptions it
    printed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for line in stdout.splitlines():
        if line.startswith(marker + " "):
            out: dict = json.loads(line[len(marker) + 1:])
            return out
    causes = [line for line in stderr.splitlines()
              if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return {"error": f"exit {proc.returncode}: " + ("\n".join(causes[-2:])[:1500]
                                                   or stderr.strip()[-1500:])}


def run_child(contender: str, root: Path, partitions: int, timeout: float,
              master: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", contender, "--data", str(root),
           "--partitions", str(partitions), *(["--master", master] if master else [])]
    t0 = time.perf_counter()
    out = run_marked(cmd, "W5RESULT", timeout)
    if "error" not in out:
        out["process"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--keys", default="1000", help="comma-separated K values")
    ap.add_argument("--files", type=int, default=4, help="one file per micro-batch")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=8,
                    help="squall's state partitions = SS's shuffle partitions")
    ap.add_argument("--contenders", default="A,B,SS",
                    help="of A, B, R, SS, SS-hdfs, F, F-8 (with --cluster: each as X@1 or X@2)")
    ap.add_argument("--cluster", action="store_true",
                    help="on a standalone cluster of two one-core workers on loopback")
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if not args.cluster:
        sitting(args, None)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.spark_cluster import standalone_cluster  # the test suite's, stopped by pid

    base = Path(tempfile.mkdtemp(prefix="w5-cluster-"))
    try:
        with standalone_cluster(base, workers=2, memory="2g") as cluster:
            sitting(args, cluster.url)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def sitting(args: argparse.Namespace, master: str | None) -> None:
    contenders = args.contenders.split(",")
    for c in contenders:
        if ("@" in c) != (master is not None) or c.partition("@")[0] not in NAMES:
            raise SystemExit(f"contender {c!r}: one of {', '.join(NAMES)}"
                             + (", as X@1 or X@2 with --cluster" if master else ""))
    where = f"a standalone cluster on loopback ({master}, two one-core workers)" if master \
        else MASTER
    print(f"# W5: {args.events:,} events in {args.files} files (one per micro-batch), "
          f"{where}, {args.partitions} state/shuffle partitions, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    table = []
    for k in (int(x) for x in args.keys.split(",")):
        root = data_dir(args.events, k, args.files)
        runs: dict[str, list[dict]] = {c: [] for c in contenders}
        for rnd in range(args.rounds):
            order = contenders[rnd % len(contenders):] + contenders[:rnd % len(contenders)]
            for c in order:
                load = os.getloadavg()
                out = run_child(c, root, args.partitions, args.timeout, master)
                head = (f"K={k:,} round {rnd + 1} {c:7s} load {load[0]:.2f} {load[1]:.2f} "
                        f"{load[2]:.2f}: ")
                if "error" in out:
                    print(head + "FAILED " + out["error"], flush=True)
                    continue
                if out["wrong"]:
                    print(head + "WRONG " + out["wrong"], flush=True)
                    continue
                out["round"] = rnd
                runs[c].append(out)
                print(head + f"{args.events / out['seconds'] / 1e3:7.1f} k events/s, batches "
                      f"{out['seconds']:.2f} s ({out['batches']}), run {out['wall']:.2f} s, "
                      f"session {out['session']:.1f} s, process {out['process']:.1f} s; "
                      f"machine CPU busy {out['cores']:.2f} of {os.cpu_count()} cores; peak "
                      f"RSS driver {out['driver_mb']:.0f} MB, JVM {out['jvm_mb']:.0f} MB, "
                      f"worker {out['worker_mb']:.0f} MB; {out['keys']:,} keys verified; "
                      f"{out['detail']}", flush=True)
        table.append((k, runs))
    print(f"\n{args.events:,} events, {args.files} files, medians over {args.rounds} round(s); "
          "events/s over the micro-batches' time (start-up excluded)\n")
    print("| K | contender | k events/s | batches s | run s | driver MB | JVM MB | worker MB |")
    print("|---|---|---|---|---|---|---|---|")
    for k, runs in table:
        for c, rs in runs.items():
            name, _, cores = c.partition("@")
            label = NAMES[name] + (f", {cores} executor(s)" if cores else "")
            if not rs:
                print(f"| {k:,} | {label} | failed or wrong | | | | | |")
                continue
            def med(field: str, rs: list[dict] = rs) -> float:
                return statistics.median(r[field] for r in rs)
            print(f"| {k:,} | {label} | {args.events / med('seconds') / 1e3:.1f} | "
                  f"{med('seconds'):.2f} | {med('wall'):.2f} | {med('driver_mb'):.0f} | "
                  f"{med('jvm_mb'):.0f} | {med('worker_mb'):.0f} |")
    pairs = [(a, b) for a, b in (("A", "SS"), ("B", "SS"), ("A", "B"), ("R", "A"), ("F", "A"),
                                 ("A@2", "A@1"), ("SS@2", "SS@1"), ("A@1", "SS@1"),
                                 ("A@2", "SS@2"))
             if a in contenders and b in contenders]
    for field, what in (("seconds", "the micro-batches' time"), ("wall", "the run's wall time")):
        if not pairs:
            break
        print(f"\nThroughput ratios on {what}, per round (median):\n")
        print("| K | " + " | ".join(f"{a}/{b}" for a, b in pairs) + " |")
        print("|---|" + "---|" * len(pairs))
        for k, runs in table:
            cells = []
            for a, b in pairs:
                by_round = {r["round"]: r[field] for r in runs[b]}
                ratios = [by_round[r["round"]] / r[field] for r in runs[a]
                          if r["round"] in by_round]
                cells.append("-" if not ratios else
                             f"{statistics.median(ratios):.0%} ("
                             + ", ".join(f"{x:.0%}" for x in ratios) + ")")
            print(f"| {k:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
