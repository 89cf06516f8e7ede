"""squall: Storm's programming model and guarantees, and Beam-style windowed operators, for Python.

>>> from squall import TopologyBuilder, Fields, Values, BasicBolt
>>> from squall.testing import complete_topology, MockedSources, FixedTupleSpout
>>> class Double(BasicBolt):
...     def execute(self, tup, collector): collector.emit(Values(tup["n"] * 2))
...     def declare_output_fields(self, d): d.declare(Fields("n2"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([], Fields("n")))
>>> _ = b.set_bolt("double", Double()).shuffle_grouping("numbers")
>>> complete_topology(b.create_topology(),
...     mocked_sources=MockedSources({"numbers": [[1], [2]]})).tuples("double")
[[2], [4]]
"""

from squall.builder import BoltDeclarer, SpoutDeclarer, TopologyBuilder
from squall.components.base import BasicBolt, Bolt, Component, Spout
from squall.components.context import TopologyContext
from squall.components.stateful import StatefulBolt
from squall.components.stateful_windowed import StatefulWindowedBolt
from squall.components.windowed import WindowedBolt
from squall.duration import Duration
from squall.errors import (
    BatchRetryError,
    ConfigError,
    DeadLetterError,
    EmitError,
    FailedException,
    InvalidTopologyError,
    NotPicklableError,
    ReliabilityError,
    SquallError,
    TransactionFailedError,
)
from squall.local_cluster import LocalCluster
from squall.reliability.retries import DEAD_LETTER, DEAD_LETTER_FIELDS
from squall.runners import run
from squall.state.base import KeyValueState, State, StateError
from squall.task.collectors import (
    BasicOutputCollector,
    OutputCollector,
    SpoutOutputCollector,
)
from squall.topology.config import Config
from squall.topology.declarer import OutputFieldsDeclarer
from squall.topology.description import Topology
from squall.topology.fields import Fields, Values
from squall.topology.groupings import CustomStreamGrouping
from squall.topology.tuple import Tuple, is_tick_tuple
from squall.tuple_windows import Count, TupleWindow

__version__ = "0.1.0"

__all__ = [
    "DEAD_LETTER",
    "DEAD_LETTER_FIELDS",
    "BasicBolt",
    "BasicOutputCollector",
    "BatchRetryError",
    "Bolt",
    "BoltDeclarer",
    "Component",
    "Config",
    "ConfigError",
    "Count",
    "CustomStreamGrouping",
    "DeadLetterError",
    "Duration",
    "EmitError",
    "FailedException",
    "Fields",
    "InvalidTopologyError",
    "KeyValueState",
    "LocalCluster",
    "NotPicklableError",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "ReliabilityError",
    "Spout",
    "SpoutDeclarer",
    "SpoutOutputCollector",
    "SquallError",
    "State",
    "StateError",
    "StatefulBolt",
    "StatefulWindowedBolt",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "TransactionFailedError",
    "Tuple",
    "TupleWindow",
    "Values",
    "WindowedBolt",
    "is_tick_tuple",
    "run",
]
