"""`OutputFieldsDeclarer`: what a component says it emits, stream by stream.

>>> d = OutputFieldsDeclarer()
>>> d.declare(["word"])
>>> d.declare_stream("errors", Fields("error"), direct=True)
>>> sorted(d.streams), d.streams["errors"].direct
(['default', 'errors'], True)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from squall.topology.fields import Fields

DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class StreamSpec:
    """A declared output stream: its fields and whether it is direct."""

    fields: Fields
    direct: bool = False


class OutputFieldsDeclarer:
    def __init__(self) -> None:
        self.streams: dict[str, StreamSpec] = {}

    def declare(self, fields: Fields | Iterable[str], direct: bool = False) -> None:
        self.declare_stream(DEFAULT_STREAM, fields, direct)

    def declare_stream(
        self, stream_id: str, fields: Fields | Iterable[str], direct: bool = False
    ) -> None:
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError(f"stream ids must be non-empty strings, got {stream_id!r}")
        if stream_id in self.streams:
            raise ValueError(f"stream {stream_id!r} is declared twice")
        if not isinstance(fields, Fields):
            fields = Fields(list(fields))
        self.streams[stream_id] = StreamSpec(fields, bool(direct))
