"""Trident's map states (`squall.trident.state`): the three wrappers (transactional, opaque,
non-transactional) on each backing map (memory, durable SQLite, real Redis), their txid rules,
restarts, pickling and argument errors."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from support.redis_server import free_port, start_redis

from squall.errors import ConfigError
from squall.transaction_kernel.values import OpaqueValue, TransactionalValue, TransactionOrderError
from squall.trident.state import (
    BackingMap,
    DurableMapState,
    MapState,
    MapStateError,
    MemoryMapState,
    NonTransactionalMap,
    OpaqueMap,
    RedisMapState,
    StateFactory,
    StateType,
    TransactionalMap,
)
from squall.trident.state.codec import encode_entries, encode_keys
from squall.trident.state.durable import repartition
from squall.trident.state.partitioned import PARTITIONING, PartitionedMap, partition_indexes

TX, OPAQUE, NON_TX = StateType.TRANSACTIONAL, StateType.OPAQUE, StateType.NON_TRANSACTIONAL
BACKINGS = ["memory", "durable", "sqlite", "redis"]  # durable: its default engine, LMDB
SRC = str(Path(__file__).resolve().parents[2] / "src")


def add(n: int):
    return lambda old: (old or 0) + n


def counts(state: MapState) -> dict:
    return dict(state.items())


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_memory_registry():
    MemoryMapState.clear_registry()
    yield
    MemoryMapState.clear_registry()


@pytest.fixture
def make(request, tmp_path):
    """`make(backing, state_type)` -> (factory, location): a fresh state's factory; the Redis
    ones get a prefix of their own, so tests share the module's server without meeting."""

    def build(backing: str, state_type: StateType) -> tuple[StateFactory, str]:
        location = str(tmp_path / "checkpoint")
        if backing == "memory":
            return MemoryMapState.factory(state_type), location
        if backing == "durable":
            return DurableMapState.factory(state_type), location
        if backing == "sqlite":
            return DurableMapState.factory(state_type, engine="sqlite"), location
        server = request.getfixturevalue("redis_server")
        return RedisMapState.factory(state_type, port=server.port,
                                     key_prefix=f"test:{uuid.uuid4().hex}:"), location

    return build


# ---- counting on every wrapper and backing map ---------------------------------------------
@pytest.mark.parametrize("backing", BACKINGS)
@pytest.mark.parametrize("state_type", list(StateType))
def test_counts_over_batches(make, backing, state_type):
    factory, location = make(backing, state_type)
    state = factory.make_state("counts", location)
    assert state.state_type is state_type
    assert state.multi_get([("the",), ("cow",)]) == [None, None]
    assert state.multi_update(1, [("the",), ("cow",)], [add(2), add(1)]) == [2, 1]
    assert state.multi_update(2, [("the",), ("moon",)], [add(3), add(1)]) == [5, 1]
    assert state.multi_get([("moon",), ("jumped",), ("the",)]) == [1, None, 5]
    assert counts(state) == {("the",): 5, ("cow",): 1, ("moon",): 1}
    assert counts(factory.make_state("counts", location)) == counts(state)  # what a reader sees
    assert counts(factory.make_state("other", location)) == {}
    state.close()


_WRAPPER = {TX: TransactionalMap, OPAQUE: OpaqueMap, NON_TX: NonTransactionalMap}


@pytest.mark.parametrize("backing", BACKINGS)
@pytest.mark.parametrize("state_type", list(StateType))
def test_multi_add_equals_the_updaters_whatever_the_values(make, backing, state_type):
    """`multi_add` (Count's and Sum's update; a durable transactional state applies it in SQL)
    gives the values and stored entries of `multi_update` with `old + value` over a memory map:
    batches of small ints, floats, ints at and beyond the 64-bit range SQLite adds exactly,
    replays of a txid, keys that already hold a big int (the whole batch then goes the general
    way: a part added in SQL and kept would count twice)."""
    rnd = random.Random(11)
    factory, location = make(backing, state_type)
    state = factory.make_state("counts", location)
    ref = _WRAPPER[state_type](MemoryMapState(), name="ref")
    keys = [(f"k{i}",) for i in range(30)] + [(i, "x") for i in range(10)]
    pools = [[1, 2, 7], [0.5, -1.25, 3.0], [2 ** 62, -(2 ** 62)], [2 ** 62 + 1, 2 ** 80],
             [1, 2.5]]
    txid, last = 0, None
    for step in range(40):
        if last is not None and step % 6 == 5:
            batch, values = last  # a transactional spout's replay: same txid, same content
        else:
            txid += 1
            batch = rnd.sample(keys, rnd.randint(1, 25))
            pool = pools[0] if step % 3 else rnd.choice(pools)
            values = [rnd.choice(pool) for _ in batch]
            last = (batch, values)
        got = state.multi_add(txid, batch, values)
        want = ref.multi_update(txid, batch, [add_exactly(v) for v in values])
        assert got == want, (step, batch, values)
        assert [type(v) for v in got] == [type(v) for v in want]
    assert counts(state) == counts(ref)
    assert state.backing.multi_get(keys) == ref.backing.multi_get(keys)
    assert counts(factory.make_state("counts", location)) == counts(ref)  # as read after a restart
    state.close()


def add_exactly(n):
    return lambda old: n if old is None else old + n


@pytest.mark.parametrize("backing", BACKINGS)
def test_multi_add_of_an_older_txid_raises_as_multi_update(make, backing):
    factory, location = make(backing, TX)
    factory.make_state("counts", location).multi_add(3, [("a",), ("b",)], [1, 1])
    restarted = factory.make_state("counts", location)
    with pytest.raises(TransactionOrderError, match=r"state 'counts', key \('[ab]',\): "
                                                    r"transaction 2 comes after transaction 3"):
        restarted.multi_add(2, [("a",), ("b",)], [1, 1])
    assert counts(restarted) == {("a",): 1, ("b",): 1}
    opaque = DurableMapState.factory(OPAQUE).make_state("counts", location)
    if backing in ("durable", "sqlite"):  # a TransactionalValue to the other wrappers
        with pytest.raises(MapStateError, match="the store holds a TransactionalValue"):
            opaque.multi_add(4, [("a",)], [1])


def test_multi_add_goes_through_a_subclass_s_multi_update(tmp_path):
    seen = []

    class Logged(TransactionalMap):
        def multi_update(self, txid, keys, updaters):
            seen.append((txid, list(keys)))
            return super().multi_update(txid, keys, updaters)

    state = Logged(DurableMapState(str(tmp_path / "c.sqlite")), name="logged")
    assert state.multi_add(1, [("a",)], [2]) == [2]
    assert seen == [(1, [("a",)])]


def test_a_durable_state_written_before_native_rows_is_read_and_added_to(tmp_path):
    """A state kept in one file of the (k, v) table that held only pickled entries opens (moved
    into partitions), reads, and takes `multi_add` (its rows are added to the general way, then
    stored as native rows)."""
    path = tmp_path / "trident-state" / "counts.sqlite"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    conn.executemany("INSERT INTO kv VALUES (?, ?)", zip(
        encode_keys([("the",), ("cow",)]),
        encode_entries([TransactionalValue(1, 5), TransactionalValue(1, 2)]), strict=True))
    conn.commit()
    conn.close()
    state = DurableMapState.factory(TX, engine="sqlite").make_state("counts", str(tmp_path))
    assert counts(state) == {("the",): 5, ("cow",): 2}
    assert state.multi_add(2, [("the",), ("moon",)], [1, 1]) == [6, 1]
    assert state.multi_add(3, [("the",), ("cow",)], [1, 1]) == [7, 3]
    assert state.multi_add(3, [("the",), ("cow",)], [1, 1]) == [7, 3]  # a replay
    assert state.backing.multi_get([("the",), ("cow",), ("moon",)]) == [
        TransactionalValue(3, 7), TransactionalValue(3, 3), TransactionalValue(2, 1)]
    # The one file was moved into the state's partitions; every row is native now: v NULL,
    # t and c set.
    assert not path.exists()
    native = 0
    for part in (tmp_path / "trident-state" / "counts").glob("part-*.sqlite"):
        with contextlib.closing(sqlite3.connect(part)) as conn:
            native += conn.execute("SELECT count(*) FROM kv WHERE v IS NULL").fetchone()[0]
    assert native == 3


@pytest.mark.parametrize("backing", BACKINGS)
def test_transactional_replay_of_a_txid_changes_nothing(make, backing):
    factory, location = make(backing, TX)
    state = factory.make_state("counts", location)
    state.multi_update(1, [("the",), ("cow",)], [add(2), add(1)])
    assert state.multi_update(2, [("the",)], [add(3)]) == [5]
    # a transactional spout replays batch 2 with the same content: its update is already in
    assert state.multi_update(2, [("the",), ("cow",)], [add(3), add(4)]) == [5, 5]
    assert counts(state) == {("the",): 5, ("cow",): 5}  # 'cow' was not in batch 2's first try
    assert state.backing.multi_get([("the",), ("cow",)]) == [
        TransactionalValue(2, 5), TransactionalValue(2, 5)]


@pytest.mark.parametrize("backing", BACKINGS)
def test_opaque_replay_recomputes_from_the_previous_value(make, backing):
    factory, location = make(backing, OPAQUE)
    state = factory.make_state("counts", location)
    state.multi_update(1, [("the",), ("cow",)], [add(2), add(1)])
    assert state.multi_update(2, [("the",)], [add(3)]) == [5]
    # an opaque spout's replay of batch 2 has other content: 'the' is redone from its value
    # before batch 2, 'cow' (absent from the first try) is updated from its current value
    assert state.multi_update(2, [("the",), ("cow",)], [add(10), add(4)]) == [12, 5]
    assert counts(state) == {("the",): 12, ("cow",): 5}
    assert state.backing.multi_get([("the",), ("cow",)]) == [
        OpaqueValue(2, 12, 2), OpaqueValue(2, 5, 1)]
    assert state.multi_update(3, [("the",)], [add(1)]) == [13]
    assert state.backing.multi_get([("the",)]) == [OpaqueValue(3, 13, 12)]


@pytest.mark.parametrize("backing", BACKINGS)
def test_non_transactional_replay_applies_again(make, backing):
    factory, location = make(backing, NON_TX)
    state = factory.make_state("counts", location)
    state.multi_update(1, [("the",)], [add(2)])
    assert state.multi_update(2, [("the",)], [add(3)]) == [5]
    # at-least-once: the replay of batch 2 is counted a second time
    assert state.multi_update(2, [("the",)], [add(3)]) == [8]
    assert counts(state) == {("the",): 8}
    assert state.backing.multi_get([("the",)]) == [8]  # the plain value, no txid


@pytest.mark.parametrize("backing", BACKINGS)
@pytest.mark.parametrize("state_type", [TX, OPAQUE])
def test_an_older_txid_raises_naming_the_state_and_key(make, backing, state_type):
    factory, location = make(backing, state_type)
    factory.make_state("counts", location).multi_update(5, [("the",)], [add(1)])
    restarted = factory.make_state("counts", location)  # knows nothing of txid 5 but the entries
    with pytest.raises(TransactionOrderError,
                       match=r"state 'counts', key \('the',\): transaction 4 comes after "
                             r"transaction 5"):
        restarted.multi_update(4, [("cow",), ("the",)], [add(1), add(1)])
    if isinstance(restarted, PartitionedMap):
        # Partitions commit on their own, in ascending order: the one holding ('the',) refused
        # txid 4 and wrote nothing; ('cow',)'s was written if it came first.
        n = restarted.partitions
        (cow, the) = partition_indexes([("cow",), ("the",)], n)
        assert cow != the
        assert restarted.multi_get([("the",), ("cow",)]) == [1, 1 if cow < the else None]
    else:
        assert restarted.multi_get([("the",), ("cow",)]) == [1, None]  # nothing of txid 4


@pytest.mark.parametrize("state_type", list(StateType))
def test_an_older_txid_than_this_object_applied_raises(state_type):
    state = MemoryMapState.factory(state_type).make_state("counts", None)
    state.multi_update(3, [("the",)], [add(1)])
    with pytest.raises(TransactionOrderError, match="state 'counts': transaction 2 comes after "
                                                    "transaction 3"):
        state.multi_update(2, [("cow",)], [add(1)])
    with pytest.raises(TransactionOrderError):
        state.multi_put(1, [("cow",)], [7])


# ---- restarts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backing", ["durable", "sqlite", "redis"])
@pytest.mark.parametrize("state_type", list(StateType))
def test_a_restart_replaying_the_last_batch(make, backing, state_type):
    factory, location = make(backing, state_type)
    state = factory.make_state("counts", location)
    state.multi_update(1, [("the",), ("cow",)], [add(1), add(1)])
    state.multi_update(2, [("the",)], [add(1)])
    state.multi_update(3, [("the",), ("cow",)], [add(1), add(1)])
    del state  # the process dies after batch 3 was written, before the runtime recorded it
    restarted = cloudpickle.loads(cloudpickle.dumps(factory)).make_state("counts", location)
    restarted.multi_update(3, [("the",), ("cow",)], [add(1), add(1)])  # the replay of batch 3
    if state_type is NON_TX:
        assert counts(restarted) == {("the",): 4, ("cow",): 3}  # at-least-once: counted twice
    else:
        assert counts(restarted) == {("the",): 3, ("cow",): 2}  # exactly once
    restarted.multi_update(4, [("the",)], [add(1)])
    assert restarted.multi_get([("the",)]) == [5 if state_type is NON_TX else 4]


_CHILD = """
import os, signal, sys
from squall.trident.state import DurableMapState, StateType
state = DurableMapState.factory(StateType[sys.argv[1]]).make_state("counts", sys.argv[2])
add = lambda n: lambda old: (old or 0) + n
state.multi_update(1, [("the",), ("cow",)], [add(1), add(1)])
state.multi_update(2, [("the",)], [add(1)])
state.multi_update(3, [("the",), ("cow",)], [add(1), add(1)])
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("state_type", [TX, OPAQUE])
def test_durable_state_after_a_sigkill_replays_exactly_once(tmp_path, state_type):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _CHILD, state_type.name, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    state = DurableMapState.factory(state_type).make_state("counts", str(tmp_path))
    assert counts(state) == {("the",): 3, ("cow",): 2}
    state.multi_update(3, [("the",), ("cow",)], [add(1), add(1)])
    assert counts(state) == {("the",): 3, ("cow",): 2}


def test_memory_states_are_shared_by_location_and_name(tmp_path):
    factory = MemoryMapState.factory(TX)
    a = factory.make_state("counts", str(tmp_path))
    a.multi_update(1, [("the",)], [add(1)])
    assert factory.make_state("counts", str(tmp_path)).multi_get([("the",)]) == [1]
    assert MemoryMapState.factory(OPAQUE).make_state("counts", None).multi_get([("the",)]) == [
        None]
    assert factory.make_state("counts", str(tmp_path / "other")).multi_get([("the",)]) == [None]
    assert cloudpickle.loads(cloudpickle.dumps(a)).backing is a.backing  # a reference
    MemoryMapState.clear_registry()
    assert factory.make_state("counts", str(tmp_path)).multi_get([("the",)]) == [None]
    private = MemoryMapState()
    private.multi_put([("x",)], [1])
    copy = pickle.loads(pickle.dumps(private))
    assert copy is not private and copy.multi_get([("x",)]) == [1]


# ---- multi_put, begin_commit / commit --------------------------------------------------------
@pytest.mark.parametrize("backing", BACKINGS)
def test_multi_put_follows_the_txid_rules(make, backing):
    tx = make(backing, TX)[0].make_state("tx", make(backing, TX)[1])
    tx.multi_put(1, [("a",), ("b",)], [10, 20])
    tx.multi_put(1, [("a",)], [11])  # replay: a key already at txid 1 is left as it is
    tx.multi_put(2, [("b",)], [21])
    assert counts(tx) == {("a",): 10, ("b",): 21}
    factory, location = make(backing, OPAQUE)
    op = factory.make_state("op", location)
    op.multi_put(1, [("a",)], [10])
    op.multi_put(2, [("a",)], [11])
    op.multi_put(2, [("a",)], [12])  # the same txid: from the value before txid 2
    assert op.backing.multi_get([("a",)]) == [OpaqueValue(2, 12, 10)]
    factory, location = make(backing, NON_TX)
    plain = factory.make_state("plain", location)
    plain.multi_put(1, [("a",)], [{"n": 1}])
    plain.multi_put(1, [("a",)], [{"n": 2}])
    assert plain.multi_get([("a",)]) == [{"n": 2}]


def test_begin_commit_and_commit_track_the_txid():
    state = MemoryMapState.factory(TX).make_state("counts", None)
    state.begin_commit(1)
    assert state.current_txid == 1
    state.multi_update(1, [("a",)], [add(1)])
    with pytest.raises(MapStateError, match="transaction 2 while transaction 1 is open"):
        state.multi_update(2, [("a",)], [add(1)])
    with pytest.raises(MapStateError, match="commit of transaction 2, but transaction 1 began"):
        state.commit(2)
    state.commit(1)
    assert (state.current_txid, state.committed_txid) == (None, 1)
    state.multi_update(2, [("a",)], [add(1)])  # outside begin_commit: the txid given is used
    assert state.multi_get([("a",)]) == [2]


# ---- the durable map state ---------------------------------------------------------------------
def _directory(state: PartitionedMap) -> str:
    return os.path.dirname(state.parts[0].backing.path)


def test_durable_files_live_under_the_location_or_the_directory(tmp_path):
    state = DurableMapState.factory().make_state("counts", str(tmp_path / "ck"))
    assert _directory(state) == str(tmp_path / "ck" / "trident-state" / "counts")
    assert [os.path.basename(p.backing.path) for p in state.parts] == [
        f"part-{i:05d}.lmdb" for i in range(8)]
    sqlite = DurableMapState.factory(engine="sqlite").make_state("other", str(tmp_path / "ck"))
    assert [os.path.basename(p.backing.path) for p in sqlite.parts] == [
        f"part-{i:05d}.sqlite" for i in range(8)]
    state.multi_update(1, [("a",)], [add(1)])
    (index,) = partition_indexes([("a",)], 8)
    assert os.path.exists(state.parts[index].backing.path)
    state = DurableMapState.factory(directory=tmp_path / "d").make_state("counts", "/elsewhere")
    assert _directory(state) == str(tmp_path / "d" / "trident-state" / "counts")
    odd = DurableMapState.factory().make_state("a/b c%", f"file://{tmp_path}")
    assert _directory(odd) == str(tmp_path / "trident-state" / "a%2fb%20c%25")
    assert _directory(DurableMapState.factory().make_state("a_b", str(tmp_path))) != (
        _directory(DurableMapState.factory().make_state("a/b", str(tmp_path))))


def test_durable_state_without_a_directory_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"durable map state 'counts' needs a directory: run "
                                          r"with a checkpoint location, or give one with "
                                          r"DurableMapState.factory\(directory=\.\.\.\)"):
        DurableMapState.factory(OPAQUE).make_state("counts", None)
    with pytest.raises(ConfigError, match="'hdfs://nn/ck' is not a local directory"):
        DurableMapState.factory().make_state("counts", "hdfs://nn/ck")


def test_durable_batches_larger_than_a_statement_and_a_page(tmp_path):
    keys = [(f"w{i}", i % 7) for i in range(2345)]
    state = DurableMapState.factory(OPAQUE).make_state("big", str(tmp_path))
    assert state.multi_update(1, keys, [add(i) for i in range(len(keys))]) == list(
        range(len(keys)))
    assert state.multi_update(2, keys[::-1], [add(1)] * len(keys)) == [
        i + 1 for i in reversed(range(len(keys)))]
    assert counts(state) == {k: i + 1 for i, k in enumerate(keys)}
    assert state.multi_get([*keys[1000:1003], ("absent", 0)]) == [1001, 1002, 1003, None]


def test_equal_keys_are_one_key_whatever_their_objects(tmp_path):
    # pickle writes an object seen twice as a back-reference: ("ab", "ab") made of one string
    # object must still be the same stored key as one made of two equal strings
    one = "".join(["a", "b"])
    state = DurableMapState.factory(NON_TX).make_state("pairs", str(tmp_path))
    state.multi_update(1, [(one, one)], [add(1)])
    state.multi_update(2, [("ab", "".join(["a", "b"]))], [add(1)])
    assert counts(state) == {("ab", "ab"): 2}


def test_a_state_type_cannot_change_between_runs(tmp_path):
    DurableMapState.factory(OPAQUE).make_state("counts", str(tmp_path)).multi_update(
        1, [("a",)], [add(1)])
    for state_type in (TX, NON_TX):
        state = DurableMapState.factory(state_type).make_state("counts", str(tmp_path))
        with pytest.raises(MapStateError, match=r"state 'counts', key \('a',\): the store holds "
                                                r"a OpaqueValue.*cannot change between runs"):
            state.multi_update(2, [("a",)], [add(1)])


def test_durable_state_is_used_from_another_thread(tmp_path):
    state = DurableMapState.factory().make_state("counts", str(tmp_path))
    state.multi_update(1, [("a",)], [add(1)])
    errors: list[BaseException] = []

    def batch() -> None:
        try:
            state.multi_update(2, [("a",)], [add(1)])
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=batch)
    t.start()
    t.join()
    assert errors == []
    assert state.multi_get([("a",)]) == [2]


# ---- pickling, repr, equality ------------------------------------------------------------------
def test_factories_pickle_compare_and_print(tmp_path):
    factories: list[Any] = [
        MemoryMapState.factory(OPAQUE),
        DurableMapState.factory(NON_TX, directory=str(tmp_path)),
        DurableMapState.factory("opaque"),
        RedisMapState.factory(TX, host="db", port=6390, password="secret", key_prefix="p:"),
    ]
    for factory in factories:
        assert isinstance(factory, StateFactory)
        copy = cloudpickle.loads(cloudpickle.dumps(factory))
        assert copy == factory and hash(copy) == hash(factory) and repr(copy) == repr(factory)
    assert repr(factories[0]) == "MemoryMapState.factory(StateType.OPAQUE)"
    assert repr(factories[1]) == (f"DurableMapState.factory(StateType.NON_TRANSACTIONAL, "
                                  f"directory={str(tmp_path)!r})")
    assert factories[2] == DurableMapState.factory(OPAQUE)
    assert factories[2] != DurableMapState.factory(TX)
    assert repr(factories[3]) == (
        "RedisMapState.factory(StateType.TRANSACTIONAL, host='db', port=6390, database=0, "
        "password='***', timeout=5, key_prefix='p:')")
    assert "secret" not in repr(factories[3].make_partition("counts", None, 0))


def test_a_durable_state_pickles_by_path_and_reconnects(tmp_path):
    state = DurableMapState.factory(OPAQUE).make_state("counts", str(tmp_path))
    state.multi_update(1, [("a",)], [add(1)])
    copy = cloudpickle.loads(cloudpickle.dumps(state))
    assert isinstance(copy, PartitionedMap) and copy.state_type is OPAQUE
    assert all(isinstance(p, OpaqueMap) for p in copy.parts) and copy.name == "counts"
    assert [p.backing.path for p in copy.parts] == [p.backing.path for p in state.parts]
    copy.multi_update(2, [("a",)], [add(1)])
    assert state.multi_get([("a",)]) == [2]
    state.close()
    assert state.multi_get([("a",)]) == [2]  # reopens after close


def test_wrappers_over_a_user_backing_map():
    class Backing:
        def __init__(self) -> None:
            self.data: dict = {}
            self.calls: list[str] = []

        def multi_get(self, keys):
            self.calls.append("get")
            return [self.data.get(k) for k in keys]

        def multi_put(self, keys, values):
            self.calls.append("put")
            self.data.update(zip(keys, values, strict=True))

        def items(self):
            return iter(list(self.data.items()))

        def close(self) -> None:
            pass

    backing = Backing()
    assert isinstance(backing, BackingMap)
    state = TransactionalMap(backing, name="mine")
    state.multi_update(1, [("a",), ("b",), ("c",)], [add(1)] * 3)
    state.multi_update(1, [("a",), ("b",), ("c",)], [add(1)] * 3)
    assert backing.calls == ["get", "put", "get"]  # one read, one write; a replay writes nothing
    assert repr(state).startswith("TransactionalMap(") and "name='mine'" in repr(state)
    assert isinstance(NonTransactionalMap(backing), MapState)
    with pytest.raises(MapStateError, match="needs a backing map with multi_get"):
        OpaqueMap(object(), name="bad")  # type: ignore[arg-type]


# ---- argument errors -------------------------------------------------------------------------
def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"DurableMapState\.factory: state_type must be one "
                                          r"of StateType\.NON_TRANSACTIONAL, "
                                          r"StateType\.TRANSACTIONAL, StateType\.OPAQUE"):
        DurableMapState.factory("exactly_once")
    with pytest.raises(ConfigError, match=r"MemoryMapState\.factory: state_type"):
        MemoryMapState.factory(1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a directory must be a path, got 5"):
        DurableMapState.factory(directory=5)  # type: ignore[arg-type]
    for kwargs, text in (({"port": "6379"}, "port must be an int"),
                         ({"port": 0}, "port must be an int"),
                         ({"database": -1}, "database must be an int >= 0"),
                         ({"timeout": 0}, "timeout must be a number of seconds > 0"),
                         ({"password": 123}, "password must be a string or None"),
                         ({"host": ""}, "host must be a non-empty string")):
        with pytest.raises(ConfigError, match=f"RedisMapState.factory: {text}"):
            RedisMapState.factory(**kwargs)
    with pytest.raises(ConfigError, match="a state's name must be a non-empty string"):
        DurableMapState.factory().make_state("", str(tmp_path))
    state = MemoryMapState.factory().make_state("counts", None)
    for txid, text in ((0, "txids start at 1"), ("1", "a txid must be an int"),
                       (True, "a txid must be an int")):
        with pytest.raises(MapStateError, match=f"state 'counts': {text}"):
            state.multi_update(txid, [("a",)], [add(1)])  # type: ignore[arg-type]
    for keys, text in (([["a"]], r"a key must be a tuple of the group-by values, such as "
                                 r"\('the',\); got \['a'\]"),
                       (("a",), "keys must be a list of tuples"),
                       ([("a",), ("a",)], "the keys of one update must be distinct"),
                       ([([1],)], "keys must be hashable")):
        with pytest.raises(MapStateError, match=text):
            state.multi_update(1, keys, [add(1)] * len(keys))  # type: ignore[arg-type]
    with pytest.raises(MapStateError, match="2 keys but 1 updaters or values"):
        state.multi_update(1, [("a",), ("b",)], [add(1)])
    with pytest.raises(MapStateError, match="2 keys but 1 updaters or values"):
        state.multi_put(1, [("a",), ("b",)], [1])
    assert state.multi_get([]) == [] and state.multi_update(1, [], []) == []


# ---- Redis -------------------------------------------------------------------------------------
def test_redis_state_is_one_hash_per_partition(redis_server):
    prefix = f"test:{uuid.uuid4().hex}:"
    factory = RedisMapState.factory(TX, port=redis_server.port, key_prefix=prefix)
    state = factory.make_state("counts", "/any/location")
    state.multi_update(1, [("the",), ("cow",)], [add(1), add(1)])
    the, cow = partition_indexes([("the",), ("cow",)], 8)
    assert sorted(redis_server.client.keys(prefix + "*")) == sorted(
        {prefix + "counts:partitions", prefix + "counts:partitioning", f"{prefix}counts:p{the}",
         f"{prefix}counts:p{cow}"})
    assert redis_server.client.get(prefix + "counts:partitions") == "8"
    assert redis_server.client.get(prefix + "counts:partitioning") == PARTITIONING
    assert redis_server.client.hlen(f"{prefix}counts:p{the}") == (2 if the == cow else 1)
    assert counts(factory.make_state("counts", None)) == {("the",): 1, ("cow",): 1}
    keys = [(f"w{i}",) for i in range(12_345)]  # more than one HMGET / HSET and HSCAN page
    state.multi_update(2, keys, [add(1)] * len(keys))
    assert state.multi_get([*keys[-2:], ("the",)]) == [1, 1, 1]
    assert len(counts(state)) == 12_347
    copy = cloudpickle.loads(cloudpickle.dumps(state))
    assert copy.multi_get([("the",)]) == [1]


def no_retries(state: MapState) -> MapState:
    """The state with its client's retries off (redis-py retries a failed command 10 times with
    backoff, about 4 s; the errors are what these tests check)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    state.backing.client.set_retry(Retry(NoBackoff(), 0))  # type: ignore[attr-defined]
    return state


def test_redis_failures_are_clear_errors(tmp_path):
    down = no_retries(RedisMapState.factory(port=free_port(), timeout=0.5).make_partition(
        "counts", None, 2))
    with pytest.raises(MapStateError, match=r"redis map state 'counts' \(hash "
                                            r"'squall:trident:counts:p2' at 127.0.0.1:\d+.*"
                                            r"reachable"):
        down.multi_get([("a",)])
    with start_redis(tmp_path, password="right") as server:
        for password in ("wrong", None):
            wrong = no_retries(RedisMapState.factory(port=server.port, password=password)
                               .make_partition("c", None, 0))
            with pytest.raises(MapStateError, match="check the password"):
                wrong.multi_update(1, [("a",)], [add(1)])
            # Making the state reads its number of partitions: the same clear error.
            with pytest.raises(MapStateError, match="check the password"):
                RedisMapState.factory(port=server.port, password=password).make_state("c", None)
        right = RedisMapState.factory(port=server.port, password="right").make_state("c", None)
        assert right.multi_update(1, [("a",)], [add(1)]) == [1]


def test_an_opaque_replay_without_a_key_rolls_back_what_the_first_attempt_wrote(tmp_path):
    # A first attempt of txid 2 wrote "a" and "b", then the process died before the commit
    # record; the opaque spout's replay of txid 2 has no "b" (its tuple comes in txid 3).
    factory = DurableMapState.factory(StateType.OPAQUE, directory=str(tmp_path))

    def add(n):
        return lambda old: (old or 0) + n

    def batch(state, txid, keys, commit=True):
        state.begin_commit(txid)
        state.multi_update(txid, keys, [add(1) for _ in keys])
        if commit:
            state.commit(txid)

    s = factory.make_state("c", None)
    batch(s, 1, [("a",)])
    batch(s, 2, [("a",), ("b",)], commit=False)
    s.close()
    s = factory.make_state("c", None)
    batch(s, 2, [("a",)])
    batch(s, 3, [("b",)])
    assert dict(s.items()) == {("a",): 2, ("b",): 1}
    s.close()


def test_repartition_keeps_every_entry_and_an_opaque_replays_rollback(tmp_path):
    """An opaque state whose txid 2 was written but not committed, rewritten into another
    number of partitions: entries keep their txids, and the replay of txid 2 still rolls back
    what its first attempt wrote (a key only that attempt had is absent again)."""
    location = str(tmp_path)
    factory = DurableMapState.factory(OPAQUE, partitions=4)
    state = factory.make_state("counts", location)
    keys = [(f"k{i}",) for i in range(40)]
    state.begin_commit(1)
    state.multi_update(1, keys, [add(1)] * 40)
    state.commit(1)
    state.begin_commit(2)
    state.multi_update(2, [*keys[:10], ("only-in-attempt",)], [add(5)] * 11)  # then a kill
    state.close()
    directory = factory.state_directory("counts", location)
    assert repartition(directory, "counts", 3) == 4
    moved = DurableMapState.factory(OPAQUE).make_state("counts", location)
    assert moved.partitions == 3
    assert moved.multi_get([keys[0], ("only-in-attempt",)]) == [6, 5]
    moved.begin_commit(2)  # the replay of txid 2
    assert moved.multi_get([keys[0], keys[20], ("only-in-attempt",)]) == [1, 1, None]
    moved.multi_update(2, [keys[0]], [add(2)])
    moved.commit(2)
    assert dict(moved.items()) == {**{k: 1 for k in keys}, keys[0]: 3}


def test_a_state_partitioned_by_another_function_is_refused_until_rewritten(tmp_path):
    """A store whose record names another partition function (or none: the crc32 of the pickle
    of an earlier version) is refused, naming the command; `squall state repartition` to the
    same number rewrites every key into the partition of today's function."""
    location = str(tmp_path)
    factory = DurableMapState.factory(TX, partitions=4)
    state = factory.make_state("counts", location)
    keys = [(f"k{i}",) for i in range(40)]
    state.multi_update(1, keys, [add(1)] * 40)
    state.close()
    directory = factory.state_directory("counts", location)
    meta = Path(directory) / "partitions.json"
    record = json.loads(meta.read_text())
    del record["partitioning"]
    meta.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="squall state repartition CHECKPOINT counts -n 4"):
        factory.make_state("counts", location)
    with pytest.raises(ConfigError, match="crc32-pickle"):
        factory.make_partition("counts", location, 0)
    assert repartition(directory, "counts", 4) == 4
    again = factory.make_state("counts", location)
    try:
        assert dict(again.items()) == dict.fromkeys(keys, 1)
        for index, part in enumerate(again.parts):
            assert set(partition_indexes(list(dict(part.items())), 4)) <= {index}
    finally:
        again.close()


@pytest.mark.parametrize("new_complete", [True, False])
def test_a_repartition_killed_between_its_renames_leaves_one_whole_state(tmp_path, new_complete):
    location = str(tmp_path)
    factory = DurableMapState.factory(TX, partitions=2)
    state = factory.make_state("counts", location)
    state.multi_update(1, [("a",), ("b",), ("c",)], [add(1)] * 3)
    state.close()
    directory = factory.state_directory("counts", location)
    shutil.copytree(directory, tmp_path / "before")
    repartition(directory, "counts", 5)
    # As if killed after the first rename: the old state moved aside, the new one beside it,
    # whole (its partitions file written) or not.
    os.rename(directory, directory + ".new")
    shutil.copytree(tmp_path / "before", directory + ".old")
    if not new_complete:
        os.remove(os.path.join(directory + ".new", "partitions.json"))
    restarted = DurableMapState.factory(TX).make_state("counts", location)
    assert restarted.partitions == (5 if new_complete else 2)
    assert dict(restarted.items()) == {("a",): 1, ("b",): 1, ("c",): 1}
    assert not os.path.exists(directory + ".old") and not os.path.exists(directory + ".new")


def test_a_redis_state_of_one_hash_is_moved_into_partitions(redis_server):
    """A state an earlier version kept in one hash (`<prefix><name>`) is moved into the
    partitions when first opened; a second opener finds the partitions and asking for another
    number is refused."""
    prefix = f"test:{uuid.uuid4().hex}:"
    old = RedisMapState("counts", port=redis_server.port, key_prefix=prefix)
    old.multi_put([("the",), ("cow",)], [TransactionalValue(3, 5), TransactionalValue(2, 1)])
    factory = RedisMapState.factory(TX, port=redis_server.port, key_prefix=prefix, partitions=4)
    state = factory.make_state("counts", None)
    assert counts(state) == {("the",): 5, ("cow",): 1}
    assert not redis_server.client.exists(prefix + "counts")
    assert state.multi_add(3, [("the",), ("cow",)], [1, 1]) == [5, 2]  # txid 3 was in already
    with pytest.raises(ConfigError, match=r"redis map state 'counts' has 4 partitions .* asks "
                                          r"for 2 .* or use another state name or key_prefix"):
        RedisMapState.factory(TX, port=redis_server.port, key_prefix=prefix,
                              partitions=2).make_state("counts", None)
