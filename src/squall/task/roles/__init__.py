"""Role adapters: how a bolt task drives a component whose `execute` does not take single tuples.

A windowed component (Storm's `WindowedBolt` and `StatefulWindowedBolt`, the operators of
`squall.windows`) is configured by the user; the framework's state for it (the window manager
or pane engine, its buffers, its state handles) lives in a `WindowRole` that the task builds from
the component's role (`ComponentSpec.role`, recorded by the builder), never on the user's object.

The task calls, in order: `setup` (the collector the component's `prepare` gets), then for each
input tuple `execute`, at a batch end `end_batch`, and once every spout is exhausted
`end_of_input`. A snapshot of the task (squall.task.snapshot) stores `saved()` next to the user's
instance and gives it back to `restore` of the restoring task's role.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.topology.tuple import Tuple


class WindowRole:
    """The framework's side of one windowed component in one task.

    This base delegates to the `_window_*` hooks of the component (where the framework's state
    lived before role adapters); each role replaces it with an adapter that holds that state.
    """

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def setup(self, conf: Mapping[str, Any], context: Any, out: Any) -> Any:
        """Build the task's window machinery; returns the collector `prepare` gets."""
        return self.instance._window_setup(conf, context, out)

    def execute(self, tup: Tuple, now_ms: int) -> None:
        self.instance._window_execute(tup, now_ms)

    def end_of_input(self, now_ms: int) -> None:
        self.instance._window_end_of_input(now_ms)

    def saved(self) -> Any:
        """The framework state a snapshot of the task must carry (None: all on the instance)."""
        return None

    def restore(self, saved: Any, instance: Any) -> None:
        """Continue from a snapshot: `instance` is the restored component, `saved` what
        `saved()` returned when it was taken."""
        self.instance = instance


def window_role(role: str, instance: Any) -> WindowRole:
    """The adapter for a windowed `role` (squall.topology.roles)."""
    return WindowRole(instance)
