"""The checkpoint fingerprint: which topology a Spark checkpoint location belongs to.

Both Spark runners write `topology.json` into a fresh checkpoint location and compare it when
they start from an existing one: a restart resumes only the topology that wrote it. The check
needs no Spark, so a wrong location fails in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from squall.atomic_files import read_or_none, write_atomic
from squall.errors import SquallError
from squall.topology.description import Topology

FINGERPRINT_FILE = "topology.json"


class CheckpointMismatchError(SquallError):
    """The checkpoint location holds the state of a different topology."""


def fingerprint(topology: Topology) -> dict[str, Any]:
    """What must not change for a restarted topology to resume from a checkpoint."""
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


def check_fingerprint(directory: str, topology: Topology) -> None:
    """Record `topology`'s fingerprint in a new checkpoint location `directory`, or raise
    `CheckpointMismatchError` when the location was written by a different topology."""
    path = os.path.join(directory, FINGERPRINT_FILE)
    mine = fingerprint(topology)
    blob = read_or_none(path)
    if blob is None:
        write_atomic(path, json.dumps(mine, sort_keys=True).encode())
        return
    theirs = json.loads(blob)
    if theirs != mine:
        digest = hashlib.sha1(blob).hexdigest()[:8]
        raise CheckpointMismatchError(
            f"checkpoint location {directory} was written by a different topology "
            f"(components {sorted(theirs)}, fingerprint {digest}); use a new checkpoint "
            "location, or restart the topology that wrote it"
        )
