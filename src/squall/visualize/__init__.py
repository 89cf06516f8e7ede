"""Pictures of a topology: Mermaid, Graphviz DOT, SVG and PNG (`squall visualize`).

`topology_graph` reads the description into nodes and edges (`graph`), `layout` places them
(`layout`: plain data a live view can reuse), and one module per format draws them. Nothing is
run and no component is unpickled.

>>> from squall import BasicBolt, Fields, TopologyBuilder
>>> from squall.testing import FixedTupleSpout
>>> class Count(BasicBolt):
...     def execute(self, tup, collector): pass
>>> b = TopologyBuilder()
>>> _ = b.set_spout("words", FixedTupleSpout([], Fields("word")))
>>> _ = b.set_bolt("count", Count(), parallelism=2).fields_grouping("words", Fields("word"))
>>> print(render(b.create_topology(), "mermaid"))
flowchart LR
    words(["words<br/>FixedTupleSpout x1"]):::spout
    count["count<br/>Count x2"]:::bolt
    words -->|"fields(word)"| count
    classDef spout fill:#e3f0fb,stroke:#2f6fae,color:#1b2733
    classDef bolt fill:#fff4e0,stroke:#b7791f,color:#1b2733
<BLANKLINE>
>>> format_for_path("docs/wordcount.svg"), format_for_path("wc.mmd"), format_for_path("wc.txt")
('svg', 'mermaid', None)
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Final

from squall.topology.description import Topology
from squall.visualize.dot import to_dot
from squall.visualize.graph import Edge, Node, Stream, TopologyGraph, topology_graph
from squall.visualize.layout import Box, Layout, Route, layout
from squall.visualize.mermaid import to_mermaid
from squall.visualize.png import PngUnavailableError, to_png
from squall.visualize.svg import to_svg

FORMATS: Final = ("mermaid", "dot", "svg", "png")
EXTENSIONS: Final = {".mmd": "mermaid", ".mermaid": "mermaid", ".dot": "dot", ".gv": "dot",
                     ".svg": "svg", ".png": "png"}


def format_for_path(path: str) -> str | None:
    """The format a file name's extension asks for, or None when it names none."""
    return EXTENSIONS.get(PurePath(path).suffix.lower())


def render(topology: Topology | TopologyGraph, fmt: str) -> str | bytes:
    """`topology` in format `fmt` (one of `FORMATS`): text, or bytes for PNG."""
    graph = topology if isinstance(topology, TopologyGraph) else topology_graph(topology)
    if fmt == "mermaid":
        return to_mermaid(graph)
    if fmt == "dot":
        return to_dot(graph)
    if fmt == "svg":
        return to_svg(graph)
    if fmt == "png":
        return to_png(graph)
    raise ValueError(f"unknown format {fmt!r}; the formats are {', '.join(FORMATS)}")


__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "Box",
    "Edge",
    "Layout",
    "Node",
    "PngUnavailableError",
    "Route",
    "Stream",
    "TopologyGraph",
    "format_for_path",
    "layout",
    "render",
    "to_dot",
    "to_mermaid",
    "to_png",
    "to_svg",
    "topology_graph",
]
