"""The topologies that hold the queries as branches: `storm_topology` (Storm's API and the
windowed operators over one partitioned source) and `trident_topology` (Trident over one batch
spout)."""


from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from squall.builder import TopologyBuilder
from squall.components.base import Bolt
from squall.components.partitioned_source import PartitionedSource
from squall.nexmark.model import BID, KINDS
from squall.nexmark.queries import storm, trident, windowed
from squall.nexmark.queries.windowed import EventTimeSettings
from squall.nexmark.sources import reading_kinds
from squall.topology.description import Topology
from squall.trident.stream import Stream, TridentTopology

STORM_QUERIES = ("q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12", "q20")
"""The queries `storm_topology` builds: Storm's API and the windowed operators."""
BID_QUERIES = ("q5", "q7", "q11", "q12")
"""The queries that read only bids, by the bid's field names, which a flat row of a bid has
too: over a source that yields only bids they read its rows without `Split`."""
TRIDENT_QUERIES = ("q0", "q1", "q2", "q13", "q14", "q15", "q16", "q17", "q18", "q19")
"""The queries `trident_topology` builds."""


def storm_topology(source: PartitionedSource, queries: Iterable[str] = STORM_QUERIES, *,
                   time: EventTimeSettings | None = None,
                   sink: Callable[[str], Bolt] | None = None, parallelism: int = 2) -> Topology:
    """`queries` (of `STORM_QUERIES`) as branches over `source` (component `events`, flat rows
    with the event-time field `date_time`). `sink(query)` gives a bolt that each query's output
    goes to (component `<query>-sink`).

    The source reads only the kinds of event the queries subscribe to (`Split`'s streams with
    subscribers; every kind when a query reads the source itself): a file source skips the
    others where it reads them (`squall.nexmark.sources.reading_kinds`), so q3 and q8 read only
    people and auctions, 4 events of 50. When that leaves only bids (the queries are among
    `BID_QUERIES`), those queries read the source's rows themselves: no `Split` and no Spark
    stage of its own between the source and the windowed operators."""
    chosen = _check(queries, STORM_QUERIES)
    time = time or EventTimeSettings()
    probe = _storm_builder(source, chosen, time, None, parallelism).create_topology()
    read_whole = any(bolt != "split" for bolt, _ in probe.subscribers("events", source.stream))
    kinds = KINDS if read_whole else [k for k in KINDS if probe.subscribers("split", k)]
    source = reading_kinds(source, kinds)
    bids_only = getattr(source, "keep", None) == {"event_type": frozenset({BID})}
    return _storm_builder(source, chosen, time, sink, parallelism,
                          bids_only=bids_only).create_topology()


def _storm_builder(source: PartitionedSource, chosen: list[str], time: EventTimeSettings,
                   sink: Callable[[str], Bolt] | None, parallelism: int,
                   bids_only: bool = False) -> TopologyBuilder:
    """The topology's builder; `bids_only`: `source` yields only bids, which `BID_QUERIES` read
    from it (there is then no `Split`)."""
    b = TopologyBuilder()
    b.set_spout("events", source, parallelism)
    if not bids_only:
        b.set_bolt("split", storm.Split(), parallelism).shuffle_grouping("events")
    bids, stream = ("events", source.stream) if bids_only else ("split", "bid")
    adders: dict[str, Callable[[], str]] = {
        "q3": lambda: storm.add_q3(b, "split", parallelism),
        "q20": lambda: storm.add_q20(b, "split", parallelism),
        "q5": lambda: windowed.add_q5(b, bids, time, stream),
        "q7": lambda: windowed.add_q7(b, bids, time, stream),
        "q8": lambda: windowed.add_q8(b, "split", time, parallelism),
        "q10": lambda: windowed.add_q10(b, "events", time, parallelism),
        "q11": lambda: windowed.add_q11(b, bids, time, parallelism, stream),
        "q12": lambda: windowed.add_q12(b, bids, parallelism, stream),
    }
    if {"q4", "q6", "q9"} & set(chosen):
        storm.add_q9(b, "split", parallelism)  # the winning bids, which q4 and q6 read
    adders["q9"] = lambda: "q9"
    adders["q4"] = lambda: storm.add_q4(b, "q9", parallelism)
    adders["q6"] = lambda: storm.add_q6(b, "q9", parallelism)
    for q in chosen:
        out = adders[q]()
        if sink is not None:
            b.set_bolt(f"{q}-sink", sink(q)).shuffle_grouping(out)
    return b


def trident_topology(spout: Any, queries: Iterable[str] = TRIDENT_QUERIES, *,
                     state: Any = None, sink: Callable[[str, Stream], Any] | None = None,
                     ) -> Topology:
    """`queries` (of `TRIDENT_QUERIES`) as branches over the batch spout `spout` (flat rows).
    `state`: the map states' factory (durable and transactional by default). `sink(query,
    stream)` is called with each query's output stream."""
    chosen = _check(queries, TRIDENT_QUERIES)
    t = TridentTopology()
    rows = t.new_stream("nexmark", spout)
    plain = {"q0": trident.add_q0, "q1": trident.add_q1, "q2": trident.add_q2,
             "q13": trident.add_q13, "q14": trident.add_q14}
    stateful = {"q15": trident.add_q15, "q16": trident.add_q16, "q17": trident.add_q17,
                "q18": trident.add_q18, "q19": trident.add_q19}
    for q in chosen:
        out = plain[q](rows) if q in plain else stateful[q](rows, state)
        if sink is not None:
            sink(q, out)
    return t.build()


def _check(queries: Iterable[str], known: tuple[str, ...]) -> list[str]:
    chosen = list(queries)
    unknown = [q for q in chosen if q not in known]
    if unknown or not chosen:
        raise ValueError(f"nexmark queries: {unknown or 'none'} not among {list(known)}")
    return chosen

