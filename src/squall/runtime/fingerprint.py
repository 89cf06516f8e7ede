"""The checkpoint fingerprint: which topology a checkpoint location belongs to.

Every runner writes the topology's shape (`squall.task.reshape.shape`: components, kinds,
roles, classes, streams, inputs with their groupings, numbers of tasks) to `topology.json` in a
fresh checkpoint location (through `squall.runtime.run_dir`; the local runner of spouts and bolts
keeps it in its commit record instead, `squall.runtime.local.transactions`), and each
component's configuration as built to `components.pkl`.
A start from an existing location compares them with the new topology: a structural change is
refused naming each change; a change of parallelism is handed to `migrate` (the topology runner
passes `squall.runtime.spark.rescale.migrate`) or refused (transactional and Trident runners);
a changed configuration is a warning. The check needs no Spark, so a wrong location fails in
milliseconds. A `topology.json` written before shapes existed is compared as it was: equal or
refused.

`checkpoint_id(directory)` is the location's identity across its restarts, written once before
the first batch: sinks that mark what they wrote (`BatchSink.bind_checkpoint`) name their marks
with it, so a replay of any batch, the first included, finds what an earlier process of
the same location committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle

from squall.atomic_files import read_or_none, write_atomic
from squall.state.providers import DURABLE
from squall.task.reshape import RescaleError, Reshape, compare, shape
from squall.task.restart import warn_changed_configurations
from squall.topology.description import Topology

FINGERPRINT_FILE = "topology.json"
PAYLOADS_FILE = "components.pkl"  # each component's configuration as built, for the warnings
CHECKPOINT_ID_FILE = "checkpoint-id"

Migrate = Callable[[str, Reshape, Mapping[str, Any]], None]


class CheckpointMismatchError(RescaleError):
    """The checkpoint location holds the state of a different topology, or of this one with a
    change of parallelism that cannot be carried."""


def fingerprint(topology: Topology) -> dict[str, Any]:
    """What a checkpoint written before shapes existed recorded (compared for equality)."""
    return {
        cid: {
            "kind": spec.kind,
            "class": spec.class_name,
            "tasks": spec.num_tasks,
            "streams": {s: list(st.fields) for s, st in spec.streams.items()},
            "inputs": [[i.component, i.stream, i.grouping.name] for i in spec.inputs],
        }
        for cid, spec in topology.components.items()
    }


def checkpoint_id(directory: str) -> str:
    """The identity of checkpoint location `directory`: read, or written on its first start
    (before any batch, so no batch is ever marked with another).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> first = checkpoint_id(d)
    >>> len(first), checkpoint_id(d) == first
    (32, True)
    """
    path = os.path.join(directory, CHECKPOINT_ID_FILE)
    blob = read_or_none(path)
    if blob is not None:
        return blob.decode("ascii").strip()
    token = uuid.uuid4().hex
    write_atomic(path, token.encode("ascii"))
    return token


def check_fingerprint(directory: str, topology: Topology,
                      conf: Mapping[str, Any] | None = None, *,
                      migrate: Migrate | None = None) -> None:
    """Record `topology`'s shape in a new checkpoint location `directory`, or raise
    `CheckpointMismatchError` when it cannot resume the location; a carriable change of
    parallelism is handed to `migrate` (refused without one)."""
    path = os.path.join(directory, FINGERPRINT_FILE)
    blob = read_or_none(path)
    if blob is not None:
        theirs = json.loads(blob)
        if "version" not in theirs:
            if theirs != fingerprint(topology):
                digest = hashlib.sha1(blob).hexdigest()[:8]
                raise CheckpointMismatchError(
                    f"checkpoint location {directory} was written by a different topology "
                    f"(components {sorted(theirs)}, fingerprint {digest}); use a new "
                    "checkpoint location, or restart the topology that wrote it")
        else:
            reshape = compare(theirs, topology)
            if reshape.structural:
                raise CheckpointMismatchError(reshape.refusal(directory))
            if reshape.changed:
                if migrate is None:
                    raise CheckpointMismatchError(
                        f"checkpoint location {directory} was written with other parallelism ("
                        + ", ".join(f"'{cid}' {old} tasks, now {new}"
                                    for cid, (old, new) in sorted(reshape.resized.items()))
                        + "), which this kind of topology cannot change; restart with the "
                        "parallelism it was written with, or use a new checkpoint location")
                try:
                    reshape.check(directory, conf or {}, DURABLE)
                except RescaleError as exc:
                    raise CheckpointMismatchError(str(exc)) from None
                migrate(directory, reshape, conf or {})
        payloads = read_or_none(os.path.join(directory, PAYLOADS_FILE))
        if payloads is not None:
            warn_changed_configurations(pickle.loads(payloads), topology)
    write_atomic(os.path.join(directory, PAYLOADS_FILE), cloudpickle.dumps(
        {cid: spec.payload for cid, spec in topology.components.items()}))
    write_atomic(path, json.dumps(shape(topology), sort_keys=True).encode())
