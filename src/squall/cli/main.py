"""The `squall` command: one module per verb, dispatched here."""

from __future__ import annotations

import argparse
import logging
import sys

import squall
from squall.cli import manage
from squall.cli import run as run_verb
from squall.cli import state as state_verb
from squall.cli import submit as submit_verb
from squall.cli import visualize as visualize_verb


def build_parser() -> argparse.ArgumentParser:
    """The command's parser, every verb with its flags (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="squall", description="Storm topologies and windowed operators for Python."
    )
    parser.add_argument("--version", action="version", version=f"squall {squall.__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_verb.add_parser(verbs)
    submit_verb.add_parser(verbs)
    manage.add_parsers(verbs)
    visualize_verb.add_parser(verbs)
    state_verb.add_parser(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per callback otherwise
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
