"""The NEXMark queries written with the windowed operators: q5 (hot items, sliding windows), q7
(highest bid, fixed windows), q8 (monitor new users, a windowed join), q10 (log to sharded
files), q11 (user sessions) and q12 (processing-time windows).

Every event-time query takes its watermark from the source's partitions (`watermark_delay_ms`
behind each partition's largest `date_time`), keeps windows `allowed_lateness_ms` past their end
and fires with Beam's `AfterWatermark(late=AfterCount(1))`: the on-time pane, then a late pane
for each late event that still counts. q5, q7, q8 and q11 accumulate (q11 also retracts the
panes of sessions that merge), so the last pane of each window is its final value; q10 and q12
discard, so a window's panes add up to its value (`squall.nexmark.queries.results`).
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from squall.builder import TopologyBuilder
from squall.components.base import BasicBolt
from squall.components.operators import KeyedWindowedOperator, WindowedOperator
from squall.duration import Duration
from squall.nexmark.model import ROW_FIELDS, from_row, to_json
from squall.panes import accumulations
from squall.panes.beam_triggers import AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly
from squall.panes.triggers import AccumulationMode
from squall.panes.windows import GlobalWindow, SessionWindows, TimeWindows
from squall.topology.fields import Fields, Values
from squall.topology.tuple import Tuple

WINDOW_SIZE_MS = 10_000
"""Beam's `windowSizeSec` (10 s): q5's window, q7's, q8's, q10's, q11's session gap, q12's
processing-time delay."""
WINDOW_PERIOD_MS = 5_000
"""Beam's `windowPeriodSec` (5 s): q5's period."""
NUM_SHARDS = 10
"""q10's shards."""


@dataclass(frozen=True)
class EventTimeSettings:
    """The windowed queries' watermark delay behind each source partition's largest event time,
    and how long a window keeps taking late events after its end (both in ms)."""

    watermark_delay_ms: int = 1_000
    allowed_lateness_ms: int = 20_000


def _operator(cls: type, time: EventTimeSettings, mode: AccumulationMode,
              **kwargs: Any) -> Any:
    return cls(trigger=AfterWatermark(late=AfterCount(1)), accumulation_mode=mode,
               watermark_delay=Duration(time.watermark_delay_ms),
               allowed_lateness=Duration(time.allowed_lateness_ms),
               timestamp_field="date_time", **kwargs)


class _Accumulation:
    """No retraction (accumulating panes only)."""

    retractable = False

    def get_retraction(self, output: Any) -> Any:
        raise TypeError(f"{type(self).__name__} has no retraction")


class HotItems(_Accumulation):
    """q5: bids per auction in the window; output the `[auction, count]`s at the largest count."""

    def default_accumulated_value(self) -> dict[int, int]:
        return {}

    def accumulate(self, acc: dict[int, int], auction: int) -> dict[int, int]:
        acc[auction] = acc.get(auction, 0) + 1
        return acc

    def merge(self, acc1: dict[int, int], acc2: dict[int, int]) -> dict[int, int]:
        return dict(Counter(acc1) + Counter(acc2))

    def get_output(self, acc: dict[int, int]) -> list[list[int]]:
        top = max(acc.values(), default=0)
        return sorted([a, n] for a, n in acc.items() if n == top)


class HighestBids(_Accumulation):
    """q7: the window's bids at its highest price (`[auction, bidder, price, date_time]`s)."""

    def default_accumulated_value(self) -> list[Any]:
        return []

    def accumulate(self, acc: list[Any], bid: tuple[int, int, int, int]) -> list[Any]:
        if not acc or bid[2] > acc[0][2]:
            return [list(bid)]
        if bid[2] == acc[0][2]:
            acc.append(list(bid))
        return acc

    def merge(self, acc1: list[Any], acc2: list[Any]) -> list[Any]:
        out = acc1
        for bid in acc2:
            out = self.accumulate(out, bid)
        return out

    def get_output(self, acc: list[Any]) -> list[Any]:
        return sorted(acc)


class NewUsers(_Accumulation):
    """q8: per person id and window, the person's name (if they joined in it) and the reserves of
    the auctions they created in it; output `[name, reserve]` per auction once both are there."""

    def default_accumulated_value(self) -> list[Any]:
        return [None, []]

    def accumulate(self, acc: list[Any], value: tuple[str, Any]) -> list[Any]:
        kind, v = value
        if kind == "person":
            acc[0] = v
        else:
            acc[1].append(v)
        return acc

    def merge(self, acc1: list[Any], acc2: list[Any]) -> list[Any]:
        return [acc1[0] if acc1[0] is not None else acc2[0], acc1[1] + acc2[1]]

    def get_output(self, acc: list[Any]) -> list[Any]:
        return [] if acc[0] is None else sorted([acc[0], r] for r in acc[1])


class Rows(_Accumulation):
    """q10: the pane's flat rows (discarding panes: each row in one pane)."""

    def default_accumulated_value(self) -> list[Any]:
        return []

    def accumulate(self, acc: list[Any], row: Any) -> list[Any]:
        acc.append(list(row))
        return acc

    def merge(self, acc1: list[Any], acc2: list[Any]) -> list[Any]:
        return acc1 + acc2

    def get_output(self, acc: list[Any]) -> list[Any]:
        return sorted(acc, key=repr)


def _bid_value(tup: Tuple) -> tuple[int, int, int, int]:
    return (tup["auction"], tup["bidder"], tup["price"], tup["date_time"])


def _q8_key(tup: Tuple) -> int:
    return tup["id"] if tup.source_stream_id == "person" else tup["seller"]


def _q8_value(tup: Tuple) -> tuple[str, Any]:
    if tup.source_stream_id == "person":
        return ("person", tup["name"])
    return ("auction", tup["reserve"])


def shard_of(row: Any, num_shards: int = NUM_SHARDS) -> str:
    """q10's shard of a flat row, named as Beam names it: `shard-%05d-of-%05d`, the number the
    CRC-32 of the event's Beam JSON modulo `num_shards`."""
    number = zlib.crc32(to_json(from_row(row)).encode()) % num_shards
    return f"shard-{number:05d}-of-{num_shards:05d}"


class Shard(BasicBolt):
    """q10: each flat row with its shard in front."""

    def __init__(self, num_shards: int = NUM_SHARDS) -> None:
        self.num_shards = num_shards

    def execute(self, tup: Tuple, collector: Any) -> None:
        collector.emit(Values(shard_of(tup.values, self.num_shards), *tup.values))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("shard", *ROW_FIELDS))


def _row_value(tup: Tuple) -> list[Any]:
    return list(tup.values[1:])


def add_q5(b: TopologyBuilder, split: str, time: EventTimeSettings, stream: str = "bid") -> str:
    """Unkeyed: one window state holds every auction's count (parallelism 1). The bids come on
    `split`'s `stream` (each q5-q12 adder alike: `Split`'s `bid`, or a source of bids only)."""
    op = _operator(WindowedOperator, time, AccumulationMode.ACCUMULATING,
                   window=TimeWindows(Duration(WINDOW_SIZE_MS)).slide_by(
                       Duration(WINDOW_PERIOD_MS)),
                   accumulation=HotItems(), value_field="auction")
    b.set_bolt("q5", op).global_grouping(split, stream)
    return "q5"


def add_q7(b: TopologyBuilder, split: str, time: EventTimeSettings, stream: str = "bid") -> str:
    op = _operator(WindowedOperator, time, AccumulationMode.ACCUMULATING,
                   window=TimeWindows(Duration(WINDOW_SIZE_MS)), accumulation=HighestBids(),
                   value_extractor=_bid_value)
    b.set_bolt("q7", op).global_grouping(split, stream)
    return "q7"


def add_q8(b: TopologyBuilder, split: str, time: EventTimeSettings, parallelism: int = 2) -> str:
    op = _operator(KeyedWindowedOperator, time, AccumulationMode.ACCUMULATING,
                   window=TimeWindows(Duration(WINDOW_SIZE_MS)), accumulation=NewUsers(),
                   key_extractor=_q8_key, value_extractor=_q8_value)
    (b.set_bolt("q8", op, parallelism)
     .fields_grouping(split, ["id"], "person").fields_grouping(split, ["seller"], "auction"))
    return "q8"


def add_q10(b: TopologyBuilder, events: str, time: EventTimeSettings,
            parallelism: int = 2) -> str:
    b.set_bolt("q10-shard", Shard(), parallelism).shuffle_grouping(events)
    op = _operator(KeyedWindowedOperator, time, AccumulationMode.DISCARDING,
                   window=TimeWindows(Duration(WINDOW_SIZE_MS)), accumulation=Rows(),
                   key_field="shard", value_extractor=_row_value)
    b.set_bolt("q10", op, parallelism).fields_grouping("q10-shard", ["shard"])
    return "q10"


def add_q11(b: TopologyBuilder, split: str, time: EventTimeSettings,
            parallelism: int = 2, stream: str = "bid") -> str:
    op = _operator(KeyedWindowedOperator, time, AccumulationMode.ACCUMULATING_AND_RETRACTING,
                   window=SessionWindows(Duration(WINDOW_SIZE_MS)),
                   accumulation=accumulations.Count(),
                   key_field="bidder", value_field="price")
    b.set_bolt("q11", op, parallelism).fields_grouping(split, ["bidder"], stream)
    return "q11"


def add_q12(b: TopologyBuilder, split: str, parallelism: int = 2, stream: str = "bid") -> str:
    op = KeyedWindowedOperator(
        window=GlobalWindow(), accumulation=accumulations.Count(),
        trigger=Repeatedly(AfterProcessingTime(Duration(WINDOW_SIZE_MS))),
        accumulation_mode=AccumulationMode.DISCARDING, key_field="bidder", value_field="price")
    b.set_bolt("q12", op, parallelism).fields_grouping(split, ["bidder"], stream)
    return "q12"
