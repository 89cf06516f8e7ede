"""Trident's spouts: `BatchSpout` (Storm's `IBatchSpout`), `FixedBatchSpout`, and the emitter
that turns any supported spout into one batch of rows per transaction id.

Supported spouts and what they guarantee (Storm's table of spout types and state types):

- a `BatchSpout` with `transactional = True` (it emits exactly the same tuples whenever asked
  for the same batch id, as `FixedBatchSpout` does): transactional;
- a `BatchSpout` otherwise: non-transactional (a replayed batch may differ or be lost);
- `squall.transactional.PartitionedTransactionalSpout`: transactional;
- `squall.transactional.OpaquePartitionedTransactionalSpout`: opaque (a replayed batch may
  differ, but every tuple is in exactly one committed batch).

>>> spout = FixedBatchSpout(["sentence"], 2, ["a"], ["b"], ["c"])
>>> emitter = SpoutEmitter("s", spout, store=None)
>>> emitter.open({})
>>> emitter.emit(1), emitter.emit(2), emitter.emit(1), emitter.exhausted_after(2)
([[('a',), ('b',)]], [[('c',)]], [[('a',), ('b',)]], True)
"""

from __future__ import annotations

import csv
import glob
import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import Any

import pyarrow.parquet as pq

from squall.errors import InvalidTopologyError, SquallError
from squall.topology.declarer import OutputFieldsDeclarer
from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.progress_store import meta_key
from squall.transaction_kernel.spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
    partitions_exhausted,
)

NON_TRANSACTIONAL, TRANSACTIONAL, OPAQUE = "non-transactional", "transactional", "opaque"


class BatchSpout:
    """A spout that emits a whole batch per call (Storm's `IBatchSpout`).

    `emit_batch(batch_id, collector)` emits the batch's tuples with `collector.emit(values)`;
    batch ids are the transaction ids 1, 2, 3, ... and a batch may be asked for again after a
    failure. `ack(batch_id)` says the batch committed. Set `transactional = True` only when a
    batch id always gives the same tuples. `is_exhausted(batch_id)` says a bounded spout has
    nothing at or after `batch_id` (a run of bounded input then ends).
    """

    transactional: bool = False

    def open(self, conf: Mapping[str, Any], context: Any) -> None:
        """Called once before the first batch."""

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement emit_batch")

    def ack(self, batch_id: int) -> None:
        """Batch `batch_id` committed."""

    def is_exhausted(self, batch_id: int) -> bool:
        return False

    def get_output_fields(self) -> Sequence[str]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_output_fields")

    def close(self) -> None: ...


class FixedBatchSpout(BatchSpout):
    """Fixed rows in batches of `max_batch_size` (Storm's `FixedBatchSpout`), transactional:
    batch `b` is always rows `(b-1)*max_batch_size` to `b*max_batch_size`. With `cycle=True` it
    starts again from the first row after the last, for ever."""

    transactional = True

    def __init__(self, fields: Sequence[str], max_batch_size: int, *rows: Sequence[Any],
                 cycle: bool = False) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"FixedBatchSpout: max_batch_size must be a positive int, got "
                             f"{max_batch_size!r}")
        self.fields = tuple(fields)
        for row in rows:
            if len(row) != len(self.fields):
                raise ValueError(f"FixedBatchSpout: row {row!r} does not match the fields "
                                 f"{list(self.fields)}")
        self.rows = [tuple(r) for r in rows]
        self.max_batch_size = max_batch_size
        self.cycle = cycle

    def get_output_fields(self) -> Sequence[str]:
        return self.fields

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        n, size = len(self.rows), self.max_batch_size
        start = (batch_id - 1) * size
        if self.cycle and n:
            for i in range(start, start + size):
                collector.emit(self.rows[i % n])
            return
        for row in self.rows[start:start + size]:
            collector.emit(row)

    def is_exhausted(self, batch_id: int) -> bool:
        return not self.cycle and (batch_id - 1) * self.max_batch_size >= len(self.rows)


class MalformedLine(SquallError):
    """A line of a file spout's input that is not a record: skipped, counted and reported with
    its file, line number (from 1), text and reason; the run goes on."""

    def __init__(self, spout: str, file: str, line: int, text: str, reason: str) -> None:
        super().__init__(f"{file}:{line}: {reason}; the line is skipped: {text[:200]!r}",
                         component=spout, stream="malformed")
        self.file, self.line, self.text, self.reason = file, line, text, reason

    def __reduce__(self) -> Any:
        return (type(self), (self.component, self.file, self.line, self.text, self.reason))


class FileReport(SquallError):
    """A file spout's file read out of name order, or deleted before it was read: counted as an
    error of the stream (`files`), kept in the run's errors and logged with the file's name;
    the run goes on. `reason` is `OUT_OF_ORDER` or `GONE`."""

    def __init__(self, spout: str, file: str, txid: int, reason: str) -> None:
        super().__init__(f"{file}: {reason} (transaction {txid}); {_ADVICE[reason]}",
                         component=spout, stream="files")
        self.file, self.txid, self.reason = file, txid, reason

    def __reduce__(self) -> Any:
        return (type(self), (self.component, self.file, self.txid, self.reason))


OUT_OF_ORDER, GONE = "out of name order", "gone before it was read"
_ADVICE = {
    OUT_OF_ORDER: "it sorts before a file already read and is read by this transaction. Name "
                  "new files so that they sort after the files before them (timestamped or "
                  "numbered names)",
    GONE: "an earlier transaction listed it and it was deleted before one took it: its records "
          "are not in the stream. Delete only files already read"}


def gone(name: str, file: str) -> SquallError:
    return SquallError(
        f"{file} was taken by a transaction of Trident stream {name!r} and is gone: a "
        "transaction reads (and a replay reads again) exactly the files it took. Restore the "
        "file, or start the topology on a new checkpoint; delete only files already committed",
        component=name)


class FileBatchSpout(BatchSpout):
    """Files as batches: each transaction takes the next `files_per_batch` files of `path` (a
    directory, read in file-name order, or a glob), in `format` "parquet", "jsonl" or "csv"
    (CSV values are strings; the first line is a header).

    Transactional: the names a txid took are recorded with the transaction's metadata
    (`SpoutEmitter`), so a replay reads the same files whatever the directory holds by then.
    Each transaction takes the files that sort after the last name taken, so deleting files
    already read (a clean-up) changes nothing. New files should sort after the files already
    read (timestamped or numbered names): one that sorts before the last name taken is still
    read once, by the next transaction, and reported as a `FileReport` ("out of name order");
    a file listed but deleted before a transaction took it is reported too ("gone before it
    was read"). A file a transaction took that is gone when the transaction is read or
    replayed is an error: restore it. With `bounded=True` a run ends once every file present
    has been read; otherwise the directory is watched for new files.

    On Spark the files are read by Spark itself (no row passes through the driver) when the
    stream's first operations run in Spark; elsewhere they are read here with pyarrow.

    A JSON line that does not parse or is not an object, or a CSV row with more or fewer values
    than the header, is skipped, counted and reported as a `MalformedLine` (file, line, text,
    reason) in the run's errors; the batch goes on without it, on a replay too.
    """

    transactional = True

    def __init__(self, path: str, fields: Sequence[str], *, format: str = "parquet",
                 files_per_batch: int = 1, bounded: bool = True) -> None:
        if format not in ("parquet", "jsonl", "csv"):
            raise ValueError(f"FileBatchSpout: format must be 'parquet', 'jsonl' or 'csv', "
                             f"got {format!r}")
        if not isinstance(files_per_batch, int) or files_per_batch < 1:
            raise ValueError(f"FileBatchSpout: files_per_batch must be a positive int, got "
                             f"{files_per_batch!r}")
        self.path, self.fields, self.format = str(path), tuple(fields), format
        self.files_per_batch, self.bounded = files_per_batch, bounded

    def get_output_fields(self) -> Sequence[str]:
        return self.fields

    def list_files(self) -> list[str]:
        if os.path.isdir(self.path):
            names = [os.path.join(self.path, n) for n in os.listdir(self.path)
                     if not n.startswith((".", "_"))]
            return sorted(n for n in names if os.path.isfile(n))
        return sorted(glob.glob(self.path))

    def read_rows(self, files: Sequence[str]) -> list[tuple[Any, ...]]:
        return self.read(files)[0]

    def read(self, files: Sequence[str], name: str = "FileBatchSpout",
             unread: Collection[str] = ()) -> tuple[list[tuple[Any, ...]], list[MalformedLine]]:
        """The rows of `files`, and the lines that are not records (`name`: the stream's).
        `unread`: fields no operation reads, None in every row without being read (Parquet's
        columns are read one by one; the other formats' lines are parsed whole)."""
        rows: list[tuple[Any, ...]] = []
        bad: list[MalformedLine] = []
        for f in files:
            if not os.path.isfile(f):
                raise gone(name, f)
            if self.format == "parquet":
                table = pq.read_table(f, columns=[c for c in self.fields if c not in unread])
                n = table.num_rows
                rows.extend(zip(*(repeat(None, n) if c in unread else table.column(c).to_pylist()
                                  for c in self.fields), strict=True))
            elif self.format == "jsonl":
                with open(f, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        if not line.strip():
                            continue
                        try:
                            obj = json.loads(line)
                        except json.JSONDecodeError as exc:
                            bad.append(MalformedLine(name, f, n, line.rstrip("\n"),
                                                     f"not JSON ({exc.msg})"))
                            continue
                        if not isinstance(obj, dict):
                            bad.append(MalformedLine(name, f, n, line.rstrip("\n"),
                                                     "not a JSON object"))
                            continue
                        rows.append(tuple(obj.get(c) for c in self.fields))
            else:
                with open(f, encoding="utf-8", newline="") as fh:
                    reader = csv.DictReader(fh, restkey=_EXTRA)
                    for r in reader:
                        if _EXTRA in r or None in r.values():
                            values = [v for k, v in r.items() if k != _EXTRA and v is not None]
                            values += r.get(_EXTRA, [])
                            bad.append(MalformedLine(
                                name, f, reader.line_num, ",".join(values),
                                f"{len(values)} values, the header has "
                                f"{len(reader.fieldnames or ())}"))
                            continue
                        rows.append(tuple(r.get(c) for c in self.fields))
        return rows, bad

    def count_rows(self, files: Sequence[str]) -> int:
        if self.format == "parquet":
            return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        return len(self.read_rows(files))

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise SquallError("FileBatchSpout is driven by its SpoutEmitter (files per txid are "
                          "recorded there); run it in a Trident topology")


_EXTRA = "\0extra"  # csv.DictReader's key for the values of a row beyond the header's


@dataclass(frozen=True)
class FileBatch:
    """A file spout's batch before it is read: its files (the Spark runner reads them)."""

    spout: FileBatchSpout
    files: tuple[str, ...]
    name: str = "FileBatchSpout"  # the stream's (txid), for the malformed lines

    @cached_property
    def _read(self) -> tuple[list[tuple[Any, ...]], list[MalformedLine]]:
        return self.spout.read(self.files, self.name)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_read"}  # files, not rows

    def rows(self, unread: Collection[str] = ()) -> list[tuple[Any, ...]]:
        """The batch's rows; `unread`: fields no operation reads, which a Parquet batch leaves
        None without reading their columns (a runner that keeps no operation's output passes
        them: NEXMark's bids, 8 of the flat row's 21 columns, read in under half the time)."""
        if unread and self.spout.format == "parquet":
            return self.spout.read(self.files, self.name, unread)[0]
        return self._read[0]

    def malformed(self) -> list[MalformedLine]:
        """The lines of the batch's files that are not records (Parquet has none)."""
        return [] if self.spout.format == "parquet" else self._read[1]

    def count(self) -> int:
        """How many rows: a Parquet file's footers, otherwise the one read `malformed` made."""
        if self.spout.format == "parquet":
            return self.spout.count_rows(self.files)
        return len(self.rows())


def taken(meta: Any) -> tuple[str, ...]:
    """The files a file spout's txid took, from its metadata (this version's or an earlier
    version's `(start, files)`)."""
    return tuple(meta["files"] if isinstance(meta, dict) else meta[1])


def check_spout(txid: str, spout: Any) -> None:
    if not isinstance(spout, (BatchSpout, PartitionedTransactionalSpout,
                              OpaquePartitionedTransactionalSpout)):
        raise InvalidTopologyError(
            f"new_stream({txid!r}): the spout must be a squall.trident.BatchSpout or a "
            "partitioned transactional or opaque spout of squall.transactional, got "
            f"{type(spout).__name__}", component=txid)


def spout_fields(txid: str, spout: Any) -> tuple[str, ...]:
    if isinstance(spout, BatchSpout):
        return tuple(spout.get_output_fields())
    declarer = OutputFieldsDeclarer()
    spout.declare_output_fields(declarer)
    fields = tuple(declarer.streams["default"].fields)
    # Transactional spouts emit the attempt first (squall.transactional); Trident drops it.
    return fields[1:]


def spout_guarantee(spout: Any) -> str:
    if isinstance(spout, OpaquePartitionedTransactionalSpout):
        return OPAQUE
    if isinstance(spout, PartitionedTransactionalSpout):
        return TRANSACTIONAL
    return TRANSACTIONAL if getattr(spout, "transactional", False) else NON_TRANSACTIONAL


class _Rows:
    """The collector a spout emits to: rows as tuples."""

    def __init__(self, drop_first: bool) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.drop_first = drop_first

    def emit(self, values: Sequence[Any], stream: str = "default") -> None:
        self.rows.append(tuple(values[1:]) if self.drop_first else tuple(values))


class SpoutEmitter:
    """One Trident stream's spout, driven by transaction id (used by both runners).

    `emit(txid)` returns the batch as partitions of rows; a partitioned transactional spout
    stores each partition's batch metadata in `store` (the transactional progress store) before
    returning, so a replay of `txid` re-emits the same batch (or, opaque, starts where the
    previous one ended).
    """

    def __init__(self, txid_name: str, spout: Any, store: Any) -> None:
        self.name, self.spout, self.store = txid_name, spout, store
        self.guarantee = spout_guarantee(spout)
        self.partitioned = isinstance(spout, TransactionalSpout)
        # The last emit's lines that are not records and file reports (a file spout's).
        self.malformed: list[MalformedLine | FileReport] = []
        self.reports: list[FileReport] = []

    def open(self, conf: Mapping[str, Any]) -> None:
        self.spout.open(conf, None)

    def files(self, txid: int) -> FileBatch:
        """A file spout's batch for `txid`: the files recorded for it, or the next ones."""
        assert isinstance(self.spout, FileBatchSpout)
        meta = self.store.get(meta_key(0, txid))
        if meta is None:
            meta = self._take(txid)
        files = taken(meta)
        for f in files:
            if not os.path.isfile(f):
                raise gone(self.name, f)
        return FileBatch(self.spout, files, self.name)

    # A file spout's metadata per txid is `{"files": names taken, "last": the greatest name
    # taken up to this txid}`; checkpoints of earlier versions hold `(start, files)`, where
    # `start` counted the files taken before. Beside it, under LISTING, `(txid, names)`: the
    # files the plan of `txid` accounted for (taken up to it, or listed and not yet taken).
    LISTING = "files/listing"

    def _take(self, txid: int) -> dict[str, Any]:
        """Plan `txid`: the out-of-order files first, then the files after the last name
        taken, up to `files_per_batch`; record them, then what the listing held."""
        assert isinstance(self.spout, FileBatchSpout)
        last = self.cursor(txid - 1)
        listing = self.spout.list_files()
        known = self.accounted(txid - 1)
        late = [] if known is None or last is None else [
            f for f in listing if f <= last and f not in known]
        fresh = [f for f in listing if last is None or f > last]
        files = (late + fresh)[:self.spout.files_per_batch]
        reports = [FileReport(self.name, f, txid, OUT_OF_ORDER)
                   for f in late[:len(files)]]
        if known is not None and last is not None:
            present = set(listing)
            reports += [FileReport(self.name, f, txid, GONE) for f in sorted(known)
                        if f > last and f not in present]
        after = max([f for f in files if last is None or f > last], default=last)
        meta = {"files": files, "last": after}
        self.store.put(meta_key(0, txid), meta)
        waiting = set(late[len(files):])  # late files this one had no room for: still new
        self.store.put(self.LISTING, (txid, [f for f in listing if f not in waiting]))
        self.reports = reports
        return meta

    def cursor(self, txid: int) -> str | None:
        """The greatest file name taken up to `txid` (None: none yet)."""
        while txid >= 1:
            meta = self.store.get(meta_key(0, txid))
            if meta is None:
                return None
            if isinstance(meta, dict):
                return meta["last"]
            if meta[1]:  # an earlier version's (start, files): its greatest, or look further
                return max(meta[1])
            txid -= 1
        return None

    def accounted(self, txid: int) -> set[str] | None:
        """The names taken up to `txid` or listed by its plan and not taken yet; None when no
        plan recorded them (no transaction yet, or a checkpoint of an earlier version)."""
        if txid < 1:
            return set()
        kept = self.store.get(self.LISTING)
        if kept is None:
            return None
        at, names = kept
        out = set(names)
        # A plan records its txid's files before the listing: a crash in between leaves the
        # listing one txid behind, the files that txid took are accounted for all the same.
        for t in range(at + 1, txid + 1):
            meta = self.store.get(meta_key(0, t))
            if meta is not None:
                out.update(taken(meta))
        return out

    def emit(self, txid: int, lazy: bool = False) -> Any:
        """The batch of `txid` as partitions of rows (`lazy`: a file spout's `FileBatch`).
        A file spout's lines that are not records are in `malformed` until the next emit."""
        self.malformed = []
        if isinstance(self.spout, FileBatchSpout):
            self.reports = []
            batch = self.files(txid)
            self.malformed = [*self.reports, *batch.malformed()]
            return batch if lazy else [batch.rows()]
        if not self.partitioned:
            out = _Rows(False)
            self.spout.emit_batch(txid, out)
            return [out.rows]
        spout, store = self.spout, self.store
        attempt = TransactionAttempt(txid, 0)
        parts = []
        for p in range(spout.num_partitions()):
            out = _Rows(True)
            last = None if txid <= 1 else store.get(meta_key(p, txid - 1))
            if self.guarantee == OPAQUE:
                meta = spout.emit_partition_batch(attempt, out, p, last)
                store.put(meta_key(p, txid), meta)
            else:
                meta = store.get(meta_key(p, txid))
                if meta is None:
                    meta = spout.emit_partition_batch_new(attempt, out, p, last)
                    store.put(meta_key(p, txid), meta)
                else:
                    spout.emit_partition_batch(attempt, out, p, meta)
            parts.append(out.rows)
        return parts

    def exhausted_after(self, txid: int) -> bool:
        """Nothing will come after transaction `txid`'s batch (bounded input has ended)."""
        if isinstance(self.spout, FileBatchSpout):
            if not self.spout.bounded:
                return False
            if txid >= 1 and self.store.get(meta_key(0, txid)) is None:
                return False
            last, known = self.cursor(txid), self.accounted(txid)
            return all(last is not None and f <= last and (known is None or f in known)
                       for f in self.spout.list_files())
        if not self.partitioned:
            return bool(self.spout.is_exhausted(txid + 1))
        return partitions_exhausted(self.spout, self.store, txid)

    def ack(self, txid: int) -> None:
        if not self.partitioned:
            self.spout.ack(txid)

    def close(self) -> None:
        self.spout.close()
