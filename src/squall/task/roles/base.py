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

    Each windowed role has an adapter (squall.task.roles) that holds the framework's state for
    the component; this base says what the task calls, and passes the checkpoint hooks on to
    the component (a stateful windowed bolt's `init_state`, `pre_*` are the user's).
    """

    late_count = 0  # tuples found late since the runner last read it (squall.metrics)

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def held(self) -> int | None:
        """How many input tuples the windows hold now (None: not known for this role)."""
        return None

    @property
    def emits_unanchored(self) -> bool:
        """Whether the component's emits may be unanchored in a stateful topology: a window
        kept in state (a persistent stateful windowed bolt, an operator's panes) acks its input
        when it is queued, so what it emits later has no tuple tree to join."""
        return False

    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> Any:
        """Build the task's window machinery; returns the collector `prepare` gets."""
        raise NotImplementedError

    def execute(self, tup: Tuple, now_ms: int) -> None:
        """One input tuple (or tick) at processing time `now_ms`."""
        raise NotImplementedError

    def end_batch(self, batch_id: int, now_ms: int) -> None:
        """The end of a batch (a Spark micro-batch, a local runner's batch), after the
        component's own `on_batch_end`: processing-time triggers fire at `now_ms`."""

    def end_of_input(self, now_ms: int) -> None:
        """Every spout is exhausted: fire what remains and ack what is held."""
        raise NotImplementedError

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
