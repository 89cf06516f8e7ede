"""Connectors: built-in terminal bolts that write a topology's output somewhere durable.

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
    read_jsonl,
    read_parquet,
)

__all__ = [
    "BatchSink",
    "JsonLinesSink",
    "ParquetSink",
    "RedisSink",
    "SinkError",
    "read_jsonl",
    "read_parquet",
]
