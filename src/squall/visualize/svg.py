"""A topology drawn as SVG by squall itself (no Graphviz needed), from `layout`.

Each component is a `<g class="node spout">` or `<g class="node bolt">` (its id in `data-id`, a
tooltip in `<title>`), each subscription a `<g class="edge">` with `data-source`,
`data-stream` and `data-target`, its path and its label, so a page can find and restyle them.
All text is escaped for XML; characters XML cannot hold become U+FFFD.

>>> import xml.etree.ElementTree as ET
>>> from squall.visualize.graph import Edge, Node, TopologyGraph
>>> svg = to_svg(TopologyGraph(
...     (Node("a<b", "spout", "spout", "S", 1), Node("c&d", "bolt", "basic", "B", 2)),
...     (Edge("a<b", "default", "c&d", "shuffle"),)))
>>> root = ET.fromstring(svg)
>>> [g.get("data-id") for g in root.iter("{http://www.w3.org/2000/svg}g")
...  if g.get("class", "").startswith("node")]
['a<b', 'c&d']
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from squall.visualize.graph import TopologyGraph
from squall.visualize.layout import FONT_SIZE, LABEL_FONT_SIZE, Layout, layout
from squall.visualize.style import (
    BACKGROUND,
    BOLT_FILL,
    BOLT_STROKE,
    EDGE,
    FONT_FAMILY,
    FRAMEWORK_EDGE,
    SPOUT_FILL,
    SPOUT_STROKE,
    TEXT,
)

# Characters XML 1.0 cannot hold (control characters other than tab and line breaks).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text: str) -> str:
    """`text` escaped for an XML element's content.

    >>> xml_text("a<b & c\\x01")
    'a&lt;b &amp; c\\ufffd'
    """
    return escape(_NOT_XML.sub("\ufffd", text))


def xml_attr(text: str) -> str:
    """`text` as a quoted XML attribute value.

    >>> xml_attr('say "hi" & <go>')
    '"say &quot;hi&quot; &amp; &lt;go&gt;"'
    """
    escaped = escape(_NOT_XML.sub("\ufffd", text),
                     {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})
    return f'"{escaped}"'


def to_svg(graph: TopologyGraph, drawing: Layout | None = None) -> str:
    """An SVG document of `graph`, drawn from `drawing` (by default `layout(graph)`)."""
    lay = drawing if drawing is not None else layout(graph)
    nodes = {n.id: n for n in graph.nodes}
    w, h = f"{lay.width:g}", f"{lay.height:g}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family={xml_attr(FONT_FAMILY)} font-size="{FONT_SIZE}">',
        "  <defs>",
        '    <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        f'markerHeight="8" orient="auto"><path d="M 0 1 L 9 5 L 0 9 z" fill="{EDGE}"/></marker>',
        '    <marker id="arrow-framework" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        f'markerHeight="8" orient="auto"><path d="M 0 1 L 9 5 L 0 9 z" '
        f'fill="{FRAMEWORK_EDGE}"/></marker>',
        "  </defs>",
        f'  <rect width="100%" height="100%" fill="{BACKGROUND}"/>',
    ]
    for r in lay.routes:
        colour, marker = (FRAMEWORK_EDGE, "arrow-framework") if r.framework else (EDGE, "arrow")
        dash = ' stroke-dasharray="5 4"' if r.framework else ""
        classes = "edge" + (" framework" if r.framework else "") + (" back" if r.back else "")
        out.append(f'  <g class="{classes}" data-source={xml_attr(r.source)} '
                   f"data-stream={xml_attr(r.stream)} data-target={xml_attr(r.target)}>")
        out.append(f'    <path d="{r.d}" fill="none" stroke="{colour}" stroke-width="1.4"'
                   f'{dash} marker-end="url(#{marker})"/>')
        x, y = r.label_at
        bx, by, bw, bh = r.label_box
        out.append(f'    <rect x="{bx:g}" y="{by:g}" width="{bw:g}" height="{bh:g}" rx="3" '
                   f'fill="{BACKGROUND}" fill-opacity="0.9"/>')
        out.append(f'    <text x="{x:g}" y="{y:g}" text-anchor="middle" '
                   f'font-size="{LABEL_FONT_SIZE}" fill="{TEXT}">{xml_text(r.label)}</text>')
        out.append("  </g>")
    for b in lay.boxes:
        node = nodes[b.id]
        fill, stroke = (SPOUT_FILL, SPOUT_STROKE) if b.kind == "spout" else (BOLT_FILL,
                                                                            BOLT_STROKE)
        radius = min(b.height / 2, 22.0) if b.kind == "spout" else 4.0
        cx, cy = b.center
        out.append(f'  <g class="node {b.kind}" data-id={xml_attr(b.id)}>')
        out.append(f"    <title>{xml_text(node.summary)}</title>")
        out.append(f'    <rect x="{b.x:g}" y="{b.y:g}" width="{b.width:g}" '
                   f'height="{b.height:g}" rx="{radius:g}" fill="{fill}" stroke="{stroke}" '
                   'stroke-width="1.5"/>')
        out.append(f'    <text x="{cx:g}" y="{cy - 3:g}" text-anchor="middle" '
                   f'font-weight="bold" fill="{TEXT}">{xml_text(b.lines[0])}</text>')
        out.append(f'    <text x="{cx:g}" y="{cy + 13:g}" text-anchor="middle" '
                   f'font-size="{LABEL_FONT_SIZE}" fill="{TEXT}">{xml_text(b.lines[1])}</text>')
        out.append("  </g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


__all__ = ["to_svg", "xml_attr", "xml_text"]
