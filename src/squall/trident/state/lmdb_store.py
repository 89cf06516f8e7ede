"""`LmdbMapState`: one partition of a durable map state in an LMDB environment.

LMDB (Lightning Memory-Mapped Database) keeps a B+tree in a memory-mapped file and writes a
transaction by copying only the pages it touches, so a batch's commit costs what the batch
touches, not what the partition holds; readers never block the writer. Keys are the pickled
keys and values the pickled entries (`squall.trident.state.codec`). A batch is read in one read
transaction and written with `putmulti` in one write transaction, committed with `fsync` (the
environment is opened with `sync=True`): once `multi_put` returns the batch survives a crash of
the machine, and a crash before leaves none of it.

LMDB allows one open handle per environment and process, so environments are opened once per
process and shared (counted) by the objects that use them; an environment must not be used in a
process forked after it was opened (a Spark Python worker opens its own). The map starts at
`INITIAL_MAP` bytes of address space (the file grows only with the data) and doubles whenever a
write finds it full.

>>> import os, tempfile
>>> from squall.transaction_kernel.values import TransactionalValue
>>> m = LmdbMapState(os.path.join(tempfile.mkdtemp(), "part-00000.lmdb"), "counts")
>>> m.multi_put([("the",), ("cow",)], [TransactionalValue(1, 2), TransactionalValue(1, 1)])
>>> m.multi_get([("the",), ("moon",)])
[TransactionalValue(txid=1, value=2), None]
>>> sorted(m.items())
[(('cow',), TransactionalValue(txid=1, value=1)), (('the',), TransactionalValue(txid=1, value=2))]
>>> m.close()
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import lmdb

from squall.trident.state.codec import decode_entries, decode_key, encode_entries, encode_keys
from squall.trident.state.map_state import MapStateError
from squall.trident.state.path_store import PathStore

INITIAL_MAP = 1 << 30
_PAGE = 1000  # entries per read transaction of items()

# path -> (pid, environment, users): one handle per environment and process.
_OPEN: dict[str, tuple[int, lmdb.Environment, int]] = {}
_OPEN_LOCK = threading.Lock()


def _acquire(path: str) -> lmdb.Environment:
    with _OPEN_LOCK:
        held = _OPEN.get(path)
        if held is not None:
            pid, env, users = held
            if pid != os.getpid():
                raise MapStateError(f"LMDB environment {path} was opened before this process "
                                    "was forked: open it in the process that uses it")
            _OPEN[path] = (pid, env, users + 1)
            return env
        os.makedirs(path, exist_ok=True)
        env = lmdb.open(path, map_size=INITIAL_MAP, subdir=True, sync=True, metasync=True,
                        readahead=False, max_dbs=0, max_readers=256)
        # Free the reader slots of killed processes (a SIGKILLed Spark worker's): a stale slot
        # keeps pages from being reused, and the slots are few.
        env.reader_check()
        _OPEN[path] = (os.getpid(), env, 1)
        return env


def _release(path: str) -> None:
    with _OPEN_LOCK:
        held = _OPEN.get(path)
        if held is None:
            return
        pid, env, users = held
        if users > 1:
            _OPEN[path] = (pid, env, users - 1)
            return
        del _OPEN[path]
    env.close()


class LmdbMapState(PathStore):
    """A `BackingMap` over the LMDB environment (a directory) at `path`; pickles as its path and
    opens the environment lazily."""

    def __init__(self, path: str, name: str | None = None) -> None:
        super().__init__(path, name)
        self._env: lmdb.Environment | None = None

    def _environment(self) -> lmdb.Environment:
        if self._env is None:
            try:
                self._env = _acquire(self.path)
            except lmdb.Error as exc:
                raise self._failed(exc) from exc
        return self._env

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        if not keys:
            return []
        encoded = encode_keys(keys)
        with self._lock:
            env = self._environment()
            try:
                with env.begin(buffers=False) as txn:
                    get = txn.get
                    blobs = [get(k) for k in encoded]
            except lmdb.Error as exc:
                raise self._failed(exc) from exc
        return decode_entries(blobs)

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        self._check_put(keys, values)
        if not keys:
            return
        pairs = list(zip(encode_keys(keys), encode_entries(values), strict=True))
        with self._lock:
            env = self._environment()
            while True:
                try:
                    with env.begin(write=True) as txn:
                        txn.cursor().putmulti(pairs)
                    return
                except lmdb.MapFullError:
                    # No transaction of this process is open on it now: the map may grow.
                    env.set_mapsize(env.info()["map_size"] * 2)
                except lmdb.Error as exc:
                    raise self._failed(exc) from exc

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, entry) in key-bytes order, a page of entries per read transaction (so
        other calls may run in between)."""
        last: bytes | None = None
        while True:
            with self._lock:
                env = self._environment()
                try:
                    with env.begin(buffers=False) as txn:
                        cursor = txn.cursor()
                        found = cursor.first() if last is None else cursor.set_range(last)
                        page: list[tuple[bytes, bytes]] = []
                        while found and len(page) < _PAGE:
                            k, v = cursor.item()
                            if k != last:
                                page.append((k, v))
                            found = cursor.next()
                except lmdb.Error as exc:
                    raise self._failed(exc) from exc
            entries = decode_entries([v for _, v in page])
            for (k, _), entry in zip(page, entries, strict=True):
                yield decode_key(k), entry
            if len(page) < _PAGE:
                return
            last = page[-1][0]

    def close(self) -> None:
        with self._lock:
            if self._env is not None:
                self._env = None
                _release(self.path)
