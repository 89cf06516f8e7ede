"""Batch cuts the runner variants use, and topology runs shared by the tests of a module."""

from __future__ import annotations

from typing import Any

MAX_TUPLES = "squall.spark.batch.max.tuples"
# A Spark micro-batch per tuple; every batch fills, so the spouts' reader plans the next one
# while one runs (squall.spark.plan.ahead, off by default, is exercised here).
ONE_TUPLE = {MAX_TUPLES: 1, "squall.spark.plan.ahead": True}
ONE_BATCH = {MAX_TUPLES: 1_000_000}  # a micro-batch takes whatever input is ready

RUN_CACHE: dict[tuple[str, Any, str], object] = {}


def complete_cached(request: Any, key: Any, runner: str, build: Any, conf: dict) -> object:
    """`complete_topology(build(), conf, runner=runner)`, run once per (test module, key, runner).

    Modules that read one rich topology from several tests share its run; a Spark run takes
    the module's `spark_session` fixture first.
    """
    from squall.testing import complete_topology

    cache_key = (request.module.__name__, key, runner)
    if cache_key not in RUN_CACHE:
        if runner == "spark":
            request.getfixturevalue("spark_session")
        RUN_CACHE[cache_key] = complete_topology(build(), conf, runner=runner)
    return RUN_CACHE[cache_key]
