"""`Duration`: a span of time in whole milliseconds; `timedelta` is accepted wherever one is.

>>> Duration.seconds(20).millis, Duration.minutes(1) == Duration.seconds(60)
(20000, True)
>>> import datetime
>>> to_millis(datetime.timedelta(seconds=1.5)), to_millis(Duration.hours(1))
(1500, 3600000)
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass


def _whole(x: float) -> int:
    """`x` rounded half to even, as an `int` whatever numeric type `x` is."""
    return int(round(x))  # noqa: RUF046 - round() of a numpy 1 scalar is not an int


@dataclass(frozen=True, order=True)
class Duration:
    millis: int

    def __post_init__(self) -> None:
        if self.millis < 0:
            raise ValueError(f"a duration cannot be negative, got {self.millis} ms")

    @classmethod
    def milliseconds(cls, n: float) -> Duration:
        return cls(int(n))

    @classmethod
    def seconds(cls, n: float) -> Duration:
        return cls(_whole(n * 1000))

    @classmethod
    def minutes(cls, n: float) -> Duration:
        return cls(_whole(n * 60_000))

    @classmethod
    def hours(cls, n: float) -> Duration:
        return cls(_whole(n * 3_600_000))

    @classmethod
    def days(cls, n: float) -> Duration:
        return cls(_whole(n * 86_400_000))

    def to_timedelta(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.millis)

    def __str__(self) -> str:
        return f"{self.millis} ms"


def to_millis(value: Duration | datetime.timedelta | int | float) -> int:
    """Milliseconds of a `Duration`, a `timedelta`, or a number already in milliseconds."""
    if isinstance(value, Duration):
        return value.millis
    if isinstance(value, datetime.timedelta):
        return _whole(value.total_seconds() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"expected a Duration, timedelta or milliseconds, got {value!r}")
