"""NEXMark, the online-auction benchmark of stream processors (Beam's queries 0-12, Flink's
nexmark suite): a deterministic event generator, file writers and squall sources over the
generator (docs/nexmark.md).

- `squall.nexmark.model`: the events `Person`, `Auction`, `Bid`, their flat row and Beam's JSON;
- `squall.nexmark.generator`: `GeneratorConfig` and the event of each event number;
- `squall.nexmark.files`: JSON-lines and Parquet partition files;
- `squall.nexmark.sources`: `NexmarkSource` (partitioned, event-time watermarks),
  `NexmarkJsonLinesSource` and `NexmarkParquetSource` (the files as flat rows) and
  `NexmarkBatchSpout` (Trident);
- `squall.nexmark.queries`: the queries as squall topologies, and `squall run` targets;
- `squall.nexmark.reference`: every query's definition computed in batch, the reference a
  streaming run is compared with (imported on its own).
"""

from squall.nexmark.files import (
    kafka_records,
    read_json_lines,
    read_parquet,
    write_json_lines,
    write_parquet,
)
from squall.nexmark.generator import GeneratorConfig, event, events
from squall.nexmark.model import (
    AUCTION,
    BID,
    PERSON,
    ROW_FIELDS,
    Auction,
    Bid,
    Event,
    Person,
    from_json,
    from_row,
    to_json,
    to_row,
)
from squall.nexmark.sources import (
    NexmarkBatchSpout,
    NexmarkJsonLinesSource,
    NexmarkParquetSource,
    NexmarkSource,
)

__all__ = [
    "AUCTION", "BID", "PERSON", "ROW_FIELDS", "Auction", "Bid", "Event", "GeneratorConfig",
    "NexmarkBatchSpout", "NexmarkJsonLinesSource", "NexmarkParquetSource", "NexmarkSource",
    "Person", "event", "events",
    "from_json", "from_row", "kafka_records", "read_json_lines", "read_parquet", "to_json",
    "to_row", "write_json_lines", "write_parquet",
]
