"""Trident's durable map state: partitions of LMDB environments or SQLite files, by default
under the checkpoint location.

A state is partitioned (`squall.trident.state.partitioned`): its directory is
`<directory>/trident-state/<name>/` (the name percent-encoded where it is not a safe file name),
`<directory>` being the factory's `directory` or else the run's checkpoint location. It holds
`partitions.json` (the number of partitions and the engine, fixed when the state is created)
and one store per partition, `part-00000.lmdb` ... (an LMDB environment,
`squall.trident.state.lmdb_store`, the default engine) or `part-00000.sqlite` ... (a SQLite
file, `DurableMapState` below). A partition's keys are written by one process at a time (a
Spark task on an executor, or the local runner), and a partition's commit costs what the batch
touches in that partition (for SQLite, what it touches in its B-tree pages). The engines
measured for this are in docs/design/trident.md.

One table per file, `kv (k BLOB PRIMARY KEY, v BLOB, t INTEGER, c)`, holds a row per key: the
key pickled as `squall.trident.state.codec` describes, and either the entry pickled in `v`, or,
for a `TransactionalValue` whose value SQLite holds and adds exactly as Python does (an int
within +-2**62, a finite float), a native row: `v` NULL, the txid in `t`, the value in `c`.
A file of an earlier version (`k` and `v` only) gets the two columns when it is opened, and a
state an earlier version kept in one file (`trident-state/<name>.sqlite`) is moved into the
partitions when it is first opened.

A batch is read with one query per chunk of 500 keys (`k IN (...)`, all chunks in one read
transaction) and written as one `executemany` of 250-row upserts inside one `BEGIN IMMEDIATE
... COMMIT` transaction, with `synchronous=FULL`: once `multi_put` returns the batch survives a
crash of the machine, and a crash before leaves none of it. `add_transactional` (the update of
`Count` and `Sum` on a transactional state) does not read at all: one upsert per chunk applies
Storm's rule in SQL and returns the new values, in one transaction as well; a batch with a key it
may not add to in SQL is rolled back and applied the general way. The measurements behind these
choices are in docs/design/trident.md.

>>> import os, tempfile
>>> factory = DurableMapState.factory(StateType.TRANSACTIONAL, partitions=4, engine="sqlite")
>>> checkpoint = tempfile.mkdtemp()
>>> counts = factory.make_state("counts", checkpoint)
>>> counts.multi_update(1, [("the",), ("cow",)], [lambda old: (old or 0) + 1] * 2)
[1, 1]
>>> sorted(os.listdir(os.path.join(checkpoint, "trident-state", "counts")))  # as written
['part-00002.sqlite', 'part-00003.sqlite', 'partitions.json']
>>> DurableMapState.factory(partitions=2).make_state("counts", checkpoint)
Traceback (most recent call last):
...
squall.errors.ConfigError: durable map state 'counts' has 4 partitions (fixed when it was \
created, at .../trident-state/counts), but this run asks for 2 (squall.trident.state.partitions \
or the factory's partitions=...): leave the setting unset or set it to 4, or change the state's \
partitions offline with `squall state repartition`
>>> factory.make_state("counts", None)
Traceback (most recent call last):
...
squall.errors.ConfigError: durable map state 'counts' needs a directory: run with a checkpoint \
location, or give one with DurableMapState.factory(directory=...)
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import re
import shutil
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from squall.atomic_files import read_or_none, write_atomic
from squall.errors import ConfigError
from squall.transaction_kernel.values import TransactionalValue
from squall.trident.state.codec import (
    decode_entries,
    decode_key,
    encode_entries,
    encode_keys,
    encode_keys_reusing,
)
from squall.trident.state.lmdb_store import LmdbMapState
from squall.trident.state.map_state import (
    BATCH_KEYS,
    MapState,
    StateType,
    check_name,
    state_type_of,
    wrap,
)
from squall.trident.state.partitioned import (
    PARTITIONING,
    PartitionedMap,
    agreed_partitions,
    copy_entries,
    partition_indexes,
    partitioned,
)
from squall.trident.state.path_store import PathStore

SUBDIRECTORY = "trident-state"
_CHUNK = 500  # keys per SELECT; SQLite allows 32,766 variables since 3.32 (999 before)
_PAGE = 1000  # rows per query of items()
_ROWS = 250  # rows per INSERT statement (1,000 variables)
# Ints SQLite adds as Python does: two within +-2**62 never overflow its 64 bits (where SQLite
# would turn the sum into a float).
_LIMIT = 2 ** 62


class _NotInSql(Exception):
    """`add_transactional` met a row it may not add to in SQL."""


class DurableMapState(PathStore):
    """A `BackingMap` over the SQLite file `path`; pickles as its path and reconnects lazily.

    One connection, shared by the threads that use the map (Spark calls `foreachBatch` on
    another thread than the one that made the state) and used by one at a time.
    """

    def __init__(self, path: str, name: str | None = None) -> None:
        super().__init__(path, name)
        self._conn: sqlite3.Connection | None = None
        self._last_read: tuple[list[tuple[Any, ...]], list[bytes]] | None = None

    @classmethod
    def factory(cls, state_type: StateType | str = StateType.TRANSACTIONAL,
                directory: str | os.PathLike[str] | None = None,
                partitions: int | None = None, engine: str | None = None
                ) -> DurableMapStateFactory:
        """A factory of map states of `state_type` under `directory`, or under the run's
        checkpoint location when `directory` is None; a new state gets `partitions` partitions
        (None: the run's `squall.trident.state.partitions`), each an `engine` store ("lmdb",
        the default, or "sqlite"); a state keeps the engine it was created with."""
        owner = "DurableMapState.factory"
        return DurableMapStateFactory(
            state_type_of(state_type, owner),
            None if directory is None else local_directory(directory, owner), partitions,
            engine)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute("PRAGMA synchronous=FULL")  # a commit survives a crash of the machine
                conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB, "
                             "t INTEGER, c) WITHOUT ROWID")
                columns = {row[1] for row in conn.execute("PRAGMA table_info(kv)")}
                for column in ("t INTEGER", "c"):  # a file written before the native rows
                    if column.split()[0] not in columns:
                        conn.execute(f"ALTER TABLE kv ADD COLUMN {column}")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        if not keys:
            return []
        encoded = encode_keys(keys)
        found: dict[bytes, Any] = {}
        try:
            with self._lock:
                self._last_read = (list(keys), encoded)
                conn = self._connection()
                conn.execute("BEGIN")  # one snapshot for all chunks
                try:
                    for start in range(0, len(encoded), _CHUNK):
                        part = encoded[start:start + _CHUNK]
                        for k, v, t, c in conn.execute(_select(len(part)), part):
                            found[k] = v if v is not None else TransactionalValue(t, c)
                finally:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        get = found.get
        return _decode([get(k) for k in encoded])

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        self._check_put(keys, values)
        if not keys:
            return
        try:
            with self._lock:
                flat = list(itertools.chain.from_iterable(
                    zip(self._encode_keys(keys), *_columns(values), strict=True)))
                step = 4 * _ROWS
                whole = len(flat) - len(flat) % step
                with self._writing() as conn:
                    if whole:
                        conn.executemany(_upsert(_ROWS), (
                            flat[i:i + step] for i in range(0, whole, step)))
                    if whole < len(flat):
                        conn.execute(_upsert((len(flat) - whole) // 4), flat[whole:])
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def _encode_keys(self, keys: Sequence[tuple[Any, ...]]) -> list[bytes]:
        """The bytes of `keys`, reusing those of the last `multi_get` for the same key objects
        (a `MapState` writes the keys it has just read). Keys are immutable, and the last read's
        keys are held, so an `id` seen there is that same key."""
        last, self._last_read = self._last_read, None
        return encode_keys_reusing(keys, last)

    def add_transactional(self, txid: int, keys: Sequence[tuple[Any, ...]],
                          values: Sequence[Any]) -> list[Any] | None:
        """Storm's transactional rule for adding `values[i]` to the value of `keys[i]` (the
        combine of `Count` and `Sum`), applied by SQLite in one statement per chunk without
        reading the entries into Python: an absent key gets `TransactionalValue(txid, value)`;
        a key written by `txid` already is left as it is (a replay); any other gets its value
        plus the new one and `txid`. Returns the keys' values after the update, in key order.

        Only for what SQLite adds exactly as Python does: ints within +-2**62 (so no sum of two
        overflows 64 bits) and finite floats, to keys whose stored entries are such native rows
        with an older or equal txid. Otherwise nothing is written and the answer is None: the
        caller then applies the batch the general way (read, update in Python, write), which
        also reports the errors (an out-of-order txid, an entry of another state type).

        >>> import os, tempfile
        >>> m = DurableMapState(os.path.join(tempfile.mkdtemp(), "counts.sqlite"))
        >>> m.add_transactional(1, [("the",), ("cow",)], [2, 1])
        [2, 1]
        >>> m.add_transactional(2, [("the",)], [5]), m.add_transactional(2, [("the",)], [5])
        ([7], [7])
        >>> m.multi_get([("the",), ("cow",)])
        [TransactionalValue(txid=2, value=7), TransactionalValue(txid=1, value=1)]
        >>> m.add_transactional(3, [("the",)], [2 ** 70]) is None   # Python adds big ints
        True
        """
        if not keys:
            return []
        if not _all_exact(values):
            return None
        try:
            with self._lock:
                encoded = self._encode_keys(keys)
                flat = list(itertools.chain.from_iterable(
                    zip(encoded, itertools.repeat(txid), values)))
                new: dict[bytes, Any] = {}
                with self._writing() as conn:
                    step = 3 * _ROWS
                    for i in range(0, len(flat), step):
                        part = flat[i:i + step]
                        new.update(conn.execute(_add(len(part) // 3), part).fetchall())
                    if len(new) < len(encoded) or None in new.values():
                        raise _NotInSql  # a row not to be added to in SQL: roll back
        except _NotInSql:
            return None
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return [new[k] for k in encoded]

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (the caller holds the lock): committed if the block ends,
        rolled back if it raises."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, entry), a page of rows at a time in key-bytes order (so other calls may
        run in between)."""
        last: bytes | None = None
        while True:
            try:
                with self._lock:
                    conn = self._connection()
                    if last is None:
                        rows = conn.execute("SELECT k, v, t, c FROM kv ORDER BY k LIMIT ?",
                                            (_PAGE,)).fetchall()
                    else:
                        rows = conn.execute("SELECT k, v, t, c FROM kv WHERE k > ? ORDER BY k "
                                            "LIMIT ?", (last, _PAGE)).fetchall()
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
            entries = _decode([v if v is not None else TransactionalValue(t, c)
                               for _, v, t, c in rows])
            for (k, *_), entry in zip(rows, entries, strict=True):
                yield decode_key(k), entry
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    def close(self) -> None:
        with self._lock:
            self._last_read = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@functools.cache
def _select(n: int) -> str:
    return f"SELECT k, v, t, c FROM kv WHERE k IN ({', '.join('?' * n)})"


@functools.cache
def _upsert(rows: int) -> str:
    values = ", ".join(["(?, ?, ?, ?)"] * rows)
    return (f"INSERT INTO kv (k, v, t, c) VALUES {values} ON CONFLICT (k) DO UPDATE SET "
            "v = excluded.v, t = excluded.t, c = excluded.c")


@functools.cache
def _add(rows: int) -> str:
    """Storm's transactional rule in SQL (see `add_transactional`); a row it may not add to
    (a pickled entry, a newer txid, an int near the 64-bit limit) is left alone and not
    returned."""
    values = ", ".join(["(?, ?, ?)"] * rows)
    return (f"INSERT INTO kv (k, t, c) VALUES {values} ON CONFLICT (k) DO UPDATE SET "
            "c = CASE WHEN kv.t = excluded.t THEN kv.c ELSE kv.c + excluded.c END, "
            "t = excluded.t "
            f"WHERE kv.v IS NULL AND kv.t <= excluded.t AND kv.c BETWEEN {-_LIMIT} AND {_LIMIT} "
            "RETURNING k, c")


def _columns(entries: Sequence[Any]) -> tuple[list[bytes | None], list[Any], list[Any]]:
    """The `v`, `t` and `c` columns of `entries`: a `TransactionalValue` whose value SQLite
    holds exactly (see `add_transactional`) as a native row (`v` NULL, `t` its txid, `c` its
    value), so that later batches can be added to in SQL; anything else pickled in `v`."""
    native = [type(e) is TransactionalValue and _exact(e.value) for e in entries]
    pickled = iter(encode_entries([e for e, n in zip(entries, native, strict=True) if not n]))
    vs: list[bytes | None] = []
    ts: list[Any] = []
    cs: list[Any] = []
    for e, n in zip(entries, native, strict=True):
        if n:
            vs.append(None)
            ts.append(e.txid)
            cs.append(e.value)
        else:
            vs.append(next(pickled))
            ts.append(None)
            cs.append(None)
    return vs, ts, cs


def _exact(value: Any) -> bool:
    """Whether SQLite holds `value` and adds to it exactly as Python does."""
    kind = type(value)
    return (kind is int and -_LIMIT <= value <= _LIMIT) or (kind is float and math.isfinite(value))


def _all_exact(values: Sequence[Any]) -> bool:
    """`_exact` of every value; a batch of one type checked without a call per value."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return min(values) >= -_LIMIT and max(values) <= _LIMIT
    if kinds == {float}:
        return all(map(math.isfinite, values))
    return all(map(_exact, values))


def _decode(rows: Sequence[Any]) -> list[Any]:
    """The entries of `rows` as read: pickled bytes decoded, a native row's
    `TransactionalValue` as it is, None (absent) as None."""
    decoded = decode_entries([r if type(r) is bytes else None for r in rows])
    return [d if type(r) is bytes else r for r, d in zip(rows, decoded, strict=True)]


def _file_name(name: str) -> str:
    """`name` as a file name: characters other than letters, digits and `_.=-` percent-encoded
    (so two names never share a file)."""
    return re.sub(r"[^A-Za-z0-9_.=-]", lambda m: f"%{ord(m.group()):02x}", name)


def local_directory(directory: Any, owner: str) -> str:
    """`directory` (a path, or a `file:` URI as Spark writes checkpoint locations) as an absolute
    local path."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ConfigError(f"{owner}: a directory must be a path, got {directory!r}")
    path = os.fspath(directory)
    if not isinstance(path, str):
        raise ConfigError(f"{owner}: a directory must be a str path, got {directory!r}")
    if path.startswith("file:"):
        path = urllib.parse.unquote(urllib.parse.urlparse(path).path)
    elif re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", path):
        raise ConfigError(f"{owner}: {path!r} is not a local directory; a durable map state is "
                          "a SQLite file on a local disk: give DurableMapState.factory(directory="
                          "...) a local directory, or use RedisMapState")
    if not path:
        raise ConfigError(f"{owner}: the directory is empty")
    return os.path.abspath(path)


@dataclass(frozen=True)
class DurableMapStateFactory:
    """Made by `DurableMapState.factory`."""

    state_type: StateType = StateType.TRANSACTIONAL
    directory: str | None = None
    partitions: int | None = None
    engine: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state_type, StateType):
            raise ConfigError(f"DurableMapStateFactory: state_type must be a StateType, got "
                              f"{self.state_type!r} (DurableMapState.factory also takes a value "
                              "such as 'opaque')")
        if self.directory is not None and not isinstance(self.directory, str):
            raise ConfigError(f"DurableMapStateFactory: directory must be a str or None, got "
                              f"{self.directory!r}")
        if self.partitions is not None and (type(self.partitions) is not int
                                            or self.partitions < 1):
            raise ConfigError(f"DurableMapStateFactory: partitions must be a positive int or "
                              f"None, got {self.partitions!r}")
        if self.engine is not None and self.engine not in ENGINES:
            raise ConfigError(f"DurableMapStateFactory: engine must be one of "
                              f"{', '.join(map(repr, ENGINES))} or None, got {self.engine!r}")

    def __repr__(self) -> str:
        extra = "" if self.partitions is None else f", partitions={self.partitions}"
        extra += "" if self.engine is None else f", engine={self.engine!r}"
        return f"DurableMapState.factory({self.state_type}, directory={self.directory!r}{extra})"

    def state_directory(self, name: str, location: str | None) -> str:
        """Where the partitions of the state `name` live."""
        name = check_name(name, "DurableMapState")
        base = self.directory if self.directory is not None else location
        if base is None:
            raise ConfigError(f"durable map state {name!r} needs a directory: run with a "
                              "checkpoint location, or give one with "
                              "DurableMapState.factory(directory=...)")
        directory = local_directory(base, f"durable map state {name!r}")
        return os.path.join(directory, SUBDIRECTORY, _file_name(name))

    def make_state(self, name: str, location: str | None = None) -> PartitionedMap:
        return self.make_partitioned(name, location, None)

    def make_partitioned(self, name: str, location: str | None,
                         partitions: int | None) -> PartitionedMap:
        """The state `name`: its partitions as stored, or, for a state not created yet,
        `self.partitions`, else `partitions` (the run's setting), else `DEFAULT_PARTITIONS`."""
        directory = self.state_directory(name, location)
        wanted = self.partitions if self.partitions is not None else partitions
        n, engine = open_partitions(directory, name, wanted, self.engine)
        return partitioned(self.state_type, [
            wrap(self.state_type, store(directory, engine, i, name), name) for i in range(n)],
            name)

    def make_partition(self, name: str, location: str | None, index: int) -> MapState:
        """Partition `index` of the state `name`, made before by `make_partitioned` (what an
        executor applies its keys to)."""
        directory = self.state_directory(name, location)
        meta = stored_meta(directory)
        if meta is None:
            raise ConfigError(f"durable map state {name!r}: no partitions at {directory}")
        _check_partitioning(directory, name)
        return wrap(self.state_type, store(directory, meta[1], index, name), name)


META = "partitions.json"
ENGINES = ("lmdb", "sqlite")
DEFAULT_ENGINE = "lmdb"
_SUFFIX = {"lmdb": ".lmdb", "sqlite": ".sqlite"}


def store(directory: str, engine: str, index: int, name: str) -> Any:
    """The backing map of partition `index` of the state in `directory`."""
    path = os.path.join(directory, f"part-{index:05d}{_SUFFIX[engine]}")
    return LmdbMapState(path, name) if engine == "lmdb" else DurableMapState(path, name)


def stored_meta(directory: str) -> tuple[int, str] | None:
    """The number of partitions and the engine of the state in `directory`, or None if it has
    not been created (a state written before engines were recorded is SQLite)."""
    data = read_or_none(os.path.join(directory, META))
    if data is None:
        return None
    meta = json.loads(data)
    return int(meta["partitions"]), str(meta.get("engine", "sqlite"))


def _partitioning(directory: str) -> str:
    """How the stored state placed its keys in partitions (`PARTITIONING` since it is
    recorded; before, the crc32 of the key's pickle)."""
    data = read_or_none(os.path.join(directory, META))
    return str(json.loads(data).get("partitioning", "crc32-pickle")) if data else PARTITIONING


def _check_partitioning(directory: str, name: str) -> None:
    found = _partitioning(directory)
    if found != PARTITIONING:
        raise ConfigError(
            f"durable map state {name!r} at {directory} places its keys in partitions by "
            f"{found!r}, and this version by {PARTITIONING!r}: rewrite it once, with the run "
            f"stopped, with `squall state repartition CHECKPOINT {name} -n "
            f"{stored_partitions(directory)}`")


def stored_partitions(directory: str) -> int | None:
    """The number of partitions of the state in `directory`, or None if it has not been
    created."""
    meta = stored_meta(directory)
    return None if meta is None else meta[0]


def _write_meta(directory: str, partitions: int, engine: str) -> None:
    os.makedirs(directory, exist_ok=True)
    write_atomic(os.path.join(directory, META), json.dumps(
        {"partitions": partitions, "engine": engine, "partitioning": PARTITIONING,
         "format": 2}).encode())


def open_partitions(directory: str, name: str, wanted: int | None,
                    engine: str | None = None) -> tuple[int, str]:
    """The number of partitions and the engine of the state `name` in `directory`, created
    with `wanted` (or `DEFAULT_PARTITIONS`) partitions in `engine` (or `DEFAULT_ENGINE`) if it
    does not exist yet; a `wanted` other than the stored one is refused (a state keeps its
    engine). A state kept in one file by an earlier version (`<name>.sqlite` beside the
    directory) is moved into the partitions first."""
    _finish_repartition(directory)
    meta = stored_meta(directory)
    n = agreed_partitions(f"durable map state {name!r}", directory,
                          None if meta is None else meta[0], wanted,
                          "change the state's partitions offline with `squall state "
                          "repartition`")
    legacy = directory + ".sqlite"
    if meta is None:
        chosen = engine or DEFAULT_ENGINE
        if os.path.exists(legacy):
            _move_into_partitions(legacy, directory, name, n, chosen)
        _write_meta(directory, n, chosen)
    else:
        chosen = meta[1]
        _check_partitioning(directory, name)
    if os.path.exists(legacy):  # moved, then killed before removing it
        os.remove(legacy)
    return n, chosen


def _move_into_partitions(legacy: str, directory: str, name: str, n: int, engine: str) -> None:
    """The entries of a one-file state, written as they are into `n` partitions (partition by
    partition, each atomically; a kill before the partitions file is written does it again)."""
    old = DurableMapState(legacy, name)
    parts = [store(directory, engine, i, name) for i in range(n)]
    try:
        copy_entries(old.items(), parts)
    finally:
        for p in (old, *parts):
            p.close()


def repartition(directory: str, name: str, partitions: int) -> int:
    """The state `name` kept in `directory` rewritten into `partitions` partitions, with the
    run that writes it stopped; the number it had. Every stored entry moves as it is (a key
    keeps its value and the txid that wrote it), and an opaque state's record of what its last
    transaction wrote is split over the new partitions, so a replay of that transaction after
    the change still rolls it back.

    The new partitions are written beside the state (`<directory>.new`) and swapped in by two
    renames; a kill at any point leaves either the old or the new state whole (see
    `_finish_repartition`)."""
    if type(partitions) is not int or partitions < 1:
        raise ConfigError(f"repartition of state {name!r}: the number of partitions must be a "
                          f"positive integer, got {partitions!r}")
    _finish_repartition(directory)
    meta = stored_meta(directory)
    if meta is None:
        raise ConfigError(f"repartition of state {name!r}: no partitioned durable state at "
                          f"{directory}")
    old_n, engine = meta
    if old_n == partitions and _partitioning(directory) == PARTITIONING:
        return old_n
    new_dir = directory + ".new"
    shutil.rmtree(new_dir, ignore_errors=True)  # a killed earlier try
    old = [store(directory, engine, i, name) for i in range(old_n)]
    new = [store(new_dir, engine, i, name) for i in range(partitions)]
    try:
        records = [entry for p in old for key, entry in p.items() if key == BATCH_KEYS]
        copy_entries((item for p in old for item in p.items() if item[0] != BATCH_KEYS), new)
        if records:
            last = max(txid for txid, _ in records)
            keys = [k for txid, ks in records if txid == last for k in ks]
            by_part: dict[int, list[tuple[Any, ...]]] = {}
            for key, index in zip(keys, partition_indexes(keys, partitions), strict=True):
                by_part.setdefault(index, []).append(key)
            for index, part in enumerate(new):
                part.multi_put([BATCH_KEYS], [(last, tuple(by_part.get(index, ())))])
    finally:
        for p in (*old, *new):
            p.close()
    _write_meta(new_dir, partitions, engine)
    os.rename(directory, directory + ".old")
    os.rename(new_dir, directory)
    shutil.rmtree(directory + ".old")
    return old_n


def _finish_repartition(directory: str) -> None:
    """After a `repartition` killed between its renames: the new state if it was complete
    (its partitions file written), else the old one."""
    old, new = directory + ".old", directory + ".new"
    if not os.path.exists(directory) and os.path.exists(old):
        if os.path.exists(os.path.join(new, META)):
            os.rename(new, directory)
        else:
            os.rename(old, directory)
    # Whatever is left: the old state once swapped, or a new one never completed.
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)


def state_directories(location: str) -> dict[str, str]:
    """The partitioned durable states under the checkpoint `location`: file name -> directory."""
    base = os.path.join(local_directory(location, "squall state"), SUBDIRECTORY)
    if not os.path.isdir(base):
        return {}
    return {entry: os.path.join(base, entry) for entry in sorted(os.listdir(base))
            if os.path.exists(os.path.join(base, entry, META))}
