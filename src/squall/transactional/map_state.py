"""A transactional topology's maps: keys to `TransactionalValue`s or `OpaqueValue`s in a
`durable` (SQLite) or `redis` store, updated idempotently per transaction id.

`open_map` gives the map states Trident uses too (`squall.transaction_kernel.map_state`): a
`TransactionalMap`, or an `OpaqueMap` with `opaque=True`, over the store seen as a backing map
(`StoreBackingMap`). A committer calls `update(txid, {key: fn}, initial)`: it reads the stored
entries of the changed keys, applies Storm's rule to each (transactional: skip a key already
written by `txid`; opaque: build on the value before `txid`), and writes every changed key in one
store transaction (SQLite transaction, Redis MULTI). A committer can update several maps in one
transaction: if the process dies between two of them, the replayed commit skips (or redoes from
`previous`) what was already written, so each map ends up with the transaction applied exactly
once.

These maps apply Storm's rule alone (`check_order=False`, and no batch-keys record in an opaque
map): every committer task of a transaction writes its own keys of the same map, and the
coordinator commits transactions in order.

>>> import tempfile
>>> m = open_map("counts", provider="durable", config={"dir": tempfile.mkdtemp()})
>>> _ = m.update(1, {"a": lambda n: n + 2, "b": lambda n: n + 1}, initial=0)
>>> _ = m.update(1, {"a": lambda n: n + 2}, initial=0)   # replay of 1: skipped
>>> _ = m.update(2, {"a": lambda n: n + 1}, initial=0)
>>> sorted(m.values().items())
[('a', 3), ('b', 1)]
>>> m.get_entry("a")
TransactionalValue(txid=2, value=3)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from squall.errors import SquallError
from squall.state.backends import RedisStore, SqliteStore
from squall.transaction_kernel.map_state import OpaqueMap, TransactionalMap


class StoreBackingMap:
    """A `SqliteStore` or `RedisStore` as a `BackingMap`: each key (any key the store's
    serializer takes, stored as it is) holds its entry in the store's committed map, and a
    `multi_put` is one store transaction."""

    tuple_keys = False

    def __init__(self, store: SqliteStore | RedisStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"StoreBackingMap({self.store!r})"

    def multi_get(self, keys: Sequence[Any]) -> list[Any | None]:
        get = self.store.get
        return [get(k) for k in keys]

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        self.store.write_committed(dict(zip(keys, values, strict=True)))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self.store.items()

    def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def open_map(name: str, *, provider: str = "durable", config: Mapping[str, Any] | None = None,
             opaque: bool = False) -> TransactionalMap | OpaqueMap:
    """The map `name` in a `durable` store (config `dir`) or `redis` (host, port, password,
    database, prefix, ...; see `squall.state.backends.RedisStore`): a `TransactionalMap`, or
    an `OpaqueMap` when `opaque`."""
    config = dict(config or {})
    store: SqliteStore | RedisStore
    if provider == "durable":
        directory = config.get("dir")
        if not directory:
            raise SquallError(f"transactional map {name!r}: the durable provider needs a 'dir'")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        store = SqliteStore(os.path.join(str(directory), f"txmap-{safe}.sqlite"))
    elif provider == "redis":
        config.setdefault("prefix", "squall:txmap:")
        store = RedisStore(name, config)
    else:
        raise SquallError(f"transactional map {name!r}: provider must be 'durable' or 'redis', "
                          f"got {provider!r}")
    backing = StoreBackingMap(store)
    if opaque:
        return OpaqueMap(backing, name, check_order=False, record_batch_keys=False)
    return TransactionalMap(backing, name, check_order=False)
