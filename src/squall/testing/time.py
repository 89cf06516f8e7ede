"""`simulated_time()`: make runners created inside the block use a clock the test moves.

>>> with simulated_time() as clock:
...     clock.advance(30_000)
...     current_clock().now_ms()
30000
>>> current_clock() is None
True
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from squall.runtime.clock import SimulatedClock, ambient, current_clock

__all__ = ["current_clock", "simulated_time"]


@contextmanager
def simulated_time(start_ms: int = 0) -> Iterator[SimulatedClock]:
    """A fresh `SimulatedClock` at `start_ms`, ambient inside the block (runners find it with
    `squall.runtime.clock.current_clock`)."""
    with ambient(SimulatedClock(start_ms)) as clock:
        yield clock
