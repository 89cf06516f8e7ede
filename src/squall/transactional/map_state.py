"""A transactional map: keys to `TransactionalValue`s or `OpaqueValue`s in a `durable` (SQLite)
or `redis` store, updated idempotently per transaction id.

`update(txid, changes)` reads the stored entries of the changed keys, applies Storm's rule to
each (transactional: skip a key already written by `txid`; opaque: build on the value before
`txid`), and writes every changed key in one store transaction (SQLite transaction, Redis
MULTI). A committer can update several maps in one transaction: if the process dies between two
of them, the replayed commit skips (or redoes from `previous`) what was already written, so each
map ends up with the transaction applied exactly once.

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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.errors import SquallError
from squall.state.backends import RedisStore, SqliteStore
from squall.transaction_kernel.values import OpaqueValue, TransactionalValue

Entry = TransactionalValue | OpaqueValue


class TransactionalMap:
    def __init__(self, store: Any, opaque: bool = False) -> None:
        self.store = store
        self.opaque = opaque

    def get_entry(self, key: Any) -> Entry | None:
        return self.store.get(key)

    def get(self, key: Any, default: Any = None) -> Any:
        entry = self.store.get(key)
        return default if entry is None else entry.value

    def multi_get_entries(self, keys: Iterable[Any]) -> dict[Any, Entry | None]:
        get = self.store.get
        return {k: get(k) for k in keys}

    def update(self, txid: int, changes: Mapping[Any, Callable[[Any], Any]],
               initial: Any = None) -> dict[Any, Entry]:
        """Apply `changes[key](old value)` for transaction `txid`; returns the new entries."""
        kind = OpaqueValue if self.opaque else TransactionalValue
        out: dict[Any, Entry] = {}
        writes: dict[Any, Entry] = {}
        for key, fn in changes.items():
            old = self.store.get(key)
            if old is None:
                old = kind.initial(initial)
            elif not isinstance(old, kind):
                raise SquallError(f"key {key!r} holds a {type(old).__name__}, not a "
                                  f"{kind.__name__}: opaque and transactional maps differ")
            new = old.update(txid, fn)
            out[key] = new
            if new is not old:
                writes[key] = new
        self.store.write_committed(writes)
        return out

    def entries(self) -> dict[Any, Entry]:
        return dict(self.store.items())

    def values(self) -> dict[Any, Any]:
        return {k: e.value for k, e in self.store.items()}

    def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def open_map(name: str, *, provider: str = "durable", config: Mapping[str, Any] | None = None,
             opaque: bool = False) -> TransactionalMap:
    """The map `name` in a `durable` store (config `dir`) or `redis` (host, port, password,
    database, prefix, ...; see `squall.state.backends.RedisStore`)."""
    config = dict(config or {})
    if provider == "durable":
        directory = config.get("dir")
        if not directory:
            raise SquallError(f"transactional map {name!r}: the durable provider needs a 'dir'")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        return TransactionalMap(SqliteStore(os.path.join(str(directory), f"txmap-{safe}.sqlite")),
                                opaque)
    if provider == "redis":
        config.setdefault("prefix", "squall:txmap:")
        return TransactionalMap(RedisStore(name, config), opaque)
    raise SquallError(f"transactional map {name!r}: provider must be 'durable' or 'redis', "
                      f"got {provider!r}")
