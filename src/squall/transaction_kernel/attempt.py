"""`TransactionAttempt`: which transaction a batch belongs to, and which try of it.

Transaction ids start at 1 and grow by one; the attempt id changes every time a transaction is
emitted again (after a failure, a timeout or a restart), so tuples of an abandoned try can be told
apart from the live one. Equality of the whole pair is what matters (Storm's rule).

>>> a = TransactionAttempt(3, 1)
>>> a.transaction_id, a.attempt_id, a == TransactionAttempt(3, 1), a == TransactionAttempt(3, 2)
(3, 1, True, False)
"""

from __future__ import annotations

from typing import NamedTuple


class TransactionAttempt(NamedTuple):
    """(transaction id, attempt id). A named tuple: cheap to compare, hash and pickle."""

    transaction_id: int
    attempt_id: int

    @property
    def txid(self) -> int:
        return self.transaction_id

    def __repr__(self) -> str:
        return f"TransactionAttempt(tx={self.transaction_id}, attempt={self.attempt_id})"
