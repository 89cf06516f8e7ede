"""`TopologyContext`: what a task knows about itself and the topology around it.

>>> from squall.components.base import Spout, BasicBolt
>>> from squall.builder import TopologyBuilder
>>> from squall.topology.fields import Fields
>>> class Src(Spout):
...     def declare_output_fields(self, d): d.declare(Fields("word"))
>>> class Sink(BasicBolt):
...     def execute(self, tup, collector): pass
>>> b = TopologyBuilder()
>>> _ = b.set_spout("src", Src(), 2)
>>> _ = b.set_bolt("sink", Sink(), 3).shuffle_grouping("src")
>>> ctx = TopologyContext(b.create_topology(), {}, task_id=2)
>>> ctx.this_component_id, ctx.this_task_index, ctx.component_tasks("sink")
('sink', 1, [1, 2, 3])
>>> list(ctx.this_sources)
[('src', 'default')]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from squall.metrics.user import METRIC_TYPES
from squall.topology.description import Topology
from squall.topology.fields import Fields
from squall.topology.groupings import Grouping


class TopologyContext:
    def __init__(self, topology: Topology, conf: Mapping[str, Any], task_id: int) -> None:
        self.topology = topology
        self.conf = conf
        self.this_task_id = task_id
        self.this_component_id = topology.task_component(task_id)
        tasks = topology.component_tasks(self.this_component_id)
        self.this_task_index = tasks.index(task_id)
        self.registered_metrics: dict[str, Any] = {}  # register_metric's, by name

    def register_metric(self, name: str, metric: Any, time_bucket_size_secs: int = 60) -> Any:
        """Storm's `registerMetric`: `metric` (a `CountMetric`, `MultiCountMetric` or
        `ReducedMetric`, squall.metrics.user) is collected by the runner and shown in the run's
        metrics under this component and `name`; returns it. Keep it as an attribute of the
        component, as Storm's examples do: a restored component's metrics are found there.
        `time_bucket_size_secs` is accepted for Storm's signature; squall shows totals since the
        run started."""
        if not isinstance(metric, METRIC_TYPES):
            raise TypeError(
                f"component {self.this_component_id!r}: metric {name!r} is a "
                f"{type(metric).__name__}; register a CountMetric, MultiCountMetric or "
                "ReducedMetric(MeanReducer()) from squall.metrics.user")
        known = self.registered_metrics.get(name)
        if known is not None and known is not metric:
            raise ValueError(f"component {self.this_component_id!r} already registered a metric "
                             f"named {name!r}; give each metric its own name")
        metric._squall_name = name
        self.registered_metrics[name] = metric
        return metric

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # In a snapshot of a component, the context is the restoring task's own.
        return (current_context, ())

    def component_tasks(self, component_id: str) -> list[int]:
        return list(self.topology.component_tasks(component_id))

    def get_component_tasks(self, component_id: str) -> list[int]:
        return self.component_tasks(component_id)

    def get_component_id(self, task_id: int) -> str:
        return self.topology.task_component(task_id)

    @property
    def this_component_tasks(self) -> list[int]:
        return self.component_tasks(self.this_component_id)

    @property
    def this_sources(self) -> dict[tuple[str, str], Grouping]:
        """(component, stream) → grouping, for every input of this component."""
        spec = self.topology.components[self.this_component_id]
        return {(s.component, s.stream): s.grouping for s in spec.inputs}

    @property
    def this_targets(self) -> dict[str, dict[str, Grouping]]:
        """stream → {subscribing component: grouping}, for every output of this component."""
        spec = self.topology.components[self.this_component_id]
        return {
            stream: {
                bid: sub.grouping for bid, sub in self.topology.subscribers(spec.id, stream)
            }
            for stream in spec.streams
        }

    @property
    def this_stream_ids(self) -> list[str]:
        return list(self.topology.components[self.this_component_id].streams)

    def get_component_output_fields(self, component_id: str, stream_id: str) -> Fields:
        return self.topology.components[component_id].streams[stream_id].fields

    def get_this_output_fields(self, stream_id: str = "default") -> Fields:
        return self.get_component_output_fields(self.this_component_id, stream_id)


# While a snapshot of a task is loaded (squall.task.snapshot), a context in it resolves to the
# restoring task's own: the snapshot layer pushes that context here for the duration of the load.
_restoring: list[TopologyContext] = []


@contextmanager
def restoring_context(context: TopologyContext) -> Iterator[None]:
    """Contexts unpickled inside this block resolve to `context`."""
    _restoring.append(context)
    try:
        yield
    finally:
        _restoring.pop()


def current_context() -> TopologyContext:
    """The context of the task being restored (what a pickled context resolves to)."""
    if not _restoring:
        raise RuntimeError("a context can only be unpickled while a task is being restored")
    return _restoring[-1]
