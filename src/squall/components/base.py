"""Base classes users subclass: `Spout`, `Bolt`, `BasicBolt`.

Components are created once by the user, pickled into the topology, and unpickled once per task,
so every task has its own instance. Keep connections and other unpicklable resources out of
`__init__`; open them in `open`/`prepare`.

>>> from squall.topology.fields import Fields, Values
>>> class Upper(BasicBolt):
...     def execute(self, tup, collector):
...         collector.emit(Values(tup[0].upper()))
...     def declare_output_fields(self, declarer):
...         declarer.declare(Fields("word"))
>>> Upper().declared_streams()["default"].fields
Fields('word',)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from squall.protocols import (
    BasicOutputCollectorLike,
    OutputCollectorLike,
    SpoutOutputCollectorLike,
)
from squall.topology import roles
from squall.topology.declarer import OutputFieldsDeclarer, StreamSpec

if TYPE_CHECKING:
    # Types only: the context module imports the topology description, which is all this
    # module needs of it at run time.
    from squall.components.context import TopologyContext
    from squall.topology.description import Subscription
    from squall.topology.tuple import Tuple


class Component:
    """What spouts and bolts share: output declaration and per-component configuration.

    `role` says how the task layer hosts the component (`squall.topology.roles`); the builder
    records it in the topology description.
    """

    role: str = roles.RICH

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the streams this component emits (none by default)."""

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """Configuration for this component only, overlaid on the topology's."""
        return None

    def declared_streams(self) -> dict[str, StreamSpec]:
        declarer = OutputFieldsDeclarer()
        self.declare_output_fields(declarer)
        return declarer.streams

    # ---- checks the builder runs when it creates the topology --------------------------------
    def implicit_inputs(
        self, inputs: list[Subscription], streams: Mapping[str, Mapping[str, StreamSpec]]
    ) -> list[Subscription]:
        """Subscriptions the component adds for itself (a windowed operator: the watermark
        stream of each upstream operator); `streams` maps component ids to declared streams."""
        return []

    def derived_streams(
        self, component_id: str, inputs: list[Subscription],
        streams: Mapping[str, Mapping[str, StreamSpec]], conf: Mapping[str, Any],
    ) -> dict[str, StreamSpec]:
        """Streams whose fields follow from the component's inputs (a windowed bolt's late
        stream carries its inputs' fields), declared once the inputs are known; `conf` is the
        component's configuration, its own and what the topology added."""
        return {}

    def check_inputs(self, component_id: str, inputs: list[Subscription]) -> None:
        """Raise `InvalidTopologyError` if the component cannot take these inputs."""

    def check_component(self, component_id: str) -> None:
        """Raise `InvalidTopologyError` if the component is misconfigured."""


class Spout(Component):
    role = roles.SPOUT
    """A source of tuples. `next_tuple` emits zero or more tuples per call and must not block."""

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: SpoutOutputCollectorLike

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext,
        collector: SpoutOutputCollectorLike,
    ) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def next_tuple(self) -> None:
        """Emit the next tuple(s), if any."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of `msg_id` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of `msg_id` failed or timed out; replay it if it must not be lost."""

    def close(self) -> None: ...

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...

    def is_exhausted(self) -> bool:
        """True while this spout has emitted all its input and has no replay waiting.

        Storm's spouts never end; bounded sources (files, test data) say so here, which lets
        `run` and `complete_topology` finish once all input is processed and every tracked tree
        has settled. A fail that queues a replay makes it False again.
        """
        return False


class Bolt(Component):
    """Processes tuples; acks or fails each input through its `OutputCollector`."""

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: OutputCollectorLike

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollectorLike
    ) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup)")

    def on_batch_end(self, batch_id: int) -> None:
        """The runner finished a batch of this task's input (see `BasicBolt.on_batch_end`)."""

    def cleanup(self) -> None: ...


class BasicBolt(Component):
    """A bolt whose emits are anchored to the input and whose input is acked after `execute`.

    Raise `FailedException` to fail the input instead.
    """

    role = roles.BASIC

    conf: Mapping[str, Any]
    context: TopologyContext

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.conf = conf
        self.context = context

    def execute(self, tup: Tuple, collector: BasicOutputCollectorLike) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup, collector)")

    def on_batch_end(self, batch_id: int) -> None:
        """The runner finished delivering a batch of input to this task.

        On Spark a batch is a micro-batch and `batch_id` its id, which a replay after a failure
        repeats: a bolt that writes output per batch id is idempotent. The local runner ends a
        batch every `squall.local.batch.ms` (default 1000) of its clock and when it stops, with
        ids 0, 1, 2, ... Storm has no such call; bolts that buffer work (sinks) use it to flush.
        """

    def cleanup(self) -> None: ...
