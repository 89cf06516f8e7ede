"""Trident on Spark: a transaction is a micro-batch, its heavy part planned as DataFrame work.

A streaming query over Spark's `rate-micro-batch` source drives the transactions: each of its
micro-batches runs the coordinator's next transaction (`BatchCoordinator.next_txid`; a tick after
a bounded input ended, or during a stop, runs none). Per transaction the driver asks every spout
for the transaction's batch (`BatchCoordinator.emit`; a replayed txid gives the same batch, or
for an opaque spout one starting where the previous ended), then:

1. **In Spark**, for each spout whose operations are all Spark-able, the path from the spout to
   each aggregation that ends it (`persistent_aggregate`, `group_by().aggregate`, `aggregate`
   with a `CombinerAggregator`): the spout's rows become a DataFrame, consecutive row operations
   (`each`, `filter`, `map`, `flat_map`, `peek`, `project`) run fused in one `mapInArrow`
   (a Python loop per Arrow batch for per-tuple functions, one call per Arrow batch for a
   `BatchFunction`), repartitions map to `repartition`, and the aggregation's combiner runs in
   the same worker over each partition (Storm's partial aggregation before the transfer). The
   partials meet in Spark's JVM for the built-ins (`Count`, `Sum`, `Min`, `Max`: a SQL
   aggregation), or on the driver for a user's combiner. One Spark action (`toArrow`) per
   aggregation brings the batch's per-key aggregates to the driver, except for a
   `persistent_aggregate` into a partitioned state: its partials are shuffled by state
   partition and applied in the tasks that hold them (`trident.state`), and only how many keys
   each partition wrote comes back. A `state_query` of a partitioned state fed this way is read
   in the tasks holding the state partitions of its keys (`trident.state_query`), before the
   transaction's updates, and only its output rows come back.
2. **On the driver**, everything else runs through the same executor as the local runner
   (`squall.trident.execution.BatchExecutor`), given what step 1 computed (one `Computed`):
   map state updates (in plan order, so in txid order: Spark runs one micro-batch at a time),
   other state queries, joins, merges and whatever follows a state.
3. The next txid is recorded (the commit). A batch that failed is run again at once as a new
   attempt of the same txid (`squall.trident.max.attempts`; unset: for ever, with a growing
   pause), its states applying it once if transactional or opaque.

Modules, each with one job:

- `planner`: which operations run in Spark, which fields and partials their workers pass on,
  and the typed Spark jobs a transaction launches (pure decisions over the plan: no Spark);
- `jobs`: those jobs, one frozen dataclass per kind, and the switches that shape them
  (`Tuning`: `PARTIAL`, `IN_EXECUTORS`, `DRIVER_COMBINE`, configuration keys);
- `launch`: `Launcher`, the one dispatch that runs a job over a transaction's batch and puts
  what it computed into the `squall.trident.computed.Computed` the executor takes;
- `schema`: every column the driver and the workers share, by name;
- `chain`: the worker side, a path's row operations fused into one `mapInArrow`;
- `combine`: a combiner's partial aggregation in the worker, and the partials combined into
  per-key aggregates on the driver or in Spark's JVM;
- `files`: a file spout's batch read by Spark;
- `runner`: `TridentSparkRunner`, the transactions;
- `columns`: how untyped fields travel in Spark's typed columns;
- `state`, `state_query`: a `persistent_aggregate` applied, and a `state_query` read, in the
  tasks holding a partitioned state's partitions;
- `windows`: event-time windows' partials in the worker, finished on the driver.

Which jobs a run launched, and the route each took, are in its result
(`RunResult.extra["spark_jobs"]`).
Decisions and measurements: docs/design/trident.md.
"""

from squall.runtime.spark.trident.jobs import DRIVER_COMBINE, IN_EXECUTORS, PARTIAL
from squall.runtime.spark.trident.runner import TridentSparkRunner

__all__ = ["DRIVER_COMBINE", "IN_EXECUTORS", "PARTIAL", "TridentSparkRunner"]
