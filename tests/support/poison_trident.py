"""A Trident topology whose first batch fails on every attempt, for the stop tests (a file TARGET
of `squall run`).

`orders` (one batch of three orders, one of them with its price as the string "12.50") ->
`total` (multiplies the price by 1.2: a TypeError on the string) -> per-item sums in a durable
transactional map state. With Storm's default (no `squall.trident.max.attempts`) the batch is
tried again for ever, so only a stop or a limit ends the run.
"""

from __future__ import annotations

from squall.trident import FixedBatchSpout, Function, Sum, TridentTopology
from squall.trident.state import DurableMapState, StateType


class Total(Function):
    def execute(self, tup, collector):
        collector.emit([tup["price"] * 1.2])


def build():
    t = TridentTopology()
    spout = FixedBatchSpout(["item", "price"], 3, ["a", 1.0], ["b", "12.50"], ["c", 3.0])
    (t.new_stream("orders", spout)
     .each(["price"], Total(), ["total"]).name("total")
     .group_by(["item"])
     .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), ["total"], Sum(),
                           ["sum"]).name("sums"))
    return t.build()
