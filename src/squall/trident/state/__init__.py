"""Trident's map states (Storm's `org.apache.storm.trident.state.map`).

A map state holds a value per group-by key (a tuple such as `("the",)`) and is updated a batch
at a time, the batch's txid deciding what a replay does:

- `StateType.TRANSACTIONAL` (`TransactionalMap`): a key already written by this txid is left as
  it is; exactly-once with a transactional spout.
- `StateType.OPAQUE` (`OpaqueMap`): a key already written by this txid is recomputed from its
  value before the batch; exactly-once with a transactional or an opaque spout.
- `StateType.NON_TRANSACTIONAL` (`NonTransactionalMap`): every update is applied, a replay
  too; at-least-once.

Where the entries live is the backing map's business: `MemoryMapState` (a dict of this process),
`DurableMapState` (a SQLite file under the checkpoint location) or `RedisMapState` (a Redis
hash). Each has a `factory(state_type, ...)`, a small picklable `StateFactory` whose
`make_state(name, location)` makes the state `name` of a run whose checkpoint location is
`location`. Keys and entries are stored pickled (protocol 5; see `squall.trident.state.codec`).

>>> import tempfile
>>> from squall.trident.state import DurableMapState, StateType
>>> factory = DurableMapState.factory(StateType.OPAQUE)
>>> checkpoint = tempfile.mkdtemp()
>>> counts = factory.make_state("counts", checkpoint)
>>> add = lambda n: lambda old: (old or 0) + n
>>> counts.multi_update(1, [("the",), ("cow",)], [add(2), add(1)])
[2, 1]
>>> counts.multi_update(2, [("the",)], [add(5)])        # the first try of batch 2 ...
[7]
>>> counts.close()                                       # ... then a crash, and a restart:
>>> counts = factory.make_state("counts", checkpoint)
>>> counts.multi_update(2, [("the",)], [add(3)])        # the replay of batch 2 differs
[5]
>>> sorted(counts.items())
[(('cow',), 1), (('the',), 5)]
"""

from squall.trident.state.durable import DurableMapState
from squall.trident.state.map_state import (
    BackingMap,
    MapState,
    MapStateError,
    NonTransactionalMap,
    OpaqueMap,
    StateFactory,
    StateType,
    TransactionalMap,
)
from squall.trident.state.memory import MemoryMapState
from squall.trident.state.redis_map import RedisMapState

__all__ = [
    "BackingMap",
    "DurableMapState",
    "MapState",
    "MapStateError",
    "MemoryMapState",
    "NonTransactionalMap",
    "OpaqueMap",
    "RedisMapState",
    "StateFactory",
    "StateType",
    "TransactionalMap",
]
