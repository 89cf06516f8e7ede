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

from typing import Any

from squall.components.base import Bolt
from squall.topology import roles


class StatefulBolt(Bolt):
    """Implement `init_state(state)` and `execute(tup)`; the hooks are optional.

    The state handed to `init_state` is the bolt's to keep; the framework holds its own
    reference (and whether a transaction is prepared) in the task's checkpointing
    (squall.task.checkpointing), not on the bolt.
    """

    role = roles.STATEFUL

    def init_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement init_state(state)")

    def pre_prepare(self, txid: int) -> None:
        """Called before the state is prepared for transaction `txid`."""

    def pre_commit(self, txid: int) -> None:
        """Called before transaction `txid` of the state is committed."""

    def pre_rollback(self) -> None:
        """Called before the state is rolled back to its last commit."""
