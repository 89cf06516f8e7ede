"""A windowed task's input packets as columns in a Spark stage (no `execute` per tuple).

A stage executes a task's packets (`row_schema.Packets`) tuple by tuple: a `Tuple` per row, then
the task's `execute`. For a task of a windowed component whose window work a column-wise core
covers, and that is not checkpointed (a stateful topology's checkpointing executes each tuple),
`run_packet` hands each run of a packet that shares one header (source task, stream, processing
time and event-time position) to the role's `execute_columns` as the rows' values:

- a windowed operator (squall.windows, `OperatorRole`) whose windowing `columns_reason` covers
  (the hot path's fields, the generated watermark, time windows under Apex's trigger options;
  squall.panes.columnar) takes the timestamp, key and value columns from the rows, a tuple
  object only for a row that needs one;
- a Storm windowed bolt (`WindowedRole`) whose window manager `columns_reason` covers (not a
  stateful windowed bolt's, not with source watermarks; squall.tuple_windows.columnar) reads the
  timestamps as a column and does the manager's bookkeeping column-wise, its windows holding a
  tuple per row as the per-tuple path's do.

The host's time and position are the header's, as the per-tuple path sets them, and rows keep
their order (a packet is one source task's emission order to this task, and the stage runs
packets in source and sequence order). What the task sends and its snapshots are the per-tuple
path's (`execute_columns`' contract). Any other task keeps the per-tuple path; the log says once
per run and component which path its tasks take, and why not the column one.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from squall.task.roles.operator import OperatorRole
from squall.task.roles.windowed import WindowedRole
from squall.task.tasks import BoltTask
from squall.topology.tuple import Origin, Tuple

log = logging.getLogger("squall")

ColumnRole = OperatorRole | WindowedRole  # the roles with an `execute_columns`

_said: set[tuple[str, str]] = set()  # (run id, component) whose path the log has told


def column_role(task: BoltTask, run_id: str) -> ColumnRole | None:
    """`task`'s role if its packets go through `run_packet`, else None (the per-tuple path);
    for a windowed operator or bolt, the log tells which once per run and component."""
    role = task.window
    if not isinstance(role, ColumnRole):
        return None
    reason = (role.columns_reason() if task.execute == task._execute_windowed
              else "a stateful topology (its checkpointing executes each tuple)")
    said = (run_id, task.component_id)
    if said not in _said:
        _said.add(said)
        kind = "windowed operator" if isinstance(role, OperatorRole) else "windowed bolt"
        if reason is None:
            log.info("%s %r: its tasks take their input on Spark as columns", kind,
                     task.component_id)
        else:
            log.info("%s %r: its tasks take their input on Spark tuple by tuple, not as "
                     "columns, for %s", kind, task.component_id, reason)
    return role if reason is None else None


def run_packet(task: BoltTask, role: ColumnRole, host: Any, items: list[Any],
               origin_of: Callable[[str], Origin], sample_every: int) -> int:
    """Execute one decoded packet's `items` (see `row_schema.Packets`) through `role`'s column
    entry, a run per header; returns how many tuples. `host` is the stage's (`set_now`,
    `set_at`); `origin_of(stream)` the origin of the packet's source task's stream. Execute
    and process latencies are sampled as the per-tuple path samples them (a tuple in
    `sample_every`), at the run's mean time per tuple."""
    on_error = functools.partial(_failed, task, role)
    task_id = task.task_id
    times = task.times
    marks = [k for k, item in enumerate(items) if item.__class__ is tuple]
    heads = [k for k in marks if len(items[k]) == 3]
    anchored = len(heads) < len(marks)
    n = 0
    for h, end in zip(heads, [*heads[1:], len(items)], strict=True):
        if end == h + 1:
            continue
        stream, now, at = items[h]
        host.set_now(now)
        host.set_at(at)
        rows = items[h + 1:end]
        anchors = None
        if anchored and any(item.__class__ is not list for item in rows):
            anchors = [None if item.__class__ is list else item[1] for item in rows]
            rows = [item if item.__class__ is list else item[0] for item in rows]
        start = time.perf_counter_ns()
        role.execute_columns(rows, origin_of(stream), now, on_error, anchors, task_id)
        us = (time.perf_counter_ns() - start) // 1000 // len(rows)
        sampled = -(-len(rows) // sample_every)
        times.execute.record_us(us, sampled)
        times.process.record_us(us, sampled)
        n += len(rows)
    return n


def _failed(task: BoltTask, role: ColumnRole, tup: Tuple, exc: Exception) -> None:
    """What the task does when `execute` raises for a tuple (`BoltTask._execute_windowed`)."""
    task.on_execute_error(tup, role.explained(tup, exc))
