"""The reference of the windowed queries: q5 (hot items, sliding windows), q7 (highest bid, fixed
windows), q8 (monitor new users, a windowed join), q10 (log to sharded files), q11 (user sessions)
and q12 (processing-time windows).

Each event-time query takes an `EventTime`: the source partitions the stream is read as, the
watermark delay and the allowed lateness of its windowed operators. An event counts in a window
unless that window had expired against its partition's watermark (`squall.nexmark.reference.
lateness`); late events that still count are in the result, as an accumulating operator's last
pane has them. The results are the final ones, once the input has ended.

>>> from squall.nexmark.model import Bid
>>> bid = lambda auction, price, ts: Bid(auction, 1, price, "", "", ts, "")
>>> q7([bid(1, 5, 1_000), bid(2, 9, 2_000), bid(4, 20, 8_000), bid(3, 9, 12_000)])
[(0, 10000, 4, 1, 20, 8000), (10000, 20000, 3, 1, 9, 12000)]
"""

from __future__ import annotations

import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from squall.nexmark.model import Auction, Bid, Event, Person, to_json, to_row
from squall.nexmark.reference.lateness import (
    DROPPED,
    IN_ORDER,
    EventTime,
    Window,
    fixed,
    judge,
    sliding,
    status,
    watermarks,
)

WINDOW_SIZE_MS = 10_000
"""Beam's `windowSizeSec` (10 s): q5's window, q7's, q8's, q10's, q11's session gap."""
WINDOW_PERIOD_MS = 5_000
"""Beam's `windowPeriodSec` (5 s): q5's period."""
NUM_SHARDS = 10
"""q10's shards: Beam's 5 per worker, with 2 workers."""


def counted(events: Iterable[Event], time: EventTime, assign: Callable[[Event], list[Window]],
            ) -> dict[Window, list[Event]]:
    """Per window, the events that count in it (all but the dropped), in stream order."""
    out: dict[Window, list[Event]] = defaultdict(list)
    for e, w, s in judge(events, time, assign):
        if s != DROPPED:
            out[w].append(e)
    return out


def _bids_in(assign: Callable[[Event], list[Window]]) -> Callable[[Event], list[Window]]:
    return lambda e: assign(e) if isinstance(e, Bid) else []


def q5(events: Iterable[Event], time: EventTime = IN_ORDER,
       size_ms: int = WINDOW_SIZE_MS, period_ms: int = WINDOW_PERIOD_MS,
       ) -> list[tuple[int, int, int, int]]:
    """Query 5, hot items: in each sliding window (`size_ms` every `period_ms`, Beam's defaults
    10 s every 5 s; the CQL query's hour every minute, scaled), the auction(s) with the most
    bids: every auction whose count equals the window's largest (ties all kept).

    Output: `(window_start, window_end, auction, count)`, sorted.
    """
    out: list[tuple[int, int, int, int]] = []
    for (start, end), bs in counted(events, time, _bids_in(sliding(size_ms, period_ms))).items():
        counts = Counter(b.auction for b in bs if isinstance(b, Bid))
        top = max(counts.values())
        out.extend((start, end, a, n) for a, n in counts.items() if n == top)
    return sorted(out)


def q7(events: Iterable[Event], time: EventTime = IN_ORDER,
       size_ms: int = WINDOW_SIZE_MS) -> list[tuple[int, int, int, int, int, int]]:
    """Query 7, highest bid: in each fixed window of `size_ms` (Beam's 10 s), the bids whose price
    is the window's highest (ties all kept).

    Output: `(window_start, window_end, auction, bidder, price, date_time)`, sorted.
    """
    out: list[tuple[int, int, int, int, int, int]] = []
    for (start, end), bs in counted(events, time, _bids_in(fixed(size_ms))).items():
        top = max(b.price for b in bs if isinstance(b, Bid))
        out.extend((start, end, b.auction, b.bidder, b.price, b.date_time)
                   for b in bs if isinstance(b, Bid) and b.price == top)
    return sorted(out)


def q8(events: Iterable[Event], time: EventTime = IN_ORDER,
       size_ms: int = WINDOW_SIZE_MS) -> list[tuple[int, int, int, str, int]]:
    """Query 8, monitor new users: the people who created auctions in the fixed window (of
    `size_ms`, Beam's 10 s) in which they joined: people and auctions joined per window on
    `auction.seller = person.id`, one row per (person, auction) as Beam's `IdNameReserve`.

    Output: `(window_start, window_end, person_id, name, reserve)`, sorted.
    """
    def assign(e: Event) -> list[Window]:
        return fixed(size_ms)(e) if isinstance(e, Person | Auction) else []

    out: list[tuple[int, int, int, str, int]] = []
    for (start, end), es in counted(events, time, assign).items():
        people = {e.id: e for e in es if isinstance(e, Person)}
        out.extend((start, end, e.seller, people[e.seller].name, e.reserve) for e in es
                   if isinstance(e, Auction) and e.seller in people)
    return sorted(out)


def shard(event: Event, num_shards: int = NUM_SHARDS) -> str:
    """q10's shard of an event, named as Beam names it: `shard-%05d-of-%05d`, the number the
    CRC-32 of the event's Beam JSON modulo `num_shards` (Beam takes Java's `hashCode` of the
    event object, which no other language reproduces).

    >>> shard(Bid(1000, 1001, 250, "Apple", "https://a", 1436918400010, ""))
    'shard-00001-of-00010'
    """
    number = zlib.crc32(to_json(event).encode()) % num_shards
    return f"shard-{number:05d}-of-{num_shards:05d}"


def q10(events: Iterable[Event], time: EventTime = IN_ORDER, size_ms: int = WINDOW_SIZE_MS,
        num_shards: int = NUM_SHARDS) -> dict[tuple[int, str], list[tuple[Any, ...]]]:
    """Query 10, log to sharded files: every event, in fixed windows of `size_ms` (Beam's 10 s),
    grouped by its `shard`: what the files of a window's shard hold, over all their panes.

    Output: `{(window_start, shard): sorted flat rows (tuples)}`.
    """
    out: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
    for (start, _), es in counted(events, time, fixed(size_ms)).items():
        for e in es:
            out[start, shard(e, num_shards)].append(tuple(to_row(e)))
    return {k: sorted(v) for k, v in sorted(out.items())}


def q11(events: Iterable[Event], time: EventTime = IN_ORDER,
        gap_ms: int = WINDOW_SIZE_MS) -> list[tuple[int, int, int, int]]:
    """Query 11, user sessions: the bids per bidder in session windows with a gap of `gap_ms`
    (Beam's 10 s). A bid opens `[ts, ts + gap)`; windows of a bidder merge when they overlap
    (Beam's rule: windows that only touch stay apart). A bid is dropped when its own window had
    expired against its partition's watermark (`ts + gap + allowed lateness <= watermark`).

    Beam's q11 fires a discarding pane every `maxLogEvents` bids; this is the session's total.

    A bid more than the allowed lateness behind its watermark that reaches a session of its
    bidder which had expired against that watermark is refused with a ValueError: an operator
    may or may not have purged that session by then (it depends on when its own watermark
    moved), so the result is not determined. Allow more lateness than the stream's
    out-of-orderness to avoid it.

    Output: `(bidder, session_start, session_end, count)`, sorted.
    """
    stream = list(events)
    sessions: dict[int, list[list[int]]] = defaultdict(list)  # bidder -> [[start, end, n]]
    lateness = time.allowed_lateness_ms
    for e, w in zip(stream, watermarks(stream, time), strict=True):
        if not isinstance(e, Bid):
            continue
        start, end = e.date_time, e.date_time + gap_ms
        if status((start, end), w, time) == DROPPED:
            continue
        mine = sessions[e.bidder]
        touching = [s for s in mine if s[0] < end and start < s[1]]
        for s in touching:
            if w is not None and s[1] + lateness <= w:
                raise ValueError(
                    f"nexmark reference q11: the bid of bidder {e.bidder} at {e.date_time} "
                    f"reaches session [{s[0]}, {s[1]}), expired at the bid's watermark {w}: "
                    "whether it merges depends on when the operator purged it; set "
                    "EventTime.allowed_lateness_ms above the stream's out-of-orderness")
        merged = [min([start, *(s[0] for s in touching)]), max([end, *(s[1] for s in touching)]),
                  1 + sum(s[2] for s in touching)]
        mine[:] = [s for s in mine if all(s is not t for t in touching)] + [merged]
    return sorted((bidder, s, t, n) for bidder, ss in sessions.items() for s, t, n in ss)


def q12(events: Iterable[Event]) -> dict[int, int]:
    """Query 12, processing-time windows: bids per bidder in windows of processing time (Beam: a
    global window firing a discarding pane `windowSizeSec` after each pane's first bid; Flink:
    tumbling processing-time windows). Which pane a bid lands in depends on when it is processed,
    so panes are not referenceable; what is, whatever the timing: the panes of a bidder add up
    to all of its bids (discarding panes, nothing late in processing time).

    Output: `{bidder: number of bids}`, the sum of each bidder's pane counts.
    """
    return dict(sorted(Counter(e.bidder for e in events if isinstance(e, Bid)).items()))
