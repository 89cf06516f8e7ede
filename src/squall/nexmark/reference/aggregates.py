"""The reference of Flink's per-key aggregates over the whole stream: q15 (per-day statistics),
q16 (per channel and day), q17 (per auction and day), q18 (the last bid per bidder and auction)
and q19 (the top 10 bids per auction).

Their groups have no window (an unbounded group by, or a ranking over all the stream), so no event
is late: the result is the final one, once the input has ended. Days and minutes are UTC.

>>> from squall.nexmark.model import Bid
>>> stream = [Bid(7, 1, 500, "Apple", "u", 1_436_918_400_000, ""),
...           Bid(7, 2, 2_000_000, "Apple", "u", 1_436_918_460_000, "")]
>>> q15(stream)
[('2015-07-15', 2, 1, 0, 1, 2, 1, 0, 1, 1, 1, 0, 1)]
>>> q17(stream)
[(7, '2015-07-15', 2, 1, 0, 1, 500, 2000000, 1000250, 2000500)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import astuple
from datetime import UTC, datetime
from typing import Any

from squall.nexmark.model import Bid, Event

RANK_LIMITS = (10_000, 1_000_000)
"""Flink's price ranks: rank 1 below 10,000, rank 2 below 1,000,000, rank 3 the rest."""


def day(date_time: int) -> str:
    """`yyyy-MM-dd` of an event time in milliseconds, UTC."""
    return datetime.fromtimestamp(date_time // 1000, UTC).strftime("%Y-%m-%d")


def minute(date_time: int) -> str:
    """`HH:mm` of an event time in milliseconds, UTC."""
    return datetime.fromtimestamp(date_time // 1000, UTC).strftime("%H:%M")


def rank(price: int) -> int:
    """Flink's price rank: 1, 2 or 3."""
    low, high = RANK_LIMITS
    return 1 if price < low else 2 if price < high else 3


def _bids(events: Iterable[Event]) -> list[Bid]:
    return [e for e in events if isinstance(e, Bid)]


def _statistics(bids: Sequence[Bid]) -> tuple[int, ...]:
    """The 12 counts of q15 and q16: bids, distinct bidders and distinct auctions, each in
    total then per price rank."""
    out: list[int] = []
    for field in (None, "bidder", "auction"):
        groups: list[set[Hashable] | list[Bid]] = []
        for r in (None, 1, 2, 3):
            chosen = [b for b in bids if r is None or rank(b.price) == r]
            groups.append(chosen if field is None else {getattr(b, field) for b in chosen})
        out.extend(len(g) for g in groups)
    return tuple(out)


def q15(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 15 (Flink's), bidding statistics per day: the number of bids, of distinct bidders
    and of distinct auctions, in total and per price rank (`rank`).

    Output: `(day, total_bids, rank1_bids, rank2_bids, rank3_bids, total_bidders,
    rank1_bidders, rank2_bidders, rank3_bidders, total_auctions, rank1_auctions,
    rank2_auctions, rank3_auctions)`, sorted.
    """
    groups: dict[str, list[Bid]] = defaultdict(list)
    for b in _bids(events):
        groups[day(b.date_time)].append(b)
    return sorted((d, *_statistics(bs)) for d, bs in groups.items())


def q16(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 16 (Flink's), channel statistics per day: q15's counts per channel and day, with the
    latest `HH:mm` of the group's bids.

    Output: `(channel, day, minute, total_bids, ..., rank3_auctions)` (q15's twelve counts),
    sorted.
    """
    groups: dict[tuple[str, str], list[Bid]] = defaultdict(list)
    for b in _bids(events):
        groups[b.channel, day(b.date_time)].append(b)
    return sorted((c, d, max(minute(b.date_time) for b in bs), *_statistics(bs))
                  for (c, d), bs in groups.items())


def q17(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 17 (Flink's), auction statistics per day: per auction and day, the number of bids in
    total and per price rank, and the lowest, highest, average and total price. The average is
    Flink's `AVG` of a `BIGINT`, a `BIGINT`: the total divided by the count, truncated.

    Output: `(auction, day, total_bids, rank1_bids, rank2_bids, rank3_bids, min_price,
    max_price, avg_price, sum_price)`, sorted.
    """
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for b in _bids(events):
        groups[b.auction, day(b.date_time)].append(b.price)
    out = []
    for (a, d), prices in groups.items():
        ranks = [rank(p) for p in prices]
        total = sum(prices)
        out.append((a, d, len(prices), ranks.count(1), ranks.count(2), ranks.count(3),
                    min(prices), max(prices), total // len(prices), total))
    return sorted(out)


def q18(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 18 (Flink's), the last bid per bidder and auction: for each (bidder, auction), the
    bid with the latest `date_time`, the later in the stream among equal times (Flink's
    deduplication keeping the last row).

    Output: the bid's `(auction, bidder, price, channel, url, date_time, extra)`, sorted.
    """
    last: dict[tuple[int, int], Bid] = {}
    for b in _bids(events):
        held = last.get((b.bidder, b.auction))
        if held is None or b.date_time >= held.date_time:
            last[b.bidder, b.auction] = b
    return sorted(astuple(b) for b in last.values())


def q19(events: Iterable[Event], top: int = 10) -> list[tuple[Any, ...]]:
    """Query 19 (Flink's), the top bids per auction: the `top` highest-priced bids of each
    auction with their rank from 1; among equal prices the earlier `date_time` ranks first, then
    the earlier in the stream (Flink leaves ties to arrival order).

    Output: the bid's `(auction, bidder, price, channel, url, date_time, extra, rank_number)`,
    sorted.
    """
    groups: dict[int, list[tuple[int, Bid]]] = defaultdict(list)
    for position, b in enumerate(_bids(events)):
        groups[b.auction].append((position, b))
    out: list[tuple[Any, ...]] = []
    for ranked in groups.values():
        ranked.sort(key=lambda pb: (-pb[1].price, pb[1].date_time, pb[0]))
        out.extend((*astuple(b), n) for n, (_, b) in enumerate(ranked[:top], start=1))
    return sorted(out)
