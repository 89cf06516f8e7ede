"""The NEXMark generator: Java's random numbers, Beam's proportions, ids, hot keys, times,
out-of-order groups, delays, sizes; the row and JSON forms; the partition files."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from squall.nexmark import (
    AUCTION,
    BID,
    PERSON,
    ROW_FIELDS,
    Auction,
    Bid,
    GeneratorConfig,
    Person,
    event,
    events,
    from_json,
    from_row,
    read_json_lines,
    read_parquet,
    to_json,
    to_row,
    write_json_lines,
    write_parquet,
)
from squall.nexmark.generator import partition_size
from squall.nexmark.javarandom import JavaRandom

# java.util.Random's own outputs (OpenJDK 17): per seed, nextInt(), nextInt(10), nextInt(1000),
# nextInt(64), nextLong(), nextDouble(), then Math.round(Math.pow(10, nextDouble() * 6) * 100).
JAVA = {
    0: (-1155484576, 8, 29, 38, -6688467811848818630, 0.5504370051176339, 384832),
    42: (-1170105035, 3, 248, 3, 5694868678511409995, 0.27707849007413665, 984677),
    1049: (-1546774208, 1, 105, 20, -6827230772539994978, 0.12923619433147637, 408),
    123456789: (-1442945365, 0, 483, 16, 7203573180470058788, 0.8933411602003871, 3146663),
}

N = 5000
STREAM = list(events(GeneratorConfig(max_events=N)))


@pytest.mark.parametrize("seed", sorted(JAVA))
def test_java_random_draws_what_java_util_random_draws(seed):
    r = JavaRandom(seed)
    got = (r.next_int(), r.next_int_below(10), r.next_int_below(1000), r.next_int_below(64),
           r.next_long(), r.next_double(),
           int(10.0 ** (r.next_double() * 6.0) * 100.0 + 0.5))
    assert got == JAVA[seed]


def test_kinds_follow_beams_proportions_by_event_id():
    kinds = [e.event_type for e in STREAM]
    for block in range(N // 50):
        assert kinds[block * 50: block * 50 + 50] == [PERSON] + [AUCTION] * 3 + [BID] * 46
    assert Counter(kinds) == {PERSON: N // 50, AUCTION: 3 * N // 50, BID: 46 * N // 50}


def test_people_and_auctions_get_consecutive_ids_from_1000():
    people = [e.id for e in STREAM if isinstance(e, Person)]
    auctions = [e.id for e in STREAM if isinstance(e, Auction)]
    assert people == list(range(1000, 1000 + len(people)))
    assert auctions == list(range(1000, 1000 + len(auctions)))


def test_bids_and_auctions_name_people_and_auctions_that_exist_or_come_soon():
    last_person = last_auction = None
    for e in STREAM:
        if isinstance(e, Person):
            last_person = e.id
        elif isinstance(e, Auction):
            last_auction = e.id
            assert 1000 <= e.seller <= last_person + 10
            assert 10 <= e.category <= 14
            assert e.reserve > e.initial_bid > 0
            assert e.expires > e.date_time
        else:
            assert max(1000, last_auction - 100) <= e.auction <= last_auction + 10
            assert 1000 <= e.bidder <= last_person + 10


def _hot_shares(stream):
    """The shares of bids on the hot auction and by the hot bidder: the first of the last
    batch of 100 auctions, the second of the last batch of 100 people."""
    last_person = last_auction = 1000
    hot_auctions = hot_bidders = bids = 0
    for e in stream:
        if isinstance(e, Person):
            last_person = e.id
        elif isinstance(e, Auction):
            last_auction = e.id
        else:
            bids += 1
            hot_auctions += e.auction == 1000 + (last_auction - 1000) // 100 * 100
            hot_bidders += e.bidder == 1001 + (last_person - 1000) // 100 * 100
    return hot_auctions / bids, hot_bidders / bids


@pytest.mark.parametrize("auction_ratio, bidder_ratio", [(2, 4), (10, 2), (1, 1)])
def test_hot_auctions_and_bidders_take_beams_shares(auction_ratio, bidder_ratio):
    # A ratio r sends 1 - 1/r of the bids to the hot key; the other draw may land on it too,
    # often while there are few auctions (the first 5,000 events make 300).
    hot_auction, hot_bidder = _hot_shares(STREAM if (auction_ratio, bidder_ratio) == (2, 4)
                                          else events(GeneratorConfig(
                                              max_events=N, hot_auction_ratio=auction_ratio,
                                              hot_bidders_ratio=bidder_ratio)))
    nominal_auction, nominal_bidder = 1 - 1 / auction_ratio, 1 - 1 / bidder_ratio
    assert nominal_bidder <= hot_bidder < nominal_bidder + 0.03
    assert nominal_auction <= hot_auction < nominal_auction + 0.35


def test_channels_are_flinks_four_hot_ones_for_half_the_bids():
    bids = [e for e in STREAM if isinstance(e, Bid)]
    hot = Counter(b.channel for b in bids if not b.channel.startswith("channel-"))
    assert set(hot) == {"Google", "Facebook", "Baidu", "Apple"}
    assert 0.45 < sum(hot.values()) / len(bids) < 0.55
    urls = {b.channel: b.url for b in bids}
    assert all(url.startswith("https://www.nexmark.com/") for url in urls.values())
    assert len({b.url for b in bids if b.channel == "Apple"}) == 1


def test_event_times_are_base_plus_n_times_the_inter_event_delay():
    config = GeneratorConfig(max_events=N)
    assert [e.date_time for e in STREAM] == [1436918400000 + 10 * n for n in range(N)]
    fast = GeneratorConfig(max_events=100, num_event_generators=1)  # Flink's: 10,000 per s
    assert [e.date_time - fast.base_time for e in events(fast)] == [n // 10 for n in range(100)]
    assert config.out_of_orderness_ms == 0


def test_extra_pads_events_to_the_configured_average_sizes():
    bids = [e for e in STREAM if isinstance(e, Bid)]
    people = [e for e in STREAM if isinstance(e, Person)]
    bid_size = sum(32 + len(b.extra) for b in bids) / len(bids)
    assert 95 < bid_size < 105
    person_size = sum(8 + len(p.name) + len(p.email_address) + len(p.credit_card)
                      + len(p.city) + len(p.state) + len(p.extra) for p in people) / len(people)
    assert 190 < person_size < 210
    big = [e for e in events(GeneratorConfig(max_events=200, avg_bid_byte_size=400))
           if isinstance(e, Bid)]
    assert sum(len(b.extra) for b in big) / len(big) > 300


def test_out_of_order_groups_shuffle_each_group_of_the_same_events():
    config = GeneratorConfig(max_events=N, out_of_order_group_size=25)
    shuffled = list(events(config))
    assert shuffled != STREAM
    for g in range(0, N, 25):
        assert sorted(shuffled[g:g + 25], key=lambda e: e.date_time) == STREAM[g:g + 25]
    late = max(max(e.date_time for e in shuffled[:i]) - shuffled[i].date_time
               for i in range(1, 500))
    assert 200 < late <= config.out_of_orderness_ms == 240


def test_delayed_events_keep_their_place_and_carry_an_earlier_time():
    config = GeneratorConfig(max_events=2000, prob_delayed_event=0.1, occasional_delay_sec=2)
    delayed = list(events(config))
    shifts = [config.timestamp(n) - e.date_time for n, e in enumerate(delayed)]
    moved = [s for s in shifts if s]
    assert 150 < len(moved) < 250
    assert min(moved) >= 1 and max(moved) <= 2000 and len(set(moved)) > 100
    assert [type(e) for e in delayed] == [type(e) for e in STREAM[:2000]]
    assert config.out_of_orderness_ms == 2000
    assert delayed == list(events(config))  # deterministic


def test_an_event_depends_on_its_number_only():
    config = GeneratorConfig(max_events=N)
    assert [event(config, n) for n in (4999, 17, 0)] == [STREAM[4999], STREAM[17], STREAM[0]]
    parts = [list(events(config, i, None, 3)) for i in range(3)]
    assert [len(p) for p in parts] == [partition_size(config, i, 3) for i in range(3)]
    assert sorted((e for p in parts for e in p), key=lambda e: e.date_time) == STREAM


@pytest.mark.parametrize("bad, message", [
    ({"max_events": 0}, "max_events must be a positive int"),
    ({"hot_auction_ratio": 0}, "hot_auction_ratio must be a positive int"),
    ({"out_of_order_group_size": 953}, "out_of_order_group_size must not be a multiple"),
    ({"prob_delayed_event": 1.5}, "prob_delayed_event must be in [0, 1]"),
])
def test_a_bad_config_names_the_setting(bad, message):
    with pytest.raises(ValueError, match="GeneratorConfig: " + message.replace("[", r"\[")):
        GeneratorConfig(**bad)


def test_rows_and_beams_json_round_trip_every_kind():
    sample = STREAM[:60]
    assert [from_row(to_row(e)) for e in sample] == sample
    assert [from_json(to_json(e)) for e in sample] == sample
    row = to_row(STREAM[1])
    assert len(row) == len(ROW_FIELDS) and row[ROW_FIELDS.index("price")] is None
    line = json.loads(to_json(STREAM[0]))
    assert line["newAuction"] is None and line["bid"] is None
    assert list(line["newPerson"]) == ["id", "name", "emailAddress", "creditCard", "city",
                                       "state", "dateTime", "extra"]
    beams = {"newPerson": None, "newAuction": None,
             "bid": {"auction": 1000, "bidder": 1001, "price": 7, "dateTime": 5, "extra": "x"}}
    assert from_json(json.dumps(beams)) == Bid(1000, 1001, 7, "", "", 5, "x")
    with pytest.raises(ValueError, match="exactly one of newPerson, newAuction and bid"):
        from_json('{"newPerson": null, "newAuction": null, "bid": null}')


def test_partition_files_hold_the_stream_in_order(tmp_path):
    config = GeneratorConfig(max_events=500)
    jsonl = write_json_lines(config, str(tmp_path / "j"), partitions=3)
    parquet = write_parquet(config, str(tmp_path / "p"), partitions=2, row_group_size=64)
    assert [os.path.basename(p) for p in jsonl] == [f"events-0000{i}.jsonl" for i in range(3)]
    assert [os.path.basename(p) for p in parquet] == ["events-00000.parquet",
                                                      "events-00001.parquet"]
    with open(jsonl[1]) as f:
        assert [from_json(line) for line in f] == STREAM[1:500:3]
    for got in (list(read_json_lines(str(tmp_path / "j"))),
                list(read_parquet(str(tmp_path / "p")))):
        assert sorted(got, key=lambda e: e.date_time) == STREAM[:500]
    assert list(read_parquet(str(tmp_path / "p")))[:250] == STREAM[0:500:2]
