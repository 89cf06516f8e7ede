"""Run results: per-component counters and the errors reported while running.

Every runner sums its tasks' counters into `ComponentStats` with `aggregate_stats`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall import tracebacks
from squall.errors import ReliabilityError
from squall.metrics.snapshot import ComponentMetrics, Latency
from squall.topology.description import Topology

# The counters a snapshot's `ComponentMetrics` takes as they are.
METRIC_COUNTERS = ("emitted", "transferred", "executed", "acked", "failed", "timed_out", "errors",
                   "pending", "dead_lettered")

# The per-task counters a component's stats sum (a task reports any subset of them).
SUMMED = ("emitted", "transferred", "executed", "acked", "failed", "timed_out", "errors",
          "latency_total_ms", "latency_count", "pending", "dead_lettered")


@dataclass
class ErrorRecord:
    """An error reported by a task: a user exception, `report_error`, or a reliability misuse."""

    component: str
    task: int
    error: BaseException
    stream: str | None = None
    time_ms: int = 0

    def __str__(self) -> str:
        where = f"{self.component}:{self.task}"
        if self.stream:
            where += f" stream {self.stream!r}"

        return f"[{where}] {type(self.error).__name__}: {self.error}"


@dataclass
class ComponentStats:
    component: str
    kind: str
    tasks: int
    emitted: int = 0
    transferred: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    timed_out: int = 0
    errors: int = 0
    latency_total_ms: float = 0
    latency_count: int = 0
    pending: int = 0
    dead_lettered: int = 0  # spouts: messages that failed past the retry limit
    late: int = 0  # Trident window operations: tuples dropped behind the watermark

    @property
    def complete_latency_ms(self) -> float | None:
        """Mean time from a spout emit to its tree's completion (spouts only)."""
        if not self.latency_count:
            return None
        return self.latency_total_ms / self.latency_count

    def to_metrics(self) -> ComponentMetrics:
        """These counters as a snapshot's `ComponentMetrics` (squall.metrics)."""
        out = ComponentMetrics(self.component, self.kind, self.tasks, late=self.late,
                               **{name: getattr(self, name) for name in METRIC_COUNTERS})
        if self.kind == "spout" and self.latency_count:
            mean = self.latency_total_ms / self.latency_count
            out.complete_latency = Latency(self.latency_count, mean, mean, mean, mean)
        return out

    def line(self) -> str:
        return self.to_metrics().line()


@dataclass
class RunResult:
    """What `run` returns: final counters per component and every reported error."""

    stats: dict[str, ComponentStats]
    errors: list[ErrorRecord] = field(default_factory=list)
    elapsed_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [s.line() for s in self.stats.values()]
        lines.append(f"errors reported: {len(self.errors)}; elapsed {self.elapsed_ms / 1000:.1f}s")
        lines += [f"  {component} {kind}: {n}"
                  for (component, kind), n in error_counts(self.errors).items()]
        return "\n".join(lines)


def error_counts(errors: Iterable[ErrorRecord]) -> dict[tuple[str, str], int]:
    """Errors per `(component, error kind)`, most frequent first: the summary's error lines.

    >>> e = [ErrorRecord("flaky", 1, ValueError("x")), ErrorRecord("flaky", 2, ValueError("y")),
    ...      ErrorRecord("sink", 3, OSError("z"))]
    >>> error_counts(e)
    {('flaky', 'ValueError'): 2, ('sink', 'OSError'): 1}
    """
    return dict(Counter((e.component, type(e.error).__name__) for e in errors).most_common())


# Where `ErrorLog` writes an error's full traceback (at DEBUG) when its logger is "squall".
TRACEBACK_LOGGER = "squall.traceback"


def user_error(error: BaseException) -> bool:
    """Whether `error` came from the user's code, so its traceback helps: not a reliability
    misuse (`ReliabilityError`), whose message says it all."""
    return not isinstance(error, ReliabilityError)


class ErrorLog:
    """Logs a run's errors, rate-limited per component and error kind.

    The first `burst` errors of a `(component, kind)` are logged one line each; after that at
    most one line per `every_ms` of the caller's clock (a minute: longer than the longest replay
    backoff, so a message replayed for ever does not get a line per replay) says how many more
    there were since the last line, with the latest one's text. Every error is still counted
    (`counts`) and kept by the runner; only the log is spared.

    When `traceback(error)` says an error's traceback is worth showing, the first error of each
    distinct place in the user's code (component, kind, file and line) is followed by the frames
    of the user's own files (file, line, code) in the same log record, and the full traceback
    (squall's frames too) goes at DEBUG level to the `<logger>.traceback` logger, which the CLI
    writes to the run's log file.

    >>> import sys
    >>> logger = logging.getLogger("squall.example")
    >>> logger.addHandler(logging.StreamHandler(sys.stdout)); logger.propagate = False
    >>> elog = ErrorLog(logger, burst=2, every_ms=1000)
    >>> for now in range(0, 2500, 100):   # one error every 100 ms
    ...     elog.record(ErrorRecord("flaky", 1, ValueError(f"bad at {now}")), now)
    [flaky:1] ValueError: bad at 0
    [flaky:1] ValueError: bad at 100
    flaky: 10 more ValueError errors (12 in all); latest: bad at 1100
    flaky: 10 more ValueError errors (22 in all); latest: bad at 2100
    >>> elog.counts, elog.unlogged()
    ({('flaky', 'ValueError'): 25}, {('flaky', 'ValueError'): 3})
    """

    def __init__(self, logger: logging.Logger, *, burst: int = 5, every_ms: int = 60_000,
                 traceback: Any = None) -> None:
        self.logger = logger
        self.trace_logger = logging.getLogger(f"{logger.name}.traceback")
        self.burst = burst
        self.every_ms = every_ms
        # Whether an error's traceback is worth logging (None: never).
        self.traceback = traceback
        self.counts: dict[tuple[str, str], int] = {}
        self._since: dict[tuple[str, str], list[int]] = {}  # key -> [last line ms, unlogged]
        self._traced: set[tuple[str, str, tuple[str, int] | None]] = set()

    def record(self, record: ErrorRecord, now_ms: int) -> None:
        key = (record.component, type(record.error).__name__)
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        if n <= self.burst:
            self._log(record)
            self._since[key] = [now_ms, 0]
            return
        since = self._since[key]
        since[1] += 1
        if now_ms - since[0] >= self.every_ms:
            self.logger.error("%s: %d more %s errors (%d in all); latest: %s", key[0], since[1],
                              key[1], n, record.error)
            since[0], since[1] = now_ms, 0

    def _log(self, record: ErrorRecord) -> None:
        error = record.error
        distinct = (record.component, type(error).__name__, tracebacks.location(error))
        if self.traceback is None or not self.traceback(error) or distinct in self._traced:
            self.logger.error("%s", record)
            return
        self._traced.add(distinct)
        frames = tracebacks.user_frames(error)
        self.logger.error("%s", "\n".join([str(record), *(f.text() for f in frames)]))
        self.trace_logger.debug("%s\n%s", record, tracebacks.full_trace(error))

    def unlogged(self) -> dict[tuple[str, str], int]:
        """Errors counted since each key's last log line."""
        return {key: since[1] for key, since in self._since.items() if since[1]}


def aggregate_stats(topology: Topology,
                    tasks: Iterable[tuple[int, Mapping[str, int]]]) -> dict[str, ComponentStats]:
    """Every component's stats: the sum of the `SUMMED` counters of its tasks' `(task id,
    counters)` in `tasks` (a task may appear several times, e.g. once per batch report).

    >>> from squall import TopologyBuilder, Fields
    >>> from squall.testing import FixedTupleSpout
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("n", FixedTupleSpout([[1]], Fields("n")), parallelism=2)
    >>> t = b.create_topology()
    >>> aggregate_stats(t, [(1, {"emitted": 2}), (2, {"emitted": 3, "pending": 1})])["n"].line()
    'n                spout x2  emitted=5  acked=0  failed=0  pending=1  latency=-'
    """
    out = {cid: ComponentStats(cid, spec.kind, spec.num_tasks)
           for cid, spec in topology.components.items()}
    for task, counters in tasks:
        stats = out[topology.task_component(task)]
        for key in SUMMED:
            value = counters.get(key)
            if value:
                setattr(stats, key, getattr(stats, key) + value)
    return out


Captures = dict[int, list[tuple[str, list[Any]]]]
"""What a runner built with `capture=True` gives: per task, (stream, values) in order."""


def rows_by_first_task(topology: Topology, outputs: Mapping[str, Iterable[Any]]) -> Captures:
    """Trident's captured output rows (per operation) as `Captures`: each operation's rows on
    its default stream, under its first task.

    >>> from squall.topology.description import Topology
    >>> rows_by_first_task(Topology({}), {"gone": [(1,)]})
    {}
    """
    return {topology.component_tasks(cid)[0]: [("default", list(row)) for row in rows]
            for cid, rows in outputs.items() if cid in topology.components}


def ordered_captures(captures: Mapping[int, Iterable[tuple[Any, str, list[Any]]]]) -> Captures:
    """Captures a runner collected with a sort key each (Spark: batch and sequence, since a
    batch's tasks arrive in any order) as `Captures`, each task's in key order.

    >>> ordered_captures({3: [((1, 0), "s", [2]), ((0, 5), "s", [1])]})
    {3: [('s', [1]), ('s', [2])]}
    """
    return {task: [(stream, values) for _key, stream, values in sorted(rows, key=lambda r: r[0])]
            for task, rows in captures.items()}
