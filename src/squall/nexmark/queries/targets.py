"""`squall run` targets, one per query: `squall run squall.nexmark.queries:q5 -c KEY=VALUE ...`.

Configuration keys (docs/nexmark.md has the table):

- `nexmark.source`: `generator` (the default), `json` or `parquet` (the files under
  `nexmark.path`: JSON lines for the Storm-API and windowed queries only, Parquet for every
  query), `kafka`
  (flat-row JSON records of `nexmark.kafka.topic` at `nexmark.kafka.bootstrap`);
- `nexmark.events` (100000), `nexmark.partitions` (4), `nexmark.batch.size` (10000): the
  generator's events, its partitions (Storm's API), its events per Trident batch;
- `nexmark.output`: a directory; each Storm-API or windowed query's output is written as JSON
  lines under `<dir>/<query>`;
- `nexmark.watermark.delay.ms` (1000), `nexmark.allowed.lateness.ms` (20000): the windowed
  queries' event time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from squall.components.partitioned_source import PartitionedSource
from squall.connectors.kafka import KafkaSource
from squall.connectors.sinks import JsonLinesSink
from squall.errors import ConfigError
from squall.nexmark.generator import GeneratorConfig
from squall.nexmark.model import ROW_FIELDS
from squall.nexmark.queries.topologies import (
    STORM_QUERIES,
    TRIDENT_QUERIES,
    storm_topology,
    trident_topology,
)
from squall.nexmark.queries.windowed import EventTimeSettings
from squall.nexmark.sources import (
    NexmarkBatchSpout,
    NexmarkJsonLinesSource,
    NexmarkParquetSource,
    NexmarkSource,
)
from squall.topology.description import Topology
from squall.topology.fields import Fields
from squall.transactional import KafkaTransactionalSpout
from squall.trident.spouts import FileBatchSpout

SOURCES = ("generator", "json", "parquet", "kafka")


def _setting(conf: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = conf.get(key, default)
    if value is None:
        raise ConfigError(f"nexmark: set {key} (-c {key}=...) for nexmark.source="
                          f"{conf.get('nexmark.source')!r}")
    return value


def _positive(conf: Mapping[str, Any], key: str, default: int) -> int:
    value = conf.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"nexmark: {key} must be a positive int, got {value!r}")
    return value


def _source_kind(conf: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
    kind = conf.get("nexmark.source", "generator")
    if kind not in allowed:
        raise ConfigError(f"nexmark: nexmark.source must be one of {list(allowed)} for this "
                          f"query, got {kind!r}")
    return kind


def storm_source(conf: Mapping[str, Any]) -> PartitionedSource:
    """The partitioned source of flat rows the configuration names."""
    kind = _source_kind(conf, SOURCES)
    if kind == "json":
        return NexmarkJsonLinesSource(_setting(conf, "nexmark.path"))
    if kind == "parquet":
        return NexmarkParquetSource(_setting(conf, "nexmark.path"))
    if kind == "kafka":
        source = KafkaSource([_setting(conf, "nexmark.kafka.topic")], ROW_FIELDS,
                             bootstrap_servers=_setting(conf, "nexmark.kafka.bootstrap"),
                             value_deserialiser="json", bounded=True)
        return source
    return NexmarkSource(GeneratorConfig(max_events=_positive(conf, "nexmark.events", 100_000)),
                         partitions=_positive(conf, "nexmark.partitions", 4))


def trident_spout(conf: Mapping[str, Any]) -> Any:
    """The Trident batch spout of flat rows the configuration names."""
    kind = _source_kind(conf, ("generator", "parquet", "kafka"))
    if kind == "parquet":
        return FileBatchSpout(_setting(conf, "nexmark.path"), list(ROW_FIELDS))
    if kind == "kafka":
        return KafkaTransactionalSpout(
            [_setting(conf, "nexmark.kafka.topic")], Fields(*ROW_FIELDS),
            bootstrap_servers=_setting(conf, "nexmark.kafka.bootstrap"),
            value_deserialiser="json", stop_when_empty=True)
    return NexmarkBatchSpout(GeneratorConfig(max_events=_positive(conf, "nexmark.events", 100_000)),
                             _positive(conf, "nexmark.batch.size", 10_000))


def query_topology(query: str, conf: Mapping[str, Any] | None = None) -> Topology:
    """One query's topology as the configuration keys (module doc) shape it."""
    conf = dict(conf or {})
    if query in TRIDENT_QUERIES:
        return trident_topology(trident_spout(conf), [query])
    if query not in STORM_QUERIES:
        raise ConfigError(f"nexmark: no query {query!r}")
    time = EventTimeSettings(
        watermark_delay_ms=int(conf.get("nexmark.watermark.delay.ms", 1_000)),
        allowed_lateness_ms=int(conf.get("nexmark.allowed.lateness.ms", 20_000)))
    output = conf.get("nexmark.output")
    sink = None if output is None else (
        lambda q: JsonLinesSink(os.path.join(str(output), q)))
    return storm_topology(storm_source(conf), [query], time=time, sink=sink)

