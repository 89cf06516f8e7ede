"""What users write: `BatchBolt`, the `Committer` marker, and the collector they emit with.

A `BatchBolt` instance lives for one attempt of one transaction: the runtime clones the bolt the
user gave and calls `prepare(conf, context, collector, attempt)` on the clone, then `execute` for
each tuple of the batch, then `finish_batch` once the task has received every tuple of the batch
from all its upstream tasks. A bolt marked `Committer` (or added with `set_committer_bolt`) gets
`finish_batch` only in the commit phase, which runs for one transaction at a time, in id order.

The first value of every tuple in a transactional topology is the `TransactionAttempt`.

>>> from squall import Fields
>>> class Count(BatchBolt):
...     def prepare(self, conf, context, collector, attempt):
...         self.collector, self.attempt, self.n = collector, attempt, 0
...     def execute(self, tup): self.n += 1
...     def finish_batch(self): self.collector.emit([self.attempt, self.n])
...     def declare_output_fields(self, d): d.declare(Fields("id", "count"))
>>> Count().declared_streams()["default"].fields
Fields('id', 'count')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from squall.components.base import Component
from squall.errors import EmitError
from squall.transaction_kernel.attempt import TransactionAttempt

if TYPE_CHECKING:
    from squall.components.context import TopologyContext
    from squall.protocols import OutputCollectorLike as OutputCollector
    from squall.topology.tuple import Tuple


class BatchBolt(Component):
    """Processes the tuples of one batch; see the module documentation."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext,
                collector: BatchOutputCollector, attempt: TransactionAttempt) -> None:
        self.conf, self.context, self.collector, self.attempt = conf, context, collector, attempt

    def execute(self, tup: Tuple) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup)")

    def finish_batch(self) -> None:
        """Every tuple of the batch has been executed (commit phase for committers)."""


class Committer:
    """Marker (Storm's `ICommitter`): `finish_batch` runs in the commit phase, in txid order."""


class BatchOutputCollector:
    """Emits of a `BatchBolt`: unanchored (the batch, not the tuple, is what fails), counted per
    target task so downstream tasks know when they have the whole batch."""

    def __init__(self, output: OutputCollector, counts: dict[int, int],
                 attempt: TransactionAttempt, component: str) -> None:
        self._output = output
        self._counts = counts
        self._attempt = attempt
        self._component = component

    def _check(self, values: Sequence[Any], stream: str) -> None:
        if not values or values[0] != self._attempt:
            raise EmitError(
                f"the first value of every tuple of a transactional topology must be the "
                f"batch's TransactionAttempt ({self._attempt!r}); got {list(values)[:1]!r}",
                component=self._component, stream=stream)

    def emit(self, values: Sequence[Any], stream: str = "default") -> list[int]:
        self._check(values, stream)
        targets = self._output.emit(values, stream=stream)
        counts = self._counts
        for t in targets:
            counts[t] = counts.get(t, 0) + 1
        return targets

    def emit_direct(self, task_id: int, values: Sequence[Any],
                    stream: str = "default") -> list[int]:
        self._check(values, stream)
        targets = self._output.emit_direct(task_id, values, stream=stream)
        for t in targets:
            self._counts[t] = self._counts.get(t, 0) + 1
        return targets

    def report_error(self, error: BaseException) -> None:
        self._output.report_error(error)
