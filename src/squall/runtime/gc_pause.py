"""`gc_paused` and `full_collections_deferred`: CPython's cyclic collector around bulk work.

Runners process tuples in bulk (a Spark stage, a spout reader's plan): every tuple allocates a few
container objects that die young, and the cyclic collector, triggered by allocation counts, would
traverse the long-lived heap again and again. Reference counting frees what is not in a cycle;
what is, waits for the collector's next run after the block.

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
>>> before = gc.get_threshold()
>>> with full_collections_deferred():
...     gc.get_threshold()[2] == before[2] * 100
True
>>> gc.get_threshold() == before
True
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_deferring = 0  # blocks inside full_collections_deferred, across threads
_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def full_collections_deferred(factor: int = 100) -> Iterator[None]:
    """Run a block with full (oldest-generation) collections `factor` times rarer.

    For a long-running loop such as the local runner's, which cannot pause the collector for
    good: young cycles are still collected as usual, but windows, held tuples and states keep
    tuples alive long enough to reach the oldest generation and die there, and every full
    collection then traverses the whole heap. With CPython's default thresholds that made a
    windowed word count 2 to 3 times slower on 2 M words (docs/performance.md). Nested or
    concurrent blocks share one setting; the thresholds in force before the first are restored
    when the last ends.
    """
    global _deferring, _saved
    with _lock:
        if _deferring == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(_saved[0], _saved[1], _saved[2] * factor)
        _deferring += 1
    try:
        yield
    finally:
        with _lock:
            _deferring -= 1
            if _deferring == 0:
                gc.set_threshold(*_saved)
