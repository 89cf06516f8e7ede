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

from collections.abc import Mapping
from typing import Any

from squall.duration import Duration, to_millis
from squall.protocols import Progress, Runner
from squall.results import RunResult
from squall.runtime.clock import Clock, current_clock
from squall.runtime.local.engine import LocalEngine
from squall.runtime.local.trident import LocalTridentRunner
from squall.runtime.run_config import RunConfig, resolve
from squall.topology.description import Topology
from squall.transactional.builder import is_transactional
from squall.trident.plan import is_trident

RUNNERS = ("spark", "local")
DEFAULT_RUNNER = "spark"


def check_runner(runner: str) -> None:
    if runner not in RUNNERS:
        raise ValueError(f"unknown runner {runner!r}; available runners: {', '.join(RUNNERS)}")


def run(
    topology: Topology,
    conf: Mapping[str, Any] | None = None,
    *,
    runner: str = DEFAULT_RUNNER,
    duration: Duration | float | None = None,
    master: str | None = None,
    checkpoint_location: str | None = None,
    clock: Clock | None = None,
    on_progress: Progress | None = None,
    progress_every_ms: int = 1000,
) -> RunResult:
    """Run `topology`, blocking, until its bounded input is fully processed or `duration` passes.

    `runner="spark"` (the default) runs it as a Structured Streaming query on `master`
    (`local[*]` when not given, or any Spark master URL). `runner="local"` runs it in this
    process. On both, `checkpoint_location` makes a restart resume where the last committed
    batch left off (local runner: docs/design/local-checkpoint.md). `duration` is a
    `Duration`/`timedelta` or seconds; a topology whose spouts never say they are exhausted runs
    until the duration ends (or forever without one).
    """
    check_runner(runner)
    duration_ms = None
    if duration is not None:
        duration_ms = (
            int(duration * 1000) if isinstance(duration, (int, float)) else to_millis(duration)
        )
    chosen = make_runner(topology, conf, runner=runner, master=master,
                         checkpoint_location=checkpoint_location, clock=clock)
    return chosen.run(duration_ms=duration_ms, until_complete=True, on_progress=on_progress,
                      progress_every_ms=progress_every_ms)


def make_runner(
    topology: Topology,
    conf: Mapping[str, Any] | RunConfig | None = None,
    *,
    runner: str = DEFAULT_RUNNER,
    master: str | None = None,
    checkpoint_location: str | None = None,
    clock: Clock | None = None,
    capture: bool = False,
) -> Runner:
    """The runner named `runner` for `topology`, ready to `run` (see `run` for the arguments).

    A transactional topology on Spark gets the transactional runner: a transaction is a
    micro-batch (`squall.transactional`); a Trident topology gets a Trident runner on either
    (`squall.trident`). This is the one place that chooses a runner: `squall run`, `squall.run`,
    `LocalCluster` and `complete_topology` all come here. `capture=True` keeps what every task
    emits (`Runner.captured`), for tests. `conf` is the user's keys, or a `RunConfig` already
    resolved from them for this runner (`squall.runtime.run_config.resolve`).
    """
    check_runner(runner)
    if runner == "spark" and clock is not None:
        raise ValueError("the spark runner takes its time from the micro-batches; "
                         "a clock can only be given to the local runner")
    # Checked and resolved once, here; the runner reads the result (squall.runtime.run_config).
    config = resolve(topology, conf, runner=runner)
    if runner == "spark":
        return _spark_runner(topology, config, master, checkpoint_location, capture)
    if is_trident(topology):
        return LocalTridentRunner(topology, config, clock=clock or current_clock(),
                                  checkpoint_location=checkpoint_location, capture=capture)
    if checkpoint_location is not None and is_transactional(topology):
        # Its coordinator keeps its own transactions in its store, which is what resumes
        # it (exactly-once already); restoring its bolts from the runner's snapshots as well
        # would mix two protocols, so the runner keeps no commit record of its own.
        checkpoint_location = None
    return LocalEngine(topology, config, clock=clock or current_clock(),
                       checkpoint_location=checkpoint_location, capture=capture)


def _spark_runner(topology: Topology, conf: RunConfig, master: str | None,
                  checkpoint_location: str | None, capture: bool) -> Runner:
    # Imported here, not at the top: the Spark runners import pyspark, which takes seconds to
    # load, and `import squall` (and the local runner) must not need it. Only the runner chosen
    # is imported: every import here delays Spark's start (the Trident runner's brings pandas).
    if is_trident(topology):
        from squall.runtime.spark.trident import TridentSparkRunner  # noqa: PLC0415

        return TridentSparkRunner(topology, conf, master=master,
                                  checkpoint_location=checkpoint_location, capture=capture)
    if is_transactional(topology):
        from squall.runtime.spark.transactional import TransactionalSparkRunner  # noqa: PLC0415

        return TransactionalSparkRunner(topology, conf, master=master,
                                        checkpoint_location=checkpoint_location, capture=capture)
    from squall.runtime.spark.driver import SparkRunner  # noqa: PLC0415

    return SparkRunner(topology, conf, master=master, checkpoint_location=checkpoint_location,
                       capture=capture)
