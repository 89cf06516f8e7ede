"""Spark 4.3's real-time mode: which of the Spark runner's building blocks does it accept?

Not part of squall (docs/design/real-time-mode.md): each case starts a query with
`trigger(realTime=...)` and says whether Spark refused it, or ran it and with what result.
The cases are the runner's own shapes: its Python data source (the spout reader), `mapInArrow`
stages, a repartition between stages, `foreachBatch` (the driver's one action per batch), and
the row-wise `foreach` sink real-time mode allows.

    .venv/bin/python benchmarks/spark_design/q6_real_time_mode.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import contextlib

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)


class Numbers(DataSource):
    """A Python streaming source like squall's spout reader: ten new rows per offset."""

    @classmethod
    def name(cls) -> str:
        return "numbers"

    def schema(self) -> str:
        return "v long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return NumbersReader()


class NumbersReader(DataSourceStreamReader):
    def __init__(self) -> None:
        self.n = 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.n += 10
        return {"n": self.n}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        a, b = partition.value
        for i in range(a, b):
            yield (i,)


class Drop:
    """A `foreach` writer that keeps nothing."""

    def process(self, row: Any) -> None:
        pass


def same(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def attempt(name: str, df: Any, sink: Any, scratch: str) -> None:
    query = None
    try:
        writer = (df.writeStream.outputMode("update").trigger(realTime="5 seconds")
                  .option("checkpointLocation", os.path.join(scratch, str(time.time_ns()))))
        query = sink(writer).start()
        time.sleep(8)
        error = query.exception()
        outcome = f"ran; {len(query.recentProgress)} batches" if error is None else (
            f"failed at run time: {str(error).splitlines()[0][:240]}")
    except Exception as exc:
        outcome = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:240]}"
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
    print(f"{name:45s} {outcome}", flush=True)


def main() -> None:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", 2).getOrCreate())
    spark.dataSource.register(Numbers)
    scratch = tempfile.mkdtemp(prefix="rtm-")
    py = spark.readStream.format("numbers").load()
    rate = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
    cases = [
        ("python source -> foreach", py, lambda w: w.foreach(Drop())),
        ("python source -> mapInArrow -> foreach", py.mapInArrow(same, py.schema),
         lambda w: w.foreach(Drop())),
        ("python source -> foreachBatch", py, lambda w: w.foreachBatch(lambda df, i: None)),
        ("rate source -> foreach", rate, lambda w: w.foreach(Drop())),
    ]
    for name, df, sink in cases:
        attempt(name, df, sink, scratch)
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
    attempt("python source -> foreachBatch (no allowlist)", py,
            lambda w: w.foreachBatch(lambda df, i: None), scratch)
    spark.stop()


if __name__ == "__main__":
    main()
