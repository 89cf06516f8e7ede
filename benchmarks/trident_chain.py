"""Trident W1's per-tuple split in the Spark worker's chain, in one process, without Spark.

    .venv/bin/python benchmarks/trident_chain.py [--sentences 100000] [--runs 7]

What a Python worker does with one Arrow batch of W1 sentences in `mapInArrow` for the per-tuple
variants of benchmarks/trident_w1.py: A (`Split`, its words one tagged column for the JVM's
count), At (`Split` declaring `output_types = {"word": str}`, one string column), and a bare
per-tuple `each` (benchmarks/spark_jobs.py: a plain tuple object per row, emits appended to a
column list, no type checks) as the floor. Prints the median seconds
per batch of each; every run's word count is checked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import spark_jobs
from trident_w1 import Split, TypedSplit
from workloads import w1_sentences

from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident.chain import _Chain
from squall.trident.plan import RowNode, RowOp


def chain(function: Split, tagged: bool) -> _Chain:
    """The worker chain Trident ships for `each(["sentence"], function, ["word"])` followed by
    `group_by(["word"])` and a JVM `Count` (partial aggregation off)."""
    node = RowNode(cid="each-1", parents=("spout",), fields=("sentence", "word"),
                   row_op=RowOp.EACH, input=("sentence",), output=("word",), op=function)
    types = {"word": cols.TAGGED} if tagged else {"word": "s"}
    return _Chain([node], ("sentence",), ("word",), {}, 1, types=types)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split(" ")) for s in sentences)
    # A file's column reaches the chain as the field's typed column (`sentence#s`).
    typed = pa.RecordBatch.from_arrays([pa.array(sentences, pa.string())], ["sentence#s"])
    plain = pa.RecordBatch.from_arrays([pa.array(sentences, pa.string())], ["sentence"])
    variants = {
        "A (Split, tagged word)": (chain(Split(), tagged=True), typed),
        "At (Split declaring str)": (chain(TypedSplit(), tagged=False), typed),
        "bare per-tuple each": (
            spark_jobs.each_per_tuple(spark_jobs.Split(), 0, ["word"], [pa.string()]), plain),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.runs):
        for name, (fn, batch) in variants.items():
            t0 = time.perf_counter()
            out = list(fn(iter([batch])))
            times[name].append(time.perf_counter() - t0)
            if sum(b.num_rows for b in out) != words:
                raise AssertionError(f"{name}: {sum(b.num_rows for b in out)} words, "
                                     f"expected {words}")
    print(f"# {args.sentences:,} W1 sentences ({words:,} words) in one Arrow batch, "
          f"median of {args.runs}")
    for name, ts in times.items():
        print(f"  {name}: {statistics.median(ts):.3f} s")


if __name__ == "__main__":
    main()
