"""`StatefulBolt`: a bolt whose state is checkpointed (Storm's `IStatefulBolt`).

The framework creates the state from `topology.state.provider` (namespace `<component>-<task>`)
and hands it to `init_state` before any tuple reaches `execute`. On the local runner the state is
checkpointed by Storm's protocol: acks are held back until the checkpoint that covers them
commits, and failed if it rolls back. On Spark every micro-batch is a checkpoint whose commit is
the batch's commit. In a stateful topology every bolt must emit anchored tuples.

>>> from squall import Fields, TopologyBuilder, Values
>>> from squall.testing import FixedTupleSpout, complete_topology
>>> class WordCount(StatefulBolt):
...     def init_state(self, state): self.counts = state
...     def execute(self, tup):
...         n = self.counts.get(tup["word"], 0) + 1
...         self.counts.put(tup["word"], n)
...         self.collector.emit(Values(tup["word"], n), anchors=tup)
...         self.collector.ack(tup)
...     def declare_output_fields(self, d): d.declare(Fields("word", "count"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("words", FixedTupleSpout([["cow"], ["dog"], ["cow"]], Fields("word")))
>>> _ = b.set_bolt("count", WordCount()).fields_grouping("words", Fields("word"))
>>> result = complete_topology(b.create_topology())
>>> result.tuples("count"), sorted(result.acked("words"))
([['cow', 1], ['dog', 1], ['cow', 2]], [0, 1, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from squall.components.base import Bolt
from squall.errors import EmitError
from squall.topology import roles
from squall.topology.declarer import DEFAULT_STREAM
from squall.topology.tuple import Tuple


class StatefulBolt(Bolt):
    """Implement `init_state(state)` and `execute(tup)`; the hooks are optional."""

    role = roles.STATEFUL

    def init_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement init_state(state)")

    def pre_prepare(self, txid: int) -> None:
        """Called before the state is prepared for transaction `txid`."""

    def pre_commit(self, txid: int) -> None:
        """Called before transaction `txid` of the state is committed."""

    def pre_rollback(self) -> None:
        """Called before the state is rolled back to its last commit."""


class StatefulOutputCollector:
    """What bolts of a stateful topology emit with (Storm's `AnchoringOutputCollector` and
    `AckTrackingOutputCollector`): unanchored emits are refused, and with a `held` list acks
    are queued there until the checkpoint commits (local runner)."""

    def __init__(self, out: Any, held: list[Tuple] | None, anchored: bool = True) -> None:
        self._out = out  # the task's OutputCollector: pickles as a reference to it
        self._held = held
        self._anchored = anchored

    def _check(self, anchors: Any, stream: str) -> None:
        if self._anchored and (anchors is None or (not isinstance(anchors, Tuple)
                                                   and len(anchors) == 0)):
            raise EmitError("Bolts in a stateful topology must emit anchored tuples",
                            component=self._out._component, stream=stream)

    def emit(self, values: Sequence[Any], anchors: Tuple | Sequence[Tuple] | None = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        self._check(anchors, stream)
        return self._out.emit(values, anchors, stream)

    def emit_direct(self, task_id: int, values: Sequence[Any],
                    anchors: Tuple | Sequence[Tuple] | None = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        self._check(anchors, stream)
        return self._out.emit_direct(task_id, values, anchors, stream)

    def ack(self, tup: Tuple) -> None:
        if self._held is None:
            self._out.ack(tup)
        else:
            self._held.append(tup)

    def fail(self, tup: Tuple) -> None:
        self._out.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        self._out.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        self._out.report_error(error)
