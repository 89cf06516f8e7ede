"""Snapshots of a task's component instance, so it can move between processes.

A bolt instance holds its collector, its context, its own state and maybe tuples it has not acked
yet. Pickling it directly would drag the whole runtime along, so collectors and contexts pickle as
references that resolve, on load, to the collector and context of the task being restored.

>>> from squall import TopologyBuilder, Bolt, Fields, Values
>>> from squall.testing import FixedTupleSpout
>>> from squall.runtime.local.engine import LocalEngine
>>> class Count(Bolt):
...     def prepare(self, conf, context, collector):
...         super().prepare(conf, context, collector); self.n = 0
...     def execute(self, tup): self.n += 1; self.collector.ack(tup)
>>> b = TopologyBuilder()
>>> _ = b.set_spout("s", FixedTupleSpout([[1], [2]], Fields("x")))
>>> _ = b.set_bolt("count", Count()).shuffle_grouping("s")
>>> engine = LocalEngine(b.create_topology())
>>> _ = engine.run()
>>> task = engine.bolts[0]
>>> blob = dump_instance(task)
>>> fresh = LocalEngine(engine.topology).bolts[0]
>>> load_instance(fresh, blob)
>>> fresh.instance.n, fresh.instance.collector is fresh.collector
(2, True)
"""

from __future__ import annotations

from typing import Any

import cloudpickle

from squall.components.context import current_context, restoring_context
from squall.errors import SquallError
from squall.task.restart import same
from squall.task.routing import load_aware
from squall.task.surfaces import RestorableTask

_restoring: list[RestorableTask] = []


# The layout of a snapshot; a snapshot of another version is refused, not misread. Version 2:
# the role adapter's state (squall.task.roles) travels next to the instance. Version 3: so does
# the checkpointing's (a stateful bolt's state handles and prepared batch, no longer on the
# instance), and the Storm windowed bolts' windows are in their role adapter's part. Version 4:
# the component's configuration as built (its payload) and the task layout come first, so a
# restart with changed code or arguments can tell configuration from state
# (`restarted_instance`), and routes saved under another layout are rebuilt. Version 3 is read.
FORMAT_VERSION = 4
_READABLE = (3, FORMAT_VERSION)


class SnapshotFormatError(SquallError, ValueError):
    """A snapshot written by a squall whose snapshot layout differs from this one's."""


def dump_instance(task: RestorableTask) -> bytes:
    """The task's mutable runtime as bytes: its component instance, the framework's state for
    it (its role adapter's and its checkpointing's), its routing state (shuffle positions, random
    generators, custom groupings) and its tuple-id generator. Collectors and the context are
    stored as references. One pickle, so what the instance and the framework share (a state
    the bolt got in `init_state`, the collector it was prepared with) stays shared."""
    window, checkpointing = task.framework_saved()
    payload = task.topology.components[task.component_id].payload
    return cloudpickle.dumps((FORMAT_VERSION, payload, layout(task), task.instance, window,
                              checkpointing, task.routes, task.rand64))


def load_instance(task: RestorableTask, blob: bytes) -> None:
    """Make the task continue from the snapshot, bound to its own collector and context."""
    _restoring.append(task)
    try:
        with restoring_context(task.context):
            record = cloudpickle.loads(blob)
    finally:
        _restoring.pop()
    if not (isinstance(record, tuple) and record and record[0] in _READABLE):
        found = (record[0] if isinstance(record, tuple) and record
                 and isinstance(record[0], int) else "1 or unknown")
        raise SnapshotFormatError(
            f"snapshot of task {task.task_id} ({task.component_id}) has format {found}, this "
            f"squall reads format {FORMAT_VERSION}: resume it with the squall that wrote it, or "
            f"start from a new checkpoint location")
    if record[0] == 3:
        _version, instance, window, checkpointing, task.routes, task.rand64 = record
    else:
        _version, payload, saved_layout, instance, window, checkpointing, routes, rand = record
        current = task.topology.components[task.component_id].payload
        if payload != current:  # a restart with another build of the component
            instance = restarted_instance(instance, payload, current)
        if saved_layout == layout(task):
            task.routes = routes
        # else a rescale renumbered the tasks, or the shuffle rule changed (`layout`): the
        # routes built for this run stay
        task.rand64 = rand
    for route in task.routes.values():
        route.restored()  # counters of this run, shortcuts (absent from older snapshots)
    task.instance = instance
    task.restore_framework(window, checkpointing)
    task.rebind()


def layout(task: RestorableTask) -> tuple[Any, ...]:
    """The task's id, whether its shuffles forward between equal task counts, and every
    component's task ids: saved routes (target task ids, the origin, which task a shuffle may
    pick) are valid only under the same layout and the same rule. A snapshot from a squall
    whose shuffle always spread, or a restart that flips `topology.disable.loadaware.messaging`,
    gets the routes built for this run, as a rescale does."""
    topology = task.topology
    return (task.task_id, ("forward shuffle", load_aware(task.context.conf)),
            *((cid, topology.component_tasks(cid)) for cid in topology.components))


def restarted_instance(saved: Any, old_payload: bytes, new_payload: bytes) -> Any:
    """The instance a task continues with after a restart with a changed component: the new
    topology's instance (its class, so its code, and its constructor arguments) with the saved
    instance's state, i.e. every attribute of the saved instance except those its constructor
    set to a value the new constructor changed (or no longer sets).

    What the constructor set and the run never changed therefore takes the new value; what the
    component built in `open`/`prepare` or changed while running is restored, unless the new
    constructor changed that attribute's value.

    >>> class Numbers:
    ...     def __init__(self, limit): self.limit, self.sent = limit, 0
    >>> saved = Numbers(5); saved.sent = 3; saved.buffer = [4]
    >>> fresh = restarted_instance(saved, cloudpickle.dumps(Numbers(5)),
    ...                            cloudpickle.dumps(Numbers(10)))
    >>> fresh.limit, fresh.sent, fresh.buffer
    (10, 3, [4])
    """
    fresh = cloudpickle.loads(new_payload)
    try:
        configured, state = vars(fresh), vars(saved)
    except TypeError:  # no __dict__ (slots): nothing can be told apart; the state wins
        return saved
    try:
        before: dict[str, Any] | None = vars(cloudpickle.loads(old_payload))
    except Exception:  # the old build no longer loads: what the new constructor sets wins
        before = None
    for name, value in state.items():
        if before is None:
            if name in configured:
                continue
        elif name in before and (name not in configured
                                 or not same(before[name], configured[name])):
            continue
        configured[name] = value
    return fresh


def current_collector(kind: str) -> Any:
    """The collector of the task being restored (what a pickled collector resolves to)."""
    if not _restoring:
        raise RuntimeError("a collector can only be unpickled while a task is being restored")
    return _restoring[-1].collector_reference(kind)


__all__ = ["FORMAT_VERSION", "SnapshotFormatError", "current_collector", "current_context",
           "dump_instance", "load_instance", "restarted_instance"]
