"""`gc_paused`: run a block with CPython's cyclic garbage collector paused.

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
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
