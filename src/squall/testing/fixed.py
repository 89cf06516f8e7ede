"""`FixedTupleSpout`: emits a fixed list of tuples once, tracked, and records acks and fails.

With several tasks, task i emits the tuples whose position p has p % tasks == i, so each tuple is
emitted exactly once. Failed tuples are recorded, not replayed (as Storm's FixedTupleSpout).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from squall.components.base import Spout
from squall.topology.fields import Fields


class FixedTupleSpout(Spout):
    def __init__(
        self,
        tuples: Iterable[Sequence[Any]] | Mapping[str, Iterable[Sequence[Any]]],
        fields: Fields | Iterable[str] | Mapping[str, Fields | Iterable[str]] = ("value",),
        *,
        replay_failed: bool = False,
    ) -> None:
        data = tuples if isinstance(tuples, Mapping) else {"default": tuples}
        self.data: dict[str, list[list[Any]]] = {s: [list(v) for v in t] for s, t in data.items()}
        if isinstance(fields, Mapping):
            self.fields = {s: _as_fields(f) for s, f in fields.items()}
        else:
            self.fields = {s: _as_fields(fields) for s in self.data} or {
                "default": _as_fields(fields)
            }
        self.replay_failed = replay_failed
        self._queue: list[tuple[str, int]] = []
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def declare_output_fields(self, declarer) -> None:
        for stream, fields in self.fields.items():
            declarer.declare_stream(stream, fields)

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        n, i = len(context.this_component_tasks), context.this_task_index
        position = 0
        for stream, rows in self.data.items():
            for k in range(len(rows)):
                if position % n == i:
                    self._queue.append((stream, k))
                position += 1
        self._queue.reverse()  # pop() from the end gives input order

    def next_tuple(self) -> None:
        if self._queue:
            stream, k = self._queue.pop()
            msg_id = k if stream == "default" else (stream, k)
            self.collector.emit(self.data[stream][k], msg_id=msg_id, stream=stream)

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)
        if self.replay_failed:
            stream, k = msg_id if isinstance(msg_id, tuple) else ("default", msg_id)
            self._queue.insert(0, (stream, k))

    def is_exhausted(self) -> bool:
        return not self._queue


def _as_fields(f: Fields | Iterable[str]) -> Fields:
    return f if isinstance(f, Fields) else Fields(list(f))
