"""Role adapters: how a bolt task drives a component whose `execute` does not take single tuples.

A windowed component (Storm's `WindowedBolt` and `StatefulWindowedBolt`, the operators of
`squall.windows`) is configured by the user; the framework's state for it (the window manager
or pane engine, its buffers, its state handles) lives in a `WindowRole` (squall.task.roles.base)
that the task builds from the component's role (`ComponentSpec.role`, recorded by the builder),
never on the user's object: `WindowedRole` (windowed.py), `StatefulWindowedRole`
(stateful_windowed.py), `OperatorRole` (operator.py).
"""

from __future__ import annotations

from typing import Any

from squall.task.roles.base import WindowRole
from squall.task.roles.operator import OperatorRole
from squall.task.roles.stateful_windowed import StatefulWindowedRole
from squall.task.roles.windowed import WindowedRole
from squall.topology.roles import OPERATOR, STATEFUL_OPERATOR, STATEFUL_WINDOWED, WINDOWED

_ADAPTERS: dict[str, type[WindowRole]] = {
    WINDOWED: WindowedRole,
    STATEFUL_WINDOWED: StatefulWindowedRole,
    OPERATOR: OperatorRole,
    STATEFUL_OPERATOR: OperatorRole,
}


def window_role(role: str, instance: Any) -> WindowRole:
    """The adapter for a windowed `role` (squall.topology.roles)."""
    return _ADAPTERS[role](instance)


__all__ = ["OperatorRole", "StatefulWindowedRole", "WindowRole", "WindowedRole", "window_role"]
