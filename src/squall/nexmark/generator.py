"""The NEXMark event generator: every event is a function of its event number alone.

It follows the published facts of Beam's generator
(`org.apache.beam.sdk.nexmark.sources.generator`), which Flink's nexmark generator shares:

- **Kinds by id**: of every 50 event ids, 1 is a person, 3 are auctions and 46 are bids
  (id mod 50: 0 a person, 1 to 3 auctions, 4 to 49 bids). Person and auction ids count up from
  1000 as their events come; categories are 10 to 14.
- **Hot keys**: with `hot_auction_ratio` 2, half the bids go to the "hot" auction (the first of
  the last batch of 100 auctions), the others to one of the auctions in flight (the last
  `num_in_flight_auctions`, plus 10 not created yet); likewise sellers (`hot_sellers_ratio` 4:
  three quarters of auctions) and bidders (`hot_bidders_ratio` 4), among the last
  `num_active_people` people, plus 10 not created yet.
- **Prices** `round(10 ** (6 u) * 100)` cents for a uniform `u`; a reserve is the initial bid
  plus another such price; an auction expires after a random length averaging the time it takes
  to create `num_in_flight_auctions` more auctions.
- **Padding**: each event's `extra` is a string that brings its size to about the configured
  average (`avg_person_byte_size` and the others; 20 % either way).
- **Time**: event number `n` has event time `base_time + n x inter-event delay`; with
  `out_of_order_group_size` g > 1, each group of g consecutive numbers is emitted in a fixed
  shuffled order (number `n` carries the event of number `g*(n//g) + (953 n) mod g`).
- **Randomness**: one `java.util.Random` seeded with the event id (`JavaRandom`), drawn in
  Beam's order, so that a person, auction or bid has the values Beam's generator gives the same
  id (Beam's first generator: event ids from 0, one timeline). A bid's `channel` and `url`
  (Flink's fields, not Beam's) come from a second stream seeded from the id, so they leave
  Beam's values alone.

Occasional delayed events (`prob_delayed_event`, off by default): the chosen events keep their
place in the stream and carry an event time `delay` earlier, `delay` uniform in 1 ms to
`occasional_delay_sec` (docs/design/nexmark.md says why this replaces Beam's holding them back).

>>> config = GeneratorConfig(max_events=100)
>>> [type(e).__name__ for e in events(config, 0, 6)]
['Person', 'Auction', 'Auction', 'Auction', 'Bid', 'Bid']
>>> p = event(config, 0)
>>> p.id, p.name, p.date_time, p.state
(1000, 'Peter Jones', 1436918400000, 'WY')
>>> b = event(config, 4)
>>> b.auction, b.bidder, b.price, b.date_time
(1000, 1001, 32530001, 1436918400040)
>>> sorted(type(e).__name__ for e in events(config, 0, 50)).count("Bid")
46
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from squall.nexmark.javarandom import JavaRandom
from squall.nexmark.model import Auction, Bid, Event, Person

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
HOT_AUCTION_RATIO = HOT_SELLER_RATIO = HOT_BIDDER_RATIO = 100  # the batch a hot key leads
PERSON_ID_LEAD = AUCTION_ID_LEAD = 10  # ids not created yet a random pick may name
BASE_TIME_MS = 1436918400000  # 2015-07-15T00:00:00Z, Beam's deterministic base time

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
             "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")  # Flink's nexmark
NUM_CHANNELS = 10_000
_CHANNEL_SALT = 0x6E65786D61726B  # seeds a bid's channel stream apart from Beam's draws
_DELAY_SALT = 0x64656C6179  # and an event's delay


def _seed(value: int, salt: int) -> int:
    """A well-mixed seed for a second stream (splitmix64's finalizer): the first draws of
    `java.util.Random`s seeded with consecutive numbers are close to each other."""
    z = (value + salt) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


@dataclass(frozen=True)
class GeneratorConfig:
    """What the generator makes; the defaults are Beam's `NexmarkConfiguration`'s.

    The inter-event delay of the (single) timeline is `num_event_generators / first_event_rate`
    seconds: Beam splits its events over `num_event_generators` parallel timelines, and this
    generator's stream is its first one, so the defaults give 100 events per second of event
    time (Flink's nexmark runs one generator: `num_event_generators=1`).

    >>> c = GeneratorConfig()
    >>> c.max_events, c.inter_event_delay_us, c.timestamp(25)
    (100000, 10000, 1436918400250)
    >>> GeneratorConfig(out_of_order_group_size=4).out_of_orderness_ms
    30
    >>> GeneratorConfig(max_events=0)
    Traceback (most recent call last):
    ValueError: GeneratorConfig: max_events must be a positive int, got 0
    """

    max_events: int = 100_000
    base_time: int = BASE_TIME_MS
    first_event_rate: int = 10_000
    num_event_generators: int = 100
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    out_of_order_group_size: int = 1
    prob_delayed_event: float = 0.0
    occasional_delay_sec: int = 3

    def __post_init__(self) -> None:
        for name in ("max_events", "first_event_rate", "num_event_generators",
                     "avg_person_byte_size", "avg_auction_byte_size", "avg_bid_byte_size",
                     "hot_auction_ratio", "hot_sellers_ratio", "hot_bidders_ratio",
                     "num_in_flight_auctions", "num_active_people", "out_of_order_group_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GeneratorConfig: {name} must be a positive int, got {value!r}")
        if self.out_of_order_group_size % 953 == 0:
            raise ValueError("GeneratorConfig: out_of_order_group_size must not be a multiple "
                             "of 953 (the shuffle's multiplier), got "
                             f"{self.out_of_order_group_size}")
        if not 0.0 <= self.prob_delayed_event <= 1.0:
            raise ValueError("GeneratorConfig: prob_delayed_event must be in [0, 1], got "
                             f"{self.prob_delayed_event!r}")
        if not isinstance(self.occasional_delay_sec, int) or self.occasional_delay_sec < 0:
            raise ValueError("GeneratorConfig: occasional_delay_sec must be an int >= 0, got "
                             f"{self.occasional_delay_sec!r}")

    @property
    def inter_event_delay_us(self) -> int:
        """Microseconds of event time between consecutive event numbers."""
        return 1_000_000 * self.num_event_generators // self.first_event_rate

    def timestamp(self, number: int) -> int:
        """The event time (ms) of event number `number`, before any shuffle or delay."""
        return self.base_time + number * self.inter_event_delay_us // 1000

    def adjusted_number(self, number: int) -> int:
        """The number whose event number `number` carries (its out-of-order group shuffled)."""
        g = self.out_of_order_group_size
        return (number // g) * g + (number * 953) % g

    @property
    def out_of_orderness_ms(self) -> int:
        """How far an event's time can be behind an earlier event's: the span of an
        out-of-order group, plus the longest delay when delays are on. A watermark delay of
        this much makes no generated event late."""
        span = self.timestamp(self.out_of_order_group_size - 1) - self.base_time
        delay = self.occasional_delay_sec * 1000 if self.prob_delayed_event > 0 else 0
        return span + delay


# ---- ids ----------------------------------------------------------------------------------

def last_base0_person_id(event_id: int) -> int:
    """The last person id (from 0) created at or before `event_id`."""
    epoch, offset = divmod(event_id, PROPORTION_DENOMINATOR)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_base0_auction_id(event_id: int) -> int:
    """The last auction id (from 0) created at or before `event_id`."""
    epoch, offset = divmod(event_id, PROPORTION_DENOMINATOR)
    if offset < PERSON_PROPORTION:
        epoch -= 1
        offset = AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


def _bounded_long(rng: JavaRandom, n: int) -> int:
    """A random int in `[0, n)` as Beam draws it (an int draw below 2**31 - 1)."""
    if n < (1 << 31) - 1:
        return rng.next_int_below(n)
    return abs(rng.next_long()) % n


def _next_person_id(event_id: int, rng: JavaRandom, config: GeneratorConfig) -> int:
    people = last_base0_person_id(event_id) + 1
    active = min(people, config.num_active_people)
    return people - active + _bounded_long(rng, active + PERSON_ID_LEAD)


def _next_auction_id(event_id: int, rng: JavaRandom, config: GeneratorConfig) -> int:
    last = last_base0_auction_id(event_id)
    first = max(last - config.num_in_flight_auctions, 0)
    return first + _bounded_long(rng, last - first + 1 + AUCTION_ID_LEAD)


# ---- values -------------------------------------------------------------------------------

def _price(rng: JavaRandom) -> int:
    return math.floor(10.0 ** (rng.next_double() * 6.0) * 100.0 + 0.5)  # Java's Math.round


def _string(rng: JavaRandom, max_length: int) -> str:
    length = 3 + rng.next_int_below(max_length - 3)
    chars = [" " if rng.next_int_below(13) == 0 else chr(97 + rng.next_int_below(26))
             for _ in range(length)]
    return "".join(chars).strip(" ")


def _triples(first: int) -> tuple[str, ...]:
    # Every three-digit base-26 number k as its characters, lowest digit first; `first` 1 for
    # 'a' + digit, -1 for 'a' - digit.
    return tuple(chr(97 + first * (k % 26)) + chr(97 + first * (k // 26 % 26))
                 + chr(97 + first * (k // 676)) for k in range(26 ** 3))


_UP, _DOWN = _triples(1), _triples(-1)


def _exact_string(rng: JavaRandom, length: int) -> str:
    # Six letters per 32-bit draw, its base-26 digits from the lowest, with Java's signed
    # remainder and truncating division: a negative draw gives characters at or below 'a', as
    # Beam's do.
    parts = []
    next_int = rng.next_int
    for _ in range((length + 5) // 6):
        value = next_int()
        if value >= 0:
            parts.append(_UP[value % 17576] + _UP[value // 17576 % 17576])
        else:
            parts.append(_DOWN[-value % 17576] + _DOWN[-value // 17576 % 17576])
    return "".join(parts)[:length]


def _extra(rng: JavaRandom, current_size: int, average_size: int) -> str:
    if current_size > average_size:
        return ""
    wanted = average_size - current_size
    delta = math.floor(wanted * 0.2 + 0.5)
    size = wanted - delta + (rng.next_int_below(2 * delta) if delta else 0)
    return _exact_string(rng, size)


def _person(event_id: int, rng: JavaRandom, ts: int, config: GeneratorConfig) -> Person:
    first = FIRST_NAMES[rng.next_int_below(len(FIRST_NAMES))]
    name = f"{first} {LAST_NAMES[rng.next_int_below(len(LAST_NAMES))]}"
    email = f"{_string(rng, 7)}@{_string(rng, 5)}.com"
    card = " ".join(f"{rng.next_int_below(10000):04d}" for _ in range(4))
    city = US_CITIES[rng.next_int_below(len(US_CITIES))]
    state = US_STATES[rng.next_int_below(len(US_STATES))]
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    extra = _extra(rng, size, config.avg_person_byte_size)
    return Person(last_base0_person_id(event_id) + FIRST_PERSON_ID, name, email, card, city,
                  state, ts, extra)


def _auction(number: int, event_id: int, rng: JavaRandom, ts: int,
             config: GeneratorConfig) -> Auction:
    if rng.next_int_below(config.hot_sellers_ratio) > 0:
        seller = (last_base0_person_id(event_id) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    else:
        seller = _next_person_id(event_id, rng, config)
    category = FIRST_CATEGORY_ID + rng.next_int_below(NUM_CATEGORIES)
    initial_bid = _price(rng)
    # An auction lasts on average as long as it takes to create num_in_flight_auctions more.
    ahead = config.num_in_flight_auctions * PROPORTION_DENOMINATOR // AUCTION_PROPORTION
    horizon = config.timestamp(number + ahead) - ts
    expires = ts + 1 + _bounded_long(rng, max(horizon * 2, 1))
    name = _string(rng, 20)
    description = _string(rng, 100)
    reserve = initial_bid + _price(rng)
    size = 8 + len(name) + len(description) + 8 + 8 + 8 + 8 + 8
    extra = _extra(rng, size, config.avg_auction_byte_size)
    return Auction(last_base0_auction_id(event_id) + FIRST_AUCTION_ID, name, description,
                   initial_bid, reserve, ts, expires, seller + FIRST_PERSON_ID, category, extra)


def _bid(event_id: int, rng: JavaRandom, ts: int, config: GeneratorConfig) -> Bid:
    if rng.next_int_below(config.hot_auction_ratio) > 0:
        auction = (last_base0_auction_id(event_id) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    else:
        auction = _next_auction_id(event_id, rng, config)
    if rng.next_int_below(config.hot_bidders_ratio) > 0:
        bidder = (last_base0_person_id(event_id) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    else:
        bidder = _next_person_id(event_id, rng, config)
    price = _price(rng)
    extra = _extra(rng, 8 + 8 + 8 + 8, config.avg_bid_byte_size)
    channel, url = _channel(JavaRandom(_seed(event_id, _CHANNEL_SALT)))
    return Bid(auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID, price, channel, url, ts,
               extra)


def _channel(rng: JavaRandom) -> tuple[str, str]:
    """Flink's channels: half the bids from one of four hot channels, the others from one of
    10,000 (`channel-<i>`), each channel with its own item URL."""
    if rng.next_int_below(2) > 0:
        i = rng.next_int_below(len(HOT_CHANNELS))
        return HOT_CHANNELS[i], _channel_url(-1 - i)
    i = rng.next_int_below(NUM_CHANNELS)
    return f"channel-{i}", _channel_url(i)


@lru_cache(maxsize=NUM_CHANNELS + len(HOT_CHANNELS))
def _channel_url(channel: int) -> str:
    rng = JavaRandom(_seed(channel, _CHANNEL_SALT))
    parts = "/".join(_string(rng, 6).replace(" ", "_") for _ in range(3))
    url = f"https://www.nexmark.com/{parts}/item.htm?query=1"
    if channel >= 0 and rng.next_int_below(10) > 0:
        reversed_bits = int(f"{channel:032b}"[::-1], 2)  # Integer.reverse, as a signed int
        if reversed_bits >= 1 << 31:
            reversed_bits -= 1 << 32
        url += f"&channel_id={abs(reversed_bits)}"
    return url


# ---- events -------------------------------------------------------------------------------

def event(config: GeneratorConfig, number: int) -> Event:
    """The event at position `number` (0-based) of the stream."""
    adjusted = config.adjusted_number(number)
    event_id = adjusted  # Beam's first generator: ids from 0
    ts = config.timestamp(adjusted)
    if config.prob_delayed_event > 0 and config.occasional_delay_sec > 0:
        chance = JavaRandom(_seed(event_id, _DELAY_SALT))
        if chance.next_double() < config.prob_delayed_event:
            ts -= 1 + _bounded_long(chance, config.occasional_delay_sec * 1000)
    rng = JavaRandom(event_id)
    rem = event_id % PROPORTION_DENOMINATOR
    if rem < PERSON_PROPORTION:
        return _person(event_id, rng, ts, config)
    if rem < PERSON_PROPORTION + AUCTION_PROPORTION:
        return _auction(adjusted, event_id, rng, ts, config)
    return _bid(event_id, rng, ts, config)


def events(config: GeneratorConfig, start: int = 0, stop: int | None = None,
           step: int = 1) -> Iterator[Event]:
    """The events at positions `start, start + step, ...` below `stop` (at most
    `config.max_events`): the whole stream by default, partition `i` of `n` with
    `start=i, step=n`."""
    end = config.max_events if stop is None else min(stop, config.max_events)
    for number in range(start, end, step):
        yield event(config, number)


def partition_size(config: GeneratorConfig, partition: int, partitions: int) -> int:
    """How many events partition `partition` of `partitions` has (positions `partition`,
    `partition + partitions`, ...).

    >>> [partition_size(GeneratorConfig(max_events=10), i, 3) for i in range(3)]
    [4, 3, 3]
    """
    return max(0, (config.max_events - partition + partitions - 1) // partitions)
