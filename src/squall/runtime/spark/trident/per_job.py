"""A transaction's ids as a property of its Spark job, for functions made once per run.

A state job's `mapInArrow` functions (`chain._StateChain`, `state.ApplyState`) are wrapped as
Spark UDFs once per run (`launch.Launcher`), not once per transaction: PySpark's `mapInArrow`
pickles the function, wraps it and resolves each input column through the JVM for every
DataFrame it builds. What changes per transaction, its txid and the accumulator of its counts,
travels as a local property of the driver thread that starts the job (`JOB_PROPERTY`, set by
`set_job`), which Spark hands every task of the job, as the Storm runners' `StageChain` does
with a batch's ids.
"""

from __future__ import annotations

from typing import Any

from pyspark import TaskContext

JOB_PROPERTY = "squall.trident.job"


def set_job(spark_context: Any, txid: int, counts_id: int) -> None:
    """Tells the jobs this thread starts next that they run transaction `txid`, their counts
    going to the accumulator `counts_id`."""
    spark_context.setLocalProperty(JOB_PROPERTY, f"{txid} {counts_id}")


def job_ids() -> tuple[int, int]:
    """In a task: the txid and counts accumulator id of the Spark job running it."""
    context = TaskContext.get()
    value = None if context is None else context.getLocalProperty(JOB_PROPERTY)
    if value is None:
        raise RuntimeError(f"a Trident function made once per run ran in a Spark job without "
                           f"the {JOB_PROPERTY} property (Launcher sets it before the job)")
    txid, counts_id = value.split()
    return int(txid), int(counts_id)
