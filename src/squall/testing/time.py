"""`simulated_time()`: make runners created inside the block use a clock the test moves.

>>> with simulated_time() as clock:
...     clock.advance(30_000)
...     current_clock().now_ms()
30000
>>> current_clock() is None
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from squall.runtime.clock import SimulatedClock

_active: list[SimulatedClock] = []


@contextlib.contextmanager
def simulated_time(start_ms: int = 0) -> Iterator[SimulatedClock]:
    clock = SimulatedClock(start_ms)
    _active.append(clock)
    try:
        yield clock
    finally:
        _active.remove(clock)


def current_clock() -> SimulatedClock | None:
    """The innermost active simulated clock, or None outside `simulated_time`."""
    return _active[-1] if _active else None
