"""A Spark checkpoint location restarted with other parallelism (docs/design/rescale.md).

`check_fingerprint` (fingerprint.py) runs before the query starts. It compares the shape the
location recorded (`topology.json`) with the new topology (`squall.task.reshape`): structural
changes and rescales that cannot be carried are refused with what changed. A carriable rescale
is handed to `migrate`, which carries the location over once, so the query then runs as if the
new topology had written it:

1. the stateful bolts' stores are redistributed by key (`squall.task.reshape.redistribute`);
2. `tasks/` (the bolt task snapshots) is rebuilt as `tasks.rescaled/`, each kept task's
   snapshots under its new task id, a rescaled or redistributed component's dropped (its tasks
   start afresh and read their state from the store), then swapped in by two renames;
3. the spout snapshots, the outcome files and the commit record's ledger name spout tasks:
   their ids are mapped (the marker records each step done, so a rerun after a kill does not
   map twice);
4. `topology.json` records the new shape, and the marker `rescale.json` is removed.

Every step is idempotent, and the marker makes a start after a kill in the middle finish the
same migration. A batch planned with the old parallelism and not committed (its rows are routed
to the old tasks) cannot be carried: the restart is refused and says to run once with the old
parallelism first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from squall.atomic_files import read_or_none, write_atomic
from squall.reliability.acker import Outcome
from squall.runtime.fingerprint import FINGERPRINT_FILE, CheckpointMismatchError
from squall.state.providers import DURABLE, new_state
from squall.task.reshape import Reshape, key_fields, redistribute, shape
from squall.topology.config import Config

log = logging.getLogger(__name__)

MARKER_FILE = "rescale.json"


def migrate(directory: str, reshape: Reshape, conf: Mapping[str, Any]) -> None:
    """Carry the location over to `reshape.topology`'s tasks (the module docstring's steps);
    called by `check_fingerprint` once the change is known to be carriable."""
    topology = reshape.topology
    blob = read_or_none(os.path.join(directory, "commit.pkl"))
    committed = -1 if blob is None else int(pickle.loads(blob)["batch_id"])
    _refuse_uncommitted(directory, committed)
    marker_path = os.path.join(directory, MARKER_FILE)
    # What an interrupted migration did: namespaces it may have written, steps it finished.
    marker: dict[str, Any] = json.loads(read_or_none(marker_path) or b"{}")
    marker.setdefault("namespaces", {})
    marker.setdefault("done", [])

    def done(step: str) -> None:
        marker["done"].append(step)
        write_atomic(marker_path, json.dumps(marker).encode())

    fresh = reshape.redistributed(conf, DURABLE)
    for cid in fresh:
        component_conf = Config.effective_of(conf, topology.components[cid].conf)
        base = os.path.join(directory, "state")

        def open_state(name: str, c: Mapping[str, Any] = component_conf, b: str = base) -> Any:
            return new_state(c, name, default=DURABLE, base_dir=b)

        old_ids, new_ids = reshape.old_tasks[cid], topology.component_tasks(cid)
        names = marker["namespaces"]
        names[cid] = sorted({*(f"{cid}-{t}" for t in (*old_ids, *new_ids)), *names.get(cid, [])})
        write_atomic(marker_path, json.dumps(marker).encode())
        redistribute(cid, key_fields(topology, cid), old_ids, new_ids, names[cid], committed,
                     open_state)
    moved = reshape.task_map()
    keep = {old: new for old, new in moved.items()
            if topology.task_component(new) not in fresh}
    # Each step below maps ids, so it must run once: the marker records it as done.
    def step(name: str) -> Callable[[], None] | None:
        """What records step `name` as done, or None when it is."""
        return None if name in marker["done"] else lambda: done(name)

    finished = step("tasks")
    if finished is not None:
        _rebuild_tasks(directory, keep, finished)
    _map_spout_files(directory, moved, step)
    if blob is not None and "ledger" not in marker["done"]:
        record = pickle.loads(blob)
        record["ledger"] = {root: (val, moved.get(task, task), failed, start)
                            for root, (val, task, failed, start) in record["ledger"].items()}
        write_atomic(os.path.join(directory, "commit.pkl"), pickle.dumps(record))
        done("ledger")
    write_atomic(os.path.join(directory, FINGERPRINT_FILE),
                 json.dumps(shape(topology), sort_keys=True).encode())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker_path)
    log.info("%s", reshape.summary(directory, fresh))


def _offset_batches(directory: str, kind: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(directory, "query", kind))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def _refuse_uncommitted(directory: str, committed: int) -> None:
    planned = [b for b in _offset_batches(directory, "offsets") if b > committed]
    if planned:
        raise CheckpointMismatchError(
            f"checkpoint location {directory}: batch {planned[0]} was planned with the old "
            "parallelism and is not committed (its tuples are routed to the old tasks); run "
            "once more with the parallelism the checkpoint was written with, so it commits, "
            "then restart with the new parallelism")


def _rebuild(directory: str, name: str, build: Callable[[str, str], None],
             finished: Callable[[], None]) -> None:
    """Replace `directory/name` by what `build(source, target)` writes into an empty
    `name.rescaled`: built aside and swapped in by two renames, `finished` recorded before the
    old copy is removed. A kill at any point leaves either the old or the new directory, and a
    rerun completes the swap (the old copy still exists) or rebuilds (nothing was swapped)."""
    current, built, old = (os.path.join(directory, n)
                           for n in (name, f"{name}.rescaled", f"{name}.old"))
    if not os.path.isdir(old):
        if not os.path.isdir(current):
            finished()
            return
        shutil.rmtree(built, ignore_errors=True)
        os.makedirs(built)
        build(current, built)
        os.rename(current, old)
    if not os.path.isdir(current):
        os.rename(built, current)
    finished()
    shutil.rmtree(old)


def _rebuild_tasks(directory: str, keep: Mapping[int, int], finished: Callable[[], None]) -> None:
    """`tasks/task=<old>` -> `tasks/task=<new>` for the kept tasks; the others' snapshots are
    dropped (their tasks start afresh)."""
    def build(source: str, target: str) -> None:
        for old_id, new_id in keep.items():
            if os.path.isdir(os.path.join(source, f"task={old_id}")):
                shutil.copytree(os.path.join(source, f"task={old_id}"),
                                os.path.join(target, f"task={new_id}"))

    _rebuild(directory, "tasks", build, finished)


def _map_spout_files(directory: str, moved: Mapping[int, int],
                     step: Callable[[str], Callable[[], None] | None]) -> None:
    """Spout task ids in the reader's snapshots and in the outcome files."""
    def spouts(source: str, target: str) -> None:
        for name in os.listdir(source):
            state = pickle.loads(read_or_none(os.path.join(source, name)) or b"")
            state["tasks"] = {moved[t]: saved for t, saved in state["tasks"].items()}
            write_atomic(os.path.join(target, name), pickle.dumps(state))

    def outcomes(source: str, target: str) -> None:
        for name in os.listdir(source):
            content = pickle.loads(read_or_none(os.path.join(source, name)) or b"")
            # Outcomes as the driver writes them (`Outcome` fields, the error one optional).
            settled = [Outcome(*o) for o in content]
            write_atomic(os.path.join(target, name), pickle.dumps(
                [tuple(o._replace(spout_task=moved.get(o.spout_task, o.spout_task)))
                 for o in settled]))

    def spout_tasks(source: str, target: str) -> None:
        # The snapshots of spout tasks pulled on the executors (squall.runtime.spark.pulls).
        for old_id, new_id in moved.items():
            if os.path.isdir(os.path.join(source, f"task={old_id}")):
                shutil.copytree(os.path.join(source, f"task={old_id}"),
                                os.path.join(target, f"task={new_id}"))

    for name, build in (("spouts", spouts), ("outcomes", outcomes), ("spout-tasks", spout_tasks)):
        finished = step(name)
        if finished is not None:
            _rebuild(directory, name, build, finished)
    # The reader's last status and the pulled spout tasks' statuses name spout tasks too; the
    # reader writes a new one before the driver needs it, and the first pulls write theirs.
    for name in ("status.pkl", "spout-status.pkl"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))


__all__ = ["MARKER_FILE", "migrate"]
