"""A file spout's batch read by Spark: its files as a DataFrame of typed fields.

Parquet files are read with the types of the first file's footer when the driver can read it
(`_parquet_types`): given the schema, Spark lists and reads no footers first. CSV and JSON lines
that are not records are left out, as the driver's read of the same files does. A field whose
type has no typed column leaves the batch to the driver (`FileReads.read` returns None).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame

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


class FileReads:
    """A run's reads of its file spouts' batches into DataFrames of typed fields.

    What does not change from one batch to the next is made once per run, as the JVM's own
    objects: per set of column types, the reader's schema and the select that names and casts
    the typed fields. A batch then costs a few calls into the JVM (the reader, its files, the
    select) instead of about ten per field (each column resolved, cast and renamed through
    PySpark's `Column`: NEXMark's 21 fields, 0.1-0.15 s of each micro-batch's driver time).
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._jvm: Any = spark.sparkContext._jvm
        # (fields, their Spark types) -> the select's Java columns and the fields' variants,
        # or None when a field has no typed column.
        self._selects: dict[tuple[tuple[str, ...], tuple[str, ...]],
                            tuple[Any, dict[str, str]] | None] = {}
        self._schemas: dict[str, Any] = {}  # a parquet read's DDL -> its Java StructType

    def read(self, batch: FileBatch, fields: tuple[str, ...]
             ) -> tuple[DataFrame, dict[str, str]] | None:
        """The files as a DataFrame of typed fields (each field the one column of its type), or
        None when a field's type has no typed column here (the driver then reads them, with the
        same values as the local runner)."""
        spout = batch.spout
        dtypes: dict[str, str] | None = None
        files = self._jvm.PythonUtils.toSeq(list(batch.files))
        if spout.format == "parquet":
            dtypes = _parquet_types(batch.files[0], fields)
            reader = self.spark._jsparkSession.read()
            if dtypes:
                # Given the schema, Spark does not list and read the files' footers first
                # (0.15-0.2 s of each W1 transaction here).
                reader = reader.schema(self._schema(dtypes))
            jdf = reader.parquet(files)
        # Lines that are not records are left out, as the driver's read of the same files
        # does (it reports them: FileBatch.malformed).
        elif spout.format == "csv":
            jdf = self.spark._jsparkSession.read().option("header", "true") \
                .option("mode", "DROPMALFORMED").csv(files)
        else:
            jdf = self.spark._jsparkSession.read().option("mode", "DROPMALFORMED").json(files)
        if dtypes is None:  # Spark's inference, as PySpark's `DataFrame.dtypes` tells it
            dtypes = {f.name: f.dataType.simpleString()
                      for f in DataFrame(jdf, self.spark).schema}
        select = self._select(fields, dtypes)
        if select is None:
            return None
        columns, types = select
        return DataFrame(jdf.select(columns), self.spark), types

    def _schema(self, dtypes: dict[str, str]) -> Any:
        ddl = ", ".join(f"`{f}` {t}" for f, t in dtypes.items())
        made = self._schemas.get(ddl)
        if made is None:
            made = self._schemas[ddl] = self._jvm.org.apache.spark.sql.types.StructType.fromDDL(
                ddl)
        return made

    def _select(self, fields: tuple[str, ...], dtypes: dict[str, str]
                ) -> tuple[Any, dict[str, str]] | None:
        key = (fields, tuple(dtypes.get(f, "") for f in fields))
        if key in self._selects:
            return self._selects[key]
        made: tuple[Any, dict[str, str]] | None = None
        selected, types = [], {}
        for f, dtype in zip(fields, key[1], strict=True):
            variant = _SPARK_VARIANT.get(dtype)
            if variant is None:
                break
            col = F.col(f"`{f}`")
            if dtype != cols.SQL[variant]:  # an int or float column of fewer bits
                col = col.cast(cols.SQL[variant])
            selected.append(col.alias(f"{f}#{variant}")._jc)
            types[f] = variant
        else:
            made = self._jvm.PythonUtils.toSeq(selected), types
        self._selects[key] = made
        return made
