"""Trident: Storm's batch API with exactly-once state, run batch by batch on both runners.

`TridentTopology` builds streams of batches; `build()` gives an ordinary `Topology` that
`squall.run`, `squall run` and `squall.testing` accept. Design and measurements:
docs/design/trident.md.
"""

from squall.trident.operations import (
    ROW,
    Aggregator,
    BatchFunction,
    CombinerAggregator,
    Consumer,
    Count,
    Filter,
    FilterNull,
    First,
    FlatMapFunction,
    Function,
    MapFunction,
    MapGet,
    MapPut,
    Max,
    Min,
    Operation,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
    Sum,
    TaskStateFactory,
    TridentCollector,
)
from squall.trident.spouts import BatchSpout, FileBatchSpout, FixedBatchSpout
from squall.trident.stream import GroupedStream, Stream, TridentState, TridentTopology
from squall.trident.tuple import TridentTuple

__all__ = [
    "ROW", "Aggregator", "BatchFunction", "BatchSpout", "CombinerAggregator", "Consumer", "Count",
    "FileBatchSpout", "Filter", "FilterNull", "First", "FixedBatchSpout", "FlatMapFunction",
    "Function", "GroupedStream", "MapFunction", "MapGet", "MapPut", "Max", "Min", "Operation",
    "QueryFunction", "ReducerAggregator", "StateUpdater", "Stream", "Sum", "TaskStateFactory",
    "TridentCollector", "TridentState", "TridentTopology", "TridentTuple",
]
