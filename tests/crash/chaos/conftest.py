"""The chaos suite's settings and its results table, printed at the end of the pytest session.

`SQUALL_CHAOS=long` selects the long version (at least 20 kills per scenario on Spark, 10 on the
local runner); otherwise the short one. The Spark scenarios are marked `long`: the default run
has the local ones, `-m long` the Spark ones. `SQUALL_CHAOS_SEED` changes
the seed of the kill plans and input (default 12).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from .harness import Outcome, table

LONG = os.environ.get("SQUALL_CHAOS", "short").strip().lower() == "long"
SEED = int(os.environ.get("SQUALL_CHAOS_SEED", "12"))

# Every outcome of this session, in the order the tests ran: the rows of the table.
OUTCOMES: list[Outcome] = []


@pytest.fixture
def chaos_outcomes() -> list[Outcome]:
    return OUTCOMES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not OUTCOMES:
        return
    version = "long" if LONG else "short"
    terminalreporter.write_sep("=", f"chaos suite ({version} version, seed {SEED})")
    terminalreporter.write_line(table(OUTCOMES))
