"""`ParquetSource` (squall.connectors): every row of a directory of Parquet files once, on both
runners (on Spark read on the executors, a range per input partition), rows of a file without a
declared field's column on the `malformed` stream, plans that read only the footers."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall import BasicBolt, Fields, TopologyBuilder, Values
from squall.connectors import ParquetSource, Range, SourceError
from squall.testing import complete_topology

ROWS_A = [("cow", 1), ("moon", None), (None, 3), ("fig", 4), ("pear", 5)]
ROWS_B = [("x", 10), ("y", 11), ("z", 12)]


def _write(path, rows, row_group_size=2, **extra) -> None:
    columns = {"word": [w for w, _ in rows], "n": pa.array([n for _, n in rows], pa.int64()),
               **extra}
    pq.write_table(pa.table(columns), str(path), row_group_size=row_group_size)


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("parquet")
    _write(d / "a.parquet", ROWS_A, other=[0.5] * len(ROWS_A))  # a column not read
    _write(d / "b.parquet", ROWS_B, row_group_size=10)
    pq.write_table(pa.table({"word": ["lost"]}), str(d / "c.parquet"))  # no column "n"
    _write(d / "_d.parquet", [("never", 0)])  # being written: skipped
    (d / "notes.txt").write_text("not matched by the pattern")
    return d


class Collect(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(tup.source_stream_id, list(tup.values)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("stream", "values"))


@pytest.mark.parametrize("rows_per_range", [1, None])
def test_every_row_once_and_a_missing_column_is_malformed(runner, parquet_dir, rows_per_range):
    b = TopologyBuilder()
    b.set_spout("rows", ParquetSource(str(parquet_dir), ["n", "word"], bounded=True,
                                      rows_per_range=rows_per_range), 2)
    b.set_bolt("collect", Collect()).shuffle_grouping("rows").shuffle_grouping("rows",
                                                                                "malformed")
    result = complete_topology(b.create_topology(), runner=runner)
    got = sorted((s, json.dumps(v)) for s, v in result.tuples("collect"))
    assert got == sorted([
        *(("default", json.dumps([n, w])) for w, n in ROWS_A + ROWS_B),
        ("malformed", json.dumps([
            "c.parquet", 0, '{"word": "lost"}',
            f"{parquet_dir}/c.parquet: row 0: the file has no column 'n' [component 'rows', "
            "stream 'default', field 'n']"])),
    ])
    assert [(e.component, e.error.field) for e in result.errors] == [("rows", "n")]


def test_plans_cut_rows_by_budget_and_range_and_pick_up_new_files(tmp_path):
    source = ParquetSource(str(tmp_path), ["word", "n"], rows_per_range=4)
    _write(tmp_path / "a.parquet", ROWS_A)
    assert source.plan(3) == [Range("a.parquet", 0, 3)]
    assert source.plan(100) == [Range("a.parquet", 3, 5)]
    assert source.plan(100) == []
    _write(tmp_path / "b.parquet", ROWS_B * 3)
    assert [source.plan(100) for _ in range(4)] == [
        [Range("b.parquet", 0, 4)], [Range("b.parquet", 4, 8)], [Range("b.parquet", 8, 9)], []]
    assert list(source.read("b.parquet", 7, 9)) == [(7, ["y", 11]), (8, ["z", 12])]
    assert list(source.read("a.parquet", 1, 3)) == [(1, ["moon", None]), (2, [None, 3])]


def test_a_file_that_is_not_parquet_is_a_source_error_naming_it(tmp_path):
    (tmp_path / "bad.parquet").write_text("plain text")
    with pytest.raises(SourceError, match=r"bad\.parquet is not a Parquet file"):
        ParquetSource(str(tmp_path), ["w"]).plan(10)
    with pytest.raises(SourceError, match="does not exist"):
        ParquetSource(str(tmp_path / "nope"), ["w"]).plan(10)
    with pytest.raises(ValueError, match="rows_per_range must be a positive int"):
        ParquetSource(str(tmp_path), ["w"], rows_per_range=0)
