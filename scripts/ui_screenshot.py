"""The README's screenshot of the web UI: the word count running with `squall run --ui`.

    .venv/bin/python scripts/ui_screenshot.py            # writes docs/images/ui.png
    .venv/bin/python scripts/ui_screenshot.py -o x.png   # or elsewhere

Starts `squall run examples/wordcount.py:topology --runner local --ui` as a user would, opens the
address it prints in headless Chromium (Debian's `chromium` package, which
`scripts/bootstrap.sh` installs; driven by tests/support/headless_chromium.py), waits until the
picture shows live rates, takes a 1200x800 screenshot, then stops the run (SIGINT: a graceful stop).
With Pillow installed (`squall[png]`, and the test extra) the PNG is reduced to 256 colours,
which keeps it small in the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "images" / "ui.png"
WIDTH, HEIGHT = 1200, 800
COMMAND = ["run", "examples/wordcount.py:topology", "--runner", "local", "--ui", "--name",
           "wordcount", "--duration", "60", "--progress-every", "0",
           "-c", "wordcount.sentences=5000000"]


def headless_chromium() -> ModuleType:
    """tests/support/headless_chromium.py, the tests' browser driver."""
    path = ROOT / "tests" / "support" / "headless_chromium.py"
    spec = importlib.util.spec_from_file_location("headless_chromium", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ui_address(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """The address `squall run --ui` prints on stderr."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    for line in proc.stderr:
        match = re.match(r"squall: web UI at (\S+)$", line.strip())
        if match:
            return match.group(1)
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"ui_screenshot: `squall run --ui` printed no address (exit {proc.poll()})")


def smaller(png: bytes) -> bytes:
    """`png` reduced to 256 colours when Pillow is installed, else as it is."""
    try:
        from PIL import Image  # noqa: PLC0415 - optional
    except ImportError:
        return png
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(256)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue() if out.tell() < len(png) else png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT, help=f"default {OUTPUT}")
    args = parser.parse_args(argv)
    chromium = headless_chromium()
    proc = subprocess.Popen([sys.executable, "-m", "squall.cli.main", *COMMAND], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = ui_address(proc)
        with chromium.Chromium() as browser:
            page = browser.open(url, width=WIDTH, height=HEIGHT)
            page.wait_for("document.querySelectorAll('#graph svg g.node').length > 0", 30)
            # Every edge and badge carries a rate once two samples exist; let them settle.
            page.wait_for("[...document.querySelectorAll('#graph g.edge')]"
                          ".every(g => Number(g.dataset.rate) > 0)", 30)
            time.sleep(2.5)
            png = page.screenshot(args.output)
        args.output.write_bytes(smaller(png))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
