"""Shipping a topology's classes to Spark's Python workers by value.

Classes from modules outside installed packages (a script, a test file) cannot be imported by
the executors' Python workers, so their code must travel inside the pickles. `portable` registers
those modules with cloudpickle (both the installed one, which pickles the components, and the one
bundled with PySpark, which pickles the stage closures) for every object a component carries:
the instance, the user objects it holds (a transactional wrapper's batch bolt or spout, say)
and custom groupings.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import cloudpickle
from pyspark import cloudpickle as pyspark_cloudpickle

from squall.topology.description import ComponentSpec, Topology

# squall's own modules are importable wherever squall is installed: never shipped.
_SQUALL_DIR = str(Path(__file__).resolve().parents[2])
_INSTALLED = ("site-packages", "dist-packages")
# How deep `portable` looks into the objects a component holds: the instance and the user objects
# it holds directly (what squall's wrappers and custom groupings hold), and no further.
_DEPTH = 2


def _needs_shipping(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if module is None or path is None or module_name == "__main__":
        return False  # builtins; __main__ is pickled by value by cloudpickle anyway
    path = os.path.abspath(path)
    installed = tuple(p for p in sys.path if p.endswith(_INSTALLED))
    return not (path.startswith(installed) or path.startswith(_SQUALL_DIR))


def ship_by_value(obj: Any, depth: int = _DEPTH, seen: set[int] | None = None) -> None:
    """Register for pickling by value the non-importable modules of `obj`'s classes, and of
    the objects held in its attributes, `depth` levels down."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for cls in type(obj).__mro__:
        if _needs_shipping(cls.__module__):
            module = sys.modules[cls.__module__]
            cloudpickle.register_pickle_by_value(module)
            pyspark_cloudpickle.register_pickle_by_value(module)
    if depth > 1:
        for value in getattr(obj, "__dict__", {}).values():
            if hasattr(value, "__dict__") and not isinstance(value, type):
                ship_by_value(value, depth - 1, seen)


def portable(topology: Topology) -> Topology:
    """The topology with every component's payload pickled with its classes shipped by value."""
    specs: dict[str, ComponentSpec] = {}
    for cid, spec in topology.components.items():
        instance = spec.new_instance()
        ship_by_value(instance)
        for sub in spec.inputs:
            ship_by_value(sub.grouping)  # a custom grouping's user object is one level down
        specs[cid] = dataclasses.replace(spec, payload=cloudpickle.dumps(instance))
    return Topology(specs)
