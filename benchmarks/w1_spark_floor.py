"""The floor of Storm's per-tuple API on Spark: W1 with bare Storm-shaped objects, no squall.

    .venv/bin/python benchmarks/w1_spark_floor.py [--sentences 200000] [--runs 3]
        [--acking] [--input cached|files]

What the W1 target of the Spark runner is measured against: the hand-written job of
docs/benchmarks.md (split in `mapInArrow`, `repartition` by word, dict count in `mapInArrow`). This
script runs, in the same session and on the same cached input, that job and a job shaped the way
any engine of Storm's API must run W1 on Spark, with nothing else: a `Tuple` object per delivered
tuple, an `execute(tuple, collector)` call per sentence and per word, an `emit(Values(w))` call
per word that picks the target task by the word's hash, an `ack` call per word, and the words
carried between the stages in squall's wire shape (one marshalled list per (source, target)
pair, routed by a salted key). No error isolation, statistics, stream checks, reliability checks,
state snapshots, spout or ack ledger: every engine of this API pays at least this much. Prints
words/s (median of the runs after a warm-up) and each job's ratio to the hand-written one.

With `--acking` it also runs the same floor with Storm's XOR acking in its least form, as a
bound for what tracking can cost any engine of this API on Spark: per sentence a random 64-bit
root and edge (the spout's emit, made in the split stage: no spout task, no pending map); per
word a random edge XORed into its sentence's ack value and carried with it as `{root: edge}` in
the packet (squall's wire shape); per ack one XOR into a per-root dict in the stage; each
stage's dict leaves as two little-endian uint64 columns, and the driver folds them with numpy
(sort, XOR per run) and checks that every tree is complete, with no Python per tree. Reported:
the floor's acking on / off, against which squall's own ratio (`benchmarks/w1_spark.py`) is
read.

With `--input files` both jobs read the sentences from two text files (`spark.read.text`, timed
from the read, as `benchmarks/w1_spark.py --user-seen` times the hand-written job) instead of a
cached DataFrame: the floor against the job a user writes for input in files.
"""

from __future__ import annotations

import argparse
import marshal
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import w1_local
import w1_spark
from w1_local import _Tup
from w1_spark import baseline
from workloads import reference_counts, w1_sentences

from squall.runtime.gc_pause import gc_paused as paused
from squall.runtime.spark.query import routing_keys
from squall.runtime.spark.session import get_session

TASKS = 2


class Collector:
    """emit: fields grouping on the first value (memoized hash), appended to the target's list."""

    def __init__(self, targets: int) -> None:
        self.out: list[list] = [[] for _ in range(targets)]
        self.memo: dict[str, int] = {}
        self.n = targets

    def emit(self, values):
        w = values[0]
        t = self.memo.get(w)
        if t is None:
            t = self.memo[w] = zlib.crc32(w.encode()) % self.n
        self.out[t].append(values)
        return [t]

    def ack(self, tup):
        if tup.state != 0:
            raise RuntimeError("acked twice")
        tup.state = 1


def gc_paused(stage):
    """`stage` with CPython's cyclic collector off while it runs, as squall's stages run
    (`squall.runtime.gc_pause`): every word allocates objects that die young, and the collector
    would traverse the stage's heap again and again (in one process, under load, W1's
    acking-off floor took 2.0-2.9 s per 1,000,000 words with it paused against 5.2-7.8 s
    without). Any engine can do this, so the floor does (before 2026-11-29 it did not: its
    earlier figures are lower)."""

    def run(batches):
        with paused():
            yield from stage(batches)

    return run


class Split:
    def execute(self, tup, collector):
        emit = collector.emit
        for w in tup.values[0].split():
            emit([w])


class Count:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def execute(self, tup, collector):
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        collector.ack(tup)


def floor_job(spark, df, keys: list[int]):
    import pyarrow as pa

    def split_stage(batches):
        bolt, collector = Split(), Collector(TASKS)
        for batch in batches:
            for s in batch.column(0).to_pylist():
                tup = _Tup([s], "sentences", None, 1)
                bolt.execute(tup, collector)
                collector.ack(tup)
        yield pa.RecordBatch.from_pydict({
            "key": pa.array(keys, pa.int64()),
            "packet": pa.array([marshal.dumps(items) for items in collector.out], pa.binary()),
        })

    def count_stage(batches):
        bolt, collector = Count(), Collector(TASKS)
        for batch in batches:
            for blob in batch.column(1).to_pylist():
                for values in marshal.loads(blob):
                    bolt.execute(_Tup(values, "split", None, 2), collector)
        yield pa.RecordBatch.from_pydict({
            "word": pa.array(list(bolt.counts), pa.string()),
            "count": pa.array(list(bolt.counts.values()), pa.int64()),
        })

    t0 = time.perf_counter()
    table = (df.mapInArrow(gc_paused(split_stage), "key long, packet binary")
             .repartition(TASKS, "key")
             .mapInArrow(gc_paused(count_stage), "word string, count long").toArrow())
    elapsed = time.perf_counter() - t0
    return elapsed, dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(),
                             strict=True))


class AckingCollector(Collector):
    """`Collector` with XOR acking: an emit anchored to the input gets a random edge, an ack
    XORs the tuple's edge and ack value into its root's entry of the stage's dict."""

    def __init__(self, targets: int, seed: int) -> None:
        super().__init__(targets)
        import random

        self.rand = random.Random(seed).getrandbits
        self.input: _Tup | None = None
        self.xor: dict[int, int] = {}

    def emit(self, values):
        anchor = self.input
        w = values[0]
        t = self.memo.get(w)
        if t is None:
            t = self.memo[w] = zlib.crc32(w.encode()) % self.n
        edge = self.rand(64)
        anchor.ack_val ^= edge
        for root in anchor.anchors:
            self.out[t].append((values, {root: edge}))
        return [t]

    def ack(self, tup):
        if tup.state != 0:
            raise RuntimeError("acked twice")
        tup.state = 1
        xor, val = self.xor, tup.ack_val
        for root, edge in tup.anchors.items():
            xor[root] = xor.get(root, 0) ^ edge ^ val

    def ack_columns(self):
        import numpy as np

        n = len(self.xor)
        roots = np.fromiter(self.xor.keys(), np.uint64, n).astype("<u8").tobytes()
        values = np.fromiter(self.xor.values(), np.uint64, n).astype("<u8").tobytes()
        return roots + values


def fold_acks(blobs: list[bytes]) -> tuple[int, int]:
    """(trees, trees complete): the stages' per-root XORs folded by root on the driver."""
    import numpy as np

    roots, values = [], []
    for blob in blobs:
        half = len(blob) // 2
        roots.append(np.frombuffer(blob[:half], "<u8"))
        values.append(np.frombuffer(blob[half:], "<u8"))
    r, v = np.concatenate(roots), np.concatenate(values)
    order = np.argsort(r, kind="stable")
    r, v = r[order], v[order]
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    folded = np.bitwise_xor.reduceat(v, starts)
    return len(starts), int((folded == 0).sum())


def floor_job_acking(spark, df, keys: list[int], sentences: int):
    import pyarrow as pa
    from pyspark import TaskContext

    def split_stage(batches):
        ctx = TaskContext.get()
        bolt = Split()
        collector = AckingCollector(TASKS, ctx.partitionId() if ctx else 0)
        rand, xor = collector.rand, collector.xor
        for batch in batches:
            for s in batch.column(0).to_pylist():
                # The spout's emit: a new tree, its init XORed in where the sentence is.
                root, edge = rand(64), rand(64)
                xor[root] = edge
                tup = _Tup([s], "sentences", {root: edge}, 1)
                collector.input = tup
                bolt.execute(tup, collector)
                collector.ack(tup)
        yield pa.RecordBatch.from_pydict({
            "key": pa.array([*keys, keys[0]], pa.int64()),
            "packet": pa.array([marshal.dumps(items) for items in collector.out]
                               + [b"A" + collector.ack_columns()], pa.binary()),
        })

    def count_stage(batches):
        bolt, collector = Count(), AckingCollector(TASKS, 0)
        passed: list[bytes] = []
        for batch in batches:
            for blob in batch.column(1).to_pylist():
                if blob[:1] == b"A":
                    passed.append(blob[1:])
                    continue
                for values, anchors in marshal.loads(blob):
                    bolt.execute(_Tup(values, "split", anchors, 2), collector)
        passed.append(collector.ack_columns())
        n = len(bolt.counts)
        yield pa.RecordBatch.from_pydict({
            "word": pa.array([*bolt.counts, *([None] * len(passed))], pa.string()),
            "count": pa.array([*bolt.counts.values(), *([None] * len(passed))], pa.int64()),
            "acks": pa.array([None] * n + passed, pa.binary()),
        })

    t0 = time.perf_counter()
    table = (df.mapInArrow(gc_paused(split_stage), "key long, packet binary")
             .repartition(TASKS, "key")
             .mapInArrow(gc_paused(count_stage), "word string, count long, acks binary")
             .toArrow())
    acks = [b for b in table.column(2).to_pylist() if b is not None]
    trees, complete = fold_acks(acks)
    elapsed = time.perf_counter() - t0
    if trees != sentences or complete != trees:
        raise AssertionError(f"{complete} of {trees} trees complete")
    words, counts = table.column(0).to_pylist(), table.column(1).to_pylist()
    return elapsed, {w: c for w, c in zip(words, counts, strict=True) if w is not None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--input", choices=("cached", "files"), default="cached",
                        help="both jobs read a cached DataFrame, or two text files")
    parser.add_argument("--acking", action="store_true",
                        help="also run the floor with XOR acking (see the module's docstring)")
    args = parser.parse_args()
    spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    from pyspark import cloudpickle

    for module in (w1_local, w1_spark):  # the workers cannot import them
        cloudpickle.register_pickle_by_value(module)
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    import pyarrow as pa

    if args.input == "files":  # two files, which Spark reads in two partitions
        folder = tempfile.mkdtemp(prefix="w1-floor-")
        half = len(sentences) // 2
        for i, part in enumerate((sentences[:half], sentences[half:])):
            Path(folder, f"part-{i}.txt").write_text("".join(s + "\n" for s in part))
        df = spark.read.text(folder)
    else:
        # Two input partitions, so that both jobs split on both cores.
        df = spark.createDataFrame(pa.table({"sentence": sentences})).repartition(TASKS).cache()
        df.count()
    keys = routing_keys(TASKS)
    base_times, floor_times, acking_times = [], [], []
    for run in range(args.runs + 1):
        base_s, counts = baseline(spark, df)
        assert counts == expected
        floor_s, counts = floor_job(spark, df, keys)
        assert counts == expected
        line = f"run {run}: hand-written {base_s:.2f}s, Storm-shaped floor {floor_s:.2f}s"
        if args.acking:
            acking_s, counts = floor_job_acking(spark, df, keys, len(sentences))
            assert counts == expected
            line += f", the floor with acking {acking_s:.2f}s"
        if run:  # the first run is the warm-up
            base_times.append(base_s)
            floor_times.append(floor_s)
            if args.acking:
                acking_times.append(acking_s)
        print(line, flush=True)
    base, floor = statistics.median(base_times), statistics.median(floor_times)
    if args.input == "files":
        shutil.rmtree(folder, ignore_errors=True)
    print(f"W1 on Spark (local[2]), {words:,} words, input {args.input}, median of {args.runs} "
          "after a warm-up")
    print(f"  hand-written PySpark job       {words / base / 1e6:6.3f} M words/s")
    print(f"  Storm-shaped floor, no engine  {words / floor / 1e6:6.3f} M words/s   "
          f"ratio to the hand-written job {base / floor:6.1%}")
    if args.acking:
        acking = statistics.median(acking_times)
        print(f"  the floor with XOR acking      {words / acking / 1e6:6.3f} M words/s   "
              f"ratio to the hand-written job {base / acking:6.1%}")
        print(f"  floor acking on / off          {floor / acking:6.1%}")


if __name__ == "__main__":
    main()
