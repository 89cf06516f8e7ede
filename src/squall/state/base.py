"""`State` and `KeyValueState`: what stateful bolts keep, and how it is checkpointed.

A state follows Storm's two-phase protocol: `prepare_commit(txid)` stages the changes made since
the last prepare, `commit(txid)` makes them the committed state, `rollback()` drops everything
not committed. `MemoryKeyValueState` is Storm's in-memory state (tests); provider-backed states
live in `squall.state.backends`.

>>> s = MemoryKeyValueState()
>>> s.put("cow", 1); s.prepare_commit(0); s.commit(0)
>>> s.put("cow", 2); s.put("dog", 1); s.get("cow")
2
>>> s.rollback(); sorted(s), s.get("dog", 0)
([('cow', 1)], 0)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from squall.errors import SquallError


class StateError(SquallError):
    """A state could not be read, written or committed (store unreachable, bad protocol use)."""


class State:
    """What the checkpoint protocol drives. Custom states implement the three methods."""

    def prepare_commit(self, txid: int) -> None:
        """Stage every change made since the last prepare under transaction `txid`."""
        raise NotImplementedError

    def commit(self, txid: int | None = None) -> None:
        """Make transaction `txid` committed; `None` commits the current state at once."""
        raise NotImplementedError

    def rollback(self) -> None:
        """Forget every change that is not committed."""
        raise NotImplementedError


class KeyValueState(State):
    """A map from keys to values: `get`, `put`, `delete`, iteration over `(key, value)`."""

    def get(self, key: Any, default: Any = None) -> Any:
        raise NotImplementedError

    def put(self, key: Any, value: Any) -> None:
        raise NotImplementedError

    def delete(self, key: Any) -> Any:
        """Remove `key`; returns the value it had (None if none), as Storm's `delete`."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        raise NotImplementedError

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self)

    def size(self) -> int | None:
        """How many keys the state holds, for metrics (None: not known): a store's committed
        keys as of its last commit, the working map's in memory; by iteration otherwise."""
        return sum(1 for _ in self)


class MemoryKeyValueState(KeyValueState):
    """Storm's `InMemoryKeyValueState`, except that rollback copies the committed map (Storm
    aliases it, so changes after a rollback would leak into the committed snapshot)."""

    def __init__(self) -> None:
        self.working: dict[Any, Any] = {}
        self.committed: dict[Any, Any] = {}
        self.committed_txid: int | None = None
        self.prepared: tuple[int, dict[Any, Any]] | None = None

    def get(self, key: Any, default: Any = None) -> Any:
        return self.working.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.working[key] = value

    def delete(self, key: Any) -> Any:
        return self.working.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.working.items()))

    def size(self) -> int:
        return len(self.working)

    def prepare_commit(self, txid: int) -> None:
        if self.prepared is not None and txid > self.prepared[0]:
            raise StateError(f"cannot prepare txid {txid} while txid {self.prepared[0]} is "
                             "prepared and not committed")
        self.prepared = (txid, dict(self.working))

    def commit(self, txid: int | None = None) -> None:
        if txid is None:
            self.committed = dict(self.working)
            return
        if self.prepared is None:
            # A roll-forward after a restart: whatever was prepared lived in the lost process.
            self.committed_txid = txid
            return
        if self.prepared[0] != txid:
            raise StateError(f"commit of txid {txid}, but txid {self.prepared[0]} is prepared")
        self.committed = self.prepared[1]
        self.committed_txid = txid
        self.prepared = None

    def rollback(self) -> None:
        self.prepared = None
        self.working = dict(self.committed)
