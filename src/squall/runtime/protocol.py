"""The runner protocol: what every runner offers to `squall.run`, the CLI and tests.

A runner is built from a topology and its configuration, and `run` executes it, blocking, until
its bounded input is processed (`until_complete`), `duration_ms` passes, or the runner's own stop
condition; it returns the `RunResult`. While it runs, `on_progress` receives the runner every
`progress_every_ms`, and may call `component_stats` (the CLI prints them). `LocalEngine`
(`runtime/local`), `SparkRunner` and `TransactionalSparkRunner` (`runtime/spark`) implement it;
`squall.runners.make_runner` returns one of them as a `Runner`, which mypy checks structurally.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from squall.runtime.stats import ComponentStats, ErrorRecord, RunResult
from squall.topology.description import Topology

# What `on_progress` receives is the runner itself (typed loosely: each runner passes `self`).
Progress = Callable[[Any], None]


class Runner(Protocol):
    """A topology being run (see the module doc)."""

    topology: Topology
    errors: list[ErrorRecord]  # every error reported so far, in order

    def run(
        self,
        *,
        duration_ms: int | None = None,
        until_complete: bool = True,
        on_progress: Progress | None = None,
        progress_every_ms: int = 1000,
    ) -> RunResult:
        """Run until complete, for `duration_ms`, or until stopped; then the result."""
        ...

    def component_stats(self) -> dict[str, ComponentStats]:
        """Every component's counters so far; callable from another thread while running."""
        ...

    def result(self) -> RunResult:
        """The counters, errors and elapsed time so far, with runner-specific `extra`."""
        ...
