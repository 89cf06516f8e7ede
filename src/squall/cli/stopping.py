"""How `squall run` stops on SIGINT/SIGTERM, and where Spark's own output goes.

The first SIGINT or SIGTERM asks the runner for a graceful stop (`Runner.request_stop`): the
spouts are no longer pulled, trees in flight finish or commit within `--stop-timeout`, then `run`
returns and the summary is printed. A second signal stops at once: the counters so far are
printed and the process exits with 128 + the signal's number, without waiting; a restart with
the same checkpoint resumes from the last commit.

On the Spark runner the JVM, Py4J and PySpark's Python workers write to the process's standard
error (file descriptor 2), which their children inherit; tracebacks from a query being torn down
belong there. `route_spark_output` points descriptor 2 at a log file before Spark starts and keeps
squall's own output (progress, summary, squall's log lines) on the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from squall.protocols import Runner
from squall.results import TRACEBACK_LOGGER

LOG_DIR_ENV = "SQUALL_LOG_DIR"
DEFAULT_STOP_TIMEOUT_S = 30.0  # Storm's default message timeout: what a tree may take anyway


def log_dir() -> Path:
    if os.environ.get(LOG_DIR_ENV):
        return Path(os.environ[LOG_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "squall" / "logs"


def route_spark_output(name: str) -> Path:
    """Send file descriptor 2 (and so the JVM's and its Python workers' output) to a new log
    file, keep `sys.stderr` and squall's log lines on the terminal; returns the file's path."""
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    sys.stderr.flush()
    terminal: TextIO = os.fdopen(os.dup(2), "w", buffering=1, errors="backslashreplace")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = terminal
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    fmt = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    to_file = logging.StreamHandler(open(path, "a", buffering=1))  # noqa: SIM115 (lives on)
    to_file.setFormatter(logging.Formatter("%(asctime)s " + fmt._fmt))  # type: ignore[operator]
    to_terminal = logging.StreamHandler(terminal)
    to_terminal.setFormatter(fmt)
    # squall's own lines stay on the terminal; Py4J's and PySpark's go to the file only, and so
    # do the full tracebacks of errors (the terminal has the user's frames of each).
    to_terminal.addFilter(lambda r: (r.name == "squall" or r.name.startswith("squall."))
                          and r.name != TRACEBACK_LOGGER)
    logging.getLogger(TRACEBACK_LOGGER).setLevel(logging.DEBUG)
    root.addHandler(to_file)
    root.addHandler(to_terminal)
    return path


class SignalStop:
    """Installs the SIGINT/SIGTERM handlers of one run (see the module doc)."""

    def __init__(self, stop_timeout_s: float, summary: Callable[[Runner], str]) -> None:
        self.stop_timeout_s = stop_timeout_s
        self.summary = summary
        self.runner: Runner | None = None
        self.signum: int | None = None  # the first signal received
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install (or install again: PySpark's SparkContext replaces the SIGINT handler with
        one that cancels every job and raises KeyboardInterrupt) the handlers."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.signal(sig, self._handle)
            self.previous.setdefault(sig, previous)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def attach(self, runner: Runner) -> None:
        """The runner exists now: a signal that came while Spark was starting stops it."""
        self.runner = runner
        self.install()
        if self.signum is not None:
            runner.request_stop(self.stop_timeout_s)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            print(f"squall: {name} received: stopping gracefully (spouts deactivated; work in "
                  f"flight has {self.stop_timeout_s:g} s to finish; a second signal stops at "
                  "once)", file=sys.stderr, flush=True)
            if self.runner is not None:
                self.runner.request_stop(self.stop_timeout_s)
            return
        print(f"squall: {name} received again: stopping at once; work in flight is not "
              "committed (a restart with the same checkpoint resumes from the last commit)",
              file=sys.stderr, flush=True)
        if self.runner is not None:
            # The counters are a courtesy: stopping at once is the point.
            with contextlib.suppress(Exception):
                print("squall: counters at the stop\n" + self.summary(self.runner),
                      file=sys.stderr, flush=True)
        sys.stderr.flush()
        os._exit(128 + signum)
