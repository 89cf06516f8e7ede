"""A file spout's batch read by Spark: its files as a DataFrame of typed fields.

Parquet files are read with the types of the first file's footer when the driver can read it
(`_parquet_types`): given the schema, Spark lists and reads no footers first. CSV and JSON lines
that are not records are left out, as the driver's read of the same files does. A field whose
type has no typed column leaves the batch to the driver (`_read_files` returns None).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from squall.runtime.spark.trident import columns as cols
from squall.trident.spouts import FileBatch

_SPARK_VARIANT = {"string": "s", "bigint": "i", "int": "i", "smallint": "i", "tinyint": "i",
                  "double": "d", "float": "d"}


# Parquet's (Arrow's) types of the columns Spark reads into a typed field.
_PARQUET_SQL = {pa.string(): "string", pa.large_string(): "string", pa.int64(): "bigint",
                pa.int32(): "int", pa.int16(): "smallint", pa.int8(): "tinyint",
                pa.float64(): "double", pa.float32(): "float"}


def _parquet_types(path: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """The Spark types of `fields` from a parquet file's footer when the driver can read it
    and every field has a typed column's type; else None (Spark infers them).

    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "a.parquet")
    >>> pq.write_table(pa.table({"s": ["x"], "n": pa.array([1], pa.int32()), "b": [b"z"]}), f)
    >>> _parquet_types(f, ("n", "s")), _parquet_types(f, ("s", "b")), _parquet_types(f, ("t",))
    ({'n': 'int', 's': 'string'}, None, None)
    """
    if "://" in path and not path.startswith("file:"):
        return None  # a cluster's store: Spark reads it
    try:
        schema = pq.read_schema(path.removeprefix("file:"))
    except (OSError, pa.ArrowException):
        return None
    types = {}
    for f in fields:
        i = schema.get_field_index(f)
        sql = _PARQUET_SQL.get(schema.field(i).type) if i >= 0 else None
        if sql is None:
            return None
        types[f] = sql
    return types


def _read_files(spark: SparkSession, batch: FileBatch, fields: tuple[str, ...]
                ) -> tuple[DataFrame, dict[str, str]] | None:
    """The files as a DataFrame of typed fields (each field the one column of its type), or
    None when a field's type has no typed column here (the driver then reads them, with the
    same values as the local runner)."""
    spout = batch.spout
    dtypes: dict[str, str] | None = None
    if spout.format == "parquet":
        dtypes = _parquet_types(batch.files[0], fields)
        # Given the schema, Spark does not list and read the files' footers first (0.15-0.2 s
        # of each W1 transaction here).
        ddl = ", ".join(f"`{f}` {t}" for f, t in (dtypes or {}).items())
        df = (spark.read.schema(ddl) if ddl else spark.read).parquet(*batch.files)
    # Lines that are not records are left out, as the driver's read of the same files does
    # (it reports them: FileBatch.malformed).
    elif spout.format == "csv":
        df = (spark.read.option("header", True).option("mode", "DROPMALFORMED")
              .csv(list(batch.files)))
    else:
        df = spark.read.option("mode", "DROPMALFORMED").json(list(batch.files))
    if dtypes is None:
        dtypes = dict(df.dtypes)
    selected, types = [], {}
    for f in fields:
        variant = _SPARK_VARIANT.get(dtypes.get(f, ""))
        if variant is None:
            return None
        col = F.col(f"`{f}`")
        if dtypes[f] != cols.SQL[variant]:  # an int or float column of fewer bits
            col = col.cast(cols.SQL[variant])
        selected.append(col.alias(f"{f}#{variant}"))
        types[f] = variant
    return df.select(*selected), types
