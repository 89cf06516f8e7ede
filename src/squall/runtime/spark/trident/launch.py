"""`Launcher`: runs the typed Spark jobs of a transaction over its batch, into one `Computed`.

`Launcher.launch` is the one dispatch over the kinds of job `planner.spark_jobs` emits
(`trident.jobs`). Every job starts the same way (`_walk`): the spout's batch as a DataFrame
(`_input`: files read by Spark, anything else staged from the driver), then the path's row
operations fused in the workers (`chain`) up to each repartition, which Spark runs. It ends as
its kind says: an aggregation's per-key aggregates combined (`combine`), an event-time window's
partials finished on the driver (`trident.windows`), a state query read in the tasks holding its
state's partitions (`trident.state_query`), `persistent_aggregate`s applied there
(`trident.state`), a `partition_persist` updated in the tasks (`trident.persist`). What a job
computed goes into the transaction's `Computed`, the executor's one input from Spark; each
operation's tuples in and out come back through accumulators (`sizes`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from squall.runtime.spark.map_in_arrow import java_udf
from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.runtime.spark.trident import state as ts
from squall.runtime.spark.trident import state_query as tq
from squall.runtime.spark.trident import windows as tw
from squall.runtime.spark.trident.chain import Counts, _Chain, _CountsParam, _StateChain
from squall.runtime.spark.trident.combine import (
    _combine_here,
    _finish,
    _output_rows,
    _present,
    jvm_aggregates,
)
from squall.runtime.spark.trident.files import FileReads
from squall.runtime.spark.trident.jobs import (
    AggregateJob,
    PersistJob,
    QueryJob,
    SparkJob,
    StateJob,
    WindowJob,
)
from squall.runtime.spark.trident.per_job import set_job
from squall.runtime.spark.trident.persist import PersistChain
from squall.runtime.spark.trident.planner import (
    Terminal,
    _jvm_builtins,
    _needed,
    _partial_kind,
    _partial_reads,
    _types_after,
    terminal_input,
    terminal_op,
    unread_fields,
)
from squall.trident.computed import Computed, WindowSegments
from squall.trident.execution import Parts, partition_rows, split_by_key
from squall.trident.operations import BuiltinCombiner
from squall.trident.plan import (
    Broadcast,
    CustomPartition,
    Global,
    Node,
    PartitionBy,
    PersistNode,
    Plan,
    RepartitionNode,
    RowNode,
    Shuffle,
)
from squall.trident.spouts import FileBatch

# A spout's batch: its partitions of rows (from the driver), or the files Spark reads.
Batch = Parts | FileBatch


@dataclass
class _Walked:
    """A job's DataFrame after the path's operations before its terminal, as far as Spark ran
    them: its fields and typed fields, and the row operations not run yet (fused into the
    job's last `mapInArrow`)."""

    df: DataFrame
    fields: tuple[str, ...]
    types: dict[str, str]
    chain: list[RowNode] = field(default_factory=list)


class Launcher:
    """Runs a transaction's Spark jobs for a plan (see the module documentation).

    `location`: the run's checkpoint location (the states' partitions live under it);
    `staging`: where driver batches are staged as parquet files (None: `createDataFrame`)."""

    def __init__(self, spark: SparkSession, plan: Plan, conf: Mapping[str, Any],
                 location: str, staging: str | None) -> None:
        self.spark, self.plan, self.conf, self.location = spark, plan, conf, location
        self.staging = staging
        self._staged: list[str] = []
        self._stage_seq = 0
        if staging is not None:  # a killed run's leftovers
            shutil.rmtree(staging, ignore_errors=True)
        self.reads = FileReads(spark)  # file spouts' batches read by Spark
        # Functions made once per run (`per_job`), per job and input's typed fields.
        self._made: dict[tuple[Any, ...], _StateFunctions] = {}
        self._counts: list[Counts] = []  # this transaction's accumulators, one per job
        self.written: dict[str, int] = {}  # keys written in Spark, per persistent_aggregate
        self._unread: dict[str, frozenset[str]] = {}  # per file spout (`_pruned`)

    # ---- one job ----------------------------------------------------------------------------
    def launch(self, job: SparkJob, txid: int, batch: Batch, into: Computed) -> str | None:
        """Runs `job` over the spout's `batch` for transaction `txid`, its results put in
        `into`; the route its data took, or None when the batch is empty (no Spark job: a
        global aggregate still gets its zero)."""
        empty = not batch.files if isinstance(batch, FileBatch) else not any(batch)
        match job:
            case AggregateJob():
                return self._aggregate(job, txid, batch, empty, into)
            case WindowJob():
                return self._window(job, txid, batch, empty, into)
            case QueryJob():
                return self._query(job, txid, batch, empty, into)
            case StateJob():
                return self._state(job, txid, batch, empty, into)
            case PersistJob():
                return self._persist(job, txid, batch, empty, into)
            case _:
                assert_never(job)

    def _aggregate(self, job: AggregateJob, txid: int, batch: Batch, empty: bool,
                   into: Computed) -> str | None:
        terminal = job.terminal
        route, groups = (None, {}) if empty else self._groups(job, txid, batch)
        if isinstance(terminal, PersistNode):
            into.partials[terminal.cid] = groups  # applied to the state in plan order
        else:
            into.given[terminal.cid] = _output_rows(terminal, groups)
        return route

    def _groups(self, job: AggregateJob, txid: int, batch: Batch
                ) -> tuple[str, dict[tuple[Any, ...], Any]]:
        """The per-key aggregates of the job's aggregation, and the route they took."""
        walked, counts = self._walk(job.path, txid, batch)
        terminal = job.terminal
        df, fields, types = walked.df, walked.fields, walked.types
        keys, inputs = terminal.keys, terminal_input(terminal)
        needed = tuple(dict.fromkeys(_partial_reads(terminal)))
        op = terminal_op(terminal)
        # Partial aggregation off sends a built-in's rows to Spark SQL; a user's combiner has
        # no SQL form, so it keeps its partials in the worker either way.
        if job.partial or not isinstance(op, BuiltinCombiner):
            if isinstance(op, BuiltinCombiner) and _partial_kind(terminal, types) is not None \
                    and df.rdd.getNumPartitions() <= job.driver_combine:
                # A few partitions' typed partials: combined here by Arrow, no Spark shuffle.
                partials = self._partials_here(walked, needed, terminal, txid, counts)
                return "driver", _combine_here(partials, keys, op.sql)
            df = self._chain_df(walked, needed, txid, counts, terminal)
            value_fields: tuple[str, ...] = (sc.PARTIAL,)
        else:
            if walked.chain or fields != needed:
                # Keys of unknown type as one tagged column each: the JVM groups by one
                # column instead of four.
                df = self._chain_df(walked, needed, txid, counts, tagged=keys)
            value_fields = inputs[:1]
        route = "jvm" if isinstance(op, BuiltinCombiner) else "combiner"
        return route, _finish(terminal, df, keys, value_fields)

    def _window(self, job: WindowJob, txid: int, batch: Batch, empty: bool,
                into: Computed) -> str | None:
        if empty:
            into.windows[job.terminal.cid] = WindowSegments.none()
            return None
        walked, counts = self._walk(job.path, txid, batch)
        needed = tuple(dict.fromkeys(_partial_reads(job.terminal)))
        # partials per (window, key) in the workers, then here
        partials = self._partials_here(walked, needed, job.terminal, txid, counts)
        into.windows[job.terminal.cid] = tw.finish(partials, job.terminal)
        return "driver"

    def _query(self, job: QueryJob, txid: int, batch: Batch, empty: bool,
               into: Computed) -> str | None:
        node = job.terminal
        rows: list[tuple[Any, ...]] = []
        route = None
        if not empty:
            walked, counts = self._walk(job.path, txid, batch)
            # The query's rows are whole rows of its input.
            parent = job.path[-2].fields
            df = walked.df
            if walked.chain or walked.fields != parent:
                df = self._chain_df(walked, parent, txid, counts)
            rows, route = self._query_rows(job, parent, df), "tasks"
        into.given[node.cid] = partition_rows(rows, node.parallelism,
                                              self.plan.node(node.parents[0]))
        return route

    def _query_rows(self, job: QueryJob, fields: tuple[str, ...], df: DataFrame
                    ) -> list[tuple[Any, ...]]:
        """The output rows of the job's `state_query` over `df` (rows of `fields`), read in
        the tasks holding the state partitions of their keys."""
        node, n = job.terminal, job.partitions
        ddl = ", ".join([*(sc.ddl(f.name, f.dataType.simpleString()) for f in df.schema),
                         sc.ddl(sc.STATE_PARTITION, "int")])
        keyed = df.mapInArrow(tq.KeyPartitions(node.input, n), ddl)
        query = tq.QueryPartitions(node, fields, self.location, self.conf, n)
        return tq.output_rows(self._in_cores(keyed.repartition(n, sc.STATE_PARTITION), n)
                              .mapInArrow(query, tq.OUTPUT_SCHEMA).toArrow())

    def _state(self, job: StateJob, txid: int, batch: Batch, empty: bool,
               into: Computed) -> str | None:
        route: str | None = None
        applied: list[tuple[int, list[tuple[Any, ...]] | None]]
        if empty:
            applied = [(0, []) for _ in job.terminals]
        else:
            route, applied = self._apply(job, txid, batch)
        for t, (written, rows) in zip(job.terminals, applied, strict=True):
            self.written[t.cid] = written
            into.given[t.cid] = [[]] if rows is None else \
                split_by_key(rows, t.parallelism, t)
        return route

    def _apply(self, job: StateJob, txid: int, batch: Batch
               ) -> tuple[str, list[tuple[int, list[tuple[Any, ...]] | None]]]:
        """The batch's partials of the job's terminals applied to their states' partitions in
        Spark's tasks, in one job: the route, and per terminal the keys written and, if
        collected, their new rows."""
        walked, counts = self._walk(job.path, txid, batch)
        terminals, n, df = job.terminals, job.partitions, walked.df
        # CSV and JSON lines Spark drops as malformed depend on the columns a query reads
        # (Spark prunes the others): the JVM path, reading the keys and values only, would
        # count lines the driver's read of the same files leaves out.
        pruned_ok = not isinstance(batch, FileBatch) or batch.spout.format == "parquet"
        if pruned_ok and not walked.chain and _jvm_builtins(terminals, walked.types):
            # Built-ins over typed columns: partitioned, grouped and aggregated by Spark's JVM,
            # then applied by the tasks holding the partitions; no Python pass over the input.
            # `repartition` by the key columns is by Spark's hash of them, the state's own
            # partitioning: task i holds the keys of partition i, and the aggregation needs no
            # second shuffle.
            key_columns = [f"{k}#{walked.types[k]}" for k in terminals[0].keys]
            grouped = df.repartition(n, *(F.col(f"`{c}`") for c in key_columns)) \
                .groupBy(*key_columns).agg(*jvm_aggregates(terminals, walked.types)) \
                .withColumn(sc.STATE_PARTITION, F.expr(ts.partition_sql(key_columns, n)))
            columns = ts.ApplyColumns(terminals, key_columns, self.location, txid, job.collect,
                                      n)
            result = self._in_cores(grouped, n).mapInArrow(columns, ts.OUTPUT_SCHEMA).toArrow()
            return "jvm", ts.applied_rows(result, len(terminals))
        made = self._state_functions(job, walked)
        set_job(self.spark.sparkContext, txid, counts.aid)
        jdf = df._jdf.mapInArrow(made.chain.apply(made.columns(df)), False, None)
        jdf = jdf.repartition(n, made.partition)
        if self.spark.sparkContext.defaultParallelism < n:  # as `_in_cores`
            jdf = jdf.coalesce(self.spark.sparkContext.defaultParallelism)
        jdf = jdf.mapInArrow(made.apply.apply(made.columns(jdf, stacked=True)), False, None)
        result = ClassicDataFrame(jdf, self.spark).toArrow()
        return "python", ts.applied_rows(result, len(terminals))

    def _persist(self, job: PersistJob, txid: int, batch: Batch, empty: bool,
                 into: Computed) -> str | None:
        """The job's `partition_persist` updated in the tasks (`trident.persist`): each Spark
        partition's state made there with its index, as Storm's tasks make theirs."""
        node = job.terminal
        rows: list[tuple[Any, ...]] | None = []
        route = None
        if not empty:
            walked, counts = self._walk(job.path, txid, batch, pruned=True)
            chain = PersistChain(walked.chain, walked.fields, self.conf, txid, node,
                                 walked.df.rdd.getNumPartitions(), self.location, job.collect,
                                 counts, walked.types)
            result = walked.df.mapInArrow(chain, chain.output_schema()).toArrow()
            ((self.written[node.cid], rows),) = ts.applied_rows(result, 1)
            route = "tasks"
        into.given[node.cid] = [[]] if rows is None else \
            partition_rows(rows, node.parallelism, node)
        return route

    def _state_functions(self, job: StateJob, walked: _Walked) -> _StateFunctions:
        """The Spark UDFs of a state job's Python route for the input's typed fields, made on
        its first transaction (`per_job`)."""
        key = (id(job), walked.fields, tuple(sorted(walked.types.items())))
        made = self._made.get(key)
        if made is None:
            chain = _StateChain(walked.chain, walked.fields, self.conf, -1, job.terminals,
                                job.partitions, None, walked.types, from_job=True)
            apply = ts.ApplyState(job.terminals, chain.kinds, self.location, -1, job.collect,
                                  from_job=True)
            made = self._made[key] = _StateFunctions(
                job, self.spark, java_udf(chain, chain.output_schema(), "squall_state_chain"),
                java_udf(apply, ts.OUTPUT_SCHEMA, "squall_state_apply"))
        return made

    # ---- the path before the terminal --------------------------------------------------------
    def _walk(self, path: Sequence[Node], txid: int, batch: Batch, pruned: bool = False
              ) -> tuple[_Walked, Counts]:
        """The batch as a DataFrame through the path's operations before its terminal: row
        operations fused in a `mapInArrow` up to each repartition, which Spark runs (the last
        ones left to the job's end), and the accumulator of their counts. `pruned`: a Parquet
        batch is read without the columns no operation of the plan reads (`unread_fields`)."""
        spout = path[0]
        read = self._pruned(batch, spout.cid) if pruned else None
        fields = spout.fields if read is None else \
            tuple(f for f in spout.fields if f in read[1])
        df, types = read if read is not None else self._input(batch, spout.fields)
        counts = self.spark.sparkContext.accumulator({}, _CountsParam())
        self._counts.append(counts)
        walked = _Walked(df, fields, types)
        for node in path[1:-1]:  # the row operations and repartitions before the terminal
            if isinstance(node, RowNode):
                walked.chain.append(node)
                walked.types = _types_after(node, walked.types)
                continue
            needed = _needed(list(path), node)
            if walked.chain:
                walked.df = self._chain_df(walked, needed, txid, counts)
                walked.fields, walked.chain = needed, []
                walked.types = {f: k for f, k in walked.types.items() if f in needed}
            if isinstance(node, RepartitionNode):
                walked.df = _repartition(walked.df, node)
        return walked, counts

    def _make_chain(self, walked: _Walked, needed: tuple[str, ...], txid: int, counts: Counts,
                    partial: Terminal | None = None, cells: bool = False,
                    tagged: Sequence[str] = ()) -> _Chain:
        out_types = {f: k for f, k in walked.types.items() if f in needed}
        out_types.update({f: cols.TAGGED for f in tagged if f not in out_types})
        return _Chain(walked.chain, walked.fields, needed, self.conf, txid, partial=partial,
                      counts=counts, types=out_types, cells=cells)

    def _chain_df(self, walked: _Walked, needed: tuple[str, ...], txid: int, counts: Counts,
                  partial: Terminal | None = None, tagged: Sequence[str] = ()) -> DataFrame:
        c = self._make_chain(walked, needed, txid, counts, partial, tagged=tagged)
        return walked.df.mapInArrow(c, c.output_schema())

    def _partials_here(self, walked: _Walked, needed: tuple[str, ...], terminal: Terminal,
                       txid: int, counts: Counts) -> pa.Table:
        """The terminal's partials of every partition, on the driver as they are."""
        c = self._make_chain(walked, needed, txid, counts, terminal, cells=True)
        return cols.from_cells(walked.df.mapInArrow(c, c.output_schema()).toArrow(),
                               c.partial_schema())

    def _in_cores(self, df: DataFrame, n: int) -> DataFrame:
        """`df`, partitioned into `n` state partitions, as one task per core of the
        application (Spark's default parallelism) when it has fewer cores than partitions.

        `coalesce` hands each task whole partitions, so every key of a state partition is
        still in one task, and the Python tasks, each of which costs a worker's round of
        start, function and Arrow stream (about 30 ms on two local cores), are as many as the
        cores that run them.
        """
        cores = self.spark.sparkContext.defaultParallelism
        return df.coalesce(cores) if cores < n else df

    # ---- the spout's batch -------------------------------------------------------------------
    def _pruned(self, batch: Batch, spout: str) -> tuple[DataFrame, dict[str, str]] | None:
        """A Parquet batch read by Spark without the fields no operation reads, as the driver
        reads one (`FileBatch.rows`): they never cross into the Python workers (NEXMark's q2
        reads 3 of 21). None for other batches (CSV and JSON lines Spark drops as malformed
        depend on the columns it reads) and for fields without a typed column."""
        if not isinstance(batch, FileBatch) or batch.spout.format != "parquet":
            return None
        unread = self._unread.get(spout)
        if unread is None:
            unread = self._unread[spout] = unread_fields(self.plan, spout)
        if not unread:
            return None
        fields = tuple(f for f in self.plan.node(spout).fields if f not in unread)
        return self.reads.read(batch, fields) if fields else None

    def _input(self, batch: Batch, fields: tuple[str, ...]) -> tuple[DataFrame, dict[str, str]]:
        """The spout's batch as a DataFrame of encoded fields and its typed fields: files read
        by Spark (the columns Spark reads as string, long or double), anything else from the
        driver (a field whose values share one type travels as that one column)."""
        if isinstance(batch, FileBatch):
            read = self.reads.read(batch, fields)
            if read is not None:
                return read
            batch = [batch.rows()]
        rows = [r for p in batch for r in p]
        columns = [[r[i] for r in rows] for i in range(len(fields))]
        types = {f: k for f, c in zip(fields, columns, strict=True)
                 if (k := cols.infer(c)) is not None}
        table = pa.Table.from_pydict(cols.encode_columns(fields, columns, types),
                                     schema=cols.schema(fields, types))
        return self.dataframe(table, cols.spark_schema(fields, types)), types

    def dataframe(self, table: pa.Table, ddl: str) -> DataFrame:
        """A batch built on the driver as a DataFrame. In local mode it is staged as a parquet
        file Spark reads: `createDataFrame` of the same Arrow table and a job over it took
        twice as long here (W1's 200,000 sentences: 1.0-1.25 s against 0.5-0.6 s, Kafka
        W1 through Trident; docs/design/trident.md). A cluster's executors cannot read the
        driver's files: there, `createDataFrame`."""
        if self.staging is None:
            return self.spark.createDataFrame(table)
        os.makedirs(self.staging, exist_ok=True)
        # A name never used before in this run: Spark must not take a file it listed for an
        # earlier batch for this one.
        self._stage_seq += 1
        path = os.path.join(self.staging, f"batch-{self._stage_seq}.parquet")
        # Row groups small enough for Spark to split the file over its cores.
        per_group = max(1, -(-table.num_rows // (2 * self.spark.sparkContext.defaultParallelism)))
        pq.write_table(table, path, row_group_size=per_group, compression="none")
        self._staged.append(path)
        return self.spark.read.schema(ddl).parquet(path)

    # ---- after the jobs ----------------------------------------------------------------------
    def unstage(self) -> None:
        """The staged files of a transaction's attempt, once its Spark jobs ran."""
        for path in self._staged:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self._staged.clear()

    def sizes(self, inside: frozenset[str]) -> dict[str, int]:
        """Tuples out of the operations that ran in Spark in this transaction's jobs (from the
        workers; two jobs whose paths share an operation each ran it over the whole batch:
        counted once), and the keys each `persistent_aggregate` applied in the tasks wrote.
        Starts the next transaction's count."""
        sizes: dict[str, int] = {}
        for acc in self._counts:
            for cid, (_, n_out) in acc.value.items():
                if cid in inside:  # an aggregation's output is counted on the driver
                    sizes[cid] = max(sizes.get(cid, 0), n_out)
        self._counts.clear()
        sizes.update(self.written)
        self.written = {}
        return sizes


class _StateFunctions:
    """A state job's Python route made once per run: its two functions as the JVM's Spark
    UDFs, their input columns by name (resolved against each transaction's DataFrame) and the
    state partition column to repartition by."""

    def __init__(self, job: StateJob, spark: SparkSession, chain: Any, apply: Any) -> None:
        self.job, self.chain, self.apply = job, chain, apply  # the job held: its id is the key
        self._jvm: Any = spark.sparkContext._jvm
        self.partition = self._seq([sc.STATE_PARTITION])
        self._columns: dict[bool, Any] = {}

    def columns(self, df: DataFrame | Any, stacked: bool = False) -> Any:
        """The input columns of the chain (`stacked`: of the apply) by name, made on the
        first transaction from its DataFrame (Python's or the JVM's)."""
        made = self._columns.get(stacked)
        if made is None:
            names = df.columns if isinstance(df, DataFrame) else list(df.columns())
            made = self._columns[stacked] = self._seq(names)
        return made

    def _seq(self, names: Sequence[str]) -> Any:
        col = self._jvm.org.apache.spark.sql.functions.col
        return self._jvm.PythonUtils.toSeq(
            [col("`" + n.replace("`", "``") + "`") for n in names])


def _repartition(df: DataFrame, node: RepartitionNode) -> DataFrame:
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

