"""The progress store (`squall.transactional.progress_store` names it in the configuration),
under the name that snapshots written by earlier versions pickled its stores by; it lives in
`squall.transaction_kernel.progress_store`."""

from squall.transaction_kernel.progress_store import (
    STORE,
    DirStore,
    MemoryStore,
    RedisMetaStore,
    Store,
    TransactionalStoreError,
    open_store,
)

__all__ = ["STORE", "DirStore", "MemoryStore", "RedisMetaStore", "Store",
           "TransactionalStoreError", "open_store"]
