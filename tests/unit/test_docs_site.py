"""The documentation site: `mkdocs build --strict` succeeds (a broken link, a page missing from
the navigation or an API reference that does not resolve fails it), the generated reference
pages cover the code, and no file under docs/ tells history (a session or an issue number):
the docs describe the product as it is, and history is in git and CHANGELOG.md.

One test builds the site, checks its pages, then serves it on loopback and opens it in a
real headless Chromium (tests/support/headless_chromium.py): the getting-started page, the API
chooser and a generated reference page are checked as rendered and saved as screenshots under
test-artifacts/docs/ (not committed)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.examples import ROOT
from support.headless_chromium import Chromium

from squall.cli.main import build_parser
from squall.topology.config_keys import KEYS, MEANINGS, STORM_KEYS_WITHOUT_EFFECT

DOCS = ROOT / "docs"
# "session 22", "Sessions 3-5", "issue 14", "issue #14": history, not documentation. A session
# window ("session windows", "sessions merge") is not followed by a number, nor is a duration
# ("a Spark session 4.9 s").
HISTORY = re.compile(r"\b(session|issue)s?\s*#?\d+\b(?![.,]\d)", re.IGNORECASE)

def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.browser
def test_the_site_builds_strictly_and_renders(tmp_path):
    """One build (it takes tens of seconds), checked as files and then in a browser."""
    site = tmp_path / "site"
    proc = build_site(site)
    if proc.returncode != 0:
        pytest.fail("mkdocs build --strict failed:\n" + proc.stdout + proc.stderr, pytrace=False)
    _has_the_pages(site)
    _the_cli_reference_has_every_verb_and_flag(site)
    _the_configuration_reference_has_every_key(site)
    _the_api_reference_shows_the_docstrings_examples_as_code(site)
    _in_a_browser(site)


def _has_the_pages(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "choosing-an-api/index.html",
                 "reference/api/squall/index.html", "reference/cli/index.html",
                 "reference/configuration/index.html"):
        assert (site / page).is_file(), page


def _the_cli_reference_has_every_verb_and_flag(site: Path) -> None:
    html = (site / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()
    verbs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in verbs.choices.items():
        assert f"squall {name}" in html, name
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in html, f"squall {name} {flag}"


def _the_configuration_reference_has_every_key(site: Path) -> None:
    html = (site / "reference" / "configuration" / "index.html").read_text()
    for key in (*KEYS, *STORM_KEYS_WITHOUT_EFFECT):
        assert f"<code>{key}</code>" in html, key
    # Each key squall reads says what it does, beside what it allows.
    assert set(MEANINGS) == set(KEYS)
    text = html.replace("&#39;", "'").replace("&quot;", '"')
    for key, meaning in MEANINGS.items():
        row = text[text.index(f"<code>{key}</code>"):]
        assert meaning in row[:row.index("</tr>")], key


def _the_api_reference_shows_the_docstrings_examples_as_code(site: Path) -> None:
    html = (site / "reference" / "api" / "connectors" / "index.html").read_text()
    assert "KafkaSource" in html and "FileBatchSpout" not in html
    assert '<span class="gp">&gt;&gt;&gt;' in html  # a console prompt, highlighted
    trident = (site / "reference" / "api" / "trident" / "index.html").read_text()
    assert "FileBatchSpout" in trident
    # What the docstrings point to is on the page: Stream's windows say "see
    # squall.trident.windows", whose module doc is there.
    assert 'id="squall.trident.windows"' in trident


def _docs_files() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*")
                  if p.is_file() and p.suffix in (".md", ".mmd", ".svg", ".html", ".yml"))


@pytest.mark.parametrize("name", _docs_files())
def test_no_docs_page_tells_history(name):
    text = (DOCS / name).read_text(errors="replace")
    found = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
             for m in HISTORY.finditer(text)]
    assert found == [], f"docs/{name} names sessions or issues: " + "; ".join(found)


def test_the_history_pattern():
    for text in ("as measured in session 22", "Issue 14 asked", "sessions 3-5", "issue #7"):
        assert HISTORY.search(text), text
    for text in ("session windows merge", "a Spark session per module", "the issue is that 3",
                 "Spark session 4.9-5.7 s",
                 "SessionWindows(gap=30)"):
        assert not HISTORY.search(text), text


def test_the_readme_is_a_front_page_that_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) < 200
    assert lines[2:6] == [
        "```bash",
        "bash scripts/bootstrap.sh && .venv/bin/squall run examples/wordcount.py:topology",
        "bash scripts/bootstrap.sh && .venv/bin/python -m pytest",
        "```",
    ]
    assert HISTORY.search(readme) is None
    # Its links into the site point at pages that exist.
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[str]:
    """The directory over HTTP on a free loopback port (a thread, shut down on leaving)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


ARTIFACTS = ROOT / "test-artifacts" / "docs"
SHOTS = {
    # page, text it must show, screenshot
    "getting-started/": ("Is the result right?", "getting-started.png"),
    "choosing-an-api/": ("At a glance", "choosing-an-api.png"),
    "reference/api/connectors/": ("KafkaSource", "reference-connectors.png"),
}


def _in_a_browser(site: Path) -> None:
    with serving(site) as base, Chromium() as browser:
        for path, (text, shot) in SHOTS.items():
            page = browser.open(base + path, width=1280, height=900)
            # Material's script has run (it sets the palette) and the page's text is there.
            page.wait_for("document.body && document.body.dataset.mdColorScheme !== undefined")
            page.wait_for(f"document.body.innerText.includes({text!r})")
            # The text can be there while the rest of a long page is still being parsed (seen
            # on a loaded machine): the checks below count elements of the whole page.
            page.wait_for("document.readyState === 'complete'", timeout_s=60)
            title = page.evaluate("document.title")
            assert title.endswith("squall"), title
            if path == "choosing-an-api/":
                rows = page.evaluate("document.querySelectorAll('article table')[0]"
                                     ".querySelectorAll('tbody tr').length")
                assert rows >= 8
            if path.startswith("reference/"):
                assert page.evaluate("document.querySelectorAll('.doc-class').length") > 10
            assert page.console_errors() == [], page.console_errors()
            page.screenshot(ARTIFACTS / shot)
            assert (ARTIFACTS / shot).stat().st_size > 10_000
