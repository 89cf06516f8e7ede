"""Connectors: built-in sources (partitioned, read on Spark's executors) and sinks (terminal
bolts that write a topology's output somewhere durable, once per batch).

>>> from squall.connectors import JsonLinesSink, ParquetSink, RedisSink, read_jsonl, read_parquet
>>> JsonLinesSink("/tmp/out").declared_streams()
{}
"""

from squall.connectors.sinks import (
    BatchSink,
    JsonLinesSink,
    ParquetSink,
    RedisSink,
    SinkError,
    SinkWriteError,
    read_jsonl,
    read_parquet,
)
from squall.connectors.sources import (
    CsvSource,
    JsonLinesSource,
    MalformedRecord,
    MemorySource,
    PartitionedSource,
    Range,
    RedisStreamSource,
    SourceError,
)

__all__ = [
    "BatchSink",
    "CsvSource",
    "JsonLinesSink",
    "JsonLinesSource",
    "MalformedRecord",
    "MemorySource",
    "ParquetSink",
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
