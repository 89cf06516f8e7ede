"""The rows that carry tuples, ack messages and reports between stages, as Arrow columns.

One schema for everything that moves: tuples for a task, per-root XOR aggregates for the ledger,
inits from spouts, fails, errors, transactional batch reports and (when testing) captured emits.
Ids are 64-bit unsigned in the core and signed on the wire (Spark has no unsigned long); the
conversion preserves XOR.

>>> to_signed(2**64 - 1), from_signed(-1) == 2**64 - 1
(-1, True)
>>> rows = RowBuffer()
>>> rows.tuple(task=3, key=7, stream="default", src=1, values=["cow"], anchors={5: 9}, ts=0, seq=0)
>>> batch = rows.to_batch()
>>> batch.num_rows, batch.column("task").to_pylist()
(1, [3])
>>> decode_values(batch.column("values")[0].as_py())
['cow']
"""

from __future__ import annotations

import bisect
import marshal
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from squall import tracebacks
from squall.transaction_kernel.reports import BatchReport

TUPLE, ACK, FAIL, RESET, INIT, ERROR, CAPTURE, STATS, PACKET, MESSAGES, ABORT, REPORT = range(12)
SIZE = 12  # a message only (`messages_row`): how many records a range's tree holds
# SPOUT: a spout task's status after its pull on an executor (squall.runtime.spark.pulls), which
# the driver commits with the batch.
SPOUT = 13
TIMED_OUT = -2  # `task` of a FAIL message that tells the driver's ledger a root timed out
# ABORT: a task raised `BatchRetryError` at the end of the batch; the batch must not commit.
# REPORT: a transactional task's `BatchReport` (finished or failed its part of an attempt), which
# the transactional Spark runner reads to decide whether the attempt commits; not an error.

# Tuples travel in packets: one row carries every tuple one task emitted to one task in a stage, so
# Spark moves a few large rows instead of a row per tuple (a row costs the JVM several
# microseconds to convert and shuffle, more than the Python work of most bolts).
PACKET_MAX = 1 << 16

SCHEMA = pa.schema(
    [
        ("kind", pa.int8()),
        ("task", pa.int32()),  # target task (tuple), spout task (init), reporting task (others)
        ("key", pa.int64()),  # routing key: Spark's hash of it lands in the target's partition
        ("stream", pa.string()),
        ("src", pa.int32()),
        ("values", pa.binary()),  # pickled values (tuple, capture) or pickled report
        ("root", pa.int64()),  # first anchor root (tuple) or the root (ack, fail, init)
        ("edge", pa.int64()),  # its edge id (tuple) or the XOR value (ack, init)
        ("more", pa.binary()),  # pickled {root: edge} beyond the first (multi-anchored tuples)
        ("ts", pa.int64()),  # processing time of the batch that planned the spout tuple
        ("seq", pa.int64()),  # emission order within the emitting task
    ]
)
DDL = (
    "kind tinyint, task int, key bigint, stream string, src int, values binary, root bigint, "
    "edge bigint, more binary, ts bigint, seq bigint"
)
# The columns of a `messages_row`, little-endian whatever the machine (executors and driver
# may differ).
_TASKS = np.dtype("<i8")
_IDS = np.dtype("<u8")
MessageColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_MASK = (1 << 64) - 1
_SIGN = 1 << 63
_WRAP = 1 << 64


def to_signed(x: int) -> int:
    return x - (1 << 64) if x >= _SIGN else x


def from_signed(x: int) -> int:
    return x & _MASK


def encode_values(values: Sequence[Any]) -> bytes:
    """A list as bytes (a tuple's values, a packet's items): marshal for plain data (str,
    numbers, lists, ...), pickle otherwise.

    marshal is twice as fast both ways; driver and executors run the same interpreter, which
    marshal requires (and Spark's Python workers already do).

    >>> decode_values(encode_values([("default", 0, None), ["cow", 1], (["moo"], {5: 9})]))
    [('default', 0, None), ['cow', 1], (['moo'], {5: 9})]
    >>> decode_values(encode_values((object,)))
    [<class 'object'>]
    """
    try:
        return b"M" + marshal.dumps(values if values.__class__ is list else list(values))
    except ValueError:
        return b"P" + pickle.dumps(list(values), protocol=5)


def decode_values(blob: bytes) -> list[Any]:
    if blob[0] == 77:  # b"M"
        return marshal.loads(memoryview(blob)[1:])
    return pickle.loads(memoryview(blob)[1:])


def messages_row(items: Sequence[tuple[int, int, int, int]], ts: int) -> tuple:
    """One row carrying a host's ack messages: `(kind, task, root, value)` items (unsigned ids).

    Kinds are ACK (value: the XOR of the host's acks for the root), INIT (task: the spout task,
    value: the XOR of the first edges), FAIL, RESET and SIZE (task: how many records a range's
    tree holds, so its spout counts acks per tuple). Like packets, this keeps a batch's ack
    traffic to a few rows whatever the number of tuple trees. The items travel as four columns
    (`decode_messages`), which the driver folds per root without a Python step per message.

    >>> kinds, tasks, roots, values = decode_messages(messages_row([(INIT, 3, 2**64 - 1, 5)], 0)[5])
    >>> kinds.tolist(), tasks.tolist(), roots.tolist(), values.tolist()
    ([4], [3], [18446744073709551615], [5])
    """
    if not items:
        return _messages(b"", (), (), (), ts)
    kinds, tasks, roots, values = zip(*items, strict=True)
    return _messages(bytes(kinds), tasks, roots, values, ts)


def ack_messages_row(xor: dict[int, int], ts: int) -> tuple:
    """`messages_row` of an ACK item per root of `xor` (root -> the XOR of its acks), built
    without a tuple per root.

    >>> kinds, tasks, roots, values = decode_messages(ack_messages_row({7: 1, 9: 2}, 0)[5])
    >>> kinds.tolist(), tasks.tolist(), roots.tolist(), values.tolist()
    ([1, 1], [-1, -1], [7, 9], [1, 2])
    """
    return _messages(bytes([ACK]) * len(xor), (-1,) * len(xor), xor.keys(), xor.values(), ts)


def _messages(kinds: bytes, tasks: Any, roots: Any, values: Any, ts: int) -> tuple:
    n = len(kinds)
    payload = marshal.dumps((
        kinds,
        np.fromiter(tasks, _TASKS, n).tobytes(),
        np.fromiter(roots, _IDS, n).tobytes(),
        np.fromiter(values, _IDS, n).tobytes(),
    ))
    return (MESSAGES, -1, 0, None, -1, payload, None, None, None, ts, 0)


def decode_messages(blob: bytes) -> MessageColumns:
    """The items of a `messages_row` as columns: kinds (uint8), tasks (int64), roots and values
    (uint64). A row of an earlier version (a list of items, in a spout segment a restart
    replays) is read too.

    >>> import marshal
    >>> [c.tolist() for c in decode_messages(marshal.dumps([(INIT, 3, 7, 5)]))]
    [[4], [3], [7], [5]]
    """
    loaded = marshal.loads(blob)
    if loaded.__class__ is list:
        return decode_messages(messages_row(loaded, 0)[5])
    kinds, tasks, roots, values = loaded
    return (np.frombuffer(kinds, np.uint8), np.frombuffer(tasks, _TASKS),
            np.frombuffer(roots, _IDS), np.frombuffer(values, _IDS))


def report_row(report: BatchReport, *, ts: int, seq: int) -> tuple:
    """A REPORT row carrying a transactional task's `BatchReport` (see `decode_report`).

    >>> from squall.transactional.attempt import TransactionAttempt
    >>> row = report_row(BatchReport(TransactionAttempt(3, 1), 7, True), ts=0, seq=1)
    >>> row[0] == REPORT, row[1], decode_report(row[5]).finished
    (True, 7, True)
    """
    return (REPORT, report.task, 0, None, report.task, pickle.dumps(report, protocol=5), None,
            None, None, ts, seq)


def decode_report(blob: bytes) -> BatchReport:
    """The `BatchReport` of a REPORT row's `values`."""
    report = pickle.loads(blob)
    if not isinstance(report, BatchReport):
        raise TypeError(f"a REPORT row holds {type(report).__name__}, not a BatchReport")
    return report


class Packets:
    """Tuples being emitted by one host, grouped by (source task, target task).

    A pair's items are, in emission order: a header `(stream, ts, at)` whenever the stream, the
    processing time or the event-time position (`at`, squall.partition_watermarks; None when
    unknown) of what follows changes, then one item per tuple: its values (a plain list) when
    unanchored, `(values, anchors)` when anchored. Stream, time and position are thus stored
    once per run of tuples instead of once per tuple, and an unanchored emit appends its values
    list and nothing else: the hot path of every stage.

    Hosts keep `now` and `at` here (`set_now`, `set_at`) and append through `open`:
    `(origin, target) -> items` for the pairs whose current header is the origin's stream at
    `now` and `at` (`channel` opens one).

    >>> class O: task, stream = 1, "default"
    >>> p = Packets({2: 70}, iter(range(5, 100)).__next__)
    >>> p.set_now(9)
    >>> p.channel(O, 2).append(["cow"]); p.open[(O, 2)].append(["moo"])
    >>> [(r[0] == PACKET, r[1], r[2], r[4], decode_values(r[5]), r[9], r[10]) for r in p.rows()]
    [(True, 2, 70, 1, [('default', 9, None), ['cow'], ['moo']], 9, 5)]
    """

    __slots__ = ("_next_seq", "at", "heads", "keys", "marks", "now", "open", "pairs", "seqs")

    def __init__(self, keys: dict[int, int], next_seq: Any) -> None:
        self.pairs: dict[tuple[int, int], list] = {}
        self.keys = keys
        self.seqs: dict[tuple[int, int], int] = {}  # pair -> seq of its packet (row order)
        self.heads: dict[tuple[int, int], tuple] = {}  # pair -> (stream, ts, origin, at)
        self.marks: dict[tuple[int, int], list[int]] = {}  # pair -> where its headers are
        self.open: dict[tuple[Any, int], list] = {}
        self.now = 0
        self.at: int | None = None
        self._next_seq = next_seq

    def __len__(self) -> int:
        return len(self.pairs)

    def set_now(self, now: int) -> None:
        if now != self.now:
            self.now = now
            self.open.clear()  # every pair needs a header with the new time first

    def set_at(self, at: int | None) -> None:
        if at != self.at:
            self.at = at
            self.open.clear()  # every pair needs a header with the new position first

    def channel(self, origin: Any, dst: int) -> list:
        """The items of pair (origin's task, dst), its header made origin's stream at `now`."""
        pair = (origin.task, dst)
        items = self.pairs.get(pair)
        if items is None:
            items = self.pairs[pair] = []
            self.seqs[pair] = self._next_seq()
            self.marks[pair] = []
        head = self.heads.get(pair)
        stream, now, at = origin.stream, self.now, self.at
        if head is None or head[0] != stream or head[1] != now or head[3] != at:
            self.marks[pair].append(len(items))
            items.append((stream, now, at))
        if head is not None:
            self.open.pop((head[2], dst), None)  # one origin at a time appends to a pair
        self.heads[pair] = (stream, now, origin, at)
        self.open[(origin, dst)] = items
        return items

    def send(self, task_id: int, tup: Any) -> None:
        """A host's `send`: the tuple's values, with its anchors if any, into its packet."""
        origin = tup._origin
        items = self.open.get((origin, task_id))
        if items is None:
            items = self.channel(origin, task_id)
        values = tup.values
        if values.__class__ is not list:
            values = list(values)  # marshal takes plain lists only, and receivers expect one
        anchors = tup._anchors
        items.append((values, anchors) if anchors else values)

    def clear(self) -> None:
        """Drop everything buffered."""
        self.pairs.clear()
        self.seqs.clear()
        self.heads.clear()
        self.marks.clear()
        self.open.clear()

    def rows(self) -> list[tuple]:
        """One row per packet, at most `PACKET_MAX` items each; clears the buffer.

        A packet after a pair's first starts with the header in force where it starts (found
        among the pair's header positions, not by scanning the items).

        >>> class O: task, stream = 1, "default"
        >>> p = Packets({2: 70}, iter(range(5, 100)).__next__)
        >>> items = p.channel(O, 2)
        >>> items.extend([[n] for n in range(PACKET_MAX + 1)])
        >>> [decode_values(r[5])[:2] for r in p.rows()]
        [[('default', 0, None), [0]], [('default', 0, None), [65535]]]
        """
        out = []
        for pair, items in self.pairs.items():
            src, dst = pair
            key, seq = self.keys[dst], self.seqs[pair]
            if len(items) <= PACKET_MAX:  # the common case: one packet, no copy
                out.append((PACKET, dst, key, None, src, encode_values(items), None, None,
                            None, items[0][1], seq))
                continue
            marks = self.marks[pair]  # `channel` starts every pair with a header: marks[0] == 0
            chunks = []
            for i in range(0, len(items), PACKET_MAX):
                chunk = items[i:i + PACKET_MAX]
                head = marks[bisect.bisect_right(marks, i) - 1]
                if head != i:
                    chunk.insert(0, items[head])  # every packet starts with the header in force
                chunks.append(chunk)
            # Each item then held by its chunk alone: marshal enters an object referenced more
            # than once in its table of shared objects, which made an item about 1.5-3 times
            # as costly to encode.
            items.clear()
            for n, chunk in enumerate(chunks):
                out.append((PACKET, dst, key, None, src, encode_values(chunk), None, None, None,
                            chunk[0][1], seq + n))
        self.clear()
        return out


class RowBuffer:
    """Rows being built by one task or reader: one Python tuple per row, in schema order."""

    __slots__ = ("append", "rows")

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.append = self.rows.append  # the hot path appends whole rows

    def __len__(self) -> int:
        return len(self.rows)

    def tuple(
        self, *, task: int, key: int, stream: str, src: int, values: Sequence[Any],
        anchors: dict[int, int] | None, ts: int, seq: int,
    ) -> None:
        root, edge, more = split_anchors(anchors)
        self.append((TUPLE, task, key, stream, src, encode_values(values), root, edge, more, ts,
                     seq))

    def report(self, kind: int, *, task: int, key: int, stream: str | None, payload: Any,
               ts: int, seq: int) -> None:
        self.append((kind, task, key, stream, task, pickle.dumps(payload, protocol=5), None,
                     None, None, ts, seq))

    def to_batch(self) -> pa.RecordBatch:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(SCHEMA)
        return pa.RecordBatch.from_arrays(
            [pa.array(col, f.type) for col, f in zip(columns, SCHEMA, strict=True)],
            schema=SCHEMA,
        )


def portable_error(error: BaseException) -> BaseException:
    """The error itself if it pickles (most do), else a RuntimeError with its text; either way
    carrying its traceback's frames, which pickling would lose, for the driver to show."""
    tracebacks.keep_frames(error)
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        stand_in = RuntimeError(f"{type(error).__name__}: {error}")
        frames = getattr(error, tracebacks.FRAMES_ATTR, None)
        if frames is not None:
            setattr(stand_in, tracebacks.FRAMES_ATTR, frames)
        return stand_in


def split_anchors(anchors: dict[int, int] | None) -> tuple[int | None, int | None, bytes | None]:
    """A tuple's {root: edge} as the wire's (root, edge, more) columns."""
    if not anchors:
        return None, None, None
    if len(anchors) == 1:
        ((r, e),) = anchors.items()
        return (r - _WRAP if r >= _SIGN else r), (e - _WRAP if e >= _SIGN else e), None
    items = iter(anchors.items())
    r, e = next(items)
    more = pickle.dumps(dict(items), protocol=5) if len(anchors) > 1 else None
    return to_signed(r), to_signed(e), more


def anchors_of(root: int | None, edge: int | None, more: bytes | None) -> dict[int, int] | None:
    """The {root: edge} map of a tuple row, back in the core's unsigned ids."""
    if root is None:
        return None
    anchors = {from_signed(root): from_signed(edge)}  # type: ignore[arg-type]
    if more:
        anchors.update(pickle.loads(more))
    return anchors
