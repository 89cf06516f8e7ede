"""`squall visualize TARGET`: a picture of a topology, for docs and code review.

TARGET is what `squall run` takes (`module:attribute` or `path/to/file.py:attribute`, see
`squall.cli.target`); nothing is run. The picture is Mermaid text (the default, on stdout),
Graphviz DOT, SVG drawn by squall itself, or PNG (with Pillow installed): `--format`, or the
extension of `-o FILE` (`.mmd`, `.mermaid`, `.dot`, `.gv`, `.svg`, `.png`).

Exit status: 0 when the picture was written; 2 on a bad TARGET, format or output file, with one
line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from squall.cli.target import TargetError, load_target
from squall.errors import InvalidTopologyError
from squall.visualize import EXTENSIONS, FORMATS, PngUnavailableError, format_for_path, render


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser("visualize", help="draw a topology as Mermaid, Graphviz DOT, SVG or PNG")
    p.add_argument("target", help="module:attribute or path/to/file.py:attribute")
    p.add_argument("--format", "-f", default=None, metavar="FORMAT",
                   help=f"{' | '.join(FORMATS)} (default: from -o's extension, else mermaid)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the picture to FILE instead of stdout")
    p.set_defaults(func=main)


def _fail(message: str) -> int:
    print(f"squall visualize: {message}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    fmt = args.format
    if fmt is not None and fmt not in FORMATS:
        return _fail(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt is None and args.output is not None:
        fmt = format_for_path(args.output)
        if fmt is None:
            return _fail(f"cannot tell the format from {args.output!r}; use --format or one of "
                         f"the extensions {', '.join(EXTENSIONS)}")
    fmt = fmt or "mermaid"
    if fmt == "png" and args.output is None:
        return _fail("PNG is binary: write it to a file with -o FILE.png")
    try:
        topology, _ = load_target(args.target)
        picture = render(topology, fmt)
    except (TargetError, InvalidTopologyError, PngUnavailableError) as exc:
        return _fail(str(exc))
    if args.output is None:
        assert isinstance(picture, str)
        sys.stdout.write(picture)
        return 0
    try:
        if isinstance(picture, bytes):
            Path(args.output).write_bytes(picture)
        else:
            Path(args.output).write_text(picture, encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {args.output}: {exc.strerror or exc}")
    return 0
