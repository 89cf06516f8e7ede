"""The static rules, enforced with the tests: ruff on the whole tree, mypy on the type-clean set.

The rules themselves live in pyproject.toml: `[tool.ruff.lint]` selects the ruff rules, and
`[tool.mypy] files` lists the modules held type-clean (`mypy` without arguments checks them).
A failure shows the tool's report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_ruff_finds_nothing():
    proc = _run("ruff", "check", "--no-cache", "src", "tests", "benchmarks", "examples")
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)


def test_mypy_finds_nothing_in_the_clean_set():
    proc = _run("mypy")
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)
