"""The reference of the queries that look at one event at a time: q0 (pass-through), q1 (currency
conversion), q2 (selection), q13 (bounded side-input join), q14 (filter and derived columns).

None of them has a window or state, so none has late events: every event in the input counts.

>>> from squall.nexmark.model import Bid
>>> stream = [Bid(1230, 7, 1_000, "Apple", "u", 1_436_918_400_000, "c-c")]
>>> q1(stream), q2(stream)
([(1230, 7, 890, 1436918400000, 'c-c')], [(1230, 1000)])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from squall.nexmark.model import Bid, Event, to_row

EURO_PER_DOLLAR = Decimal("0.908")
"""Flink's conversion factor (q14); Beam's q1 multiplies by 89 and divides by 100."""


def bids(events: Iterable[Event]) -> list[Bid]:
    """The bids of a stream, in stream order."""
    return [e for e in events if isinstance(e, Bid)]


def q0(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Query 0, pass-through: every event, unchanged.

    Output: the events' flat rows (`squall.nexmark.model.ROW_FIELDS`) as tuples, sorted.
    """
    return sorted(tuple(to_row(e)) for e in events)


def q1(events: Iterable[Event]) -> list[tuple[int, int, int, int, str]]:
    """Query 1, currency conversion: every bid with its price in euros, as Beam computes it:
    `price * 89 // 100` (Java's integer division: truncated, prices are never negative). Flink's
    q1 multiplies by the decimal 0.908 instead (as `q14` does).

    Output: `(auction, bidder, price, date_time, extra)`, sorted.
    """
    return sorted((b.auction, b.bidder, b.price * 89 // 100, b.date_time, b.extra)
                  for b in bids(events))


def q2(events: Iterable[Event], modulus: int = 123) -> list[tuple[int, int]]:
    """Query 2, selection: the bids on auctions whose id is a multiple of `modulus` (123 in both
    Beam's `auctionSkip` default and Flink's `MOD(auction, 123) = 0`).

    Output: `(auction, price)`, sorted.
    """
    return sorted((b.auction, b.price) for b in bids(events) if b.auction % modulus == 0)


def side_input(size: int = 10_000) -> dict[int, str]:
    """The bounded side input of q13: keys `0 .. size - 1`, each with its decimal string as value
    (Beam's `prepareSideInput` rows)."""
    return {key: str(key) for key in range(size)}


def q13(events: Iterable[Event], side: Mapping[int, str] | None = None,
        modulus: int = 10_000) -> list[tuple[int, int, int, int, str]]:
    """Query 13 (Flink's), bounded side-input join: every bid joined with the side input's row
    whose key is `auction mod modulus` (an inner join: a bid without a row is left out). The side
    input is fixed for the whole run (`side_input(modulus)` by default), so the lookup's time
    (Flink's processing-time temporal join) does not matter.

    Output: `(auction, bidder, price, date_time, value)`, sorted.
    """
    table = side_input(modulus) if side is None else side
    return sorted((b.auction, b.bidder, b.price, b.date_time, table[b.auction % modulus])
                  for b in bids(events) if b.auction % modulus in table)


def euros(price: int) -> Decimal:
    """`0.908 * price` exactly, with Flink's three decimals (`DECIMAL(23, 3)`)."""
    return EURO_PER_DOLLAR * price


def hour(date_time: int) -> int:
    """The UTC hour of an event time in milliseconds."""
    return date_time // 3_600_000 % 24


def bid_time_type(date_time: int) -> str:
    """Flink's q14 `bidTimeType`: `dayTime` for hours 8 to 18, `nightTime` for 0 to 6 and 20 to
    23, `otherTime` for 7 and 19 (UTC)."""
    h = hour(date_time)
    if 8 <= h <= 18:
        return "dayTime"
    if h <= 6 or h >= 20:
        return "nightTime"
    return "otherTime"


def q14(events: Iterable[Event]) -> list[tuple[int, int, Decimal, str, int, str, int]]:
    """Query 14 (Flink's), filter and derived columns: the bids whose price in euros (`euros`,
    exact decimal) is strictly between 1,000,000 and 50,000,000, with their time of day
    (`bid_time_type`) and the number of `c` characters in `extra`.

    Output: `(auction, bidder, price_in_euros, bid_time_type, date_time, extra, c_counts)`,
    sorted; the price a `Decimal` with three decimals (compare a float with
    `Decimal(str(x))`, or compute `price * 908` in thousandths).
    """
    out = []
    for b in bids(events):
        price = euros(b.price)
        if 1_000_000 < price < 50_000_000:
            out.append((b.auction, b.bidder, price, bid_time_type(b.date_time), b.date_time,
                        b.extra, b.extra.count("c")))
    return sorted(out)
