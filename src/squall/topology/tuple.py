"""`Tuple`: the values one task received, with where they came from and their place in a tuple tree.

>>> from squall.topology.fields import Fields
>>> t = Tuple(["cow", 3], Fields("word", "count"), "count", "default", 4)
>>> t[0], t["count"], t.get_string(0), t.get_integer(1), t.contains("word")
('cow', 3, 'cow', 3, True)
>>> t.source_component, t.source_stream_id, t.source_task
('count', 'default', 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from squall.topology.fields import Fields

PENDING, ACKED, FAILED = 0, 1, 2


class MessageId:
    """The roots a tuple belongs to, each with this tuple's edge id (Storm's `MessageId`)."""

    __slots__ = ("anchors_to_ids",)

    def __init__(self, anchors_to_ids: dict[int, int] | None) -> None:
        self.anchors_to_ids: dict[int, int] = dict(anchors_to_ids or {})

    def get_anchors(self) -> set[int]:
        return set(self.anchors_to_ids)

    def __repr__(self) -> str:
        return f"MessageId({self.anchors_to_ids!r})"


class Origin:
    """Where tuples come from: fields, component, stream and task; shared by all of them."""

    __slots__ = ("component", "fields", "stream", "task")

    def __init__(self, fields: Fields, component: str, stream: str, task: int) -> None:
        self.fields = fields
        self.component = component
        self.stream = stream
        self.task = task


class Tuple:
    """One delivered tuple. Fields are read by index (`t[0]`) or by name (`t["word"]`).

    The runtime creates one `Tuple` per destination task. What all tuples of one emitting task
    and stream share lives in one `Origin`. The private slots hold the reliability bookkeeping:
    `_anchors` maps each root id to this tuple's edge id (None when untracked), `_ack_val`
    accumulates the edge ids of tuples anchored to it, `_state` says whether it was acked or
    failed, and `_task` is the task it was delivered to. `_at`, set only where a runner queues
    the tuple, is the event-time position of the source record it derives from (the host's `at`,
    squall.partition_watermarks); read it with `getattr(tup, "_at", None)`.
    """

    __slots__ = ("_ack_val", "_anchors", "_at", "_origin", "_state", "_task", "values")

    def __init__(
        self,
        values: Sequence[Any],
        origin: Origin | Fields,
        source_component: str | None = None,
        source_stream_id: str = "default",
        source_task: int = -1,
        anchors: dict[int, int] | None = None,
        task: int | None = None,
    ) -> None:
        # Tuples built by hand (tests, tools) pass fields and a source; the runtime uses `_new`.
        if not isinstance(origin, Origin):
            origin = Origin(origin, source_component or "", source_stream_id, source_task)
        self.values = values
        self._origin = origin
        self._anchors = anchors
        self._task = task
        self._ack_val = 0
        self._state = PENDING

    @property
    def fields(self) -> Fields:
        return self._origin.fields

    @property
    def source_component(self) -> str:
        return self._origin.component

    @property
    def source_stream_id(self) -> str:
        return self._origin.stream

    @property
    def source_task(self) -> int:
        return self._origin.task

    def __getitem__(self, key: int | str) -> Any:
        if key.__class__ is str:
            try:
                return self.values[self._origin.fields._index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from component {self.source_component!r} stream "
                    f"{self.source_stream_id!r} has no field {key!r}; its fields are "
                    f"{self.fields.to_list()}"
                ) from None
        return self.values[key]  # type: ignore[index]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def get_value(self, i: int) -> Any:
        return self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        return self[name]

    def get_string(self, i: int) -> str:
        return self.values[i]

    def get_integer(self, i: int) -> int:
        return self.values[i]

    def get_long(self, i: int) -> int:
        return self.values[i]

    def get_string_by_field(self, name: str) -> str:
        return self[name]

    def get_integer_by_field(self, name: str) -> int:
        return self[name]

    def get_long_by_field(self, name: str) -> int:
        return self[name]

    def contains(self, name: str) -> bool:
        return name in self._origin.fields

    def select(self, selector: Fields) -> list[Any]:
        return self._origin.fields.select(selector, self.values)

    @property
    def message_id(self) -> MessageId:
        return MessageId(self._anchors)

    def __repr__(self) -> str:
        return (
            f"Tuple(source={self.source_component}:{self.source_task}, "
            f"stream={self.source_stream_id!r}, values={list(self.values)!r})"
        )


class _RuntimeTuple(Tuple):
    """Same slots as `Tuple`; only its constructor differs (the hot path's four arguments)."""

    __slots__ = ()

    def __init__(self, values, origin, anchors, task):
        self.values = values
        self._origin = origin
        self._anchors = anchors
        self._task = task
        self._ack_val = 0
        self._state = PENDING


SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"
TICK_ORIGIN = Origin(Fields("rate_secs"), SYSTEM_COMPONENT, TICK_STREAM, -1)


def tick_tuple(rate_secs: float, task: int) -> Tuple:
    """The tick tuple a runner delivers to `task` every `topology.tick.tuple.freq.secs`."""
    return _RuntimeTuple([rate_secs], TICK_ORIGIN, None, task)


def is_tick_tuple(tup: Tuple) -> bool:
    """Storm's `TupleUtils.isTick`: a system tick, not data.

    >>> is_tick_tuple(tick_tuple(5, task=3)), tick_tuple(5, task=3)["rate_secs"]
    (True, 5)
    """
    origin = tup._origin
    return origin.component == SYSTEM_COMPONENT and origin.stream == TICK_STREAM
