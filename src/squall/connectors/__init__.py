"""Connectors: built-in sources (partitioned, read on Spark's executors) and sinks (terminal
bolts that write a topology's output somewhere durable, once per batch).

>>> from squall.connectors import JsonLinesSink, ParquetSink, RedisSink, read_jsonl, read_parquet
>>> JsonLinesSink("/tmp/out").declared_streams()
{}
"""

from squall.components.batch_sink import BatchSink, SinkError, SinkWriteError
from squall.components.partitioned_source import (
    MalformedRecord,
    PartitionedSource,
    Range,
    SourceError,
)
from squall.connectors.kafka import KafkaSink, KafkaSource
from squall.connectors.sinks import JsonLinesSink, ParquetSink, RedisSink, read_jsonl, read_parquet
from squall.connectors.sources import (
    CsvSource,
    JsonLinesSource,
    MemorySource,
    ParquetSource,
    RedisStreamSource,
)
from squall.trident.state.kafka import KafkaStateFactory, KafkaStateUpdater

__all__ = [
    "BatchSink",
    "CsvSource",
    "JsonLinesSink",
    "JsonLinesSource",
    "KafkaSink",
    "KafkaSource",
    "KafkaStateFactory",
    "KafkaStateUpdater",
    "MalformedRecord",
    "MemorySource",
    "ParquetSink",
    "ParquetSource",
    "PartitionedSource",
    "Range",
    "RedisSink",
    "RedisStreamSource",
    "SinkError",
    "SinkWriteError",
    "SourceError",
    "read_jsonl",
    "read_parquet",
]
