"""`squall visualize`: the exact Mermaid and DOT of a known topology, the SVG's structure, the
layout's geometry (left to right, no overlaps, cycles), escaping of odd ids, PNG, and the verb
end to end in a subprocess."""

from __future__ import annotations

import io
import itertools
import math
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from squall import BasicBolt, Fields, TopologyBuilder
from squall.testing import FixedTupleSpout
from squall.topology.description import Topology
from squall.visualize import (
    Layout,
    format_for_path,
    layout,
    render,
    to_dot,
    to_mermaid,
    to_svg,
    topology_graph,
)
from squall.visualize import png as png_module

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
SQUALL = [sys.executable, "-m", "squall.cli.main"]


class Split(BasicBolt):
    def execute(self, tup, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))
        declarer.declare_stream("errors", Fields("line", "error"))


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("x"))


def word_count() -> Topology:
    """A fields grouping, a shuffle, a non-default stream, parallelism above 1."""
    b = TopologyBuilder()
    b.set_spout("sentences", FixedTupleSpout([], Fields("sentence")), parallelism=2)
    b.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", Sink(), parallelism=3).fields_grouping("split", Fields("word"))
    b.set_bolt("audit", Sink()).global_grouping("split", "errors")
    return b.create_topology()


def with_cycle() -> Topology:
    """`merge` subscribes to `check`, downstream of it, and `check` to itself."""
    b = TopologyBuilder()
    b.set_spout("in", FixedTupleSpout([], Fields("x")))
    b.set_bolt("merge", Sink()).shuffle_grouping("in").shuffle_grouping("check")
    b.set_bolt("check", Sink(), parallelism=2).shuffle_grouping("merge").all_grouping("check")
    b.set_bolt("out", Sink()).shuffle_grouping("check")
    return b.create_topology()


ODD_IDS = ['say "hi"', "a<b>&c", "back\\slash\\", "end", "x|y `z`", "#1;", "ünï code"]


def odd_ids() -> Topology:
    b = TopologyBuilder()
    b.set_spout("src 'q'", FixedTupleSpout([], Fields("x")))
    previous = "src 'q'"
    for cid in ODD_IDS:
        b.set_bolt(cid, Sink()).shuffle_grouping(previous)
        previous = cid
    return b.create_topology()


def test_the_graph_holds_components_subscriptions_and_streams():
    g = topology_graph(word_count())
    assert [(n.id, n.kind, n.role, n.class_name, n.tasks) for n in g.nodes] == [
        ("sentences", "spout", "spout", "FixedTupleSpout", 2),
        ("split", "bolt", "basic", "Split", 2),
        ("audit", "bolt", "basic", "Sink", 1),
        ("count", "bolt", "basic", "Sink", 3),
    ]
    assert [(e.source, e.stream, e.target, e.grouping) for e in g.edges] == [
        ("sentences", "default", "split", "shuffle"),
        ("split", "errors", "audit", "global"),
        ("split", "default", "count", "fields(word)"),
    ]
    assert {s.name: s.fields for s in g.node("split").streams} == {
        "default": ("word",), "errors": ("line", "error")}


def test_mermaid_text():
    assert to_mermaid(topology_graph(word_count())) == """\
flowchart LR
    sentences(["sentences<br/>FixedTupleSpout x2"]):::spout
    split["split<br/>Split x2"]:::bolt
    audit["audit<br/>Sink x1"]:::bolt
    count["count<br/>Sink x3"]:::bolt
    sentences -->|"shuffle"| split
    split -->|"errors: global"| audit
    split -->|"fields(word)"| count
    classDef spout fill:#e3f0fb,stroke:#2f6fae,color:#1b2733
    classDef bolt fill:#fff4e0,stroke:#b7791f,color:#1b2733
"""


def test_dot_text():
    assert to_dot(topology_graph(word_count())) == """\
digraph topology {
    graph [rankdir=LR, fontname="Helvetica"];
    node [shape=box, fontname="Helvetica", fontsize=11, fontcolor="#1b2733"];
    edge [fontname="Helvetica", fontsize=10, color="#5a6270", fontcolor="#1b2733"];
    "sentences" [label="sentences\\nFixedTupleSpout x2", style="rounded,filled", \
fillcolor="#e3f0fb", color="#2f6fae", tooltip="sentences: spout (spout), FixedTupleSpout, 2 tasks; \
emits default(sentence)"];
    "split" [label="split\\nSplit x2", style="filled", fillcolor="#fff4e0", color="#b7791f", \
tooltip="split: bolt (basic), Split, 2 tasks; emits default(word), errors(line, error)"];
    "audit" [label="audit\\nSink x1", style="filled", fillcolor="#fff4e0", color="#b7791f", \
tooltip="audit: bolt (basic), Sink, 1 task; emits default(x)"];
    "count" [label="count\\nSink x3", style="filled", fillcolor="#fff4e0", color="#b7791f", \
tooltip="count: bolt (basic), Sink, 3 tasks; emits default(x)"];
    "sentences" -> "split" [label="shuffle"];
    "split" -> "audit" [label="errors: global"];
    "split" -> "count" [label="fields(word)"];
}
"""


def _nodes_and_edges(svg: str) -> tuple[list[ET.Element], list[ET.Element]]:
    root = ET.fromstring(svg)
    groups = list(root.iter(f"{SVG}g"))
    nodes = [g for g in groups if g.get("class", "").split()[0] == "node"]
    edges = [g for g in groups if g.get("class", "").split()[0] == "edge"]
    return nodes, edges


def test_svg_has_a_node_per_component_and_an_edge_per_subscription():
    nodes, edges = _nodes_and_edges(to_svg(topology_graph(word_count())))
    assert {n.get("data-id"): n.get("class") for n in nodes} == {
        "sentences": "node spout", "split": "node bolt", "count": "node bolt",
        "audit": "node bolt"}
    texts = {n.get("data-id"): [t.text for t in n.iter(f"{SVG}text")] for n in nodes}
    assert texts["count"] == ["count", "Sink x3"]
    assert texts["sentences"] == ["sentences", "FixedTupleSpout x2"]
    labels = {(e.get("data-source"), e.get("data-stream"), e.get("data-target")):
              e.find(f"{SVG}text").text for e in edges}
    assert labels == {("sentences", "default", "split"): "shuffle",
                      ("split", "default", "count"): "fields(word)",
                      ("split", "errors", "audit"): "errors: global"}
    for e in edges:
        assert e.find(f"{SVG}path").get("marker-end") == "url(#arrow)"


def _overlap(a, b) -> bool:
    return a.x < b.right and b.x < a.right and a.y < b.bottom and b.y < a.bottom


def _check_geometry(lay: Layout) -> None:
    for a, b in itertools.combinations(lay.boxes, 2):
        assert not _overlap(a, b), (a, b)
    for box in lay.boxes:
        assert box.x >= 0 and box.y >= 0
        assert box.right <= lay.width and box.bottom <= lay.height
    for r in lay.routes:
        start, end = r.points[0], r.points[-1]
        assert start[0] == lay.box(r.source).right
        assert lay.box(r.source).y <= start[1] <= lay.box(r.source).bottom
        assert end[0] == lay.box(r.target).x
        assert lay.box(r.target).y <= end[1] <= lay.box(r.target).bottom
        assert len(r.points) % 3 == 1
        for x, y in r.points:
            assert 0 <= x <= lay.width and 0 <= y <= lay.height, r


def test_layout_goes_left_to_right_without_overlaps():
    lay = layout(topology_graph(word_count()))
    _check_geometry(lay)
    assert [b.layer for b in lay.boxes] == [0, 1, 2, 2]
    for r in lay.routes:
        assert lay.box(r.source).right < lay.box(r.target).x
        assert not r.back
    # A chain of one component per layer runs straight: sentences and split share a height.
    assert lay.box("sentences").center[1] == lay.box("split").center[1]
    # Labels sit between their components.
    for r in lay.routes:
        assert lay.box(r.source).right < r.label_at[0] < lay.box(r.target).x


def test_layout_handles_cycles_with_back_edges():
    lay = layout(topology_graph(with_cycle()))
    _check_geometry(lay)
    layers = {b.id: b.layer for b in lay.boxes}
    assert layers == {"in": 0, "merge": 1, "check": 2, "out": 3}
    back = {(r.source, r.stream, r.target) for r in lay.routes if r.back}
    assert back == {("check", "default", "merge"), ("check", "default", "check")}
    bottom = max(b.bottom for b in lay.boxes)
    for r in lay.routes:
        if r.back:  # through a lane below every box
            assert max(y for _, y in r.points) > bottom
            assert r.label_at[1] > bottom
        else:
            assert lay.box(r.source).right < lay.box(r.target).x
    _, edges = _nodes_and_edges(to_svg(topology_graph(with_cycle())))
    assert sorted(e.get("class") for e in edges) == [
        "edge", "edge", "edge", "edge back", "edge back"]


def test_a_long_edge_passes_between_the_boxes():
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([], Fields("x")))
    b.set_bolt("a", Sink()).shuffle_grouping("s")
    b.set_bolt("b", Sink()).shuffle_grouping("a")
    b.set_bolt("c", Sink()).shuffle_grouping("b").shuffle_grouping("s")
    lay = layout(topology_graph(b.create_topology()))
    _check_geometry(lay)
    long = lay.route("s", "default", "c")
    samples = [p for curve in long.curves() for p in png_module._sample(curve)]
    for box in (lay.box("a"), lay.box("b")):
        assert not any(box.x < x < box.right and box.y < y < box.bottom for x, y in samples)


def test_parallel_streams_between_two_components_get_their_own_ports():
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([], Fields("x")))
    b.set_bolt("split", Split()).shuffle_grouping("s")
    b.set_bolt("both", Sink()).shuffle_grouping("split").shuffle_grouping("split", "errors")
    lay = layout(topology_graph(b.create_topology()))
    one, two = lay.route("split", "default", "both"), lay.route("split", "errors", "both")
    assert one.points[0] != two.points[0] and one.points[-1] != two.points[-1]
    assert abs(one.label_at[1] - two.label_at[1]) >= 11


def test_layout_is_plain_data_for_a_live_view():
    data = layout(topology_graph(word_count())).to_dict()
    assert [n["id"] for n in data["nodes"]] == ["sentences", "split", "audit", "count"]
    edge = data["edges"][0]
    assert (edge["source"], edge["target"], edge["label"]) == ("sentences", "split", "shuffle")
    assert edge["d"].startswith("M ") and " C " in edge["d"]
    assert len(edge["label_at"]) == 2


def test_odd_ids_are_escaped_in_every_format():
    topology = odd_ids()
    graph = topology_graph(topology)
    # SVG: well-formed, every id comes back as it was.
    nodes, edges = _nodes_and_edges(to_svg(graph))
    assert sorted(n.get("data-id") for n in nodes) == sorted([*ODD_IDS, "src 'q'"])
    assert {e.get("data-target") for e in edges} == set(ODD_IDS)
    # Mermaid: ids it cannot read are replaced, quotes and markup become entity codes.
    mermaid = to_mermaid(graph)
    assert 'n1["say #quot;hi#quot;<br/>Sink x1"]:::bolt' in mermaid
    assert 'n2["a#lt;b#gt;#38;c<br/>Sink x1"]:::bolt' in mermaid
    assert 'n4["end<br/>Sink x1"]:::bolt' in mermaid  # `end` is a keyword
    assert 'n5["x#124;y #96;z#96;<br/>Sink x1"]:::bolt' in mermaid
    assert 'n6["#35;1;<br/>Sink x1"]:::bolt' in mermaid
    for line in mermaid.splitlines()[1:]:
        if "[" in line:  # a node: exactly the two quotes around its label
            assert line.count('"') == 2, line
    # DOT: quotes and backslashes escaped.
    dot = to_dot(graph)
    assert '"say \\"hi\\"" -> "a<b>&c" [label="shuffle"];' in dot
    assert '"a<b>&c" -> "back\\\\slash\\\\" [label="shuffle"];' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_reads_the_dot_of_odd_ids():
    proc = subprocess.run(["dot", "-Tplain"], input=to_dot(topology_graph(odd_ids())),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = [line.split(" ", 2)[1] for line in proc.stdout.splitlines()
             if line.startswith("node ")]
    assert len(names) == len(ODD_IDS) + 1


def test_trident_and_transactional_topologies_are_drawn():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import transactional_words
        import trident_wordcount
    finally:
        sys.path.remove(str(ROOT / "examples"))
    trident = topology_graph(trident_wordcount.topology()[0])
    assert {n.id for n in trident.nodes if n.kind == "spout"} == {"spout1", "queries"}
    assert ("b-1-each", "word-counts", "fields(word)") in [
        (e.source, e.target, e.grouping) for e in trident.edges]
    tx = topology_graph(transactional_words.build().create_topology())
    framework = {(e.source, e.stream, e.target) for e in tx.edges if e.framework}
    assert ("$coord-transactional-words", "$batch", "spout") in framework
    assert ("spout", "default", "count") not in framework
    _, edges = _nodes_and_edges(to_svg(tx))
    dashed = [e for e in edges if "framework" in e.get("class", "")]
    assert len(dashed) == len(framework) > 0
    assert all(e.find(f"{SVG}path").get("stroke-dasharray") for e in dashed)


@pytest.mark.skipif(not png_module.available(), reason="Pillow is not installed")
def test_png_is_drawn_at_twice_the_layout_size():
    from PIL import Image

    graph = topology_graph(word_count())
    data = render(graph, "png")
    assert isinstance(data, bytes) and data.startswith(b"\x89PNG\r\n\x1a\n")
    lay = layout(graph)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (math.ceil(lay.width * 2), math.ceil(lay.height * 2))
        # The spout's fill colour is in the picture, at its box's centre.
        cx, cy = lay.box("sentences").center
        assert image.getpixel((int(cx * 2) - 60, int(cy * 2) - 2)) == (0xE3, 0xF0, 0xFB)


def test_format_from_extension():
    assert [format_for_path(p) for p in ("a.svg", "a.PNG", "a.dot", "a.gv", "a.mmd", "a")] == [
        "svg", "png", "dot", "dot", "mermaid", None]


def squall(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SQUALL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_cli_prints_mermaid_by_default():
    proc = squall("visualize", "examples/wordcount.py:topology")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("flowchart LR\n")
    assert '    sentences(["sentences<br/>SentenceSpout x2"]):::spout' in proc.stdout
    assert '    split -->|"fields(word)"| count' in proc.stdout
    proc = squall("visualize", "examples/wordcount.py:topology", "--format", "dot")
    assert proc.returncode == 0 and proc.stdout.startswith("digraph topology {")


def test_cli_writes_the_format_of_the_extension(tmp_path):
    out = tmp_path / "wc.svg"
    proc = squall("visualize", "examples/wordcount.py:topology", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    nodes, edges = _nodes_and_edges(out.read_text(encoding="utf-8"))
    assert sorted(n.get("data-id") for n in nodes) == ["count", "report", "sentences", "split"]
    assert len(edges) == 3
    proc = squall("visualize", "examples/wordcount.py:topology", "-o", str(tmp_path / "wc.gv"))
    assert (tmp_path / "wc.gv").read_text(encoding="utf-8").startswith("digraph topology {")


@pytest.mark.parametrize(("args", "message"), [
    (["examples/nothing.py:topology"], "squall visualize: no such file: examples/nothing.py"),
    (["examples/wordcount.py:nope"],
     "squall visualize: module 'examples/wordcount.py' has no attribute 'nope'"),
    (["examples/wordcount.py:build"],
     "squall visualize: examples/wordcount.py:build is a TopologyBuilder; it must be a Topology "
     "or a function returning a Topology or (topology, conf) (call its create_topology())"),
    (["examples/trident_wordcount.py:build"], "(call its build())"),
    (["examples/wordcount.py:topology", "--format", "gif"],
     "squall visualize: unknown format 'gif'; use one of mermaid, dot, svg, png"),
    (["examples/wordcount.py:topology", "-o", "wc.txt"],
     "squall visualize: cannot tell the format from 'wc.txt'"),
    (["examples/wordcount.py:topology", "--format", "png"],
     "squall visualize: PNG is binary: write it to a file with -o FILE.png"),
])
def test_cli_refuses_with_one_line_and_exit_2(args, message):
    proc = squall("visualize", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert message in proc.stderr


def test_the_readme_pictures_are_up_to_date():
    """docs/images and the README's Mermaid block are what scripts/readme_images.py draws now."""
    proc = subprocess.run([sys.executable, "scripts/readme_images.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '![The word-count topology' in (ROOT / "README.md").read_text(encoding="utf-8")
