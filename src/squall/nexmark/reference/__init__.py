"""An independent reference for the NEXMark queries: each query's definition computed in batch,
in plain Python, over a finite list of events in stream order, its result in a canonical form
(a sorted list of tuples, or a dict) that a streaming run's output can be compared with exactly.

It is written apart from squall's streaming code: it imports only the events
(`squall.nexmark.model`), so a bug in an operator cannot hide in its reference. docs/nexmark.md
gives each query's definition and docs/design/nexmark.md the choices where Beam's and Flink's
definitions differ.

- `squall.nexmark.reference.stateless`: q0, q1, q2, q13, q14;
- `squall.nexmark.reference.joins`: q3, q20, the winning bids and q4, q6, q9;
- `squall.nexmark.reference.windowed`: q5, q7, q8, q10, q11, q12, with an `EventTime` (source
  partitions, watermark delay, allowed lateness) deciding which events are late or dropped;
- `squall.nexmark.reference.aggregates`: q15 to q19;
- `squall.nexmark.reference.lateness`: `EventTime` and the judgement of each event per window.

>>> from squall.nexmark.generator import GeneratorConfig, events
>>> stream = list(events(GeneratorConfig(max_events=200)))
>>> len(q0(stream)), len(QUERIES["q1"](stream)), sum(QUERIES["q12"](stream).values())
(200, 184, 184)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.nexmark.reference.aggregates import q15, q16, q17, q18, q19
from squall.nexmark.reference.joins import q3, q4, q6, q9, q20, winning_bids
from squall.nexmark.reference.lateness import (
    DROPPED,
    IN_ORDER,
    LATE,
    ON_TIME,
    EventTime,
    judge,
)
from squall.nexmark.reference.stateless import q0, q1, q2, q13, q14, side_input
from squall.nexmark.reference.windowed import q5, q7, q8, q10, q11, q12, shard

QUERIES: dict[str, Callable[..., Any]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q6": q6, "q7": q7, "q8": q8,
    "q9": q9, "q10": q10, "q11": q11, "q12": q12, "q13": q13, "q14": q14, "q15": q15,
    "q16": q16, "q17": q17, "q18": q18, "q19": q19, "q20": q20,
}
"""Each query's reference by name: `QUERIES[name](events)` with the query's defaults (the
windowed ones also take an `EventTime`)."""

WINDOWED = frozenset({"q5", "q7", "q8", "q10", "q11"})
"""The queries whose result depends on an `EventTime`."""

__all__ = [
    "DROPPED", "IN_ORDER", "LATE", "ON_TIME", "QUERIES", "WINDOWED", "EventTime", "judge", "q0",
    "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12", "q13", "q14",
    "q15", "q16", "q17", "q18", "q19", "q20", "shard", "side_input", "winning_bids",
]
