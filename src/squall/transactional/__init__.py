"""Transactional topologies: exactly-once batches (Storm's `org.apache.storm.transactional`).

See docs/design/transactional.md. Build with `TransactionalTopologyBuilder`, run with
`squall.run` on either runner.
"""

from squall.transactional.attempt import TransactionAttempt
from squall.transactional.bolts import BatchBolt, BatchOutputCollector, Committer
from squall.transactional.builder import TransactionalTopologyBuilder, is_transactional
from squall.transactional.coordinator import Coordinator
from squall.transactional.kafka_spout import KafkaOpaqueSpout, KafkaTransactionalSpout
from squall.transactional.map_state import TransactionalMap, open_map
from squall.transactional.progress_store import STORE, open_store
from squall.transactional.redis_spout import RedisStreamOpaqueSpout, RedisStreamTransactionalSpout
from squall.transactional.spouts import (
    MemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from squall.transactional.values import OpaqueValue, TransactionalValue, TransactionOrderError

__all__ = [
    "STORE",
    "BatchBolt",
    "BatchOutputCollector",
    "Committer",
    "Coordinator",
    "KafkaOpaqueSpout",
    "KafkaTransactionalSpout",
    "MemoryTransactionalSpout",
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
