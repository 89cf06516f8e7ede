"""The Python workers of squall's Spark sessions are forked from squall's preloading daemon."""

from __future__ import annotations

import gc
import sys

import pyarrow as pa
import pytest


@pytest.mark.spark
def test_workers_start_from_squalls_daemon_with_the_stage_modules_loaded(spark_session):
    def where_forked(batches):
        """The module the worker's process was started as, its frozen objects, its modules."""
        for _ in batches:
            pass
        main = sys.modules["__main__"].__spec__
        yield pa.RecordBatch.from_pydict({
            "daemon": [main.name if main is not None else ""],
            "frozen": [gc.get_freeze_count()],
            "stage_loaded": ["squall.runtime.spark.stage" in sys.modules],
        })

    rows = spark_session.range(4, numPartitions=2).mapInArrow(
        where_forked, "daemon string, frozen long, stage_loaded boolean").collect()
    assert len(rows) == 2
    for row in rows:
        assert row.daemon == "squall.runtime.spark.worker_daemon"
        assert row.frozen > 10_000  # the daemon's loaded modules, frozen before the fork
        assert row.stage_loaded
