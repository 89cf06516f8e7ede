"""`LmdbMapState`: one partition of a durable map state in an LMDB environment.

LMDB (Lightning Memory-Mapped Database) keeps a B+tree in a memory-mapped file and writes a
transaction by copying only the pages it touches, so a batch's commit costs what the batch
touches, not what the partition holds; readers never block the writer. Keys are the pickled
keys and values the pickled entries (`squall.trident.state.codec`). A batch is read in one read
transaction and written with `putmulti` in one write transaction, committed with `fsync` (the
environment is opened with `sync=True`): once `multi_put` returns the batch survives a crash of
the machine, and a crash before leaves none of it. `add_transactional` (the update of `Count`
and `Sum` on a transactional state) reads and writes in one write transaction, committed the
same way.

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

import operator
import os
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import lmdb

from squall.trident.state.codec import (
    OPAQUE,
    PROTOCOL,
    TRANSACTIONAL,
    decode_entries,
    decode_key,
    encode_entries,
    encode_keys,
    encode_keys_reusing,
)
from squall.trident.state.map_state import BATCH_KEYS, MapStateError
from squall.trident.state.path_store import PathStore

INITIAL_MAP = 1 << 30
_PAGE = 1000  # entries per read transaction of items()
_first = operator.itemgetter(0)

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


T = TypeVar("T")


class _General(Exception):
    """A bulk add met a key it leaves to the general way (the write is aborted)."""


class LmdbMapState(PathStore):
    """A `BackingMap` over the LMDB environment (a directory) at `path`; pickles as its path and
    opens the environment lazily."""

    def __init__(self, path: str, name: str | None = None) -> None:
        super().__init__(path, name)
        self._env: lmdb.Environment | None = None
        self._last_read: tuple[list[tuple[Any, ...]], list[bytes]] | None = None

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
            self._last_read = (list(keys), encoded)  # for the write that usually follows
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
        with self._lock:
            last, self._last_read = self._last_read, None
            pairs = list(zip(encode_keys_reusing(keys, last), encode_entries(values),
                             strict=True))
            # In key order: the B+tree's pages in turn (stable: of equal keys the last wins).
            pairs.sort(key=_first)
            self._in_write(lambda txn: txn.cursor().putmulti(pairs))

    def _in_write(self, body: Callable[[Any], T]) -> T:
        """`body(txn)` in one write transaction, run again in a map twice as large when the map
        is full; what it returns. The caller holds `self._lock`."""
        env = self._environment()
        while True:
            try:
                with env.begin(write=True) as txn:
                    return body(txn)
            except lmdb.MapFullError:
                # No transaction of this process is open on it now: the map may grow.
                env.set_mapsize(env.info()["map_size"] * 2)
            except lmdb.Error as exc:
                raise self._failed(exc) from exc

    def _bulk(self, body: Callable[[Any], list[Any]]) -> list[Any] | None:
        """`body(txn)` (a bulk add) in one write transaction; None, with nothing written, when
        it raises anything but an LMDB error (`_General`, an entry of another shape, an addition
        that raises): the caller then applies the batch the general way, which reports it."""

        def guarded(txn: Any) -> list[Any]:
            try:
                return body(txn)
            except lmdb.Error:
                raise
            except Exception as exc:
                raise _General from exc

        with self._lock:
            try:
                return self._in_write(guarded)
            except _General:
                return None

    def add_transactional(self, txid: int, keys: Sequence[tuple[Any, ...]],
                          values: Sequence[Any]) -> list[Any] | None:
        """Storm's transactional rule for adding `values[i]` to the value of `keys[i]` (the
        combine of `Count` and `Sum`; the caller checked the txid and that the keys are
        distinct tuples), read and written in one write transaction, in key-bytes order (the
        B+tree's pages in turn), each key encoded once: an absent key gets
        `TransactionalValue(txid, value)`, a key written by `txid` already is left as it is (a
        replay), any other gets its value plus the new one and `txid`. Returns the keys' values
        after the update, in key order.

        A key whose stored entry is not a `TransactionalValue`, or was written by a newer txid,
        or whose addition raises, makes it write nothing and answer None: the caller then
        applies the batch the general way, which reports the error.

        >>> import os, tempfile
        >>> from squall.transaction_kernel.values import OpaqueValue
        >>> m = LmdbMapState(os.path.join(tempfile.mkdtemp(), "part-00000.lmdb"), "counts")
        >>> m.add_transactional(1, [("the",), ("cow",)], [2, 1])
        [2, 1]
        >>> m.add_transactional(2, [("the",)], [5]), m.add_transactional(2, [("the",)], [5])
        ([7], [7])
        >>> m.multi_get([("the",), ("cow",)])
        [TransactionalValue(txid=2, value=7), TransactionalValue(txid=1, value=1)]
        >>> m.add_transactional(1, [("cow",), ("the",)], [1, 1]) is None  # "the" is newer
        True
        >>> m.add_transactional(3, [("cow",), ("the",)], [1, "x"]) is None  # 7 + "x" raises
        True
        >>> m.multi_get([("cow",)])  # nothing written
        [TransactionalValue(txid=1, value=1)]
        >>> m.multi_put([("pig",)], [OpaqueValue(1, 3, None)])
        >>> m.add_transactional(3, [("cow",), ("pig",)], [1, 1]) is None
        True
        >>> m.close()
        """
        if not keys:
            return []
        encoded = encode_keys(keys)
        order = sorted(range(len(encoded)), key=encoded.__getitem__)
        loads, dumps = pickle.loads, pickle.dumps

        def add(txn: Any) -> list[Any]:
            out: list[Any] = [None] * len(encoded)
            get = txn.get
            pairs: list[tuple[bytes, bytes]] = []
            append = pairs.append
            for i in order:
                k = encoded[i]
                blob = get(k)
                new = values[i]
                if blob is not None:
                    tag, stored_txid, old = loads(blob)
                    if tag != TRANSACTIONAL or stored_txid > txid:
                        raise _General
                    if stored_txid == txid:  # a replay: its update is in already
                        out[i] = old
                        continue
                    if old is not None:
                        new = old + new
                out[i] = new
                append((k, dumps((TRANSACTIONAL, txid, new), PROTOCOL)))
            if pairs:
                txn.cursor().putmulti(pairs)
            return out

        return self._bulk(add)

    def add_opaque(self, txid: int, keys: Sequence[tuple[Any, ...]],
                   values: Sequence[Any]) -> list[Any] | None:
        """`OpaqueMap.multi_update` with the updaters `old + value` (the combine of `Count` and
        `Sum`; the caller checked the txid and that the keys are distinct tuples), read and
        written in one write transaction, in key-bytes order, each key encoded once: an absent
        key gets `OpaqueValue(txid, value, None)`, a key last written by an older txid
        `OpaqueValue(txid, current + value, current)`, one written by `txid` (a replay)
        `OpaqueValue(txid, previous + value, previous)`; the record of the keys `txid` wrote
        (`BATCH_KEYS`) gets these keys, in the same write. Returns the keys' current values
        after the update, in key order.

        A key whose stored entry is not an `OpaqueValue`, or was written by a newer txid, or
        whose addition raises, makes it write nothing and answer None: the caller then applies
        the batch the general way, which reports the error.

        >>> import os, tempfile
        >>> m = LmdbMapState(os.path.join(tempfile.mkdtemp(), "part-00000.lmdb"), "counts")
        >>> m.add_opaque(1, [("the",), ("cow",)], [2, 1])
        [2, 1]
        >>> m.add_opaque(2, [("the",)], [5]), m.add_opaque(2, [("the",)], [4])
        ([7], [6])
        >>> m.multi_get([("the",), ("cow",), BATCH_KEYS])
        [OpaqueValue(txid=2, current=6, previous=2), OpaqueValue(txid=1, current=1, \
previous=None), (2, (('the',),))]
        >>> m.add_opaque(1, [("the",)], [1]) is None  # "the" is newer
        True
        >>> m.close()
        """
        if not keys:
            return []
        encoded = encode_keys(keys)
        order = sorted(range(len(encoded)), key=encoded.__getitem__)
        (record_key,) = encode_keys([BATCH_KEYS])
        loads, dumps = pickle.loads, pickle.dumps

        def add(txn: Any) -> list[Any]:
            out: list[Any] = [None] * len(encoded)
            get = txn.get
            (record,) = decode_entries([get(record_key)])
            written = tuple(record[1]) if record is not None and record[0] == txid else ()
            pairs: list[tuple[bytes, bytes]] = []
            append = pairs.append
            for i in order:
                k = encoded[i]
                blob = get(k)
                new = values[i]
                if blob is None:
                    base = None
                else:
                    tag, stored_txid, current, previous = loads(blob)
                    if tag != OPAQUE or stored_txid > txid:
                        raise _General
                    # Storm's rule: a newer txid builds on current, the same on previous.
                    base = current if txid > stored_txid else previous
                    if base is not None:
                        new = base + new
                out[i] = new
                append((k, dumps((OPAQUE, txid, new, base), PROTOCOL)))
            seen = set(written)
            record_keys = written + tuple(k for k in keys if k not in seen)
            cursor = txn.cursor()
            cursor.putmulti(pairs)
            cursor.put(record_key, encode_entries([(txid, record_keys)])[0])
            return out

        return self._bulk(add)

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
            self._last_read = None
            if self._env is not None:
                self._env = None
                _release(self.path)
