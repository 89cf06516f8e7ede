"""`PathStore`: what the file-backed partition stores share (SQLite, LMDB): a path, the state's
name, pickling as those two (the connection is reopened lazily where it is used), and their
errors, which name the state and the path."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from squall.trident.state.map_state import MapStateError


class PathStore:
    """Base of a `BackingMap` kept at `path`; `_lock` serialises the threads that use it."""

    def __init__(self, path: str, name: str | None = None) -> None:
        self.path = path
        self.name = name
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["name"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, name={self.name!r})"

    def _failed(self, exc: Exception) -> MapStateError:
        return MapStateError(f"durable map state {self.name!r} at {self.path}: {exc}")

    def _check_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        if len(keys) != len(values):
            raise MapStateError(f"durable map state {self.name!r}: {len(keys)} keys but "
                                f"{len(values)} values")
