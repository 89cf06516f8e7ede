"""`Reporting`: how every runner builds its `MetricsSnapshot` (a mixin, like `Controls`).

A runner gives its components' counters (`component_stats`), optionally its tasks'
(`task_counters`), its Spark batches (`batch_metrics`) and its errors; the snapshot's figures
and their definitions are `squall.metrics.snapshot`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from squall.metrics.snapshot import (
    BatchMetrics,
    ComponentMetrics,
    ErrorSummary,
    MetricsSnapshot,
)
from squall.results import METRIC_COUNTERS, ComponentStats, ErrorRecord


def error_summaries(errors: Iterable[ErrorRecord]) -> list[ErrorSummary]:
    """Per component and error kind: how many, and the latest's text; most frequent first."""
    counts: dict[tuple[str, str], list[Any]] = {}
    for e in errors:
        key = (e.component, type(e.error).__name__)
        entry = counts.setdefault(key, [0, ""])
        entry[0] += 1
        entry[1] = str(e.error)
    return [ErrorSummary(c, k, n, last) for (c, k), (n, last)
            in sorted(counts.items(), key=lambda item: -item[1][0])]


class Reporting:
    """`metrics()` for a runner with `component_stats()`, `status()` and `errors`."""

    runner_name = "local"
    errors: list[ErrorRecord]
    _began: float | None = None  # when `run` started (monotonic), for the live elapsed time
    _elapsed_before_ms = 0

    def component_stats(self) -> dict[str, ComponentStats]:
        raise NotImplementedError

    def status(self) -> str:
        raise NotImplementedError

    def task_counters(self) -> Iterable[tuple[int, Mapping[str, int]]]:
        """Each task's counters, when the runner keeps them per task."""
        return ()

    def batch_metrics(self) -> list[BatchMetrics]:
        return []

    def mark_run_started(self) -> None:
        self._began = time.monotonic()

    def elapsed_now_ms(self) -> int:
        """Time since `run` started, while it runs; its whole duration afterwards (the
        runner's `elapsed_ms`, which it sets when `run` ends and clears `_began`)."""
        if self._began is None:
            return int(getattr(self, "elapsed_ms", 0))
        return int((time.monotonic() - self._began) * 1000)

    def metrics(self) -> MetricsSnapshot:
        components = {cid: s.to_metrics() for cid, s in self.component_stats().items()}
        for task, counters in self.task_counters():
            cid = self._component_of(task)
            parent = components[cid]
            per = parent.per_task.get(task)
            if per is None:
                per = parent.per_task[task] = ComponentMetrics(cid, parent.kind, 1)
            for name in METRIC_COUNTERS:
                value = counters.get(name)
                if value:
                    setattr(per, name, getattr(per, name) + value)
        return MetricsSnapshot(
            runner=self.runner_name, status=self.status(), elapsed_ms=self.elapsed_now_ms(),
            components=components, batches=self.batch_metrics(),
            errors=error_summaries(self.errors))

    def _component_of(self, task: int) -> str:
        return self.topology.task_component(task)  # type: ignore[attr-defined]
