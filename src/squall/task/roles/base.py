"""`WindowRole`: what a bolt task calls on the role adapter of a windowed component.

The task calls, in order: `setup` (the collector the component's `prepare` gets), then for each
input tuple `execute`, and once every spout is exhausted `end_of_input`. A snapshot of the task
(squall.task.snapshot) stores `saved()` next to the user's instance and gives it back to
`restore` of the restoring task's role. In a stateful topology the checkpointing
(squall.task.checkpointing) calls the checkpoint hooks (`init_state`, `pre_prepare`,
`pre_commit`, `pre_rollback`) of a stateful windowed component's role, never the instance's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.components.context import TopologyContext
from squall.protocols import OutputCollectorLike
from squall.topology.tuple import Tuple


class WindowRole:
    """The framework's side of one windowed component in one task.

    This base delegates to the `_window_*` hooks of the component and to its checkpoint hooks
    (where the framework's state lived before role adapters); each role replaces it with an
    adapter that holds that state.
    """

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    @property
    def emits_unanchored(self) -> bool:
        """Whether the component's emits may be unanchored in a stateful topology: a window
        kept in state (a persistent stateful windowed bolt, an operator's panes) acks its input
        when it is queued, so what it emits later has no tuple tree to join. This base reads
        the component's `_window_persistent` flag (the operators'); adapters say it."""
        return bool(getattr(self.instance, "_window_persistent", False))

    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> Any:
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

    # ---- the checkpoint protocol's hooks (stateful roles) ----------------------------------
    def init_state(self, state: Any) -> None:
        self.instance.init_state(state)

    def pre_prepare(self, txid: int) -> None:
        self.instance.pre_prepare(txid)

    def pre_commit(self, txid: int) -> None:
        self.instance.pre_commit(txid)

    def pre_rollback(self) -> None:
        self.instance.pre_rollback()
