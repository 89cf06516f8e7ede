"""`TridentSparkRunner`: a transaction per micro-batch, its Spark paths run as DataFrame jobs.

Per transaction (`_batch`) the runner asks the coordinator for each spout's batch, runs each
Spark path of the plan (`planner.spark_segments`) as a job over the batch as a DataFrame
(`_spark_path`): the path's row operations in the workers (`chain`), its aggregation's partials
combined (`combine`), applied to a partitioned state in the tasks holding it (`trident.state`)
or a state query read there (`trident.state_query`). The rest of the plan runs on the driver
through the local runner's executor, and the transaction commits. How a transaction runs, step
by step: the package documentation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeGuard, assert_never

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from squall.errors import SquallError, TransactionFailedError
from squall.metrics.snapshot import BatchMetrics
from squall.protocols import Progress
from squall.redis_clients import wait_until_reachable
from squall.results import Captures, ComponentStats, ErrorRecord, RunResult, rows_by_first_task
from squall.runtime.checkpoint_location import prepare_location
from squall.runtime.gc_pause import gc_paused
from squall.runtime.lifecycle import Controls, Lifecycle
from squall.runtime.reporting import Reporting
from squall.runtime.run_config import RunConfig, resolve
from squall.runtime.spark.fingerprint import check_fingerprint
from squall.runtime.spark.query import TICKS, batch_metrics, drive_query
from squall.runtime.spark.session import get_session
from squall.runtime.spark.shipping import ship_by_value
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import state as ts
from squall.runtime.spark.trident import state_query as tq
from squall.runtime.spark.trident import windows as tw
from squall.runtime.spark.trident.chain import _Chain, _CountsParam, _StateChain
from squall.runtime.spark.trident.combine import (
    _combine_here,
    _finish,
    _jvm_aggregates,
    _output_rows,
    _present,
)
from squall.runtime.spark.trident.failures import worker_error
from squall.runtime.spark.trident.files import _read_files
from squall.runtime.spark.trident.planner import (
    Terminal,
    _jvm_builtins,
    _needed,
    _partial_kind,
    _partial_reads,
    _types_after,
    applied_in_tasks,
    ending,
    query_in_tasks,
    spark_segments,
    state_jobs,
    terminal_input,
    terminal_op,
)
from squall.topology.description import Topology
from squall.transaction_kernel.progress_store import STORE
from squall.trident.coordinator import (
    MAX_ATTEMPTS,
    BatchCoordinator,
    TransactionAbandoned,
    attempt_transaction,
)
from squall.trident.execution import (
    BatchExecutor,
    Parts,
    partition_rows,
    split_by_key,
)
from squall.trident.operations import BuiltinCombiner
from squall.trident.plan import (
    AggregateNode,
    Broadcast,
    CustomPartition,
    Global,
    JoinNode,
    MergeNode,
    Node,
    PartitionBy,
    PersistNode,
    RepartitionNode,
    RowNode,
    Shuffle,
    SpoutNode,
    StateQueryNode,
    WindowNode,
    trident_plan,
)
from squall.trident.spouts import FileBatch, FileBatchSpout
from squall.trident.stats import TridentStats

log = logging.getLogger("squall")

# Combine in the Python worker before the shuffle (default true); false sends every row to the
# aggregation (for measuring what the partial aggregation gives).
PARTIAL = "squall.trident.spark.partial.aggregation"
# false: a persistent_aggregate's aggregates go to the driver, which applies them (for measuring).
IN_EXECUTORS = "squall.trident.spark.state.in.executors"
# Up to this many partitions' typed partials of a built-in combiner are combined on the driver
# by Arrow (W1: 0.3 s less than Spark's shuffle and JVM aggregation); more go through Spark.
DRIVER_COMBINE = 16


class TridentSparkRunner(Controls, Reporting):
    """Runs a Trident topology on Spark (see the package documentation)."""

    runner_name = "spark"

    def __init__(self, topology: Topology, conf: Mapping[str, Any] | RunConfig | None = None, *,
                 master: str | None = None, checkpoint_location: str | None = None,
                 session: Any = None, capture: bool = False) -> None:
        self.topology = topology
        self.plan = trident_plan(topology)
        self.dir = prepare_location(checkpoint_location or
                                    tempfile.mkdtemp(prefix="squall-trident-"))
        check_fingerprint(self.dir, topology)
        config = resolve(topology, conf, runner="spark").with_defaults(
            {STORE: {"dir": os.path.join(self.dir, "trident")}})
        self.user_conf, self.conf = config.user, config.effective
        for node in self.plan.nodes:  # user classes from scripts travel by value
            for value in _user_objects(node):
                ship_by_value(value)
        self.coordinator = BatchCoordinator(self.plan, self.user_conf, "spark")
        self.spark = session or get_session(master, self.user_conf)
        # Driver batches staged as files Spark reads (`_dataframe`), in local mode only.
        self._staging: str | None = os.path.join(self.dir, "trident", "staged") \
            if str(self.spark.sparkContext.master).startswith("local") else None
        self._staged: list[str] = []
        self._stage_seq = 0
        if self._staging is not None:  # a killed run's leftovers
            shutil.rmtree(self._staging, ignore_errors=True)
        self.partial = str(self.conf.get(PARTIAL, True)).lower() not in ("false", "0")
        self._jobs: dict[str, list[str]] | None = None
        self.in_executors = str(self.conf.get(IN_EXECUTORS, True)).lower() not in ("false", "0")
        # State queries read in the tasks first: a query sees its state before the batch's
        # updates (`squall.trident.plan`), and those run in later jobs.
        paths, self.inside = spark_segments(self.plan, self._query_in_tasks)
        self.paths = dict(sorted(paths.items(),
                                 key=lambda p: not isinstance(p[1][-1], StateQueryNode)))
        self.executor: BatchExecutor | None = None
        self.stats = TridentStats(self.plan)
        self._stats_lock = threading.Lock()
        self.errors: list[ErrorRecord] = []
        self.capture = capture
        self.outputs: dict[str, list[tuple[Any, ...]]] = {n.cid: [] for n in self.plan.nodes}
        self.committed: list[int] = []
        self.failed_attempts = 0
        self.batch_seconds: list[float] = []
        self._counts: list[Any] = []  # this transaction's accumulators, one per Spark path
        self.spark_sizes: dict[str, int] = {}
        # Where the transactions' time went on the driver (seconds, summed over batches): the
        # spouts' batches, the Spark jobs (input DataFrame included), the driver's share of
        # the plan (state updates included), the commit record.
        self.timing = dict.fromkeys(("emit", "spark", "driver", "commit"), 0.0)
        self.query: Any = None
        self.stopping = False
        self.in_transaction = False  # a transaction is being attempted (a stop waits for it)
        self.failure: SquallError | None = None
        self.elapsed_ms = 0
        self.lifecycle = Lifecycle()  # stop requests; spouts cannot be deactivated
        self.exhausted = False

    # ---- one micro-batch = one transaction ------------------------------------------------------
    def _batch(self, df: Any, batch_id: int) -> None:
        if self.exhausted or self.stopping or self.lifecycle.stop_requested:
            return  # a tick after the bounded input ended, or during the stop: no transaction
        self.in_transaction = True
        try:
            self._transaction(batch_id)
        except TransactionAbandoned:
            # A stop came while it failed: not tried again, nothing more is started, and the
            # stop ends now (a restart replays the transaction).
            self.stopping = True
            self.lifecycle.abandon()
        finally:
            self.in_transaction = False

    def _transaction(self, batch_id: int) -> None:
        # The coordinator, not Spark's batch id, numbers the transactions: a batch Spark runs
        # again after a crash replays the transaction the coordinator has not committed, and a
        # tick that ran no transaction leaves no gap.
        txid = self.coordinator.next_txid
        started = time.perf_counter()
        max_attempts = self.conf.get(MAX_ATTEMPTS)

        def emit(attempt: int) -> dict[str, Any]:
            t_emit = time.perf_counter()
            batches = self.coordinator.emit(txid, lazy=True)
            self.timing["emit"] += time.perf_counter() - t_emit
            if attempt == 1:  # its files are read again on a retry: told once
                with self._stats_lock:
                    self.stats.malformed(self.coordinator.malformed(), self.errors)
            return batches

        def evaluate(batches: dict[str, Any]) -> dict[str, Parts]:
            # The collector paused while the results are decoded into rows: building W2's
            # 1.26 M rows set off repeated full collections over the driver's heap (about
            # 40 % of the time); the rows hold no cycles, and it runs again right after.
            with gc_paused():
                try:
                    return self._evaluate(txid, batches)
                except Exception as exc:  # a Spark job's failure: told as its worker's error
                    told = worker_error(exc)
                    if told is None:
                        raise
                    raise told from exc

        def failed(batches: dict[str, Any], exc: Exception, component: str) -> None:
            self.failed_attempts += 1
            with self._stats_lock:
                self.errors.append(ErrorRecord(component, 0, exc))
                self.stats.error(component)
                self.stats.add_batch({c: _size(b) for c, b in batches.items()}, False)

        try:
            out = attempt_transaction(
                txid, emit, evaluate, failed, blamed=self.plan.nodes[-1].cid,
                max_attempts=None if max_attempts is None else int(max_attempts),
                pause_ms=lambda ms: time.sleep(ms / 1000),
                stopping=lambda: self.stopping or self.lifecycle.stop_requested)
        except TransactionFailedError as exc:  # the run stops with it
            self.failure = exc
            raise
        t_commit = time.perf_counter()
        self.coordinator.commit(txid)
        self.timing["commit"] += time.perf_counter() - t_commit
        self.committed.append(txid)
        sizes = {cid: sum(map(len, parts)) for cid, parts in out.items()}
        sizes.update(self.spark_sizes)
        for node in self.plan.nodes:  # in plan order: a parent's size comes first
            if isinstance(node, RepartitionNode) and node.cid in self.inside \
                    and node.cid not in sizes:
                # Spark's own repartition, with no Python of ours to count it: it puts out
                # every tuple it receives.
                sizes[node.cid] = sum(sizes.get(p, 0) for p in node.parents)
        with self._stats_lock:
            self.stats.add_batch(sizes, True, batch_id)
        if self.capture:
            for cid, parts in out.items():
                for p in parts:
                    self.outputs[cid].extend(p)
        self.batch_seconds.append(time.perf_counter() - started)
        self.exhausted = self.coordinator.exhausted()

    def _evaluate(self, txid: int, batches: Mapping[str, Any]) -> dict[str, Parts]:
        """The transaction's outputs; `batches` holds each spout's partitions of rows, or a
        file spout's `FileBatch`, read by Spark where the spout's operations run in Spark and
        here otherwise."""
        try:
            return self._evaluate_attempt(txid, batches)
        finally:
            self._unstage()

    def _evaluate_attempt(self, txid: int, batches: Mapping[str, Any]) -> dict[str, Parts]:
        assert self.executor is not None
        # Storm's State protocol opens the batch before any Spark job, since some write their
        # state in the job (an opaque state's rollback of an earlier attempt comes first).
        self.executor.begin(txid)
        given: dict[str, Parts] = {}
        partials: dict[str, dict[tuple[Any, ...], Any]] = {}
        windows: dict[str, Any] = {}
        applied: dict[str, int] = {}  # keys written in Spark, per persistent_aggregate
        for cid, path in self.paths.items():
            if cid in applied:  # applied in the job of an earlier one
                continue
            batch = batches[path[0].cid]
            t_spark = time.perf_counter()
            # An empty batch needs no Spark job (a global aggregate still gets its zero).
            empty = not batch.files if isinstance(batch, FileBatch) else not any(batch)
            if self._in_executors(path[-1]):
                job = self._state_jobs()[cid]
                done = {c: _Applied(0, []) for c in job} if empty else \
                    self._spark_path(txid, path, batch, [self._persisted(c) for c in job[1:]])
                self.timing["spark"] += time.perf_counter() - t_spark
                for c, result in done.items():
                    applied[c] = result.written
                    node = self.paths[c][-1]
                    given[c] = [[]] if result.rows is None else \
                        split_by_key(result.rows, node.parallelism, node)
                continue
            terminal = ending(path)
            if isinstance(terminal, StateQueryNode):
                node = terminal
                rows = [] if empty else self._spark_path(txid, path, batch)
                self.timing["spark"] += time.perf_counter() - t_spark
                given[cid] = partition_rows(rows, node.parallelism,
                                            self.plan.node(node.parents[0]))
                continue
            if isinstance(terminal, WindowNode):
                windows[cid] = ({}, {}, None) if empty else self._spark_path(txid, path, batch)
                self.timing["spark"] += time.perf_counter() - t_spark
                continue
            groups = {} if empty else self._spark_path(txid, path, batch)
            self.timing["spark"] += time.perf_counter() - t_spark
            if isinstance(terminal, PersistNode):
                partials[cid] = groups  # applied to the state in plan order
            else:
                given[cid] = _output_rows(terminal, groups)
        # Tuples in and out of the operations that ran in Spark, from the workers. Two jobs
        # whose paths share an operation each ran it over the whole batch: counted once.
        self.spark_sizes = {}
        for acc in self._counts:
            for cid, (_, n_out) in acc.value.items():
                if cid in self.inside:  # an aggregation's output is counted on the driver
                    self.spark_sizes[cid] = max(self.spark_sizes.get(cid, 0), n_out)
        self._counts.clear()
        self.spark_sizes.update(applied)
        t_driver = time.perf_counter()
        rows = {cid: [b.rows()] if isinstance(b, FileBatch) else b
                for cid, b in batches.items() if cid not in self.inside}
        # The transaction's processing time: the driver's clock when its micro-batch first ran.
        now = self.coordinator.batch_time(txid, int(time.time() * 1000))
        out = self.executor.run(txid, rows, given=given, partials=partials, windows=windows,
                                skip=self.inside, final=self.coordinator.exhausted_after(txid),
                                time_ms=now, begun=True)
        self.timing["driver"] += time.perf_counter() - t_driver
        for cid, batch in batches.items():
            if cid not in out:  # a spout read in Spark: its size, for the counters
                # (a file spout read by Spark: only its size is known here; not captured)
                out[cid] = [[()] * batch.count()] if isinstance(batch, FileBatch) else batch
        return out

    def _spark_path(self, txid: int, path: list[Node], batch: Any,
                    together: Sequence[PersistNode] = ()) -> Any:
        """The per-key aggregates of the aggregation ending `path` for this batch, computed
        in Spark; for a `persistent_aggregate` applied in the executors, what it and the
        terminals `together` (the same path before them) wrote."""
        assert self.executor is not None
        spout, terminal = path[0], ending(path)
        fields = spout.fields
        df, types = self._input(batch, fields)
        counts = self.spark.sparkContext.accumulator({}, _CountsParam())
        self._counts.append(counts)
        chain: list[RowNode] = []

        def make_chain(needed: tuple[str, ...], partial: Terminal | None = None,
                       cells: bool = False, tagged: Sequence[str] = ()) -> _Chain:
            out_types = {f: k for f, k in types.items() if f in needed}
            out_types.update({f: cols.TAGGED for f in tagged if f not in out_types})
            return _Chain(chain, fields, needed, self.user_conf, txid, partial=partial,
                          counts=counts, types=out_types, cells=cells)

        def chain_df(df: Any, needed: tuple[str, ...], partial: Terminal | None = None,
                     tagged: Sequence[str] = ()) -> Any:
            c = make_chain(needed, partial, tagged=tagged)
            return df.mapInArrow(c, c.output_schema())

        def partials_here(df: Any, needed: tuple[str, ...], terminal: Terminal) -> pa.Table:
            """The terminal's partials of every partition, on the driver as they are."""
            c = make_chain(needed, terminal, cells=True)
            return cols.from_cells(df.mapInArrow(c, c.output_schema()).toArrow(),
                                   c.partial_schema())

        for node in path[1:-1]:  # the row operations and repartitions before the aggregation
            if isinstance(node, RowNode):
                chain.append(node)
                types = _types_after(node, types)
                continue
            needed = _needed(path, node)
            if chain:
                df = chain_df(df, needed)
                fields, chain = needed, []
                types = {f: k for f, k in types.items() if f in needed}
            if isinstance(node, RepartitionNode):
                df = _repartition(df, node)
        if isinstance(terminal, StateQueryNode):  # the query's rows are whole rows of its input
            parent = path[-2].fields
            if chain or fields != parent:
                df = chain_df(df, parent)
            return self._query_in_tasks_rows(terminal, parent, df)
        keys, inputs = terminal.keys, terminal_input(terminal)
        needed = tuple(dict.fromkeys(_partial_reads(terminal)))
        if isinstance(terminal, WindowNode):
            # partials per (window, key) in the workers, then here
            return tw.finish(partials_here(df, needed, terminal), terminal)
        if self._in_executors(terminal):
            terminals = [terminal, *together]
            state = StateChainArgs(chain, fields, types, counts)
            # CSV and JSON lines Spark drops as malformed depend on the columns a query reads
            # (Spark prunes the others): the JVM path, reading the keys and values only, would
            # count lines the driver's read of the same files leaves out.
            pruned_ok = not isinstance(batch, FileBatch) or batch.spout.format == "parquet"
            return self._apply_in_executors(txid, terminals, state, df, pruned_ok)
        op = terminal_op(terminal)
        # Partial aggregation off sends a built-in's rows to Spark SQL; a user's combiner has
        # no SQL form, so it keeps its partials in the worker either way.
        if self.partial or not isinstance(op, BuiltinCombiner):
            if isinstance(op, BuiltinCombiner) and _partial_kind(terminal, types) is not None \
                    and df.rdd.getNumPartitions() <= DRIVER_COMBINE:
                # A few partitions' typed partials: combined here by Arrow, no Spark shuffle.
                return _combine_here(partials_here(df, needed, terminal), keys, op.sql)
            df = chain_df(df, needed, terminal)
            value_fields: tuple[str, ...] = ("$partial",)
        else:
            if chain or fields != needed:
                # Keys of unknown type as one tagged column each: the JVM groups by one
                # column instead of four.
                df = chain_df(df, needed, tagged=keys)
            value_fields = inputs[:1]
        return _finish(terminal, df, keys, value_fields)

    def _in_executors(self, node: Node) -> TypeGuard[PersistNode]:
        """Whether `node`'s partials are applied to its state's partitions in the Spark tasks
        (`planner.applied_in_tasks`; never with partial aggregation or the executors' state
        switched off)."""
        return self.partial and self.in_executors and self.executor is not None \
            and applied_in_tasks(node, self.plan, self.paths, self.executor.states)

    def _persisted(self, cid: str) -> PersistNode:
        """The `persistent_aggregate` ending the path of `cid`, applied in the executors."""
        node = self.paths[cid][-1]
        assert isinstance(node, PersistNode), cid
        return node

    def _query_in_tasks(self, node: StateQueryNode) -> bool:
        return self.in_executors and query_in_tasks(node)

    def _query_in_tasks_rows(self, node: StateQueryNode, fields: tuple[str, ...], df: Any
                             ) -> list[tuple[Any, ...]]:
        """The output rows of the `state_query` `node` over `df` (rows of `fields`), read in
        the tasks holding the state partitions of their keys."""
        assert self.executor is not None
        n = self.executor.states[node.state].partitions
        ddl = ", ".join([*(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema),
                         f"`{tq.PARTITION}` int"])
        keyed = df.mapInArrow(tq.KeyPartitions(node.input, n), ddl)
        query = tq.QueryPartitions(node, fields, self.dir, self.user_conf, n)
        return tq.output_rows(self._in_cores(keyed.repartition(n, tq.PARTITION), n)
                              .mapInArrow(query, tq.OUTPUT_SCHEMA).toArrow())

    def _state_jobs(self) -> dict[str, list[str]]:
        """The `persistent_aggregate`s applied in one Spark job (`planner.state_jobs`)."""
        if self._jobs is None:
            assert self.executor is not None
            applied = [c for c, p in self.paths.items() if self._in_executors(p[-1])]
            self._jobs = state_jobs(self.paths, applied, self.executor.states)
        return self._jobs

    def _apply_in_executors(self, txid: int, terminals: Sequence[PersistNode],
                            args: StateChainArgs, df: Any, jvm: bool = True
                            ) -> dict[str, _Applied]:
        """The batch's partials of `terminals` applied to their states' partitions in Spark's
        tasks, in one job; what each wrote. `jvm`: built-ins may be aggregated by Spark's JVM
        (`_jvm_builtins`) when `df` reads its columns alike whichever the query needs."""
        assert self.executor is not None
        n = self.executor.states[terminals[0].state].partitions
        chain = _StateChain(args.chain, args.fields, self.user_conf, txid, terminals, n,
                            args.counts, args.types)
        collect = [self.capture or bool(self.plan.children(t.cid)) for t in terminals]
        keys = terminals[0].keys
        if jvm and not args.chain and _jvm_builtins(terminals, args.types):
            # Built-ins over typed columns: partitioned, grouped and aggregated by Spark's JVM,
            # then applied by the tasks holding the partitions; no Python pass over the input.
            # `repartition` by the key columns is by Spark's hash of them, the state's own
            # partitioning: task i holds the keys of partition i, and the aggregation needs no
            # second shuffle.
            key_columns = [f"{k}#{args.types[k]}" for k in keys]
            grouped = df.repartition(n, *(F.col(f"`{c}`") for c in key_columns)) \
                .groupBy(*key_columns).agg(*_jvm_aggregates(terminals, args.types)) \
                .withColumn(ts.PARTITION, F.expr(ts.partition_sql(key_columns, n)))
            columns = ts.ApplyColumns(terminals, key_columns, self.dir, txid, collect, n)
            result = self._in_cores(grouped, n).mapInArrow(columns, ts.OUTPUT_SCHEMA).toArrow()
            return {t.cid: _Applied(written, rows) for t, (written, rows) in zip(
                terminals, ts.applied_rows(result, len(terminals)), strict=True)}
        apply = ts.ApplyState(terminals, chain.kinds, self.dir, txid, collect)
        partials = df.mapInArrow(chain, chain.output_schema())
        result = self._in_cores(partials.repartition(n, ts.PARTITION), n).mapInArrow(
            apply, ts.OUTPUT_SCHEMA).toArrow()
        return {t.cid: _Applied(written, rows) for t, (written, rows) in zip(
            terminals, ts.applied_rows(result, len(terminals)), strict=True)}

    def _in_cores(self, df: Any, n: int) -> Any:
        """`df`, partitioned into `n` state partitions, as one task per core of the
        application (Spark's default parallelism) when it has fewer cores than partitions.

        `coalesce` hands each task whole partitions, so every key of a state partition is
        still in one task, and the Python tasks, each of which costs a worker's round of
        start, function and Arrow stream (about 30 ms on two local cores), are as many as the
        cores that run them.
        """
        cores = self.spark.sparkContext.defaultParallelism
        return df.coalesce(cores) if cores < n else df

    def _input(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[str, str]]:
        """The spout's batch as a DataFrame of encoded fields and its typed fields: files read
        by Spark (the columns Spark reads as string, long or double), anything else from the
        driver (a field whose values share one type travels as that one column)."""
        if isinstance(batch, FileBatch):
            read = _read_files(self.spark, batch, fields)
            if read is not None:
                return read
            batch = [batch.rows()]
        rows = [r for p in batch for r in p]
        columns = [[r[i] for r in rows] for i in range(len(fields))]
        types = {f: k for f, c in zip(fields, columns, strict=True)
                 if (k := cols.infer(c)) is not None}
        table = pa.Table.from_pydict(cols.encode_columns(fields, columns, types),
                                     schema=cols.schema(fields, types))
        return self._dataframe(table, cols.spark_schema(fields, types)), types

    def _dataframe(self, table: pa.Table, ddl: str) -> Any:
        """A batch built on the driver as a DataFrame. In local mode it is staged as a parquet
        file Spark reads: `createDataFrame` of the same Arrow table and a job over it took
        twice as long here (W1's 200,000 sentences: 1.0-1.25 s against 0.5-0.6 s, Kafka
        W1 through Trident; docs/design/trident.md). A cluster's executors cannot read the
        driver's files: there, `createDataFrame`."""
        if self._staging is None:
            return self.spark.createDataFrame(table)
        os.makedirs(self._staging, exist_ok=True)
        # A name never used before in this run: Spark must not take a file it listed for an
        # earlier batch for this one.
        self._stage_seq += 1
        path = os.path.join(self._staging, f"batch-{self._stage_seq}.parquet")
        # Row groups small enough for Spark to split the file over its cores.
        per_group = max(1, -(-table.num_rows // (2 * self.spark.sparkContext.defaultParallelism)))
        pq.write_table(table, path, row_group_size=per_group, compression="none")
        self._staged.append(path)
        return self.spark.read.schema(ddl).parquet(path)

    def _unstage(self) -> None:
        """The staged files of a transaction's attempt, once its Spark jobs ran."""
        for path in self._staged:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self._staged.clear()

    # ---- running --------------------------------------------------------------------------------
    supports_deactivate = False  # its reader plans transactions, not spout pulls

    def apply_activation(self, active: bool) -> None:
        """Only a stop deactivates this runner, and the stop itself ends the query."""

    def drained(self) -> bool:
        """No transaction is being attempted: they commit inside their batch, so a stop between
        two loses nothing, and a stop during one lets it commit (or fail: not tried again)."""
        return not self.in_transaction

    def run(self, *, duration_ms: int | None = None, until_complete: bool = True,
            on_progress: Progress | None = None, progress_every_ms: int = 1000,
            max_wait_ms: int | None = None) -> RunResult:
        def drive(started: float) -> None:
            self.executor = None
            self.coordinator.open()
            # A state whose store is down when the run starts is waited for, as a batch that
            # meets it mid-run is attempted again; a stop meanwhile ends the run.
            self.executor = wait_until_reachable(
                lambda: BatchExecutor(self.plan, self.user_conf, location=self.dir),
                what="trident states", pause_ms=lambda ms: time.sleep(ms / 1000),
                stopping=lambda: self.stopping or self.lifecycle.stop_requested)
            if self.executor is None:
                self.coordinator.close()
                return
            self.exhausted = self.coordinator.exhausted()
            if not (until_complete and self.exhausted):
                drive_query(self, TICKS[0], self._batch, options=TICKS[1], query_dir="ticks",
                            done=lambda: until_complete and self.exhausted, started=started,
                            duration_ms=duration_ms, max_wait_ms=max_wait_ms,
                            on_progress=on_progress, progress_every_ms=progress_every_ms,
                            finish_last_trigger=lambda: max(self.stats.batch_input, default=0))

        return self.run_bracket(drive, close=self._close, on_progress=on_progress)

    def _close(self) -> None:
        if self.executor is not None:  # opened, so the coordinator was too
            self.executor.close()
            self.coordinator.close()

    def _uncollected(self) -> set[str]:
        """Operations whose rows stay in Spark: those inside the Spark paths, spouts included
        when Spark reads their files (other spouts' batches come from the driver)."""
        nodes = {n.cid: n for n in self.plan.nodes}
        return {cid for cid in self.inside
                if not isinstance(node := nodes[cid], SpoutNode)
                or isinstance(node.spout, FileBatchSpout)}

    def batch_metrics(self) -> list[BatchMetrics]:
        """Spark's reports of the batches that ran a transaction (not the ticks after the
        input ended), each with the tuples its spouts emitted as its input rows."""
        rows = self.stats.batch_input  # per Spark batch id that committed a transaction
        return [dataclasses.replace(b, input_rows=rows[b.batch_id])
                for b in batch_metrics(self.query) if b.batch_id in rows]

    def batch_executed(self) -> dict[int, int]:
        return self.stats.batch_executed

    def complete(self) -> bool:
        """Every spout's input ended with the last committed transaction."""
        return self.exhausted

    def captured(self) -> Captures:
        return rows_by_first_task(self.topology, self.outputs) if self.capture else {}

    def settled_ids(self) -> dict[int, dict[str, list[Any]]]:
        return {}  # batches are settled, not tuples

    def component_stats(self) -> dict[str, ComponentStats]:
        with self._stats_lock:
            return self.stats.component_stats(
                None if self.executor is None else dict(self.executor.late))

    def result(self) -> RunResult:
        extra: dict[str, Any] = {"batches": len(self.committed),
                                 "committed": list(self.committed),
                                 "failed_attempts": self.failed_attempts,
                                 "batch_seconds": list(self.batch_seconds),
                                 "timing": dict(self.timing),
                                 "spark_operations": sorted(self.inside | set(self.paths)),
                                 "uncollected": sorted(self._uncollected())}
        if self.executor is not None and self.executor.late:
            extra["late"] = dict(self.executor.late)
        if self.capture:
            extra["outputs"] = {c: list(rows) for c, rows in self.outputs.items()}
        return RunResult(self.component_stats(), list(self.errors), self.elapsed_ms, extra)


class StateChainArgs(NamedTuple):
    """What a `_StateChain` continues from: the row operations not run yet, their input fields
    and typed fields, and the counts' accumulator."""

    chain: list[RowNode]
    fields: tuple[str, ...]
    types: dict[str, str]
    counts: Any


class _Applied:
    """A `persistent_aggregate` applied in Spark: the keys written, and their new rows when
    they were collected."""

    def __init__(self, written: int, rows: list[tuple[Any, ...]] | None) -> None:
        self.written, self.rows = written, rows


def _size(batch: Any) -> int:
    if isinstance(batch, FileBatch):
        return batch.count()
    return sum(map(len, batch))


def _repartition(df: Any, node: RepartitionNode) -> Any:
    n = node.parallelism
    match node.scheme:
        case PartitionBy(keys=keys):
            return df.repartition(n, *[c for k in keys for c in _present(df.columns, k)])
        case Global():
            return df.repartition(1)
        case Shuffle() | Broadcast() | CustomPartition():
            return df.repartition(n)
        case _:
            assert_never(node.scheme)


def _user_objects(node: Node) -> list[Any]:
    """The user's objects a node holds (spout, function, aggregators, state factory, custom
    grouping): their classes travel by value when a script defines them."""
    match node:
        case SpoutNode():
            return [node.spout]
        case RepartitionNode():
            return [node.scheme.grouping] if isinstance(node.scheme, CustomPartition) else []
        case RowNode():
            return [node.op]
        case AggregateNode():
            return [a.op for a in node.aggregations]
        case PersistNode() | StateQueryNode() | WindowNode():
            return [node.op, node.factory]
        case MergeNode() | JoinNode():
            return []
        case _:
            assert_never(node)
