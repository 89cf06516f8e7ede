"""The Trident plan: one typed node per stream operation, stored in the topology description.

`TridentTopology.build` turns the stream graph into an ordinary `Topology` whose components are
the plan's nodes (spouts: `roles.TRIDENT_SPOUT`, operations: `roles.TRIDENT`); each component's
payload is its node. `trident_plan(topology)` reads the plan back, so a Trident topology
travels and is fingerprinted like any other, and `squall visualize` draws its operations.

A node is one frozen dataclass per family, after Storm's planner (`SpoutNode`, `PartitionNode`,
`ProcessorNode` and its processors), with the fields every node has (`PlanNode`: component id,
parent ids, output fields, partitions, creation order):

- `SpoutNode` (`new_stream`): the spout;
- `RepartitionNode` (`shuffle`, `partition_by`, `broadcast`, `global_`, `batch_global`,
  `partition`): its `Scheme`;
- `RowNode` (`each`, `filter`, `map`, `flat_map`, `peek`, `project`): its `RowOp`, input and
  output fields, the function;
- `AggregateNode` (`partition_aggregate`, `aggregate` and its sugar `min_by`/`max_by`,
  `group_by().aggregate`, `chained_agg`): its `Scope`, keys, one `Aggregation` or a chain;
- `PersistNode` (`persistent_aggregate`, `partition_persist`): its `Persist` mode, the state's
  name and factory, keys, input fields, the aggregator or updater;
- `StateQueryNode` (`state_query`): the state's name and factory, the query function, the
  operation of this topology that writes the state;
- `WindowNode` (the window operations): `WindowBy`, size, slide, lag, timestamp field, keys,
  the combiner, the state;
- `MergeNode` (`merge`); `JoinNode` (`join`): both sides' keys, the `JoinType`.

Runners dispatch on the family with `match ... case _: assert_never(node)` over `Node`, so mypy
names an executor that forgot one. How a node keeps or sets partitions is its own:
`keeps_partitioning` (a row operation or state query runs per partition of its parent),
`single_partition` (a batch aggregate or a global repartition has one).

>>> n = RowNode(cid="split", parents=("spout",), fields=("sentence", "word"), parallelism=2,
...             row_op=RowOp.EACH, input=("sentence",), output=("word",), op=None)
>>> n.keeps_partitioning, n.single_partition, n.label
(True, False, 'each')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, assert_never

from squall.errors import SquallError
from squall.topology import roles
from squall.topology.description import Topology

# The plan's format version, kept with a Trident checkpoint's progress (`squall.trident.
# coordinator`): a checkpoint written under another format is refused, not read by a plan that
# may mean something else by it. 1: untyped nodes (a kind string and a dict of arguments);
# 2: one typed node per family.
PLAN_FORMAT = 2


class PlanFormatError(SquallError):
    """A Trident checkpoint was written under another plan format (`PLAN_FORMAT`)."""


def check_plan_format(recorded: int | None, where: str) -> None:
    """Refuse the checkpoint `where` whose progress was recorded under plan format `recorded`
    (None: before formats were recorded, format 1) unless it is this squall's.

    >>> import textwrap
    >>> check_plan_format(PLAN_FORMAT, "/ckpt/trident/trident-local")
    >>> try:
    ...     check_plan_format(None, "/ckpt/trident/trident-local")
    ... except PlanFormatError as exc:
    ...     print(textwrap.fill(str(exc), 90))
    Trident checkpoint /ckpt/trident/trident-local was written by an older squall (plan format
    1, this squall's is 2) and cannot be resumed by this one; use a new checkpoint location,
    or finish that run with the squall that wrote it
    """
    found = 1 if recorded is None else recorded
    if found == PLAN_FORMAT:
        return
    age = "an older" if found < PLAN_FORMAT else "a newer"
    raise PlanFormatError(
        f"Trident checkpoint {where} was written by {age} squall (plan format {found}, this "
        f"squall's is {PLAN_FORMAT}) and cannot be resumed by this one; use a new checkpoint "
        "location, or finish that run with the squall that wrote it")


@dataclass(frozen=True, kw_only=True)
class PlanNode:
    """What every node has: its component id, its parents' component ids, its output fields,
    its number of partitions, and its creation order (ties in plan order); the defaults are a
    node's while its topology is being built, until `TridentTopology.build` sets them. Plan
    nodes travel pickled (the topology's payloads, Spark's workers): module-level frozen
    dataclasses."""

    cid: str = ""
    parents: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    parallelism: int = 1
    order: int = 0

    # Runs on each partition of its (one) parent: keeps its partitioning and partition count.
    keeps_partitioning: ClassVar[bool] = False

    @property
    def single_partition(self) -> bool:
        """Its output is one partition whatever the hint (a batch aggregate, `global_`)."""
        return False

    @property
    def label(self) -> str:
        """The Trident operation that made it ('each', 'partition_by', ...): the middle of its
        default component id `b-<order>-<label>`."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class SpoutNode(PlanNode):
    """A stream's source (`new_stream`): its component id is the stream's txid."""

    spout: Any

    @property
    def label(self) -> str:
        return "spout"

# ---- repartitioning --------------------------------------------------------------------------

@dataclass(frozen=True)
class Shuffle:
    """Round robin over the partitions."""

    label: ClassVar[str] = "shuffle"


@dataclass(frozen=True)
class PartitionBy:
    """Equal `keys` to the same partition, by their hash."""

    keys: tuple[str, ...]
    label: ClassVar[str] = "partition_by"


@dataclass(frozen=True)
class Broadcast:
    """Every tuple to every partition."""

    label: ClassVar[str] = "broadcast"


@dataclass(frozen=True)
class Global:
    """Every tuple to one partition (`batch_global`: each batch's; one batch is one micro-batch
    here, so the two are the same)."""

    per_batch: bool = False

    @property
    def label(self) -> str:
        return "batch_global" if self.per_batch else "global"


@dataclass(frozen=True)
class CustomPartition:
    """A user's `CustomStreamGrouping` chooses (`partition`)."""

    grouping: Any
    label: ClassVar[str] = "partition"


Scheme = Shuffle | PartitionBy | Broadcast | Global | CustomPartition


@dataclass(frozen=True, kw_only=True)
class RepartitionNode(PlanNode):
    """Its parent's tuples placed in its partitions by `scheme` (Storm's `PartitionNode`)."""

    scheme: Scheme

    @property
    def single_partition(self) -> bool:
        return isinstance(self.scheme, Global)

    @property
    def label(self) -> str:
        return self.scheme.label

# ---- row operations --------------------------------------------------------------------------

class RowOp(StrEnum):
    """A row operation (the value is the Trident operation's name)."""

    EACH = "each"  # a Function's or BatchFunction's emitted values appended to the input tuple
    FILTER = "filter"
    MAP = "map"
    FLAT_MAP = "flat_map"
    PEEK = "peek"
    PROJECT = "project"


@dataclass(frozen=True, kw_only=True)
class RowNode(PlanNode):
    """A row operation: `op` (None for `project`) reads each tuple's `input` fields; `each`,
    `map` and `flat_map` emit `output` fields."""

    row_op: RowOp
    input: tuple[str, ...]
    output: tuple[str, ...] = ()
    op: Any = None

    keeps_partitioning: ClassVar[bool] = True

    @property
    def label(self) -> str:
        return self.row_op.value

# ---- aggregations ----------------------------------------------------------------------------

class Scope(StrEnum):
    """What an aggregation aggregates."""

    PARTITION = "partition"  # each partition of each batch (`partition_aggregate`)
    BATCH = "batch"  # each whole batch (`aggregate`); emits on an empty batch too
    GROUP = "group"  # each group of equal keys of each batch (`group_by().aggregate`)


@dataclass(frozen=True)
class Aggregation:
    """One aggregator: the fields it reads, the aggregator, the fields it emits."""

    input: tuple[str, ...]
    op: Any
    output: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class AggregateNode(PlanNode):
    """An aggregation over its `scope`, emitting `keys` (if any) and the aggregators' values.
    `chained` (`chained_agg`): several aggregations of the same groups, every combination of
    their emitted tuples per group; otherwise exactly one."""

    scope: Scope
    keys: tuple[str, ...] = ()
    aggregations: tuple[Aggregation, ...]
    chained: bool = False

    @property
    def single_partition(self) -> bool:
        return self.scope is Scope.BATCH and not self.chained

    @property
    def aggregation(self) -> Aggregation:
        """The aggregation of a node that is not chained."""
        (one,) = self.aggregations
        return one

    @property
    def label(self) -> str:
        if self.chained:
            return "chained_agg"
        match self.scope:
            case Scope.PARTITION:
                return "partition_aggregate"
            case Scope.BATCH:
                return "aggregate"
            case Scope.GROUP:
                return "group_aggregate"
            case _:
                assert_never(self.scope)

# ---- state -----------------------------------------------------------------------------------

class Persist(StrEnum):
    """How a node writes its state (the value is the Trident operation's name)."""

    AGGREGATE = "persistent_aggregate"  # per group, an aggregator folded into a map state
    PARTITION = "partition_persist"  # each partition's tuples handed to a StateUpdater


@dataclass(frozen=True, kw_only=True)
class PersistNode(PlanNode):
    """Writes state `state` (made by `factory`) with `op`, an aggregator per group of `keys`
    (`Persist.AGGREGATE`) or a `StateUpdater` per partition (`Persist.PARTITION`); its output
    is the updated `(keys..., value)` rows, or what the updater emits."""

    persist: Persist
    state: str
    factory: Any
    input: tuple[str, ...]
    op: Any
    output: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.persist.value

@dataclass(frozen=True, kw_only=True)
class StateQueryNode(PlanNode):
    """Reads state `state` for each tuple's `input` fields with the query function `op`,
    appending its `output`. `writer`: the operation of this topology that updates the state
    (the query runs before it in a batch unless it reads its stream), if any."""

    state: str
    factory: Any
    input: tuple[str, ...]
    op: Any
    output: tuple[str, ...]
    writer: str | None = None

    keeps_partitioning: ClassVar[bool] = True

    @property
    def label(self) -> str:
        return "state_query"

class WindowBy(StrEnum):
    """What places a tuple in its windows."""

    EVENT = "event"  # its timestamp field (milliseconds)
    PROCESSING = "processing"  # its transaction's time
    COUNT = "count"  # its position among its group's tuples


@dataclass(frozen=True, kw_only=True)
class WindowNode(PlanNode):
    """Windows of `size` starting every `slide` (milliseconds, or tuples when counting), per
    group of `keys`, combined by `op` (a `CombinerAggregator`) in state `state`; emits
    `(keys..., window_start, window_end, output...)` as windows fire."""

    by: WindowBy
    size: int
    slide: int
    lag: int = 0
    timestamp_field: str | None = None
    keys: tuple[str, ...] = ()
    input: tuple[str, ...]
    op: Any
    output: tuple[str, ...]
    state: str
    factory: Any

    @property
    def label(self) -> str:
        return "window"

# ---- several streams -------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class MergeNode(PlanNode):
    """Every tuple of its parents' batches."""

    @property
    def label(self) -> str:
        return "merge"


class JoinType(StrEnum):
    INNER = "inner"
    LEFT = "left"  # a left tuple without a match: None for the right's fields
    OUTER = "outer"  # either side without a match: None for the other's fields


@dataclass(frozen=True, kw_only=True)
class JoinNode(PlanNode):
    """Joins the same batch of its two parents on `left_keys` = `right_keys`."""

    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    join_type: JoinType = JoinType.INNER

    @property
    def label(self) -> str:
        return "join"

# Every operation that is not a spout, and every node: what `match` dispatches over.
Operation = (RepartitionNode | RowNode | AggregateNode | PersistNode | StateQueryNode
             | WindowNode | MergeNode | JoinNode)
Node = SpoutNode | Operation


def user_op(node: Node) -> Any:
    """The user's object that runs `node` (a spout, function, filter, aggregator, updater, query
    function or combiner), or None (repartitions but a custom one's grouping, `project`,
    `chained_agg`'s several, `merge`, `join`)."""
    match node:
        case SpoutNode():
            return node.spout
        case RowNode() | PersistNode() | StateQueryNode() | WindowNode():
            return node.op
        case AggregateNode():
            return None if node.chained else node.aggregation.op
        case RepartitionNode() | MergeNode() | JoinNode():
            return None
        case _:
            assert_never(node)


@dataclass(frozen=True)
class Plan:
    """The nodes in topological order (parents first), spouts first."""

    nodes: tuple[Node, ...]

    def node(self, cid: str) -> Node:
        for n in self.nodes:
            if n.cid == cid:
                return n
        raise KeyError(cid)

    @property
    def spouts(self) -> list[SpoutNode]:
        return [n for n in self.nodes if isinstance(n, SpoutNode)]

    def descends(self, cid: str, ancestor: str) -> bool:
        """Whether operation `cid` reads, through its parents, the output of `ancestor`."""
        return _descends({n.cid: n for n in self.nodes}, cid, ancestor)

    def children(self, cid: str) -> list[Node]:
        return [n for n in self.nodes if cid in n.parents]

    def states(self) -> dict[str, Any]:
        """State name -> factory, for every state the plan writes or reads."""
        out: dict[str, Any] = {}
        for n in self.nodes:
            match n:
                case PersistNode() | StateQueryNode() | WindowNode():
                    out[n.state] = n.factory
        return out


def is_trident(topology: Topology) -> bool:
    return any(s.role == roles.TRIDENT_SPOUT for s in topology.components.values())


def trident_plan(topology: Topology) -> Plan:
    """The plan stored in `topology` (built by `TridentTopology.build`)."""
    nodes: dict[str, Node] = {}
    for cid, spec in topology.components.items():
        if spec.role in (roles.TRIDENT, roles.TRIDENT_SPOUT):
            node = spec.new_instance()
            if not isinstance(node, Node):  # e.g. an untyped node pickled under plan format 1
                raise PlanFormatError(
                    f"component {cid!r} holds a Trident plan node of another plan format "
                    f"({type(node).__name__}); build the topology again with this squall",
                    component=cid)
            nodes[cid] = node
    # Kahn's algorithm in creation order, with one extra rule: a state_query of a state this
    # topology updates runs before the update, unless it reads the update's own stream
    # (execution.py: a query sees the state as of the previous batch).
    after: dict[str, set[str]] = {cid: set(n.parents) for cid, n in nodes.items()}
    for cid, n in nodes.items():
        if isinstance(n, StateQueryNode) and n.writer in nodes \
                and not _descends(nodes, cid, n.writer):
            after[n.writer].add(cid)
    order: list[Node] = []
    ready = sorted((c for c in nodes if not after[c]), key=lambda c: nodes[c].order)
    while ready:
        cid = ready.pop(0)
        order.append(nodes[cid])
        for other, deps in after.items():
            if cid in deps:
                deps.discard(cid)
                if not deps:
                    ready.append(other)
        ready.sort(key=lambda c: nodes[c].order)
    return Plan(tuple(order))


def _descends(nodes: Mapping[str, PlanNode], cid: str, ancestor: str) -> bool:
    stack = list(nodes[cid].parents)
    while stack:
        p = stack.pop()
        if p == ancestor:
            return True
        stack.extend(nodes[p].parents)
    return False
