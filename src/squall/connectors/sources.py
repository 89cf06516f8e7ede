"""Built-in sources: files (JSON lines, CSV), Redis Streams and in-memory partitions.

Each is a `PartitionedSource` (squall.components.partitioned_source: partitions with ordered
offsets, planned where the spout lives and read where the records go; at-least-once by replaying
ranges on Spark, records on the local runner; malformed records routed to the `malformed` stream).

>>> from squall import Fields, TopologyBuilder
>>> from squall.testing import complete_topology
>>> source = MemorySource({"p0": [["a", 1], ["b", 2]], "p1": [["c", 3]]}, Fields("word", "n"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("words", source)
>>> result = complete_topology(b.create_topology())
>>> sorted(result.tuples("words"))
[['a', 1], ['b', 2], ['c', 3]]
>>> sorted(result.acked("words"))
[('p0', 0), ('p0', 1), ('p1', 0)]
"""

from __future__ import annotations

import csv
import fnmatch
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import redis

from squall.components.partitioned_source import (
    PartitionedSource,
    Range,
    Skipped,
    SourceError,
)
from squall.topology.fields import Fields

# ---- in memory ----------------------------------------------------------------------------


class MemorySource(PartitionedSource):
    """Partitioned in-memory data (tests, examples): `{partition: [values, ...]}` or a list of
    lists (partitions named `"0"`, `"1"`, ...). Offsets are list positions; always bounded.

    `records_per_range` caps each range, which on Spark cuts the input into small ranges. The
    message ids of completed and failed trees are kept in `acked` and `failed` (records on the
    local runner, `Range`s on Spark), as `FixedTupleSpout` does.
    """

    def __init__(
        self, partitions: Mapping[str, Sequence[Sequence[Any]]] | Sequence[Sequence[Sequence[Any]]],
        fields: Fields | Iterable[str], *, stream: str = "default",
        records_per_range: int | None = None,
    ) -> None:
        super().__init__(fields, stream=stream, bounded=True)
        if not isinstance(partitions, Mapping):
            partitions = {str(i): rows for i, rows in enumerate(partitions)}
        self.data = {str(p): [list(v) for v in rows] for p, rows in partitions.items()}
        self.records_per_range = records_per_range
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)
        super().fail(msg_id)

    def discover(self) -> list[str]:
        return list(self.data)

    def initial_offset(self, partition: str) -> int:
        return 0

    def end_offset(self, partition: str, start: Any) -> int:
        return len(self.data[partition])

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        size = max(1, budget)
        if self.records_per_range:
            size = min(size, self.records_per_range)
        return min(end, start + size)

    def estimate(self, r: Range) -> int:
        return r.end - r.start

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        rows = self.data[partition]
        for i in range(start, end):
            values = rows[i]
            if len(values) != len(self.fields):
                yield i, self.malformed(values, f"partition {partition!r} offset {i}: "
                                        f"{len(values)} values for fields {self.fields.to_list()}")
            else:
                yield i, values


# ---- files ----------------------------------------------------------------------------------



def _list_files(source: PartitionedSource, directory: str, pattern: str) -> list[str]:
    """The files of `directory` matching `pattern` (names starting with `.` or `_` skipped), in
    name order: the partitions of a directory source."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise SourceError(
            f"source {source.component!r}: directory {directory} does not exist; create "
            "it (new files are picked up as they arrive) or fix the path",
            component=source.component) from None
    return sorted(n for n in names if not n.startswith((".", "_"))
                  and fnmatch.fnmatch(n, pattern)
                  and os.path.isfile(os.path.join(directory, n)))


def _check_keep(source: str, keep: Mapping[str, Iterable[Any]] | None,
                fields: Fields | None) -> dict[str, frozenset[Any]] | None:
    """`keep` as {column: its kept values}; a clear error for anything else (`fields`: the
    columns `keep` may name, None for any)."""
    if keep is None:
        return None
    if not isinstance(keep, Mapping) or not keep:
        raise ValueError(f"{source}: keep must be a non-empty mapping of a column to its kept "
                         f"values, got {keep!r}")
    out = {}
    for column, values in keep.items():
        if not isinstance(column, str) or isinstance(values, (str, bytes)) \
                or not isinstance(values, Iterable):
            raise ValueError(f"{source}: keep maps a column name to an iterable of kept values, "
                             f"got {column!r}: {values!r}")
        if fields is not None and column not in fields:
            raise ValueError(f"{source}: keep names column {column!r}, which is not one of the "
                             f"fields {fields.to_list()}; keep on a declared field")
        out[column] = frozenset(values)
    return out


def _kept(value: Any, values: frozenset[Any]) -> bool:
    try:
        return value in values
    except TypeError:  # unhashable (a JSON list or object): not among hashable kept values
        return False


def _event_time(value: Any) -> int | float | None:
    """A record's event-time value as `SourcePositions.position` takes it (an int or a float
    that is not NaN), else None."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return value


class _FileSource(PartitionedSource):
    """A directory of text files, one record per line; partitions are file names, offsets bytes.

    Files are listed on every plan (new files are picked up as they arrive; names starting with
    `.` or `_` are skipped, so write elsewhere or under such a name and rename into place). A line
    is read once it ends with a newline (in bounded mode the last line of a file needs none).
    Large files are cut into ranges of `bytes_per_range`; a range owns the lines that start in it,
    and holds at most as many lines as the plan's budget (on Spark, what is left of
    `squall.spark.batch.max.tuples` in the micro-batch). A line that is not a record is reported
    with its file and line number (`path:line: reason`); its tuple on the `malformed` stream
    carries its byte offset.

    `keep={field: values}` keeps only the records whose field's value (after parsing) is one of
    `values` (every field named, when there are several): the others are skipped where the
    range is read, before any tuple is made. Their offsets still count (a range's end and the
    offsets a restart resumes from are unchanged), and their event times still move their
    partition's position (`squall.components.partitioned_source.Skipped`), so operators judge
    lateness as if every record had been read.
    """

    assign_by_hash = True

    def __init__(
        self, directory: str, fields: Fields | Iterable[str], *, pattern: str = "*",
        stream: str = "default", bounded: bool = False, bytes_per_range: int = 4 << 20,
        encoding: str = "utf-8", keep: Mapping[str, Iterable[Any]] | None = None,
    ) -> None:
        super().__init__(fields, stream=stream, bounded=bounded)
        self.directory = os.path.abspath(directory)
        self.pattern = pattern
        self.bytes_per_range = bytes_per_range
        self.encoding = encoding
        self.keep = _check_keep(type(self).__name__, keep, self.fields)
        self._counted: dict[Range, int] = {}

    def discover(self) -> list[str]:
        return _list_files(self, self.directory, self.pattern)

    def initial_offset(self, partition: str) -> int:
        return 0

    def end_offset(self, partition: str, start: Any) -> int:
        path = os.path.join(self.directory, partition)
        size = os.path.getsize(path)
        if self.bounded or size <= start:
            return max(size, start)
        # Only whole lines: scan back from the end for the last newline past `start`.
        with open(path, "rb") as f:
            pos = size
            while pos > start:
                step = min(65536, pos - start)
                f.seek(pos - step)
                block = f.read(step)
                i = block.rfind(b"\n")
                if i >= 0:
                    return pos - step + i + 1
                pos -= step
        return start

    def plan(self, budget: int, max_ranges: int | None = None) -> list[Range]:
        self._counted = {}  # the lines of the ranges this plan cuts
        return super().plan(budget, max_ranges)

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        """At most `bytes_per_range` bytes and `budget` lines. The lines are counted (one
        pass over the range's bytes, newlines counted in C) so that the planner's estimate is
        exact and a Spark micro-batch takes no more records than
        `squall.spark.batch.max.tuples`."""
        end = min(end, start + self.bytes_per_range)
        n, stop = self.count_lines(partition, start, end, max(1, budget))
        self._counted[Range(partition, start, stop)] = n
        return stop

    def count_lines(self, partition: str, start: int, end: int, limit: int) -> tuple[int, int]:
        """`(n, stop)`: the lines that start in `[start, stop)`, where `stop` is `end` or the
        start of line `limit + 1`, whichever comes first."""
        n = 1 if start == 0 else 0  # line starts: offset 0, and the byte after each newline
        with open(os.path.join(self.directory, partition), "rb") as f:
            pos = max(start - 1, 0)  # the byte before `start`: a newline makes it a line start
            f.seek(pos)
            while pos < end - 1:
                block = f.read(min(65536, end - 1 - pos))
                if not block:
                    break
                found = block.count(b"\n")
                if n + found > limit:
                    i = -1
                    for _ in range(limit - n + 1):
                        i = block.index(b"\n", i + 1)
                    return limit, pos + i + 1
                n += found
                pos += len(block)
        return n, end

    def estimate(self, r: Range) -> int:
        """The lines of a range (a replayed one's counted again; at least 1)."""
        counted = getattr(self, "_counted", {}).get(r)
        if counted is None:
            try:
                counted = self.count_lines(r.partition, r.start, r.end, r.end - r.start)[0]
            except OSError:
                counted = (r.end - r.start) // 64  # gone: its read reports it
        return max(1, counted)

    def next_offset(self, partition: str, offset: Any) -> int:
        return offset + 1  # the one line that starts at `offset`

    def lines(self, partition: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """`(offset, line)` for every line that starts in `[start, end)`."""
        with open(os.path.join(self.directory, partition), "rb") as f:
            pos = start
            if start > 0:
                # A line that began before `start` belongs to the previous range.
                f.seek(start - 1)
                pos = start - 1 + len(f.readline())
            while pos < end:
                line = f.readline()
                if not line:
                    return
                yield pos, line
                pos += len(line)

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        first: tuple[int, int] | None = None  # (index, line number) once a line needs it
        keep = None if self.keep is None else [(self.fields.field_index(f), values)
                                                for f, values in self.keep.items()]
        at = None if keep is None else self.time_index
        run: int | None = None  # the offset of the first record skipped since the last one out
        latest: int | float | None = None  # their largest event time
        for index, (offset, raw) in enumerate(self.lines(partition, start, end)):
            text = raw.decode(self.encoding, errors="replace").rstrip("\r\n")
            if not text.strip():
                continue
            try:
                values: Any = self.parse(partition, text)
            except _Bad as bad:
                if first is None:
                    first = (index, self.line_number(partition, offset))
                line = first[1] + index - first[0]
                path = os.path.join(self.directory, partition)
                values = self.malformed(text, f"{path}:{line}: {bad.reason}", bad.field)
            else:
                if keep is not None and not all(_kept(values[i], v) for i, v in keep):
                    if run is None:
                        run = offset
                    ts = None if at is None else _event_time(values[at])
                    if ts is not None and (latest is None or ts > latest):
                        latest = ts
                    continue
            if latest is not None:
                yield run, Skipped(latest)
            run = latest = None
            yield offset, values
        if latest is not None:
            yield run, Skipped(latest)

    def line_number(self, partition: str, offset: int) -> int:
        """The number (from 1) of the line that starts at byte `offset`: counted from the
        file's start, only for a range with a record that cannot be read."""
        newlines = 0
        with open(os.path.join(self.directory, partition), "rb") as f:
            left = offset
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    break
                newlines += block.count(b"\n")
                left -= len(block)
        return newlines + 1

    def parse(self, partition: str, text: str) -> list[Any]:
        """The values of one line; raises `_Bad` for a line that is not a record."""
        raise NotImplementedError


class _Bad(Exception):
    """A line that is not a record: why, and the field at fault."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.field = reason, field


class JsonLinesSource(_FileSource):
    """A directory of JSON-lines files: each line an object; values are its declared fields.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "a.jsonl"), "w").write('{"w": "x", "n": 1}\\n{"w": "y"}\\n')
    >>> src = JsonLinesSource(d, ["w", "n"], bounded=True)
    >>> [(off, v if isinstance(v, list) else str(v).replace(d, "D"))
    ...  for off, v in src.read("a.jsonl", 0, 31)]
    [(0, ['x', 1]), (19, "D/a.jsonl:2: missing field 'n' [component 'JsonLinesSource', \
stream 'default', field 'n']")]
    """

    def parse(self, partition: str, text: str) -> list[Any]:
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise _Bad(f"not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise _Bad(f"a JSON {type(obj).__name__}, not an object")
        values = []
        for name in self.fields:
            if name not in obj:
                raise _Bad(f"missing field {name!r}", name)
            values.append(obj[name])
        return values


class CsvSource(_FileSource):
    """A directory of CSV files (one record per line; no newlines inside quoted values).

    Values are strings unless `types` maps a field to a converter (`{"n": int}`). With
    `header=True` the first line of each file names the columns, matched to the fields by name;
    without it, columns are the fields in order.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "a.csv"), "w").write("n,w\\n1,x\\ntwo,y\\n")
    >>> src = CsvSource(d, ["w", "n"], header=True, types={"n": int}, bounded=True)
    >>> [(off, v if isinstance(v, list) else str(v).replace(d, "D"))
    ...  for off, v in src.read("a.csv", 0, 14)]
    [(4, ['x', 1]), (8, "D/a.csv:3: field 'n': invalid literal for int() with base 10: \
'two' [component 'CsvSource', stream 'default', field 'n']")]
    """

    def __init__(
        self, directory: str, fields: Fields | Iterable[str], *, header: bool = False,
        types: Mapping[str, Any] | None = None, delimiter: str = ",", **kwargs: Any,
    ) -> None:
        super().__init__(directory, fields, **kwargs)
        self.header = header
        self.types = dict(types or {})
        self.delimiter = delimiter
        # partition -> the column of each field, or the first field the header lacks
        self._columns: dict[str, list[int] | str] = {}

    def _row(self, text: str) -> list[str]:
        return next(csv.reader([text], delimiter=self.delimiter))

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        if self.header:
            with open(os.path.join(self.directory, partition), "rb") as f:
                first = f.readline()
            names = self._row(first.decode(self.encoding, errors="replace").rstrip("\r\n"))
            missing = [n for n in self.fields if n not in names]
            self._columns[partition] = (
                missing[0] if missing else [names.index(n) for n in self.fields])
            start = max(start, len(first))
        yield from super().read(partition, start, end)

    def parse(self, partition: str, text: str) -> list[Any]:
        try:
            row = self._row(text)
        except csv.Error as exc:
            raise _Bad(str(exc)) from None
        if self.header:
            columns = self._columns[partition]
            if isinstance(columns, str):
                raise _Bad(f"the header has no column {columns!r}", columns)
            if max(columns) >= len(row):
                raise _Bad(f"{len(row)} columns")
            row = [row[i] for i in columns]
        elif len(row) != len(self.fields):
            raise _Bad(f"{len(row)} columns for fields {self.fields.to_list()}")
        for i, name in enumerate(self.fields):
            convert = self.types.get(name)
            if convert is not None:
                try:
                    row[i] = convert(row[i])
                except (TypeError, ValueError) as exc:
                    raise _Bad(f"field {name!r}: {exc}", name) from None
        return row


class ParquetSource(PartitionedSource):
    """A directory of Parquet files; partitions are file names, offsets row positions in a file.

    Each record is a row's values of the declared fields (columns read by name, other columns
    not read), as Python values (`pyarrow`'s `to_pylist`: ints, floats, strings, None for nulls,
    `datetime` for timestamps). Files are listed on every plan as `JsonLinesSource`'s are (names
    starting with `.` or `_` skipped): a Parquet file is whole once its footer is written, so
    write it elsewhere or under such a name and rename it into place. A file's rows come from
    its footer, so a plan reads no data; a range holds at most the plan's budget of rows and
    `rows_per_range`. A range is read by row groups, only the columns of the fields, and handed
    on as rows without parsing; the last row group read is kept, so the local runner's small
    ranges read each row group once. A file without a declared field's column sends each of its
    rows to the `malformed` stream naming the field; a file that is not Parquet is a source
    error naming it.

    `keep={column: values}` reads only the rows whose column (any column of the files, a field
    or not) holds one of `values` (every column named, when there are several): each row group
    is filtered in Arrow (`pyarrow.compute.is_in` on the column) before any of its rows become
    Python values, so the rows skipped cost no `to_pylist` and no tuple. Offsets stay row
    positions of the file (a skipped row still advances them: a range's end, replays and
    restarts are unchanged). When operators take their watermark from this source, the skipped
    rows' event times still count: each run of them gives a `Skipped` marker with their
    largest event time (computed column-wise), which the reader takes into the partition's
    position, so a row after them is judged late exactly as if they had been read.

    >>> import tempfile, os
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"w": ["x", "y", None], "n": [1, 2, 3], "z": [0.5] * 3}),
    ...                os.path.join(d, "a.parquet"), row_group_size=2)
    >>> src = ParquetSource(d, ["n", "w"], bounded=True)
    >>> src.discover(), src.end_offset("a.parquet", 0)
    (['a.parquet'], 3)
    >>> list(src.read("a.parquet", 1, 3))
    [(1, [2, 'y']), (2, [3, None])]
    >>> kept = ParquetSource(d, ["w", "n"], bounded=True, keep={"w": ["x", None]})
    >>> list(kept.read("a.parquet", 0, 3))
    [(0, ['x', 1]), (2, [None, 3])]
    >>> kept.time_index = 1  # the runner carries positions by field "n": runs are marked
    >>> list(kept.read("a.parquet", 0, 3))
    [(0, ['x', 1]), (1, Skipped(2)), (2, [None, 3])]
    """

    assign_by_hash = True

    def __init__(
        self, directory: str, fields: Fields | Iterable[str], *, pattern: str = "*.parquet",
        stream: str = "default", bounded: bool = False, rows_per_range: int | None = None,
        records_per_call: int = 1000, keep: Mapping[str, Iterable[Any]] | None = None,
    ) -> None:
        super().__init__(fields, stream=stream, bounded=bounded,
                         records_per_call=records_per_call)
        self.keep = _check_keep("ParquetSource", keep, None)
        if rows_per_range is not None and (not isinstance(rows_per_range, int)
                                           or isinstance(rows_per_range, bool)
                                           or rows_per_range < 1):
            raise ValueError(f"ParquetSource: rows_per_range must be a positive int or None, "
                             f"got {rows_per_range!r}")
        self.directory = os.path.abspath(directory)
        self.pattern = pattern
        self.rows_per_range = rows_per_range
        # the last row group read: ((file, row group, footer size, what was read), its rows)
        self._group: tuple[tuple[Any, ...], Any] | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_group"] = None  # rows read stay where they were read
        return state

    def discover(self) -> list[str]:
        return _list_files(self, self.directory, self.pattern)

    def _file(self, partition: str) -> pq.ParquetFile:
        path = os.path.join(self.directory, partition)
        try:
            return pq.ParquetFile(path)
        except pa.ArrowException as exc:
            raise SourceError(
                f"source {self.component!r}: {path} is not a Parquet file ({exc}); remove it "
                f"from {self.directory} or narrow the pattern {self.pattern!r}",
                component=self.component) from None

    def initial_offset(self, partition: str) -> int:
        return 0

    def end_offset(self, partition: str, start: Any) -> int:
        return max(start, self._file(partition).metadata.num_rows)

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        return min(end, start + max(1, min(budget, self.rows_per_range or budget)))

    def estimate(self, r: Range) -> int:
        return max(1, r.end - r.start)

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        if start >= end:
            return
        file = self._file(partition)
        names = set(file.schema_arrow.names)
        missing = next((f for f in (*self.fields, *(self.keep or ())) if f not in names), None)
        if self.keep is not None and missing is None:
            yield from _one_marker_a_run(self._read_kept(file, partition, start, end))
            return
        first = 0
        for group in range(file.metadata.num_row_groups):
            size = file.metadata.row_group(group).num_rows
            if first + size > start and first < end:
                rows = self._rows(file, partition, group, missing)
                for offset in range(max(start, first), min(end, first + size)):
                    values = rows[offset - first]
                    if missing is not None:
                        values = self.malformed(
                            values, f"{os.path.join(self.directory, partition)}: row {offset}: "
                            f"the file has no column {missing!r}", missing)
                    yield offset, values
            first += size
            if first >= end:
                return

    def _rows(self, file: pq.ParquetFile, partition: str, group: int,
              missing: str | None) -> list[Any]:
        """Row group `group`'s rows: lists of the fields' values (the file's columns when a
        field's column is missing: the record the malformed stream carries)."""
        key = (partition, group, file.metadata.serialized_size)  # a file put in its place differs
        if self._group is not None and self._group[0] == key:
            return self._group[1]
        columns = None if missing is not None else self.fields.to_list()
        table = file.read_row_group(group, columns=columns)
        rows: list[Any] = list(map(list, zip(*(c.to_pylist() for c in table.columns),
                                             strict=True)))
        if missing is not None:
            rows = [dict(zip(table.column_names, row, strict=True)) for row in rows]
        self._group = (key, rows)
        return rows

    def _read_kept(self, file: pq.ParquetFile, partition: str, start: int,
                   end: int) -> Iterator[tuple[Any, Any]]:
        first = 0
        for group in range(file.metadata.num_row_groups):
            size = file.metadata.row_group(group).num_rows
            if first + size > start and first < end:
                yield from self._read_kept_group(file, partition, group, first,
                                                 max(start, first) - first,
                                                 min(end, first + size) - first)
            first += size
            if first >= end:
                return

    def _read_kept_group(self, file: pq.ParquetFile, partition: str, group: int, first: int,
                         lo: int, hi: int) -> Iterator[tuple[Any, Any]]:
        """The kept rows of row group `group` at its positions `[lo, hi)` (the group's first
        row is offset `first`), each run of skipped rows before them marked when positions are
        carried."""
        kept, rows, times = self._kept_rows(file, partition, group)
        a, b = (int(i) for i in np.searchsorted(kept, [lo, hi]))
        if times is None:
            for j in range(a, b):
                yield first + int(kept[j]), rows[j]
            return
        # Segments [lo, k_a], [k_a + 1, k_a+1], ..., [k_b-1 + 1, hi): the skipped rows before
        # each kept row (its own time masked out), then those after the last one.
        starts = np.concatenate(([lo], kept[a:b] + 1))
        if starts[-1] >= hi:
            starts = starts[:-1]
        none = times.dtype.type(_NO_TIME[times.dtype.kind])
        latest = np.fmax.reduceat(times[:hi], starts).tolist()
        for i, segment in enumerate(starts.tolist()):
            if latest[i] != none:
                yield first + segment, Skipped(latest[i])
            if a + i < b:
                yield first + int(kept[a + i]), rows[a + i]

    def _kept_rows(self, file: pq.ParquetFile, partition: str, group: int,
                   ) -> tuple[Any, list[Any], Any]:
        """Row group `group` filtered by `keep`: the kept rows' positions in the group (sorted),
        their values, and (when positions are carried and the event-time column is numeric)
        the group's event times with the kept rows and nulls masked out, else None."""
        at = self.time_index
        key = (partition, group, file.metadata.serialized_size, at)
        if self._group is not None and self._group[0] == key:
            return self._group[1]
        keep = self.keep
        assert keep is not None  # only a source with `keep` reads kept rows
        fields = self.fields.to_list()
        table = file.read_row_group(group, columns=list(dict.fromkeys([*fields, *keep])))
        mask = None
        for column, values in keep.items():
            data = table.column(column)
            try:
                value_set = pa.array(list(values), type=data.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise SourceError(
                    f"source {self.component!r}: keep's values for column {column!r} are not "
                    f"of its type {data.type} in {os.path.join(self.directory, partition)} "
                    f"({exc}); give values of that type", component=self.component) from None
            is_kept = pc.is_in(data, value_set=value_set)
            mask = is_kept if mask is None else pc.and_(mask, is_kept)
        kept = np.flatnonzero(mask.to_numpy(zero_copy_only=False))  # type: ignore[union-attr]
        chosen = table.select(fields).take(pa.array(kept, pa.int64()))
        rows: list[Any] = list(map(list, zip(*(c.to_pylist() for c in chosen.columns),
                                             strict=True)))
        times = None
        if at is not None:
            column = table.column(fields[at])
            kind = "i" if pa.types.is_integer(column.type) else \
                "f" if pa.types.is_floating(column.type) else None
            if kind is not None:
                dtype = np.int64 if kind == "i" else np.float64
                times = column.cast(pa.from_numpy_dtype(dtype)).fill_null(
                    _NO_TIME[kind]).to_numpy()
                times = np.array(times, dtype=dtype)  # writable: the kept rows are masked out
                if kind == "f":
                    times[np.isnan(times)] = _NO_TIME[kind]
                times[kept] = _NO_TIME[kind]
        value = (kept, rows, times)
        self._group = (key, value)
        return value


def _one_marker_a_run(items: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """`items` with consecutive `Skipped` markers (a run cut by row groups) made one."""
    held: tuple[Any, Skipped] | None = None
    for offset, values in items:
        if values.__class__ is Skipped:
            held = (offset, values) if held is None else (
                held[0], Skipped(max(held[1].max_ts, values.max_ts)))
            continue
        if held is not None:
            yield held
            held = None
        yield offset, values
    if held is not None:
        yield held


# A masked event time per numpy kind: below every time (a NaN, no time either, becomes it).
_NO_TIME: dict[str, Any] = {"i": np.iinfo(np.int64).min, "f": -np.inf}


# ---- Redis Streams ------------------------------------------------------------------------------


class RedisStreamSource(PartitionedSource):
    """Redis Streams, one stream key per partition; offsets are entry ids `(ms, seq)`.

    Each entry's fields (decoded as UTF-8) give the tuple's values by the declared field names.
    `start="0"` reads each stream from its beginning, `"$"` from the entries added after the
    first plan. Planning asks each stream for its last id (one `XREVRANGE ... COUNT 1`); the
    records are read with `XRANGE` by whoever reads the range.
    """

    def __init__(
        self, streams: Sequence[str], fields: Fields | Iterable[str], *, host: str = "127.0.0.1",
        port: int = 6379, password: str | None = None, db: int = 0, timeout: float = 5.0,
        start: str = "0", stream: str = "default", bounded: bool = False, page: int = 1000,
    ) -> None:
        super().__init__(fields, stream=stream, bounded=bounded)
        self.streams = list(streams)
        self.host, self.port, self.password, self.db = host, port, password, db
        self.timeout = timeout
        self.start = start
        self.page = page
        self._client: Any = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None  # connections do not travel; each process opens its own
        return state

    def client(self) -> Any:
        if self._client is None:
            self._client = redis.Redis(host=self.host, port=self.port, password=self.password,
                                       db=self.db, socket_timeout=self.timeout,
                                       socket_connect_timeout=self.timeout)
        return self._client

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.AuthenticationError as exc:
            raise SourceError(
                f"source {self.component!r}: Redis at {self.host}:{self.port} refused the "
                f"credentials ({exc}); check the password", component=self.component) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._client = None
            raise SourceError(
                f"source {self.component!r}: cannot reach Redis at {self.host}:{self.port} to "
                f"{what} ({exc}); start redis-server or fix host/port. Nothing is lost: the "
                "offsets not yet read are read when it is back", component=self.component,
            ) from None

    def discover(self) -> list[str]:
        return list(self.streams)

    def initial_offset(self, partition: str) -> tuple[int, int]:
        if self.start == "$":
            return self.end_offset(partition, (0, 0))
        return _parse_id(self.start)

    def end_offset(self, partition: str, start: Any) -> tuple[int, int]:
        last = self._call(f"read the last id of stream {partition!r}",
                          self.client().xrevrange, partition, "+", "-", count=1)
        if not last:
            return start
        ms, seq = _parse_id(last[0][0])
        return max(start, (ms, seq + 1))

    def next_offset(self, partition: str, offset: Any) -> tuple[int, int]:
        return (offset[0], offset[1] + 1)

    def read(self, partition: str, start: Any, end: Any) -> Iterator[tuple[Any, Any]]:
        low = f"{start[0]}-{start[1]}"
        high = f"({end[0]}-{end[1]}"  # exclusive end (Redis 6.2+)
        while True:
            entries = self._call(f"read stream {partition!r}", self.client().xrange,
                                 partition, low, high, count=self.page)
            for entry_id, data in entries:
                offset = _parse_id(entry_id)
                yield offset, self._values(partition, offset, data)
            if len(entries) < self.page:
                return
            ms, seq = _parse_id(entries[-1][0])
            low = f"({ms}-{seq}"

    def _values(self, partition: str, offset: tuple[int, int], data: dict) -> Any:
        decoded = {(k.decode() if isinstance(k, bytes) else k):
                   (v.decode() if isinstance(v, bytes) else v) for k, v in data.items()}
        values = []
        for name in self.fields:
            if name not in decoded:
                return self.malformed(decoded, f"stream {partition!r} entry "
                                      f"{offset[0]}-{offset[1]}: missing field {name!r}",
                                      field=name)
            values.append(decoded[name])
        return values


def _parse_id(entry_id: Any) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
