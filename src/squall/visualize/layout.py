"""Where each component and subscription is drawn: a layered, left-to-right layout.

`layout(graph)` returns plain data (boxes, edge paths, label positions), which the SVG and PNG
renderers draw and a live view can reuse to put rates on the edges. The algorithm (Sugiyama's,
simplified):

1. **Cycles.** A depth-first search from the spouts marks the edges that close a cycle (a bolt
   subscribing to a bolt downstream of it, or to itself) as *back* edges; the rest is acyclic.
2. **Layers.** Each component's layer is the longest path to it from a spout over the other
   edges, so every forward edge goes to the right. An edge spanning several layers passes through
   one *dummy* point per layer it crosses, so it is routed between the boxes, not through them.
3. **Order within layers.** A few sweeps down and up the layers place each vertex at the
   barycentre (mean position) of its neighbours in the previous layer; the order with the
   fewest edge crossings is kept. Ties are broken by component id, so the layout is repeatable.
4. **Coordinates.** Layers are columns as wide as their widest box, separated by gaps wide
   enough for the edge labels. Each column is stacked in its order, then a few passes move
   every layer as close as its order allows to the heights of its neighbours (the layer before,
   then the layer after), so chains run straight. An edge leaves
   its source on the right and enters its target on the left, at *ports* spread along the side
   in the order of the other ends, so parallel edges (two streams between the same components)
   stay apart. Forward edges are smooth cubic curves; back edges leave on the right, run in a
   lane of their own below the drawing and come back into their target from the left.

Text widths are estimated for a monospace font (0.6 em a character), which the renderers use.

>>> from squall.visualize.graph import Edge, Node, TopologyGraph
>>> g = TopologyGraph((Node("s", "spout", "spout", "S", 1), Node("b", "bolt", "basic", "B", 2)),
...                   (Edge("s", "default", "b", "shuffle"), Edge("b", "default", "b", "all")))
>>> lay = layout(g)
>>> lay.box("s").right < lay.box("b").x
True
>>> [(r.source, r.target, r.back) for r in lay.routes]
[('s', 'b', False), ('b', 'b', True)]
>>> lay.route("s", "default", "b").d
'M 134.0 47.0 C 171.1 47.0 171.1 38.0 208.2 38.0'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from squall.visualize.graph import TopologyGraph

Point = tuple[float, float]

FONT_SIZE = 12  # the boxes' text
LABEL_FONT_SIZE = 11  # the edges' labels
CHAR_EM = 0.6  # a monospace character's width, in em
MARGIN = 20.0
BOX_PAD_X = 14.0
BOX_MIN_WIDTH = 96.0
BOX_MIN_HEIGHT = 44.0
PORT_SPACING = 18.0  # between two edges' ends on one side of a box
NODE_GAP = 26.0  # between two boxes of a layer
DUMMY_GAP = 10.0  # between an edge passing through a layer and its neighbours
MIN_LAYER_GAP = 64.0
LABEL_PAD = 14.0  # space left and right of a label in its gap
LANE_SPACING = 22.0  # between two back edges' lanes below the drawing
BACK_TURN = 18.0  # how far a back edge swings out before turning into its lane
SWEEPS = 8  # barycentre sweeps (each down then up)
ALIGN_PASSES = 4  # passes moving each layer towards its neighbours' heights


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """The estimated width of `text` in a monospace font of `size` pixels.

    >>> text_width("count"), text_width("count", 10)
    (36.0, 30.0)
    """
    return round(len(text) * size * CHAR_EM, 1)


@dataclass(frozen=True)
class Box:
    """A component's box: its top-left corner, size, layer, and the two lines of its label
    (the id, then the class and the number of tasks)."""

    id: str
    kind: Literal["spout", "bolt"]
    x: float
    y: float
    width: float
    height: float
    layer: int
    lines: tuple[str, str]

    @property
    def right(self) -> float:
        return self.x + self.width

    @property
    def bottom(self) -> float:
        return self.y + self.height

    @property
    def center(self) -> Point:
        return (self.x + self.width / 2, self.y + self.height / 2)


@dataclass(frozen=True)
class Route:
    """How one edge is drawn.

    `points` is a chain of cubic Bézier curves: the start, then three points per curve (two
    control points and its end), so `d` is SVG path data as it is. The path ends on the target's
    left side, heading right (where an arrowhead goes). `label_at` is the centre of the label's
    baseline. `back` marks an edge that closes a cycle (drawn through a lane below the
    drawing); `framework` one on a framework stream (drawn dashed).
    """

    source: str
    stream: str
    target: str
    label: str
    framework: bool
    back: bool
    points: tuple[Point, ...]
    label_at: Point

    @property
    def d(self) -> str:
        """SVG path data: `M x y C x1 y1 x2 y2 x y ...`."""
        start, rest = self.points[0], self.points[1:]
        curves = " ".join(
            "C " + " ".join(f"{x:.1f} {y:.1f}" for x, y in rest[i:i + 3])
            for i in range(0, len(rest), 3))
        return f"M {start[0]:.1f} {start[1]:.1f} {curves}"

    @property
    def label_box(self) -> tuple[float, float, float, float]:
        """The label's background (x, y, width, height), which hides the line under it."""
        width = text_width(self.label, LABEL_FONT_SIZE) + 6
        x, y = self.label_at
        return (_r(x - width / 2), _r(y - LABEL_FONT_SIZE), _r(width),
                _r(LABEL_FONT_SIZE * 1.4))

    def curves(self) -> list[tuple[Point, Point, Point, Point]]:
        """The chain as separate curves (start, control, control, end)."""
        p = self.points
        return [(p[i], p[i + 1], p[i + 2], p[i + 3]) for i in range(0, len(p) - 1, 3)]


@dataclass(frozen=True)
class Layout:
    """The whole drawing: its size, the boxes and the routes (in the graph's node and edge
    order)."""

    width: float
    height: float
    boxes: tuple[Box, ...]
    routes: tuple[Route, ...]

    def box(self, component: str) -> Box:
        for b in self.boxes:
            if b.id == component:
                return b
        raise KeyError(component)

    def route(self, source: str, stream: str, target: str) -> Route:
        for r in self.routes:
            if (r.source, r.stream, r.target) == (source, stream, target):
                return r
        raise KeyError((source, stream, target))

    def to_dict(self) -> dict[str, Any]:
        """The layout as JSON-ready data (for a browser that draws it and adds live rates).

        >>> from squall.visualize.graph import Node, TopologyGraph
        >>> layout(TopologyGraph((Node("s", "spout", "spout", "S", 1),), ())).to_dict()["nodes"]
        [{'id': 's', 'kind': 'spout', 'x': 20.0, 'y': 20.0, 'width': 96.0, 'height': 44.0, \
'layer': 0, 'lines': ['s', 'S x1']}]
        """
        return {
            "width": self.width,
            "height": self.height,
            "nodes": [{"id": b.id, "kind": b.kind, "x": b.x, "y": b.y, "width": b.width,
                       "height": b.height, "layer": b.layer, "lines": list(b.lines)}
                      for b in self.boxes],
            "edges": [{"source": r.source, "stream": r.stream, "target": r.target,
                       "label": r.label, "framework": r.framework, "back": r.back, "d": r.d,
                       "label_at": list(r.label_at)}
                      for r in self.routes],
        }


def layout(graph: TopologyGraph) -> Layout:
    """Boxes and routes for `graph` (the algorithm is in the module's docstring)."""
    ids = [n.id for n in graph.nodes]
    index = {cid: i for i, cid in enumerate(ids)}
    edges = list(graph.edges)
    back = _back_edges(graph, index)
    forward = [k for k in range(len(edges)) if k not in back]
    layer_of = _layers(len(ids), [(index[edges[k].source], index[edges[k].target])
                                  for k in forward])

    # Vertices: the components (0 .. n-1), then one dummy per layer a long edge passes through.
    vertex_layer = list(layer_of)
    chains: dict[int, list[int]] = {}
    for k in forward:
        u, v = index[edges[k].source], index[edges[k].target]
        chain = [u]
        for lay in range(layer_of[u] + 1, layer_of[v]):
            vertex_layer.append(lay)
            chain.append(len(vertex_layer) - 1)
        chain.append(v)
        chains[k] = chain
    links = [(a, b) for chain in chains.values() for a, b in pairwise(chain)]
    order = _order(vertex_layer, links)

    # Sizes: boxes fit their text and their ports; a dummy is a point with room around it.
    ends_out = [0] * len(ids)
    ends_in = [0] * len(ids)
    for e in edges:
        ends_out[index[e.source]] += 1
        ends_in[index[e.target]] += 1
    n_vertices = len(vertex_layer)
    width = [0.0] * n_vertices
    height = [PORT_SPACING] * n_vertices
    lines: list[tuple[str, str]] = []
    for i, node in enumerate(graph.nodes):
        lines.append((node.id, node.caption))
        width[i] = max(BOX_MIN_WIDTH, max(text_width(t) for t in lines[i]) + 2 * BOX_PAD_X)
        height[i] = max(BOX_MIN_HEIGHT, PORT_SPACING * (max(ends_out[i], ends_in[i]) + 1))

    n_layers = len(order)
    column_width = [max((width[v] for v in layer), default=0.0) for layer in order]
    gaps = [MIN_LAYER_GAP] * max(n_layers - 1, 0)
    for k in forward:
        first = layer_of[index[edges[k].source]]
        need = text_width(edges[k].label, LABEL_FONT_SIZE) + 2 * LABEL_PAD
        gaps[first] = max(gaps[first], need)
    turn = BACK_TURN + 6.0 * max(len(back) - 1, 0) if back else 0.0
    column_x: list[float] = []
    x = MARGIN + turn
    for i in range(n_layers):
        column_x.append(x)
        x += column_width[i] + (gaps[i] if i < n_layers - 1 else 0.0)
    content_right = x

    def gap(a: int, b: int) -> float:
        return NODE_GAP if a < len(ids) and b < len(ids) else DUMMY_GAP

    # Heights: each layer stacked and centred, then moved towards its neighbours' heights.
    stacks = [sum(height[v] for v in layer) + sum(gap(a, b) for a, b in pairwise(layer))
              for layer in order]
    top: list[float] = [0.0] * n_vertices
    left: list[float] = [0.0] * n_vertices
    for i, layer in enumerate(order):
        y = (max(stacks, default=0.0) - stacks[i]) / 2
        for pos, v in enumerate(layer):
            if pos:
                y += gap(layer[pos - 1], v)
            top[v] = y
            # A box is centred in its column; an edge passing through runs the column's width.
            left[v] = column_x[i] + ((column_width[i] - width[v]) / 2 if v < len(ids) else 0.0)
            y += height[v]
    preds: dict[int, list[int]] = {v: [] for v in range(n_vertices)}
    succs: dict[int, list[int]] = {v: [] for v in range(n_vertices)}
    for a, b in links:
        succs[a].append(b)
        preds[b].append(a)
    for _ in range(ALIGN_PASSES):
        for i in range(1, n_layers):
            _align(order[i], top, height, preds, gap)
        for i in range(n_layers - 2, -1, -1):
            _align(order[i], top, height, succs, gap)
    highest = min(top, default=0.0)
    top = [t - highest + MARGIN for t in top]
    content_height = max((t + hv for t, hv in zip(top, height, strict=True)),
                         default=MARGIN) - MARGIN

    def mid_y(v: int) -> float:
        return top[v] + height[v] / 2

    # Ports: each box's outgoing ends down its right side and incoming ends down its left side,
    # in the order of the other ends' heights (back edges last: their lanes are below).
    # Back edges' lanes: the shortest (a component subscribing to itself) nearest the drawing.
    spans = {k: layer_of[index[edges[k].source]] - layer_of[index[edges[k].target]] for k in back}
    lane_of = {k: lane for lane, k in enumerate(sorted(back, key=lambda k: (spans[k], k)))}
    outs: dict[int, list[tuple[float, int]]] = {i: [] for i in range(len(ids))}
    ins: dict[int, list[tuple[float, int]]] = {i: [] for i in range(len(ids))}
    bottom = MARGIN + content_height
    for k, e in enumerate(edges):
        u, v = index[e.source], index[e.target]
        if k in back:
            outs[u].append((bottom + 1 + lane_of[k], k))
            ins[v].append((bottom + 1 + lane_of[k], k))
        else:
            chain = chains[k]
            outs[u].append((mid_y(chain[1]), k))
            ins[v].append((mid_y(chain[-2]), k))
    port_out: dict[int, float] = {}
    port_in: dict[int, float] = {}
    for v in range(len(ids)):
        for ends, ports in ((outs[v], port_out), (ins[v], port_in)):
            ends.sort()
            for j, (_, k) in enumerate(ends):
                ports[k] = mid_y(v) + (j - (len(ends) - 1) / 2) * PORT_SPACING

    routes: list[Route] = []
    for k, e in enumerate(edges):
        u, v = index[e.source], index[e.target]
        start = (left[u] + width[u], port_out[k])
        end = (left[v], port_in[k])
        if k in back:
            lane = bottom + LANE_SPACING * (lane_of[k] + 1)
            swing = BACK_TURN + 6.0 * lane_of[k]
            out_x = column_x[layer_of[u]] + column_width[layer_of[u]]
            in_x = column_x[layer_of[v]]
            points = [start, (out_x + swing, start[1]), (out_x + swing, lane), (out_x, lane)]
            points += _line((out_x, lane), (in_x, lane))
            points += [(in_x - swing, lane), (in_x - swing, end[1]), end]
            label_at = ((out_x + in_x) / 2, lane - 5)
        else:
            chain = chains[k]
            points = [start]
            here = start
            for dummy in chain[1:-1]:
                enter = (left[dummy], mid_y(dummy))
                leave = (left[dummy] + column_width[vertex_layer[dummy]], mid_y(dummy))
                points += _curve(here, enter) + _line(enter, leave)
                here = leave
            first_curve = _curve(start, (left[chain[1]], port_in[k] if len(chain) == 2
                                         else mid_y(chain[1])))
            points += _curve(here, end)
            mid = _bezier_mid(start, *first_curve)
            label_at = (mid[0], mid[1] + LABEL_FONT_SIZE * 0.35)
        routes.append(Route(e.source, e.stream, e.target, e.label, e.framework, k in back,
                            tuple((_r(px), _r(py)) for px, py in points),
                            (_r(label_at[0]), _r(label_at[1]))))

    boxes = tuple(Box(node.id, node.kind, _r(left[i]), _r(top[i]), _r(width[i]), _r(height[i]),
                      layer_of[i], lines[i]) for i, node in enumerate(graph.nodes))
    total_height = MARGIN + content_height + MARGIN
    if back:
        total_height += LANE_SPACING * len(back)
    return Layout(_r(content_right + turn + MARGIN), _r(total_height), boxes, tuple(routes))


def _align(layer: list[int], top: list[float], height: list[float],
           neighbours: dict[int, list[int]], gap: Callable[[int, int], float]) -> None:
    """Moves the vertices of `layer` as close as their order and gaps allow to the mean height
    of their `neighbours` (least squares: an isotonic regression by pooling adjacent
    violators)."""
    offsets: list[float] = []
    targets: list[float] = []
    offset = 0.0
    for pos, v in enumerate(layer):
        if pos:
            prev = layer[pos - 1]
            offset += height[prev] + gap(prev, v)
        offsets.append(offset)
        around = neighbours[v]
        centre = (sum(top[u] + height[u] / 2 for u in around) / len(around) if around
                  else top[v] + height[v] / 2)
        targets.append(centre - height[v] / 2 - offset)
    blocks: list[list[float]] = []  # [sum, count] of pooled targets
    for t in targets:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    pos = 0
    for total, count in blocks:
        for _ in range(int(count)):
            top[layer[pos]] = total / count + offsets[pos]
            pos += 1


def _r(value: float) -> float:
    return round(value, 1)


def _curve(a: Point, b: Point) -> list[Point]:
    """A curve from `a` to `b` that leaves and arrives horizontally."""
    half = (b[0] - a[0]) / 2
    return [(a[0] + half, a[1]), (b[0] - half, b[1]), b]


def _line(a: Point, b: Point) -> list[Point]:
    """A straight line from `a` to `b`, as a cubic curve."""
    return [(a[0] + (b[0] - a[0]) / 3, a[1] + (b[1] - a[1]) / 3),
            (a[0] + 2 * (b[0] - a[0]) / 3, a[1] + 2 * (b[1] - a[1]) / 3), b]


def _bezier_mid(p0: Point, p1: Point, p2: Point, p3: Point) -> Point:
    return ((p0[0] + 3 * p1[0] + 3 * p2[0] + p3[0]) / 8,
            (p0[1] + 3 * p1[1] + 3 * p2[1] + p3[1]) / 8)


def _back_edges(graph: TopologyGraph, index: dict[str, int]) -> set[int]:
    """The edges (by position) that close a cycle, found by a depth-first search from the spouts
    (then from any component not reached), each in id order."""
    succ: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(index))}
    for k, e in enumerate(graph.edges):
        succ[index[e.source]].append((index[e.target], k))
    roots = [i for i, n in enumerate(graph.nodes) if n.kind == "spout"]
    roots += [i for i, n in enumerate(graph.nodes) if n.kind != "spout"]
    state = [0] * len(index)  # 0: not seen, 1: on the current path, 2: done
    back: set[int] = set()
    for root in roots:
        if state[root]:
            continue
        state[root] = 1
        stack: list[tuple[int, int]] = [(root, 0)]
        while stack:
            v, i = stack[-1]
            if i == len(succ[v]):
                state[v] = 2
                stack.pop()
                continue
            stack[-1] = (v, i + 1)
            w, k = succ[v][i]
            if state[w] == 1:
                back.add(k)
            elif state[w] == 0:
                state[w] = 1
                stack.append((w, 0))
    return back


def _layers(n: int, links: Sequence[tuple[int, int]]) -> list[int]:
    """Each vertex's longest path from a vertex without inputs, over acyclic `links`."""
    succ: dict[int, list[int]] = {i: [] for i in range(n)}
    indegree = [0] * n
    for a, b in links:
        succ[a].append(b)
        indegree[b] += 1
    layer = [0] * n
    ready = [i for i in range(n) if indegree[i] == 0]
    while ready:
        a = ready.pop()
        for b in succ[a]:
            layer[b] = max(layer[b], layer[a] + 1)
            indegree[b] -= 1
            if indegree[b] == 0:
                ready.append(b)
    return layer


def _order(vertex_layer: list[int], links: list[tuple[int, int]]) -> list[list[int]]:
    """The vertices of each layer, top to bottom, with few crossings (barycentre sweeps)."""
    n_layers = max(vertex_layer, default=-1) + 1
    preds: dict[int, list[int]] = {v: [] for v in range(len(vertex_layer))}
    succs: dict[int, list[int]] = {v: [] for v in range(len(vertex_layer))}
    for a, b in links:
        succs[a].append(b)
        preds[b].append(a)
    order = [[v for v in range(len(vertex_layer)) if vertex_layer[v] == i]
             for i in range(n_layers)]
    position = {v: p for layer in order for p, v in enumerate(layer)}

    def sweep(layers: range, neighbours: dict[int, list[int]]) -> None:
        for i in layers:
            def key(v: int) -> tuple[float, int]:
                around = neighbours[v]
                centre = sum(position[u] for u in around) / len(around) if around \
                    else float(position[v])
                return (centre, position[v])

            order[i].sort(key=key)
            for p, v in enumerate(order[i]):
                position[v] = p

    sweep(range(1, n_layers), preds)  # the first placement: components by id, then barycentres
    best = [list(layer) for layer in order]
    fewest = _crossings(order, links, position, vertex_layer)
    for _ in range(SWEEPS):
        if fewest == 0:
            break
        sweep(range(n_layers - 2, -1, -1), succs)
        sweep(range(1, n_layers), preds)
        count = _crossings(order, links, position, vertex_layer)
        if count < fewest:
            fewest, best = count, [list(layer) for layer in order]
    return best


def _crossings(order: list[list[int]], links: list[tuple[int, int]], position: dict[int, int],
               vertex_layer: list[int]) -> int:
    """How many pairs of links between adjacent layers cross."""
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for a, b in links:
        by_layer.setdefault(vertex_layer[a], []).append((position[a], position[b]))
    count = 0
    for pairs in by_layer.values():
        for i, (a1, b1) in enumerate(pairs):
            for a2, b2 in pairs[i + 1:]:
                if (a1 - a2) * (b1 - b2) < 0:
                    count += 1
    return count


__all__ = ["Box", "Layout", "Point", "Route", "layout", "text_width"]
