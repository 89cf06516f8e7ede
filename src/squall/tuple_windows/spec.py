"""What a window is: its length and sliding interval (each a `Count` or a `Duration`) and its time.

>>> spec = WindowSpec(Duration.seconds(20), Duration.seconds(10), event_time=True,
...                   lag_ms=5000)
>>> spec.length_ms, spec.slide_ms, spec.length_count, spec.tumbling
(20000, 10000, None, False)
>>> WindowSpec(Count(3), Count(3)).tumbling
True
>>> Count(0)
Traceback (most recent call last):
...
ValueError: a window count must be a positive int, got 0
"""

from __future__ import annotations

from dataclasses import dataclass

from squall.duration import Duration


@dataclass(frozen=True, order=True)
class Count:
    """A window length or sliding interval measured in tuples (Storm's `BaseWindowedBolt.Count`).

    Not the Trident aggregator `squall.trident.Count` nor the windowed operators' accumulation
    `squall.windows.accumulations.Count` (README, "Which `Count`, which triggers")."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or self.value < 1:
            raise ValueError(f"a window count must be a positive int, got {self.value!r}")

    @classmethod
    def of(cls, value: int) -> Count:
        return cls(value)

    def __str__(self) -> str:
        return f"{self.value} tuples"


Measure = Count | Duration


@dataclass(frozen=True)
class WindowSpec:
    """A window's shape and its time domain; the configuration a `WindowManager` is built from.

    Processing time (the default) stamps each tuple with the runner's clock when it arrives.
    Event time (`event_time=True`) takes each tuple's own timestamp; windows then close when the
    watermark (the smallest, over input streams, of the largest timestamp seen, minus the lag)
    passes their end. `watermark_interval_ms` is how often, in processing time, windows are
    evaluated against the watermark (0: on every tuple).

    The lag the watermark uses (`watermark_lag_ms`) is `lag_ms`, and at least the watermark
    interval: Storm emits a watermark every interval, so a tuple is late only against the
    watermark of the last interval and disorder within about one interval is not late; squall
    moves its watermark with every tuple (so which tuples are late never depends on batch cuts
    or tick timing) and gives the same tolerance by lagging it by at least the interval.

    >>> WindowSpec(Duration(10), event_time=True).watermark_lag_ms
    1000
    >>> WindowSpec(Duration(10), event_time=True, lag_ms=5000).watermark_lag_ms
    5000
    >>> WindowSpec(Duration(10), event_time=True, watermark_interval_ms=0).watermark_lag_ms
    0
    """

    length: Measure
    slide: Measure = Count(1)
    event_time: bool = False
    lag_ms: int = 0
    watermark_interval_ms: int = 1000

    def __post_init__(self) -> None:
        for name, value in (("length", self.length), ("sliding interval", self.slide)):
            if not isinstance(value, (Count, Duration)):
                raise TypeError(f"window {name} must be a Count or a Duration, got {value!r}")
            if isinstance(value, Duration) and value.millis < 1:
                raise ValueError(f"window {name} must be at least 1 ms, got {value}")
        if self.lag_ms < 0 or self.watermark_interval_ms < 0:
            raise ValueError("lag and watermark interval cannot be negative")

    @property
    def watermark_lag_ms(self) -> int:
        return max(self.lag_ms, self.watermark_interval_ms)

    @property
    def length_count(self) -> int | None:
        return self.length.value if isinstance(self.length, Count) else None

    @property
    def length_ms(self) -> int | None:
        return self.length.millis if isinstance(self.length, Duration) else None

    @property
    def slide_count(self) -> int | None:
        return self.slide.value if isinstance(self.slide, Count) else None

    @property
    def slide_ms(self) -> int | None:
        return self.slide.millis if isinstance(self.slide, Duration) else None

    @property
    def tumbling(self) -> bool:
        return self.length == self.slide
