"""The README's pictures of a topology, drawn by `squall visualize`'s code from the examples.

    .venv/bin/python scripts/readme_images.py           # writes docs/images/
    .venv/bin/python scripts/readme_images.py --check   # exits 1 when a file is out of date

Writes `docs/images/wordcount.svg` and `docs/images/wordcount.mmd` from
`examples/wordcount.py:topology`, and puts the Mermaid text in the README's ```` ```mermaid ````
block under "Seeing a topology".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from squall.cli.target import load_target
from squall.visualize import render

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
README = ROOT / "README.md"
README_SECTION = "## Seeing a topology\n"
README_MERMAID = "wordcount.mmd"  # the picture the README's Mermaid block shows
PICTURES = {  # file under docs/images -> (TARGET relative to the repository, format)
    "wordcount.svg": ("examples/wordcount.py:topology", "svg"),
    "wordcount.mmd": ("examples/wordcount.py:topology", "mermaid"),
}


def pictures() -> dict[str, str]:
    """File name -> its content, drawn now."""
    out: dict[str, str] = {}
    for name, (target, fmt) in PICTURES.items():
        file_part, _, attr = target.partition(":")
        topology, _ = load_target(f"{ROOT / file_part}:{attr}")
        picture = render(topology, fmt)
        assert isinstance(picture, str)
        out[name] = picture
    return out


def with_mermaid(readme: str, mermaid: str) -> str:
    """`readme` with the first Mermaid block of its "Seeing a topology" section replaced.

    >>> with_mermaid("## Seeing a topology\\n```mermaid\\nold\\n```\\n", "new\\n")
    '## Seeing a topology\\n```mermaid\\nnew\\n```\\n'
    """
    section = readme.index(README_SECTION)
    start = readme.index("```mermaid\n", section) + len("```mermaid\n")
    end = readme.index("```", start)
    return readme[:start] + mermaid + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file differs from what it would be")
    args = parser.parse_args(argv)
    drawn = pictures()
    files = {IMAGES / name: content for name, content in drawn.items()}
    files[README] = with_mermaid(README.read_text(encoding="utf-8"), drawn[README_MERMAID])
    stale = []
    for path, content in files.items():
        name = path.relative_to(ROOT).as_posix()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            print(f"wrote {name}")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run scripts/readme_images.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
