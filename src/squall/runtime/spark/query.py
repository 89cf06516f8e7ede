"""The streaming query both Spark runners drive, and the routing keys their stages shuffle by.

A runner registers a Python data source, and `drive_query` runs `source -> foreachBatch(batch)`
until the runner is done, its duration is over or it waited long enough, reporting progress on
the way; `SparkRunner` and `TransactionalSparkRunner` differ only in the source and the batch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from pyspark.sql import functions as F

from squall.errors import SquallError
from squall.metrics.snapshot import BatchMetrics, MetricsSnapshot
from squall.runtime.lifecycle import Lifecycle

TRIGGER_MS = "squall.spark.trigger.ms"


class QueryOwner(Protocol):
    """What `drive_query` needs of a runner, and what it sets on it."""

    spark: Any  # the SparkSession
    dir: str  # the checkpoint location (Spark's own checkpoint goes under `query/`)
    conf: Any  # the effective configuration (a Config)
    query: Any  # set by drive_query: the running StreamingQuery
    stopping: bool  # set by drive_query before it stops the query
    failure: SquallError | None  # why the runner stopped its query, if it did
    lifecycle: Lifecycle  # the operator's requests (squall.runtime.lifecycle)

    def apply_activation(self, active: bool) -> None:
        """Tell the spouts' reader to pull them (True) or not (False)."""

    def drained(self) -> bool:
        """Nothing is in flight: a requested stop may stop the query now."""

    def metrics(self) -> MetricsSnapshot:
        """What `on_progress` receives (squall.runtime.reporting)."""


def drive_query(
    runner: QueryOwner,
    source: str,
    batch: Callable[[Any, int], None],
    *,
    done: Callable[[], bool],
    started: float,
    duration_ms: int | None,
    max_wait_ms: int | None,
    on_progress: Callable[[MetricsSnapshot], None] | None,
    progress_every_ms: int,
) -> None:
    """Run the query `source` -> `foreachBatch(batch)` of a runner until `done()`, `duration_ms`
    or `max_wait_ms` (counted from `started`, a `time.monotonic()`), or until a stop the operator
    requested (`runner.lifecycle`) finds the runner `drained()` or is overdue, then stop it.

    `on_progress` receives the runner's `metrics()` every `progress_every_ms`. A failed query
    raises the runner's `failure` if it set one, else a `SquallError` with Spark's reason.
    """
    began = time.monotonic()
    reader = runner.spark.readStream.format(source).option("dir", runner.dir).load()
    trigger_ms = int(runner.conf.get(TRIGGER_MS) or 0)
    query = (
        reader.writeStream.foreachBatch(batch)
        .option("checkpointLocation", os.path.join(runner.dir, "query"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    runner.query = query
    startup = getattr(runner, "startup", None)  # squall.metrics.snapshot.MetricsSnapshot
    if isinstance(startup, dict):
        startup.setdefault("query_ms", int((time.monotonic() - began) * 1000))
    next_progress = progress_every_ms
    life = runner.lifecycle
    applied = True  # the reader starts with its spouts active
    try:
        while query.isActive:
            if life.active != applied:
                applied = life.active
                runner.apply_activation(applied)
            try:
                query.awaitTermination(0.05)
            except Exception:
                break  # the query failed: query.exception() below says why
            elapsed = int((time.monotonic() - started) * 1000)
            if on_progress is not None and elapsed >= next_progress:
                on_progress(runner.metrics())
                next_progress = elapsed + progress_every_ms
            if done():
                break
            if life.stop_requested and life.should_stop(runner.drained()):
                break
            if duration_ms is not None and elapsed >= duration_ms:
                break
            if max_wait_ms is not None and elapsed >= max_wait_ms:
                break
    finally:
        runner.stopping = True  # a batch waiting to run again gives up (uncommitted)
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        # The runner's own error, when it stopped the query on purpose, says it best.
        raise runner.failure or SquallError(f"the Spark query failed: {error}") from None


def routing_keys(spark: Any, n: int) -> list[int]:
    """For each partition index t < n, a long whose Spark hash lands in partition t.

    `repartition(n, col)` places a row by pmod(murmur3(col), n); routing by these keys makes
    partition t receive exactly the rows of task index t (measured in docs/design/spark-runner.md).
    """
    span = 64 * n
    while True:
        rows = (
            spark.range(0, span)
            .select(F.col("id"), F.expr(f"pmod(hash(id), {n})").alias("p"))
            .groupBy("p").agg(F.min("id").alias("k")).collect()
        )
        found = {int(r["p"]): int(r["k"]) for r in rows}
        if len(found) == n:
            return [found[t] for t in range(n)]
        span *= 4



RECENT_BATCHES = 20  # how many of Spark's recent progress reports a snapshot carries


def batch_metrics(query: Any) -> list[BatchMetrics]:
    """The recent micro-batches as Spark reported them (`StreamingQueryProgress`, what a
    `StreamingQueryListener` receives): duration, input rows, planning and processing time."""
    if query is None:
        return []
    out = []
    for progress in list(query.recentProgress)[-RECENT_BATCHES:]:
        p = json.loads(progress.json) if hasattr(progress, "json") else dict(progress)
        d = p.get("durationMs") or {}
        out.append(BatchMetrics(
            batch_id=int(p.get("batchId", -1)),
            duration_ms=int(d.get("triggerExecution", 0)),
            input_rows=int(p.get("numInputRows", 0)),
            planning_ms=int(d.get("latestOffset", 0)) + int(d.get("getBatch", 0))
            + int(d.get("queryPlanning", 0)),
            processing_ms=int(d.get("addBatch", 0)),
            timestamp=str(p.get("timestamp", "")),
        ))
    return out
