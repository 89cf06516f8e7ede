"""`run_until`: run a topology whose input never ends until its output says it is done.

An unbounded run in a test used to last a fixed duration chosen to cover Spark's start and a
few batches; on a slow machine the work outlasted it (a CI run once stopped a Kafka test while a
batch waited to run again), and on a fast one the test waited for nothing. Here the run stops
gracefully (`request_stop`: in-flight work finishes and commits) as soon as `done()` holds; the
cap only ends a run that never gets there, which the caller's assertions then report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from squall.results import RunResult
from squall.runners import make_runner
from squall.topology.description import Topology


def run_until(topology: Topology, done: Callable[[], bool], conf: Mapping[str, Any] | None = None,
              *, runner: str, cap_s: float = 180.0, poll_s: float = 0.25,
              checkpoint_location: str | None = None, on_progress: Any = None,
              master: str | None = None, stop_timeout_s: float = 60.0) -> RunResult:
    """Run `topology` on `runner` until `done()` is true (checked every `poll_s` from another
    thread; an exception counts as not yet), then stop it gracefully; at most `cap_s`. The stop
    waits up to `stop_timeout_s` for the tuple trees in flight (a topology that holds trees
    across runs, as a windowed bolt acking a tuple when it leaves its window, stops at that
    deadline; a restart replays them)."""
    chosen = make_runner(topology, conf, runner=runner, checkpoint_location=checkpoint_location,
                         master=master)
    finished = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + cap_s
        while not finished.is_set() and time.monotonic() < deadline:
            try:
                if done():
                    break
            except Exception:  # the output is not there yet, or half written
                pass
            finished.wait(poll_s)
        chosen.request_stop(timeout_s=stop_timeout_s)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return chosen.run(duration_ms=int(cap_s * 1000) + 60_000, until_complete=True,
                          on_progress=on_progress, progress_every_ms=200)
    finally:
        finished.set()
        watcher.join()


class ErrorSeen:
    """A run's `on_progress` and its `done`: true once the run has reported an error and gone on
    for `after_s` more seconds of its own clock (long enough to see whether the error is
    reported again on every poll, whatever the machine's load)::

        seen = ErrorSeen(after_s=3)
        result = run_until(topology, seen.done, runner="spark", on_progress=seen)
    """

    def __init__(self, after_s: float = 3.0) -> None:
        self.after_ms = after_s * 1000
        self.first_ms: int | None = None
        self.elapsed_ms = 0

    def __call__(self, snapshot: Any) -> None:
        self.elapsed_ms = snapshot.elapsed_ms
        if snapshot.errors and self.first_ms is None:
            self.first_ms = snapshot.elapsed_ms

    def done(self) -> bool:
        return self.first_ms is not None and self.elapsed_ms - self.first_ms >= self.after_ms
