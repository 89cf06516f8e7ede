"""Testing topologies: run to completion on simulated time and look at what was emitted.

>>> from squall import TopologyBuilder, BasicBolt, Fields, Values
>>> class Split(BasicBolt):
...     def execute(self, tup, collector):
...         for w in tup[0].split():
...             collector.emit(Values(w))
...     def declare_output_fields(self, d): d.declare(Fields("word"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("sentences", FixedTupleSpout([], Fields("sentence")))
>>> _ = b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
>>> result = complete_topology(
...     b.create_topology(),
...     mocked_sources=MockedSources({"sentences": [["a b"], ["b c"]]}))
>>> sorted(result.tuples("split"))
[['a'], ['b'], ['b'], ['c']]
>>> result.acked("sentences")
[0, 1]
"""

from squall.testing.complete import (
    CompleteTopologyResult,
    CompleteTopologyTimeout,
    MockedSources,
    complete_topology,
)
from squall.testing.fixed import FixedTupleSpout
from squall.testing.time import current_clock, simulated_time

__all__ = [
    "CompleteTopologyResult",
    "CompleteTopologyTimeout",
    "FixedTupleSpout",
    "MockedSources",
    "complete_topology",
    "current_clock",
    "simulated_time",
]
