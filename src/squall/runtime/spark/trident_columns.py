"""How Trident's untyped fields travel in Spark's typed columns: four columns per field.

A field `f` is stored as `f#s` (string), `f#i` (int64), `f#d` (double) and `f#x` (any other
value, pickled); each row sets exactly one of them (all four null for None). A column of one
Python type, the usual case, becomes one Arrow array without a Python loop, and Spark's JVM
can group and aggregate the typed columns; values come back as exactly the Python values that
went in (an int stays an int, bytes stay bytes), so both runners give identical results. Equal
keys of different types (1 and 1.0) are different keys here, as in the durable map states.

>>> import pyarrow as pa
>>> b = pa.RecordBatch.from_pydict(encode_columns(["n"], [[1, "a", None, 2.5, (1, 2)]]),
...                                schema=schema(["n"]))
>>> decode(b, "n")
[1, 'a', None, 2.5, (1, 2)]
>>> words = encode_columns(["w"], [["x", "y"]])
>>> decode(pa.RecordBatch.from_pydict(words, schema=schema(["w"])), "w")
['x', 'y']
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

VARIANTS = (("s", pa.string()), ("i", pa.int64()), ("d", pa.float64()), ("x", pa.binary()))
_NONE = type(None)


def names(field: str) -> list[str]:
    return [f"{field}#{v}" for v, _ in VARIANTS]


def schema(fields: Sequence[str]) -> pa.Schema:
    return pa.schema([(f"{f}#{v}", t) for f in fields for v, t in VARIANTS])


def spark_schema(fields: Sequence[str]) -> str:
    """The same schema as a Spark DDL string (for mapInArrow)."""
    sql = {"s": "string", "i": "bigint", "d": "double", "x": "binary"}
    return ", ".join(f"`{f}#{v}` {sql[v]}" for f in fields for v, _ in VARIANTS)


def encode(values: Any) -> list[pa.Array]:
    """The four arrays of one field's values (a list, or an Arrow array of a native type)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        n = len(arr)
        for j, (_, t) in enumerate(VARIANTS[:3]):
            if arr.type == t or (j == 0 and arr.type == pa.large_string()):
                out = [pa.nulls(n, vt) for _, vt in VARIANTS]
                out[j] = arr.cast(t) if arr.type != t else arr
                return out
        values = arr.to_pylist()
    n = len(values)
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    out = [pa.nulls(n, t) for _, t in VARIANTS]
    if not kinds:
        return out
    if len(kinds) == 1:
        kind = kinds.pop()
        j = 0 if kind is str else 1 if kind is int else 2 if kind is float else 3
        if j < 3:
            try:
                out[j] = pa.array(values, type=VARIANTS[j][1])
                return out
            except (OverflowError, pa.ArrowException):
                pass  # an int beyond int64: pickled below
    # Mixed types (or others): each value in its own variant.
    cols: list[list[Any]] = [[None] * n for _ in VARIANTS]
    for r, v in enumerate(values):
        k = v.__class__
        if k is str:
            cols[0][r] = v
        elif k is int and -(2 ** 63) <= v < 2 ** 63:
            cols[1][r] = v
        elif k is float:
            cols[2][r] = v
        elif v is not None:
            cols[3][r] = pickle.dumps(v, protocol=5)
    return [pa.array(c, type=t) for c, (_, t) in zip(cols, VARIANTS, strict=True)]


def encode_columns(fields: Sequence[str], columns: Sequence[Any]) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    for f, values in zip(fields, columns, strict=True):
        out.update(zip(names(f), encode(values), strict=True))
    return out


def _present(batch: Any, field: str) -> list[tuple[int, Any]]:
    cols = [batch.column(n) for n in names(field)]
    return [(j, c) for j, c in enumerate(cols) if c.null_count < len(c)]


def decode(batch: Any, field: str) -> list[Any]:
    """One field's values as Python values."""
    present = _present(batch, field)
    n = batch.num_rows
    if not present:
        return [None] * n
    if len(present) == 1:
        j, col = present[0]
        if j < 3:
            return list(col.to_pylist())
        loads = pickle.loads
        return [None if b is None else loads(b) for b in col.to_pylist()]
    lists = [(j, c.to_pylist()) for j, c in present]
    out: list[Any] = [None] * n
    for j, values in lists:
        for r, v in enumerate(values):
            if v is not None:
                out[r] = pickle.loads(v) if j == 3 else v
    return out


def decode_arrow(batch: Any, field: str) -> pa.Array:
    """One field as an Arrow array: the native column itself when every value has its type."""
    present = _present(batch, field)
    if len(present) == 1 and present[0][0] < 3:
        col = present[0][1]
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return pa.array(decode(batch, field))
