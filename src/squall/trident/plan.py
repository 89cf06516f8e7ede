"""The Trident plan: one `PlanNode` per stream operation, stored in the topology description.

`TridentTopology.build` turns the stream graph into an ordinary `Topology` whose components are
the plan's nodes (spouts: `roles.TRIDENT_SPOUT`, operations: `roles.TRIDENT`); each component's
payload is its `PlanNode`. `trident_plan(topology)` reads the plan back, so a Trident topology
travels and is fingerprinted like any other, and `squall visualize` draws its operations.

>>> n = PlanNode("split", "each", ("spout",), ("sentence", "word"), 2, {"input": ("sentence",)})
>>> n.kind in ROW_KINDS, n.parents
(True, ('spout',))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squall.topology import roles
from squall.topology.description import Topology

# Operations that keep their input's partitioning (run per partition, row by row or per batch).
ROW_KINDS = frozenset({"each", "map", "flat_map", "filter", "peek", "project", "state_query"})


@dataclass(frozen=True)
class PlanNode:
    """One operation: its component id, kind, parent component ids, output fields, number of
    partitions, and kind-specific arguments (operations, input fields, state factories)."""

    cid: str
    kind: str
    parents: tuple[str, ...]
    fields: tuple[str, ...]
    parallelism: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """The nodes in topological order (parents first), spouts first."""

    nodes: tuple[PlanNode, ...]

    def node(self, cid: str) -> PlanNode:
        for n in self.nodes:
            if n.cid == cid:
                return n
        raise KeyError(cid)

    @property
    def spouts(self) -> list[PlanNode]:
        return [n for n in self.nodes if n.kind == "spout"]

    def descends(self, cid: str, ancestor: str) -> bool:
        """Whether operation `cid` reads, through its parents, the output of `ancestor`."""
        return _descends({n.cid: n for n in self.nodes}, cid, ancestor)

    def children(self, cid: str) -> list[PlanNode]:
        return [n for n in self.nodes if cid in n.parents]

    def states(self) -> dict[str, Any]:
        """State name -> factory, for every state the plan writes or reads."""
        out: dict[str, Any] = {}
        for n in self.nodes:
            if "state" in n.args:
                out[n.args["state"]] = n.args["factory"]
        return out


def is_trident(topology: Topology) -> bool:
    return any(s.role == roles.TRIDENT_SPOUT for s in topology.components.values())


def trident_plan(topology: Topology) -> Plan:
    """The plan stored in `topology` (built by `TridentTopology.build`)."""
    nodes = {cid: spec.new_instance() for cid, spec in topology.components.items()
             if spec.role in (roles.TRIDENT, roles.TRIDENT_SPOUT)}
    # Kahn's algorithm in creation order, with one extra rule: a state_query of a state this
    # topology updates runs before the update, unless it reads the update's own stream
    # (execution.py: a query sees the state as of the previous batch).
    after: dict[str, set[str]] = {cid: set(n.parents) for cid, n in nodes.items()}
    for cid, n in nodes.items():
        writer = n.args.get("writer")
        if n.kind == "state_query" and writer in nodes and not _descends(nodes, cid, writer):
            after[writer].add(cid)
    order: list[PlanNode] = []
    ready = sorted((c for c in nodes if not after[c]), key=lambda c: nodes[c].args.get("order", 0))
    while ready:
        cid = ready.pop(0)
        order.append(nodes[cid])
        for other, deps in after.items():
            if cid in deps:
                deps.discard(cid)
                if not deps:
                    ready.append(other)
        ready.sort(key=lambda c: nodes[c].args.get("order", 0))
    return Plan(tuple(order))


def _descends(nodes: dict[str, PlanNode], cid: str, ancestor: str) -> bool:
    stack = list(nodes[cid].parents)
    while stack:
        p = stack.pop()
        if p == ancestor:
            return True
        stack.extend(nodes[p].parents)
    return False
