"""Storm's map states: maps updated a transaction at a time, idempotently when each entry carries
the txid that last wrote it.

One implementation, shared by Trident's states (`squall.trident.state` re-exports this module's
classes) and a transactional topology's committer maps (`squall.transactional.open_map`). A
`MapState` wraps a `BackingMap` (Storm's `IBackingMap`: stored entries by key, read and written in
bulk) and applies the rule of its `StateType`:

- `TransactionalMap` stores `TransactionalValue(txid, value)`. A key already written by this
  txid is left as it is: a transactional spout replays a batch with the same content, so its
  update is already in.
- `OpaqueMap` stores `OpaqueValue(txid, current, previous)`. A key already written by this txid
  is recomputed from `previous`: an opaque spout may replay a batch with other content.
- `NonTransactionalMap` stores the plain value. A replayed batch is applied again, so counts may
  come out too high after a failure (Storm's non-transactional state: at least once).

Two ways to update, over the same rule: Trident's `multi_update(txid, keys, updaters)` returns
the new user values; a committer's `update(txid, {key: fn}, initial)` returns the new stored
entries (`initial` is the old value of an absent key). Each reads all its keys with one
`BackingMap.multi_get` and writes the changed ones with one `BackingMap.multi_put`, which a
durable backing map makes one atomic write: after a crash, a batch is either wholly in the map or
not at all, and replaying it gives the same map. An update for a txid older than one a key was
already written by raises `TransactionOrderError`; with `check_order=False` (a committer map) a
`TransactionalMap` applies it, as Storm's does.

>>> class Backing:   # a backing map in a dict
...     def __init__(self): self.d = {}
...     def multi_get(self, keys): return [self.d.get(k) for k in keys]
...     def multi_put(self, keys, values): self.d.update(zip(keys, values))
...     def items(self): return iter(list(self.d.items()))
...     def close(self): pass
>>> counts = TransactionalMap(Backing(), name="counts")
>>> counts.multi_update(1, [("the",), ("cow",)], [lambda old: (old or 0) + 2] * 2)
[2, 2]
>>> counts.multi_update(1, [("the",)], [lambda old: (old or 0) + 2])   # replay of txid 1
[2]
>>> counts.update(2, {("the",): lambda n: n + 1}, initial=0)
{('the',): TransactionalValue(txid=2, value=3)}
>>> counts.values()
{('the',): 3, ('cow',): 2}
"""

from __future__ import annotations

import abc
import enum
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from squall.errors import ConfigError, SquallError
from squall.transaction_kernel.values import OpaqueValue, TransactionalValue, TransactionOrderError

Updater = Callable[[Any], Any]
"""Computes a key's new value from its old one (None when the key is absent)."""


class StateType(enum.Enum):
    """How a map state applies a batch; with the spout's kind it decides the guarantee.

    With a transactional spout, `TRANSACTIONAL` and `OPAQUE` give exactly-once; with an opaque
    spout only `OPAQUE` does; `NON_TRANSACTIONAL` gives at-least-once (Storm's table in
    `docs/Trident-state.md`).
    """

    NON_TRANSACTIONAL = "non_transactional"
    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"


class MapStateError(SquallError):
    """A map state was used wrongly (bad txid, keys or updaters) or its store failed."""


@runtime_checkable
class BackingMap(Protocol):
    """Stored entries by key (Storm's `IBackingMap`); the `MapState` wrappers decide what an
    entry is (`TransactionalValue`, `OpaqueValue` or the plain value).

    Keys are tuples (Trident's group-by values) unless the backing map has a class attribute
    `tuple_keys = False`: then any hashable key its store can hold (a committer map's).
    """

    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any | None]:
        """The entries of `keys`, in order; None for an absent key."""
        ...

    def multi_put(self, keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> None:
        """Store `values[i]` under `keys[i]`, all of them in one atomic write."""
        ...

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, entry), in no particular order."""
        ...

    def close(self) -> None:
        """Release connections; a later call reopens them."""
        ...


def state_type_of(value: Any, owner: str) -> StateType:
    """`value` as a `StateType` (a member, or its value such as "opaque")."""
    if isinstance(value, StateType):
        return value
    if isinstance(value, str):
        try:
            return StateType(value.lower())
        except ValueError:
            pass
    choices = ", ".join(f"StateType.{t.name}" for t in StateType)
    raise ConfigError(f"{owner}: state_type must be one of {choices} (or its value, such as "
                      f"'opaque'); got {value!r}")


class MapState(abc.ABC):
    """Base of the three wrappers; a `MapState` is Storm's `MapState` plus its `State` methods.

    `begin_commit(txid)` and `commit(txid)` bracket a batch, as in Storm; the txid is also passed
    to each update, so they are optional, but when a batch is open an update for another txid is
    an error. `current_txid` is the open batch (None between batches) and `committed_txid` the
    last batch committed through this object (in this process only: what a restart needs is in
    the stored entries).

    `check_order=False` leaves out the order checks Storm's maps do not make: txids older than
    one this object already applied, and (`TransactionalMap`) a stored txid newer than the
    update's. An `OpaqueValue` refuses an older txid whatever this says.
    """

    state_type: ClassVar[StateType]
    check_order: bool = True
    tuple_keys: bool = True

    def __init__(self, backing: BackingMap, name: str | None = None, *,
                 check_order: bool = True) -> None:
        label = name if name is not None else getattr(backing, "name", None)
        self.name: str = label if isinstance(label, str) and label else type(backing).__name__
        if not isinstance(backing, BackingMap):
            raise MapStateError(f"state {self.name!r}: {type(self).__name__} needs a backing map "
                                "with multi_get, multi_put, items and close (such as "
                                f"DurableMapState); got {backing!r}")
        self.backing = backing
        self.check_order = check_order
        self.tuple_keys = getattr(backing, "tuple_keys", True) is not False
        self.current_txid: int | None = None
        self.committed_txid: int | None = None
        self._last_txid: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.backing!r}, name={self.name!r})"

    # ---- Storm's State -------------------------------------------------------------------------
    def begin_commit(self, txid: int) -> None:
        """A batch starts: updates until `commit` are for `txid` (a retry of a failed batch
        begins the same txid again)."""
        self.current_txid = self._check_txid(txid)

    def commit(self, txid: int) -> None:
        """The batch `txid` is done."""
        txid = self._txid(txid)
        if self.current_txid is not None and txid != self.current_txid:
            raise MapStateError(f"state {self.name!r}: commit of transaction {txid}, but "
                                f"transaction {self.current_txid} began")
        self.current_txid = None
        self.committed_txid = txid

    # ---- Storm's MapState ----------------------------------------------------------------------
    def multi_get(self, keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The user values of `keys`, in order; None for an absent key."""
        keys = self._check_keys(keys)
        return [self._user_value(key, entry)
                for key, entry in zip(keys, self.backing.multi_get(keys), strict=True)]

    @abc.abstractmethod
    def multi_update(self, txid: int, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Updater]) -> list[Any]:
        """Apply `updaters[i]` to the value of `keys[i]` for batch `txid`, following the state
        type's rule; returns the new user values in key order. Keys must be distinct. One read
        of the backing map, then at most one write."""

    def update(self, txid: int, changes: Mapping[Any, Updater],
               initial: Any = None) -> dict[Any, Any]:
        """A committer's `multi_update`: apply `changes[key](old value)` for transaction `txid`,
        `initial` being the old value of an absent key; returns the new stored entries by key
        (`TransactionalValue`s, `OpaqueValue`s or plain values)."""
        keys = list(changes)
        entries = self._apply(txid, keys, list(changes.values()), initial)
        return dict(zip(keys, entries, strict=True))

    def multi_put(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> None:
        """Overwrite the values of `keys` for batch `txid`, with the same txid rules as
        `multi_update`."""
        self.multi_update(txid, keys, [_Constant(v) for v in values])

    def multi_add(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> list[Any]:
        """`multi_update` with the updaters `old + value` (`value` for an absent key): the
        combine of `Count` and `Sum`, which a backing map may apply in bulk, in one
        transaction (`add_transactional`: `DurableMapState`'s in SQL, `LmdbMapState`'s with
        each key encoded once and no value objects)."""
        return self.multi_update(txid, keys, [Adder(v) for v in values])

    def _store_add(self, rule: type[MapState], method: str, txid: int,
                   keys: Sequence[tuple[Any, ...]], values: Sequence[Any]) -> list[Any] | None:
        """`multi_add` by the backing map's bulk add `method` (`rule`'s `multi_update` done in
        the store, e.g. `add_transactional`), when the map has one and this class keeps
        `rule`'s `multi_update` (a subclass that overrides it keeps seeing every update). None
        when it does not apply or the store declines the batch (SQL's big ints, an entry of
        another type, an out-of-order txid): the caller then takes the general way, which
        reports the errors."""
        add = getattr(self.backing, method, None)
        if add is None or type(self).multi_update is not rule.multi_update:
            return None
        checked, key_list = self._check_update(txid, keys, values)
        done = add(checked, key_list, values)
        return None if done is None else list(done)

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, user value), for inspection and tests."""
        for key, entry in self.backing.items():
            yield key, self._user_value(key, entry)

    def close(self) -> None:
        self.backing.close()

    # ---- reading entries -----------------------------------------------------------------------
    def get_entry(self, key: Any) -> Any:
        """The stored entry of `key`; None when it is absent."""
        (entry,) = self.backing.multi_get(self._check_keys([key]))
        return entry

    def get(self, key: Any, default: Any = None) -> Any:
        """The user value of `key`; `default` when it is absent."""
        entry = self.get_entry(key)
        return default if entry is None else self._user_value(key, entry)

    def multi_get_entries(self, keys: Sequence[Any]) -> dict[Any, Any]:
        """The stored entries of `keys` by key; None for an absent key."""
        keys = self._check_keys(keys)
        return dict(zip(keys, self.backing.multi_get(keys), strict=True))

    def entries(self) -> dict[Any, Any]:
        """Every stored entry by key."""
        return dict(self._stored())

    def values(self) -> dict[Any, Any]:
        """Every user value by key."""
        return {key: self._user_value(key, entry) for key, entry in self._stored()}

    # ---- helpers -------------------------------------------------------------------------------
    @abc.abstractmethod
    def _apply(self, txid: int, keys: Sequence[Any], updaters: Sequence[Updater],
               initial: Any) -> list[Any]:
        """The update of `multi_update` and `update`: the new stored entries in key order,
        written; `initial` is the old user value of an absent key."""

    def _stored(self) -> Iterator[tuple[Any, Any]]:
        """The backing map's (key, entry) pairs that hold user keys."""
        return self.backing.items()

    @abc.abstractmethod
    def _user_value(self, key: Any, entry: Any) -> Any:
        """The user's value in the stored `entry` of `key` (None: absent)."""

    def _txid(self, txid: Any) -> int:
        try:
            if isinstance(txid, bool):
                raise TypeError
            value = operator.index(txid)
        except TypeError:
            raise MapStateError(f"state {self.name!r}: a txid must be an int, got "
                                f"{txid!r}") from None
        if value < 1:
            raise MapStateError(f"state {self.name!r}: txids start at 1 (0 means 'never "
                                f"written'), got {value}")
        return value

    def _check_txid(self, txid: Any) -> int:
        """`txid` checked for an update: an int >= 1, the open batch if any, not older than a
        batch this object already applied."""
        txid = self._txid(txid)
        if self.current_txid is not None and txid != self.current_txid:
            raise MapStateError(f"state {self.name!r}: an update for transaction {txid} while "
                                f"transaction {self.current_txid} is open (begin_commit)")
        last = self._last_txid
        if last is not None and txid < last and self.check_order:
            raise TransactionOrderError(
                f"state {self.name!r}: transaction {txid} comes after transaction {last}: "
                "batches must be applied in transaction order")
        self._last_txid = txid
        return txid

    def _check_keys(self, keys: Sequence[Any]) -> list[Any]:
        if not self.tuple_keys:
            return keys if type(keys) is list else list(keys)
        if isinstance(keys, (str, bytes, tuple)):
            raise MapStateError(f"state {self.name!r}: keys must be a list of tuples, such as "
                                f"[('the',), ('cow',)]; got {keys!r}")
        keys = keys if type(keys) is list else list(keys)
        for key in keys:
            if type(key) is not tuple:
                raise MapStateError(f"state {self.name!r}: a key must be a tuple of the group-by "
                                    f"values, such as ('the',); got {key!r}")
        return keys

    def _check_update(self, txid: Any, keys: Sequence[Any],
                      updaters: Sequence[Any]) -> tuple[int, list[Any]]:
        key_list = self._check_keys(keys)
        if len(updaters) != len(key_list):
            raise MapStateError(f"state {self.name!r}: {len(key_list)} keys but {len(updaters)} "
                                "updaters or values; give one per key")
        try:
            distinct = len(set(key_list))
        except TypeError as exc:
            raise MapStateError(f"state {self.name!r}: keys must be hashable ({exc})") from None
        if distinct != len(key_list):
            raise MapStateError(f"state {self.name!r}: the keys of one update must be distinct; "
                                "combine the updates of a key first")
        return self._check_txid(txid), key_list

    def _wrong_entry(self, key: Any, entry: Any, expected: str) -> MapStateError:
        return MapStateError(
            f"state {self.name!r}, key {key!r}: the store holds a {type(entry).__name__}, not "
            f"{expected}: a state's type ({self.state_type.name} here) cannot change between "
            "runs; use another state name or location")

    def _out_of_order(self, key: Any, txid: int, stored: int) -> TransactionOrderError:
        return TransactionOrderError(
            f"state {self.name!r}, key {key!r}: transaction {txid} comes after transaction "
            f"{stored}: batches must be applied in transaction order")


class TransactionalMap(MapState):
    """Storm's `TransactionalMap`: entries are `TransactionalValue`s; a key already written by
    the batch's txid is left as it is (exactly-once with a transactional spout)."""

    state_type = StateType.TRANSACTIONAL

    def multi_update(self, txid: int, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Updater]) -> list[Any]:
        return [entry.value for entry in self._apply(txid, keys, updaters, None)]

    def _apply(self, txid: int, keys: Sequence[Any], updaters: Sequence[Updater],
               initial: Any) -> list[TransactionalValue]:
        txid, keys = self._check_update(txid, keys, updaters)
        stored = self.backing.multi_get(keys)
        out: list[TransactionalValue] = []
        put_keys: list[Any] = []
        put_values: list[TransactionalValue] = []
        for key, entry, fn in zip(keys, stored, updaters, strict=True):
            if entry is None:
                new = TransactionalValue(txid, fn(initial))
            elif type(entry) is not TransactionalValue:
                raise self._wrong_entry(key, entry, "a TransactionalValue")
            elif entry.txid == txid:  # a replay of this batch: its update is already in
                out.append(entry)
                continue
            elif entry.txid > txid and self.check_order:
                raise self._out_of_order(key, txid, entry.txid)
            else:
                new = TransactionalValue(txid, fn(entry.value))
            out.append(new)
            put_keys.append(key)
            put_values.append(new)
        if put_keys:
            self.backing.multi_put(put_keys, put_values)
        return out

    def multi_add(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> list[Any]:
        done = self._store_add(TransactionalMap, "add_transactional", txid, keys, values)
        return super().multi_add(txid, keys, values) if done is None else done

    def _user_value(self, key: Any, entry: Any) -> Any:
        if entry is None:
            return None
        if type(entry) is not TransactionalValue:
            raise self._wrong_entry(key, entry, "a TransactionalValue")
        return entry.value


# The opaque map's record of the keys the batch being applied has written: (txid, keys).
BATCH_KEYS = ("$squall:opaque-batch-keys",)


class OpaqueMap(MapState):
    """Storm's `OpaqueMap`: entries are `OpaqueValue`s; a key already written by the batch's
    txid is recomputed from its value before that batch (exactly-once with an opaque spout,
    whose replay of a batch may differ).

    One thing Storm's does not do: a replay of a batch may leave out keys an earlier attempt of
    the same txid wrote (the opaque spout emitted other tuples), and their values must not keep
    that attempt's update. So every write also records, in the same atomic `multi_put`, which
    keys the txid has written (`BATCH_KEYS`), and `begin_commit` of a txid that already has
    such a record (a replay) first rolls those keys back to their values before the txid.
    `record_batch_keys=False` leaves the record out (Storm's rule alone): a committer map is
    written by several tasks in one transaction, and one record could not list all their keys.
    """

    state_type = StateType.OPAQUE
    record_batch_keys: bool = True

    def __init__(self, backing: BackingMap, name: str | None = None, *,
                 check_order: bool = True, record_batch_keys: bool = True) -> None:
        super().__init__(backing, name, check_order=check_order)
        self.record_batch_keys = record_batch_keys

    def begin_commit(self, txid: int) -> None:
        super().begin_commit(txid)
        if not self.record_batch_keys:
            return
        (record,) = self.backing.multi_get([BATCH_KEYS])
        if record is None or record[0] != txid or not record[1]:
            return
        # A replay of txid: undo what the earlier attempt wrote; this attempt writes again.
        keys = list(record[1])
        undone: list[Any] = []
        for entry in self.backing.multi_get(keys):
            if type(entry) is OpaqueValue and entry.txid == txid:
                undone.append(OpaqueValue(txid, entry.previous, entry.previous))
            else:
                undone.append(entry)
        self.backing.multi_put([*keys, BATCH_KEYS], [*undone, (txid, ())])

    def items(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        for key, entry in self._stored():
            value = self._user_value(key, entry)
            if value is not None:  # None: a key only a rolled-back attempt had written
                yield key, value

    def _stored(self) -> Iterator[tuple[Any, Any]]:
        return ((key, entry) for key, entry in self.backing.items() if key != BATCH_KEYS)

    def multi_update(self, txid: int, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Updater]) -> list[Any]:
        return [entry.current for entry in self._apply(txid, keys, updaters, None)]

    def _apply(self, txid: int, keys: Sequence[Any], updaters: Sequence[Updater],
               initial: Any) -> list[OpaqueValue]:
        txid, keys = self._check_update(txid, keys, updaters)
        recorded = self.record_batch_keys
        stored = self.backing.multi_get([*keys, BATCH_KEYS] if recorded else keys)
        record = stored.pop() if recorded else None
        written = tuple(record[1]) if record is not None and record[0] == txid else ()
        out: list[OpaqueValue] = []
        for key, entry, fn in zip(keys, stored, updaters, strict=True):
            if entry is None:
                new = OpaqueValue(txid, fn(initial), initial)
            elif type(entry) is not OpaqueValue:
                raise self._wrong_entry(key, entry, "an OpaqueValue")
            elif entry.txid > txid:
                raise self._out_of_order(key, txid, entry.txid)
            else:  # OpaqueValue's rule: a newer txid builds on current, the same on previous
                new = entry.update(txid, fn)
            out.append(new)
        if keys and recorded:
            seen = set(written)
            record_keys = written + tuple(k for k in keys if k not in seen)
            self.backing.multi_put([*keys, BATCH_KEYS], [*out, (txid, record_keys)])
        elif keys:
            self.backing.multi_put(keys, out)
        return out

    def multi_add(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> list[Any]:
        done = self._store_add(OpaqueMap, "add_opaque", txid, keys, values)
        return super().multi_add(txid, keys, values) if done is None else done

    def _user_value(self, key: Any, entry: Any) -> Any:
        if entry is None:
            return None
        if type(entry) is not OpaqueValue:
            raise self._wrong_entry(key, entry, "an OpaqueValue")
        return entry.current


class NonTransactionalMap(MapState):
    """Storm's `NonTransactionalMap`: entries are the plain values and every update is applied,
    a replayed batch too, so values can be inexact after a failure (at-least-once).

    Stored entries carry no txid, so the order of batches is checked only within this object.
    """

    state_type = StateType.NON_TRANSACTIONAL

    def multi_update(self, txid: int, keys: Sequence[tuple[Any, ...]],
                     updaters: Sequence[Updater]) -> list[Any]:
        return self._apply(txid, keys, updaters, None)

    def _apply(self, txid: int, keys: Sequence[Any], updaters: Sequence[Updater],
               initial: Any) -> list[Any]:
        _, keys = self._check_update(txid, keys, updaters)
        stored = self.backing.multi_get(keys)
        out = [fn(initial if entry is None else self._user_value(key, entry))
               for key, entry, fn in zip(keys, stored, updaters, strict=True)]
        if keys:
            self.backing.multi_put(keys, out)
        return out

    def multi_put(self, txid: int, keys: Sequence[tuple[Any, ...]],
                  values: Sequence[Any]) -> None:
        values = list(values)
        _, keys = self._check_update(txid, keys, values)
        if keys:
            self.backing.multi_put(keys, values)

    def _user_value(self, key: Any, entry: Any) -> Any:
        if type(entry) is TransactionalValue or type(entry) is OpaqueValue:
            raise self._wrong_entry(key, entry, "a plain value")
        return entry


_WRAPPERS: dict[StateType, type[MapState]] = {
    StateType.TRANSACTIONAL: TransactionalMap,
    StateType.OPAQUE: OpaqueMap,
    StateType.NON_TRANSACTIONAL: NonTransactionalMap,
}


def wrap(state_type: StateType, backing: BackingMap, name: str) -> MapState:
    """The `MapState` of `state_type` over `backing`."""
    return _WRAPPERS[state_type_of(state_type, f"state {name!r}")](backing, name)


class Adder:
    """An updater adding `value` to the old value (`multi_add`; `value` for an absent key)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, old: Any) -> Any:
        return self.value if old is None else old + self.value


class _Constant:
    """An updater that ignores the old value (`multi_put`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, _old: Any) -> Any:
        return self.value

