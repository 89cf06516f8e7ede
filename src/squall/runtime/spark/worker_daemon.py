"""The daemon PySpark forks its Python workers from, with squall's worker-side modules loaded.

Spark starts one daemon per executor (`python -m <spark.python.daemon.module>`, PySpark's
`pyspark.daemon` by default) and forks a worker from it for each Python task it cannot give to an
idle worker. A worker imports what its first task's pickled function needs: for a squall stage,
the `squall` package, pyarrow, pandas and the Kafka and Redis clients, 1-2 s of CPU per worker
(four workers in a small topology's first micro-batch on `local[2]`). This module imports them
once, in the daemon, and then runs PySpark's own daemon loop: every worker it forks starts with
them loaded (the fork shares their pages).

The loaded objects are moved to the collector's permanent generation (`gc.freeze`) before the
first fork: a reused worker runs a full `gc.collect()` after each task, which would otherwise
walk them every time (about 40 ms a task), and a walk writes to their pages, which the fork would
then copy.

PySpark imports its worker module only after the fork because pyarrow and pandas start threads
when imported, and a fork keeps only the thread that forks: the ones they start (jemalloc's
background thread, OpenBLAS's pool) are turned off or made again in the child by their own fork
handlers. A module that cannot be imported stops the daemon's start, as it would stop every
worker's first task.
"""

from __future__ import annotations

import gc

# Imported for their side effect, before any fork: the modules whose import the workers' first
# tasks pay. Either of squall's stage modules imports the `squall` package, which imports the
# API and its runners (pyarrow, the Kafka and Redis clients); `pyspark.worker` is what PySpark's
# daemon imports in each worker, and it imports pandas (and pyarrow's pandas part) when it reads
# an Arrow function; the Python data source's reader runs a worker module of its own.
import pandas  # noqa: F401
import pyarrow.pandas_compat  # noqa: F401
import pyspark.sql.worker.plan_data_source_read
import pyspark.worker  # noqa: F401
from pyspark import daemon

from squall.runtime.spark import spouts, stage  # noqa: F401


def main() -> None:
    """Freeze what is loaded, then run PySpark's daemon loop (which reads `sys.argv` as is)."""
    gc.collect()
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
