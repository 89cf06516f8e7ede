"""`buffer_arrays.record_batch` builds the very batch `pa.array` builds, and imports no pandas.

The spouts' reader encodes its segments with it (`spouts`); the segments are read back with
Arrow's IPC reader and decoded as every other batch, so equality with `RowBuffer.to_batch`'s
batch is the contract.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from squall.runtime.spark import row_schema
from squall.runtime.spark.buffer_arrays import column, record_batch

ROWS = [
    (row_schema.TUPLE, 3, 2**63 - 1, "default", 1, b"\x00" * 70, -(2**63), 2**63 - 1, None, 0, 1),
    (row_schema.PACKET, 0, -1, None, -1, b"", None, None, b"more", -5, 2),
    (row_schema.MESSAGES, 2**31 - 1, 0, "ström", -(2**31), None, 7, None, None, 2**40, 3),
    *[(row_schema.TUPLE, i, i * 7, f"s{i}", i, bytes([i]) * i, i if i % 3 else None, None,
       None if i % 2 else b"x", i, i) for i in range(1, 20)],
]


@pytest.mark.parametrize("rows", [ROWS, ROWS[:1], ROWS[1:2], []], ids=["many", "one", "nulls",
                                                                      "none"])
def test_the_batch_is_the_one_pa_array_builds(rows: list[tuple]) -> None:
    reference = row_schema.RowBuffer()
    reference.rows.extend(rows)
    batch = record_batch(rows, row_schema.SCHEMA)
    batch.validate(full=True)
    assert batch.equals(reference.to_batch())
    for i, f in enumerate(row_schema.SCHEMA):  # null counts are part of the buffers given
        assert batch.column(i).null_count == sum(r[i] is None for r in rows), f.name


def test_out_of_range_values_and_types_are_refused() -> None:
    with pytest.raises(OverflowError):
        column([2**63], pa.int64())
    with pytest.raises(OverflowError):
        column([128], pa.int8())
    with pytest.raises(TypeError):
        column([1.5], pa.float64())


def test_a_fresh_process_encodes_without_importing_pandas() -> None:
    code = ("import sys; from squall.runtime.spark import row_schema; "
            "from squall.runtime.spark.buffer_arrays import record_batch; "
            "record_batch([(0, 1, 2, 's', 3, b'v', None, None, None, 4, 5)], row_schema.SCHEMA); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert out.strip() == "False"
