"""The NEXMark queries (squall.nexmark.queries) equal their reference (squall.nexmark.reference)
exactly, on both runners, reading the files squall.nexmark.files writes.

One stream of 4,000 events (out-of-order groups of 20 and 5 % delayed events, so that the
windowed queries see late events and drop some; no hot auctions, sellers or bidders, so that
every query has rows) is written as two JSON-lines and two Parquet partition files. The Storm-API
and windowed queries run as branches of one topology over the Parquet files (and on the local
runner once more over the JSON-lines files), the Trident queries as branches of one Trident
topology over the Parquet files: two runs per runner, each shared by the tests of its queries.
"""

from __future__ import annotations

import pytest
from support.nexmark import CONF, EVENT_TIME, PARTITIONS, TIME, config, reference
from support.runs import complete_cached

from squall.nexmark import write_json_lines, write_parquet
from squall.nexmark.generator import events
from squall.nexmark.model import ROW_FIELDS
from squall.nexmark.queries import (
    BID_QUERIES,
    STORM_QUERIES,
    TRIDENT_QUERIES,
    storm_topology,
    trident_topology,
)
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import DROPPED, LATE, judge
from squall.nexmark.reference.lateness import fixed
from squall.nexmark.sources import NexmarkJsonLinesSource, NexmarkParquetSource
from squall.testing import complete_topology
from squall.trident import FileBatchSpout

CONFIG = config(4_000)


@pytest.fixture(scope="module")
def stream():
    return list(events(CONFIG))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("nexmark")
    write_json_lines(CONFIG, str(root / "json"), partitions=PARTITIONS)
    write_parquet(CONFIG, str(root / "parquet"), partitions=PARTITIONS)
    return root


def test_the_stream_has_late_and_dropped_events(stream):
    """The settings make the windowed queries meet both kinds (so their tests check them)."""
    statuses = [s for *_, s in judge(stream, EVENT_TIME, fixed(10_000))]
    assert statuses.count(LATE) >= 10 and statuses.count(DROPPED) >= 3


def check_storm_query(request, runner, files, stream, query, source):
    def build():
        return storm_topology(source, time=TIME)
    result = complete_cached(request, ("storm", type(source).__name__), runner, build, CONF)
    assert not result.errors
    expected = reference(query, stream)
    assert expected, f"{query}: the reference is empty, the test would check nothing"
    assert canonical(query, result.tuples(query)) == expected


@pytest.mark.parametrize("query", STORM_QUERIES)
def test_storm_and_windowed_queries_equal_the_reference(request, runner, files, stream, query):
    check_storm_query(request, runner, files, stream, query,
                      NexmarkParquetSource(str(files / "parquet")))


@pytest.mark.parametrize("query", STORM_QUERIES)
def test_storm_and_windowed_queries_over_json_lines_equal_the_reference(request, files, stream,
                                                                         query):
    """The JSON-lines files give the same rows (the Spark runner reads them in
    tests/runners/test_sources.py and the command-line tests)."""
    check_storm_query(request, "local", files, stream, query,
                      NexmarkJsonLinesSource(str(files / "json")))


def test_split_sends_only_the_kinds_a_query_reads(files, stream):
    """q3 reads people and auctions: the bids (46 of 50 events) are not emitted at all."""
    result = complete_topology(storm_topology(NexmarkParquetSource(str(files / "parquet")),
                                              ["q3"], time=TIME), CONF)
    kinds = {kind: len(result.tuples("split", kind)) for kind in ("person", "auction", "bid")}
    assert kinds == {"person": CONFIG.max_events // 50, "auction": CONFIG.max_events * 3 // 50,
                     "bid": 0}
    assert canonical("q3", result.tuples("q3")) == reference("q3", stream)


@pytest.mark.parametrize("query", ["q3", "q8"])
def test_q3_and_q8_read_only_people_and_auctions(request, runner, files, stream, query):
    """Alone, q3 and q8 have their Parquet source skip the bids where it reads them: only
    people and auctions become tuples, and q8 (windowed) still judges its events against
    watermarks that count the bids' times (the reference's late and dropped events)."""
    check_alone(request, runner, files, stream, query, ["q3", "q8"], CONFIG.max_events * 4 // 50)


def check_alone(request, runner, files, stream, query, queries, events_read):
    """`queries` alone over the Parquet files: the source makes `events_read` tuples, and
    `query`'s output equals its reference. The topology, for more checks."""
    def build():
        return storm_topology(NexmarkParquetSource(str(files / "parquet")), queries, time=TIME)
    result = complete_cached(request, ("alone", *queries), runner, build, CONF)
    assert not result.errors
    assert len(result.tuples("events")) == events_read
    expected = reference(query, stream)
    assert expected, f"{query}: the reference is empty, the test would check nothing"
    assert canonical(query, result.tuples(query)) == expected
    return build()


@pytest.mark.parametrize("query", BID_QUERIES)
def test_queries_of_bids_alone_read_the_source_without_split(request, runner, files, stream,
                                                              query):
    """Alone, the queries that read only bids (q5, q7, q11, q12) have their Parquet source skip
    people and auctions and read its rows themselves: no `Split`, and the windowed operators
    still judge each bid against watermarks that count the skipped events' times (the
    reference's late and dropped events)."""
    topology = check_alone(request, runner, files, stream, query, list(BID_QUERIES),
                           CONFIG.max_events * 46 // 50)
    readers = topology.subscribers("events", NexmarkParquetSource(str(files / "parquet")).stream)
    assert "split" not in topology.bolts and {bolt for bolt, _ in readers} == set(BID_QUERIES)


@pytest.mark.parametrize("query", TRIDENT_QUERIES)
def test_trident_queries_equal_the_reference(request, runner, files, stream, query):
    def build():
        return trident_topology(FileBatchSpout(str(files / "parquet"), list(ROW_FIELDS)))
    result = complete_cached(request, "trident", runner, build, CONF)
    assert not result.errors
    expected = reference(query, stream)
    assert expected, f"{query}: the reference is empty, the test would check nothing"
    assert canonical(query, result.tuples(query)) == expected
