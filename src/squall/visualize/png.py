"""A topology drawn as PNG, from the same `layout` as the SVG, with Pillow.

Pillow is optional (`pip install 'squall[png]'`): without it `to_png` raises
`PngUnavailableError`, and the other formats need nothing. The picture is drawn at twice the
layout's size, for sharp text; curves are drawn as short straight pieces.
"""

from __future__ import annotations

import io
import math
from itertools import pairwise
from typing import Any

from squall.errors import SquallError
from squall.visualize.graph import TopologyGraph
from squall.visualize.layout import FONT_SIZE, LABEL_FONT_SIZE, Layout, Point, layout
from squall.visualize.style import (
    BACKGROUND,
    BOLT_FILL,
    BOLT_STROKE,
    EDGE,
    FRAMEWORK_EDGE,
    SPOUT_FILL,
    SPOUT_STROKE,
    TEXT,
)

try:
    from PIL import Image, ImageDraw, ImageFont
except ImportError:  # the optional dependency is not installed
    Image = ImageDraw = ImageFont = None  # type: ignore[assignment]

SCALE = 2  # pixels per layout unit
_STEPS = 24  # straight pieces per curve
# Monospace faces Pillow finds by file name on common systems (the layout measures monospace
# text); Pillow's own font when none is there.
_FONTS = {False: ("DejaVuSansMono.ttf", "Menlo.ttc", "consola.ttf"),
          True: ("DejaVuSansMono-Bold.ttf", "Menlo.ttc", "consolab.ttf")}


class PngUnavailableError(SquallError):
    """PNG output needs Pillow, which is not installed."""


def available() -> bool:
    """True when Pillow is installed, so `to_png` can draw."""
    return Image is not None


def to_png(graph: TopologyGraph, drawing: Layout | None = None) -> bytes:
    """The PNG file of `graph`, drawn from `drawing` (by default `layout(graph)`).

    >>> from squall.visualize.graph import Node, TopologyGraph
    >>> png = to_png(TopologyGraph((Node("s", "spout", "spout", "S", 1),), ()))
    >>> png[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    if not available():
        raise PngUnavailableError(
            "PNG output needs Pillow: pip install 'squall[png]' (svg, mermaid and dot need "
            "nothing more)")
    lay = drawing if drawing is not None else layout(graph)
    image = Image.new("RGB", (math.ceil(lay.width * SCALE), math.ceil(lay.height * SCALE)),
                      BACKGROUND)
    draw = ImageDraw.Draw(image)
    bold_font = _font(FONT_SIZE, True)
    label_font = _font(LABEL_FONT_SIZE, False)
    for r in lay.routes:
        colour = FRAMEWORK_EDGE if r.framework else EDGE
        points = [_scaled(p) for curve in r.curves() for p in _sample(curve)]
        if r.framework:
            for piece in _dashes(points, 5 * SCALE, 4 * SCALE):
                draw.line(piece, fill=colour, width=round(1.4 * SCALE))
        else:
            draw.line(points, fill=colour, width=round(1.4 * SCALE), joint="curve")
        _arrowhead(draw, r.points[-2], r.points[-1], colour)
    for r in lay.routes:  # labels over every line
        left, top, right, bottom = draw.textbbox(_scaled(r.label_at), r.label, font=label_font,
                                                 anchor="ms")
        pad = 3 * SCALE
        draw.rounded_rectangle([left - pad, top - pad, right + pad, bottom + pad],
                               radius=3 * SCALE, fill=BACKGROUND)
        draw.text(_scaled(r.label_at), r.label, font=label_font, fill=TEXT, anchor="ms")
    for b in lay.boxes:
        fill, stroke = (SPOUT_FILL, SPOUT_STROKE) if b.kind == "spout" else (BOLT_FILL,
                                                                            BOLT_STROKE)
        radius = min(b.height / 2, 22.0) if b.kind == "spout" else 4.0
        draw.rounded_rectangle([_scaled((b.x, b.y)), _scaled((b.right, b.bottom))],
                               radius=round(radius * SCALE), fill=fill, outline=stroke,
                               width=round(1.5 * SCALE))
        cx, cy = b.center
        draw.text(_scaled((cx, cy - 3)), b.lines[0], font=bold_font, fill=TEXT, anchor="ms")
        draw.text(_scaled((cx, cy + 13)), b.lines[1], font=label_font, fill=TEXT, anchor="ms")
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _font(size: int, bold: bool) -> Any:
    for name in _FONTS[bold]:
        try:
            return ImageFont.truetype(name, size * SCALE)
        except OSError:
            continue
    return ImageFont.load_default(size * SCALE)


def _scaled(p: Point) -> tuple[float, float]:
    return (p[0] * SCALE, p[1] * SCALE)


def _sample(curve: tuple[Point, Point, Point, Point]) -> list[Point]:
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = curve
    out = []
    for i in range(_STEPS + 1):
        t = i / _STEPS
        a, b, c, d = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t * t, t ** 3
        out.append((a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3))
    return out


def _dashes(points: list[tuple[float, float]], on: float,
            off: float) -> list[list[tuple[float, float]]]:
    """The pieces of a polyline drawn dashed: `on` long, then `off` of space."""
    pieces: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = [points[0]]
    drawing, left = True, on
    for (xa, ya), (xb, yb) in pairwise(points):
        length = math.hypot(xb - xa, yb - ya)
        done = 0.0
        while length - done > left:
            done += left
            t = done / length
            cut = (xa + (xb - xa) * t, ya + (yb - ya) * t)
            if drawing:
                current.append(cut)
                pieces.append(current)
            else:
                current = [cut]
            drawing, left = not drawing, on if not drawing else off
        left -= length - done
        if drawing:
            current.append((xb, yb))
    if drawing and len(current) > 1:
        pieces.append(current)
    return pieces


def _arrowhead(draw: Any, before: Point, tip: Point, colour: str) -> None:
    angle = math.atan2(tip[1] - before[1], tip[0] - before[0])
    length, half = 9.0, 4.0
    back = (tip[0] - length * math.cos(angle), tip[1] - length * math.sin(angle))
    side = (-math.sin(angle) * half, math.cos(angle) * half)
    draw.polygon([_scaled(tip), _scaled((back[0] + side[0], back[1] + side[1])),
                  _scaled((back[0] - side[0], back[1] - side[1]))], fill=colour)


__all__ = ["PngUnavailableError", "available", "to_png"]
