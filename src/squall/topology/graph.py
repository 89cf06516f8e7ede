"""The component graph of a `Topology`: execution order, cycles, neighbours.

Pure functions of the description (no runner, no Spark, no clock), so every runner and the state
protocol answer these questions the same way. Edges go from a component to the bolts that
subscribe to any of its streams.

>>> from squall import TopologyBuilder, BasicBolt, Fields
>>> from squall.testing import FixedTupleSpout
>>> class B(BasicBolt):
...     def execute(self, tup, collector): pass
...     def declare_output_fields(self, d): d.declare(Fields("x"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("s", FixedTupleSpout([], Fields("x")))
>>> _ = b.set_bolt("count", B()).shuffle_grouping("split").shuffle_grouping("s")
>>> _ = b.set_bolt("split", B()).shuffle_grouping("s")
>>> _ = b.set_bolt("audit", B()).shuffle_grouping("s")
>>> t = b.create_topology()
>>> bolt_order(t), is_acyclic(t)
(['audit', 'split', 'count'], True)
>>> sorted(upstream(t, "count")), sorted(downstream(t, "s"))
(['s', 'split'], ['audit', 'count', 'split'])
"""

from __future__ import annotations

from squall.topology.description import Topology


def bolt_order(topology: Topology) -> list[str]:
    """Bolt ids, each after the bolts it subscribes to (the order of the Spark runner's stages).

    Built level by level: the bolts whose inputs are all placed, sorted by id, then the next
    level, so the order depends only on the graph. A cycle (which only the local runner runs) is
    broken by placing the smallest remaining id, so the function always terminates.

    >>> from squall import TopologyBuilder, BasicBolt, Fields
    >>> from squall.testing import FixedTupleSpout
    >>> class B(BasicBolt):
    ...     def execute(self, tup, collector): pass
    ...     def declare_output_fields(self, d): d.declare(Fields("x"))
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("s", FixedTupleSpout([], Fields("x")))
    >>> _ = b.set_bolt("a", B()).shuffle_grouping("z")
    >>> _ = b.set_bolt("z", B()).shuffle_grouping("s")
    >>> bolt_order(b.create_topology())
    ['z', 'a']
    >>> _ = b.set_bolt("y", B()).shuffle_grouping("x")
    >>> _ = b.set_bolt("x", B()).shuffle_grouping("y").shuffle_grouping("s")
    >>> bolt_order(b.create_topology())  # x and y wait for each other: x, the smaller, goes first
    ['z', 'a', 'x', 'y']
    """
    bolts = topology.bolts
    order: list[str] = []
    done: set[str] = set(topology.spouts)
    while len(order) < len(bolts):
        ready = sorted(cid for cid, spec in bolts.items()
                       if cid not in done and all(s.component in done for s in spec.inputs))
        if not ready:  # a cycle: take the first remaining bolt
            ready = [min(cid for cid in bolts if cid not in done)]
        order.extend(ready)
        done.update(ready)
    return order


def is_acyclic(topology: Topology) -> bool:
    """True when no component can receive, directly or indirectly, its own output.

    >>> from squall import TopologyBuilder, BasicBolt, Fields
    >>> from squall.testing import FixedTupleSpout
    >>> class B(BasicBolt):
    ...     def execute(self, tup, collector): pass
    ...     def declare_output_fields(self, d): d.declare(Fields("x"))
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("s", FixedTupleSpout([], Fields("x")))
    >>> _ = b.set_bolt("a", B()).shuffle_grouping("s")
    >>> is_acyclic(b.create_topology())
    True
    >>> _ = b.set_bolt("loop", B()).shuffle_grouping("a").shuffle_grouping("loop")
    >>> is_acyclic(b.create_topology())
    False
    """
    successors = _successors(topology)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(cid: str) -> bool:
        state[cid] = 1
        for nxt in successors[cid]:
            mark = state.get(nxt)
            if mark == 1 or (mark is None and not visit(nxt)):
                return False
        state[cid] = 2
        return True

    return all(state.get(cid) == 2 or visit(cid) for cid in topology.components)


def upstream(topology: Topology, component_id: str) -> set[str]:
    """The components `component_id` subscribes to (on any stream)."""
    return {s.component for s in topology.components[component_id].inputs}


def downstream(topology: Topology, component_id: str) -> set[str]:
    """The bolts that subscribe to a stream of `component_id`."""
    return _successors(topology)[component_id]


def _successors(topology: Topology) -> dict[str, set[str]]:
    """Component id -> the bolts subscribing to it, for every component."""
    out: dict[str, set[str]] = {cid: set() for cid in topology.components}
    for cid, spec in topology.components.items():
        for sub in spec.inputs:
            out[sub.component].add(cid)
    return out
