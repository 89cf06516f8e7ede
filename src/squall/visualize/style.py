"""The colours and font every renderer uses, so the pictures look alike.

>>> SPOUT_FILL, BOLT_FILL
('#e3f0fb', '#fff4e0')
"""

from __future__ import annotations

SPOUT_FILL = "#e3f0fb"
SPOUT_STROKE = "#2f6fae"
BOLT_FILL = "#fff4e0"
BOLT_STROKE = "#b7791f"
TEXT = "#1b2733"
EDGE = "#5a6270"
FRAMEWORK_EDGE = "#9aa3ad"  # framework streams, drawn dashed
BACKGROUND = "#ffffff"
# The layout estimates text widths for a monospace font.
FONT_FAMILY = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"

__all__ = ["BACKGROUND", "BOLT_FILL", "BOLT_STROKE", "EDGE", "FONT_FAMILY", "FRAMEWORK_EDGE",
           "SPOUT_FILL", "SPOUT_STROKE", "TEXT"]
