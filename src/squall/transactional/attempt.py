"""`TransactionAttempt`, under the name that snapshots and stores written by earlier versions
pickled it by; it lives in `squall.transaction_kernel.attempt`."""

from squall.transaction_kernel.attempt import TransactionAttempt

__all__ = ["TransactionAttempt"]
