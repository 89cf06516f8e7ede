"""`TaskStats`: the counters of one task, as Storm's UI shows them.

>>> stats = TaskStats()
>>> stats.emitted += 2
>>> stats.as_dict()["emitted"], list(stats.as_dict())[:3]
(2, ['emitted', 'transferred', 'executed'])
"""

from __future__ import annotations

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
        self.latency_total_ms = 0
        self.latency_count = 0
        self.errors = 0
        self.reliability_errors = 0
        self.dead_lettered = 0  # spouts: messages past the retry limit (squall.reliability.retries)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _COUNTERS}
