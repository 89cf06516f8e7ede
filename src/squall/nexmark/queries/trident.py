"""The NEXMark queries written with Trident: q0, q1, q2, q13, q14 (`each`, one event at a time)
and Flink's per-key aggregates q15, q16, q17, q18, q19 (`group_by(...).persistent_aggregate`:
exactly-once map states, new values emitted per batch, so the last value per key is the
result once the input has ended; `squall.nexmark.queries.results`). q15 and q16 count distinct
bidders and auctions: each batch's sets are built per group and partition first
(`group_by(...).partition_aggregate` with a mutable `Aggregator`), so the map state is combined
once per group and batch rather than once per bid.

Each `add_*` function takes the stream of flat rows (`ROW_FIELDS`, from a `NexmarkBatchSpout`,
a `FileBatchSpout` over the Parquet files, or Kafka) and names the query's output stream after
the query.

>>> from squall.testing import complete_topology
>>> from squall.trident import TridentTopology
>>> from squall.nexmark import GeneratorConfig, NexmarkBatchSpout, reference
>>> from squall.nexmark.generator import events
>>> from squall.nexmark.queries.results import canonical
>>> config = GeneratorConfig(max_events=300)
>>> t = TridentTopology()
>>> _ = add_q2(t.new_stream("nexmark", NexmarkBatchSpout(config, 100)), modulus=7)
>>> rows = complete_topology(t.build()).tuples("q2")
>>> canonical("q2", rows) == reference.q2(events(config), modulus=7)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from squall.nexmark.model import BID, Bid
from squall.trident.operations import (
    ROW,
    Aggregator,
    BatchFunction,
    CombinerAggregator,
    Filter,
    Function,
    MapFunction,
)
from squall.trident.state import DurableMapState, StateType
from squall.trident.stream import Stream, TridentState

BID_FIELDS = tuple(Bid.__dataclass_fields__)
_BID_TIME = BID_FIELDS.index("date_time")
RANK_LIMITS = (10_000, 1_000_000)
"""Flink's price ranks: rank 1 below 10,000, rank 2 below 1,000,000, rank 3 the rest."""


def default_state() -> Any:
    """The map states' factory unless one is given: durable, transactional."""
    return DurableMapState.factory(StateType.TRANSACTIONAL)


class BidRows(BatchFunction):
    """The rows of a batch that are bids (`event_type` 2), picked by Arrow: no Python call per
    row, and on Spark the kept rows stay Arrow columns.

    >>> BidRows().execute_batch(pa.table({"event_type": [2, 0, 2, 1]}))[ROW].to_pylist()
    [0, 2]
    """

    def execute_batch(self, table: Any) -> Any:
        return {ROW: pc.indices_nonzero(pc.equal(table["event_type"], BID))}


class PassAll(Filter):
    def is_keep(self, tup: Any) -> bool:
        return True


def bids(rows: Stream) -> Stream:
    """The bids of a stream of flat rows, with the bid's fields only."""
    return rows.each(["event_type"], BidRows(), []).project(list(BID_FIELDS))


class ToEuros(MapFunction):
    """q1: Beam's conversion, `price * 89 // 100`."""

    def execute(self, tup: Any) -> Sequence[Any]:
        return (tup["auction"], tup["bidder"], tup["price"] * 89 // 100, tup["date_time"],
                tup["extra"])


class MultipleOf(Filter):
    def __init__(self, modulus: int) -> None:
        self.modulus = modulus

    def is_keep(self, tup: Any) -> bool:
        return tup[0] % self.modulus == 0


class SideInput(Function):
    """q13: the side input's value for `auction mod modulus` (keys 0 to modulus - 1, each with
    its decimal string: Beam's side-input rows), built once per partition in `prepare`."""

    output_types: ClassVar[dict[str, type]] = {"value": str}

    def __init__(self, modulus: int = 10_000) -> None:
        self.modulus = modulus

    def prepare(self, conf: Any, context: Any) -> None:
        self.table = {key: str(key) for key in range(self.modulus)}

    def execute(self, tup: Any, collector: Any) -> None:
        value = self.table.get(tup[0] % self.modulus)
        if value is not None:
            collector.emit((value,))


def _hour(date_time: int) -> int:
    return date_time // 3_600_000 % 24


class FilterAndDerive(Function):
    """q14: the bids whose price in euros, `0.908 x price`, is strictly between 1,000,000 and
    50,000,000, with the euro price (a float: `price * 908 / 1000`, which prints as its three
    decimals), the time of day and the number of `c` in `extra`."""

    output_types: ClassVar[dict[str, type]] = {"price_in_euros": float, "bid_time_type": str,
                                               "c_counts": int}

    def execute(self, tup: Any, collector: Any) -> None:
        thousandths = tup["price"] * 908
        if not 1_000_000_000 < thousandths < 50_000_000_000:
            return
        h = _hour(tup["date_time"])
        kind = "dayTime" if 8 <= h <= 18 else "nightTime" if h <= 6 or h >= 20 else "otherTime"
        collector.emit((thousandths / 1000, kind, tup["extra"].count("c")))


def _rank(price: int) -> int:
    """Flink's price rank of `price`: 1, 2 or 3."""
    return 1 if price < RANK_LIMITS[0] else 2 if price < RANK_LIMITS[1] else 3


class Day(BatchFunction):
    """The UTC day (`yyyy-MM-dd`) and minute (`HH:mm`) of each event time (milliseconds since
    the epoch), formatted by Arrow a column at a time.

    >>> out = Day().execute_batch(pa.table({"date_time": [1436918400000, 1436999999999]}))
    >>> out["day"].to_pylist(), out["minute"].to_pylist()
    (['2015-07-15', '2015-07-15'], ['00:00', '22:39'])
    """

    output_types: ClassVar[dict[str, type]] = {"day": str, "minute": str}

    def execute_batch(self, table: Any) -> Any:
        stamps = pc.cast(table["date_time"], pa.timestamp("ms"))
        return {"day": pc.strftime(stamps, format="%Y-%m-%d"),
                "minute": pc.strftime(stamps, format="%H:%M")}


class BatchStatistics(Aggregator):
    """q15, q16: the statistics of one group in one partition of a batch, in mutable sets
    while the batch is aggregated (each tuple costs a set insertion), emitted once as a
    `Statistics` value: bids in total and per price rank, the distinct `(rank, bidder)` and
    `(rank, auction)` pairs, and the latest minute. Input: `(price, bidder, auction,
    minute)`.

    >>> from squall.trident.execution import ListCollector
    >>> agg, out = BatchStatistics(), ListCollector()
    >>> s = agg.init(1, out)
    >>> for t in [(5, 1, 9, "10:02"), (20_000, 1, 9, "10:01"), (7, 1, 8, "10:00")]:
    ...     agg.aggregate(s, t, out)
    >>> agg.complete(s, out)
    >>> [(bids, sorted(bidders), sorted(auctions), minute)
    ...  for (bids, bidders, auctions, minute), in out.rows]
    [((3, 2, 1, 0), [(1, 1), (2, 1)], [(1, 8), (1, 9), (2, 9)], '10:02')]
    """

    def init(self, batch_id: Any, collector: Any) -> Any:
        return [[0, 0, 0, 0], set(), set(), None]

    def aggregate(self, state: Any, tup: Any, collector: Any) -> None:
        r = _rank(tup[0])
        bids = state[0]
        bids[0] += 1
        bids[r] += 1
        state[1].add((r, tup[1]))
        state[2].add((r, tup[2]))
        if state[3] is None or tup[3] > state[3]:
            state[3] = tup[3]

    def complete(self, state: Any, collector: Any) -> None:
        if state[0][0]:
            collector.emit(((tuple(state[0]), frozenset(state[1]), frozenset(state[2]),
                             state[3]),))


class Statistics(CombinerAggregator):
    """q15, q16: the statistics of a group so far, from `BatchStatistics`' values (input: one
    such value): bids summed, the distinct pairs' sets united, the latest minute. A batch
    makes one value per group and partition, so a group's state is combined once per batch,
    in time linear in its sets. `combine` makes a new value: a stored value may be shared.

    >>> a = ((2, 1, 1, 0), frozenset({(1, 1), (2, 1)}), frozenset({(1, 9)}), "10:02")
    >>> b = ((1, 1, 0, 0), frozenset({(1, 2)}), frozenset({(1, 9)}), "10:05")
    >>> bids, bidders, auctions, minute = Statistics().combine(a, b)
    >>> bids, sorted(bidders), sorted(auctions), minute
    ((3, 2, 1, 0), [(1, 1), (1, 2), (2, 1)], [(1, 9)], '10:05')
    >>> a[1] == {(1, 1), (2, 1)}  # unchanged
    True
    """

    def init(self, tup: Any) -> Any:
        return tup[0]

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return (tuple(x + y for x, y in zip(a[0], b[0], strict=True)),
                frozenset(a[1]).union(b[1]), frozenset(a[2]).union(b[2]), max(a[3], b[3]))

    def zero(self) -> Any:
        return None


def _counts(stats: Any) -> tuple[int, ...]:
    bids, bidders, auctions, _ = stats
    out = list(bids)
    for pairs in (bidders, auctions):
        out.append(len({k for _, k in pairs}))
        out.extend(len({k for r, k in pairs if r == want}) for want in (1, 2, 3))
    return tuple(out)


STAT_INPUT = ["price", "bidder", "auction", "minute"]
STAT_FIELDS = tuple(f"{r}_{what}" for what in ("bids", "bidders", "auctions")
                    for r in ("total", "rank1", "rank2", "rank3"))


class Q15Row(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit(_counts(tup[0]))


class Q16Row(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit((tup[0][3], *_counts(tup[0])))


class AuctionStatistics(CombinerAggregator):
    """q17: per auction and day, bids in total and per rank, lowest, highest and total price.
    Input: `(price,)`."""

    def init(self, tup: Any) -> Any:
        p = tup[0]
        if p < RANK_LIMITS[0]:
            return (1, 1, 0, 0, p, p, p)
        return (1, 0, 1, 0, p, p, p) if p < RANK_LIMITS[1] else (1, 0, 0, 1, p, p, p)

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], min(a[4], b[4]),
                max(a[5], b[5]), a[6] + b[6])

    def zero(self) -> Any:
        return None


class Q17Row(Function):
    """Flink's `AVG` of a `BIGINT` truncates: the total divided by the count."""

    def execute(self, tup: Any, collector: Any) -> None:
        n, r1, r2, r3, low, high, total = tup[0]
        collector.emit((n, r1, r2, r3, low, high, total // n, total))


class LatestBid(CombinerAggregator):
    """q18: the bid with the latest `date_time` (among equal times the largest bid, so that the
    result does not depend on the order partial aggregates combine in). Input: the bid's
    fields."""

    def init(self, tup: Any) -> Any:
        return tuple(tup)

    def combine(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        t = _BID_TIME
        return b if (b[t], b) > (a[t], a) else a

    def zero(self) -> Any:
        return None


class FlattenBid(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit(tuple(tup[0]))


class TopBids(CombinerAggregator):
    """q19: the `top` highest-priced bids, the earlier `date_time` first among equal prices (then
    the smaller bid, so that the order partial aggregates combine in does not matter). Input:
    the bid's fields."""

    def __init__(self, top: int = 10) -> None:
        self.top = top

    def init(self, tup: Any) -> Any:
        return [tuple(tup)]

    def combine(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        p, t = BID_FIELDS.index("price"), BID_FIELDS.index("date_time")
        return sorted([*a, *b], key=lambda bid: (-bid[p], bid[t], bid))[:self.top]

    def zero(self) -> Any:
        return None


def add_q0(rows: Stream) -> Stream:
    return rows.each(PassAll()).name("q0")


def add_q1(rows: Stream) -> Stream:
    return (bids(rows).map(ToEuros(), ["auction", "bidder", "price", "date_time", "extra"])
            .name("q1"))


def add_q2(rows: Stream, modulus: int = 123) -> Stream:
    return (rows.each(["event_type"], BidRows(), []).each(["auction"], MultipleOf(modulus))
            .project(["auction", "price"]).name("q2"))


def add_q13(rows: Stream, modulus: int = 10_000) -> Stream:
    return (bids(rows).each(["auction"], SideInput(modulus), ["value"])
            .project(["auction", "bidder", "price", "date_time", "value"]).name("q13"))


def add_q14(rows: Stream) -> Stream:
    return (bids(rows).each(["price", "date_time", "extra"], FilterAndDerive(),
                            ["price_in_euros", "bid_time_type", "c_counts"])
            .project(["auction", "bidder", "price_in_euros", "bid_time_type", "date_time", "extra",
               "c_counts"]).name("q14"))


def _days(rows: Stream) -> Stream:
    return bids(rows).each(["date_time"], Day(), ["day", "minute"])


def _statistics(rows: Stream, keys: list[str], state: Any) -> TridentState:
    """q15, q16: each batch's statistics per group and partition (`BatchStatistics`), then
    per group into the map state (`Statistics`)."""
    return (_days(rows).group_by(keys).partition_aggregate(STAT_INPUT, BatchStatistics(),
                                                            ["partial"])
            .group_by(keys)
            .persistent_aggregate(state or default_state(), ["partial"], Statistics(),
                                  ["stats"]))


def add_q15(rows: Stream, state: Any = None) -> Stream:
    return (_statistics(rows, ["day"], state)
            .new_values_stream().each(["stats"], Q15Row(), list(STAT_FIELDS))
            .project(["day", *STAT_FIELDS]).name("q15"))


def add_q16(rows: Stream, state: Any = None) -> Stream:
    return (_statistics(rows, ["channel", "day"], state)
            .new_values_stream().each(["stats"], Q16Row(), ["minute", *STAT_FIELDS])
            .project(["channel", "day", "minute", *STAT_FIELDS]).name("q16"))


def add_q17(rows: Stream, state: Any = None) -> Stream:
    out = ["total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price",
           "avg_price", "sum_price"]
    return (_days(rows).group_by(["auction", "day"])
            .persistent_aggregate(state or default_state(), ["price"], AuctionStatistics(),
                           ["stats"])
            .new_values_stream().each(["stats"], Q17Row(), out)
            .project(["auction", "day", *out]).name("q17"))


def add_q18(rows: Stream, state: Any = None) -> Stream:
    return (bids(rows).group_by(["bidder", "auction"])
            .persistent_aggregate(state or default_state(), list(BID_FIELDS), LatestBid(), ["bid"])
            .new_values_stream().each(["bid"], FlattenBid(), [f"last_{f}" for f in BID_FIELDS])
            .project(["bidder", "auction", *(f"last_{f}" for f in BID_FIELDS)]).name("q18"))


def add_q19(rows: Stream, state: Any = None) -> Stream:
    return (bids(rows).group_by(["auction"])
            .persistent_aggregate(state or default_state(), list(BID_FIELDS), TopBids(), ["top"])
            .new_values_stream().name("q19"))
