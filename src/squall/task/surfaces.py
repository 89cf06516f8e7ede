"""What the task layer's parts see of a task: the protocols the tasks (squall.task.tasks) satisfy.

The tasks build their collectors, their checkpointing and their snapshots; typing those against
these protocols rather than against the task classes keeps the task layer free of import cycles
(tasks.py imports the parts, the parts import only this module). mypy checks that the tasks
satisfy them where a task hands itself over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from squall.components.context import TopologyContext
from squall.protocols import Host, SpoutHost
from squall.task.routing import StreamRoute
from squall.task.stats import TaskStats
from squall.topology.description import Topology
from squall.topology.tuple import Tuple

# The host a task's collector is bound to: a spout task's offers less than a bolt task's.
H_co = TypeVar("H_co", bound=SpoutHost, covariant=True)


class EmittingTask(Protocol[H_co]):
    """What a collector reads of its task when it is built (`H_co`: the kind of host)."""

    component_id: str
    task_id: int
    capture: list[Any] | None
    stats: TaskStats
    routes: dict[str, StreamRoute]
    rand64: Callable[[], int]
    tracking: bool

    @property
    def host(self) -> H_co: ...


class TrackingTask(EmittingTask[SpoutHost], Protocol):
    """A spout task: its collector registers the tuple trees it starts."""

    def track(self, root: int, msg_id: Any, stream: str, xor: int,
              values: Any = None) -> None: ...

    def ack_untracked(self, msg_id: Any) -> None: ...


class RestorableTask(Protocol):
    """What a snapshot (squall.task.snapshot) reads and replaces of a task."""

    topology: Topology
    task_id: int
    component_id: str
    context: TopologyContext
    instance: Any
    routes: dict[str, StreamRoute]
    rand64: Callable[[], int]

    def collector_reference(self, kind: str) -> Any:
        """The collector a pickled collector reference of `kind` resolves to."""
        ...

    def framework_saved(self) -> tuple[Any, Any]: ...

    def restore_framework(self, window: Any, checkpointing: Any) -> None: ...

    def rebind(self) -> None: ...


class CheckpointedTask(Protocol):
    """What a bolt task's checkpointing (squall.task.checkpointing) uses of the task."""

    topology: Topology
    component_id: str
    task_id: int
    context: TopologyContext
    instance: Any
    host: Host
    execute: Callable[[Tuple], None]

    @property
    def conf(self) -> Mapping[str, Any]: ...

    @property
    def collector(self) -> Any: ...

    @property
    def window(self) -> Any: ...

    def report(self, error: BaseException, stream: str | None = None) -> None: ...

    def prepare_instance(self, out: Any) -> None: ...
