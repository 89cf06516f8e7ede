"""State for stateful bolts: `State`, `KeyValueState`, providers and the checkpoint protocol."""

from squall.state.base import KeyValueState, MemoryKeyValueState, State, StateError
from squall.state.checkpoint import CheckpointCoordinator
from squall.state.providers import new_state

__all__ = ["CheckpointCoordinator", "KeyValueState", "MemoryKeyValueState", "State", "StateError",
           "new_state"]
