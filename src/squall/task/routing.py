"""Per-task routing tables: for each declared stream, who receives an emit.

Built once per task when it starts; the collectors consult them on every emit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from squall.topology.description import Topology
from squall.topology.fields import Fields
from squall.topology.groupings import (
    DISABLE_LOAD_AWARE,
    Chooser,
    DirectGrouping,
    field_memo,
    make_chooser,
)
from squall.topology.tuple import Origin


class StreamRoute:
    """One output stream of one task: its fields and the choosers of its subscribers."""

    __slots__ = ("arity", "choose", "direct", "direct_targets", "emit_arity", "emitted", "fields",
                 "key", "memo", "origin", "stream")

    def __init__(
        self, stream: str, fields: Fields, direct: bool, choosers: list[Chooser],
        direct_targets: frozenset[int], origin: Origin,
    ) -> None:
        self.stream = stream
        self.origin = origin
        self.fields = fields
        self.emitted = 0  # tuples emitted on this stream by this task (squall.metrics)
        self.key = 0
        self.memo: dict[str, int] | None = None
        self.arity = len(fields)
        self.direct = direct
        self.direct_targets = direct_targets
        if not choosers:
            self.choose: Chooser = _no_targets
        elif len(choosers) == 1:
            self.choose = choosers[0]
        else:
            def choose_all(values: Sequence[Any]) -> list[int]:
                out: list[int] = []
                for c in choosers:
                    out.extend(c(values))
                return out

            self.choose = choose_all
        self.restored()

    def restored(self) -> None:
        """Start this run's counters and take the chooser's shortcut: called when built and
        when restored from a snapshot (which may come from a version without the shortcut)."""
        self.emitted = 0
        # What `emit` (not `emit_direct`) checks a tuple's length against: the arity, or -1 for
        # a direct stream, which only `emit_direct` takes (one comparison per emit for both).
        self.emit_arity = -1 if self.direct else self.arity
        # A one-field fields grouping's memo of string keys (`field_memo`): the collectors look
        # `values[key]` up in it before calling `choose`, which is the same task without a call.
        self.key, self.memo = field_memo(self.choose) or (0, None)


def _no_targets(values: Sequence[Any]) -> list[int]:
    return []


def load_aware(conf: Mapping[str, Any]) -> bool:
    """Whether a task with the effective `conf` shuffles between equal task counts task i ->
    task i (`groupings.forwards`): unless `topology.disable.loadaware.messaging` is true."""
    return not conf.get(DISABLE_LOAD_AWARE, False)


def build_routes(
    topology: Topology, task_id: int, seed: int, context: Any
) -> dict[str, StreamRoute]:
    component_id = topology.task_component(task_id)
    spec = topology.components[component_id]
    routes: dict[str, StreamRoute] = {}
    for stream, stream_spec in spec.streams.items():
        choosers: list[Chooser] = []
        direct_targets: set[int] = set()
        for k, (bolt_id, sub) in enumerate(topology.subscribers(component_id, stream)):
            tasks = topology.component_tasks(bolt_id)
            if isinstance(sub.grouping, DirectGrouping):
                direct_targets.update(tasks)
                continue
            choosers.append(
                make_chooser(
                    sub.grouping,
                    stream_spec.fields,
                    tasks,
                    # distinct, repeatable randomness per (emitting task, subscription)
                    seed=(seed * 1_000_003 + task_id * 7_919 + k) & 0xFFFFFFFF,
                    source_task=task_id,
                    source_tasks=topology.component_tasks(component_id),
                    context=context,
                    stream=(component_id, stream),
                    load_aware=load_aware(context.conf),
                )
            )
        routes[stream] = StreamRoute(
            stream, stream_spec.fields, stream_spec.direct, choosers, frozenset(direct_targets),
            Origin(stream_spec.fields, component_id, stream, task_id),
        )
    return routes
