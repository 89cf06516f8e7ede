"""Q2: can component instances live across micro-batches in Python workers, and what does a per-batch
state snapshot cost?

    /work/main/.venv/bin/python benchmarks/spark_design/q2_instance_lifetime.py [--jobs 10] [--tasks 2 4] [--idle-gap 0]

Part A runs `--jobs` Spark jobs (RDD mapPartitionsWithIndex and DataFrame mapInArrow) with N tasks and
records, per partition index, the pid of the Python worker that ran it and whether a module-level cache
(an attribute on the `sys` module of the worker) already held an instance for that index.
With --idle-gap S it then sleeps S seconds and runs one more job (Python workers idle for a while may be
reaped by the daemon).
Part B measures cloudpickle/pickle snapshots of a 10k-entry count dict written per batch to
<dir>/batch=<id>/task=<i>.pkl (write to a temp name, fsync, rename), in the driver and inside tasks.
"""

import argparse
import os
import pickle
import shutil
import tempfile
import time

import cloudpickle
import common
import pyarrow as pa


def rdd_probe(index, it):
    import os as _os
    import sys as _sys

    n_tasks = list(it)[
        0
    ]  # every element is the task count; drain the input (see rdd_probe_undrained)
    cache = _sys.__dict__.setdefault("_squall_design_instances", {})
    hit = (n_tasks, index) in cache
    inst = cache.setdefault((n_tasks, index), {"n": 0})
    inst["n"] += 1
    yield (index, _os.getpid(), hit, inst["n"])


def rdd_probe_undrained(index, it):
    """As rdd_probe, but leaves the task's input iterator unfinished (reads one element only)."""
    import os as _os

    next(iter(it))
    yield (index, _os.getpid(), False, 0)


def arrow_probe_for(n_tasks):
    def probe(batches):
        return arrow_probe(batches, n_tasks)

    return probe


def arrow_probe(batches, n_tasks):
    import os as _os
    import sys as _sys

    from pyspark import TaskContext

    for _ in batches:
        pass
    index = TaskContext.get().partitionId()
    cache = _sys.__dict__.setdefault("_squall_design_instances_sql", {})
    hit = (n_tasks, index) in cache
    inst = cache.setdefault((n_tasks, index), {"n": 0})
    inst["n"] += 1
    yield pa.RecordBatch.from_pydict(
        {"idx": [index], "pid": [_os.getpid()], "hit": [hit], "n": [inst["n"]]}
    )


def report(kind, n_tasks, rows_per_job):
    pids = {}
    hits = 0
    total = 0
    for rows in rows_per_job[1:]:  # job 1 creates the instances
        for idx, pid, hit, _n in rows:
            hits += bool(hit)
            total += 1
    for rows in rows_per_job:
        for idx, pid, _hit, _n in rows:
            pids.setdefault(idx, []).append(pid)
    all_pids = sorted({p for v in pids.values() for p in v})
    print(
        "%s tasks=%d jobs=%d distinct worker pids=%d %s"
        % (kind, n_tasks, len(rows_per_job), len(all_pids), all_pids)
    )
    for idx in sorted(pids):
        print(
            "  partition %d: pid per job %s -> %d distinct" % (idx, pids[idx], len(set(pids[idx])))
        )
        # each (pid, idx) instance counts the task runs it saw: more than one copy means split state
        last = {}
        for rows in rows_per_job:
            for i, pid, _hit, n in rows:
                if i == idx:
                    last[pid] = n
        print(
            "    instances of task %d (pid -> task runs it saw): %s of %d runs"
            % (idx, last, len(rows_per_job))
        )
    print(
        "  instance found in the worker's module cache for jobs 2..%d: %d of %d task runs (%.0f%%)"
        % (len(rows_per_job), hits, total, 100.0 * hits / max(total, 1))
    )
    return all_pids


def part_a(spark, jobs, task_counts, idle_gap):
    common.header(
        "Q2A Python worker reuse across jobs (spark.python.worker.reuse={})".format(
            spark.conf.get("spark.python.worker.reuse", "true (default)")
        )
    )
    sc = spark.sparkContext
    print("# driver pid %d" % os.getpid())
    for n in task_counts:
        rows = []
        for _ in range(jobs):
            rows.append(sc.parallelize([n] * n, n).mapPartitionsWithIndex(rdd_probe).collect())
        rdd_pids = report("RDD mapPartitionsWithIndex", n, rows)
        rows = []
        df = spark.range(n).repartition(n)
        for _ in range(jobs):
            rows.append(
                [
                    (r.idx, r.pid, r.hit, r.n)
                    for r in df.mapInArrow(
                        arrow_probe_for(n), "idx long, pid long, hit boolean, n long"
                    ).collect()
                ]
            )
        sql_pids = report("DataFrame mapInArrow", n, rows)
        print(f"  pids shared by RDD and mapInArrow jobs: {sorted(set(rdd_pids) & set(sql_pids))}")
    rows = [
        sc.parallelize([2, 2], 2).mapPartitionsWithIndex(rdd_probe_undrained).collect()
        for _ in range(jobs)
    ]
    pids = sorted({pid for r in rows for _i, pid, _h, _n in r})
    print(
        "RDD task that does not drain its input iterator: %d jobs x 2 tasks ran in %d distinct worker pids"
        % (jobs, len(pids))
    )
    if idle_gap:
        before = sc.parallelize([2, 2], 2).mapPartitionsWithIndex(rdd_probe).collect()
        print("idle gap: sleeping %d s" % idle_gap)
        time.sleep(idle_gap)
        after = sc.parallelize([2, 2], 2).mapPartitionsWithIndex(rdd_probe).collect()
        print(f"  before gap (idx, pid, hit, n): {before}")
        print(f"  after  gap (idx, pid, hit, n): {after}")


def snapshot(state, root, batch_id, task, dumps, fsync):
    d = os.path.join(root, "batch=%d" % batch_id)
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, "task=%d.pkl" % task)
    tmp = final + ".tmp"
    data = dumps(state)
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, final)
    return len(data)


def part_b(spark, root):
    common.header("Q2B per-batch snapshot of a 10k-entry count dict")
    vocab = common.vocabulary()
    state = {w: i * 7 + 1 for i, w in enumerate(vocab)}
    reps = 50
    for name, dumps in (
        ("cloudpickle", cloudpickle.dumps),
        ("pickle", lambda o: pickle.dumps(o, protocol=5)),
    ):
        for fsync in (False, True):
            ts = []
            for b in range(reps):
                dt, size = common.timed(snapshot, state, root, b, 0, dumps, fsync)
                ts.append(dt)
            print(
                "driver %-11s fsync=%-5s size %d B  median %.2f ms  p90 %.2f ms"
                % (name, fsync, size, common.median(ts) * 1e3, sorted(ts)[int(0.9 * reps)] * 1e3)
            )
    ts = []
    path = os.path.join(root, "batch=0", "task=0.pkl")
    for _ in range(reps):
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            s2 = pickle.load(f)
        ts.append(time.perf_counter() - t0)
    assert s2 == state
    print("driver restore (pickle.load) median %.2f ms" % (common.median(ts) * 1e3))
    dt_copy = common.median([common.timed(dict, state)[0] for _ in range(reps)])
    print("driver dict copy of the state (for comparison) median %.3f ms" % (dt_copy * 1e3))

    # inside Spark tasks: per-batch job of 2 tasks, each updating its 10k-entry dict (kept in the worker's
    # module cache) with 1000 increments, with and without a snapshot at the end
    sc = spark.sparkContext
    task_root = os.path.join(root, "tasks")

    def make_task(batch_id, do_snapshot):
        def run(index, it):
            import os as _os
            import sys as _sys
            import time as _t

            import cloudpickle as _cp

            t0 = _t.perf_counter()
            cache = _sys.__dict__.setdefault("_squall_design_state", {})
            st = cache.get(index)
            if st is None:
                st = cache[index] = {w: 0 for w in vocab}
            for k in range(1000):
                w = vocab[(k * 7919 + batch_id) % len(vocab)]
                st[w] += 1
            size = 0
            if do_snapshot:
                size = snapshot(st, task_root, batch_id, index, _cp.dumps, True)
            yield (index, _os.getpid(), size, _t.perf_counter() - t0)

        return run

    for do_snapshot in (False, True, False, True):
        jt, tt = [], []
        for b in range(10):
            dt, rows = common.timed(
                lambda: (
                    sc.parallelize(range(2), 2)
                    .mapPartitionsWithIndex(make_task(b, do_snapshot))
                    .collect()
                )
            )
            jt.append(dt)
            tt.extend(r[3] for r in rows)
        print(
            "in-task snapshot=%-5s job median %.1f ms  task body median %.2f ms (10 batches x 2 tasks)"
            % (do_snapshot, common.median(jt) * 1e3, common.median(tt) * 1e3)
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--tasks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--idle-gap", type=int, default=0)
    args = ap.parse_args()
    spark = common.spark_session()
    root = tempfile.mkdtemp(prefix="squall-snap-")
    try:
        part_a(spark, args.jobs, args.tasks, args.idle_gap)
        part_b(spark, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
