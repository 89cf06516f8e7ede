"""`open_run_dir`: the directory a runner keeps its run in, prepared the same way by every runner.

Every runner's constructor calls it with the checkpoint location it was given, or None: the
location the user gave (a restart resumes from it) or a fresh temporary directory, checked to
be a writable directory (`squall.runtime.checkpoint_location.prepare_location`), bound to the
topology (`squall.runtime.fingerprint.check_fingerprint`: a location another topology wrote, or
this one with a parallelism the runner cannot carry, is refused before anything starts) and
given its identity (`checkpoint_id`, which sinks name their marks with).

The local runner of spouts and bolts needs a directory only with a checkpoint location, and keeps
the topology's shape in its own commit record, which carries a change of parallelism itself
(`squall.runtime.local.transactions`): it asks for no fingerprint file (`fingerprinted=False`).

>>> import os
>>> from squall import TopologyBuilder, Fields
>>> from squall.testing import FixedTupleSpout
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[1]], Fields("n")))
>>> run_dir = open_run_dir(b.create_topology(), None)
>>> run_dir.given, sorted(os.listdir(run_dir.path))
(False, ['checkpoint-id', 'components.pkl', 'topology.json'])
>>> open_run_dir(b.create_topology(), run_dir.path).checkpoint_id == run_dir.checkpoint_id
True
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.runtime.checkpoint_location import prepare_location
from squall.runtime.fingerprint import Migrate, check_fingerprint, checkpoint_id
from squall.topology.description import Topology

__all__ = ["RunDir", "open_run_dir"]


@dataclass(frozen=True)
class RunDir:
    """A run's directory: its absolute `path`, its `checkpoint_id`, and whether it is the
    checkpoint location the user `given` (else a temporary directory of this run alone)."""

    path: str
    checkpoint_id: str
    given: bool


def open_run_dir(topology: Topology, checkpoint_location: str | None, *,
                 conf: Mapping[str, Any] | None = None, migrate: Migrate | None = None,
                 fingerprinted: bool = True) -> RunDir:
    """The directory for running `topology`: `checkpoint_location`, or a new temporary one.

    Raises `CheckpointLocationError` when the location cannot hold a checkpoint and
    `CheckpointMismatchError` when it belongs to another topology; a change of parallelism is
    handed to `migrate` with the user's `conf` (refused without one). `fingerprinted=False`:
    no fingerprint file (a runner whose commit record holds the topology's shape)."""
    given = checkpoint_location is not None
    path = prepare_location(checkpoint_location if checkpoint_location is not None
                            else tempfile.mkdtemp(prefix="squall-run-"))
    if fingerprinted:
        check_fingerprint(path, topology, conf, migrate=migrate)
    return RunDir(path, checkpoint_id(path), given)
