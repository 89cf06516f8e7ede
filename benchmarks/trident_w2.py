"""Trident W2 on Spark: per-word counts in tumbling 10 s event-time windows, the whole input as
one batch, interleaved in one session with a hand-written PySpark job.

W2 (docs/benchmarks.md): W1's sentences, sentence i at event time i * 10 ms, output
(window_start, word, count), 1,263,836 rows. Trident plan: `each(Split) -> group_by(word) ->
tumbling_window(10 s, Count)` over a `FileBatchSpout` of one parquet file (the windows' state is
the default durable opaque map; with the whole input as one batch every window opens and fires in
that batch). Split: the per-tuple `Function` (A) or the pyarrow `BatchFunction` (B). The
hand-written job reads the same file: Python split in `mapInArrow` emitting (window_start, word),
`repartition` by word, a dict count per partition in `mapInArrow`, `toArrow`. A Trident figure is
the driver's time for the transaction (`RunResult.extra["batch_seconds"]`); every run's output
is checked against a plain dict. A floor runs in the same rounds: the same file read, split and
counted per (window, word) in each Python worker by Arrow, the counts collected and combined by
Arrow on the driver; no window state and no Python rows, so no Trident plan can beat it.

    .venv/bin/python benchmarks/trident_w2.py [--sentences 200000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import spark_jobs
from trident_w1 import Split, SplitColumns  # the same two splits as W1
from workloads import w1_sentences

from squall.runtime.spark.trident import TridentSparkRunner
from squall.runtime.spark.trident.windows import count_by_codes
from squall.trident import (
    Count,
    FileBatchSpout,
    TridentTopology,
)

SIZE = 10_000


def topology(files, function):
    t = TridentTopology()
    (t.new_stream("sentences", FileBatchSpout(files, ["sentence", "ts"]))
     .each(["sentence"], function, ["word"]).group_by(["word"])
     .tumbling_window(SIZE, [], Count(), ["count"], timestamp_field="ts").name("windows"))
    return t.build()


def split_windows(batches):
    for rb in batches:
        words, starts = [], []
        for s, ts in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist(), strict=True):
            start = ts - ts % SIZE
            for w in s.split(" "):
                words.append(w)
                starts.append(start)
        yield pa.RecordBatch.from_arrays([pa.array(words, pa.string()),
                                          pa.array(starts, pa.int64())], ["word", "start"])


def count_windows(batches):
    d: Counter = Counter()
    for rb in batches:
        d.update(zip(rb.column(0).to_pylist(), rb.column(1).to_pylist(), strict=True))
    yield pa.RecordBatch.from_arrays(
        [pa.array([k[0] for k in d], pa.string()), pa.array([k[1] for k in d], pa.int64()),
         pa.array(list(d.values()), pa.int64())], ["word", "start", "count"])


def split_and_count_arrow(batches):
    """The floor's worker: the pyarrow split, each word's window start, and a count per
    (window start, word) over the whole partition by dictionary codes (squall's own
    `count_by_codes`, the fastest count found: docs/design/trident.md)."""
    parts = []
    for rb in batches:
        words = pc.split_pattern(rb.column(0), " ")
        ts = rb.column(1)
        starts = pc.multiply(pc.divide(ts, SIZE), SIZE)  # integer division: ts >= 0 here
        idx = pc.list_parent_indices(words)
        parts.append(pa.table({"ws": pc.take(starts, idx), "k0": pc.list_flatten(words),
                               "ts": pc.take(ts, idx)}))
    if parts:
        t = pa.concat_tables(parts)
        yield from count_by_codes(t, ["k0"], SIZE, t.column("ts"), None).to_batches()


def floor(spark, files):
    """What any plan must spend on W2 here: read, split and count per partition in the
    worker, collect the (window, word) counts and combine them on the driver. No window
    state, no Python rows."""
    t = (spark.read.parquet(files)
         .mapInArrow(split_and_count_arrow, "ws long, k0 string, v long, n long, max long")
         .toArrow())
    return count_by_codes(t, ["k0"], SIZE, t.column("max"), t.column("n"))


def hand_written(spark, files):
    t = (spark.read.parquet(files).mapInArrow(split_windows, "word string, start long")
         .repartition(spark_jobs.SHUFFLE_PARTITIONS, "word")
         .mapInArrow(count_windows, "word string, start long, count long").toArrow())
    return {(s, w): n for w, s, n in zip(*(t.column(i).to_pylist() for i in range(3)),
                                          strict=True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=4, help="the first is a warm-up")
    args = ap.parse_args()
    sentences = w1_sentences(args.sentences)
    ts = [i * 10 for i in range(len(sentences))]
    ref: Counter = Counter()
    for s, t in zip(sentences, ts, strict=True):
        for w in s.split(" "):
            ref[(t - t % SIZE, w)] += 1
    n_words = sum(ref.values())
    root = tempfile.mkdtemp(prefix="trident-w2-input-")
    pq.write_table(pa.table({"sentence": sentences, "ts": ts}),
                   os.path.join(root, "part-00000.parquet"), row_group_size=25_000)
    t0 = time.perf_counter()
    spark = spark_jobs.session("squall-trident-w2")
    print(f"# Trident W2: {len(sentences):,} sentences, {n_words:,} words, {len(ref):,} "
          f"(window, word) rows, one batch; Spark session {time.perf_counter() - t0:.1f} s",
          flush=True)
    variants = {"A per-tuple Split": Split(), "B BatchFunction split": SplitColumns()}
    times: dict[str, list[float]] = {n: [] for n in variants}
    ratios: dict[str, list[float]] = {n: [] for n in variants}
    base_times: list[float] = []
    floor_times: list[float] = []
    for rnd in range(1, args.rounds + 1):
        t1 = time.perf_counter()
        got = hand_written(spark, root)
        base = time.perf_counter() - t1
        spark_jobs.check("hand-written", got, dict(ref))
        t2 = time.perf_counter()
        t = floor(spark, root)
        floor_s = time.perf_counter() - t2
        spark_jobs.check("floor", {(s, w): n for s, w, n in zip(*(t.column(c).to_pylist() for c in (
            "ws", "k0", "n")), strict=True)}, dict(ref))
        line = [f"hand-written {base:.2f}s", f"floor {floor_s:.2f}s"]
        for name, function in variants.items():
            ckpt = tempfile.mkdtemp(prefix="trident-w2-")
            runner = TridentSparkRunner(topology(root, function), {}, capture=True,
                                        checkpoint_location=ckpt, session=spark)
            result = runner.run()
            rows = result.extra["outputs"]["windows"]
            spark_jobs.check(name, {(s, w): n for w, s, _, n in rows}, dict(ref))
            dt = sum(result.extra["batch_seconds"])
            timing = " ".join(f"{k} {v:.2f}" for k, v in result.extra["timing"].items())
            line.append(f"{name.split()[0]} {dt:.2f}s ({timing}) {n_words / dt / 1e6:.2f} M/s")
            if rnd > 1:
                times[name].append(dt)
                ratios[name].append(base / dt)
            shutil.rmtree(ckpt, ignore_errors=True)
        if rnd > 1:
            base_times.append(base)
            floor_times.append(floor_s)
        print(f"round {rnd}: " + ", ".join(line), flush=True)
    print(f"\nhand-written job: {n_words / statistics.median(base_times) / 1e6:.2f} M words/s; "
          f"floor: {n_words / statistics.median(floor_times) / 1e6:.2f} M words/s")
    print("| variant | M words/s (median) | ratio to the hand-written job: median (range) |")
    print("|---|---|---|")
    for name in variants:
        r = ratios[name]
        print(f"| {name} | {n_words / statistics.median(times[name]) / 1e6:.2f} | "
              f"{statistics.median(r):.0%} ({min(r):.0%}-{max(r):.0%}) |")


if __name__ == "__main__":
    main()
