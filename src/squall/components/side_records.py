"""Side records: the structured tuples on a windowed component's late and error streams.

A late tuple, or one without a valid timestamp, leaves the window as data a sink can write as
columns: the original tuple's fields (the union of the component's input streams' fields, in
subscription order; a field its own stream lacks is None), then where it came from and why.

Storm's late-tuple stream has one field, `late_tuple`, holding the tuple object; a sink then
writes its repr, which must be parsed back. squall declares these streams for the user instead
(docs/design/side-records.md).

>>> from squall.topology.description import Subscription
>>> from squall.topology.declarer import StreamSpec
>>> from squall.topology.groupings import ShuffleGrouping
>>> from squall.topology.tuple import Tuple
>>> streams = {"clicks": {"default": StreamSpec(Fields("user", "ts"))}}
>>> inputs = [Subscription("clicks", "default", ShuffleGrouping())]
>>> fields = side_fields("windows", "late", inputs, streams)
>>> fields.to_list()  # doctest: +NORMALIZE_WHITESPACE
['user', 'ts', 'source_component', 'source_stream', 'source_task', 'event_time',
 'watermark', 'reason']
>>> late = Tuple(["ann", 3000], Fields("user", "ts"), "clicks", "default", 2)
>>> SideRecords("late", fields).values(late, 3000, 5000, "late")
['ann', 3000, 'clicks', 'default', 2, 3000, 5000, 'late']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from squall.components.context import TopologyContext
from squall.errors import InvalidTopologyError
from squall.topology.declarer import StreamSpec
from squall.topology.description import Subscription
from squall.topology.fields import Fields
from squall.topology.tuple import Tuple

RECORD_FIELDS = ("source_component", "source_stream", "source_task", "event_time", "watermark",
                 "reason")
"""What follows the original fields: origin, the tuple's event time (None when it has none),
the watermark it was judged against (None before the first), and why it left the window."""

LATE = "late"
"""The reason of a tuple on the late stream (its event time is below the watermark)."""


def side_fields(component_id: str, stream: str, inputs: Iterable[Subscription],
                streams: Mapping[str, Mapping[str, StreamSpec]]) -> Fields:
    """The fields of side stream `stream` of `component_id`, from its input subscriptions.

    Framework streams (ids starting with `_`, such as operators' watermarks) are not inputs.
    """
    names: list[str] = []
    for sub in inputs:
        if sub.stream.startswith("_"):
            continue
        spec = streams.get(sub.component, {}).get(sub.stream)
        if spec is None:
            continue  # the builder reports an unknown input stream itself
        for name in spec.fields.to_list():
            if name not in names:
                names.append(name)
    clash = [name for name in names if name in RECORD_FIELDS]
    if clash:
        raise InvalidTopologyError(
            f"input field {clash[0]!r} has the name of a field the {stream!r} stream adds "
            f"({', '.join(RECORD_FIELDS)}); rename the input field", component=component_id)
    return Fields(*names, *RECORD_FIELDS)


def watermark_ms(watermark: float | None) -> int | None:
    """A watermark as a record field: ms, or None before the first one (or at +-infinity).

    >>> watermark_ms(5000.0), watermark_ms(None), watermark_ms(float("-inf"))
    (5000, None, None)
    """
    if watermark is None or not math.isfinite(watermark):
        return None
    return int(watermark)


class SideRecords:
    """Builds the values of one side stream's records (held by the task's role adapter)."""

    def __init__(self, stream: str, fields: Fields) -> None:
        self.stream = stream
        self.original = fields.to_list()[: -len(RECORD_FIELDS)]
        # Per input fields object: the index of each original field in it (None: absent).
        self._maps: dict[int, tuple[Fields, list[int | None]]] = {}

    @classmethod
    def of(cls, context: TopologyContext, stream: str) -> SideRecords:
        """The records of this task's side stream `stream`, as the topology declares it."""
        return cls(stream, context.get_this_output_fields(stream))

    def values(self, tup: Tuple, event_time: int | None, watermark: int | None,
               reason: str) -> list[Any]:
        fields = tup.fields
        known = self._maps.get(id(fields))
        if known is None or known[0] is not fields:
            index = fields._index
            known = (fields, [index.get(name) for name in self.original])
            self._maps[id(fields)] = known
        vals = tup.values
        out: list[Any] = [None if i is None else vals[i] for i in known[1]]
        out += [tup.source_component, tup.source_stream_id, tup.source_task, event_time,
                watermark, reason]
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"stream": self.stream, "original": self.original}  # the cache is rebuilt

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.stream, self.original = state["stream"], state["original"]
        self._maps = {}
