"""`PartitionedMap`: a map state split by key into a fixed number of partitions.

A key belongs to partition `pmod(hash(key fields), n)`, with Spark's Murmur3 `hash` of the
columns holding its fields (`squall.murmur3.key_hash`), so a key's partition is the same in
every process, on every runner and after every restart, and is the partition Spark's own
`repartition(n, key columns)` puts it in: Spark's JVM can route a batch's rows to their state
partitions without a Python worker. (`PARTITIONING` names this function in the stores' records,
so a store made with another one is refused rather than misread.)

Each partition is a whole map state of its own (Storm's `MapState` over its own backing
store), applying the state type's rule per key; the partitions share nothing, so they can be
written at the same time by different processes. This is how
Storm's Trident scales `persistentAggregate` (a `partitionPersist` after a group-by: each
partition reads and writes its own keys), and how Spark keeps a stateful query's state (a store
per shuffle partition).

On Spark each partition's keys are applied by the Spark task that holds them, on an executor;
on the local runner `PartitionedMap` sends each partition its keys in turn. The stores are the
same, so a checkpoint means the same on both runners.

Atomicity is per partition: a batch is wholly in a partition or not at all. A batch cut short
between partitions is replayed with the same txid, and the txid each entry carries makes the
replay idempotent (transactional and opaque states); an opaque partition also rolls back, at
`begin_commit`, the keys an earlier attempt of the txid wrote there.

>>> from squall.trident.state.memory import MemoryMapState
>>> from squall.trident.state.map_state import TransactionalMap
>>> state = partitioned(StateType.TRANSACTIONAL,
...                     [TransactionalMap(MemoryMapState()) for _ in range(4)], "counts")
>>> add = lambda n: lambda old: (old or 0) + n
>>> state.multi_update(1, [("the",), ("cow",), ("jumped",)], [add(2), add(1), add(1)])
[2, 1, 1]
>>> [len(dict(p.items())) for p in state.parts]   # each key in the partition of its hash
[0, 0, 1, 2]
>>> partition_indexes([("the",), ("cow",), ("jumped",)], 4)
[2, 3, 3]
>>> sorted(state.items())
[(('cow',), 1), (('jumped',), 1), (('the',), 2)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from squall.errors import ConfigError
from squall.murmur3 import key_hashes
from squall.trident.state.map_state import MapState, MapStateError, StateType, Updater

PARTITIONS_KEY = "squall.trident.state.partitions"
"""The number of partitions of a partitioned state created by a run; a state keeps the number
it was created with (see `PartitionedMap`)."""

DEFAULT_PARTITIONS = 8

PARTITIONING = "spark-murmur3"
"""The partition function of the stores (see above), recorded with every partitioned state."""


def open_state(factory: Any, name: str, location: str | None,
               conf: Mapping[str, Any]) -> Any:
    """The state `name` made by `factory` for a run with configuration `conf`: a partitioned
    factory's state gets the run's `squall.trident.state.partitions` when it is created."""
    make = getattr(factory, "make_partitioned", None)
    if make is None:
        return factory.make_state(name, location)
    setting = conf.get(PARTITIONS_KEY)
    return make(name, location, None if setting is None else int(setting))


def agreed_partitions(owner: str, where: str, stored: int | None, wanted: int | None,
                      remedy: str) -> int:
    """The number of partitions of a state (`owner`, e.g. "durable map state 'counts'") kept
    at `where`: the `stored` one; for a state not created yet (`stored` None) the `wanted` one,
    else `DEFAULT_PARTITIONS`. A `wanted` other than the stored one is refused: a key's
    partition depends on the number, so it cannot change under a state (`remedy` says how to
    change it)."""
    if stored is None:
        return wanted if wanted is not None else DEFAULT_PARTITIONS
    if wanted is not None and wanted != stored:
        raise ConfigError(
            f"{owner} has {stored} partitions (fixed when it was created, at {where}), but this "
            f"run asks for {wanted} ({PARTITIONS_KEY} or the factory's partitions=...): leave "
            f"the setting unset or set it to {stored}, or {remedy}")
    return stored


def copy_entries(entries: Iterable[tuple[tuple[Any, ...], Any]], parts: Sequence[Any],
                 page: int = 50_000) -> int:
    """Every (key, stored entry) of `entries` written as it is into the backing map (of
    `parts`) of its key's partition, `page` entries at a time; the number written."""
    n, total, source = len(parts), 0, iter(entries)
    while True:
        chunk = list(itertools.islice(source, page))
        if not chunk:
            return total
        keys = [k for k, _ in chunk]
        for index, positions in by_partition(keys, n).items():
            parts[index].multi_put([keys[i] for i in positions],
                                   [chunk[i][1] for i in positions])
        total += len(chunk)


def partition_indexes(keys: Sequence[tuple[Any, ...]], n: int) -> list[int]:
    """The partition, of `n`, of each of `keys` (Python's `%` is Spark's `pmod` for n > 0)."""
    return [h % n for h in key_hashes(keys)]


class _Routed:
    """The partitions' backing maps seen as one (for the reads `MapState` does itself)."""

    def __init__(self, parts: Sequence[MapState]) -> None:
        self.parts = parts

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        out: list[Any | None] = [None] * len(keys)
        for index, positions in by_partition(keys, len(self.parts)).items():
            found = self.parts[index].backing.multi_get([keys[i] for i in positions])
            for i, entry in zip(positions, found, strict=True):
                out[i] = entry
        return out

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        for index, positions in by_partition(keys, len(self.parts)).items():
            self.parts[index].backing.multi_put([keys[i] for i in positions],
                                                [values[i] for i in positions])

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        return itertools.chain.from_iterable(p.backing.items() for p in self.parts)

    def close(self) -> None:
        for p in self.parts:
            p.close()


class PartitionedMap(MapState):
    """A map state of `len(parts)` partitions, each a `MapState` of the same type over its own
    store (see the module documentation). `parts[i]` holds the keys of partition `i`."""

    def __init__(self, parts: Sequence[MapState], name: str) -> None:
        if not parts:
            raise MapStateError(f"state {name!r}: a partitioned state needs at least one "
                                "partition")
        kinds = {type(p).state_type for p in parts}
        if kinds != {self.state_type}:
            got = sorted(k.name for k in kinds)
            raise MapStateError(f"state {name!r}: every partition must be a "
                                f"{self.state_type.name} map state, got {got}")
        self.parts = list(parts)
        super().__init__(_Routed(self.parts), name)

    @property
    def partitions(self) -> int:
        return len(self.parts)

    def begin_commit(self, txid: int) -> None:
        super().begin_commit(txid)
        for p in self.parts:
            p.begin_commit(txid)

    def commit(self, txid: int) -> None:
        super().commit(txid)
        for p in self.parts:
            p.commit(txid)

    def multi_update(self, txid: int, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Updater]) -> list[Any]:
        txid, key_list = self._check_update(txid, keys, updaters)
        return self._scatter(key_list, lambda part, ks, pos: part.multi_update(
            txid, ks, [updaters[i] for i in pos]))

    def _apply(self, txid: int, keys: Sequence[Any], updaters: Sequence[Updater],
               initial: Any) -> list[Any]:
        txid, key_list = self._check_update(txid, keys, updaters)
        return self._scatter(key_list, lambda part, ks, pos: part._apply(
            txid, ks, [updaters[i] for i in pos], initial))

    def multi_add(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> list[Any]:
        txid, key_list = self._check_update(txid, keys, values)
        return self._scatter(key_list, lambda part, ks, pos: part.multi_add(
            txid, ks, [values[i] for i in pos]))

    def multi_put(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> None:
        values = list(values)
        txid, key_list = self._check_update(txid, keys, values)
        self._scatter(key_list, lambda part, ks, pos: part.multi_put(
            txid, ks, [values[i] for i in pos]) or [None] * len(ks))

    def _scatter(self, keys: list[tuple[Any, ...]], apply: Any) -> list[Any]:
        """`apply(partition, its keys, their positions)` per partition with keys; the results
        back in key order."""
        out: list[Any] = [None] * len(keys)
        for index, positions in by_partition(keys, len(self.parts)).items():
            done = apply(self.parts[index], [keys[i] for i in positions], positions)
            for i, value in zip(positions, done, strict=True):
                out[i] = value
        return out

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, user value), a partition at a time."""
        return itertools.chain.from_iterable(p.items() for p in self.parts)

    def close(self) -> None:
        for p in self.parts:
            p.close()

    def _stored(self) -> Iterator[tuple[Any, Any]]:
        return itertools.chain.from_iterable(p._stored() for p in self.parts)

    def _user_value(self, key: Any, entry: Any) -> Any:
        return self.parts[0]._user_value(key, entry)


def by_partition(keys: Sequence[tuple[Any, ...]], n: int) -> dict[int, list[int]]:
    """The positions of `keys` per partition, partitions in ascending order."""
    if n == 1:
        return {0: list(range(len(keys)))} if keys else {}
    out: dict[int, list[int]] = {}
    for i, index in enumerate(partition_indexes(keys, n)):
        out.setdefault(index, []).append(i)
    return dict(sorted(out.items()))


_CLASSES: dict[StateType, type[PartitionedMap]] = {
    t: type(f"Partitioned{t.name.title().replace('_', '')}Map", (PartitionedMap,),
            {"state_type": t, "__module__": __name__})
    for t in StateType
}


def partitioned(state_type: StateType, parts: Sequence[MapState], name: str) -> PartitionedMap:
    """The `PartitionedMap` of `state_type` over `parts`."""
    return _CLASSES[state_type](parts, name)
