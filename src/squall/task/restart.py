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
import pickle
from collections.abc import Mapping
from typing import Any

import cloudpickle

from squall.topology.description import Topology

log = logging.getLogger("squall.checkpoint")


def configuration_changes(old_payload: bytes, new_payload: bytes) -> list[str]:
    """The constructor-set attributes of a component whose values differ between the
    configuration a checkpoint was written with and the new one, as `name: old -> new`.

    >>> class Numbers:
    ...     def __init__(self, limit, name): self.limit, self.name = limit, name
    >>> old, new = cloudpickle.dumps(Numbers(5, "n")), cloudpickle.dumps(Numbers(9, "n"))
    >>> configuration_changes(old, new)
    ['limit: 5 -> 9']
    """
    if old_payload == new_payload:
        return []
    try:
        before, after = vars(cloudpickle.loads(old_payload)), vars(cloudpickle.loads(new_payload))
    except Exception:  # an old class that no longer loads, or no __dict__: nothing to compare
        return []
    out = []
    for name in sorted(set(before) | set(after)):
        if name in before and name in after and same(before[name], after[name]):
            continue
        was = _short(before[name]) if name in before else "(absent)"
        now = _short(after[name]) if name in after else "(absent)"
        out.append(f"{name}: {was} -> {now}")
    return out


def same(a: Any, b: Any) -> bool:
    """Whether two configuration values are the same: equal, or pickling to the same bytes
    (objects without `__eq__` compare by identity, which two loads never share)."""
    try:
        if a == b:
            return True
    except Exception:  # an __eq__ that raises or returns an array
        pass
    try:
        return bool(cloudpickle.dumps(a) == cloudpickle.dumps(b))
    except (pickle.PicklingError, TypeError, AttributeError):
        return False


def _short(value: Any) -> str:
    text = repr(value)
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
