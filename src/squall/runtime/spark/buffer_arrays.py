"""A record batch of a few rows built from Arrow buffers, without pyarrow's Python conversion.

`pa.array` over a Python sequence first asks whether the sequence is a pandas object, and the
first time a process asks, pyarrow imports pandas: 0.2-0.3 s. The spouts' reader is a process of
its own that Spark starts for each query (`spouts`), and its first plan is the batch's critical
path: encoding that plan's segment through `pa.array` made the import a part of every run's
first data batch. The reader's rows are few (packets of up to 65,536 tuples, a ledger row,
reports, ticks), so building their columns here, in Python, from the values' bytes costs
microseconds, and the batch is the one `pa.array` would build.

>>> import pyarrow as pa
>>> schema = pa.schema([("n", pa.int64()), ("s", pa.string()), ("b", pa.binary())])
>>> batch = record_batch([(1, "a", None), (None, "é", b"xy")], schema)
>>> batch.to_pylist()
[{'n': 1, 's': 'a', 'b': None}, {'n': None, 's': 'é', 'b': b'xy'}]
>>> batch.equals(pa.RecordBatch.from_pylist(batch.to_pylist(), schema=schema))
True
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate

import pyarrow as pa

# Fixed-width integer types by the `array` typecode of their width (C's int is 32-bit on every
# platform Arrow supports).
_INTS = {pa.int8(): "b", pa.int16(): "h", pa.int32(): "i", pa.int64(): "q"}
_OFFSET_MAX = 2**31 - 1  # string and binary arrays have 32-bit offsets


def record_batch(rows: Sequence[tuple], schema: pa.Schema) -> pa.RecordBatch:
    """The rows (tuples in the schema's order) as one record batch of `schema`, whose fields
    are signed integers, strings or binaries."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    return pa.RecordBatch.from_arrays(
        [column(values, f.type) for values, f in zip(columns, schema, strict=True)],
        schema=schema)


def column(values: Sequence, type_: pa.DataType) -> pa.Array:
    """One column of `type_` (a signed integer, string or binary type); None is null."""
    n = len(values)
    nulls = sum(v is None for v in values)
    validity = None
    if nulls:
        bits = sum(1 << i for i, v in enumerate(values) if v is not None)
        validity = pa.py_buffer(bits.to_bytes((n + 7) // 8, "little"))
    code = _INTS.get(type_)
    if code is not None:
        data = array(code, [0 if v is None else v for v in values])
        if sys.byteorder == "big":  # Arrow's buffers are little-endian
            data.byteswap()
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)], nulls)
    if type_ == pa.string() or type_ == pa.binary():
        chunks = [b"" if v is None else v.encode() if isinstance(v, str) else bytes(v)
                  for v in values]
        total = sum(map(len, chunks))
        if total > _OFFSET_MAX:
            raise ValueError(f"a {type_} column of {total} bytes exceeds 32-bit offsets")
        offsets = array("i", accumulate(map(len, chunks), initial=0))
        if sys.byteorder == "big":
            offsets.byteswap()
        return pa.Array.from_buffers(
            type_, n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(chunks))], nulls)
    raise TypeError(f"no buffer encoding for {type_}")
