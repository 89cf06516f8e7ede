"""The order tests are handed to xdist's workers: the longest units of work first.

A *unit* is what one worker runs as a whole: a test module, whose tests share its Spark session
and servers, or, in a module marked `spread` (its tests share nothing costly), a single test.
Units go out longest first (known durations from `tests/durations.json`), so the last ones to
run are short and the workers finish together; with modules in file order a long crash module
that came last ran alone for many minutes.

    >>> units = order_units({"a.py::t1": 1.0, "b.py::t1": 5.0, "b.py::t2": 5.0},
    ...                     [("a.py::t1", "a.py"), ("b.py::t1", "b.py"), ("b.py::t2", "b.py")])
    >>> units
    ['b.py', 'a.py']

`pytest --record-durations` (tests/conftest.py) rewrites the file from a run's own figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
UNKNOWN_S = 0.2  # a test the file does not list: new, or under half a second


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def order_units(durations: Mapping[str, float],
                items: Iterable[tuple[str, str]]) -> list[str]:
    """The units of `items` ((test id, unit) pairs), longest first; ties in order of appearance."""
    cost: dict[str, float] = {}
    for nodeid, unit in items:
        cost[unit] = cost.get(unit, 0.0) + durations.get(nodeid, UNKNOWN_S)
    first = {unit: i for i, unit in enumerate(cost)}
    return sorted(cost, key=lambda u: (-cost[u], first[u]))


def save_durations(new: Mapping[str, float], path: Path = DURATIONS) -> None:
    """Merge `new` into the file (tests not run this time keep their figures); tests under half
    a second are left out (they count as `UNKNOWN_S`)."""
    merged = {**load_durations(path), **{k: round(v, 2) for k, v in new.items()}}
    merged = {k: v for k, v in merged.items() if v >= 0.5}
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
