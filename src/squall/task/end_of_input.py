"""End of input: telling bolt tasks that every spout is exhausted.

A windowed bolt holds its input tuples un-acked while they are in a window, so with bounded input
the runners' completion check (every spout exhausted, no tuple tree pending) would wait for ever.
When every spout is exhausted the runners tell each bolt task, upstream components first (what a
bolt emits while flushing must reach downstream bolts before they are told), and the bolt task
passes it on to a windowed bolt, which fires its remaining windows and acks everything it holds.
A replay that makes a spout busy again re-arms the signal.

Local runner: `EndOfInput.due` is polled when the engine is idle. Spark: the spout reader plans one
system row per bolt task in the batch where all spouts are exhausted (in a topology with windows,
the first such batch that carries no input: a failure in the last input is replayed first); its
`src` is the largest task id, so it sorts after the task's other rows, and stages run in
topological order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from squall.topology.description import Topology
from squall.topology.graph import bolt_order

END_OF_INPUT_STREAM = "__end_of_input"
END_OF_INPUT_SRC = 2**31 - 1  # the largest int32: a task's rows are sorted by (src, seq)


class EndOfInput:
    """Whether bolts must be told that input ended: once per time all spouts become exhausted."""

    def __init__(self, topology: Topology, bolts: Iterable[Any]) -> None:
        rank = {cid: i for i, cid in enumerate(bolt_order(topology))}
        self.order = sorted(bolts, key=lambda b: (rank[b.component_id], b.task_id))
        self.sent = False

    def due(self, spouts: Iterable[Any]) -> bool:
        if not all(s.exhausted() for s in spouts):
            self.sent = False
            return False
        if self.sent:
            return False
        self.sent = True
        return True
