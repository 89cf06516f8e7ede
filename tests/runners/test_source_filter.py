"""A source's filter (`keep` of `ParquetSource` and the file sources): the records of other
values are skipped where a range is read, their offsets still counted, and their event times still
moving their partition's position, so a windowed query judges lateness as if every record had
been read, on both runners."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall.components.partitioned_source import Skipped
from squall.connectors import JsonLinesSource, ParquetSource, Range
from squall.nexmark.files import SCHEMA
from squall.nexmark.model import ROW_FIELDS, Auction, Bid, Person, to_json, to_row
from squall.nexmark.queries import EventTimeSettings, storm_topology
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import EventTime, q8
from squall.nexmark.sources import NexmarkJsonLinesSource, NexmarkParquetSource
from squall.testing import complete_topology

TIME = EventTimeSettings(watermark_delay_ms=100, allowed_lateness_ms=2_000)
BASE = 1_436_918_400_000  # a multiple of the 10 s windows


def _person(pid: int, t: int) -> Person:
    return Person(pid, f"p{pid}", "e@x", "cc", "Boise", "ID", BASE + t, "")


def _auction(aid: int, seller: int, t: int) -> Auction:
    return Auction(aid, "item", "d", 10, 100 + seller, BASE + t, BASE + t + 60_000, seller, 10, "")


def _bid(t: int) -> Bid:
    return Bid(2000, 1000, 50, "Apple", "https://a", BASE + t, "")


# One partition. The people and auctions 1000 and 1002 are dropped (their window had expired)
# only because of the bids' times before them: 1000 in a range of its own after a range of bids
# alone, 1002 after a bid of its own range. Those 1001 and 1003 join on time.
EVENTS = [
    _bid(25_000), _bid(26_000),
    _person(1000, 5_000), _auction(3000, 1000, 5_500),
    _person(1001, 26_500), _auction(3001, 1001, 27_000),
    _bid(60_000), _person(1002, 35_000),
    _auction(3002, 1002, 35_500), _person(1003, 61_000),
    _auction(3003, 1003, 62_000),
]


@pytest.fixture(scope="module")
def event_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("filtered")
    (root / "parquet").mkdir()
    (root / "json").mkdir()
    table = pa.Table.from_pylist([dict(zip(ROW_FIELDS, to_row(e), strict=True))
                                  for e in EVENTS], schema=SCHEMA)
    pq.write_table(table, str(root / "parquet" / "events-00000.parquet"), row_group_size=4)
    (root / "json" / "events-00000.jsonl").write_text(
        "".join(to_json(e) + "\n" for e in EVENTS))
    return root


def test_the_reference_drops_what_only_the_skipped_events_make_late():
    """Without the bids, 1000 and 1002 would join on time: the test below checks what it
    means to."""
    time = EventTime(partitions=1, watermark_delay_ms=TIME.watermark_delay_ms,
                     allowed_lateness_ms=TIME.allowed_lateness_ms)
    expected = q8(EVENTS, time)
    assert [row[2] for row in expected] == [1001, 1003]
    without_bids = q8([e for e in EVENTS if not isinstance(e, Bid)], time)
    assert [row[2] for row in without_bids] == [1000, 1001, 1002, 1003]


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_a_windowed_query_judges_lateness_by_the_skipped_events_too(runner, event_files, kind):
    source = (NexmarkParquetSource(str(event_files / "parquet"), rows_per_range=2)
              if kind == "parquet" else
              NexmarkJsonLinesSource(str(event_files / "json"), bytes_per_range=600))
    topology = storm_topology(source, ["q8"], time=TIME, parallelism=1)
    assert topology.spouts["events"].new_instance().keep == {"event_type": {0, 1}}
    result = complete_topology(topology, {"spark.sql.shuffle.partitions": 1}, runner=runner)
    assert not result.errors
    assert len(result.tuples("events")) == 8  # the bids were never tuples
    time = EventTime(partitions=1, watermark_delay_ms=TIME.watermark_delay_ms,
                     allowed_lateness_ms=TIME.allowed_lateness_ms)
    assert canonical("q8", result.tuples("q8")) == q8(EVENTS, time)


def _brute_force(rows, keep, at, start, end):
    """What a filtered read of `[start, end)` yields, one row at a time."""
    out, run, latest = [], None, None
    for offset in range(start, end):
        row = rows[offset]
        if row[0] in keep:
            if latest is not None:
                out.append((run, ("skipped", latest)))
            run = latest = None
            out.append((offset, list(row)))
        else:
            run = offset if run is None else run
            ts = None if at is None else row[at]
            if ts is not None and (latest is None or ts > latest):
                latest = ts
    if latest is not None:
        out.append((run, ("skipped", latest)))
    return out


def _plain(read):
    return [(off, ("skipped", v.max_ts) if isinstance(v, Skipped) else v) for off, v in read]


@pytest.mark.parametrize("at", [1, None])
def test_a_filtered_read_keeps_offsets_and_marks_every_run_of_skipped_rows(tmp_path, at):
    """Every range of a file cut in row groups of 3, read by `ParquetSource` and
    `JsonLinesSource` with `keep`: the kept rows at their own offsets (row positions, line
    starts), and before each kept row and at the end one marker per run of skipped rows with
    their largest event time (nulls are no time); none without carried positions."""
    rng = random.Random(7)
    rows = [(rng.choice("aab"), rng.choice([None, *range(50)])) for _ in range(20)]
    rows[0], rows[1] = ("b", 70), ("b", None)
    pq.write_table(pa.table({"kind": [k for k, _ in rows],
                             "ts": pa.array([t for _, t in rows], pa.int64())}),
                   str(tmp_path / "a.parquet"), row_group_size=3)
    lines = [json.dumps({"kind": k, "ts": t}) + "\n" for k, t in rows]
    (tmp_path / "a.jsonl").write_text("".join(lines))
    starts = [sum(len(line) for line in lines[:i]) for i in range(len(rows) + 1)]

    parquet = ParquetSource(str(tmp_path), ["kind", "ts"], keep={"kind": ["a"]})
    jsonl = JsonLinesSource(str(tmp_path), ["kind", "ts"], pattern="*.jsonl",
                            keep={"kind": ["a"]})
    parquet.time_index = jsonl.time_index = at
    for start in range(len(rows)):
        for end in range(start + 1, len(rows) + 1):
            expected = _brute_force(rows, {"a"}, at, start, end)
            assert _plain(parquet.read("a.parquet", start, end)) == expected, (start, end)
            as_bytes = [(starts[off], v) for off, v in expected]
            assert _plain(jsonl.read("a.jsonl", starts[start], starts[end])) == as_bytes
    # A failed range's records, split for their replay, are the kept ones only.
    kept = [off for off, _ in _brute_force(rows, {"a"}, None, 0, 6)]
    assert [r.start for r in parquet.split(Range("a.parquet", 0, 6)) or []] == kept
    assert parquet.record("a.parquet", 0) is None  # a skipped row is no record
    assert parquet.record("a.parquet", kept[0]) == list(rows[kept[0]])


def test_keep_is_checked_where_it_is_given(tmp_path):
    with pytest.raises(ValueError, match="keep names column 'nope'"):
        JsonLinesSource(str(tmp_path), ["kind"], keep={"nope": [1]})
    with pytest.raises(ValueError, match="keep must be a non-empty mapping"):
        ParquetSource(str(tmp_path), ["kind"], keep={})
    with pytest.raises(ValueError, match="iterable of kept values"):
        ParquetSource(str(tmp_path), ["kind"], keep={"kind": "a"})
