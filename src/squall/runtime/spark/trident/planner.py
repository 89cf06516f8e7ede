"""Which operations of a Trident plan run in Spark, and what their workers read and produce.

Pure decisions over a `Plan` (no Spark session, no pyspark, which a contract in `.importlinter`
holds it to): the paths from a spout to each aggregation or state query computed in Spark
(`spark_segments`), the fields each step passes on (`_needed`, `_live`), the typed fields after
an operation (`_types_after`), what a combiner's partial aggregation reads and the column type
of its partials (`_partial_reads`, `_partial_kind`), and whether Spark's JVM aggregates a
batch's built-ins exactly as the combiners would (`_jvm_builtins`); which `persistent_aggregate`s
are applied to their states' partitions in the Spark tasks (`applied_in_tasks`) and which of them
share a job (`state_jobs`), and which `state_query`s read in the tasks (`query_in_tasks`); from
them, the typed jobs a transaction launches (`spark_jobs`, of `trident.jobs`), which
`launch.Launcher` runs; `chain` runs the row operations in the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard, assert_never

from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident.jobs import (
    AggregateJob,
    PersistJob,
    QueryJob,
    SparkJob,
    StateJob,
    Tuning,
    WindowJob,
)
from squall.trident.operations import (
    BuiltinCombiner,
    CombinerAggregator,
    Count,
    Sum,
    opens_in_tasks,
)
from squall.trident.plan import (
    AggregateNode,
    Broadcast,
    Global,
    JoinNode,
    MergeNode,
    Node,
    PartitionBy,
    Persist,
    PersistNode,
    Plan,
    RepartitionNode,
    RowNode,
    RowOp,
    Scope,
    Shuffle,
    SpoutNode,
    StateQueryNode,
    WindowBy,
    WindowNode,
)
from squall.trident.state.partitioned import PartitionedMap

# An aggregation a Spark path may end with (`_spark_terminal`): a whole batch's or its groups'
# (`aggregate`, `group_by().aggregate`), a `persistent_aggregate`, an event-time window.
Terminal = AggregateNode | PersistNode | WindowNode


def spark_repartition(node: Node) -> bool:
    """A repartition Spark runs (`shuffle`, `partition_by`, `global`, `batch_global`; not
    `broadcast` or a custom grouping)."""
    return isinstance(node, RepartitionNode) \
        and isinstance(node.scheme, Shuffle | PartitionBy | Global)


def ending(path: Sequence[Node]) -> Terminal | StateQueryNode:
    """The aggregation or state query that ends a path of `spark_segments`."""
    last = path[-1]
    assert isinstance(last, AggregateNode | PersistNode | WindowNode | StateQueryNode), last
    return last


def terminal_op(terminal: Terminal) -> Any:
    """The combiner (or aggregator, updater) of an aggregation ending a Spark path."""
    return terminal.aggregation.op if isinstance(terminal, AggregateNode) else terminal.op


def terminal_input(terminal: Terminal) -> tuple[str, ...]:
    """The fields the combiner of an aggregation ending a Spark path reads."""
    return terminal.aggregation.input if isinstance(terminal, AggregateNode) else terminal.input


def spark_segments(plan: Plan, queries: Callable[[StateQueryNode], bool] = lambda node: False,
                   persists: Callable[[PersistNode], bool] = lambda node: False
                   ) -> tuple[dict[str, list[Node]], frozenset[str]]:
    """Each aggregation computed in Spark, each `state_query` for which `queries` is true
    (read in the tasks, `trident.state_query`) and each `partition_persist` for which
    `persists` is (updated in the tasks, `trident.persist`) -> its path from its spout (spout
    first, the aggregation, query or update last), and the operations inside those paths (the
    driver skips them).

    An operation runs in Spark only if every operation reading its output does too (its rows
    never reach the driver), so the paths are pruned until that holds."""
    inside: set[str] = set()
    terminals: set[str] = set()
    nodes = {n.cid: n for n in plan.nodes}
    for node in plan.nodes:
        if isinstance(node, SpoutNode):
            inside.add(node.cid)
            continue
        if len(node.parents) != 1 or node.parents[0] not in inside:
            continue
        if isinstance(node, RowNode) or spark_repartition(node):
            inside.add(node.cid)
        elif _spark_terminal(node) or (isinstance(node, StateQueryNode) and queries(node)) \
                or (isinstance(node, PersistNode) and node.persist is Persist.PARTITION
                    and persists(node)):
            terminals.add(node.cid)
    changed = True
    while changed:
        changed = False
        for cid in list(inside):
            kids = plan.children(cid)
            if not kids or any(k.cid not in inside and k.cid not in terminals for k in kids):
                inside.discard(cid)
                for k in kids:
                    terminals.discard(k.cid)
                changed = True
        for cid in list(terminals):
            if nodes[cid].parents[0] not in inside:
                terminals.discard(cid)
                changed = True
    paths: dict[str, list[Node]] = {}
    for cid in sorted(terminals):
        path = [nodes[cid]]
        while not isinstance(path[0], SpoutNode):
            path.insert(0, nodes[path[0].parents[0]])
        paths[cid] = path
    return paths, frozenset(inside)


def _spark_terminal(node: Node) -> bool:
    """An aggregation Spark can end a path with: a combiner (built-in: finished in the JVM;
    a user's: on the driver), or an event-time window with a built-in combiner (partials per
    window and key in the workers, by Arrow, finished on the driver)."""
    match node:
        case WindowNode():  # event time; count and processing-time windows: the driver's
            return isinstance(node.op, BuiltinCombiner) and node.by is WindowBy.EVENT
        case PersistNode():
            return node.persist is Persist.AGGREGATE and isinstance(node.op, CombinerAggregator)
        case AggregateNode():
            return node.scope is not Scope.PARTITION and not node.chained \
                and isinstance(node.aggregation.op, CombinerAggregator)
        case SpoutNode() | RepartitionNode() | RowNode() | StateQueryNode() | MergeNode() \
                | JoinNode():
            return False
        case _:
            assert_never(node)


def _needed(path: list[Node], at: Node) -> tuple[str, ...]:
    """The fields the operations from `at` on read (the rest need not leave the worker)."""
    i = path.index(at)
    need: list[str] = []
    for node in path[i:]:
        for f in _reads(node):
            if f not in need:
                need.append(f)
    parent_fields = path[i - 1].fields if not isinstance(at, RowNode) else at.fields
    # Row operations after this one, and a state query (its rows are whole rows), may read
    # any field.
    later_rows = any(isinstance(n, RowNode | StateQueryNode) for n in path[i:])
    if later_rows:
        return parent_fields  # row operations after this one may read any field
    return tuple(f for f in parent_fields if f in need)


def _reads(node: Node) -> tuple[str, ...]:
    """The fields an operation of a Spark path reads: its input, then its keys."""
    match node:
        case RowNode() | StateQueryNode():
            return node.input
        case RepartitionNode():
            return node.scheme.keys if isinstance(node.scheme, PartitionBy) else ()
        case AggregateNode():
            return node.keys if node.chained else (*node.aggregation.input, *node.keys)
        case PersistNode() | WindowNode():
            return (*node.input, *node.keys)
        case JoinNode():
            return (*node.left_keys, *node.right_keys)
        case SpoutNode() | MergeNode():
            return ()
        case _:
            assert_never(node)


def _live(nodes: Sequence[RowNode], out: Sequence[str]) -> list[frozenset[str]]:
    """For each row operation of a chain, the fields read after it (by a later operation, or
    as the chain's output `out`)."""
    live = set(out)
    after: list[frozenset[str]] = []
    for node in reversed(nodes):
        after.append(frozenset(live))
        reads = set(node.input)
        if node.row_op is RowOp.EACH:
            live = reads | (live - set(node.output))
        elif node.row_op in (RowOp.FILTER, RowOp.PEEK):
            live = reads | live
        else:  # project, map, flat_map: a new set of fields
            live = reads
    return after[::-1]


def _types_after(node: Node, types: cols.Types) -> dict[str, str]:
    """The typed fields after a row operation or repartition, from those before it: a field
    keeps its column type through the operations that pass it on unchanged; a batch
    function's declared outputs are typed; other new values are not."""
    if not isinstance(node, RowNode):
        return dict(types)
    match node.row_op:
        case RowOp.EACH:
            declared = getattr(node.op, "output_types", {})
            out = dict(types)
            for f in node.output:
                out.pop(f, None)
                if f in declared:
                    out[f] = cols.KIND[declared[f]]
            return out
        case RowOp.PROJECT:
            return {f: k for f, k in types.items() if f in node.fields}
        case RowOp.MAP | RowOp.FLAT_MAP:
            return {}
        case RowOp.FILTER | RowOp.PEEK:
            return dict(types)
        case _:
            assert_never(node.row_op)


def _partial_reads(terminal: Terminal | None) -> tuple[str, ...]:
    """The fields a combiner's partial aggregation reads: its keys, and its input unless it
    counts (a count reads no value)."""
    if terminal is None:
        return ()
    op = terminal_op(terminal)
    counts = isinstance(op, BuiltinCombiner) and op.sql == "count"
    window = (terminal.timestamp_field,) if isinstance(terminal, WindowNode) else ()
    return (*terminal.keys, *(() if counts else terminal_input(terminal)), *window)


def _partial_kind(terminal: Terminal, types: cols.Types) -> str | None:
    """The column type of a combiner's partials: a count is an int; a built-in sum, min or
    max has its input's type (when typed); a user's combiner is pickled."""
    op = terminal_op(terminal)
    if not isinstance(op, BuiltinCombiner):
        return None
    if op.sql == "count":
        return "i"
    kind = types.get(terminal_input(terminal)[0])
    return kind if kind in ("i", "d") or (kind == "s" and op.sql != "sum") else None


def _jvm_builtins(terminals: Sequence[Terminal], types: cols.Types) -> bool:
    """Whether Spark's JVM computes the aggregates of `terminals` exactly as the combiners
    would: `Count`s and `Sum`s of an integer field (a float sum's rounding depends on the
    order), keyed by string or integer fields."""
    keys = terminals[0].keys
    if any(types.get(k) not in ("s", "i") for k in keys):
        return False
    for t in terminals:
        op = type(terminal_op(t))
        if not (op is Count or (op is Sum and types.get(terminal_input(t)[0]) == "i")):
            return False
    return True


def unread_fields(plan: Plan, cid: str) -> frozenset[str]:
    """The fields of `cid`'s output that no operation of `plan` reads, neither after it nor
    after the operations that pass them on: a file spout's batch read on the driver need not
    make them (`FileBatch.rows`). A row operation reads its input (an `each`, a filter and a
    `peek` pass every field on; a projection and a map do not), a repartition by keys its
    keys, an aggregation or state update its input and keys, a window also its timestamp;
    anything else (a merge, a join, a state query, a custom grouping) every field. Only for a
    run that does not keep every operation's output (`capture`).

    >>> from squall.trident.plan import Persist, PersistNode, RowNode, RowOp, SpoutNode
    >>> spout = SpoutNode(cid="s", fields=("a", "b", "c", "d"), spout=None)
    >>> keep = RowNode(cid="f", parents=("s",), fields=spout.fields, row_op=RowOp.FILTER,
    ...                input=("a",))
    >>> pick = RowNode(cid="p", parents=("f",), fields=("b", "a"), row_op=RowOp.PROJECT,
    ...                input=("b", "a"))
    >>> out = PersistNode(cid="w", parents=("p",), fields=(), persist=Persist.PARTITION,
    ...                   state="x", factory=None, input=("b", "a"), op=None)
    >>> sorted(unread_fields(Plan((spout, keep, pick, out)), "s"))
    ['c', 'd']
    """
    live: dict[str, frozenset[str]] = {}
    for node in reversed(plan.nodes):
        need: set[str] = set()
        for kid in plan.children(node.cid):
            need |= _parent_reads(kid, node.fields, live.get(kid.cid, frozenset()))
        live[node.cid] = frozenset(need)
    return frozenset(plan.node(cid).fields) - live[cid]


def _parent_reads(node: Node, fields: tuple[str, ...], live: frozenset[str]) -> set[str]:
    """The fields of its parent's rows (`fields`) `node` reads or passes on to an operation
    that reads them (`live`: its own output's fields read after it)."""
    match node:
        case RowNode(row_op=RowOp.EACH):
            return set(node.input) | (live - set(node.output))
        case RowNode(row_op=RowOp.FILTER | RowOp.PEEK):
            return set(node.input) | live
        case RowNode():  # a projection, a map: a new row of the fields they read
            return set(node.input)
        case RepartitionNode(scheme=Shuffle() | Global() | Broadcast()):
            return set(live)
        case RepartitionNode(scheme=PartitionBy(keys=keys)):
            return set(keys) | live
        case PersistNode():
            return {*node.input, *node.keys}
        case AggregateNode():
            return {*node.keys, *(f for a in node.aggregations for f in a.input)}
        case WindowNode():
            return {*node.input, *node.keys,
                    *((node.timestamp_field,) if node.timestamp_field else ())}
        case _:
            return set(fields)


def query_in_tasks(node: StateQueryNode) -> bool:
    """Whether the `state_query` `node` can read its state in the Spark tasks
    (`trident.state_query`): a state partitioned by a factory whose partitions a task opens."""
    return hasattr(node.factory, "make_partition") and hasattr(node.factory, "make_partitioned")


def persist_in_tasks(node: PersistNode) -> bool:
    """Whether the `partition_persist` `node` can update its state in the Spark tasks
    (`trident.persist`): its factory makes a partition's state where the partition is
    (`TaskStateFactory`)."""
    return node.persist is Persist.PARTITION and opens_in_tasks(node.factory)


def applied_in_tasks(node: Node, plan: Plan, paths: Mapping[str, list[Node]],
                     states: Mapping[str, Any]) -> TypeGuard[PersistNode]:
    """Whether `node` is a `persistent_aggregate` whose partials Spark applies to its state's
    partitions in the tasks (`trident.state`): a keyed combiner's, into a partitioned state
    (`states`: the opened states by name) no other operation of the plan writes, and which every
    query of it reads before the update (in the tasks, in an earlier job: one of `paths`) or
    after it (reading the update's own stream, on the driver)."""
    if not isinstance(node, PersistNode) or node.persist is not Persist.AGGREGATE \
            or not node.keys:
        return False
    name = node.state
    others = [n for n in plan.nodes
              if isinstance(n, PersistNode | StateQueryNode | WindowNode)
              and n.state == name and n is not node]

    def read_in_turn(query: Node) -> bool:
        if not isinstance(query, StateQueryNode):
            return False
        return query.cid in paths or plan.descends(query.cid, node.cid)

    return isinstance(states.get(name), PartitionedMap) \
        and hasattr(node.factory, "make_partition") \
        and all(map(read_in_turn, others))


def state_jobs(paths: Mapping[str, list[Node]], applied: Sequence[str],
               states: Mapping[str, Any]) -> dict[str, list[str]]:
    """For each `persistent_aggregate` of `applied` (those applied in the tasks), the ones
    applied in the same Spark job, itself first: those of the same path before them, the same
    keys and states of as many partitions (one read of the input, one pass of its operations)."""

    def shape(cid: str) -> tuple[Any, ...]:
        path, node = paths[cid], paths[cid][-1]
        assert isinstance(node, PersistNode), cid
        return (tuple(n.cid for n in path[:-1]), node.keys, states[node.state].partitions)

    return {c: [c, *(o for o in applied if o != c and shape(o) == shape(c))] for c in applied}


def spark_jobs(plan: Plan, paths: Mapping[str, list[Node]], states: Mapping[str, Any],
               tuning: Tuning, capture: bool = False) -> tuple[SparkJob, ...]:
    """The Spark jobs of a transaction, in the order they run: one per path of `paths`
    (`spark_segments`, in their order), a `persistent_aggregate` applied in the tasks
    (`applied_in_tasks`; never with partial aggregation or the executors' state switched off)
    sharing its job with those `state_jobs` puts with it. `states`: the opened states by name;
    `capture`: every operation's rows go to the caller (a state job collects its new rows)."""
    in_tasks = [c for c, p in paths.items() if tuning.partial and tuning.in_executors
                and applied_in_tasks(p[-1], plan, paths, states)]
    together = state_jobs(paths, in_tasks, states)
    jobs: list[SparkJob] = []
    covered: set[str] = set()
    for cid, path in paths.items():
        if cid in covered:  # applied in the job of an earlier one
            continue
        terminal = ending(path)
        if cid in together:
            terminals = tuple(_persisted(paths[c]) for c in together[cid])
            covered.update(together[cid])
            jobs.append(StateJob(tuple(path), terminals, states[terminals[0].state].partitions,
                                 tuple(capture or bool(plan.children(t.cid))
                                       for t in terminals)))
        elif isinstance(terminal, PersistNode) and terminal.persist is Persist.PARTITION:
            jobs.append(PersistJob(tuple(path), terminal,
                                   capture or bool(plan.children(terminal.cid))))
        elif isinstance(terminal, StateQueryNode):
            jobs.append(QueryJob(tuple(path), terminal, states[terminal.state].partitions))
        elif isinstance(terminal, WindowNode):
            jobs.append(WindowJob(tuple(path), terminal))
        else:
            jobs.append(AggregateJob(tuple(path), terminal, tuning.partial,
                                     tuning.driver_combine))
    return tuple(jobs)


def _persisted(path: Sequence[Node]) -> PersistNode:
    node = path[-1]
    assert isinstance(node, PersistNode), node.cid
    return node
