"""Writing the generated stream to files, split into partition files, and reading them back.

- **JSON lines**: one event per line in Beam's event JSON (`squall.nexmark.model.to_json`),
  kinds interleaved in stream order: `events-00000.jsonl`, `events-00001.jsonl`, ...
- **Parquet**: one file per partition with the flat row's columns (`ROW_FIELDS`): an
  `event_type` column and every kind's fields, null where the kind has none, in stream order
  (Flink's nexmark table, whose views select one kind by `event_type`):
  `events-00000.parquet`, ...

Partition `i` of `n` holds the events at positions `i, i + n, i + 2n, ...` of the stream, as
`NexmarkSource`'s partitions do, so every file is in event-time order (up to the configured
out-of-order groups and delays) and the files together are the whole stream.

>>> import tempfile
>>> from squall.nexmark.generator import GeneratorConfig, events
>>> d = tempfile.mkdtemp()
>>> config = GeneratorConfig(max_events=120)
>>> [p.rsplit("/", 1)[1] for p in write_json_lines(config, d, partitions=2)]
['events-00000.jsonl', 'events-00001.jsonl']
>>> sorted(read_json_lines(d), key=lambda e: e.date_time) == list(events(config))
True
>>> _ = write_parquet(config, d, partitions=3)
>>> sorted(read_parquet(d), key=lambda e: e.date_time) == list(events(config))
True
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from squall.nexmark.generator import GeneratorConfig, events
from squall.nexmark.model import ROW_FIELDS, Event, from_json, from_row, to_json, to_row

_STRING, _INT = pa.string(), pa.int64()
SCHEMA = pa.schema([
    pa.field("event_type", pa.int8(), nullable=False),
    pa.field("date_time", _INT, nullable=False),
    *(pa.field(name, _STRING if name in {
        "name", "email_address", "credit_card", "city", "state", "item_name", "description",
        "channel", "url", "extra"} else _INT) for name in ROW_FIELDS[2:]),
])
"""The Parquet files' schema: the flat row's columns; times are milliseconds (int64)."""


def _paths(directory: str, partitions: int, suffix: str) -> list[str]:
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"NEXMark files: partitions must be a positive int, got {partitions!r}")
    os.makedirs(directory, exist_ok=True)
    return [os.path.join(directory, f"events-{i:05d}.{suffix}") for i in range(partitions)]


def write_json_lines(config: GeneratorConfig, directory: str, partitions: int = 1) -> list[str]:
    """Write the stream as JSON-lines partition files under `directory`; their paths."""
    paths = _paths(directory, partitions, "jsonl")
    for i, path in enumerate(paths):
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for e in events(config, i, None, partitions):
                f.write(to_json(e))
                f.write("\n")
        os.replace(tmp, path)
    return paths


def write_parquet(config: GeneratorConfig, directory: str, partitions: int = 1,
                  row_group_size: int = 100_000) -> list[str]:
    """Write the stream as Parquet partition files under `directory`; their paths."""
    paths = _paths(directory, partitions, "parquet")
    for i, path in enumerate(paths):
        tmp = path + ".tmp"
        with pq.ParquetWriter(tmp, SCHEMA) as writer:
            rows: list[list] = []
            for e in events(config, i, None, partitions):
                rows.append(to_row(e))
                if len(rows) == row_group_size:
                    writer.write_table(_table(rows))
                    rows = []
            if rows:
                writer.write_table(_table(rows))
        os.replace(tmp, path)
    return paths


def _table(rows: list[list]) -> pa.Table:
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [() for _ in ROW_FIELDS]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA,
                                                                             strict=True)],
                                schema=SCHEMA)


def kafka_records(config: GeneratorConfig, partitions: int = 1,
                  ) -> Iterator[tuple[None, bytes, int]]:
    """The stream as Kafka records `(key, value, partition)` in stream order: the value a flat
    row as a JSON object (`{"event_type": 2, "date_time": ..., ...}`, what a `KafkaSource` with
    fields `ROW_FIELDS` and `value_deserialiser="json"` reads), position `i` to partition
    `i mod partitions`, as the files split the stream."""
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"NEXMark Kafka records: partitions must be a positive int, got "
                         f"{partitions!r}")
    for position, e in enumerate(events(config)):
        row = dict(zip(ROW_FIELDS, to_row(e), strict=True))
        yield None, json.dumps(row, separators=(",", ":")).encode(), position % partitions


def read_json_lines(directory: str) -> Iterator[Event]:
    """The events of every `*.jsonl` file under `directory`, file by file (in name order)."""
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield from_json(line)


def read_parquet(directory: str) -> Iterator[Event]:
    """The events of every `*.parquet` file under `directory`, file by file (in name order)."""
    for path in sorted(glob.glob(os.path.join(directory, "*.parquet"))):
        table = pq.read_table(path, schema=SCHEMA)
        for row in zip(*(table.column(name).to_pylist() for name in ROW_FIELDS), strict=True):
            yield from_row(row)
