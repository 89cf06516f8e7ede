"""`TaskStats`: the counters of one task, as Storm's UI shows them.

>>> stats = TaskStats()
>>> stats.emitted += 2
>>> stats.as_dict()["emitted"], list(stats.as_dict())[:3]
(2, ['emitted', 'transferred', 'executed'])
"""

from __future__ import annotations

import time
from collections.abc import Callable

from squall.metrics.histogram import LatencyHistogram
from squall.topology.tuple import ACKED, PENDING, Tuple

# The counters of a task in the order Storm's UI shows them, which `TaskStats.as_dict` keeps.
_COUNTERS = (
    "emitted", "transferred", "executed", "acked", "failed", "timed_out",
    "latency_total_ms", "latency_count", "errors", "reliability_errors", "dead_lettered",
)


class TaskStats:
    """Counters of one task, as Storm's UI shows them."""

    __slots__ = _COUNTERS

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.emitted = 0
        self.transferred = 0
        self.executed = 0  # kept for runners that count here; the local engine counts in send
        self.acked = 0  # bolts: tuples acked; spouts: trees completed
        self.failed = 0  # bolts: tuples failed; spouts: trees failed (including timeouts)
        self.timed_out = 0
        self.latency_total_ms = 0.0  # sub-millisecond: the local runner measures in us
        self.latency_count = 0
        self.errors = 0
        self.reliability_errors = 0
        self.dead_lettered = 0  # spouts: messages past the retry limit (squall.reliability.retries)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _COUNTERS}


class ExecuteTimes:
    """A bolt task's sampled execute and process latencies (squall.metrics).

    Storm samples its latencies (`topology.stats.sample.rate`, 5%) rather than timing every
    tuple; squall's runners time one tuple now and then (`timed`), so the path of the others
    costs nothing. Execute latency is the time in `execute`; process latency runs from
    execute's start to the tuple's ack: the same for a tuple acked in execute, measured when
    noticed (`settle_open`, at a later sample or batch end) for one acked later (windows).
    These are measurements, not semantics, so they read the process's performance counter.

    >>> from squall.topology.tuple import _RuntimeTuple
    >>> times = ExecuteTimes()
    >>> times.timed(lambda tup: None, _RuntimeTuple([1], None, None, 1))  # left pending
    >>> times.execute.count, times.process.count, len(times.open)
    (1, 0, 1)
    """

    __slots__ = ("execute", "open", "process")

    MAX_OPEN = 64  # sampled tuples not yet acked that are followed

    def __init__(self) -> None:
        self.execute = LatencyHistogram()
        self.process = LatencyHistogram()
        self.open: list[tuple[Tuple, int]] = []

    def timed(self, execute: Callable[[Tuple], None], tup: Tuple) -> None:
        """`execute(tup)`, timed (its exception, if any, propagates)."""
        start = time.perf_counter_ns()
        try:
            execute(tup)
        finally:
            us = (time.perf_counter_ns() - start) // 1000
            self.execute.record_us(us)
            state = tup._state
            if state == ACKED:
                self.process.record_us(us)
            elif state == PENDING and len(self.open) < self.MAX_OPEN:
                self.open.append((tup, start))

    def settle_open(self) -> None:
        """Record the process latency of followed tuples acked since (failed ones: none)."""
        if not self.open:
            return
        now = time.perf_counter_ns()
        keep = []
        for tup, start in self.open:
            if tup._state == ACKED:
                self.process.record_us((now - start) // 1000)
            elif tup._state == PENDING:
                keep.append((tup, start))
        self.open = keep

    def reset(self) -> None:
        """Start new histograms (a runner that reports per batch); followed tuples stay."""
        self.execute = LatencyHistogram()
        self.process = LatencyHistogram()
