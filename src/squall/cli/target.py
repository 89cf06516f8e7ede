"""Resolving a TARGET (`module:attribute` or `path/to/file.py:attribute`) to a topology.

The attribute names a `Topology`, or a function returning a `Topology` or `(topology, conf)`; a
function with a parameter `conf` is called with the run's `-c` overrides, so that configuration
keys can shape the topology it builds.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from squall.errors import ConfigError
from squall.topology.config_keys import check_config
from squall.topology.description import Topology


class TargetError(ValueError):
    pass


def split_target(target: str) -> tuple[str, str, Path | None]:
    """(module or file part, attribute, the file's path when TARGET names a file)."""
    module_part, sep, attr = target.rpartition(":")
    if not sep or not module_part or not attr:
        raise TargetError(
            f"TARGET must be module:attribute or path/to/file.py:attribute, got {target!r}"
        )
    if module_part.endswith(".py") or "/" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"no such file: {path}")
        return module_part, attr, path
    return module_part, attr, None


def run_name(target: str) -> str:
    """The name a run of `target` is known by when `--name` is not given: the module (or the
    file's name without `.py`) and the attribute, so runs of two examples do not collide
    because both call their topology `topology`.

    >>> run_name("examples/wordcount.py:topology")
    'wordcount.topology'
    >>> run_name("mypackage.pipelines:files_to_parquet")
    'mypackage.pipelines.files_to_parquet'
    """
    module_part, attr, path = split_target(target)
    if path is not None:
        module_part = path.name.removesuffix(".py")
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{module_part}.{attr}").lstrip("._-")
    return name[:100] or "topology"


def load_target(target: str, overrides: Mapping[str, Any] | None = None,
                ) -> tuple[Topology, dict[str, Any]]:
    module_part, attr, path = split_target(target)
    if path is not None:
        name = f"squall_target_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        # The file is not importable elsewhere (Spark executors), so its classes travel by value.
        cloudpickle.register_pickle_by_value(module)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as exc:
            raise TargetError(f"cannot import module {module_part!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise TargetError(f"module {module_part!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, Topology):
        try:
            obj = obj(conf=dict(overrides or {})) if _takes_conf(obj) else obj()
        except ConfigError as exc:  # a configuration key the function reads is wrong
            raise TargetError(f"{target}: {exc}") from None
    conf: dict[str, Any] = {}
    if isinstance(obj, tuple) and len(obj) == 2:
        obj, conf_obj = obj
        conf = dict(conf_obj or {})
    if not isinstance(obj, Topology):
        # A builder (TopologyBuilder, TransactionalTopologyBuilder, TridentTopology) makes one.
        hint = next((f" (call its {method}())" for method in ("create_topology", "build")
                     if callable(getattr(obj, method, None))), "")
        raise TargetError(
            f"{target} is a {type(obj).__name__}; it must be a Topology or a function "
            f"returning a Topology or (topology, conf){hint}"
        )
    return obj, conf


def _takes_conf(fn: Any) -> bool:
    try:
        return "conf" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values are read as JSON when they parse (numbers, true, null)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise TargetError(f"-c takes key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    try:
        check_config(out, where="-c")  # its warnings come once, when the runner starts
    except ConfigError as exc:
        raise TargetError(str(exc)) from None
    return out


def merge_conf(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    merged.update(overrides)
    return merged


def parse_parallelism(pairs: list[str], flag: str = "--parallelism") -> dict[str, int]:
    """`COMPONENT=N` pairs (a later pair for the same component wins).

    >>> parse_parallelism(["count=3", "split=2", "count=4"])
    {'count': 4, 'split': 2}
    >>> parse_parallelism(["count=0"], "-n")
    Traceback (most recent call last):
    ...
    squall.cli.target.TargetError: -n takes COMPONENT=N with N a whole number >= 1, got 'count=0'
    """
    out: dict[str, int] = {}
    for pair in pairs:
        cid, sep, raw = pair.partition("=")
        if not sep or not cid or not raw.isdigit() or int(raw) < 1:
            raise TargetError(f"{flag} takes COMPONENT=N with N a whole number >= 1, "
                              f"got {pair!r}")
        out[cid] = int(raw)
    return out
