"""Restarting with changed code or arguments: what differs between a component's
configuration as a checkpoint recorded it and as the new topology builds it.

A component's *configuration* is what its constructor set (the payload the builder pickled);
its *state* is everything a run added or changed after that. On a restart the configuration
comes from the new topology and the state from the snapshot (`squall.task.snapshot`
`restarted_instance`); `warn_changed_configurations` says, once per component, which
constructor-set values differ, so a changed argument is never taken silently.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Mapping
from typing import Any

import cloudpickle

from squall.topology.description import Topology

log = logging.getLogger("squall.checkpoint")


def configuration_changes(old_payload: bytes, new_payload: bytes) -> list[str]:
    """The constructor-set attributes of a component whose values differ between the
    configuration a checkpoint was written with and the new one, as `name: old -> new`.

    Values are compared by what they hold, never by identity: two objects of the same class
    are the same when their attributes are, down through the objects, lists and dicts they
    hold (a class loaded from a script is a new class in every process, so neither `==` nor
    the pickled bytes of its instances tell a restart apart from a change); a change inside
    one is named by its path.

    >>> class Numbers:
    ...     def __init__(self, limit, name): self.limit, self.name = limit, name
    >>> old, new = cloudpickle.dumps(Numbers(5, "n")), cloudpickle.dumps(Numbers(9, "n"))
    >>> configuration_changes(old, new)
    ['limit: 5 -> 9']
    >>> class Wrap:
    ...     def __init__(self, op): self.op = op
    >>> configuration_changes(cloudpickle.dumps(Wrap(Numbers(5, "n"))),
    ...                       cloudpickle.dumps(Wrap(Numbers(5, "n"))))
    []
    >>> configuration_changes(cloudpickle.dumps(Wrap([Numbers(5, "n")])),
    ...                       cloudpickle.dumps(Wrap([Numbers(9, "n")])))
    ['op[0].limit: 5 -> 9']
    """
    if old_payload == new_payload:
        return []
    try:
        before, after = cloudpickle.loads(old_payload), cloudpickle.loads(new_payload)
        vars(before), vars(after)
    except Exception:  # an old class that no longer loads, or no __dict__: nothing to compare
        return []
    return _differences("", before, after, 0)


def same(a: Any, b: Any) -> bool:
    """Whether two configuration values are the same: equal, of the same class (by name) with
    the same attributes, or pickling to the same bytes (objects without `__eq__` compare by
    identity, which two loads never share).

    >>> class Query:
    ...     def __init__(self, limit): self.limit = limit
    >>> same(Query(5), Query(5)), same(Query(5), Query(6)), same([1, {"a": 2}], [1, {"a": 2}])
    (True, False, True)
    """
    return not _differences("", a, b, 0)


# How deep `_differences` looks into the objects a configuration holds (cycles end here too).
_DEPTH = 8


def _differences(path: str, a: Any, b: Any, depth: int) -> list[str]:
    """`path: a -> b` for each part of `a` and `b` that differs (empty when they are the same)."""
    if _equal(a, b):
        return []
    mine = _parts(a) if depth < _DEPTH and _same_class(a, b) else None
    theirs = None if mine is None else _parts(b)
    if mine is not None and theirs is not None:
        (before, how), (after, _) = mine, theirs
        if how != "list" or len(before) == len(after):
            out = []
            for key in sorted(set(before) | set(after), key=repr):
                where = (f"{path}.{key}" if path else str(key)) if how == "attr" \
                    else f"{path}[{key!r}]"
                if key in before and key in after:
                    out += _differences(where, before[key], after[key], depth + 1)
                else:
                    was = _short(before[key]) if key in before else "(absent)"
                    now = _short(after[key]) if key in after else "(absent)"
                    out.append(f"{where}: {was} -> {now}")
            return out
    if _pickles_same(a, b):
        return []
    return [f"{path}: {_short(a)} -> {_short(b)}"]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, type) and isinstance(b, type):
        return _name(a) == _name(b)
    try:
        return a is b or bool(a == b)
    except Exception:  # an __eq__ that raises or returns an array
        return False


def _name(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def _same_class(a: Any, b: Any) -> bool:
    return type(a) is type(b) or _name(type(a)) == _name(type(b))


def _parts(value: Any) -> tuple[dict[Any, Any], str] | None:
    """What a value is compared by, and how its parts are named: a list's or tuple's items, a
    dict's values, a function's code, defaults and closure, an object's attributes."""
    if isinstance(value, (list, tuple)):
        return dict(enumerate(value)), "list"
    if isinstance(value, dict):
        return dict(value), "key"
    if isinstance(value, types.FunctionType):
        cells = tuple(c.cell_contents for c in value.__closure__ or ())
        return {"__code__": value.__code__, "__defaults__": value.__defaults__,
                "__kwdefaults__": value.__kwdefaults__, "__closure__": cells}, "attr"
    if isinstance(value, (type, types.ModuleType)):
        return None
    state = getattr(value, "__dict__", None)
    return (dict(state), "attr") if isinstance(state, dict) else None


def _pickles_same(a: Any, b: Any) -> bool:
    try:
        return bool(cloudpickle.dumps(a) == cloudpickle.dumps(b))
    except Exception:  # not picklable: nothing else tells them apart
        return False


def _short(value: Any) -> str:
    text = repr(value)
    state = getattr(value, "__dict__", None)
    if text.startswith("<") and " object at 0x" in text and isinstance(state, dict):
        # The default repr says nothing the user can compare: the class and its attributes.
        text = type(value).__qualname__ + "(" + ", ".join(
            f"{k}={v!r}" for k, v in state.items()) + ")"
    return text if len(text) <= 60 else text[:57] + "..."


def warn_changed_configurations(payloads: Mapping[str, bytes], topology: Topology) -> None:
    """One warning per component whose configuration (constructor arguments) differs from the
    one the checkpoint was written with: the new one is used, the state is restored."""
    for cid, old in sorted(payloads.items()):
        spec = topology.components.get(cid)
        if spec is None:
            continue
        changes = configuration_changes(old, spec.payload)
        if changes:
            log.warning("component '%s' restarts with a changed configuration (%s): the new "
                        "configuration is used and its state is restored from the checkpoint",
                        cid, "; ".join(changes))


__all__ = ["configuration_changes", "same", "warn_changed_configurations"]
