"""A topology as a Mermaid flowchart (`flowchart LR`), for Markdown that renders Mermaid.

Spouts are stadium-shaped, bolts rectangles, each labelled with its id, class and number of
tasks; edges carry the stream (unless `default`) and the grouping; framework streams are dotted.
Mermaid lays the chart out itself.

>>> from squall.visualize.graph import Edge, Node, TopologyGraph
>>> print(to_mermaid(TopologyGraph(
...     (Node("words", "spout", "spout", "WordSpout", 2), Node("end", "bolt", "basic", "Sink", 1)),
...     (Edge("words", "default", "end", "fields(word)"),))))
flowchart LR
    words(["words<br/>WordSpout x2"]):::spout
    n1["end<br/>Sink x1"]:::bolt
    words -->|"fields(word)"| n1
    classDef spout fill:#e3f0fb,stroke:#2f6fae,color:#1b2733
    classDef bolt fill:#fff4e0,stroke:#b7791f,color:#1b2733
<BLANKLINE>
"""

from __future__ import annotations

import re

from squall.visualize.graph import TopologyGraph
from squall.visualize.style import BOLT_FILL, BOLT_STROKE, SPOUT_FILL, SPOUT_STROKE, TEXT

_PLAIN_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words Mermaid's flowchart grammar reads as keywords where a node id would stand.
_RESERVED = frozenset({"end", "graph", "flowchart", "subgraph", "direction", "style", "class",
                       "classdef", "click", "linkstyle", "call", "href", "default"})
# Mermaid's entity codes; `#` first, since the others are written with it.
_ENTITIES = (("#", "#35;"), ("&", "#38;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"),
             ("|", "#124;"), ("`", "#96;"))


def mermaid_text(text: str) -> str:
    """`text` for inside a quoted Mermaid label: entity codes for the characters Mermaid would
    read, and one line.

    >>> mermaid_text('a "b" <c> #1 | x')
    'a #quot;b#quot; #lt;c#gt; #35;1 #124; x'
    """
    for char, code in _ENTITIES:
        text = text.replace(char, code)
    return " ".join(text.splitlines()) if text else text


def node_ids(graph: TopologyGraph) -> dict[str, str]:
    """The id each component has in the chart: its own when Mermaid can read it as an id,
    otherwise `n<position>` (made unique).

    >>> from squall.visualize.graph import Node, TopologyGraph
    >>> node_ids(TopologyGraph((Node("a b", "spout", "spout", "S", 1),
    ...                         Node("n0", "bolt", "basic", "B", 1)), ()))
    {'a b': 'n0_', 'n0': 'n0'}
    """
    plain = {n.id for n in graph.nodes
             if _PLAIN_ID.fullmatch(n.id) and n.id.lower() not in _RESERVED}
    taken = set(plain)
    out: dict[str, str] = {}
    for i, node in enumerate(graph.nodes):
        if node.id in plain:
            out[node.id] = node.id
            continue
        candidate = f"n{i}"
        while candidate in taken:
            candidate += "_"
        taken.add(candidate)
        out[node.id] = candidate
    return out


def to_mermaid(graph: TopologyGraph) -> str:
    """The Mermaid flowchart of `graph` (see the module's example)."""
    ids = node_ids(graph)
    lines = ["flowchart LR"]
    for node in graph.nodes:
        label = f"{mermaid_text(node.id)}<br/>{mermaid_text(node.caption)}"
        shape = f'(["{label}"])' if node.kind == "spout" else f'["{label}"]'
        lines.append(f"    {ids[node.id]}{shape}:::{node.kind}")
    for edge in graph.edges:
        arrow = "-.->" if edge.framework else "-->"
        lines.append(f'    {ids[edge.source]} {arrow}|"{mermaid_text(edge.label)}"| '
                     f"{ids[edge.target]}")
    lines.append(f"    classDef spout fill:{SPOUT_FILL},stroke:{SPOUT_STROKE},color:{TEXT}")
    lines.append(f"    classDef bolt fill:{BOLT_FILL},stroke:{BOLT_STROKE},color:{TEXT}")
    return "\n".join(lines) + "\n"


__all__ = ["mermaid_text", "node_ids", "to_mermaid"]
