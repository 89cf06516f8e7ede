"""Q1b: cost of the anchors column through mapInArrow -> shuffle -> mapInArrow, by representation.

    /work/main/.venv/bin/python benchmarks/spark_design/q1b_anchor_column.py [--rows 2000000]

A first mapInArrow emits `--rows` rows (word string + anchors) from a 2-partition range, Spark
repartitions by word, a second mapInArrow reads the anchors column (to_pylist) and emits a count.
Only the anchors representation changes:
  none           : no anchors column (reference, ratio 1.00)
  list<struct> x1: one {root, edge} per row (anchored tuple with one root)
  list<struct> []: empty list per row
  list<struct> null: null per row (unanchored tuple)
  flat root/edge : two int64 columns (single-root fast path), null when unanchored
Each variant is timed twice; the second run is reported with its ratio to `none` of the same round.
"""

import argparse

import common
import pyarrow as pa

ANCH = pa.list_(pa.struct([("root", pa.int64()), ("edge", pa.int64())]))
VOCAB = common.vocabulary()


def producer(kind, rows_per_task):
    def run(batches):
        import random

        for _ in batches:
            pass
        rnd = random.Random(1)
        done = 0
        while done < rows_per_task:
            n = min(10000, rows_per_task - done)
            words = [VOCAB[rnd.randrange(10000)] for _ in range(n)]
            cols = {"word": pa.array(words, pa.string())}
            if kind == "list<struct> x1":
                cols["anchors"] = pa.array([[{"root": i, "edge": i * 3}] for i in range(n)], ANCH)
            elif kind == "list<struct> []":
                cols["anchors"] = pa.array([[] for _ in range(n)], ANCH)
            elif kind == "list<struct> null":
                cols["anchors"] = pa.array([None] * n, ANCH)
            elif kind == "flat root/edge":
                cols["root"] = pa.array(list(range(n)), pa.int64())
                cols["edge"] = pa.array([i * 3 for i in range(n)], pa.int64())
            done += n
            yield pa.RecordBatch.from_pydict(cols)

    return run


def consumer(kind):
    def run(batches):
        n = 0
        for rb in batches:
            if kind == "flat root/edge":
                rb.column("root").to_pylist()
                rb.column("edge").to_pylist()
            elif kind != "none":
                rb.column("anchors").to_pylist()
            n += rb.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return run


SCHEMAS = {
    "none": "word string",
    "list<struct> x1": "word string, anchors array<struct<root:bigint,edge:bigint>>",
    "list<struct> []": "word string, anchors array<struct<root:bigint,edge:bigint>>",
    "list<struct> null": "word string, anchors array<struct<root:bigint,edge:bigint>>",
    "flat root/edge": "word string, root bigint, edge bigint",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000000)
    args = ap.parse_args()
    common.header(
        "Q1b anchors column representations, %d rows through mapInArrow -> repartition(word) -> mapInArrow"
        % args.rows
    )
    spark = common.spark_session()
    src = spark.range(0, 2, numPartitions=2)
    for rnd in (1, 2):
        base = None
        for kind in SCHEMAS:
            df = (
                src.mapInArrow(producer(kind, args.rows // 2), SCHEMAS[kind])
                .repartition(2, "word")
                .mapInArrow(consumer(kind), "n long")
            )
            dt, rows = common.timed(df.collect)
            assert sum(r.n for r in rows) == args.rows
            base = base or dt
            print("round %d %-18s %6.2f s  ratio to none %.2f" % (rnd, kind, dt, base / dt))
    spark.stop()


if __name__ == "__main__":
    main()
