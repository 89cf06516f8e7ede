"""Idempotent values for committers: `TransactionalValue` and `OpaqueValue`.

A committer stores, next to each value, the id of the transaction that last wrote it. A
transaction can be committed more than once (a crash after the store was written but before the
coordinator recorded the commit), so an update must be recognisable as already applied.

Transactional spouts replay exactly the same batch for a transaction id, so one stored txid is
enough: if it equals the batch's, the update is already in (Storm's `TransactionalMap` rule).

>>> v = TransactionalValue.initial(0)
>>> v = v.update(1, lambda x: x + 5)
>>> v.update(1, lambda x: x + 5) == v   # replay of transaction 1: skipped
True
>>> v.update(2, lambda x: x + 1).value
6

Opaque spouts may emit a different batch on replay, so the value before the transaction is kept
too: a replayed transaction starts again from it.

>>> o = OpaqueValue.initial(0).update(1, lambda x: x + 5)   # first try of tx 1 saw 5 tuples
>>> o = o.update(1, lambda x: x + 7)                          # the replay saw 7: from prev
>>> (o.txid, o.current, o.previous)
(1, 7, 0)
>>> o.update(2, lambda x: x + 1).current
8
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squall.errors import SquallError


class TransactionOrderError(SquallError):
    """An opaque value was updated by a transaction older than the one that last wrote it."""


# The name tracebacks show and pickles refer to, as before this module had its own package:
# squall.transactional.values, which re-exports the classes of this module.
TransactionOrderError.__module__ = __name__.replace(".transaction_kernel.", ".transactional.")


@dataclass(frozen=True)
class TransactionalValue:
    """A value and the id of the transaction that last updated it (0: never)."""

    txid: int
    value: Any

    @classmethod
    def initial(cls, value: Any) -> TransactionalValue:
        return cls(0, value)

    def update(self, txid: int, fn: Callable[[Any], Any]) -> TransactionalValue:
        """The value after transaction `txid` applies `fn`; unchanged if `txid` already did."""
        if txid == self.txid:
            return self
        return TransactionalValue(txid, fn(self.value))


@dataclass(frozen=True)
class OpaqueValue:
    """Current value, value before the last transaction, and that transaction's id."""

    txid: int
    current: Any
    previous: Any

    @classmethod
    def initial(cls, value: Any) -> OpaqueValue:
        return cls(0, value, value)

    @property
    def value(self) -> Any:
        return self.current

    def update(self, txid: int, fn: Callable[[Any], Any]) -> OpaqueValue:
        """Storm's opaque rule: a newer txid builds on `current`, the same txid on `previous`."""
        if txid > self.txid:
            return OpaqueValue(txid, fn(self.current), self.current)
        if txid == self.txid:
            return OpaqueValue(txid, fn(self.previous), self.previous)
        raise TransactionOrderError(
            f"transaction {txid} updates an opaque value already written by transaction "
            f"{self.txid}: commits must come in transaction order")
