"""The reference of the queries that join auctions with people or bids over the whole stream:
q3 (local item suggestion), q20 (expanded bid), and the winning bids with what is built on them,
q4 (average price per category), q6 (average selling price by seller), q9 (winning bids).

These joins have no window: their result is the final one, once the input has ended and every
auction has closed (a bounded stream's watermark ends at infinity), so no event is late.

Winning bids (Beam's `WinningBids`, Flink's q9): a bid is valid for its auction when it comes in
the auction's lifetime, `auction.date_time <= bid.date_time < auction.expires` (Flink's start,
Beam's and the original CQL's strict end), and its price is at least the auction's reserve
(Beam's check; Flink's q9 has none). The winner is the valid bid with the highest price, the
earliest `date_time` among equal prices (Beam's `PRICE_THEN_DESCENDING_TIME`, Flink's `ORDER BY
price DESC, dateTime ASC`), the earliest in the stream among those. An auction without a valid
bid has no winner.

>>> from squall.nexmark.model import Auction, Bid
>>> a = Auction(1000, "i", "d", 10, 50, 0, 100, 7, 10, "")
>>> stream = [a, Bid(1000, 1, 60, "", "", 5, ""), Bid(1000, 2, 60, "", "", 3, ""),
...           Bid(1000, 3, 90, "", "", 100, "")]     # 90 comes as the auction expires
>>> w = winning_bids(stream)[1000][1]
>>> w.bidder, w.price
(2, 60)
>>> q4(stream)
[(10, 60.0)]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import astuple
from typing import Any

from squall.nexmark.model import Auction, Bid, Event, Person

LOCAL_STATES = ("OR", "ID", "CA")
"""q3's states."""
CATEGORY = 10
"""q3's and q20's category."""


def q3(events: Iterable[Event]) -> list[tuple[str, str, str, int]]:
    """Query 3, local item suggestion: the auctions of category 10 whose seller is a person in
    Oregon, Idaho or California. An incremental inner join of people and auctions on
    `seller = person.id`; its result set once both streams have ended (a person may come before
    or after their auctions).

    Output: `(name, city, state, auction_id)`, sorted.
    """
    people: dict[int, Person] = {}
    auctions: list[Auction] = []
    for e in events:
        if isinstance(e, Person) and e.state in LOCAL_STATES:
            people[e.id] = e
        elif isinstance(e, Auction) and e.category == CATEGORY:
            auctions.append(e)
    return sorted((p.name, p.city, p.state, a.id) for a in auctions
                  if (p := people.get(a.seller)) is not None)


def q20(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 20 (Flink's), expanded bid: every bid joined with its auction when that auction is of
    category 10 (an inner join on `bid.auction = auction.id`, no time bound).

    Output: `(auction, bidder, price, channel, url, bid_date_time, bid_extra, item_name,
    description, initial_bid, reserve, auction_date_time, expires, seller, category,
    auction_extra)`, sorted.
    """
    stream = list(events)
    auctions = {e.id: e for e in stream if isinstance(e, Auction) and e.category == CATEGORY}
    return sorted(astuple(b) + astuple(a)[1:] for b in stream
                  if isinstance(b, Bid) and (a := auctions.get(b.auction)) is not None)


def winning_bids(events: Iterable[Event]) -> dict[int, tuple[Auction, Bid]]:
    """Each auction with a winner, by auction id: the auction and its winning bid (see the
    module doc)."""
    stream = list(events)
    auctions = {e.id: e for e in stream if isinstance(e, Auction)}
    best: dict[int, tuple[tuple[int, int], Bid]] = {}
    for b in stream:
        if not isinstance(b, Bid):
            continue
        a = auctions.get(b.auction)
        if a is None or not a.date_time <= b.date_time < a.expires or b.price < a.reserve:
            continue
        rank = (b.price, -b.date_time)  # strictly better only: the earlier in the stream stays
        held = best.get(a.id)
        if held is None or rank > held[0]:
            best[a.id] = (rank, b)
    return {aid: (auctions[aid], bid) for aid, (_, bid) in best.items()}


def q9(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 9, winning bids: every auction with its winning bid.

    Output: Flink's columns, the auction's then the bid's: `(id, item_name, description,
    initial_bid, reserve, date_time, expires, seller, category, extra, auction, bidder, price,
    channel, url, bid_date_time, bid_extra)`, sorted.
    """
    return sorted(astuple(a) + astuple(b) for a, b in winning_bids(events).values())


def q4(events: Iterable[Event]) -> list[tuple[int, float]]:
    """Query 4, average price per category: the mean of the winning prices of the closed
    auctions of each category, over the whole stream (the CQL query's and Flink's form; Beam
    averages over sliding windows instead).

    Output: `(category, average)`, sorted; the average is `sum / count` of integer prices, a
    correctly rounded float.
    """
    prices: dict[int, list[int]] = defaultdict(list)
    for a, b in winning_bids(events).values():
        prices[a.category].append(b.price)
    return sorted((c, sum(p) / len(p)) for c, p in prices.items())


def java_round(x: float) -> int:
    """Java's `Math.round`: the nearest integer, halves up."""
    return math.floor(x + 0.5)


def q6(events: Iterable[Event], last: int = 10) -> list[tuple[int, int]]:
    """Query 6, average selling price by seller: per seller, the mean price of their last `last`
    winning bids, the last by the bid's `date_time` then price (Beam's `ASCENDING_TIME_THEN_PRICE`,
    Beam's `MovingMeanSellingPrice`), rounded as Java's `Math.round`. The final value per seller.

    Output: `(seller, average)`, sorted.
    """
    won: dict[int, list[Bid]] = defaultdict(list)
    for a, b in winning_bids(events).values():
        won[a.seller].append(b)
    out = []
    for seller, wins in won.items():
        kept = sorted(wins, key=lambda b: (b.date_time, b.price))[-last:]
        out.append((seller, java_round(sum(b.price for b in kept) / len(kept))))
    return sorted(out)
