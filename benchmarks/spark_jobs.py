"""The Spark pieces the Trident benchmarks share: their session, the hand-written PySpark W1 job
they are measured against (docs/benchmarks.md), and a Trident-shaped per-tuple `each`
with nothing of squall's in it (the floor of a per-tuple split in `mapInArrow`).

- `session(app)`: `local[2]`, two shuffle partitions, AQE off (as squall's Spark runner), UI off.
- `baseline_plan(df)`: the hand-written job: Python split in `mapInArrow`, `repartition` by word,
  a dict count per partition in `mapInArrow`; `(word, count)` rows.
- `each_per_tuple(Split(), ...)`: Storm's Trident `Split` called per sentence with a tuple and a
  collector appending to a column list; `split_vectorised`: the same split by pyarrow.compute.
- `table_counts`, `check`: a job's counts as a dict, checked against the reference.

The functions here run in Spark's Python workers, which do not have this folder on their path:
they are shipped by value.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# PySpark pickles with its own copy of cloudpickle, so register there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHUFFLE_PARTITIONS = 2
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # as squall's Spark runner: no adaptive coalescing, one partition per task
    "spark.sql.adaptive.enabled": "false",
}

Batches = Iterable[pa.RecordBatch]


def session(app: str) -> Any:
    """The benchmarks' Spark session (`getOrCreate`: a running one with these settings is
    reused); prints its start-up time."""
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master("local[2]").appName(app)
    for k, v in SESSION_CONF.items():
        b = b.config(k, v)
    t0 = time.perf_counter()
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"# session start {time.perf_counter() - t0:.1f} s (local[2], pyspark {spark.version}, "
          f"shuffle partitions {SHUFFLE_PARTITIONS}, AQE off)", flush=True)
    return spark


def table_counts(t: pa.Table) -> dict[Any, Any]:
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))


def check(name: str, counts: dict[Any, Any], ref: dict[Any, Any]) -> None:
    if counts != ref:
        raise AssertionError(f"{name}: counts differ from the reference ({len(counts)} words, "
                             f"{sum(counts.values())} in all)")


# ---- the hand-written job --------------------------------------------------------------------
def b_split(batches: Batches) -> Iterator[pa.RecordBatch]:
    for rb in batches:
        words = [w for s in rb.column(0).to_pylist() for w in s.split()]
        yield pa.RecordBatch.from_arrays([pa.array(words, pa.string())], ["word"])


def b_count(batches: Batches) -> Iterator[pa.RecordBatch]:
    d: dict[str, int] = {}
    for rb in batches:
        for w in rb.column(0).to_pylist():
            d[w] = d.get(w, 0) + 1
    yield pa.RecordBatch.from_arrays(
        [pa.array(list(d.keys()), pa.string()), pa.array(list(d.values()), pa.int64())],
        ["word", "count"],
    )


def baseline_plan(df: Any) -> Any:
    """The hand-written job: Python split in mapInArrow, repartition by word, dict per partition."""
    return (df.mapInArrow(b_split, "word string").repartition(SHUFFLE_PARTITIONS, "word")
            .mapInArrow(b_count, "word string, count long"))


# ---- a Trident-shaped per-tuple each, without squall -----------------------------------------
class TridentTuple:
    """The per-tuple view a user Function gets (values by position, like Storm's TridentTuple)."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def get_value(self, i: int) -> Any:
        return self.values[i]

    def get_string(self, i: int) -> Any:
        return self.values[i]


class ColumnCollector:
    """Trident's TridentCollector for one output field set: emit() appends to column lists."""

    __slots__ = ("cols", "emit")

    def __init__(self, n_fields: int) -> None:
        self.cols: list[list[Any]] = [[] for _ in range(n_fields)]
        self.emit: Callable[[list[Any]], None]
        if n_fields == 1:
            col = self.cols[0]
            self.emit = lambda values: col.append(values[0])
        else:
            cols = self.cols

            def emit(values: list[Any]) -> None:
                for c, v in zip(cols, values, strict=True):
                    c.append(v)

            self.emit = emit


class Split:
    """Storm's Trident word-count Split, as a user would write it (per tuple)."""

    def execute(self, tup: TridentTuple, collector: ColumnCollector) -> None:
        for word in tup.get_string(0).split(" "):
            collector.emit([word])


def each_per_tuple(fn: Split, in_col: int, out_names: list[str],
                   out_types: list[pa.DataType]) -> Callable[[Batches], Iterator[pa.RecordBatch]]:
    """`each(Fields(in), fn, Fields(out))` as a mapInArrow function: a Python loop per Arrow batch
    calling fn.execute(tuple, collector) for every input tuple; only the output columns are
    kept, as the W1 stream projects to the word."""

    def run(batches: Batches) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            col = ColumnCollector(len(out_names))
            execute = fn.execute
            for v in rb.column(in_col).to_pylist():
                execute(TridentTuple((v,)), col)
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, t) for c, t in zip(col.cols, out_types, strict=True)], out_names)

    return run


def split_vectorised(batches: Batches) -> Iterator[pa.RecordBatch]:
    """A batch function: the whole sentence column split with pyarrow.compute, no Python loop."""
    for rb in batches:
        words = pc.list_flatten(pc.split_pattern(rb.column(0), " "))
        yield pa.RecordBatch.from_arrays([words], ["word"])
