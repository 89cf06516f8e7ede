"""`Topology`: the immutable description runners execute.

Each component is stored as cloudpickle bytes and unpickled once per task (`new_instance`), so
tasks never share an instance and later changes to the user's object do not leak in. The whole
description pickles, which is how the Spark runner ships it to executors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import cloudpickle

from squall.errors import InvalidTopologyError
from squall.topology.declarer import StreamSpec
from squall.topology.groupings import Grouping


@dataclass(frozen=True)
class Subscription:
    """A bolt's input: a stream of a component, and how its tasks share it."""

    component: str
    stream: str
    grouping: Grouping


@dataclass(frozen=True)
class ComponentSpec:
    id: str
    kind: Literal["spout", "bolt"]
    role: str  # how the task layer hosts it: one of squall.topology.roles
    class_name: str
    payload: bytes = field(repr=False)
    parallelism: int
    num_tasks: int
    conf: Mapping[str, Any]
    streams: Mapping[str, StreamSpec]
    inputs: tuple[Subscription, ...]

    def new_instance(self) -> Any:
        """A fresh instance of the user's component, for one task."""
        return cloudpickle.loads(self.payload)


class Topology:
    """An immutable topology: components, their streams and subscriptions, task ids.

    Task ids are assigned as Storm does: components in sorted id order, each taking
    `num_tasks` consecutive ids from 1.
    """

    __slots__ = ("_components", "_task_component", "_tasks")
    _components: Mapping[str, ComponentSpec]
    _tasks: Mapping[str, tuple[int, ...]]
    _task_component: Mapping[int, str]

    def __init__(self, components: Mapping[str, ComponentSpec]) -> None:
        ordered = {cid: components[cid] for cid in sorted(components)}
        tasks: dict[str, tuple[int, ...]] = {}
        task_component: dict[int, str] = {}
        next_id = 1
        for cid, spec in ordered.items():
            ids = tuple(range(next_id, next_id + spec.num_tasks))
            next_id += spec.num_tasks
            tasks[cid] = ids
            for t in ids:
                task_component[t] = cid
        object.__setattr__(self, "_components", MappingProxyType(ordered))
        object.__setattr__(self, "_tasks", MappingProxyType(tasks))
        object.__setattr__(self, "_task_component", MappingProxyType(task_component))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Topology is immutable; build a new one with TopologyBuilder")

    def __reduce__(self):
        return (Topology, (dict(self._components),))

    @property
    def components(self) -> Mapping[str, ComponentSpec]:
        return self._components

    @property
    def spouts(self) -> dict[str, ComponentSpec]:
        return {cid: s for cid, s in self._components.items() if s.kind == "spout"}

    @property
    def bolts(self) -> dict[str, ComponentSpec]:
        return {cid: s for cid, s in self._components.items() if s.kind == "bolt"}

    def component_tasks(self, component_id: str) -> tuple[int, ...]:
        return self._tasks[component_id]

    def task_component(self, task_id: int) -> str:
        return self._task_component[task_id]

    @property
    def task_ids(self) -> tuple[int, ...]:
        return tuple(self._task_component)

    def subscribers(self, component_id: str, stream: str) -> list[tuple[str, Subscription]]:
        """The (bolt id, subscription) pairs consuming `stream` of `component_id`."""
        return [
            (bid, sub)
            for bid, spec in self._components.items()
            for sub in spec.inputs
            if sub.component == component_id and sub.stream == stream
        ]

    def with_parallelism(self, changes: Mapping[str, int]) -> Topology:
        """This topology with other numbers of tasks for some components (a rebalance):
        parallelism and tasks both become the new number, since a squall task is executed by
        one executor of its own.

        >>> from squall import TopologyBuilder, Fields
        >>> from squall.testing import FixedTupleSpout
        >>> b = TopologyBuilder()
        >>> _ = b.set_spout("words", FixedTupleSpout([["a"]], Fields("word")))
        >>> b.create_topology().with_parallelism({"words": 3})
        Topology(words[spout x3])
        >>> b.create_topology().with_parallelism({"wrds": 3})
        Traceback (most recent call last):
        ...
        squall.errors.InvalidTopologyError: no component 'wrds'; the topology has 'words'
        """
        for cid, n in changes.items():
            if cid not in self._components:
                known = ", ".join(repr(c) for c in self._components)
                raise InvalidTopologyError(f"no component {cid!r}; "
                                           f"the topology has {known}")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidTopologyError(
                    f"parallelism of {cid!r} must be a whole number >= 1, got {n!r}")
        return Topology({cid: dataclasses.replace(spec, parallelism=changes[cid],
                                                  num_tasks=changes[cid])
                         if cid in changes else spec
                         for cid, spec in self._components.items()})

    def __repr__(self) -> str:
        parts = ", ".join(f"{cid}[{s.kind} x{s.num_tasks}]" for cid, s in self._components.items())
        return f"Topology({parts})"
