"""`TransactionalValue` and `OpaqueValue`, under the name that transactional maps written by
earlier versions pickled their entries by; they live in `squall.transaction_kernel.values`."""

from squall.transaction_kernel.values import OpaqueValue, TransactionalValue, TransactionOrderError

__all__ = ["OpaqueValue", "TransactionOrderError", "TransactionalValue"]
