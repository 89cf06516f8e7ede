"""The NEXMark query tests' stream and event time: out-of-order groups of 20 and 5 % delayed
events, so that the windowed queries see late events and drop some; no hot auctions, sellers or
bidders, so that every query has rows; two partitions, a watermark 100 ms behind each, 2 s of
allowed lateness."""

from __future__ import annotations

from typing import Any

from squall.nexmark import GeneratorConfig
from squall.nexmark.queries import EventTimeSettings
from squall.nexmark.reference import QUERIES, WINDOWED, EventTime

PARTITIONS = 2
TIME = EventTimeSettings(watermark_delay_ms=100, allowed_lateness_ms=2_000)
EVENT_TIME = EventTime(partitions=PARTITIONS, watermark_delay_ms=TIME.watermark_delay_ms,
                       allowed_lateness_ms=TIME.allowed_lateness_ms)
CONF = {"spark.sql.shuffle.partitions": 2}


def config(max_events: int) -> GeneratorConfig:
    return GeneratorConfig(max_events=max_events, out_of_order_group_size=20,
                           prob_delayed_event=0.05, hot_auction_ratio=1, hot_sellers_ratio=1,
                           hot_bidders_ratio=1)


def reference(query: str, stream: list[Any]) -> Any:
    """The query's reference result for `stream` read as the tests read it."""
    return QUERIES[query](stream, EVENT_TIME) if query in WINDOWED else QUERIES[query](stream)
