"""A topology in Graphviz's DOT language (`dot -Tsvg`, `dot -Tpng`), laid out left to right.

Every id is a quoted string, escaped as DOT reads it. Spouts are rounded boxes, bolts boxes;
edges carry the stream (unless `default`) and the grouping; framework streams are dashed.

>>> from squall.visualize.graph import Edge, Node, TopologyGraph
>>> words = Node("words", "spout", "spout", "WordSpout", 2)
>>> odd = Node('say "hi"', "bolt", "basic", "B", 1)
>>> print(to_dot(TopologyGraph((words, odd), (Edge("words", "default", 'say "hi"', "shuffle"),))))
digraph topology {
    graph [rankdir=LR, fontname="Helvetica"];
    node [shape=box, fontname="Helvetica", fontsize=11, fontcolor="#1b2733"];
    edge [fontname="Helvetica", fontsize=10, color="#5a6270", fontcolor="#1b2733"];
    "words" [label="words\\nWordSpout x2", style="rounded,filled", fillcolor="#e3f0fb", \
color="#2f6fae", tooltip="words: spout (spout), WordSpout, 2 tasks"];
    "say \\"hi\\"" [label="say \\"hi\\"\\nB x1", style="filled", fillcolor="#fff4e0", \
color="#b7791f", tooltip="say \\"hi\\": bolt (basic), B, 1 task"];
    "words" -> "say \\"hi\\"" [label="shuffle"];
}
<BLANKLINE>
"""

from __future__ import annotations

from squall.visualize.graph import TopologyGraph
from squall.visualize.style import (
    BOLT_FILL,
    BOLT_STROKE,
    EDGE,
    FRAMEWORK_EDGE,
    SPOUT_FILL,
    SPOUT_STROKE,
    TEXT,
)


def dot_string(text: str) -> str:
    """`text` as a quoted DOT string: backslashes doubled (so none starts an escape such as
    `\\n` or `\\N`), quotes escaped, line breaks as `\\n`.

    >>> print(dot_string('a\\\\b "c"'))
    "a\\\\b \\"c\\""
    """
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "\\n".join(escaped.splitlines()) if escaped else escaped
    return f'"{escaped}"'


def to_dot(graph: TopologyGraph) -> str:
    """The DOT digraph of `graph` (see the module's example)."""
    lines = [
        "digraph topology {",
        '    graph [rankdir=LR, fontname="Helvetica"];',
        f'    node [shape=box, fontname="Helvetica", fontsize=11, fontcolor="{TEXT}"];',
        f'    edge [fontname="Helvetica", fontsize=10, color="{EDGE}", fontcolor="{TEXT}"];',
    ]
    for node in graph.nodes:
        # The label is one escaped string whose `\n` (added after escaping) breaks the line.
        label = dot_string(node.id)[:-1] + "\\n" + dot_string(node.caption)[1:]
        if node.kind == "spout":
            look = f'style="rounded,filled", fillcolor="{SPOUT_FILL}", color="{SPOUT_STROKE}"'
        else:
            look = f'style="filled", fillcolor="{BOLT_FILL}", color="{BOLT_STROKE}"'
        lines.append(f"    {dot_string(node.id)} [label={label}, {look}, "
                     f"tooltip={dot_string(node.summary)}];")
    for edge in graph.edges:
        extra = f', style=dashed, color="{FRAMEWORK_EDGE}"' if edge.framework else ""
        lines.append(f"    {dot_string(edge.source)} -> {dot_string(edge.target)} "
                     f"[label={dot_string(edge.label)}{extra}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["dot_string", "to_dot"]
