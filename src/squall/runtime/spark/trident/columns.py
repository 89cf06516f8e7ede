"""How Trident's untyped fields travel in Spark's typed columns: four columns per field.

A field `f` is stored as `f#s` (string), `f#i` (int64), `f#d` (double) and `f#x` (any other
value, pickled); each row sets exactly one of them (all four null for None). A column of one
Python type, the usual case, becomes one Arrow array without a Python loop, and Spark's JVM
can group and aggregate the typed columns; values come back as exactly the Python values that
went in (an int stays an int, bytes stay bytes), so both runners give identical results. Equal
keys of different types (1 and 1.0) are different keys here, as in the durable map states.

A grouping key of a built-in aggregation Spark's JVM runs (partial aggregation off) whose type
is not known travels as one binary column `f#t` instead (`types` maps it to `"t"`): a string's
UTF-8 bytes as they are, any other value behind the byte 0xFF (which UTF-8 never holds) and a
tag (`i` decimal digits, `d` the IEEE double, `x` a pickle), so the JVM groups by one column
rather than four (W1: 0.58 against 0.68 s, docs/design/trident.md) and a string column costs
no copy; equal keys of different types stay different keys, as in the four columns.

A field whose type is known when the job is planned (a column Spark reads from a file, a
`BatchFunction`'s declared `output_types`, a batch built on the driver) travels as its one
column instead (`types` maps it to `"s"`, `"i"` or `"d"`): four columns cost a fifth more Spark
time than one on W1 (docs/design/trident.md). Decoding looks at the columns a batch has, so it
reads either layout.

>>> import pyarrow as pa
>>> b = pa.RecordBatch.from_pydict(encode_columns(["n"], [[1, "a", None, 2.5, (1, 2)]]),
...                                schema=schema(["n"]))
>>> decode(b, "n")
[1, 'a', None, 2.5, (1, 2)]
>>> words = encode_columns(["w"], [["x", "y"]])
>>> decode(pa.RecordBatch.from_pydict(words, schema=schema(["w"])), "w")
['x', 'y']
>>> typed = encode_columns(["w"], [["x", None]], {"w": "s"})
>>> list(typed), decode(pa.RecordBatch.from_pydict(typed), "w")
(['w#s'], ['x', None])
>>> encode_columns(["w"], [["x", 1]], {"w": "s"})
Traceback (most recent call last):
...
TypeError: field 'w' is declared str but holds a int value (1)
"""

from __future__ import annotations

import math
import pickle
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squall.runtime.spark.trident.schema import IPC
from squall.trident.operations import check_type

VARIANTS = (("s", pa.string()), ("i", pa.int64()), ("d", pa.float64()), ("x", pa.binary()))
TAGGED = "t"  # the one binary column of a grouping key of any type
ARROW = {**dict(VARIANTS), TAGGED: pa.binary()}
SQL = {"s": "string", "i": "bigint", "d": "double", "x": "binary", TAGGED: "binary"}
# The Python type of each typed column (a declared type), and back.
PYTHON = {"s": str, "i": int, "d": float}
KIND = {str: "s", int: "i", float: "d"}
_NONE = type(None)
Types = Mapping[str, str]  # field -> "s" | "i" | "d" for the fields that travel as one column


def names(field: str, types: Types | None = None) -> list[str]:
    kind = types.get(field) if types else None
    if kind is not None:
        return [f"{field}#{kind}"]
    return [f"{field}#{v}" for v, _ in VARIANTS]


def stored(field: str) -> list[str]:
    """Every column name a batch may hold `field` in: the four variants, then the tagged one."""
    return [*names(field), f"{field}#{TAGGED}"]


def schema(fields: Sequence[str], types: Types | None = None) -> pa.Schema:
    return pa.schema([(n, ARROW[n[-1]]) for f in fields for n in names(f, types)])


def spark_schema(fields: Sequence[str], types: Types | None = None) -> str:
    """The same schema as a Spark DDL string (for mapInArrow)."""
    return ", ".join(f"`{n}` {SQL[n[-1]]}" for f in fields for n in names(f, types))


def native(arr: Any) -> bool:
    """An Arrow array of one of the typed columns' types (Arrow can group and aggregate it)."""
    return isinstance(arr, (pa.Array, pa.ChunkedArray)) and arr.type in (
        pa.string(), pa.large_string(), pa.int64(), pa.float64())


def pylist(values: Any) -> list[Any]:
    """A column's values as a Python list (an Arrow array's, or any other sequence's)."""
    return values.to_pylist() if hasattr(values, "to_pylist") else list(values)


def num_rows(columns: Mapping[str, Any] | None) -> int:
    """How many rows a batch held as a dict of columns has."""
    return len(next(iter(columns.values()))) if columns else 0


def infer(values: Sequence[Any]) -> str | None:
    """The one typed column all of `values` fit (None allowed), or None for four columns."""
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    if len(kinds) != 1:
        return None
    kind = KIND.get(kinds.pop())
    if kind == "i" and not all(v is None or -(2 ** 63) <= v < 2 ** 63 for v in values):
        return None
    return kind


def encode_typed(field: str, values: Any, kind: str) -> pa.Array:
    """One field's values as its single typed column; a TypeError names a value of another
    type (an int is not a float here, nor a bool an int: values come back as they went in)."""
    target = ARROW[kind]
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        t = arr.type
        if t == target:
            return arr
        if (kind == "s" and (pa.types.is_string(t) or pa.types.is_large_string(t))) or \
                (kind == "i" and pa.types.is_integer(t) and t != pa.uint64()) or \
                (kind == "d" and pa.types.is_floating(t)) or pa.types.is_null(t):
            return arr.cast(target)
        values = arr.to_pylist()
    check_type(field, values, PYTHON[kind])
    try:
        return pa.array(values, type=target)
    except (OverflowError, pa.ArrowException) as exc:
        raise TypeError(f"field {field!r}: {exc}") from exc


_POSITION = {t: j for j, (_, t) in enumerate(VARIANTS)}


def native_array(values: Sequence[Any], checked: type | None = None) -> pa.Array | None:
    """`values` as the array of one typed column when all of them (None aside) are of one
    native type (str, int within int64, float), else None: no value changes type. `checked`
    is that type when the caller has already checked every value against it (`check_type`),
    which saves the pass over the values that finds it.

    >>> native_array(["a", None]).type, native_array([1, 2]).type
    (DataType(string), DataType(int64))
    >>> native_array([1, 2.5]), native_array([2 ** 70]), native_array([True]), native_array([None])
    (None, None, None, None)
    >>> native_array(["a", "b"], checked=str).type, native_array([2 ** 70], checked=int)
    (DataType(string), None)
    """
    kind = KIND.get(checked) if checked is not None else None
    if kind is None:
        kinds = set(map(type, values))
        kinds.discard(_NONE)
        kind = KIND.get(kinds.pop()) if len(kinds) == 1 else None
    if kind is None:
        return None
    try:
        return pa.array(values, type=ARROW[kind])
    except (OverflowError, pa.ArrowException):
        return None  # an int beyond int64


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
    out = [pa.nulls(n, t) for _, t in VARIANTS]
    arr = native_array(values)
    if arr is not None:
        out[_POSITION[arr.type]] = arr
        return out
    # Mixed types, others, an int beyond int64 (pickled) or only None: each value in its
    # own variant.
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


def encode_columns(fields: Sequence[str], columns: Sequence[Any], types: Types | None = None
                   ) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    for f, values in zip(fields, columns, strict=True):
        kind = types.get(f) if types else None
        if kind == TAGGED:
            out[f"{f}#{kind}"] = encode_tagged(values)
        elif kind is not None:
            out[f"{f}#{kind}"] = encode_typed(f, values, kind)
        else:
            out.update(zip(names(f), encode(values), strict=True))
    return out


_EMPTY = pa.scalar(b"", pa.binary())
_INT_TAG = pa.scalar(b"\xffi", pa.binary())


def encode_tagged(values: Any) -> pa.Array:
    """One field's values as tagged bytes (None stays null): a string or int64 Arrow array by
    Arrow, without a Python loop (a string column is only relabelled binary); anything else
    value by value. Equal values give equal bytes whichever way they were encoded; -0.0 is 0.0
    and every NaN one NaN, as Spark groups them.

    >>> encode_tagged(pa.array(["ab", None])).to_pylist(), encode_tagged([3, 2.5]).to_pylist()
    ([b'ab', None], [b'\\xffi3', b'\\xffd\\x00\\x00\\x00\\x00\\x00\\x00\\x04@'])
    >>> [b and untag(b) for b in encode_tagged([7, -0.0, None, (1, "a"), 2 ** 70]).to_pylist()]
    [7, 0.0, None, (1, 'a'), 1180591620717411303424]
    >>> encode_tagged(pa.array([7, None])).to_pylist() == encode_tagged([7, None]).to_pylist()
    True
    """
    arrow = isinstance(values, (pa.Array, pa.ChunkedArray))
    arr = (values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values) if arrow \
        else native_array(values)
    if arr is not None:
        t = arr.type
        if t in (pa.string(), pa.large_string()):
            return arr.cast(pa.binary())  # the same buffers
        if t == pa.int64():
            return pc.binary_join_element_wise(_INT_TAG, arr.cast(pa.string()).cast(pa.binary()),
                                               _EMPTY)
        if arrow:  # (a list of floats is tagged as it is, not through Arrow and back)
            values = arr.to_pylist()
    return pa.array([None if v is None else _tag(v) for v in values], pa.binary())


def _tag(v: Any) -> bytes:
    k = v.__class__
    if k is str:
        return v.encode()
    if k is int and -(2 ** 63) <= v < 2 ** 63:
        return b"\xffi" + str(v).encode()
    if k is float:
        return b"\xffd" + struct.pack("<d", math.nan if v != v else v + 0.0)
    return b"\xffx" + pickle.dumps(v, protocol=5)


def untag(data: bytes) -> Any:
    """The value `encode_tagged` wrote as `data`."""
    if data[:1] != b"\xff":
        return data.decode()
    tag, body = data[1:2], data[2:]
    if tag == b"i":
        return int(body)
    if tag == b"d":
        return struct.unpack("<d", body)[0]
    return pickle.loads(body)


def present(batch: Any, field: str) -> list[tuple[int, Any]]:
    """The columns of `field` the batch has (any layout) that hold a value: (variant index,
    column); the tagged column is index 4."""
    have = set(batch.schema.names)
    cols = [(j, batch.column(n)) for j, n in enumerate(stored(field)) if n in have]
    return [(j, c) for j, c in cols if c.null_count < len(c)]


def decode(batch: Any, field: str) -> list[Any]:
    """One field's values as Python values."""
    have = present(batch, field)
    n = batch.num_rows
    if not have:
        return [None] * n
    if len(have) == 1:
        j, col = have[0]
        if j == 0:
            return strings(col)
        if j < 3:
            return col.to_pylist()  # a new list already
        loads = pickle.loads if j == 3 else untag
        return [None if b is None else loads(b) for b in col.to_pylist()]
    lists = [(j, c.to_pylist()) for j, c in have]
    out: list[Any] = [None] * n
    for j, values in lists:
        for r, v in enumerate(values):
            if v is not None:
                out[r] = pickle.loads(v) if j == 3 else untag(v) if j == 4 else v
    return out


_SHARED_MIN_ROWS = 1 << 17  # smaller columns go the plain way (the sample would not pay)
_SAMPLE = 1 << 15


def strings(col: Any) -> list[Any]:
    """A string column (Arrow array or chunked array) as Python values.

    A large column with few distinct values is decoded by dictionary, each distinct string made
    once: W2's 1.26 M fired (window, word) keys hold 10,000 words, 38 ms against 84 ms for
    `to_pylist`. A column of mostly distinct values goes the plain way, where the dictionary
    would cost four times as much (305 against 74 ms for 1.26 M distinct strings); a sample
    spread over the column decides, and it finds repeats only when the distinct values are
    fewer than about 20,000.

    >>> words = pa.chunked_array([["a", None, "b"] * 50_000, ["c"] * 100])
    >>> distinct = pa.array([str(i) for i in range(150_000)])
    >>> strings(words) == words.to_pylist(), strings(distinct) == distinct.to_pylist()
    (True, True)
    >>> strings(pa.array(["x", "y"]))
    ['x', 'y']
    """
    n = len(col)
    if n >= _SHARED_MIN_ROWS:
        sample = col.take(pa.array(np.arange(0, n, n // _SAMPLE)))
        if 2 * len(set(sample.to_pylist())) < len(sample):
            out: list[Any] = []
            for chunk in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
                enc = pc.dictionary_encode(chunk, null_encoding="encode")
                distinct = np.array(enc.dictionary.to_pylist(), dtype=object)
                out += distinct[enc.indices.to_numpy(zero_copy_only=False)].tolist()
            return out
    return col.to_pylist()


def single_typed(batch: Any, field: str) -> bool:
    """Every value of the field in the batch is of one native type (string, int or float)."""
    have = present(batch, field)
    return len(have) == 1 and have[0][0] < 3


def decode_arrow(batch: Any, field: str) -> pa.Array:
    """One field as an Arrow array: the native column itself when every value has its type."""
    if single_typed(batch, field):
        col = present(batch, field)[0][1]
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return pa.array(decode(batch, field))


# ---- partial aggregates as Arrow IPC cells ----------------------------------------------------
# A worker's partial aggregates reach the driver through the job's one action. As ordinary
# columns they cross Spark's JVM twice (the worker's Arrow batches become rows, `toArrow` makes
# Arrow batches of them again): for W2's 1.26 M (window, word) partials that was more than half
# of the job. As an Arrow IPC stream in one binary cell per partition, the JVM copies a buffer
# and the driver reads the stream back without a copy (docs/design/trident.md, "Partials as
# IPC cells"). Partials are never shuffled or aggregated by Spark
# on this path, so Spark does not need to see their columns.
IPC_SCHEMA = f"`{IPC}` binary"
_CELL_BYTES = 1 << 30  # a binary cell's offsets are 32-bit: a stream per cell stays below 2 GiB


def to_cells(batch: pa.RecordBatch, limit: int = _CELL_BYTES) -> list[pa.RecordBatch]:
    """`batch` as Arrow IPC streams, each in one binary cell (a batch of one row), without
    copying the stream's bytes; a stream of `limit` bytes or more is split in halves.

    >>> b = pa.RecordBatch.from_pydict({"w#s": ["a", "b", "c"], "n#i": [1, 2, 3]})
    >>> cells = to_cells(b)
    >>> [c.num_rows for c in cells], cells[0].schema.names
    ([1], ['$ipc'])
    >>> from_cells(pa.Table.from_batches(cells), b.schema).to_pydict()
    {'w#s': ['a', 'b', 'c'], 'n#i': [1, 2, 3]}
    >>> small = to_cells(b, limit=10)
    >>> len(small), from_cells(pa.Table.from_batches(small), b.schema).to_pydict()
    (3, {'w#s': ['a', 'b', 'c'], 'n#i': [1, 2, 3]})
    >>> none = from_cells(pa.Table.from_batches([], pa.schema([(IPC, pa.binary())])), b.schema)
    >>> none.num_rows, none.schema == b.schema
    (0, True)
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    buf = sink.getvalue()
    if buf.size >= limit and batch.num_rows > 1:
        half = batch.num_rows // 2
        return to_cells(batch.slice(0, half), limit) + to_cells(batch.slice(half), limit)
    offsets = pa.array([0, buf.size], pa.int32()).buffers()[1]
    cell = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, buf])
    return [pa.RecordBatch.from_arrays([cell], [IPC])]


def from_cells(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The batches `to_cells` wrote of `schema`, as one table (the cells of every partition;
    empty when there are none)."""
    tables = [pa.ipc.open_stream(v.as_buffer()).read_all()
              for chunk in table.column(IPC).chunks for v in chunk]
    return pa.concat_tables(tables) if tables else schema.empty_table()
