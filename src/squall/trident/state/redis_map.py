"""`RedisMapState`: a map state in Redis hashes, one per partition.

A state is partitioned (`squall.trident.state.partitioned`): partition `i` of state `name` is
the hash `<key_prefix><name>:p<i>`, and `<key_prefix><name>:partitions` holds the number of
partitions, set when the state is created (the same for every run: the checkpoint location
plays no part, so two topologies with a state of one name share it unless their prefixes
differ). A partition is one Redis key, so on Redis Cluster its keys live together in one slot
and the partitions spread over the nodes. Fields are the pickled keys, values the pickled
entries (`squall.trident.state.codec`). A partition's batch is read with `HMGET` and written
with `HSET`, each in one `MULTI`/`EXEC` transaction (one round trip per partition and batch),
so a batch is in a partition whole or not at all. On Spark each partition's keys are applied by
the task that holds them. A state an earlier version kept in one hash (`<key_prefix><name>`) is
moved into the partitions when it is first opened.

>>> factory = RedisMapState.factory(StateType.OPAQUE, port=6390, password="secret")
>>> factory
RedisMapState.factory(StateType.OPAQUE, host='127.0.0.1', port=6390, database=0, \
password='***', timeout=5, key_prefix='squall:trident:')
>>> factory.make_partition("counts", "/ignored", 3).backing.hash_key
'squall:trident:counts:p3'
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from squall.errors import ConfigError
from squall.redis_clients import RedisUnreachable, client_from_config
from squall.trident.state.codec import decode_entries, decode_key, encode_entries, encode_keys
from squall.trident.state.map_state import (
    MapState,
    MapStateError,
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
    partitioned,
)

DEFAULT_PREFIX = "squall:trident:"
_CHUNK = 10_000  # fields per HMGET / HSET command


class RedisMapStateUnreachable(MapStateError, RedisUnreachable):
    """The server of a `RedisMapState` could not be reached: a run that starts while it is down
    waits for it (`squall.redis_clients.wait_until_reachable`), and a batch that meets it
    mid-run is attempted again."""


class RedisMapState:
    """A `BackingMap` over the Redis hash `<key_prefix><name>`; pickles as its configuration
    and connects lazily."""

    def __init__(self, name: str, *, host: str = "127.0.0.1", port: int = 6379,
                 database: int = 0, password: str | None = None, timeout: float = 5,
                 key_prefix: str = DEFAULT_PREFIX, hash_key: str | None = None) -> None:
        self.name = check_name(name, "RedisMapState")
        self.config: dict[str, Any] = {"host": host, "port": port, "database": database,
                                       "password": password, "timeout": timeout}
        self.key_prefix = key_prefix
        self.hash_key = key_prefix + name if hash_key is None else hash_key
        self._client: redis.Redis | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config, "key_prefix": self.key_prefix,
                "hash_key": self.hash_key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"], key_prefix=state["key_prefix"],  # type: ignore[misc]
                      hash_key=state.get("hash_key"), **state["config"])

    def __repr__(self) -> str:
        return f"RedisMapState({self.name!r}, hash {self.hash_key!r} at {self._where()})"

    def _where(self) -> str:
        c = self.config
        return f"{c['host']}:{c['port']} (database {c['database']})"

    @classmethod
    def factory(cls, state_type: StateType | str = StateType.TRANSACTIONAL, *,
                host: str = "127.0.0.1", port: int = 6379, database: int = 0,
                password: str | None = None, timeout: float = 5,
                key_prefix: str = DEFAULT_PREFIX, partitions: int | None = None
                ) -> RedisMapStateFactory:
        """A factory of map states of `state_type`, each in hashes of the Redis server at
        `host:port` (`timeout` in seconds, for connecting and for each command); a new state
        gets `partitions` partitions (None: the run's `squall.trident.state.partitions`)."""
        return RedisMapStateFactory(state_type_of(state_type, "RedisMapState.factory"), host,
                                    port, database, password, timeout, key_prefix, partitions)

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = client_from_config(self.config)
        return self._client

    def _failed(self, exc: redis.RedisError) -> MapStateError:
        text = str(exc)
        if isinstance(exc, redis.AuthenticationError) or "NOAUTH" in text or "WRONGPASS" in text:
            hint = "; check the password given to RedisMapState.factory"
        elif isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            hint = "; is the server running and reachable?"
        else:
            hint = ""
        kind = (RedisMapStateUnreachable if isinstance(exc, (redis.ConnectionError,
                                                              redis.TimeoutError))
                else MapStateError)
        return kind(f"redis map state {self.name!r} (hash {self.hash_key!r} at "
                    f"{self._where()}): {text}{hint}")

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        if not keys:
            return []
        encoded = encode_keys(keys)
        try:
            pipe = self.client.pipeline(transaction=True)
            for start in range(0, len(encoded), _CHUNK):
                pipe.hmget(self.hash_key, encoded[start:start + _CHUNK])
            replies = pipe.execute()
        except redis.RedisError as exc:
            raise self._failed(exc) from exc
        blobs: list[bytes | None] = []
        for reply in replies:
            blobs.extend(reply)
        return decode_entries(blobs)

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        if len(keys) != len(values):
            raise MapStateError(f"redis map state {self.name!r}: {len(keys)} keys but "
                                f"{len(values)} values")
        if not keys:
            return
        encoded_keys, encoded_values = encode_keys(keys), encode_entries(values)
        try:
            pipe = self.client.pipeline(transaction=True)
            for start in range(0, len(encoded_keys), _CHUNK):
                end = start + _CHUNK
                pipe.hset(self.hash_key, mapping=dict(
                    zip(encoded_keys[start:end], encoded_values[start:end], strict=True)))
            pipe.execute()
        except redis.RedisError as exc:
            raise self._failed(exc) from exc

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, entry), read with `HSCAN` (a key written meanwhile may be missed)."""
        cursor = 0
        while True:
            try:
                reply: Any = self.client.hscan(self.hash_key, cursor, count=1000)
            except redis.RedisError as exc:
                raise self._failed(exc) from exc
            cursor, page = reply
            fields: list[bytes] = list(page)
            entries = decode_entries([page[k] for k in fields])
            for k, entry in zip(fields, entries, strict=True):
                yield decode_key(k), entry
            if cursor == 0:
                return

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass(frozen=True)
class RedisMapStateFactory:
    """Made by `RedisMapState.factory`; its repr hides the password."""

    state_type: StateType = StateType.TRANSACTIONAL
    host: str = "127.0.0.1"
    port: int = 6379
    database: int = 0
    password: str | None = field(default=None, repr=False)
    timeout: float = 5
    key_prefix: str = DEFAULT_PREFIX
    partitions: int | None = None

    def __post_init__(self) -> None:
        owner = "RedisMapState.factory"
        if not isinstance(self.state_type, StateType):
            raise ConfigError(f"RedisMapStateFactory: state_type must be a StateType, got "
                              f"{self.state_type!r} ({owner} also takes a value such as "
                              "'opaque')")
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"{owner}: host must be a non-empty string, got {self.host!r}")
        if not _is_int(self.port) or not 0 < self.port < 65536:
            raise ConfigError(f"{owner}: port must be an int from 1 to 65535, got {self.port!r}")
        if not _is_int(self.database) or self.database < 0:
            raise ConfigError(f"{owner}: database must be an int >= 0, got {self.database!r}")
        if self.password is not None and not isinstance(self.password, str):
            raise ConfigError(f"{owner}: password must be a string or None, got a "
                              f"{type(self.password).__name__}")
        if (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                or not self.timeout > 0):
            raise ConfigError(f"{owner}: timeout must be a number of seconds > 0, got "
                              f"{self.timeout!r}")
        if not isinstance(self.key_prefix, str):
            raise ConfigError(f"{owner}: key_prefix must be a string, got {self.key_prefix!r}")
        if self.partitions is not None and (not _is_int(self.partitions) or self.partitions < 1):
            raise ConfigError(f"{owner}: partitions must be a positive int or None, got "
                              f"{self.partitions!r}")

    def __repr__(self) -> str:
        password = None if self.password is None else "***"
        return (f"RedisMapState.factory({self.state_type}, host={self.host!r}, "
                f"port={self.port!r}, database={self.database!r}, password={password!r}, "
                f"timeout={self.timeout!r}, key_prefix={self.key_prefix!r})")

    def make_state(self, name: str, location: str | None = None) -> PartitionedMap:
        return self.make_partitioned(name, location, None)

    def make_partitioned(self, name: str, location: str | None,
                         partitions: int | None) -> PartitionedMap:
        """The state `name`: its partitions as stored, or, for a state not created yet,
        `self.partitions`, else `partitions` (the run's setting), else `DEFAULT_PARTITIONS`."""
        name = check_name(name, "RedisMapState")
        legacy = self._hash(name, self.key_prefix + name)
        meta = self.key_prefix + name + ":partitions"
        wanted = self.partitions if self.partitions is not None else partitions
        try:
            client = legacy.client
            stored = client.get(meta)
            owner = f"redis map state {name!r}"
            n = agreed_partitions(owner, f"{meta} at {legacy._where()}",
                                  None if stored is None else int(stored), wanted,
                                  "use another state name or key_prefix")
            placed = self.key_prefix + name + ":partitioning"
            found = client.get(placed)
            if isinstance(found, bytes):
                found = found.decode()
            if stored is not None and found != PARTITIONING:
                raise ConfigError(
                    f"{owner} at {legacy._where()} places its keys in partitions by another "
                    f"function than this version's ({PARTITIONING!r}): use another state name "
                    "or key_prefix, or delete its hashes")
            if stored is None:
                client.set(placed, PARTITIONING)
                parts = [self._hash(name, self._part_key(name, i)) for i in range(n)]
                try:
                    copy_entries(legacy.items(), parts)  # a state of one hash, if any
                finally:
                    for p in parts:
                        p.close()
                if not client.set(meta, n, nx=True):  # another process created it first
                    n = agreed_partitions(owner, meta, int(client.get(meta) or 0), wanted,
                                          "use another state name or key_prefix")
            client.delete(legacy.hash_key)  # moved into the partitions
        except redis.RedisError as exc:
            raise legacy._failed(exc) from exc
        finally:
            legacy.close()
        return partitioned(self.state_type, [self._partition(name, i) for i in range(n)], name)

    def make_partition(self, name: str, location: str | None, index: int) -> MapState:
        """Partition `index` of the state `name`, made before by `make_partitioned` (what an
        executor applies its keys to)."""
        return self._partition(check_name(name, "RedisMapState"), index)

    def _partition(self, name: str, index: int) -> MapState:
        return wrap(self.state_type, self._hash(name, self._part_key(name, index)), name)

    def _part_key(self, name: str, index: int) -> str:
        return f"{self.key_prefix}{name}:p{index}"

    def _hash(self, name: str, hash_key: str) -> RedisMapState:
        return RedisMapState(name, host=self.host, port=self.port, database=self.database,
                             password=self.password, timeout=self.timeout,
                             key_prefix=self.key_prefix, hash_key=hash_key)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
