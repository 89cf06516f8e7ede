"""The NEXMark queries written with Storm's API: q3 and q20 (incremental joins), the winning bids
with q9, q4 and q6, each a `StatefulBolt` behind a fields grouping on its key.

They read the streams of `Split` (a bolt that sends each flat row of the source on the stream of
its kind, `person`, `auction` or `bid`, with that kind's fields). None has a window: a join emits
a row as soon as both sides are there; the winning bids, q4 and q6 emit a key's new value each
time it changes (a changelog), so the last value emitted per key is the query's result once the
input has ended (`squall.nexmark.queries.results`).

>>> from squall import TopologyBuilder
>>> from squall.testing import complete_topology
>>> from squall.nexmark import GeneratorConfig, NexmarkSource
>>> from squall.nexmark.queries.results import canonical
>>> from squall.nexmark.generator import events
>>> from squall.nexmark import reference
>>> config = GeneratorConfig(max_events=400)
>>> b = TopologyBuilder()
>>> _ = b.set_spout("events", NexmarkSource(config, partitions=2), 2)
>>> _ = b.set_bolt("split", Split(), 2).shuffle_grouping("events")
>>> _ = add_q9(b, "split")
>>> rows = complete_topology(b.create_topology()).tuples("q9")
>>> canonical("q9", rows) == reference.q9(events(config))
True
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import Any

from squall.builder import TopologyBuilder
from squall.components.base import BasicBolt
from squall.components.stateful import StatefulBolt
from squall.nexmark.model import KINDS, ROW_FIELDS, Auction, Bid, Person
from squall.topology.fields import Fields, Values
from squall.topology.tuple import Tuple

PERSON_FIELDS = tuple(Person.__dataclass_fields__)
AUCTION_FIELDS = tuple(Auction.__dataclass_fields__)
BID_FIELDS = tuple(Bid.__dataclass_fields__)
_SLOTS = tuple(tuple(ROW_FIELDS.index(f) for f in names)
               for names in (PERSON_FIELDS, AUCTION_FIELDS, BID_FIELDS))

LOCAL_STATES = ("OR", "ID", "CA")
"""q3's states."""
CATEGORY = 10
"""q3's and q20's category."""
WINNING_FIELDS = (*AUCTION_FIELDS, "auction", "bidder", "price", "channel", "url",
                  "bid_date_time", "bid_extra")
"""The winning bids' (q9's) fields: the auction's, then the bid's (Flink's q9 columns)."""


class Split(BasicBolt):
    """Each flat row (`ROW_FIELDS`) on the stream of its kind (`person`, `auction`, `bid`), with
    that kind's fields only. A kind whose stream no component subscribes to is not emitted (a
    tuple on a stream without subscribers goes nowhere): q3 and q8 read only people and
    auctions, 4 events of 50, and skip the bids' values."""

    def prepare(self, conf: Any, context: Any) -> None:
        super().prepare(conf, context)
        targets = context.this_targets
        # per kind: (its stream, the getter of its fields) or None when nobody reads it
        self._kinds = [(KINDS[kind], itemgetter(*slots)) if targets.get(KINDS[kind]) else None
                       for kind, slots in enumerate(_SLOTS)]

    def execute(self, tup: Tuple, collector: Any) -> None:
        values = tup.values
        kind = self._kinds[values[0]]
        if kind is not None:
            collector.emit(Values(*kind[1](values)), stream=kind[0])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("person", Fields(*PERSON_FIELDS))
        declarer.declare_stream("auction", Fields(*AUCTION_FIELDS))
        declarer.declare_stream("bid", Fields(*BID_FIELDS))


class _KeyedState(StatefulBolt):
    """A stateful bolt that acks each tuple once it has handled it and anchors what it emits."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tup: Tuple) -> None:
        for values in self.handle(tup):
            self.collector.emit(Values(*values), anchors=tup)
        self.collector.ack(tup)

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        raise NotImplementedError


class LocalItems(_KeyedState):
    """q3: people of `LOCAL_STATES` joined with the auctions of `CATEGORY` they sell, keyed by
    person id (people) and seller (auctions); each side waits in state for the other."""

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        if tup.source_stream_id == "person":
            if tup["state"] not in LOCAL_STATES:
                return []
            person = (tup["name"], tup["city"], tup["state"])
            self.state.put(f"p{tup['id']}", person)
            waiting = self.state.get(f"a{tup['id']}") or []
            if waiting:
                self.state.delete(f"a{tup['id']}")
            return [(*person, a) for a in waiting]
        if tup["category"] != CATEGORY:
            return []
        person = self.state.get(f"p{tup['seller']}")
        if person is not None:
            return [(*person, tup["id"])]
        self.state.put(f"a{tup['seller']}", [*(self.state.get(f"a{tup['seller']}") or []),
                                             tup["id"]])
        return []

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("name", "city", "state", "auction_id"))


class ExpandedBids(_KeyedState):
    """q20: bids joined with their auction when it is of `CATEGORY`, keyed by auction id; bids
    that come before their auction wait in state."""

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        if tup.source_stream_id == "auction":
            key = tup["id"]
            if tup["category"] != CATEGORY:
                self.state.put(key, False)  # its bids are not in the query
                self.state.delete(("bids", key))
                return []
            auction = tuple(tup.values[1:])
            self.state.put(key, auction)
            waiting = self.state.get(("bids", key)) or []
            if waiting:
                self.state.delete(("bids", key))
            return [(*bid, *auction) for bid in waiting]
        key = tup["auction"]
        auction = self.state.get(key)
        if auction is None:
            self.state.put(("bids", key), [*(self.state.get(("bids", key)) or []),
                                           tuple(tup.values)])
            return []
        return [(*tup.values, *auction)] if auction else []

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields(*BID_FIELDS[:5], "bid_date_time", "bid_extra",
                                *(f if f not in ("date_time", "extra") else f"auction_{f}"
                                  for f in AUCTION_FIELDS[1:])))


class WinningBids(_KeyedState):
    """Each auction's winning bid (docs/nexmark.md, q4), keyed by auction id: the auction and its
    best valid bid so far, emitted (the auction's fields, then the bid's) whenever it changes.
    Bids that come before their auction wait in state."""

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        if tup.source_stream_id == "auction":
            key = tup["id"]
            auction = tuple(tup.values)
            waiting = self.state.get(("bids", key)) or []
            if waiting:
                self.state.delete(("bids", key))
            best = None
            for bid in waiting:
                if _valid(auction, bid) and (best is None or _better(bid, best)):
                    best = bid
            self.state.put(key, (auction, best))
            return [] if best is None else [(*auction, *best)]
        key = tup["auction"]
        bid = tuple(tup.values)
        held = self.state.get(key)
        if held is None:
            self.state.put(("bids", key), [*(self.state.get(("bids", key)) or []), bid])
            return []
        auction, best = held
        if not _valid(auction, bid) or (best is not None and not _better(bid, best)):
            return []
        self.state.put(key, (auction, bid))
        return [(*auction, *bid)]

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields(*WINNING_FIELDS))


_A_TIME, _A_EXPIRES, _A_RESERVE = (AUCTION_FIELDS.index(f)
                                   for f in ("date_time", "expires", "reserve"))
_B_PRICE, _B_TIME = BID_FIELDS.index("price"), BID_FIELDS.index("date_time")


def _valid(auction: tuple[Any, ...], bid: tuple[Any, ...]) -> bool:
    """The bid comes in the auction's lifetime and reaches its reserve."""
    return (auction[_A_TIME] <= bid[_B_TIME] < auction[_A_EXPIRES]
            and bid[_B_PRICE] >= auction[_A_RESERVE])


def _better(bid: tuple[Any, ...], best: tuple[Any, ...]) -> bool:
    """Strictly better: a higher price, or an earlier time at the same price. A bid equal to the
    best in both comes later in its auction's order, so the earlier keeps winning."""
    return (bid[_B_PRICE], -bid[_B_TIME]) > (best[_B_PRICE], -best[_B_TIME])


_W_ID, _W_SELLER, _W_CATEGORY = (WINNING_FIELDS.index(f) for f in ("id", "seller", "category"))
_W_PRICE, _W_TIME = WINNING_FIELDS.index("price"), WINNING_FIELDS.index("bid_date_time")


class AveragePrice(_KeyedState):
    """q4: per category, the mean of its auctions' winning prices, emitted whenever a winner
    changes (keyed by category; each auction's current winning price is kept)."""

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        category = tup["category"]
        prices = dict(self.state.get(category) or {})
        prices[tup["id"]] = tup["price"]
        self.state.put(category, prices)
        return [(category, sum(prices.values()) / len(prices))]

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("category", "average"))


class SellerAverage(_KeyedState):
    """q6: per seller, the mean price of the last `last` winning bids (by the bid's time, then
    price), rounded as Java's `Math.round`; emitted whenever one of the seller's winners
    changes (keyed by seller; each auction's current winning bid is kept)."""

    def __init__(self, last: int = 10) -> None:
        self.last = last

    def handle(self, tup: Tuple) -> list[tuple[Any, ...]]:
        seller = tup["seller"]
        wins = dict(self.state.get(seller) or {})
        wins[tup["id"]] = (tup["bid_date_time"], tup["price"])
        self.state.put(seller, wins)
        kept = sorted(wins.values())[-self.last:]
        mean = sum(price for _, price in kept) / len(kept)
        return [(seller, math.floor(mean + 0.5))]  # Java's Math.round

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("seller", "average"))


def add_q3(b: TopologyBuilder, split: str, parallelism: int = 2) -> str:
    (b.set_bolt("q3", LocalItems(), parallelism)
     .fields_grouping(split, ["id"], "person").fields_grouping(split, ["seller"], "auction"))
    return "q3"


def add_q20(b: TopologyBuilder, split: str, parallelism: int = 2) -> str:
    (b.set_bolt("q20", ExpandedBids(), parallelism)
     .fields_grouping(split, ["id"], "auction").fields_grouping(split, ["auction"], "bid"))
    return "q20"


def add_q9(b: TopologyBuilder, split: str, parallelism: int = 2) -> str:
    """The winning bids, component `q9` (q4 and q6 read it)."""
    (b.set_bolt("q9", WinningBids(), parallelism)
     .fields_grouping(split, ["id"], "auction").fields_grouping(split, ["auction"], "bid"))
    return "q9"


def add_q4(b: TopologyBuilder, winning: str, parallelism: int = 2) -> str:
    b.set_bolt("q4", AveragePrice(), parallelism).fields_grouping(winning, ["category"])
    return "q4"


def add_q6(b: TopologyBuilder, winning: str, parallelism: int = 2) -> str:
    b.set_bolt("q6", SellerAverage(), parallelism).fields_grouping(winning, ["seller"])
    return "q6"
