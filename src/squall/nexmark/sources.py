"""squall sources over the NEXMark generator (events made where they are read) and its files.

- `NexmarkSource`, a `PartitionedSource` (squall.components.partitioned_source) for the Storm API
  and the windowed operators: `partitions` partitions, partition `i` the events at positions
  `i, i + n, i + 2n, ...` of the stream (so every partition covers the whole span of event
  time at the same pace, and their union is the stream); offsets are positions within the
  partition. Bounded by `config.max_events`. Its records are flat rows (`ROW_FIELDS`), and its
  event-time field is `date_time` (`squall.source.event.time.field`), so operators that take
  their watermark from source partitions get each partition's progress.
- `NexmarkJsonLinesSource` and `NexmarkParquetSource`: the partition files of
  `squall.nexmark.files` as flat rows, a partition per file, event-time field `date_time`.
  `reading_kinds(source, kinds)` is a copy that reads only the events of those kinds (the
  others skipped where a range is read, their event times still counted for the watermarks).
- `NexmarkBatchSpout`, a transactional Trident `BatchSpout`: batch `b` is the events at
  positions `(b - 1) x batch_size` to `b x batch_size`, the same rows whenever it is replayed.

>>> from squall import TopologyBuilder
>>> from squall.testing import complete_topology
>>> from squall.nexmark.generator import GeneratorConfig
>>> b = TopologyBuilder()
>>> _ = b.set_spout("events", NexmarkSource(GeneratorConfig(max_events=100), partitions=2))
>>> rows = complete_topology(b.create_topology()).tuples("events")
>>> len(rows), sorted(r[0] for r in rows).count(2)
(100, 92)
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from squall.components.partitioned_source import PartitionedSource, Range
from squall.connectors.sources import JsonLinesSource, ParquetSource, _Bad
from squall.nexmark.generator import GeneratorConfig, event, partition_size
from squall.nexmark.model import KINDS, ROW_FIELDS, from_json, to_row
from squall.topology.config import SQUALL_SOURCE_EVENT_TIME_FIELD
from squall.trident.spouts import BatchSpout

EVENT_TIME_FIELD = "date_time"


class NexmarkSource(PartitionedSource):
    """The generated stream as `partitions` partitions named `nexmark-0`, `nexmark-1`, ...

    `records_per_range` caps each range (a Spark input partition) as `MemorySource`'s does;
    `records_per_call` is how many records the local runner plans at a time.
    """

    def __init__(self, config: GeneratorConfig | None = None, *, partitions: int = 1,
                 stream: str = "default", records_per_range: int | None = None,
                 records_per_call: int = 1000) -> None:
        super().__init__(ROW_FIELDS, stream=stream, bounded=True,
                         records_per_call=records_per_call)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"NexmarkSource: partitions must be a positive int, got "
                             f"{partitions!r}")
        self.config = config or GeneratorConfig()
        self.partitions = partitions
        self.records_per_range = records_per_range

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        return {SQUALL_SOURCE_EVENT_TIME_FIELD: EVENT_TIME_FIELD}

    def _index(self, partition: str) -> int:
        return int(partition.rsplit("-", 1)[1])

    def discover(self) -> list[str]:
        return [f"nexmark-{i}" for i in range(self.partitions)]

    def initial_offset(self, partition: str) -> int:
        return 0

    def end_offset(self, partition: str, start: Any) -> int:
        return partition_size(self.config, self._index(partition), self.partitions)

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        return min(end, start + max(1, min(budget, self.records_per_range or budget)))

    def estimate(self, r: Range) -> int:
        return r.end - r.start

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        i, n, config = self._index(partition), self.partitions, self.config
        for offset in range(start, end):
            yield offset, to_row(event(config, i + offset * n))


class NexmarkJsonLinesSource(JsonLinesSource):
    """The JSON-lines partition files `squall.nexmark.files.write_json_lines` writes (Beam's
    event JSON, one event a line), read as flat rows (`ROW_FIELDS`): one source partition per
    file, each in its stream order, event-time field `date_time`. A line that is not an event
    goes to the `malformed` stream with its file and line number."""

    def __init__(self, directory: str, *, pattern: str = "*.jsonl", bounded: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(directory, ROW_FIELDS, pattern=pattern, bounded=bounded, **kwargs)

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        return {SQUALL_SOURCE_EVENT_TIME_FIELD: EVENT_TIME_FIELD}

    def parse(self, partition: str, text: str) -> list[Any]:
        try:
            return to_row(from_json(text))
        except (ValueError, TypeError, KeyError) as exc:
            raise _Bad(f"not a NEXMark event ({exc})") from None


class NexmarkParquetSource(ParquetSource):
    """The Parquet partition files `squall.nexmark.files.write_parquet` writes, read as flat rows
    (`ROW_FIELDS`, the files' columns): one source partition per file, each in its stream order,
    event-time field `date_time`. The rows are the JSON-lines source's for the same events,
    read without parsing: columns into Python values, a row group at a time."""

    def __init__(self, directory: str, *, pattern: str = "*.parquet", bounded: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(directory, ROW_FIELDS, pattern=pattern, bounded=bounded, **kwargs)

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        return {SQUALL_SOURCE_EVENT_TIME_FIELD: EVENT_TIME_FIELD}


S = TypeVar("S", bound=PartitionedSource)


def reading_kinds(source: S, kinds: Iterable[str]) -> S:
    """`source` reading only the events of `kinds` (of `person`, `auction`, `bid`): for the
    file sources, a copy whose `keep` holds those kinds' `event_type`s, so that the other
    events are skipped where a range is read (on Spark on the executors), before any tuple is
    made, their event times still counted in their partitions' positions. Any other source,
    one already filtered, or all three kinds: `source` itself.

    >>> import tempfile
    >>> from squall.nexmark.files import write_parquet
    >>> d = tempfile.mkdtemp()
    >>> _ = write_parquet(GeneratorConfig(max_events=100), d)
    >>> src = reading_kinds(NexmarkParquetSource(d), ["auction", "person"])
    >>> src.keep, sorted({row[0] for _, row in src.read("events-00000.parquet", 0, 100)})
    ({'event_type': frozenset({0, 1})}, [0, 1])
    """
    wanted = set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise ValueError(f"reading_kinds: {sorted(unknown)} are not NEXMark kinds {list(KINDS)}")
    if (not isinstance(source, (NexmarkParquetSource, NexmarkJsonLinesSource))
            or source.keep is not None or wanted == set(KINDS)):
        return source
    filtered = copy.deepcopy(source)
    filtered.keep = {"event_type": frozenset(KINDS.index(k) for k in wanted)}
    return filtered


class NexmarkBatchSpout(BatchSpout):
    """The generated stream in Trident batches of `batch_size` events (flat rows)."""

    transactional = True

    def __init__(self, config: GeneratorConfig | None = None, batch_size: int = 1000) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"NexmarkBatchSpout: batch_size must be a positive int, got "
                             f"{batch_size!r}")
        self.config = config or GeneratorConfig()
        self.batch_size = batch_size

    def get_output_fields(self) -> Sequence[str]:
        return ROW_FIELDS

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        start = (batch_id - 1) * self.batch_size
        for number in range(start, min(start + self.batch_size, self.config.max_events)):
            collector.emit(to_row(event(self.config, number)))

    def is_exhausted(self, batch_id: int) -> bool:
        return (batch_id - 1) * self.batch_size >= self.config.max_events
