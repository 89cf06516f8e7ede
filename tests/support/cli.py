"""`squall` as a user runs it: the CLI in a subprocess from the repository's root."""

from __future__ import annotations

import subprocess
import sys

from support.examples import ROOT

SQUALL = [sys.executable, "-m", "squall.cli.main"]


def squall(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `squall ARGS...` to its end; its output captured as text."""
    return subprocess.run(
        [*SQUALL, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
