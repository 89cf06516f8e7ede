"""A `mapInArrow` function made once as the JVM's Spark UDF, to apply to many DataFrames.

`DataFrame.mapInArrow` pickles and wraps its function, parses its return type and resolves its
input columns for every DataFrame it builds: about 60 calls into the JVM. A runner whose
batches apply the same function (the Storm runners' stages, a Trident state job's route) makes
its UDF once with `java_udf` and applies it to each batch's Java DataFrame
(`jdf.mapInArrow(udf.apply(columns), False, None)`), the batch's ids travelling as a local
property of its Spark job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql.udf import PythonEvalType, UserDefinedFunction


def java_udf(function: Callable[..., Any], ddl: str, name: str) -> Any:
    """`function` as the JVM's Spark UDF of a `mapInArrow` returning rows of `ddl` (what
    `DataFrame.mapInArrow` makes for each DataFrame)."""
    return UserDefinedFunction(function, returnType=ddl, name=name,
                               evalType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)._judf
