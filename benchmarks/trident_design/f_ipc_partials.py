"""F: how a worker's partial aggregates reach the driver: as Spark rows, or as one Arrow IPC
stream per partition in a single binary cell.

W2's partials are 1.26 M (window, word) rows. Returned by `mapInArrow` as ordinary columns, they
cross Spark's JVM twice (the worker's Arrow batches become rows, `toArrow` makes Arrow batches of
them again); serialised by the worker as one Arrow IPC stream in a `binary` column of one row,
the JVM only copies a buffer, and the driver reads the stream back without a copy. The same
question for W1's 10,000 (word) partials, where it should not matter.

Each round: the hand-written job of benchmarks.md for W2, then the floor of trident_w2.py with
the partials as rows (`rows`) and as IPC (`ipc`), each checked against the reference; and W1's
partial counts both ways. Figures are seconds per run, medians of the rounds after the first.

    .venv/bin/python benchmarks/trident_design/f_ipc_partials.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import common
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workloads import w1_sentences

SIZE = 10_000
W2_SCHEMA = "start long, word string, count_all long"


def _partials(batches, windows: bool) -> pa.Table | None:
    parts = []
    for rb in batches:
        words = pc.split_pattern(rb.column(0), " ")
        data = {"word": pc.list_flatten(words)}
        if windows:
            starts = pc.multiply(pc.divide(rb.column(1), SIZE), SIZE)
            data["start"] = pc.take(starts, pc.list_parent_indices(words))
        parts.append(pa.table(data))
    if not parts:
        return None
    keys = ["start", "word"] if windows else ["word"]
    return pa.concat_tables(parts).group_by(keys).aggregate([([], "count_all")])


def _blob(buf: pa.Buffer) -> pa.RecordBatch:
    """One binary cell holding `buf`, without copying it."""
    offsets = pa.array([0, buf.size], pa.int32()).buffers()[1]
    return pa.RecordBatch.from_arrays(
        [pa.Array.from_buffers(pa.binary(), 1, [None, offsets, buf])], ["ipc"])


def rows_w2(batches):
    t = _partials(batches, True)
    if t is not None:
        yield from t.select(["start", "word", "count_all"]).to_batches()


def _as_cell(t: pa.Table | None):
    if t is not None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        yield _blob(sink.getvalue())


def ipc_w2(batches):
    yield from _as_cell(_partials(batches, True))


def rows_w1(batches):
    t = _partials(batches, False)
    if t is not None:
        yield from t.select(["word", "count_all"]).to_batches()


def ipc_w1(batches):
    yield from _as_cell(_partials(batches, False))


def _read_blobs(t: pa.Table) -> pa.Table:
    return pa.concat_tables([pa.ipc.open_stream(v.as_buffer()).read_all()
                             for chunk in t.column("ipc").chunks for v in chunk])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sentences = w1_sentences(200_000)
    ts = [i * 10 for i in range(len(sentences))]
    ref2: Counter = Counter()
    ref1: Counter = Counter()
    for s, t in zip(sentences, ts, strict=True):
        for w in s.split(" "):
            ref2[(t - t % SIZE, w)] += 1
            ref1[w] += 1
    root = tempfile.mkdtemp(prefix="f-ipc-")
    pq.write_table(pa.table({"sentence": sentences, "ts": ts}),
                   os.path.join(root, "part-00000.parquet"), row_group_size=25_000)
    spark = common.session("f-ipc-partials")
    df = spark.read.parquet(root)
    df1 = spark.read.parquet(root).select("sentence")
    times: dict[str, list[float]] = {}

    def timed(name, fn, check):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        check(name, out)
        times.setdefault(name, []).append(dt)
        return dt

    def check2(name, t):
        got = {(s, w): n for s, w, n in zip(*(t.column(c).to_pylist() for c in (
            "start", "word", "count_all_sum")), strict=True)}
        common.check(name, got, dict(ref2))

    def check1(name, t):
        got = dict(zip(t.column("word").to_pylist(), t.column("count_all_sum").to_pylist(),
                       strict=True))
        common.check(name, got, dict(ref1))

    def combine(t, keys):
        return t.group_by(keys).aggregate([("count_all", "sum")])

    for rnd in range(1, args.rounds + 1):
        runs = {
            "W2 rows": (lambda: combine(df.mapInArrow(rows_w2, W2_SCHEMA).toArrow(),
                                        ["start", "word"]), check2),
            "W2 ipc": (lambda: combine(_read_blobs(df.mapInArrow(ipc_w2, "ipc binary").toArrow()),
                                       ["start", "word"]), check2),
            "W1 rows": (lambda: combine(df1.mapInArrow(rows_w1, "word string, count_all long")
                                        .toArrow(), ["word"]), check1),
            "W1 ipc": (lambda: combine(_read_blobs(df1.mapInArrow(ipc_w1, "ipc binary")
                                                   .toArrow()), ["word"]), check1),
        }
        line = [f"{name} {timed(name, fn, check):.3f}" for name, (fn, check) in runs.items()]
        print(f"round {rnd}: " + ", ".join(line), flush=True)
    print("\n| variant | seconds (median of rounds 2..) | M words/s |")
    print("|---|---|---|")
    for name, ts_ in times.items():
        med = statistics.median(ts_[1:])
        print(f"| {name} | {med:.3f} | {2_000_000 / med / 1e6:.2f} |")


if __name__ == "__main__":
    main()
