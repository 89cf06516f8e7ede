"""The surfaces the layers meet at, as typing protocols, so no layer imports another to type it.

Components type against the collector surfaces here (`OutputCollectorLike`, ...), not against the
task layer's collectors; the task layer types its hosts as `Host`, which every runner implements
(a spout task's as `SpoutHost`, the part a host of spout tasks alone needs);
windowed operators type accumulations as `Accumulation`; `squall.run` and the CLI type runners
as `Runner`. This module sits just above the topology description and the run results, which
are all it imports of squall (see docs/design/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from squall.metrics.snapshot import MetricsSnapshot
from squall.results import ComponentStats, ErrorRecord, RunResult
from squall.topology.description import Topology


# ---- what components emit with -------------------------------------------------------------
class OutputCollectorLike(Protocol):
    """What a bolt emits, acks and fails with (Storm's `OutputCollector`)."""

    def emit(self, values: Sequence[Any], anchors: Any = None,
             stream: str = ...) -> list[int]: ...

    def emit_direct(self, task_id: int, values: Sequence[Any], anchors: Any = None,
                    stream: str = ...) -> list[int]: ...

    def ack(self, tup: Any) -> None: ...

    def fail(self, tup: Any) -> None: ...

    def reset_timeout(self, tup: Any) -> None: ...

    def report_error(self, error: BaseException) -> None: ...


class SpoutOutputCollectorLike(Protocol):
    """What a spout emits with; a `msg_id` makes the emit tracked."""

    def emit(self, values: Sequence[Any], msg_id: Any = None,
             stream: str = ...) -> list[int]: ...

    def emit_direct(self, task_id: int, values: Sequence[Any], msg_id: Any = None,
                    stream: str = ...) -> list[int]: ...

    def emit_control(self, values: Sequence[Any], stream: str) -> None:
        """The framework's control tuples (a partitioned source's partition events)."""
        ...

    def set_source_at(self, at: int | None) -> None:
        """The position of the record emitted next (squall.partition_watermarks)."""
        ...

    def report_error(self, error: BaseException) -> None: ...


class BasicOutputCollectorLike(Protocol):
    """What a `BasicBolt` emits with: every emit is anchored to the input being executed."""

    def emit(self, values: Sequence[Any], stream: str = ...) -> list[int]: ...

    def emit_direct(self, task_id: int, values: Sequence[Any],
                    stream: str = ...) -> list[int]: ...

    def reset_timeout(self, tup: Any) -> None: ...

    def report_error(self, error: BaseException) -> None: ...


# ---- what runners provide --------------------------------------------------------------------
class Clock(Protocol):
    """A source of time in ms since the epoch (a runner's clock, simulated or real)."""

    def now_ms(self) -> int: ...


class PacketBuffer(Protocol):
    """Tuples buffered per (origin, target task) pair, as the Spark runner's hosts do
    (`squall.runtime.spark.row_schema.Packets`): `open[(origin, target)]` is the list an
    unanchored tuple's values are appended to, `channel(origin, target)` opens one."""

    @property
    def open(self) -> Mapping[Any, list[Any]]: ...

    def channel(self, origin: Any, target: int) -> list[Any]: ...


class SpoutHost(Clock, Protocol):
    """What a runner provides to the spout tasks it hosts: the tuples' way out and the two
    ledger calls a spout makes (a tree started, a tree forgotten when it timed out).

    `packets`: the host's packet buffer, or None when tuples go through `send` one by one
    (collectors read it when bound to the host, `squall.task.collectors`).
    """

    @property
    def packets(self) -> PacketBuffer | None: ...

    def send(self, task_id: int, tup: Any) -> None: ...

    def ack_init(self, root: int, xor: int, spout_task: int) -> None: ...

    def forget(self, root: int) -> None: ...

    def report_error(
        self, component: str, task: int, error: BaseException, stream: str | None = None
    ) -> None: ...


class Host(SpoutHost, Protocol):
    """What a runner provides to every task it hosts, bolts included: a spout's host and the
    ledger calls of the tuples bolts execute.

    `ack_xor`: for a host whose `ack` only XORs the value into a dict by root, that dict
    (collectors then ack inline), else None.
    """

    @property
    def ack_xor(self) -> dict[int, int] | None: ...

    def ack(self, root: int, value: int, component: str) -> None: ...

    def fail(self, root: int, component: str) -> None: ...

    def reset(self, root: int, component: str) -> None: ...

    # Whether a batch that raises `BatchRetryError` can be left uncommitted and run again
    # (the runner's batches are transactions), rather than its tuples failed.
    transactional_batches: bool


# ---- what the checkpoint protocol calls --------------------------------------------------------
class StatefulHooks(Protocol):
    """The calls a checkpointed component gets (Storm's `IStatefulComponent`): the user's own
    methods for a `StatefulBolt`, its role adapter for windowed components (squall.task.roles)."""

    def init_state(self, state: Any) -> None: ...

    def pre_prepare(self, txid: int) -> None: ...

    def pre_commit(self, txid: int) -> None: ...

    def pre_rollback(self) -> None: ...


# ---- what windowed operators accumulate with ---------------------------------------------------
@runtime_checkable
class Accumulation(Protocol):
    """What a windowed operator needs from an accumulation."""

    retractable: bool

    def default_accumulated_value(self) -> Any: ...

    def accumulate(self, acc: Any, value: Any) -> Any: ...

    def merge(self, acc1: Any, acc2: Any) -> Any: ...

    def get_output(self, acc: Any) -> Any: ...

    def get_retraction(self, output: Any) -> Any: ...


class MergeAccumulation(Accumulation, Protocol):
    """An accumulation over two inputs (`WindowedMergeOperator`)."""

    def accumulate2(self, acc: Any, value: Any) -> Any: ...


# ---- runners -------------------------------------------------------------------------------
# The runner protocol: what every runner offers to `squall.run`, the CLI and tests.
#
# A runner is built from a topology and its configuration: `conf` is the user's keys as given
# (what Storm hands a component), `config` the resolved `RunConfig` (`config.effective` has
# Storm's defaults under the user's keys). `run` executes the topology, blocking, and returns
# the `RunResult`; while it runs, `on_progress` receives the runner's `metrics()` (a
# `MetricsSnapshot`, public and documented) every `progress_every_ms`, and once more when the run
# ends. `LocalEngine` and `LocalTridentRunner` (`runtime/local`), `SparkRunner`,
# `TransactionalSparkRunner` and `TridentSparkRunner` (`runtime/spark`) implement it;
# `squall.runners.make_runner` returns one of them as a `Runner`, which mypy checks structurally.
# Every way of starting a topology (`squall run`, `squall.run`, `LocalCluster`,
# `complete_topology`) gets its runner from `make_runner`, and `complete_topology` asks it only
# what this protocol offers.

Progress = Callable[[MetricsSnapshot], None]


class Runner(Protocol):
    """A topology being run (see the comment above)."""

    topology: Topology
    conf: Mapping[str, Any]  # the user's keys, as given
    errors: list[ErrorRecord]  # every error reported so far, in order

    def run(
        self,
        *,
        duration_ms: int | None = None,
        until_complete: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Progress | None = None,
        progress_every_ms: int = 1000,
    ) -> RunResult:
        """Run until the first of these ends it, then return the result:

        - `until_complete`: the bounded input is processed (`complete()`);
        - `duration_ms`: that much time passed on the runner's own clock since `run` began (the
          local runners': the `Clock` they were given, simulated time included; the Spark
          runners': wall time);
        - `should_stop()`: it returned True; the runner calls it between units of work (the
          local runner: every scheduling round; a Trident or transactional runner: between
          transactions; a Spark runner: every poll of its query, about every 50 ms);
        - an operator's stop (`request_stop`).

        The first two and `should_stop` end the run where it is: what is in flight is not
        waited for (a restart from a checkpoint replays it).
        """
        ...

    def complete(self) -> bool:
        """Whether the run has started and all its input is processed: every spout exhausted and
        everything it emitted settled (Trident and transactional topologies: every batch
        committed). Callable from another thread while running."""
        ...

    def incomplete(self) -> list[str]:
        """What keeps `complete()` false, one phrase each (spouts not exhausted, tuple trees
        pending, batches committed so far); empty once complete. For a message when a run
        ends before completing."""
        ...

    def spout_instances(self) -> dict[int, Any]:
        """Per spout task, the spout instance the run called, where it runs in this process
        (the local runner of spouts and bolts); empty for a runner whose spouts run elsewhere
        or are coordinated in batches."""
        ...

    def captured(self) -> dict[int, list[tuple[str, list[Any]]]]:
        """A runner built with `capture=True`: per task, what it emitted as (stream, values), in
        order (Trident: each operation's output rows, under its first task); otherwise empty."""
        ...

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        """Per spout task, the message ids the framework acked (`ack`) and failed (`fail`) on
        the spout, in order; empty for spouts that settle batches, not tuples."""
        ...

    def component_stats(self) -> dict[str, ComponentStats]:
        """Every component's counters so far; callable from another thread while running."""
        ...

    def metrics(self) -> MetricsSnapshot:
        """Every figure so far (squall.metrics); callable from another thread while running."""
        ...

    def result(self) -> RunResult:
        """The counters, errors and elapsed time so far, with runner-specific `extra`."""
        ...

    def carry(self, before: MetricsSnapshot) -> None:
        """Let `metrics()` count on from `before`, the previous start's last snapshot (a
        rebalance starts the topology again within one run)."""
        ...

    # Operator controls (squall.runtime.lifecycle): callable from another thread; the run's
    # own loop carries them out.
    def request_stop(self, timeout_s: float | None = None) -> None:
        """Stop pulling the spouts, let in-flight work finish (at most `timeout_s`), then let
        `run` return its result."""
        ...

    def deactivate(self) -> None:
        """Stop calling the spouts' `next_tuple` (Storm's deactivate); trees in flight finish."""
        ...

    def activate(self) -> None:
        """Call the spouts' `next_tuple` again (Storm's activate)."""
        ...

    def status(self) -> str:
        """`active`, `inactive` or `stopping`."""
        ...

    def stopped(self) -> str | None:
        """How a requested stop ended: `drained` or `timed out`; None if none was requested."""
        ...
