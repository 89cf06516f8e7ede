"""The streaming query both Spark runners drive, and the routing keys their stages shuffle by.

A runner registers a Python data source, and `drive_query` runs `source -> foreachBatch(batch)`
until the runner is done, its duration is over or its caller says stop, reporting progress on
the way; `SparkRunner` and `TransactionalSparkRunner` differ only in the source and the batch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from squall.errors import SquallError
from squall.metrics.snapshot import BatchMetrics, MetricsSnapshot
from squall.murmur3 import hash_long
from squall.runtime.lifecycle import Lifecycle

TRIGGER_MS = "squall.spark.trigger.ms"

log = logging.getLogger("squall")


class StoppedInBatch(SquallError):
    """The run was stopped while a batch's job ran or waited to run again: the stop cancelled
    it, nothing of it is committed, and a restart on the same checkpoint location runs it
    again. A batch raises it (a batch function that returned would let Spark log the batch as
    done); `drive_query` ends the run without an error."""

# A micro-batch per trigger from Spark's own `rate-micro-batch` source (one row, one partition),
# for a runner whose driver decides each batch's input itself (Trident): nothing is read from
# it, and unlike a Python data source it starts no Python process (a Python source cost 5-10 s
# before the first batch, twice a worker's start-up and imports, against 0.2-0.4 s).
TICKS = ("rate-micro-batch", {"rowsPerBatch": "1", "numPartitions": "1"})


class QueryOwner(Protocol):
    """What `drive_query` needs of a runner, and what it sets on it."""

    spark: Any  # the SparkSession
    dir: str  # the checkpoint location (Spark's own checkpoint goes under `query/`)
    config: Any  # the run's configuration (a RunConfig: `config.effective` is read)
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
    should_stop: Callable[[], bool] | None,
    on_progress: Callable[[MetricsSnapshot], None] | None,
    progress_every_ms: int,
    finish_last_trigger: Callable[[], int] | None = None,
    options: dict[str, str] | None = None,
    query_dir: str = "query",
) -> None:
    """Run the query `source` -> `foreachBatch(batch)` of a runner until `done()`, `duration_ms`
    (counted from `started`, a `time.monotonic()`) or `should_stop()` (called at every poll of
    the query, about every 50 ms), or until a stop the operator requested (`runner.lifecycle`)
    finds the runner `drained()` or is overdue, then stop it.

    `on_progress` receives the runner's `metrics()` every `progress_every_ms`. A failed query
    raises the runner's `failure` if it set one, else a `SquallError` with Spark's reason.
    `finish_last_trigger`: once `done()`, the trigger that ran the batch id it returns (the
    input's last) reports its progress before the stop. `options` are the source's (default: the
    runner's `dir`), and Spark's checkpoint of the query goes under `query_dir` in `runner.dir`.
    """
    began = time.monotonic()
    reader = runner.spark.readStream.format(source) \
        .options(**(options if options is not None else {"dir": runner.dir})).load()
    trigger_ms = int(runner.config.effective.get(TRIGGER_MS) or 0)
    query = (
        reader.writeStream.foreachBatch(batch)
        .option("checkpointLocation", os.path.join(runner.dir, query_dir))
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
    finished = False
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
                finished = True
                break
            if life.stop_requested and life.should_stop(runner.drained()):
                break
            if duration_ms is not None and elapsed >= duration_ms:
                break
            if should_stop is not None and should_stop():
                break
    finally:
        if finished and finish_last_trigger is not None:
            _let_trigger_finish(query, finish_last_trigger())
        runner.stopping = True  # a batch waiting to run again gives up (uncommitted)
        stopped = query.isActive  # stopped here, not ended by an error of its own
        if stopped:
            query.stop()
    error = query.exception()
    if error is not None and stopped and runner.failure is None:
        # What the stop cancelled (the batch in flight) is not committed: not a failure.
        log.info("the run stopped during a batch: nothing of it was committed; a restart on "
                 "the same checkpoint location runs it again")
        return
    if error is not None:
        # The runner's own error, when it stopped the query on purpose, says it best.
        raise runner.failure or SquallError(f"the Spark query failed: {error}") from None


def _let_trigger_finish(query: Any, batch_id: int, wait_s: float = 10.0) -> None:
    """The batch that ended the input has run (`foreachBatch` returned): let its trigger end
    and report the batch's progress before the query stops, or the last batch is missing from
    Spark's `recentProgress` (and from the run's batch figures). Waits for the progress of
    `batch_id`, at most `wait_s`."""
    deadline = time.monotonic() + wait_s
    while query.isActive and time.monotonic() < deadline:
        try:
            progress = query.lastProgress
        except Exception:  # the query is stopping or gone: nothing to wait for
            return
        if progress is not None and int(progress["batchId"]) >= batch_id:
            return
        time.sleep(0.02)


def routing_keys(n: int) -> list[int]:
    """For each partition index t < n, a long whose Spark hash lands in partition t: the
    smallest such non-negative long.

    `repartition(n, col)` places a row by pmod(murmur3(col), n); routing by these keys makes
    partition t receive exactly the rows of task index t (measured in docs/design/spark-runner.md;
    tests/integration/test_spark_errors.py checks the keys against Spark's own hash). Computed
    here rather than by a Spark job per component, which cost start-up seconds.

    >>> routing_keys(3)
    [3, 0, 1]
    """
    found: dict[int, int] = {}
    key = 0
    while len(found) < n:
        found.setdefault(hash_long(key) % n, key)  # Python's % is pmod for n > 0
        key += 1
    return [found[t] for t in range(n)]


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
