"""The NEXMark queries as squall topologies, each in the API docs/nexmark.md names for it, and
comparable with the reference (`squall.nexmark.reference`) through
`squall.nexmark.queries.results.canonical`.

- `storm_topology(source, queries)`: the Storm-API and windowed-operator queries (q3-q12, q20)
  as branches of one topology over one partitioned source of flat rows (`NexmarkSource`,
  `NexmarkJsonLinesSource` over the JSON-lines files, a `KafkaSource` of flat-row JSON);
- `trident_topology(spout, queries)`: the Trident queries (q0-q2, q13-q19) as branches of one
  Trident topology over one batch spout of flat rows (`NexmarkBatchSpout`, a `FileBatchSpout`
  over the Parquet files, a Kafka transactional spout).

Each query's output component (Storm) or stream (Trident) is named after it (`q5`, ...); a
`sink` adds what writes it. `squall run squall.nexmark.queries:q5` runs one query over the
generator (docs/nexmark.md lists the commands and their configuration keys).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.nexmark.queries.targets import query_topology
from squall.nexmark.queries.topologies import (
    BID_QUERIES,
    STORM_QUERIES,
    TRIDENT_QUERIES,
    storm_topology,
    trident_topology,
)
from squall.nexmark.queries.windowed import EventTimeSettings
from squall.topology.description import Topology

QUERIES = tuple(sorted((*STORM_QUERIES, *TRIDENT_QUERIES), key=lambda q: int(q[1:])))
"""Every query this package builds: q0 to q20."""


def _target(query: str) -> Callable[..., Topology]:
    def target(conf: Mapping[str, Any] | None = None) -> Topology:
        return query_topology(query, conf)
    target.__name__ = target.__qualname__ = query
    target.__doc__ = f"NEXMark {query} as `squall run` builds it (configuration keys: " \
        "squall.nexmark.queries.targets)."
    return target


def __getattr__(name: str) -> Any:
    """`q0` to `q20`: the `squall run` targets (`squall run squall.nexmark.queries:q5`)."""
    if name in QUERIES:
        return _target(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BID_QUERIES", "QUERIES", "STORM_QUERIES", "TRIDENT_QUERIES", "EventTimeSettings",
           "query_topology", "storm_topology", "trident_topology"]
