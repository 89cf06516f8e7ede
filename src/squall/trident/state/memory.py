"""`MemoryMapState`: a map state in a dict of this process (Storm's `MemoryMapState`).

For tests and the local runner: nothing survives the process. States made by a factory are kept
in a registry by (location, name), as Storm keeps them in a static registry by id, so two
`make_state` calls for one state in one process share the map, and a state pickled and loaded in
the same process is the same map again.

>>> factory = MemoryMapState.factory(StateType.OPAQUE)
>>> factory
MemoryMapState.factory(StateType.OPAQUE)
>>> a = factory.make_state("counts", None)
>>> a.multi_update(1, [("the",)], [lambda old: (old or 0) + 1])
[1]
>>> factory.make_state("counts", None).multi_get([("the",), ("cow",)])
[1, None]
>>> MemoryMapState.clear_registry()
>>> factory.make_state("counts", None).multi_get([("the",)])
[None]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from squall.errors import ConfigError
from squall.trident.state.map_state import (
    MapState,
    MapStateError,
    StateType,
    check_name,
    state_type_of,
    wrap,
)


class MemoryMapState:
    """A `BackingMap` over a dict. `MemoryMapState()` is a private map; `registered(name,
    location)` the process's shared map for that state."""

    _registry: ClassVar[dict[tuple[str | None, str], MemoryMapState]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.data: dict[tuple[Any, ...], Any] = {}
        self._registered_as: tuple[str | None, str] | None = None

    def __repr__(self) -> str:
        where = "" if self._registered_as is None else f", location={self._registered_as[0]!r}"
        return f"MemoryMapState(name={self.name!r}{where}, {len(self.data)} keys)"

    def __reduce__(self) -> Any:
        if self._registered_as is not None:  # a reference to the process's shared map
            location, name = self._registered_as
            return (MemoryMapState.registered, (name, location))
        return (_restore, (self.name, self.data))

    @classmethod
    def factory(cls, state_type: StateType | str = StateType.TRANSACTIONAL
                ) -> MemoryMapStateFactory:
        """A factory of map states of `state_type` in this process's memory."""
        return MemoryMapStateFactory(state_type_of(state_type, "MemoryMapState.factory"))

    @classmethod
    def registered(cls, name: str, location: str | None = None) -> MemoryMapState:
        """The shared map of state `name` at `location` in this process (made when absent)."""
        key = (_location(location, name), check_name(name, "MemoryMapState"))
        with cls._registry_lock:
            backing = cls._registry.get(key)
            if backing is None:
                backing = cls._registry[key] = MemoryMapState(name)
                backing._registered_as = key
            return backing

    @classmethod
    def clear_registry(cls) -> None:
        """Forget every shared map (between tests)."""
        with cls._registry_lock:
            cls._registry.clear()

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        get = self.data.get
        return [get(k) for k in keys]

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        if len(keys) != len(values):
            raise MapStateError(f"memory map state {self.name!r}: {len(keys)} keys but "
                                f"{len(values)} values")
        self.data.update(dict(zip(keys, values, strict=True)))  # hashed first, then one update

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        return iter(list(self.data.items()))

    def close(self) -> None:
        pass


def _restore(name: str | None, data: dict[tuple[Any, ...], Any]) -> MemoryMapState:
    backing = MemoryMapState(name)
    backing.data = data
    return backing


def _location(location: Any, name: str) -> str | None:
    if location is None:
        return None
    if not isinstance(location, (str, os.PathLike)):
        raise ConfigError(f"state {name!r}: location must be a path or None, got {location!r}")
    return str(os.fspath(location))


@dataclass(frozen=True)
class MemoryMapStateFactory:
    """Made by `MemoryMapState.factory`."""

    state_type: StateType = StateType.TRANSACTIONAL

    def __post_init__(self) -> None:
        if not isinstance(self.state_type, StateType):
            raise ConfigError(f"MemoryMapStateFactory: state_type must be a StateType, got "
                              f"{self.state_type!r} (MemoryMapState.factory also takes a value "
                              "such as 'opaque')")

    def __repr__(self) -> str:
        return f"MemoryMapState.factory({self.state_type})"

    def make_state(self, name: str, location: str | None = None) -> MapState:
        return wrap(self.state_type, MemoryMapState.registered(name, location), name)
