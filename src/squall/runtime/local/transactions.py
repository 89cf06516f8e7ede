"""The local runner's checkpoint: every batch is a transaction, committed atomically.

With a checkpoint location the local engine ends a batch (`LocalEngine.end_batch`) as a
transaction `b`, at a cut where nothing is in flight (the engine is single-threaded and drains
its queue first):

1. every bolt task ends batch `b`, upstream components first (what one flushes reaches the
   next before its batch ends): sinks *stage* their batch (`BatchSink.begin_transactions`),
   stateful bolts prepare their state as version `b` (the Spark runner's per-batch protocol,
   `TaskCheckpointing.on_batch_transactions`), plain bolts run `on_batch_end`;
2. the spouts are told what completed (failed records join their replay lists);
3. one record is written atomically to `<checkpoint>/commit.pkl` (the commit point): `b`, every
   bolt instance (`squall.task.snapshot`: windows, in-memory state, held tuples; store-backed
   state as a reference to its prepared version), the acker ledgers, and for each built-in
   source task its position (`PartitionedSource.position`) and pending tuple trees;
4. then the state versions are promoted and the sinks publish the staged batch.

A start reads the record, restores the bolt instances, ledgers and pending trees, seeks the
sources, rolls states forward to `b` (versions above it are discarded), lets sinks publish
staged batches up to `b` and discard later ones, and continues with batch `b + 1`. A kill at
any moment therefore leaves either transaction `b` or `b - 1` in force, whole: exactly-once for
state and the built-in sinks. User spouts (not `PartitionedSource`s) are opened afresh and
replay as they do (at-least-once). Decisions and their reasons: docs/design/local-checkpoint.md.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import random
import uuid
from collections.abc import Mapping
from typing import Any

from squall.atomic_files import read_or_none, write_atomic
from squall.components.batch_sink import BatchSink
from squall.components.partitioned_source import PartitionedSource
from squall.reliability.acker import AckerLedger
from squall.state.providers import DURABLE, new_state
from squall.task.reshape import (
    RescaleError,
    Reshape,
    compare,
    key_fields,
    redistribute,
    shape,
)
from squall.task.restart import warn_changed_configurations
from squall.task.snapshot import dump_instance, load_instance
from squall.topology.config import Config
from squall.topology.description import Topology

log = logging.getLogger(__name__)

COMMIT_FILE = "commit.pkl"
RESCALE_FILE = "rescale.json"  # the namespaces a redistribution in progress touches
PAYLOADS_FILE = "components.pkl"
FORMAT = 1


class LocalCheckpointError(RescaleError):
    """The checkpoint location cannot be used by this topology (another topology's, or a
    change of parallelism that cannot be carried)."""


def fingerprint(topology: Topology) -> dict[str, Any]:
    """What must not change for a restart to resume: components, kinds, task ids (snapshots
    and source positions are per task)."""
    return {cid: [spec.kind, list(topology.component_tasks(cid))]
            for cid, spec in sorted(topology.components.items())}


def is_builtin_source(spout: Any) -> bool:
    """Whether the spout's position can be checkpointed: the built-in sources."""
    return isinstance(spout, PartitionedSource)


class LocalTransactions:
    """One engine's checkpoint location: the last commit record, and writing the next."""

    def __init__(self, directory: str, topology: Topology,
                 conf: Mapping[str, Any] | None = None) -> None:
        self.dir = directory  # prepared by the engine (squall.runtime.run_dir)
        self.path = os.path.join(self.dir, COMMIT_FILE)
        self.topology = topology
        self.conf = dict(conf or {})
        blob = read_or_none(self.path)
        self.record: dict[str, Any] | None = None if blob is None else pickle.loads(blob)
        mine = fingerprint(topology)
        if self.record is not None:
            if self.record.get("format") != FORMAT or self.record.get("runner") != "local":
                raise LocalCheckpointError(
                    f"checkpoint location {self.dir} was not written by the local runner; use "
                    "a new checkpoint location")
            if "shape" not in self.record:  # written before rescaling: only the same topology
                if self.record["topology"] != mine:
                    raise LocalCheckpointError(
                        f"checkpoint location {self.dir} was written by a different topology "
                        f"(or other parallelism): components {sorted(self.record['topology'])};"
                        " use a new checkpoint location, or restart the topology that wrote it")
            else:
                self._reshape(compare(self.record["shape"], topology))
            saved = read_or_none(os.path.join(self.dir, PAYLOADS_FILE))
            if saved is not None:
                warn_changed_configurations(pickle.loads(saved), topology)
        self.fingerprint = mine
        self.shape = shape(topology)
        # Each component's configuration as built, once per start (not in every record): what
        # the next restart compares its own with.
        write_atomic(os.path.join(self.dir, PAYLOADS_FILE), pickle.dumps(
            {cid: spec.payload for cid, spec in topology.components.items()}))
        self.committed: int = -1 if self.record is None else int(self.record["batch_id"])
        # The lineage of this checkpoint: sinks mark what they published with it.
        self.run_id: str = uuid.uuid4().hex if self.record is None else self.record["run_id"]

    # ---- a restart with other parallelism ------------------------------------------------------
    def _reshape(self, reshape: Reshape) -> None:
        """Carry the committed record over to the new topology's tasks (docs/design/rescale.md):
        stateful bolts' stores redistributed by key, snapshots and positions of the other
        components moved to their new task ids. Rewrites the record, so it is done once."""
        try:
            reshape.check(self.dir, self.conf, DURABLE)
        except RescaleError as exc:
            raise LocalCheckpointError(str(exc)) from None
        if not reshape.moved:
            return
        record = self.record
        assert record is not None
        topology = reshape.topology
        committed = int(record["batch_id"])
        marker_path = os.path.join(self.dir, RESCALE_FILE)
        marker: dict[str, list[str]] = json.loads(read_or_none(marker_path) or b"{}")
        fresh = reshape.redistributed(self.conf, DURABLE)
        for cid in fresh:
            conf = Config.effective_of(self.conf, topology.components[cid].conf)
            base = os.path.join(self.dir, "state")

            def open_state(name: str, conf: Mapping[str, Any] = conf, base: str = base) -> Any:
                return new_state(conf, name, default=DURABLE, base_dir=base)

            old_ids, new_ids = reshape.old_tasks[cid], topology.component_tasks(cid)
            names = [*(f"{cid}-{t}" for t in old_ids), *(f"{cid}-{t}" for t in new_ids),
                     *marker.get(cid, [])]
            marker[cid] = sorted(set(names))
            write_atomic(marker_path, json.dumps(marker).encode())
            redistribute(cid, key_fields(topology, cid), old_ids, new_ids, marker[cid],
                         committed, open_state)
        moved = reshape.task_map()
        keep = {old: new for old, new in moved.items()
                if topology.task_component(new) not in fresh}
        record["bolts"] = {keep[t]: blob for t, blob in record["bolts"].items() if t in keep}
        record["spouts"] = {moved[t]: saved for t, saved in record["spouts"].items()}
        record["ledgers"] = [
            {root: (val, moved.get(task, task), failed, start)
             for root, (val, task, failed, start) in ledger.items()}
            for ledger in record["ledgers"]]
        record["shape"], record["topology"] = shape(topology), fingerprint(topology)
        write_atomic(self.path, pickle.dumps(record))
        if os.path.exists(marker_path):
            os.unlink(marker_path)
        log.info("%s", reshape.summary(self.dir, fresh))

    # ---- a start ------------------------------------------------------------------------------
    def restore(self, engine: Any) -> set[int]:
        """Before the engine builds its executors: bolt instances, ledgers, pending trees.
        Returns the ids of the restored bolt tasks (they are not prepared again)."""
        engine.batch_id = self.committed + 1
        record = self.record
        if record is None:
            return set()
        restored = set()
        for task in engine.bolts:
            blob = record["bolts"].get(task.task_id)
            if blob is None:  # a rescaled component's task: prepared afresh, state from its store
                continue
            load_instance(task, blob)
            restored.add(task.task_id)
        entries: dict[int, Any] = {}
        for snap in record["ledgers"]:
            entries.update(snap)
        if engine.ackers:  # redistributed: the number of ackers may have changed
            n = len(engine.ackers)
            parts: list[dict[int, Any]] = [{} for _ in range(n)]
            for root, entry in entries.items():
                parts[root % n][root] = entry
            memory = engine.ackers[0].memory_ms
            engine.ackers[:] = [AckerLedger.restore(p, memory) for p in parts]
        now = engine.now_ms()
        for spout in engine.spouts:
            saved = record["spouts"].get(spout.task_id) or {}
            # Timeouts of restored trees count from the restart: the time before it was spent
            # in a process that no longer exists.
            for root, msg_id, stream in saved.get("pending", ()):
                spout.pending.add(root, msg_id, stream, now)
            retries = saved.get("retries")
            if retries is not None:  # failure counts and replays waiting for their backoff
                retries.policy = spout.retries.policy  # this run's configuration
                spout.retries = retries
            # New root ids must not collide with the restored ones, which the task's seeded
            # generator would draw again from its start.
            spout.rand64 = functools.partial(
                random.Random(f"{engine.seed}:{spout.task_id}:{self.committed}").getrandbits, 64)
            spout.rebind()
        return restored

    def begin(self, engine: Any) -> None:
        """After the bolts are prepared or restored, before any tuple: states roll forward to
        the committed transaction, sinks finish what a killed run left."""
        for bolt in engine.bolts:
            if bolt.checkpointing is not None:
                bolt.checkpointing.begin_batch(engine.batch_id, self.committed)
            if isinstance(bolt.instance, BatchSink):
                bolt.instance.begin_transactions(self.committed, self.run_id)

    def seek_sources(self, engine: Any) -> None:
        """After the spouts are open: built-in sources continue from their positions."""
        if self.record is None:
            return
        for spout in engine.spouts:
            saved = self.record["spouts"].get(spout.task_id)
            if saved and saved.get("position") is not None and is_builtin_source(spout.spout):
                spout.spout.seek(saved["position"])

    # ---- a transaction ------------------------------------------------------------------------
    def commit(self, engine: Any, batch_id: int) -> None:
        """End batch `batch_id` as a transaction (see the module docstring)."""
        engine.drain()
        for bolt in engine.end_of_input.order:  # upstream first
            bolt.end_batch(batch_id)  # stages sinks, prepares states (errors raise: no commit)
            engine.drain()
        for spout in engine.spouts:
            spout.deliver_completions()  # a completed tree must not be restored as pending
        spouts: dict[int, dict[str, Any]] = {}
        for spout in engine.spouts:
            if is_builtin_source(spout.spout):
                spouts[spout.task_id] = {
                    "position": spout.spout.position(),
                    "pending": [(root, e.msg_id, e.stream) for root, e in spout.pending.items()],
                    "retries": spout.retries,
                }
        record = {
            "format": FORMAT, "runner": "local", "batch_id": batch_id, "run_id": self.run_id,
            "topology": self.fingerprint, "shape": self.shape,
            "bolts": {bolt.task_id: dump_instance(bolt) for bolt in engine.bolts},
            "ledgers": [ledger.snapshot() for ledger in engine.ackers],
            "spouts": spouts,
        }
        write_atomic(self.path, pickle.dumps(record))  # the commit point
        self.committed = batch_id
        for bolt in engine.bolts:
            if bolt.checkpointing is not None:
                # Promotes the version prepared above (and pre_commit); what a restart from
                # this record does too, so a kill in between changes nothing.
                bolt.checkpointing.begin_batch(batch_id + 1, batch_id)
            if isinstance(bolt.instance, BatchSink):
                try:
                    bolt.instance.commit_batch(batch_id)
                except Exception as exc:  # committed: published later or at the next start
                    bolt.report(exc)
