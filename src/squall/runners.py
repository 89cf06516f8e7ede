"""`run`: execute a topology with a named runner until it completes or its duration is over.

>>> from squall import TopologyBuilder, Fields
>>> from squall.testing import FixedTupleSpout
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[1], [2]], Fields("n")))
>>> result = run(b.create_topology(), runner="local")
>>> result.stats["numbers"].acked
2
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.duration import Duration, to_millis
from squall.runtime.clock import Clock
from squall.runtime.stats import RunResult
from squall.testing.time import current_clock
from squall.topology.description import Topology

RUNNERS = ("local",)


def check_runner(runner: str) -> None:
    if runner not in RUNNERS:
        raise ValueError(f"unknown runner {runner!r}; available runners: {', '.join(RUNNERS)}")


def run(
    topology: Topology,
    conf: Mapping[str, Any] | None = None,
    *,
    runner: str = "local",
    duration: Duration | float | None = None,
    clock: Clock | None = None,
    on_progress: Callable[[Any], None] | None = None,
    progress_every_ms: int = 1000,
) -> RunResult:
    """Run `topology`, blocking, until its bounded input is fully processed or `duration` passes.

    `duration` is a `Duration`/`timedelta` or seconds. A topology whose spouts never say they
    are exhausted runs until the duration ends (or forever without one).
    """
    check_runner(runner)
    from squall.runtime.local.engine import LocalEngine

    duration_ms = None
    if duration is not None:
        duration_ms = (
            int(duration * 1000) if isinstance(duration, (int, float)) else to_millis(duration)
        )
    engine = LocalEngine(topology, conf, clock=clock or current_clock())
    return engine.run(
        duration_ms=duration_ms,
        until_complete=True,
        on_progress=on_progress,
        progress_every_ms=progress_every_ms,
    )
