"""Which operations of a Trident plan run in Spark, and what their workers read and produce.

Pure decisions over a `Plan` (no Spark session, no pyspark, which a contract in `.importlinter`
holds it to): the paths from a spout to each aggregation or state query computed in Spark
(`spark_segments`), the fields each step passes on (`_needed`, `_live`), the typed fields after
an operation (`_types_after`), what a combiner's partial aggregation reads and the column type
of its partials (`_partial_reads`, `_partial_kind`), and whether Spark's JVM aggregates a
batch's built-ins exactly as the combiners would (`_jvm_builtins`). `runner` builds the Spark
jobs from them; `chain` runs the row operations in the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from squall.runtime.spark.trident import columns as cols
from squall.trident.operations import BuiltinCombiner, CombinerAggregator, Count, Sum
from squall.trident.plan import Plan, PlanNode

ROW_OPS = frozenset({"each", "filter", "map", "flat_map", "peek", "project"})
REPARTITIONS = frozenset({"shuffle", "partition_by", "global", "batch_global"})
TERMINALS = frozenset({"persistent_aggregate", "group_aggregate", "aggregate"})


def spark_segments(plan: Plan, queries: Callable[[PlanNode], bool] = lambda node: False
                   ) -> tuple[dict[str, list[PlanNode]], frozenset[str]]:
    """Each aggregation computed in Spark, and each `state_query` for which `queries` is
    true (read in the tasks, `trident.state_query`) -> its path from its spout (spout first, the
    aggregation or query last), and the operations inside those paths (the driver skips them).

    An operation runs in Spark only if every operation reading its output does too (its rows
    never reach the driver), so the paths are pruned until that holds."""
    inside: set[str] = set()
    terminals: set[str] = set()
    for node in plan.nodes:
        if node.kind == "spout":
            inside.add(node.cid)
            continue
        if len(node.parents) != 1 or node.parents[0] not in inside:
            continue
        if node.kind in ROW_OPS or node.kind in REPARTITIONS:
            inside.add(node.cid)
        elif _spark_terminal(node) or (node.kind == "state_query" and queries(node)):
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
            if plan.node(cid).parents[0] not in inside:
                terminals.discard(cid)
                changed = True
    paths: dict[str, list[PlanNode]] = {}
    for cid in sorted(terminals):
        path = [plan.node(cid)]
        while path[0].kind != "spout":
            path.insert(0, plan.node(path[0].parents[0]))
        paths[cid] = path
    return paths, frozenset(inside)


def _spark_terminal(node: PlanNode) -> bool:
    """An aggregation Spark can end a path with: a combiner (built-in: finished in the JVM;
    a user's: on the driver), or an event-time window with a built-in combiner (partials per
    window and key in the workers, by Arrow, finished on the driver)."""
    op = node.args.get("op")
    if node.kind == "window":  # event time; count and processing-time windows: the driver's
        return isinstance(op, BuiltinCombiner) and node.args.get("by", "event") == "event"
    return node.kind in TERMINALS and isinstance(op, CombinerAggregator)


def _needed(path: list[PlanNode], at: PlanNode) -> tuple[str, ...]:
    """The fields the operations from `at` on read (the rest need not leave the worker)."""
    i = path.index(at)
    need: list[str] = []
    for node in path[i:]:
        for key in ("input", "keys"):
            for f in node.args.get(key, ()):
                if f not in need:
                    need.append(f)
    parent_fields = path[i - 1].fields if at.kind not in ROW_OPS else at.fields
    # Row operations after this one, and a state query (its rows are whole rows), may read
    # any field.
    later_rows = any(n.kind in ROW_OPS or n.kind == "state_query" for n in path[i:])
    if later_rows:
        return parent_fields  # row operations after this one may read any field
    return tuple(f for f in parent_fields if f in need)


def _live(nodes: Sequence[PlanNode], out: Sequence[str]) -> list[frozenset[str]]:
    """For each row operation of a chain, the fields read after it (by a later operation, or
    as the chain's output `out`)."""
    live = set(out)
    after: list[frozenset[str]] = []
    for node in reversed(nodes):
        after.append(frozenset(live))
        reads = set(node.args.get("input", ()))
        if node.kind == "each":
            live = reads | (live - set(node.args["output"]))
        elif node.kind in ("filter", "peek"):
            live = reads | live
        else:  # project, map, flat_map: a new set of fields
            live = reads
    return after[::-1]


def _types_after(node: PlanNode, types: cols.Types) -> dict[str, str]:
    """The typed fields after a row operation or repartition, from those before it: a field
    keeps its column type through the operations that pass it on unchanged; a batch
    function's declared outputs are typed; other new values are not."""
    if node.kind == "each":
        declared = getattr(node.args["op"], "output_types", {})
        out = dict(types)
        for f in node.args["output"]:
            out.pop(f, None)
            if f in declared:
                out[f] = cols.KIND[declared[f]]
        return out
    if node.kind == "project":
        return {f: k for f, k in types.items() if f in node.fields}
    if node.kind in ("map", "flat_map"):
        return {}
    return dict(types)


def _partial_reads(terminal: PlanNode | None) -> tuple[str, ...]:
    """The fields a combiner's partial aggregation reads: its keys, and its input unless it
    counts (a count reads no value)."""
    if terminal is None:
        return ()
    op = terminal.args["op"]
    counts = isinstance(op, BuiltinCombiner) and op.sql == "count"
    window = (terminal.args["timestamp_field"],) if terminal.kind == "window" else ()
    return (*terminal.args["keys"], *(() if counts else terminal.args["input"]), *window)


def _partial_kind(terminal: PlanNode, types: cols.Types) -> str | None:
    """The column type of a combiner's partials: a count is an int; a built-in sum, min or
    max has its input's type (when typed); a user's combiner is pickled."""
    op = terminal.args["op"]
    if not isinstance(op, BuiltinCombiner):
        return None
    if op.sql == "count":
        return "i"
    kind = types.get(terminal.args["input"][0])
    return kind if kind in ("i", "d") or (kind == "s" and op.sql != "sum") else None


def _jvm_builtins(terminals: Sequence[PlanNode], types: cols.Types) -> bool:
    """Whether Spark's JVM computes the aggregates of `terminals` exactly as the combiners
    would: `Count`s and `Sum`s of an integer field (a float sum's rounding depends on the
    order), keyed by string or integer fields."""
    keys = terminals[0].args["keys"]
    if any(types.get(k) not in ("s", "i") for k in keys):
        return False
    for t in terminals:
        op = type(t.args["op"])
        if not (op is Count or (op is Sum and types.get(t.args["input"][0]) == "i")):
            return False
    return True
