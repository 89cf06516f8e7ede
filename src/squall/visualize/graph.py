"""The picture's model of a `Topology`: components as nodes, subscriptions as edges.

Plain frozen data read from the description alone (no component is unpickled), which every
renderer and the layout take as input. One edge per (source component, stream, target bolt); its
grouping is shown as `grouping_text` shows it (`fields(word)`, `shuffle`, `custom(Name)`, ...).

>>> from squall import BasicBolt, Fields, TopologyBuilder
>>> from squall.testing import FixedTupleSpout
>>> class Split(BasicBolt):
...     def execute(self, tup, collector): pass
...     def declare_output_fields(self, d): d.declare(Fields("word"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("lines", FixedTupleSpout([], Fields("line")), parallelism=2)
>>> _ = b.set_bolt("split", Split(), parallelism=3).shuffle_grouping("lines")
>>> g = topology_graph(b.create_topology())
>>> [(n.id, n.kind, n.class_name, n.tasks) for n in g.nodes]
[('lines', 'spout', 'FixedTupleSpout', 2), ('split', 'bolt', 'Split', 3)]
>>> [(e.source, e.stream, e.target, e.grouping, e.label) for e in g.edges]
[('lines', 'default', 'split', 'shuffle', 'shuffle')]
>>> g.node("split").streams
(Stream(name='default', fields=('word',), direct=False),)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from squall.topology.declarer import DEFAULT_STREAM
from squall.topology.description import Topology
from squall.topology.graph import bolt_order
from squall.topology.groupings import grouping_text


@dataclass(frozen=True)
class Stream:
    """A stream a component declares: its name, its fields, whether it is direct."""

    name: str
    fields: tuple[str, ...]
    direct: bool = False


@dataclass(frozen=True)
class Node:
    """A component: its id, kind, role (`squall.topology.roles`), class and number of tasks."""

    id: str
    kind: Literal["spout", "bolt"]
    role: str
    class_name: str
    tasks: int
    streams: tuple[Stream, ...] = ()

    @property
    def caption(self) -> str:
        """The second line of the node's label: its class and number of tasks.

        >>> Node("count", "bolt", "rich", "WordCount", 3).caption
        'WordCount x3'
        """
        return f"{self.class_name} x{self.tasks}"

    @property
    def summary(self) -> str:
        """A one-line description, for tooltips.

        >>> Node("count", "bolt", "rich", "WordCount", 3,
        ...      (Stream("default", ("word", "count")),)).summary
        'count: bolt (rich), WordCount, 3 tasks; emits default(word, count)'
        """
        tasks = f"{self.tasks} task" + ("" if self.tasks == 1 else "s")
        text = f"{self.id}: {self.kind} ({self.role}), {self.class_name}, {tasks}"
        if self.streams:
            text += "; emits " + ", ".join(
                f"{s.name}({', '.join(s.fields)})" + (" direct" if s.direct else "")
                for s in self.streams)
        return text


@dataclass(frozen=True)
class Edge:
    """A subscription: `target` consumes `stream` of `source`, shared by `grouping`."""

    source: str
    stream: str
    target: str
    grouping: str

    @property
    def label(self) -> str:
        """The stream (unless it is `default`) and the grouping.

        >>> Edge("spend", "late", "report", "global").label
        'late: global'
        >>> Edge("split", "default", "count", "fields(word)").label
        'fields(word)'
        """
        return self.grouping if self.stream == DEFAULT_STREAM else f"{self.stream}: {self.grouping}"

    @property
    def framework(self) -> bool:
        """True for the framework's own streams (a transactional topology's `$batch`, `$commit`,
        `$coord`, `$done`; names starting with `$` or `_`), which pictures draw dashed.

        >>> Edge("$coord-tx", "$batch", "spout", "all").framework
        True
        """
        return self.stream.startswith(("$", "_"))


@dataclass(frozen=True)
class TopologyGraph:
    """Nodes in the order data flows: the spouts by id, then each bolt after the bolts it
    subscribes to (`squall.topology.graph.bolt_order`); edges by source, then target, then
    stream, in that order."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def node(self, node_id: str) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)


def topology_graph(topology: Topology) -> TopologyGraph:
    """The nodes and edges of `topology` (see the module's example).

    A bolt that subscribes twice to the same stream of a component (with two groupings) gets
    one edge whose grouping names both, joined by ` + `.
    """
    flow = [*sorted(topology.spouts), *bolt_order(topology)]
    position = {cid: i for i, cid in enumerate(flow)}
    nodes = tuple(
        Node(id=cid, kind=spec.kind, role=spec.role, class_name=spec.class_name,
             tasks=len(topology.component_tasks(cid)),
             streams=tuple(Stream(name, tuple(s.fields), s.direct)
                           for name, s in spec.streams.items()))
        for cid, spec in ((cid, topology.components[cid]) for cid in flow)
    )
    groupings: dict[tuple[str, str, str], list[str]] = {}
    for cid, spec in topology.components.items():
        for sub in spec.inputs:
            texts = groupings.setdefault((sub.component, sub.stream, cid), [])
            text = grouping_text(sub.grouping)
            if text not in texts:
                texts.append(text)
    edges = tuple(Edge(source, stream, target, " + ".join(texts))
                  for (source, stream, target), texts in sorted(
                      groupings.items(),
                      key=lambda item: (position[item[0][0]], position[item[0][2]], item[0][1])))
    return TopologyGraph(nodes, edges)


__all__ = ["Edge", "Node", "Stream", "TopologyGraph", "topology_graph"]
