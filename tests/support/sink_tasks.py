"""A sink's task driven by hand: rows executed, a batch ended, a replay from the snapshot the batch
started from (what Spark does after a crash), without a runner."""

from __future__ import annotations

from squall import Fields, TopologyBuilder
from squall.runtime.local.engine import LocalEngine
from squall.task.snapshot import dump_instance, load_instance
from squall.testing import FixedTupleSpout
from squall.topology.tuple import Tuple


def sink_task(sink, fields=("id", "word", "n")):
    """A real task of `sink` (prepared, with its collector), fed by a spout that emits nothing."""
    b = TopologyBuilder()
    b.set_spout("events", FixedTupleSpout([], Fields(*fields)))
    b.set_bolt("sink", sink).shuffle_grouping("events")
    engine = LocalEngine(b.create_topology())
    engine.start()
    task = next(t for t in engine.bolts if t.component_id == "sink")
    return engine, task


def execute(engine, task, rows, fields=("id", "word", "n")) -> None:
    spout_task = engine.topology.component_tasks("events")[0]
    for row in rows:
        task.execute(Tuple(list(row), Fields(*fields), "events", "default", spout_task,
                           task=task.task_id))


def replay(engine, task, rows, batch_id, between=None):
    """Execute `rows` and end `batch_id`, then restore the task to the state the batch started
    from (as Spark does after a crash) and execute the same rows and batch id again."""
    before = dump_instance(task)
    execute(engine, task, rows)
    task.end_batch(batch_id)
    load_instance(task, dump_instance(task))  # a snapshot taken after a write also restores
    if between is not None:
        between()
    load_instance(task, before)
    execute(engine, task, rows)
    task.end_batch(batch_id)
