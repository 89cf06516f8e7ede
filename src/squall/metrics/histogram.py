"""`LatencyHistogram`: latencies in log-linear buckets of microseconds, mergeable across tasks
and batches, with percentiles to within 1/16 (6%) of the value.

Storm reports mean latencies only; percentiles need the distribution. A bucket is the value's
power of two and its next four bits, so 1 us to about 35 minutes takes at most 512 counters, a
value is recorded with a few integer operations, and two histograms merge by adding counts (the
Spark runner merges its tasks' per batch).

>>> h = LatencyHistogram()
>>> for us in (100, 200, 300, 400, 10_000):
...     h.record_us(us)
>>> h.count, round(h.mean_ms(), 3), h.max_us
(5, 2.2, 10000)
>>> round(h.percentile_ms(50), 3), round(h.percentile_ms(99), 2)  # 300 us within 1/16
(0.296, 10.0)
>>> LatencyHistogram.from_state(h.state()).count
5
"""

from __future__ import annotations

from typing import Any

SUB_BITS = 4  # each power of two split into 16 buckets: values within 1/16 of their bucket
_SUB = 1 << SUB_BITS


def bucket_of(us: int) -> int:
    """The bucket of a value in microseconds (values below 16 us have a bucket each)."""
    if us < _SUB:
        return max(us, 0)
    shift = us.bit_length() - SUB_BITS - 1
    return ((shift + 1) << SUB_BITS) + ((us >> shift) - _SUB)


def bucket_low(bucket: int) -> int:
    """The smallest value (us) of a bucket."""
    if bucket < _SUB:
        return bucket
    shift = (bucket >> SUB_BITS) - 1
    return (_SUB + (bucket & (_SUB - 1))) << shift


def bucket_mid(bucket: int) -> float:
    """A bucket's representative value (us): the middle of its range."""
    if bucket < _SUB:
        return float(bucket)
    return (bucket_low(bucket) + bucket_low(bucket + 1)) / 2


class LatencyHistogram:
    """Counts of latencies by bucket, with their exact count, sum and maximum."""

    __slots__ = ("buckets", "count", "max_us", "sum_us")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.sum_us = 0
        self.max_us = 0

    def record_us(self, us: int, times: int = 1) -> None:
        """Record a value (microseconds) `times` times (a tree of several tuples)."""
        b = bucket_of(us)
        self.buckets[b] = self.buckets.get(b, 0) + times
        self.count += times
        self.sum_us += us * times
        if us > self.max_us:
            self.max_us = us

    def record_ms(self, ms: float) -> None:
        self.record_us(int(ms * 1000))

    def merge(self, other: LatencyHistogram) -> None:
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += other.count
        self.sum_us += other.sum_us
        self.max_us = max(self.max_us, other.max_us)

    def mean_ms(self) -> float | None:
        return self.sum_us / self.count / 1000 if self.count else None

    def percentile_ms(self, p: float) -> float | None:
        """The value below which `p` percent of the recorded values fall (the bucket's middle,
        the exact maximum for the top bucket)."""
        if not self.count:
            return None
        rank = max(1, -(-self.count * p // 100))  # ceil: the rank-th smallest value
        seen = 0
        top = max(self.buckets)
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                value = self.max_us if b == top else min(bucket_mid(b), self.max_us)
                return value / 1000
        return self.max_us / 1000

    def state(self) -> dict[str, Any]:
        """Plain data (JSON-serialisable) to ship between processes or persist."""
        return {"buckets": {str(b): n for b, n in self.buckets.items()}, "count": self.count,
                "sum_us": self.sum_us, "max_us": self.max_us}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LatencyHistogram:
        h = cls()
        h.buckets = {int(b): n for b, n in state["buckets"].items()}
        h.count, h.sum_us, h.max_us = state["count"], state["sum_us"], state["max_us"]
        return h
