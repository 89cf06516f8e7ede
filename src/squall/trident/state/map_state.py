"""Storm's `MapState` family for Trident: a map of group-by keys to values, updated a batch at a
time.

The classes are `squall.transaction_kernel.map_state`'s (its documentation gives the three rules:
`TransactionalMap`, `OpaqueMap`, `NonTransactionalMap`), which transactional topologies' committer
maps use too; this module re-exports them under Trident's import path and adds what only Trident
needs: `StateFactory` and `check_name`. Batches must be applied in txid order:

>>> from squall.trident.state import MemoryMapState
>>> backing = MemoryMapState()
>>> counts = TransactionalMap(backing, name="counts")
>>> counts.multi_update(1, [("the",), ("cow",)], [lambda old: (old or 0) + 2] * 2)
[2, 2]
>>> counts.multi_update(1, [("the",)], [lambda old: (old or 0) + 2])   # replay of txid 1
[2]
>>> counts.multi_update(2, [("the",)], [lambda old: (old or 0) + 1])
[3]
>>> backing.multi_get([("the",)])
[TransactionalValue(txid=2, value=3)]
>>> restarted = TransactionalMap(backing, name="counts")
>>> restarted.multi_update(1, [("the",)], [lambda old: (old or 0) + 2])
Traceback (most recent call last):
...
squall.transactional.values.TransactionOrderError: state 'counts', key ('the',): transaction 1 \
comes after transaction 2: batches must be applied in transaction order

An opaque map rolls back, when a batch is replayed, the keys an earlier attempt of its txid
wrote (`OpaqueMap.begin_commit`):

>>> m = OpaqueMap(MemoryMapState())
>>> add = lambda n: lambda old: (old or 0) + n
>>> m.begin_commit(1); _ = m.multi_update(1, [("a",), ("b",)], [add(1), add(1)])
>>> m.begin_commit(1); _ = m.multi_update(1, [("a",)], [add(5)])  # replay: no "b" now
>>> sorted(m.items()), m.multi_get([("b",)])
([(('a',), 5)], [None])
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from squall.errors import ConfigError
from squall.transaction_kernel.map_state import (
    BATCH_KEYS,
    Adder,
    BackingMap,
    MapState,
    MapStateError,
    NonTransactionalMap,
    OpaqueMap,
    StateType,
    TransactionalMap,
    Updater,
    state_type_of,
    wrap,
)

__all__ = [
    "BATCH_KEYS",
    "Adder",
    "BackingMap",
    "MapState",
    "MapStateError",
    "NonTransactionalMap",
    "OpaqueMap",
    "StateFactory",
    "StateType",
    "TransactionalMap",
    "Updater",
    "check_name",
    "state_type_of",
    "wrap",
]


@runtime_checkable
class StateFactory(Protocol):
    """Makes the map state `name` of a topology (Storm's `StateFactory`).

    Factories are small picklable descriptions: they travel with the topology, and a state is
    made where it is used.
    """

    @property
    def state_type(self) -> StateType: ...

    def make_state(self, name: str, location: str | None) -> MapState:
        """The state `name` (its id in the topology, e.g. "counts"); `location` is the run's
        checkpoint directory, or None when the run has none."""
        ...


def check_name(name: Any, owner: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{owner}: a state's name must be a non-empty string (its id in the "
                          f"topology, such as 'counts'); got {name!r}")
    return name
