"""The Spark jobs a Trident transaction launches, as typed values: what the planner emits.

One frozen dataclass per kind of job (`planner.spark_jobs` plans them, `launch.Launcher` runs
them over a transaction's batch). Each holds its path from its spout (spout first, the operation
the job ends with last) and what the job needs of the plan; what it depends on in the batch
(the typed fields, how many partitions Spark made) is decided when it runs. `Tuning` holds the
runner's switches that shape the jobs.

>>> Tuning.from_conf({PARTIAL: "false", DRIVER_COMBINE: 0})
Tuning(partial=False, in_executors=True, driver_combine=0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from squall.trident.plan import AggregateNode, Node, PersistNode, StateQueryNode, WindowNode

# Combine in the Python worker before the shuffle (default true); false sends every row to the
# aggregation (for measuring what the partial aggregation gives).
PARTIAL = "squall.trident.spark.partial.aggregation"
# false: a persistent_aggregate's aggregates go to the driver, which applies them (for measuring).
IN_EXECUTORS = "squall.trident.spark.state.in.executors"
# Up to this many partitions' typed partials of a built-in combiner are combined on the driver
# by Arrow (W1: 0.3 s less than Spark's shuffle and JVM aggregation); more go through Spark.
DRIVER_COMBINE = "squall.trident.spark.driver.combine.partitions"


def _on(value: Any) -> bool:
    return str(value).lower() not in ("false", "0")


@dataclass(frozen=True)
class Tuning:
    """The switches of the Trident Spark runner that shape its jobs (configuration keys
    `PARTIAL`, `IN_EXECUTORS`, `DRIVER_COMBINE`)."""

    partial: bool = True
    in_executors: bool = True
    driver_combine: int = 16

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> Tuning:
        return cls(partial=_on(conf.get(PARTIAL, True)),
                   in_executors=_on(conf.get(IN_EXECUTORS, True)),
                   driver_combine=int(conf.get(DRIVER_COMBINE, cls.driver_combine)))


class _OneTerminal:
    """A job that computes the one operation ending its path."""

    terminal: Node

    @property
    def operations(self) -> tuple[str, ...]:
        """The operations whose results the job computes."""
        return (self.terminal.cid,)


@dataclass(frozen=True)
class AggregateJob(_OneTerminal):
    """An aggregation computed in Spark (`aggregate`, `group_by().aggregate`, or a
    `persistent_aggregate` applied on the driver): its per-key aggregates come back.

    `partial`: the combiner's partial aggregation runs in the worker (a user's combiner's
    always does); `driver_combine`: up to this many partitions' typed partials of a built-in
    are combined on the driver by Arrow, more by Spark."""

    kind: ClassVar[str] = "aggregate"
    path: tuple[Node, ...]
    terminal: AggregateNode | PersistNode
    partial: bool
    driver_combine: int


@dataclass(frozen=True)
class WindowJob(_OneTerminal):
    """An event-time window operation's partials per (window, key), computed in the workers
    and finished on the driver (`trident.windows`)."""

    kind: ClassVar[str] = "window"
    path: tuple[Node, ...]
    terminal: WindowNode


@dataclass(frozen=True)
class QueryJob(_OneTerminal):
    """A `state_query` read in the tasks holding the `partitions` partitions of its state
    (`trident.state_query`): its output rows come back."""

    kind: ClassVar[str] = "query"
    path: tuple[Node, ...]
    terminal: StateQueryNode
    partitions: int


@dataclass(frozen=True)
class StateJob:
    """`persistent_aggregate`s of one path, keys and number of state partitions, applied in the
    tasks holding their states' `partitions` partitions (`trident.state`), in one job: how many
    keys each wrote comes back, and their new rows where `collect` says so (a later operation
    or the caller reads them)."""

    kind: ClassVar[str] = "state"
    path: tuple[Node, ...]
    terminals: tuple[PersistNode, ...]
    partitions: int
    collect: tuple[bool, ...]

    @property
    def operations(self) -> tuple[str, ...]:
        """The operations whose results the job computes."""
        return tuple(t.cid for t in self.terminals)


@dataclass(frozen=True)
class PersistJob(_OneTerminal):
    """A `partition_persist` into a `TaskStateFactory`'s state, updated in the tasks
    (`trident.persist`): each Spark partition's state made and updated in its task. How many
    rows the updaters emitted comes back, and the rows themselves when `collect` says so (a
    later operation or the caller reads them)."""

    kind: ClassVar[str] = "persist"
    path: tuple[Node, ...]
    terminal: PersistNode
    collect: bool


SparkJob = AggregateJob | WindowJob | QueryJob | StateJob | PersistJob


@dataclass(frozen=True)
class Launched:
    """A Spark job a transaction ran: its kind, the route its data took (`launch`), and the
    operations it computed."""

    txid: int
    kind: str
    route: str
    operations: tuple[str, ...]
