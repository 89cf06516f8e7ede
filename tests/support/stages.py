"""A topology's Spark stages run in this process (no Spark): what each stage sends, and the
tasks' snapshots, on the column path of windowed tasks or the per-tuple path everywhere."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa

from squall import Config
from squall.runtime.spark import row_schema, window_columns
from squall.runtime.spark import stage as stage_mod
from squall.runtime.spark.spouts import ReaderHost, end_of_input_rows
from squall.runtime.spark.stage import StagePlan, run_stage
from squall.task.snapshot import dump_instance
from squall.task.tasks import SpoutTask


def stage_outputs(topo: Any, spout: str, stages: list[str], sinks: str, columns: bool,
                  run_id: str, tracking: bool = False, state_dir: str | None = None
                  ) -> tuple[dict[str, list[Any]], dict[int, bytes]]:
    """`spout`'s reader, then each of `stages`' stages over the rows the reader produced, the
    whole input as one batch (with the rows that end the input): what each stage sends
    `sinks`' tasks (decoded packets, in row order) and each task's snapshot. `columns=False`:
    the per-tuple path everywhere. `tracking`: the spout's tuples carry message ids and the
    stages send their acks (one acker). `state_dir`: the checkpoint location (a new temporary
    directory if None; a stateful task's snapshot names its files)."""
    conf = Config()
    conf.set_num_ackers(1 if tracking else 0)
    keys = {cid: list(range(topo.components[cid].num_tasks)) for cid in topo.components}
    key_of = dict.fromkeys(topo.task_ids, 0)
    host = ReaderHost(key_of, capture=False)
    (spout_id,) = topo.component_tasks(spout)
    task = SpoutTask(topo, spout_id, dict(conf), host, seed=0, tracking=tracking)
    task.open()
    while not task.exhausted():
        task.next_tuple()
    host.rows.rows.extend(host.packets.rows())
    if host.messages:
        host.rows.append(row_schema.messages_row(host.messages, host.now))
    host.rows.rows.extend(end_of_input_rows(topo, key_of, host.now, host.seq + 1))
    batch = host.rows.to_batch()
    state_dir = state_dir or tempfile.mkdtemp(prefix="window-columns-")
    stage_mod._TASKS.clear()
    out: dict[str, list[Any]] = {}
    role = window_columns.column_role
    sink_tasks = set(topo.component_tasks(sinks))
    try:
        if not columns:
            window_columns.column_role = lambda task, run: None  # type: ignore[assignment]
        for cid in stages:
            plan = StagePlan(run_id=run_id, topology=topo, conf=dict(conf), component=cid,
                             batch_id=0, committed=-1, state_dir=state_dir, keys=keys, seed=0,
                             tracking=tracking, capture=False, checkpoint_id=run_id)
            rows = pa.Table.from_batches(list(run_stage(plan, iter([batch]))),
                                         schema=row_schema.SCHEMA).to_pylist()
            out[cid] = [(r["task"], row_schema.decode_values(r["values"])) for r in rows
                        if r["kind"] == row_schema.PACKET and r["task"] in sink_tasks]
    finally:
        window_columns.column_role = role  # type: ignore[assignment]
    snapshots = {task_id: dump_instance(cached[2]) for (_run, task_id), cached
                 in stage_mod._TASKS.items()}
    stage_mod._TASKS.clear()
    return out, snapshots
