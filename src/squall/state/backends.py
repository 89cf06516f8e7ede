"""Provider-backed key/value state: the committed map lives in a store, never all in memory.

A store keeps the committed map plus *versions*: the changes of one transaction (txid, or the
micro-batch id on Spark), written by `prepare_commit` and not yet part of the committed map.
`promote(txid)` folds a version into the committed map atomically; `discard_above(txid)` drops the
versions of transactions that did not commit. So a transaction is applied exactly once, whatever
process dies when. Only the keys a transaction touches are read or written.

Two stores: `SqliteStore` (provider `durable`: one SQLite file per namespace, under the checkpoint
location on Spark) and `RedisStore` (provider `redis`).

>>> import tempfile, os
>>> store = SqliteStore(os.path.join(tempfile.mkdtemp(), "count-1.sqlite"))
>>> s = StoreKeyValueState(store)
>>> s.put("cow", 1); s.prepare_commit(0); s.commit(0)
>>> s.put("cow", 2); s.prepare_commit(1)   # prepared, not committed
>>> s.rollback(); s.get("cow"), store.committed_txid()
(1, 0)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from squall.redis_clients import RedisUnreachable, client_from_config
from squall.state.base import KeyValueState, StateError

_DELETED = object()  # a deletion in an overlay (pickles by reference: never pickled)
_CACHE_MAX = 100_000


class Serializer:
    """Turns keys or values into bytes and back: `pickle` (default), `json`, `str`, or a dotted
    path to an object with `dumps`/`loads`."""

    def __init__(self, name: str = "pickle") -> None:
        self.name = name
        if name == "pickle":
            self.dumps: Callable[[Any], bytes] = pickle.dumps
            self.loads: Callable[[bytes], Any] = pickle.loads
        elif name == "json":
            self.dumps = lambda v: json.dumps(v, sort_keys=True).encode()
            self.loads = json.loads
        elif name == "str":
            self.dumps = lambda v: str(v).encode()
            self.loads = lambda b: b.decode()
        else:
            obj = _import(name)
            self.dumps, self.loads = obj.dumps, obj.loads

    def __reduce__(self):
        return (Serializer, (self.name,))


def _import(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    if not module:
        raise StateError(f"{path!r} is not a dotted path (module.attribute)")
    return getattr(importlib.import_module(module), attr)


class StoreKeyValueState(KeyValueState):
    """A `KeyValueState` over a versioned store; pickles as a reference to the store.

    Changes since the last prepare are in `dirty`, prepared but uncommitted ones in `prepared`;
    both overlay the store's committed map. A read cache of committed values (bounded, dropped on
    rollback) saves round trips for hot keys.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.dirty: dict[Any, Any] = {}
        self.prepared: dict[Any, Any] = {}
        self.prepared_txid: int | None = None
        self._cache: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # A snapshot (Spark) is taken right after prepare_commit: the prepared changes are in the
        # store as a version, so the reference is all that needs to travel.
        return {"store": self.store, "prepared_txid": self.prepared_txid}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"])  # type: ignore[misc]
        self.prepared_txid = state["prepared_txid"]

    def get(self, key: Any, default: Any = None) -> Any:
        for overlay in (self.dirty, self.prepared):
            if key in overlay:
                value = overlay[key]
                return default if value is _DELETED else value
        cache = self._cache
        if key in cache:
            value = cache[key]
        else:
            value = self.store.get(key, _DELETED)
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            cache[key] = value
        return default if value is _DELETED else value

    def put(self, key: Any, value: Any) -> None:
        self.dirty[key] = value

    def delete(self, key: Any) -> Any:
        # As Storm's Redis state: the value is read first, to be returned.
        value = self.get(key)
        self.dirty[key] = _DELETED
        return value

    def size(self) -> int | None:
        """The store's committed keys. A store may refuse a thread other than its own (SQLite:
        a metrics reader beside the runner's thread): then the count of the last commit, or of
        the last call that could count; None before any."""
        with contextlib.suppress(sqlite3.ProgrammingError):
            self._count_committed()
        return getattr(self, "committed_size", None)

    def _count_committed(self) -> None:
        size = getattr(self.store, "size", None)
        self.committed_size = int(size()) if size is not None else None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        overlay = {**self.prepared, **self.dirty}
        for key, value in self.store.items():
            if key not in overlay:
                yield key, value
        for key, value in overlay.items():
            if value is not _DELETED:
                yield key, value

    def prepare_commit(self, txid: int) -> None:
        if self.prepared_txid is not None and txid > self.prepared_txid and self.prepared:
            raise StateError(f"cannot prepare txid {txid} while txid {self.prepared_txid} is "
                             "prepared and not committed")
        changes = {**self.prepared, **self.dirty} if txid == self.prepared_txid else dict(
            self.dirty)
        self.store.write_version(txid, _wire(changes))
        self.prepared, self.prepared_txid, self.dirty = changes, txid, {}

    def commit(self, txid: int | None = None) -> None:
        if txid is None:
            self.store.write_committed(_wire(self.dirty))
            self._absorb(self.dirty)
            self.dirty = {}
            self._count_committed()
            return
        if self.prepared_txid is not None and self.prepared_txid != txid and self.prepared:
            raise StateError(f"commit of txid {txid}, but txid {self.prepared_txid} is prepared")
        self.store.promote(txid)
        self._absorb(self.prepared)
        self.prepared, self.prepared_txid = {}, None
        self._count_committed()

    def rollback(self) -> None:
        self.store.discard_above(self.store.committed_txid())
        self.dirty, self.prepared, self.prepared_txid = {}, {}, None
        self._cache.clear()

    def sync(self, committed: int) -> list[int]:
        """Spark: make the store agree with the driver's last committed batch.

        Versions up to `committed` are promoted (rolled forward) in order, later ones discarded
        (their batch is replayed). Returns the promoted txids.
        """
        promoted = [t for t in self.store.pending_txids() if t <= committed]
        for txid in promoted:
            self.store.promote(txid)
        self.store.discard_above(committed)
        self.dirty, self.prepared, self.prepared_txid = {}, {}, None
        self._cache.clear()
        return promoted

    def _absorb(self, changes: dict[Any, Any]) -> None:
        cache = self._cache
        for key, value in changes.items():
            cache[key] = value
        if len(cache) > _CACHE_MAX:
            cache.clear()


def _wire(changes: dict[Any, Any]) -> dict[Any, Any]:
    """Overlay -> store changes: a deletion becomes None-with-flag (`Deleted`)."""
    return {k: (DELETED if v is _DELETED else v) for k, v in changes.items()}


class _Deleted:
    def __repr__(self) -> str:
        return "DELETED"


DELETED = _Deleted()


# ---- SQLite ------------------------------------------------------------------------------------
class SqliteStore:
    """One namespace in one SQLite file: table `kv` is the committed map, `pending` the
    versions, `meta` the last promoted txid. Each operation is one SQLite transaction."""

    def __init__(self, path: str, key_serializer: str = "pickle",
                 value_serializer: str = "pickle") -> None:
        self.path = path
        self.keys = Serializer(key_serializer)
        self.values = Serializer(value_serializer)
        self._conn: sqlite3.Connection | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "keys": self.keys, "values": self.values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")  # a commit survives a crash of the machine
            conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB)")
            conn.execute("CREATE TABLE IF NOT EXISTS pending (txid INTEGER, k BLOB, v BLOB, "
                         "del INTEGER, PRIMARY KEY (txid, k))")
            conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER)")
            self._conn = conn
        return self._conn

    def get(self, key: Any, default: Any = None) -> Any:
        row = self.conn.execute("SELECT v FROM kv WHERE k = ?", (self.keys.dumps(key),)).fetchone()
        return default if row is None else self.values.loads(row[0])

    def items(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self.conn.execute("SELECT k, v FROM kv"):
            yield self.keys.loads(k), self.values.loads(v)

    def size(self) -> int:
        """Committed keys."""
        return int(self.conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])

    def _rows(self, changes: dict[Any, Any]) -> list[tuple[bytes, bytes | None, int]]:
        return [(self.keys.dumps(k), None if v is DELETED else self.values.dumps(v),
                 int(v is DELETED)) for k, v in changes.items()]

    def write_version(self, txid: int, changes: dict[Any, Any]) -> None:
        conn = self.conn
        with _transaction(conn):
            conn.execute("DELETE FROM pending WHERE txid = ?", (txid,))
            conn.executemany("INSERT INTO pending VALUES (?, ?, ?, ?)",
                             [(txid, k, v, d) for k, v, d in self._rows(changes)])

    def write_committed(self, changes: dict[Any, Any]) -> None:
        conn = self.conn
        with _transaction(conn):
            for k, v, d in self._rows(changes):
                if d:
                    conn.execute("DELETE FROM kv WHERE k = ?", (k,))
                else:
                    conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (k, v))

    def promote(self, txid: int) -> None:
        conn = self.conn
        with _transaction(conn):
            conn.execute("INSERT OR REPLACE INTO kv SELECT k, v FROM pending "
                         "WHERE txid = ? AND del = 0", (txid,))
            conn.execute("DELETE FROM kv WHERE k IN (SELECT k FROM pending "
                         "WHERE txid = ? AND del = 1)", (txid,))
            conn.execute("DELETE FROM pending WHERE txid = ?", (txid,))
            conn.execute("INSERT INTO meta VALUES ('committed', ?) ON CONFLICT(name) DO UPDATE "
                         "SET value = max(value, excluded.value)", (txid,))

    def discard_above(self, txid: int | None) -> None:
        conn = self.conn
        with _transaction(conn):
            conn.execute("DELETE FROM pending WHERE txid > ?", (-(2**62) if txid is None
                                                                else txid,))

    def pending_txids(self) -> list[int]:
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT txid FROM pending ORDER BY txid")]

    def committed_txid(self) -> int | None:
        row = self.conn.execute("SELECT value FROM meta WHERE name = 'committed'").fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


# ---- Redis -------------------------------------------------------------------------------------
_PROMOTE = """
local puts = redis.call('HGETALL', KEYS[2])
for i = 1, #puts, 2 do redis.call('HSET', KEYS[1], puts[i], puts[i + 1]) end
local dels = redis.call('SMEMBERS', KEYS[3])
for i = 1, #dels do redis.call('HDEL', KEYS[1], dels[i]) end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
local old = redis.call('GET', KEYS[5])
if (not old) or tonumber(old) < tonumber(ARGV[1]) then redis.call('SET', KEYS[5], ARGV[1]) end
return 1
"""


class RedisStoreUnreachable(StateError, RedisUnreachable):
    """A Redis state store's server could not be reached for `retry_timeout`: it may come back
    (a runner opening the store waits for it: `squall.redis_clients.wait_until_reachable`)."""


class RedisStore:
    """One namespace in Redis: hash `<prefix><ns>` is the committed map; version t is the hash
    `<prefix><ns>:v:<t>` (puts) and set `<prefix><ns>:x:<t>` (deletes), listed in the sorted set
    `<prefix><ns>:pending`; `<prefix><ns>:committed` is the last promoted txid. Promotion is one
    Lua script, so it is atomic.

    Provider configuration: host, port, timeout (seconds), database, password, key_serializer,
    value_serializer, prefix, and retry_timeout (seconds a lost connection is retried before a
    `StateError`; default 30).
    """

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        self.namespace = namespace
        self.config = dict(config)
        self.keys = Serializer(self.config.get("key_serializer", "pickle"))
        self.values = Serializer(self.config.get("value_serializer", "pickle"))
        base = self.config.get("prefix", "squall:state:") + namespace
        self.k_data, self.k_pending, self.k_committed = base, base + ":pending", base + ":committed"
        self._base = base
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namespace"], state["config"])  # type: ignore[misc]

    def _where(self) -> str:
        c = self.config
        return (f"redis state store at {c.get('host', '127.0.0.1')}:{c.get('port', 6379)} "
                f"(database {c.get('database', 0)}, namespace {self.namespace!r})")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client_from_config(self.config)
        return self._client

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(client)`, retrying lost connections for `retry_timeout` seconds.

        Every operation is idempotent (a version is rewritten whole, a promotion of an absent
        version changes nothing), so a retry after a connection lost mid-call is safe. Wall
        time here only paces retries; it decides nothing about the data.
        """
        deadline = time.monotonic() + float(self.config.get("retry_timeout", 30))
        delay = 0.05
        while True:
            try:
                return fn(self.client)
            except redis.AuthenticationError as exc:
                raise StateError(f"{self._where()}: authentication failed ({exc}); check the "
                                 "password in topology.state.provider.config") from None
            except redis.ResponseError as exc:
                if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                    raise StateError(f"{self._where()}: authentication failed ({exc}); check "
                                     "the password in topology.state.provider.config") from None
                raise StateError(f"{self._where()}: {exc}") from None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise RedisStoreUnreachable(f"{self._where()} unreachable: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def ping(self) -> None:
        self._call(lambda c: c.ping())

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self._call(lambda c: c.hget(self.k_data, self.keys.dumps(key)))
        return default if raw is None else self.values.loads(raw)

    def items(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self._call(lambda c: list(c.hscan_iter(self.k_data, count=1000))):
            yield self.keys.loads(k), self.values.loads(v)

    def size(self) -> int:
        """Committed keys."""
        return int(self._call(lambda c: c.hlen(self.k_data)))

    def write_version(self, txid: int, changes: dict[Any, Any]) -> None:
        puts = {self.keys.dumps(k): self.values.dumps(v) for k, v in changes.items()
                if v is not DELETED}
        dels = [self.keys.dumps(k) for k, v in changes.items() if v is DELETED]
        v_key, x_key = f"{self._base}:v:{txid}", f"{self._base}:x:{txid}"

        def write(c: Any) -> None:
            pipe = c.pipeline(transaction=True)
            pipe.delete(v_key, x_key)
            if puts:
                pipe.hset(v_key, mapping=puts)
            if dels:
                pipe.sadd(x_key, *dels)
            pipe.zadd(self.k_pending, {str(txid): txid})
            pipe.execute()

        self._call(write)

    def write_committed(self, changes: dict[Any, Any]) -> None:
        def write(c: Any) -> None:
            pipe = c.pipeline(transaction=True)
            for k, v in changes.items():
                if v is DELETED:
                    pipe.hdel(self.k_data, self.keys.dumps(k))
                else:
                    pipe.hset(self.k_data, self.keys.dumps(k), self.values.dumps(v))
            pipe.execute()

        if changes:
            self._call(write)

    def promote(self, txid: int) -> None:
        keys = [self.k_data, f"{self._base}:v:{txid}", f"{self._base}:x:{txid}",
                self.k_pending, self.k_committed]
        self._call(lambda c: c.eval(_PROMOTE, len(keys), *keys, txid))

    def discard_above(self, txid: int | None) -> None:
        low = "-inf" if txid is None else f"({txid}"

        def discard(c: Any) -> None:
            for t in c.zrangebyscore(self.k_pending, low, "+inf"):
                t = t.decode() if isinstance(t, bytes) else t
                pipe = c.pipeline(transaction=True)
                pipe.delete(f"{self._base}:v:{t}", f"{self._base}:x:{t}")
                pipe.zrem(self.k_pending, t)
                pipe.execute()

        self._call(discard)

    def pending_txids(self) -> list[int]:
        return [int(float(t)) for t in self._call(lambda c: c.zrange(self.k_pending, 0, -1))]

    def committed_txid(self) -> int | None:
        raw = self._call(lambda c: c.get(self.k_committed))
        return None if raw is None else int(raw)
