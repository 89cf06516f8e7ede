"""MkDocs hooks (`hooks:` in mkdocs.yml): the reference pages generated from the code at build
time, so they cannot drift from it.

- `reference/cli.md`: every verb of the `squall` command and every flag, from its argparse
  parser (`squall.cli.main.build_parser`);
- `reference/configuration.md`: every configuration key squall reads, with what it allows, and
  Storm's keys that squall accepts without effect, from the registry
  (`squall.topology.config_keys`).

`python scripts/mkdocs_hooks.py cli|configuration` prints a page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mkdocs.structure.files import File  # noqa: E402

from squall.cli.main import build_parser  # noqa: E402
from squall.topology import config_keys  # noqa: E402

GENERATED = "<!-- Generated at build time by scripts/mkdocs_hooks.py: edit the code, not this. -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, verb: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == verb:
                    return choice.help or ""
    return ""


def _metavar(action: argparse.Action) -> str:
    if action.metavar:
        return str(action.metavar)
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings:
            names = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0:
                names += f" `{_metavar(action)}`"
        else:
            names = f"`{_metavar(action)}`"
        help_text = action.help or ""
        if help_text == argparse.SUPPRESS:
            continue
        help_text = help_text.replace("%(default)s", str(action.default))
        help_text = help_text.replace("%(prog)s", parser.prog)
        default = ""
        if (action.option_strings and action.nargs != 0 and action.default not in (None, [])
                and action.default is not argparse.SUPPRESS):
            default = f"`{action.default}`"
        rows.append(f"| {names} | {_cell(help_text)} | {default} |")
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups,
                        prefix="")
    return formatter.format_help().strip()


def _verb_section(parser: argparse.ArgumentParser, name: str, help_text: str,
                  level: int) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    description = parser.description or help_text
    if description:
        lines += [description.strip(), ""]
    lines += ["```text", _usage(parser), "```", ""]
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | meaning | default |", "|---|---|---|", *rows, ""]
    for sub_name, sub in _subparsers(parser).items():
        lines += _verb_section(sub, sub_name, _help_of(parser, sub_name), level + 1)
    return lines


def cli_page() -> str:
    parser = build_parser()
    lines = [GENERATED, "", "# Command line", "",
             "Every verb of the `squall` command and every flag, as `squall VERB --help` gives "
             "them. `squall --version` prints the installed version.", ""]
    rows = _argument_rows(parser)
    lines += ["```text", _usage(parser), "```", "", "| argument | meaning | default |",
              "|---|---|---|", *rows, ""]
    for name, sub in _subparsers(parser).items():
        lines += _verb_section(sub, name, _help_of(parser, name), 2)
    return "\n".join(lines) + "\n"


def configuration_page() -> str:
    keys, meanings = config_keys.KEYS, config_keys.MEANINGS
    storm = sorted(k for k in keys if k.startswith("topology."))
    own = sorted(k for k in keys if k.startswith("squall."))
    lines = [
        GENERATED, "", "# Configuration keys", "",
        "Configuration is a mapping of keys to values: `Config()` in code, `-c key=value` on "
        "`squall run` (values are read as JSON where they parse), or a component's own "
        "configuration. squall checks it before anything runs, on both runners: a key squall "
        "reads with a value it cannot use is refused in one line naming the key, the value "
        "and what is allowed; an unknown `topology.*` or `squall.*` key is refused with the "
        "closest known one; a key one letter away from a known key is refused too. Any other "
        "key is yours, for your components to read, and `spark.*` keys go to Spark.", "",
        "## Storm's keys that squall reads", "",
        "| key | what it does | allowed values |", "|---|---|---|",
        *(f"| `{k}` | {_cell(meanings[k])} | {_cell(keys[k].allowed)} |" for k in storm), "",
        "## squall's own keys", "",
        "| key | what it does | allowed values |", "|---|---|---|",
        *(f"| `{k}` | {_cell(meanings[k])} | {_cell(keys[k].allowed)} |" for k in own), "",
        "## Storm's keys that are checked but change nothing", "",
        "Each draws one warning saying what to use instead.", "",
        "| key | instead |", "|---|---|",
        *(f"| `{k}` | {_cell(v)} |"
          for k, v in sorted(config_keys.STORM_KEYS_CHECKED_WITHOUT_EFFECT.items())), "",
        "## Storm's keys accepted without effect", "",
        "A topology ported from Storm keeps these keys; each draws one warning that it has no "
        "effect in squall.", "",
        *(f"- `{k}`" for k in sorted(config_keys.STORM_KEYS_WITHOUT_EFFECT)), "",
    ]
    return "\n".join(lines) + "\n"


PAGES = {
    "reference/cli.md": cli_page,
    "reference/configuration.md": configuration_page,
}


def on_files(files: Any, config: Any) -> Any:
    for src_uri, make in PAGES.items():
        files.append(File.generated(config, src_uri, content=make()))
    return files


if __name__ == "__main__":
    page = sys.argv[1] if len(sys.argv) > 1 else "cli"
    sys.stdout.write(PAGES[f"reference/{page}.md"]())
