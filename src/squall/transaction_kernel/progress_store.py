"""Where coordinator progress and batch metadata live: a directory, Redis, or memory.

Chosen by `squall.transactional.progress_store` in the topology configuration:

- `{"dir": "/path"}`: one small file per key, written atomically (temporary name, fsync, rename).
  On Spark this is the default, under `<checkpoint>/transactional`; it must be storage every
  executor sees at the same path (emitters run on executors).
- `{"redis": {"host": ..., "port": ..., "password": ..., "database": ..., "prefix": ...}}`:
  one Redis hash per topology.
- unset on the local runner: memory of this process, shared by the tasks of one `Topology`
  object (a run is then not resumable after the process ends; Storm keeps this in ZooKeeper).

>>> import tempfile
>>> s = open_store({"squall.transactional.progress_store": {"dir": tempfile.mkdtemp()}}, "words")
>>> s.put("curr", 4); s.get("curr"), s.get("missing", 0)
(4, 0)
>>> s.delete("curr"); s.get("curr") is None
True
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
from collections.abc import Mapping
from typing import Any

from squall.atomic_files import write_atomic
from squall.errors import SquallError
from squall.redis_clients import client_from_config

STORE = "squall.transactional.progress_store"
_MEMORY: dict[tuple[str, int], dict[str, bytes]] = {}
_LOCK = threading.Lock()


class TransactionalStoreError(SquallError):
    """The transactional metadata store is misconfigured or unreachable."""


class DirStore:
    def __init__(self, directory: str, topology_id: str) -> None:
        self.root = os.path.join(os.path.abspath(directory), topology_id)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key.replace("/", os.sep) + ".pkl")

    def get(self, key: str, default: Any = None) -> Any:
        try:
            with open(self._path(key), "rb") as f:
                return pickle.loads(f.read())
        except FileNotFoundError:
            return default

    def put(self, key: str, value: Any) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, pickle.dumps(value))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))


class RedisMetaStore:
    def __init__(self, config: Mapping[str, Any], topology_id: str) -> None:
        self.config = dict(config)
        self.hash = self.config.get("prefix", "squall:tx:") + topology_id
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "hash": self.hash, "_client": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client_from_config(self.config)
        return self._client

    def get(self, key: str, default: Any = None) -> Any:
        blob = self.client.hget(self.hash, key)
        return default if blob is None else pickle.loads(blob)

    def put(self, key: str, value: Any) -> None:
        self.client.hset(self.hash, key, pickle.dumps(value))

    def delete(self, key: str) -> None:
        self.client.hdel(self.hash, key)


class MemoryStore:
    """Process memory, shared by every task of one topology object (see module doc)."""

    def __init__(self, topology_id: str, token: int) -> None:
        self.key = (topology_id, token)

    @property
    def data(self) -> dict[str, bytes]:
        with _LOCK:
            return _MEMORY.setdefault(self.key, {})

    def get(self, key: str, default: Any = None) -> Any:
        blob = self.data.get(key)
        return default if blob is None else pickle.loads(blob)

    def put(self, key: str, value: Any) -> None:
        self.data[key] = pickle.dumps(value)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


Store = DirStore | RedisMetaStore | MemoryStore


def open_store(conf: Mapping[str, Any], topology_id: str, token: int = 0) -> Store:
    """The store named by `squall.transactional.progress_store` (memory when unset)."""
    spec = conf.get(STORE)
    if not spec:
        return MemoryStore(topology_id, token)
    if not isinstance(spec, Mapping) or not ({"dir", "redis"} & set(spec)):
        raise TransactionalStoreError(
            f"{STORE} must be {{'dir': path}} or {{'redis': {{host, port, ...}}}}, got {spec!r}")
    if "dir" in spec:
        return DirStore(str(spec["dir"]), topology_id)
    return RedisMetaStore(spec["redis"], topology_id)


def meta_key(partition: int, txid: int) -> str:
    return f"meta/p={partition}/tx={txid}"


def attempt_key(txid: int) -> str:
    return f"attempt/tx={txid}"


CURR = "coordinator/curr"
