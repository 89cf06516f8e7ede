"""Transactional topologies: exactly-once batches (Storm's `org.apache.storm.transactional`).

See docs/design/transactional.md. Build with `TransactionalTopologyBuilder`, run with
`squall.run` on either runner.
"""

from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.progress_store import STORE, open_store
from squall.transaction_kernel.spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from squall.transaction_kernel.values import OpaqueValue, TransactionalValue, TransactionOrderError
from squall.transactional.bolts import BatchBolt, BatchOutputCollector, Committer
from squall.transactional.builder import TransactionalTopologyBuilder, is_transactional
from squall.transactional.coordinator import Coordinator
from squall.transactional.kafka_spout import KafkaOpaqueSpout, KafkaTransactionalSpout
from squall.transactional.map_state import OpaqueMap, TransactionalMap, open_map
from squall.transactional.redis_spout import RedisStreamOpaqueSpout, RedisStreamTransactionalSpout
from squall.transactional.spouts import MemoryTransactionalSpout

__all__ = [
    "STORE",
    "BatchBolt",
    "BatchOutputCollector",
    "Committer",
    "Coordinator",
    "KafkaOpaqueSpout",
    "KafkaTransactionalSpout",
    "MemoryTransactionalSpout",
    "OpaqueMap",
    "OpaquePartitionedTransactionalSpout",
    "OpaqueValue",
    "PartitionedTransactionalSpout",
    "RedisStreamOpaqueSpout",
    "RedisStreamTransactionalSpout",
    "TransactionAttempt",
    "TransactionOrderError",
    "TransactionalMap",
    "TransactionalSpout",
    "TransactionalTopologyBuilder",
    "TransactionalValue",
    "is_transactional",
    "open_map",
    "open_store",
]
