"""`Reporting`: how every runner builds its `MetricsSnapshot` (a mixin, like `Controls`).

A runner gives its components' counters (`component_stats`), optionally its tasks'
(`task_counters`), its Spark batches (`batch_metrics`) and its errors; the snapshot's figures
and their definitions are `squall.metrics.snapshot`'s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.components.partitioned_source import MALFORMED
from squall.metrics.histogram import LatencyHistogram
from squall.metrics.snapshot import (
    BatchMetrics,
    ComponentMetrics,
    ErrorSummary,
    Latency,
    MetricsSnapshot,
)
from squall.metrics.user import merge_partial, value_of
from squall.protocols import Progress
from squall.results import METRIC_COUNTERS, ComponentStats, ErrorRecord, RunResult
from squall.state.base import KeyValueState

CAPACITY_WINDOW_MS = 10_000

HISTOGRAMS = ("complete_latency", "execute_latency", "process_latency")
# Figures beside the counters; the gauges are a task's value now, not a count: a runner that
# reports per batch keeps each task's latest.
MERGED = (*HISTOGRAMS, "streams", "user_metrics", "late", "in_windows", "state_size")
GAUGES = ("in_windows", "state_size")


def task_figures(task: Any, per_batch: bool = False) -> dict[str, Any]:
    """A task's figures beside its counters, as a runner adds them: per-stream counts, a
    spout's complete latency, a bolt's execute and process latencies, its registered metrics
    (since the last call when `per_batch`, else since it started), tuples late and held in
    windows (plain data)."""
    out: dict[str, Any] = {"streams": {r.stream: r.emitted for r in task.routes.values()
                                       if r.emitted}}
    if task.context.registered_metrics:
        out["user_metrics"] = task.metric_partials() if per_batch else task.metric_totals()
    checkpointing = getattr(task, "checkpointing", None)
    state = None if checkpointing is None else checkpointing.state
    if isinstance(state, KeyValueState):
        size = state.size()
        if size is not None:
            out["state_size"] = size  # a gauge
    window = getattr(task, "window", None)
    if window is not None:
        out["late"] = window.late_count
        if per_batch:
            window.late_count = 0
        held = window.held()
        if held is not None:
            out["in_windows"] = held  # a gauge: a runner keeps each task's latest
    latency = getattr(task, "complete_latency", None)
    if latency is not None:
        out["complete_latency"] = latency.state()
    times = getattr(task, "times", None)
    if times is not None:
        out["execute_latency"] = times.execute.state()
        out["process_latency"] = times.process.state()
    return out


def merge_counters(into: dict[str, Any], counters: Mapping[str, Any]) -> None:
    """Add a task's `counters` into `into`: numbers summed, histograms merged, per-stream
    counts summed by stream (a task reports once per batch on Spark)."""
    for key, value in counters.items():
        if isinstance(value, dict):
            if key == "user_metrics":
                mine = into.setdefault(key, {})
                for name, partial in value.items():
                    mine[name] = merge_partial(mine.get(name), partial)
            elif key in HISTOGRAMS:
                mine = into.get(key)
                if mine is None:
                    into[key] = dict(value, buckets=dict(value["buckets"]))
                else:
                    h = LatencyHistogram.from_state(mine)
                    h.merge(LatencyHistogram.from_state(value))
                    into[key] = h.state()
            else:
                sub = into.setdefault(key, {})
                for k, v in value.items():
                    sub[k] = sub.get(k, 0) + v
        else:
            into[key] = into.get(key, 0) + value


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

    def batch_executed(self) -> Mapping[int, int]:
        """Per Spark batch id, the tuples its bolts executed (runners with Spark batches)."""
        return {}

    def _batches(self) -> list[BatchMetrics]:
        """Spark's recent batches, each with the tuples executed in it when known."""
        executed = self.batch_executed()
        return [dataclasses.replace(b, executed=executed.get(b.batch_id))
                for b in self.batch_metrics()]

    _ended_ms: int | None = None  # the run's elapsed time, frozen when it ended
    elapsed_ms = 0  # the last run's duration (monotonic time), set when it ends

    def result(self) -> RunResult:
        raise NotImplementedError

    def run_bracket(self, drive: Callable[[float], None], *,
                    close: Callable[[], None] | None = None,
                    on_progress: Progress | None = None) -> RunResult:
        """The frame of every runner's `run`: the elapsed time starts, `drive(started)` runs
        the topology (`started`: `time.monotonic()` when the run began), `close()` runs however
        `drive` ended, the elapsed time stops, `on_progress` gets the last snapshot (whose status
        is `finished`), and the result is returned."""
        started = time.monotonic()
        self._began, self._ended_ms = started, None
        try:
            drive(started)
        finally:
            if close is not None:
                close()
            self.elapsed_ms = int((time.monotonic() - started) * 1000)
            self._began = None  # elapsed_now_ms: the run's duration from now on
        self.mark_run_ended()
        if on_progress is not None:
            on_progress(self.metrics())
        return self.result()

    def mark_run_ended(self) -> None:
        """`run` is returning: elapsed time stops, and the status says `finished`."""
        self._ended_ms = None
        self._ended_ms = self.elapsed_now_ms()

    def elapsed_now_ms(self) -> int:
        """Time since `run` started, while it runs; its whole duration afterwards."""
        if self._ended_ms is not None:
            return self._ended_ms
        return self._live_elapsed_ms()

    def _live_elapsed_ms(self) -> int:
        # The Spark runners set `_began` when `run` starts, and `elapsed_ms` (clearing
        # `_began`) when it ends.
        if self._began is None:
            return int(getattr(self, "elapsed_ms", 0))
        return int((time.monotonic() - self._began) * 1000)

    def run_status(self) -> str:
        return "finished" if self._ended_ms is not None else self.status()

    def metrics(self) -> MetricsSnapshot:
        elapsed = self.elapsed_now_ms()
        components = {cid: s.to_metrics() for cid, s in self.component_stats().items()}
        merged: dict[str, dict[str, Any]] = {cid: {} for cid in components}
        per_task: dict[int, dict[str, Any]] = {}
        for task, counters in self.task_counters():
            merge_counters(per_task.setdefault(task, {}), counters)
        for task, counters in per_task.items():
            cid = self._component_of(task)
            parent = components[cid]
            parent.per_task[task] = _figures(ComponentMetrics(cid, parent.kind, 1), counters)
            merge_counters(merged[cid], {k: v for k, v in counters.items() if k in MERGED})
        user: dict[str, dict[str, Any]] = {}
        for cid, counters in merged.items():
            _figures(components[cid], counters, counts=False)
            if counters.get("user_metrics"):
                user[cid] = {name: value_of(p) for name, p in counters["user_metrics"].items()}
        self._capacities(components, elapsed)
        errors = error_summaries(self.errors)
        if self.carried is not None:
            elapsed += self.carried.elapsed_ms
            for cid, c in components.items():
                before = self.carried.components.get(cid)
                if before is not None:
                    carry_counters(c, before)
            errors = carry_errors(errors, self.carried.errors)
        return MetricsSnapshot(
            runner=self.runner_name, status=self.run_status(), elapsed_ms=elapsed,
            components=components, batches=self._batches(),
            errors=errors, user_metrics=user, restarted=self.restarted,
            startup=dict(getattr(self, "startup", {})))

    # The last snapshot of the same `squall run`'s previous start, when a rebalance started the
    # topology again: its counters, errors and elapsed time continue in this runner's.
    carried: MetricsSnapshot | None = None

    def carry(self, before: MetricsSnapshot) -> None:
        """Count on from `before`, the last snapshot of the previous start of the same run (a
        rebalance stops the topology and starts it again on its checkpoint): every counter,
        per-stream count and error count, and the elapsed time, is the run's total, not this
        start's. Gauges, latencies, capacity, per-task figures and a component's own metrics
        are this start's (its tasks are new ones)."""
        self.carried = before

    restarted = False  # set by a runner that resumed a checkpoint: counters are this run's

    def _component_of(self, task: int) -> str:
        return self.topology.task_component(task)  # type: ignore[attr-defined]

    def _capacities(self, components: dict[str, ComponentMetrics], elapsed: int) -> None:
        """Storm's capacity: the share of the recent past (up to `CAPACITY_WINDOW_MS`; Storm's
        is 10 minutes) that a bolt's tasks spent executing (executed x mean execute latency),
        averaged over its tasks. Reference points are kept at most one a second, so every caller
        (progress, Prometheus, the UI, at any rate) sees the same window."""
        lock = self.__dict__.setdefault("_capacity_lock", threading.Lock())
        with lock:
            history: dict[str, deque[tuple[int, float]]] = self.__dict__.setdefault(
                "_busy_history", {})
            for cid, c in components.items():
                if c.kind != "bolt" or c.execute_latency is None:
                    continue
                busy = c.executed * c.execute_latency.mean_ms
                points = history.setdefault(cid, deque([(0, 0.0)]))  # the run's start: idle
                while len(points) > 1 and points[1][0] <= elapsed - CAPACITY_WINDOW_MS:
                    points.popleft()
                since, before = points[0]
                if elapsed > since:
                    c.capacity = round(max(0.0, busy - before) / (elapsed - since)
                                       / max(c.tasks, 1), 4)
                if elapsed - points[-1][0] >= 1000:
                    points.append((elapsed, busy))


# What a rebalance's new start adds to its predecessor's (`Reporting.carry`): counts of what
# happened, not figures of the moment (`pending`) or of the tasks (latencies).
CARRIED = ("emitted", "transferred", "executed", "acked", "failed", "timed_out", "errors",
           "dead_lettered", "malformed", "late")


def carry_counters(into: ComponentMetrics, before: ComponentMetrics) -> None:
    """Add `before`'s counts of what happened to `into`'s (`Reporting.carry`)."""
    for name in CARRIED:
        setattr(into, name, getattr(into, name) + getattr(before, name))
    streams = dict(before.streams)
    for stream, n in into.streams.items():
        streams[stream] = streams.get(stream, 0) + n
    into.streams = streams


def carry_errors(now: list[ErrorSummary], before: list[ErrorSummary]) -> list[ErrorSummary]:
    """Error summaries of two starts of a run as one: counts summed per component and kind,
    the latest text the newer start's; most frequent first."""
    out = {(e.component, e.kind): e for e in before}
    for e in now:
        old = out.get((e.component, e.kind))
        out[(e.component, e.kind)] = e if old is None else dataclasses.replace(
            e, count=e.count + old.count)
    return sorted(out.values(), key=lambda e: -e.count)


def _figures(into: ComponentMetrics, counters: Mapping[str, Any],
             counts: bool = True) -> ComponentMetrics:
    """Fill `into` from a task's (or a component's merged) counters."""
    if counts:
        for name in METRIC_COUNTERS:
            value = counters.get(name)
            if value:
                setattr(into, name, getattr(into, name) + value)
    for name in HISTOGRAMS:
        state = counters.get(name)
        if state:
            latency = Latency.of(LatencyHistogram.from_state(state))
            exact = getattr(into, name)
            if latency is not None and exact is not None:
                # Complete latency: every tree's count and mean (the counters'), the sampled
                # histogram's percentiles.
                latency = dataclasses.replace(latency, count=exact.count, mean_ms=exact.mean_ms)
            setattr(into, name, latency)
    streams = counters.get("streams")
    if streams:
        into.streams = dict(streams)
        into.malformed = streams.get(MALFORMED, 0)
    if "late" in counters:
        into.late = counters["late"]
    if counters.get("in_windows") is not None:
        into.in_windows = counters["in_windows"]
    if counters.get("state_size") is not None:
        into.state_size = counters["state_size"]
    return into
