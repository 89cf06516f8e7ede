"""The columns the Trident driver and the Spark tasks share: each name, what it holds, who writes.

A user's field `f` travels in the columns `trident.columns` names (`f#s`, `f#i`, `f#d`, `f#x`,
or `f#t`); the columns below are the framework's own. Each starts with `$`, which no field of a
Trident stream may start with (`squall.trident.stream` refuses it), so they never meet a user's
field. Every other module of the package takes these names from here; none spells one
(`tests/unit/test_trident_schema.py` holds that).

| name | column | holds |
| --- | --- | --- |
| `PARTIAL` | `$partial` | a combiner's partial value per key (a field, or pickled) |
| `IPC` | `$ipc` | a partition's partial rows as one Arrow IPC stream |
| `STATE_PARTITION` | `$sp` | the state partition of a row's key |
| `TERMINAL` | `$t` | which `persistent_aggregate` of a state job a row is for |
| `stacked(i)` | `$p<i>` | terminal i's partial, or its aggregate from Spark's JVM |
| `valued(i)` | `$c<i>` | how many of a key's values of terminal i's `Sum` were not None |
| `KEY_TUPLES` | `$tuples` | how many tuples a key had in the batch |
| `WRITTEN` | `$n` | how many keys a task wrote to a state partition |
| `ROWS` | `$rows` | rows for the driver, pickled |
| `value(v)` | `$v#s`, `$v#i`, `$v#d` | a built-in's aggregate of the values of one type |
| `VALUE_OTHERS` | `$v#xn` | how many values had no typed column |
| `WINDOW_START` | `$ws` | a window's start |
| `WINDOW_TUPLES` | `$n` | the tuples assigned to a (window, key) |
| `WINDOW_MAX` | `$max` | their largest timestamp |
| `WINDOW_PART` | `$part` | the partition that computed a partial row |

Who writes and who reads them (worker: the Python worker's chain, `chain`; task: a state job's
or query job's task; SQL: a Spark SQL expression the driver plans; driver: the runner):

- `PARTIAL`: written by `combine._Partials` (worker); read by `combine` (SQL, driver) and
  `state.stacked` (worker). Typed partials travel as a field (`$partial#i`, ...), a user's
  combiner's as one pickled binary column.
- `IPC`: written by `columns.to_cells` (worker); read by `columns.from_cells` (driver).
- `STATE_PARTITION`: written by `state.stacked`, `state_query.KeyPartitions` (worker) and
  `state.partition_sql` (SQL); Spark repartitions by it; read by `state.ApplyState`,
  `state.ApplyColumns` and `state_query.QueryPartitions` (task), which also write it back.
- `TERMINAL`, `stacked(i)`: written by `state.stacked` (worker; `stacked(i)` also by
  `combine.jvm_aggregates`, SQL); read by `state.ApplyState` / `state.ApplyColumns` (task);
  `TERMINAL` is written again by the tasks' output (`state.Written`, also by
  `persist.PersistChain`) for `state.applied_rows` (driver).
- `valued(i)`, `KEY_TUPLES`: written by `combine.jvm_aggregates` (SQL); read by
  `state.ApplyColumns` (task).
- `WRITTEN`, `ROWS`: written by the tasks of a state job and of a `partition_persist`
  (`state.Written`, also for `persist.PersistChain`; `ROWS` also by
  `state_query.QueryPartitions`); read by `state.applied_rows` and `state_query.output_rows`
  (driver).
- `value(v)`, `VALUE_OTHERS`: written by `combine._aggregate` (SQL); read by `combine` (driver).
- `WINDOW_*`: written by `windows.WindowPartials` (worker), as integer fields (`$ws#i`, ...);
  read by `windows.finish` (driver).

`WRITTEN` and `WINDOW_TUPLES` are both `$n`: they are columns of different jobs' outputs.

>>> stacked(2), valued(0), value("i")
('$p2', '$c0', '$v#i')
>>> ddl(STATE_PARTITION, "int")
'`$sp` int'
"""

from __future__ import annotations

PARTIAL = "$partial"
IPC = "$ipc"
STATE_PARTITION = "$sp"
TERMINAL = "$t"
KEY_TUPLES = "$tuples"
WRITTEN = "$n"
ROWS = "$rows"
VALUE_OTHERS = "$v#xn"
WINDOW_START = "$ws"
WINDOW_TUPLES = "$n"
WINDOW_MAX = "$max"
WINDOW_PART = "$part"


def stacked(i: int) -> str:
    """The column of terminal `i`'s partials in a state job's stacked rows."""
    return f"$p{i}"


def valued(i: int) -> str:
    """The column counting the values of terminal `i`'s `Sum` that were not None."""
    return f"$c{i}"


def value(variant: str) -> str:
    """The column of a built-in's Spark SQL aggregate over the values of one typed column."""
    return f"$v#{variant}"


def ddl(column: str, sql_type: str) -> str:
    """One column of a Spark DDL schema string."""
    return f"`{column}` {sql_type}"
