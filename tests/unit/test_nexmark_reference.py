"""The NEXMark reference (squall.nexmark.reference): each query on a small hand-made stream whose
answer is worked out here, late and dropped events and ties included; and the reference over the
generator's stream is deterministic, q0 giving back its input."""

from __future__ import annotations

from collections import Counter
from dataclasses import astuple
from decimal import Decimal

import pytest

from squall.nexmark import Auction, Bid, GeneratorConfig, Person, events, from_row, to_row
from squall.nexmark.reference import (
    DROPPED,
    LATE,
    ON_TIME,
    QUERIES,
    WINDOWED,
    EventTime,
    judge,
    q0,
    q1,
    q2,
    q3,
    q4,
    q5,
    q6,
    q7,
    q8,
    q9,
    q10,
    q11,
    q12,
    q13,
    q14,
    q15,
    q16,
    q17,
    q18,
    q19,
    q20,
    shard,
    side_input,
)
from squall.nexmark.reference.lateness import sliding, status

DAY = 86_400_000
HOUR = 3_600_000
T = 1_436_918_400_000  # 2015-07-15T00:00:00Z


def P(id, ts=0, state="OR", name="Ann", city="Bend"):
    return Person(id, name, f"{name}@x.com", "0000 0000 0000 0000", city, state, ts, "")


def A(id, seller=1, ts=0, expires=100, reserve=0, category=10):
    return Auction(id, f"item{id}", "d", 1, reserve, ts, expires, seller, category, "")


def B(auction, bidder=1, price=1, ts=0, channel="Apple", extra=""):
    return Bid(auction, bidder, price, channel, "https://u", ts, extra)


# ---- one event at a time ------------------------------------------------------------------

def test_q0_passes_every_event_through():
    stream = [P(1), A(2), B(2), B(2, price=5)]
    assert q0(stream) == sorted(tuple(to_row(e)) for e in stream)
    assert Counter(map(from_row, q0(stream))) == Counter(stream)


def test_q1_converts_prices_as_beam_does():
    stream = [B(1, price=100), B(2, price=999), B(3, price=1), P(9)]
    # 100 * 89 // 100 = 89; 999 * 89 = 88911, // 100 = 889 (truncated); 1 * 89 // 100 = 0
    assert q1(stream) == [(1, 1, 89, 0, ""), (2, 1, 889, 0, ""), (3, 1, 0, 0, "")]


def test_q2_selects_the_auctions_multiple_of_123():
    stream = [B(123, price=5), B(124, price=6), B(246, price=7), A(123)]
    # 123 = 1 x 123, 246 = 2 x 123; 124 is not; the auction event is not a bid
    assert q2(stream) == [(123, 5), (246, 7)]


def test_q13_joins_bids_with_the_bounded_side_input():
    stream = [B(1000, price=1), B(1003, price=2), B(1005, price=3)]
    # keys 1000 % 10 = 0 and 1003 % 10 = 3 are in the side input; 1005 % 10 = 5 is not
    assert q13(stream, {0: "zero", 3: "three"}, modulus=10) == [
        (1000, 1, 1, 0, "zero"), (1003, 1, 2, 0, "three")]
    # by default keys 0 .. 9999, each its own string: 10007 % 10000 = 7
    assert q13([B(10007)]) == [(10007, 1, 1, 0, "7")]
    assert side_input(3) == {0: "0", 1: "1", 2: "2"}


def test_q14_filters_on_the_euro_price_and_derives_columns():
    stream = [
        B(1, price=1_101_322, ts=T + 8 * HOUR, extra="abcc"),   # 0.908 x = 1,000,000.376: in
        B(2, price=1_101_321, ts=T + 8 * HOUR),                 # 999,999.468: out
        B(3, price=55_066_079, ts=T + 7 * HOUR),                # 49,999,999.732: in
        B(4, price=55_066_080, ts=T),                           # 50,000,000.640: out
        B(5, price=2_000_000, ts=T + 19 * HOUR + 59 * 60_000),  # 1,816,000.000: in
        B(6, price=2_000_000, ts=T + 20 * HOUR),
        B(7, price=2_000_000, ts=T + 6 * HOUR),
        B(8, price=2_000_000, ts=T + 18 * HOUR, extra="c"),
    ]
    got = {row[0]: row for row in q14(stream)}
    assert sorted(got) == [1, 3, 5, 6, 7, 8]
    assert got[1] == (1, 1, Decimal("1000000.376"), "dayTime", T + 8 * HOUR, "abcc", 2)
    assert got[3][2] == Decimal("49999999.732")
    # hours 7 and 19 are neither day (8-18) nor night (0-6, 20-23)
    assert [got[k][3] for k in (3, 5, 6, 7, 8)] == [
        "otherTime", "otherTime", "nightTime", "nightTime", "dayTime"]
    assert got[8][6] == 1


# ---- joins over the whole stream ----------------------------------------------------------

def test_q3_joins_local_people_with_category_10_auctions_in_any_order():
    stream = [
        A(13, seller=3),                       # before its seller: the join waits for it
        P(1, state="OR", name="Ann", city="Bend"),
        P(2, state="WA", name="Bob"),
        A(10, seller=1), A(11, seller=2),      # Bob is in WA: out
        A(12, seller=3, category=11),          # category 11: out
        P(3, state="CA", name="Cy", city="Los Angeles"),
        A(14, seller=9),                       # no such person
    ]
    assert q3(stream) == [("Ann", "Bend", "OR", 10), ("Cy", "Los Angeles", "CA", 13)]


def test_q20_expands_bids_of_category_10_auctions():
    a10, a11 = A(10, category=10, ts=5), A(11, category=11)
    stream = [a10, a11, B(10, price=3, ts=7), B(11, price=4), B(12, price=5)]
    # only the bid on auction 10: the bid's columns, then the auction's without its id
    assert q20(stream) == [(10, 1, 3, "Apple", "https://u", 7, "", "item10", "d", 1, 0, 5, 100,
                            1, 10, "")]


def _auctions_and_bids():
    a1 = A(1, seller=7, category=10, ts=0, expires=100, reserve=50)
    a2 = A(2, seller=7, category=10, ts=0, expires=100, reserve=10)
    a3 = A(3, seller=8, category=11, ts=0, expires=100, reserve=1000)
    bids = [
        B(1, bidder=1, price=40, ts=5),    # below a1's reserve 50
        B(1, bidder=2, price=70, ts=10),   # a1's winner: 70
        B(1, bidder=3, price=80, ts=100),  # at a1's expiry: outside its lifetime
        B(2, bidder=4, price=30, ts=20),   # a2: 30 at 20 and 30 at 15 tie: the earlier wins
        B(2, bidder=5, price=30, ts=15),
        B(2, bidder=6, price=30, ts=15),   # same price and time: the first in the stream stays
        B(2, bidder=9, price=99, ts=-1),   # before a2 starts
        B(3, bidder=1, price=999, ts=50),  # below a3's reserve: a3 has no winner
        B(4, bidder=1, price=5, ts=1),     # no such auction
    ]
    return a1, a2, a3, bids


def test_q9_winning_bids_with_ties_to_the_earliest():
    a1, a2, a3, bids = _auctions_and_bids()
    assert q9([a1, a2, a3, *bids]) == [astuple(a1) + astuple(bids[1]),
                                        astuple(a2) + astuple(bids[4])]


def test_q4_averages_winning_prices_per_category():
    a1, a2, a3, bids = _auctions_and_bids()
    # category 10: winners 70 (a1) and 30 (a2): (70 + 30) / 2 = 50; category 11: no winner
    assert q4([a1, a2, a3, *bids]) == [(10, 50.0)]


def test_q6_averages_the_last_10_winning_bids_per_seller():
    stream = []
    # seller 7: 11 auctions won at 1000 (t=0), then 10, 20, ..., 100 (t=1..10): the last 10 by
    # bid time leave out 1000: (10 + ... + 100) / 10 = 55
    for k, price in enumerate([1000, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]):
        stream += [A(100 + k, seller=7), B(100 + k, price=price, ts=k)]
    # seller 8: 2 and 3: 2.5, which Java's Math.round takes up to 3 (Python's round gives 2)
    stream += [A(200, seller=8), B(200, price=2), A(201, seller=8), B(201, price=3, ts=1)]
    assert q6(stream) == [(7, 55), (8, 3)]


# ---- windowed queries ---------------------------------------------------------------------

def test_q5_hot_items_in_sliding_windows_with_late_and_dropped_bids():
    stream = [B(1, ts=1000), B(2, ts=2000), B(1, ts=6000), B(2, ts=7000), B(3, ts=11000),
              B(2, ts=4000),   # behind the watermark 11 s (no delay)
              B(3, ts=12000)]
    time = EventTime(allowed_lateness_ms=5000)
    # 4 s is in [-5 s, 5 s) and [0, 10 s): the first expired (5 + 5 <= 11), the second is late
    # (10 <= 11) but not expired (10 + 5 > 11)
    late = [(w, s) for e, w, s in judge(stream, time, sliding(10_000, 5_000))
            if e.date_time == 4000]
    assert late == [((-5000, 5000), DROPPED), ((0, 10000), LATE)]
    assert q5(stream, time) == [
        (-5000, 5000, 1, 1), (-5000, 5000, 2, 1),  # 1 s and 2 s: a tie, both kept
        (0, 10000, 2, 3),                          # auction 2: 2 s, 7 s, 4 s (late) > 1's 2
        (5000, 15000, 3, 2),                       # 3: 11 s, 12 s; 1 and 2 once each
        (10000, 20000, 3, 2),
    ]
    # without lateness the bid at 4 s is dropped everywhere: auctions 1 and 2 tie in [0, 10 s)
    assert q5(stream)[2:4] == [(0, 10000, 1, 2), (0, 10000, 2, 2)]


def test_q7_highest_bids_in_fixed_windows_with_ties_and_lateness():
    stream = [B(1, price=5, ts=1000), B(2, price=9, ts=2000), B(3, price=9, ts=3000),
              B(4, price=7, ts=11000),
              B(5, price=20, ts=9000),   # watermark 11 s: late for [0, 10 s), 10 + 2 > 11
              B(7, price=1, ts=12000),
              B(6, price=30, ts=8000),   # watermark 12 s: [0, 10 s) expired, 10 + 2 <= 12
              B(8, price=7, ts=15000)]   # ties auction 4's 7 in [10 s, 20 s)
    time = EventTime(allowed_lateness_ms=2000)
    assert [s for e, _, s in judge(stream, time, lambda e: [(0, 10000)] if e.date_time < 10000
                                   else [])] == [ON_TIME] * 3 + [LATE, DROPPED]
    assert q7(stream, time) == [(0, 10000, 5, 1, 20, 9000),
                                (10000, 20000, 4, 1, 7, 11000), (10000, 20000, 8, 1, 7, 15000)]
    # one millisecond more lateness and the window has not expired at 12 s: 30 counts
    assert q7(stream, EventTime(allowed_lateness_ms=2001))[0] == (0, 10000, 6, 1, 30, 8000)
    # without lateness the late 20 is dropped too: auctions 2 and 3 tie at 9
    assert q7(stream)[:2] == [(0, 10000, 2, 1, 9, 2000), (0, 10000, 3, 1, 9, 3000)]


def test_q8_joins_new_people_and_their_auctions_per_window_and_partition():
    stream = [
        P(1, ts=1000, name="Ann"),                  # position 0: partition 0 of 2
        A(100, seller=1, ts=2000, reserve=50),      # 1: partition 1
        A(101, seller=1, ts=3000, reserve=60),      # 2: p0, its watermark 1 s
        P(2, ts=12000, name="Bob"),                 # 3: p1, 2 s
        A(104, seller=1, ts=8000, reserve=90),      # 4: p0, 3 s: on time in [0, 10 s)
        A(103, seller=1, ts=5000, reserve=80),      # 5: p1, 12 s: [0, 10 s) has passed
        A(102, seller=2, ts=13000, reserve=70),     # 6: p0, 8 s
        A(105, seller=1, ts=14000, reserve=10),     # 7: p1, 12 s; Ann is not in [10 s, 20 s)
    ]
    ann = [(0, 10000, 1, "Ann", r) for r in (50, 60, 90)]
    bob = [(10000, 20000, 2, "Bob", 70)]
    assert q8(stream, EventTime(partitions=2)) == ann + bob
    # 103 is late at 12 s but not expired with 3 s of lateness (10 + 3 > 12): it counts
    assert q8(stream, EventTime(partitions=2, allowed_lateness_ms=3000)) == sorted(
        [*ann, (0, 10000, 1, "Ann", 80), *bob])
    # read as one partition, 104 at 8 s is behind 12 s too: dropped
    assert q8(stream) == ann[:2] + bob


def test_q10_groups_every_event_by_window_and_shard():
    e1, e2, e3 = B(1, ts=1000), P(5, ts=2000), B(2, ts=12000)
    e4 = A(6, ts=3000)     # behind 12 s: late in [0, 10 s), not expired (10 + 5 > 12)
    e5 = B(3, ts=16000)
    e6 = B(4, ts=100)      # behind 16 s: [0, 10 s) expired (10 + 5 <= 16), dropped
    stream = [e1, e2, e3, e4, e5, e6]
    expected: dict = {}
    for start, e in [(0, e1), (0, e2), (10000, e3), (0, e4), (10000, e5)]:
        expected.setdefault((start, shard(e, 2)), []).append(tuple(to_row(e)))
    got = q10(stream, EventTime(allowed_lateness_ms=5000), num_shards=2)
    assert got == {k: sorted(v) for k, v in expected.items()}
    assert sum(map(len, got.values())) == 5
    assert {k[1] for k in got} <= {"shard-00000-of-00002", "shard-00001-of-00002"}
    assert shard(Bid(1000, 1001, 250, "Apple", "https://a", 1436918400010, "")) == \
        "shard-00001-of-00010"


def test_q11_sessions_per_bidder_with_late_merged_and_dropped_bids():
    stream = [
        B(1, bidder=1, ts=1000), B(1, bidder=2, ts=2000), B(1, bidder=1, ts=5000),
        B(1, bidder=2, ts=12000),  # touches bidder 2's [2 s, 12 s): a session of its own
        B(1, bidder=1, ts=30000),
        B(1, bidder=3, ts=15000),  # watermark 30 s: [15 s, 25 s) late, 25 + 10 > 30: counts
        B(1, bidder=3, ts=2000),   # [2 s, 12 s): 12 + 10 <= 30, dropped
        B(1, bidder=2, ts=19000),  # late; overlaps [12 s, 22 s), not expired (22 + 10 > 30)
    ]
    assert q11(stream, EventTime(allowed_lateness_ms=10_000)) == [
        (1, 1000, 15000, 2),    # 1 s and 5 s: [1 s, 11 s) and [5 s, 15 s) overlap
        (1, 30000, 40000, 1),
        (2, 2000, 12000, 1),
        (2, 12000, 29000, 2),   # 12 s and the late 19 s
        (3, 15000, 25000, 1),
    ]


def test_q11_refuses_a_late_bid_reaching_a_session_that_may_be_purged():
    stream = [B(1, bidder=1, ts=1000), B(1, bidder=1, ts=5000), B(1, bidder=1, ts=30000),
              # [14 s, 24 s) is not expired (24 + 10 > 30) but reaches [1 s, 15 s), which is
              # (15 + 10 <= 30): an operator may have purged it or not
              B(1, bidder=1, ts=14000)]
    with pytest.raises(ValueError, match=r"bidder 1 at 14000 .*\[1000, 15000\).*"
                                         r"allowed_lateness_ms"):
        q11(stream, EventTime(allowed_lateness_ms=10_000))


def test_q12_counts_every_bid_of_each_bidder_whatever_the_panes():
    stream = [B(1, bidder=1), B(2, bidder=2, ts=99), B(3, bidder=1, ts=5), P(1), A(2)]
    assert q12(stream) == {1: 2, 2: 1}


# ---- Flink's aggregates -------------------------------------------------------------------

def test_q15_statistics_per_day_by_price_rank():
    stream = [B(1, bidder=1, price=9_999, ts=T),           # rank 1 (< 10,000)
              B(1, bidder=2, price=10_000, ts=T + 1),      # rank 2
              B(2, bidder=2, price=999_999, ts=T + 2),     # rank 2
              B(3, bidder=3, price=1_000_000, ts=T + 3),   # rank 3 (>= 1,000,000)
              B(3, bidder=1, price=5, ts=T + DAY)]         # the next day
    assert q15(stream) == [
        # bids 4 (1, 2, 1); bidders {1,2,3} ({1}, {2}, {3}); auctions {1,2,3} ({1}, {1,2}, {3})
        ("2015-07-15", 4, 1, 2, 1, 3, 1, 1, 1, 3, 1, 2, 1),
        ("2015-07-16", 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0),
    ]


def test_q16_statistics_per_channel_and_day_with_the_last_minute():
    stream = [B(1, price=5, ts=T + 61_000, channel="Apple"),       # 00:01
              B(2, price=5, ts=T + 10 * HOUR, channel="Apple"),    # 10:00
              B(1, price=20_000, ts=T + 30_000, channel="Baidu")]  # 00:00
    assert q16(stream) == [
        ("Apple", "2015-07-15", "10:00", 2, 2, 0, 0, 1, 1, 0, 0, 2, 2, 0, 0),
        ("Baidu", "2015-07-15", "00:00", 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0),
    ]


def test_q17_statistics_per_auction_and_day():
    stream = [B(1, price=1, ts=T), B(1, price=2, ts=T + 5), B(1, price=2_000_000, ts=T + DAY),
              B(2, price=50_000, ts=T)]
    assert q17(stream) == [
        (1, "2015-07-15", 2, 2, 0, 0, 1, 2, 1, 3),  # average (1 + 2) / 2 = 1.5: truncated, 1
        (1, "2015-07-16", 1, 0, 0, 1, 2_000_000, 2_000_000, 2_000_000, 2_000_000),
        (2, "2015-07-15", 1, 0, 1, 0, 50_000, 50_000, 50_000, 50_000),
    ]


def test_q18_keeps_the_last_bid_per_bidder_and_auction():
    stream = [B(1, bidder=1, price=10, ts=5), B(1, bidder=1, price=20, ts=9),
              B(1, bidder=1, price=30, ts=9),   # the same time: the later in the stream wins
              B(1, bidder=1, price=40, ts=7),   # earlier than 9: out of order, not the last
              B(1, bidder=2, price=50, ts=1), B(2, bidder=1, price=60, ts=2)]
    assert [(a, b, p) for a, b, p, *_ in q18(stream)] == [(1, 1, 30), (1, 2, 50), (2, 1, 60)]


def test_q19_ranks_the_top_10_bids_per_auction():
    prices = [50, 100, 100, 10, 20, 30, 40, 60, 70, 80, 90, 5]
    times = [0, 5, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    stream = [B(1, bidder=i, price=p, ts=t)
              for i, (p, t) in enumerate(zip(prices, times, strict=True))]
    stream.append(B(2, bidder=99, price=1))
    got = [(a, bidder, p, n) for a, bidder, p, _, _, _, _, n in q19(stream)]
    # 100 at 3 s (bidder 2) before 100 at 5 s (bidder 1), then 90 ... 20; 10 and 5 are out
    expected = [(1, 2, 100, 1), (1, 1, 100, 2)] + [
        (1, prices.index(p), p, n) for n, p in enumerate(range(90, 10, -10), start=3)]
    assert got == sorted([*expected, (2, 99, 1, 1)])


# ---- over the generator's stream ----------------------------------------------------------

STREAM = list(events(GeneratorConfig(max_events=5000)))


def test_the_reference_is_deterministic_and_q0_gives_back_the_stream():
    time = EventTime(partitions=4)
    first = {name: (q(STREAM, time) if name in WINDOWED else q(STREAM))
             for name, q in QUERIES.items()}
    again = list(events(GeneratorConfig(max_events=5000)))
    second = {name: (q(again, time) if name in WINDOWED else q(again))
              for name, q in QUERIES.items()}
    assert first == second
    assert first["q0"] == sorted(tuple(to_row(e)) for e in STREAM)
    assert all(first[name] for name in QUERIES), [n for n in QUERIES if not first[n]]
    assert sum(first["q12"].values()) == len(first["q1"]) == 4600


def test_no_generated_event_is_late_with_the_configs_out_of_orderness_as_delay():
    config = GeneratorConfig(max_events=5000, out_of_order_group_size=20,
                             prob_delayed_event=0.01)
    stream = list(events(config))
    tight = EventTime(partitions=2, watermark_delay_ms=config.out_of_orderness_ms)
    statuses = {s for *_, s in judge(stream, tight, sliding(10_000, 5_000))}
    assert statuses == {ON_TIME}
    # with no delay, the shuffled and delayed events are behind their partitions' watermarks
    assert LATE in {s for *_, s in judge(stream, EventTime(partitions=2, allowed_lateness_ms=
                                                            60_000), sliding(10_000, 5_000))}


def test_a_window_is_late_from_its_end_and_expired_from_its_end_plus_the_lateness():
    time = EventTime(allowed_lateness_ms=2000)
    assert [status((0, 10000), w, time) for w in (None, 9999, 10000, 11999, 12000)] == [
        ON_TIME, ON_TIME, LATE, LATE, DROPPED]


def test_event_time_settings_are_checked():
    with pytest.raises(ValueError, match="EventTime: watermark_delay_ms must be an int >= 0"):
        EventTime(watermark_delay_ms=-1)
    with pytest.raises(ValueError, match="EventTime: partitions must be a positive int"):
        EventTime(partitions=True)
