"""`BatchSink`: the base of sinks, terminal bolts whose output is exactly-once although delivery is
at-least-once.

A sink buffers the tuples of a batch and, in `on_batch_end(batch_id)`, writes them durably under
the batch id and only then acks them. If the write fails the error is reported (naming the
component and the target) and the batch's tuples are failed, so their spouts replay them, or, where
batches are transactions, the batch is run again (`SinkWriteError` is a `BatchRetryError`). The
local runner with a checkpoint location writes in two phases (`stage`, then `publish` once its
commit record names the batch). The built-in sinks are in `squall.connectors`.

>>> part_name(3, 2, "jsonl")
'part-b000000000003-t2.jsonl'
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from squall.components.base import Bolt
from squall.errors import BatchRetryError, SquallError
from squall.topology.fields import Fields
from squall.topology.tuple import Tuple

log = logging.getLogger("squall")

_STAGED_PREFIX = ".staged-"


class SinkError(SquallError):
    """A sink could not write a batch (or is configured wrongly); names the component."""


class SinkWriteError(SinkError, BatchRetryError):
    """A batch could not be written: the batch is not committed (Spark runs it again; the local
    runner with a checkpoint stops), or, where batches are not transactions, its tuples fail."""


def part_name(batch_id: int, task_id: int, suffix: str) -> str:
    """The file of one (batch, task): `part-b{batch:012d}-t{task}.{suffix}`.

    >>> part_name(3, 2, "jsonl")
    'part-b000000000003-t2.jsonl'
    """
    return f"part-b{batch_id:012d}-t{task_id}.{suffix}"


class BatchSink(Bolt):
    """Base of the sinks: buffers a batch's tuples, writes them at batch end, then acks them.

    Subclasses implement `write_batch(batch_id, tuples)`, which must be idempotent per
    (batch id, task): a replayed batch overwrites or skips, never appends. An exception from it
    raises a `SinkWriteError` built by `describe_failure` (see `BatchRetryError`: the batch is run
    again where batches are transactions; elsewhere its tuples are failed and the error reported).
    Sinks declare no output streams.
    """

    # Class defaults: instances restored from snapshots written before two phases existed
    # (a Spark checkpoint) have neither attribute.
    _two_phase = False
    # Only read through an old instance (it stages nothing): prepare and begin_transactions
    # give each instance its own list before any append.
    _staged: list[int] = []  # noqa: RUF012

    def __init__(self, fields: Fields | Iterable[str] | str | None = None) -> None:
        if isinstance(fields, str):
            fields = [fields]
        self.fields: tuple[str, ...] | None = None if fields is None else tuple(fields)
        if self.fields is not None and not self.fields:
            raise SinkError(f"{type(self).__name__}: fields, when given, must name at least one")

    # ---- the bolt --------------------------------------------------------------------------
    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self._buffer: list[Tuple] = []
        self._two_phase = False  # set by begin_transactions (local runner, checkpoint)
        self._staged: list[int] = []  # staged batch ids not yet published
        self._check_inputs(self.required_fields())

    def execute(self, tup: Tuple) -> None:
        self._buffer.append(tup)

    def on_batch_end(self, batch_id: int) -> None:
        if not self._buffer:
            return
        tuples, self._buffer = self._buffer, []
        try:
            if self._two_phase:
                self.stage_batch(batch_id, tuples)
                self._staged.append(batch_id)
            else:
                self.write_batch(batch_id, tuples)
        except Exception as exc:
            # Failed here for a runner whose batches are not transactions (their spouts replay
            # them); a transactional runner drops this attempt, fails included, and runs the
            # batch again, so what other bolts did with these tuples is not applied twice.
            for tup in tuples:
                self.collector.fail(tup)
            error = self.describe_failure(exc, batch_id, len(tuples))
            if not isinstance(error, SinkWriteError):
                error = SinkWriteError(error.message, component=error.component,
                                       stream=error.stream, field=error.field)
            raise error from exc
        for tup in tuples:
            self.collector.ack(tup)

    # ---- a checkpoint location ------------------------------------------------------------------
    def bind_checkpoint(self, checkpoint_id: str) -> None:
        """Called by the runner, before this task writes its first batch, with the identity of
        the checkpoint location it runs on (stable across the location's restarts). A sink that
        marks what it wrote, so that a replayed batch is skipped, names its marks with it: a
        mark named after the process would be missed by the replay of a batch the killed
        process had written, the first one included. The default does nothing."""

    # ---- two phases: the local runner with a checkpoint location ----------------------------
    def begin_transactions(self, committed: int, run_id: str) -> None:
        """Called by the local runner with a checkpoint location before the first batch (of a
        fresh start or a restart): from now on batches are staged at their end and published by
        `commit_batch` once the runner's commit record names them. Binds the checkpoint
        (`bind_checkpoint(run_id)`: `run_id` is the location's identity, stable across its
        restarts), then finishes what a killed run left: `recover(committed, run_id)`."""
        self._two_phase = True
        self.bind_checkpoint(run_id)
        self.recover(committed, run_id)
        self._staged = []

    def commit_batch(self, batch_id: int) -> None:
        """The runner committed every batch up to `batch_id`: publish what was staged for them.
        Idempotent; a failure leaves the batch staged, published by a later call or the
        next start's recovery (it is committed: it is never discarded)."""
        for staged in [b for b in self._staged if b <= batch_id]:
            self.publish_batch(staged)
            self._staged.remove(staged)

    def stage_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        """Write the batch durably where readers do not see it yet. The default writes it at
        once (`write_batch`): a sink without its own staging is at-least-once across a crash
        between the write and the runner's commit."""
        self.write_batch(batch_id, tuples)

    def publish_batch(self, batch_id: int) -> None:
        """Make a staged, committed batch visible; must be idempotent (see `stage_batch`)."""

    def recover(self, committed: int, run_id: str) -> None:
        """Publish this task's staged batches up to `committed`, discard later ones."""

    # ---- for subclasses --------------------------------------------------------------------
    def write_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement write_batch")

    def target(self) -> str:
        """Where the sink writes, for error messages."""
        return "?"

    def describe_failure(self, exc: Exception, batch_id: int, n: int) -> SinkError:
        return SinkWriteError(
            f"{type(self).__name__} could not write batch {batch_id} of task "
            f"{self.context.this_task_id} to {self.target()}: {type(exc).__name__}: {exc}; "
            f"its {n} tuples are not written",
            component=self.context.this_component_id,
        )

    def required_fields(self) -> tuple[str, ...]:
        return self.fields or ()

    def record(self, tup: Tuple) -> dict[str, Any]:
        """The tuple as a dict: all its fields, or the sink's `fields`."""
        if self.fields is None:
            return dict(zip(tup.fields, tup.values, strict=True))
        return {name: tup[name] for name in self.fields}

    def _check_inputs(self, required: tuple[str, ...]) -> None:
        context = self.context
        for component, stream in context.this_sources:
            declared = context.get_component_output_fields(component, stream)
            for name in required:
                if name not in declared:
                    raise SinkError(
                        f"{type(self).__name__} needs field {name!r}, but {component!r} declares "
                        f"only {list(declared)} on stream {stream!r}",
                        component=context.this_component_id, stream=stream, field=name,
                    )
