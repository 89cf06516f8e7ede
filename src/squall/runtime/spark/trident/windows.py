"""Trident's event-time windows on Spark: per-(window, key) partial aggregates in the Python
worker, finished on the driver by Arrow.

A window operation with a built-in combiner (`Count`, `Sum`, `Min`, `Max`) ends a Spark path.
Each worker assigns its rows to windows from their timestamps and aggregates per (window start,
key) over its whole partition (`WindowPartials`: Arrow's `group_by` when the columns have one
native type each, a dict in Python otherwise); the partials come to the driver with the job's
one action, and `finish` combines the rows of a (window, key) several partitions produced, again
by Arrow, and cuts them into the window step's segments (`squall.trident.windows`). No Spark
shuffle or JVM aggregation is involved: W2's 1.26 M (window, word) groups cost Spark's JVM
about 2 s to aggregate and sort here, Arrow a tenth of that (docs/design/trident.md). The
driver receives each (window, key) once per partition that saw it; time-ordered input puts a
window in one or two partitions.

Columns of a partial row (`trident.columns` layouts): `$ws` (the window's start), the keys,
`$partial` (the combined value), `$n` (tuples assigned), `$max` (their largest timestamp),
`$part` (the partition that computed it: only windows several partitions hold need combining).

>>> import pyarrow as pa
>>> from squall.trident.operations import Count
>>> from squall.trident.plan import WindowBy, WindowNode
>>> node = WindowNode(cid="w", parents=("s",), fields=("word", "start", "end", "n"),
...     by=WindowBy.EVENT, keys=("word",), input=(), timestamp_field="ts", size=10, slide=10,
...     op=Count(), output=("n",), state="", factory=None)
>>> acc = WindowPartials(node, Count(), {"word": "s"})
>>> acc.add({"word": pa.array(["a", "b", "a"]), "ts": pa.array([1, 2, 15])}, None, ("word", "ts"))
>>> segments, assigned, max_ts = finish(pa.Table.from_batches([acc.result()]), node)
>>> [(w, list(keys), values) for w, keys, values in segments]
[((0, 10), [('a',), ('b',)], [1, 1]), ((10, 20), [('a',)], [1])]
>>> assigned, max_ts
({(0, 10): 2, (10, 20): 1}, 15)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squall.runtime.spark.trident import columns as cols
from squall.runtime.spark.trident import schema as sc
from squall.trident.computed import WindowSegments
from squall.trident.execution import timestamp_of
from squall.trident.plan import WindowNode
from squall.trident.tuple import tuple_type
from squall.trident.windows import KeyColumns, Segment, Window, assign

# The aggregation that combines partials of each built-in (a count's partials add up).
FINAL = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
GROUP_EVERY = 1_000_000  # raw rows grouped together in one Arrow call


def partial_types(node: WindowNode, types: cols.Types, kind: str | None) -> dict[str, str]:
    """The typed columns of a window operation's partial rows."""
    out = {f: k for f, k in types.items() if f in node.keys}
    out.update(dict.fromkeys((sc.WINDOW_START, sc.WINDOW_TUPLES, sc.WINDOW_MAX, sc.WINDOW_PART),
                             "i"))
    if kind is not None:
        out[sc.PARTIAL] = kind
    return out


def partial_fields(node: WindowNode) -> tuple[str, ...]:
    return (sc.WINDOW_START, *node.keys, sc.PARTIAL, sc.WINDOW_TUPLES, sc.WINDOW_MAX,
            sc.WINDOW_PART)


class WindowPartials:
    """One partition's partial aggregates per (window start, key), in the worker."""

    def __init__(self, node: WindowNode, op: Any, types: cols.Types, partition: int = 0) -> None:
        self.node, self.op, self.types, self.partition = node, op, types, partition
        self.keys, self.inputs = node.keys, node.input
        assert node.timestamp_field is not None  # an event-time window's
        self.tsf, self.size, self.slide = node.timestamp_field, node.size, node.slide
        self.sql = op.sql
        self.names = [f"k{i}" for i in range(len(self.keys))]
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.tables: list[pa.Table] = []  # grouped Arrow partials
        # (start, *key) -> [value, tuples, largest timestamp], once a batch needed Python
        self.combined: dict[tuple[Any, ...], list[Any]] | None = None

    # ---- rows in -----------------------------------------------------------------------------
    def add(self, columns: dict[str, Any] | None, rows: list[tuple] | None,
            fields: tuple[str, ...]) -> None:
        if columns is not None:
            columns = {f: c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                       for f, c in columns.items()}
        elif self.combined is None and rows:
            columns = self._typed_columns(rows, fields)  # rows of one type per field
        if self.combined is None and columns is not None and self._arrow_ready(columns):
            self._add_arrow(columns)
            return
        if self.combined is None:
            self.combined = self._python_partials()
        if rows is None:
            assert columns is not None
            lists = [columns[f].to_pylist() if hasattr(columns[f], "to_pylist")
                     else list(columns[f]) for f in fields]
            rows = list(zip(*lists, strict=True)) if lists else []
        self._add_python(rows, fields)

    def _typed_columns(self, rows: Sequence[tuple], fields: tuple[str, ...]
                       ) -> dict[str, Any] | None:
        """Per-tuple functions' rows as Arrow columns, when each field the window reads holds
        values of one native type (else None: the Python path keeps them exactly)."""
        pos = {f: i for i, f in enumerate(fields)}
        out: dict[str, Any] = {}
        values_read = () if self.sql == "count" else self.inputs
        for f in dict.fromkeys((*self.keys, *values_read, self.tsf)):
            i = pos[f]
            values = [r[i] for r in rows]
            kind = cols.infer(values)
            if kind is None:
                return None
            out[f] = pa.array(values, cols.ARROW[kind])
        return out

    def _arrow_ready(self, columns: dict[str, Any]) -> bool:
        ts = columns[self.tsf]
        return isinstance(ts, pa.Array) and ts.type == pa.int64() and ts.null_count == 0 \
            and all(cols.native(columns[k]) for k in self.keys) \
            and (self.sql == "count" or cols.native(columns[self.inputs[0]]))

    def _add_arrow(self, columns: dict[str, Any]) -> None:
        ts = columns[self.tsf]
        t = ts.to_numpy()
        last = t - np.mod(t, self.slide)
        take = None
        if self.size == self.slide:
            starts = last
        else:  # each row in every window [start, start + size) holding it
            m = (self.size - 1) // self.slide + 1
            every = (last[:, None] - np.arange(m - 1, -1, -1) * self.slide).ravel()
            held = every + self.size > np.repeat(t, m)
            starts, take = every[held], pa.array(np.repeat(np.arange(len(t)), m)[held])
        data: dict[str, Any] = {"ws": pa.array(starts, pa.int64())}
        for name, k in zip(self.names, self.keys, strict=True):
            data[name] = columns[k] if take is None else columns[k].take(take)
        if self.sql != "count":
            v = columns[self.inputs[0]]
            data["v"] = v if take is None else v.take(take)
        data["ts"] = ts if take is None else ts.take(take)
        table = pa.table(data)
        self.pending.append(table)
        self.pending_rows += table.num_rows
        if self.pending_rows >= GROUP_EVERY:
            self._group_pending()

    def _group_pending(self) -> None:
        if not self.pending:
            return
        raw = pa.concat_tables(self.pending)
        self.pending, self.pending_rows = [], 0
        by = ["ws", *self.names]
        if self.sql == "count":
            coded = count_by_codes(raw, self.names, self.slide, raw.column("ts"), None)
            if coded is not None:
                self.tables.append(coded)
                return
            g = raw.group_by(by).aggregate([([], "count_all"), ("ts", "max")])
            v = n = g.column("count_all")
        else:
            g = raw.group_by(by).aggregate([("v", self.sql), ([], "count_all"), ("ts", "max")])
            v, n = g.column(f"v_{self.sql}"), g.column("count_all")
        self.tables.append(pa.table({**{c: g.column(c) for c in by}, "v": v, "n": n,
                                     "max": g.column("ts_max")}))

    def _python_partials(self) -> dict[tuple[Any, ...], list[Any]]:
        """The Arrow partials so far, as the Python path's dict (a batch needed Python)."""
        self._group_pending()
        combined: dict[tuple[Any, ...], list[Any]] = {}
        combine = self.op.combine
        for t in self.tables:
            lists = [t.column(c).to_pylist() for c in ("ws", *self.names, "v", "n", "max")]
            for row in zip(*lists, strict=True):
                key, (v, n, mx) = row[:-3], row[-3:]
                _merge(combined, key, v, n, mx, combine)
        self.tables = []
        return combined

    def _add_python(self, rows: Sequence[tuple], fields: tuple[str, ...]) -> None:
        assert self.combined is not None
        pos = {f: i for i, f in enumerate(fields)}
        tsi, kidx = pos[self.tsf], [pos[k] for k in self.keys]
        idx = [pos[f] for f in self.inputs]
        make = tuple_type(self.inputs)
        init, combine, combined = self.op.init, self.op.combine, self.combined
        size, slide, node = self.size, self.slide, self.node
        for r in rows:
            ts = r[tsi]
            if ts.__class__ is not int:
                ts = timestamp_of(ts, node)
            k = tuple([r[i] for i in kidx])
            v = init(make(tuple([r[i] for i in idx])))
            for start, _ in assign(ts, size, slide):
                _merge(combined, (start, *k), v, 1, ts, combine)

    # ---- partials out ------------------------------------------------------------------------
    def result(self) -> pa.RecordBatch:
        fields = partial_fields(self.node)
        if self.combined is not None:
            items = list(self.combined.items())
            width = 1 + len(self.keys)
            data = [[k[i] for k, _ in items] for i in range(width)] + \
                [[e[j] for _, e in items] for j in range(3)] + [[self.partition] * len(items)]
        else:
            self._group_pending()
            if not self.tables:
                return pa.RecordBatch.from_pydict(
                    cols.encode_columns(fields, [[] for _ in fields], self.types),
                    schema=cols.schema(fields, self.types))
            t = pa.concat_tables(self.tables)
            if len(self.tables) > 1:
                coded = count_by_codes(t, self.names, self.slide, t.column("max"),
                                       t.column("n")) if self.sql == "count" else None
                t = coded if coded is not None else _regroup(t, ["ws", *self.names], self.sql)
            data = [*(t.column(c) for c in ("ws", *self.names, "v", "n", "max")),
                    pa.array(np.full(t.num_rows, self.partition, np.int64))]
        return pa.RecordBatch.from_pydict(cols.encode_columns(fields, data, self.types),
                                          schema=cols.schema(fields, self.types))


def count_by_codes(t: pa.Table, names: Sequence[str], slide: int, ts: Any, weights: Any
                   ) -> pa.Table | None:
    """Tuples per (window start `ws`, keys `names`) of `t`, counted by integer codes: each key
    column dictionary-encoded (one hash pass), window and codes folded into one int64, counted
    by `np.bincount` (or a sort when the code space is much larger than the rows); `weights`
    (the `n` of partial rows) are added instead of ones. A row's `max` is the largest of `ts`
    over its window (only the largest over all rows is read). None when the code space does
    not fit an int64. W2's 2 M words in 1.26 M (window, word) groups: 0.16 s against 0.7 s for
    Arrow's hash `group_by` on two columns (docs/design/trident.md).

    >>> t = pa.table({"ws": [0, 0, 10, 0], "k0": ["a", "b", "a", "a"], "ts": [1, 2, 15, 3]})
    >>> c = count_by_codes(t, ["k0"], 10, t.column("ts"), None)
    >>> [tuple(r.values()) for r in c.to_pylist()]  # ws, k0, v, n, max
    [(0, 'a', 2, 2, 3), (0, 'b', 1, 1, 3), (10, 'a', 1, 1, 15)]
    >>> both = pa.concat_tables([c, c])  # partial rows combined: their counts added
    >>> c2 = count_by_codes(both, ["k0"], 10, both.column("max"), both.column("n"))
    >>> [tuple(r.values()) for r in c2.to_pylist()]
    [(0, 'a', 4, 4, 3), (0, 'b', 2, 2, 3), (10, 'a', 2, 2, 15)]
    """
    if t.num_rows == 0:
        return None
    ws = t.column("ws").to_numpy()
    w0 = int(ws.min())
    wi = (ws - w0) // slide
    windows = int(wi.max()) + 1
    key, space = wi.astype(np.int64), windows
    dictionaries: list[tuple[pa.Array, int]] = []
    for name in names:
        col = t.column(name).combine_chunks()
        enc = pc.dictionary_encode(col, null_encoding="encode")
        size = len(enc.dictionary)
        space *= max(size, 1)
        if space >= 2 ** 62:
            return None
        key = key * size + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        dictionaries.append((enc.dictionary, size))
    w = None if weights is None else weights.to_numpy()
    if space <= max(4 * len(key), 1 << 20):
        counts = np.bincount(key, weights=w, minlength=space)
        groups = np.flatnonzero(counts)
        n = counts[groups]
    elif w is None:
        groups, n = np.unique(key, return_counts=True)
    else:
        groups, inverse = np.unique(key, return_inverse=True)
        n = np.bincount(inverse, weights=w)
    n = n.astype(np.int64)
    wmax = np.full(windows, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(wmax, wi, ts.to_numpy())
    out: dict[str, Any] = {}
    rest = groups
    for name, (dictionary, size) in reversed(list(zip(names, dictionaries, strict=True))):
        out[name] = dictionary.take(pa.array(rest % size))
        rest = rest // size
    counted = pa.array(n)
    return pa.table({"ws": pa.array(rest * slide + w0, pa.int64()),
                     **{name: out[name] for name in names}, "v": counted, "n": counted,
                     "max": pa.array(wmax[rest], pa.int64())})


def _merge(combined: dict[tuple[Any, ...], list[Any]], key: tuple[Any, ...], v: Any, n: int,
           mx: int, combine: Any) -> None:
    e = combined.get(key)
    if e is None:
        combined[key] = [v, n, mx]
    else:
        e[0] = combine(e[0], v)
        e[1] += n
        if mx > e[2]:
            e[2] = mx


def _combine_shared(t: pa.Table, by: list[str], sql: str) -> pa.Table:
    """The rows of windows that several partitions hold combined per (window, key); the
    others (time-ordered input: nearly all) are final already."""
    parts = t.group_by("ws").aggregate([("part", "count_distinct")])
    shared = parts.filter(pc.greater(parts.column("part_count_distinct"), 1)).column("ws")
    if len(shared) == 0:
        return t.drop_columns(["part"])
    mask = pc.is_in(t.column("ws"), value_set=shared.combine_chunks())
    alone = t.filter(pc.invert(mask)).drop_columns(["part"])
    return pa.concat_tables([alone, _regroup(t.filter(mask).drop_columns(["part"]), by, sql)])


def _regroup(t: pa.Table, by: list[str], sql: str) -> pa.Table:
    """Partial rows of equal (window, key) combined: values by the built-in's final
    aggregation, counts added, largest timestamps kept."""
    final = FINAL[sql]
    g = t.group_by(by).aggregate([("v", final), ("n", "sum"), ("max", "max")])
    return pa.table({**{c: g.column(c) for c in by}, "v": g.column(f"v_{final}"),
                     "n": g.column("n_sum"), "max": g.column("max_max")})


# ---- the driver --------------------------------------------------------------------------------

def finish(result: pa.Table, node: WindowNode) -> WindowSegments:
    """The partial rows of every partition combined: the window step's segments (one per
    window, in window order), tuples assigned per window, and the largest timestamp."""
    keys, op, size = node.keys, node.op, node.size
    if result.num_rows == 0:
        return WindowSegments.none()
    have = set(result.column_names)
    key_cols = [n for k in keys for n in cols.names(k) if n in have]
    value_col = next((n for n in cols.names(sc.PARTIAL) if n in have), None)
    typed = len([n for n in cols.names(sc.PARTIAL) if n in have]) == 1 and value_col is not None
    if typed:  # combined and ordered by Arrow
        assert value_col is not None
        t = result.select([_int(sc.WINDOW_START), *key_cols, value_col, _int(sc.WINDOW_TUPLES),
                           _int(sc.WINDOW_MAX), _int(sc.WINDOW_PART)])
        by = ["ws", *[f"k{i}" for i in range(len(key_cols))]]
        t = t.rename_columns([*by, "v", "n", "max", "part"])
        t = _combine_shared(t, by, op.sql)
        starts = t.column("ws").to_numpy()
        if len(starts) > 1 and (starts[1:] < starts[:-1]).any():
            # Usually in order already: each partition's partials come by window, and a
            # time-ordered input gives the partitions consecutive windows.
            t = t.sort_by("ws")
            starts = t.column("ws").to_numpy()
        decoded = pa.table({**{n: t.column(f"k{i}") for i, n in enumerate(key_cols)},
                            "v": t.column("v")})
        kvals = [cols.decode(decoded, k) for k in keys]
        values = decoded.column("v").to_pylist()
        counts = t.column("n").to_numpy()
        max_ts = int(pc.max(t.column("max")).as_py())
    else:  # values of several types: combined in Python
        starts, kvals, values, counts, max_ts = _combine_python(result, keys, op)
    if len(starts) == 0:
        return WindowSegments.none()
    rows_of = KeyColumns(kvals, len(starts))
    cuts = [0, *(np.flatnonzero(np.diff(starts)) + 1).tolist(), len(starts)]
    segments: list[Segment] = []
    assigned: dict[Window, int] = {}
    totals = np.add.reduceat(counts, cuts[:-1])
    for j, (i, end) in enumerate(itertools.pairwise(cuts)):
        w = (int(starts[i]), int(starts[i]) + size)
        segments.append((w, rows_of[i:end], values[i:end]))
        assigned[w] = int(totals[j])
    return WindowSegments(segments, assigned, max_ts)


def _int(field: str) -> str:
    """The column of a partial row's integer field."""
    return cols.names(field, {field: "i"})[0]


def _combine_python(result: pa.Table, keys: tuple[str, ...], op: Any
                    ) -> tuple[Any, list[list[Any]], list[Any], Any, int]:
    starts = result.column(_int(sc.WINDOW_START)).to_pylist()
    kvals = [cols.decode(result, k) for k in keys]
    values = cols.decode(result, sc.PARTIAL)
    ns = result.column(_int(sc.WINDOW_TUPLES)).to_pylist()
    maxes = result.column(_int(sc.WINDOW_MAX)).to_pylist()
    combined: dict[tuple[Any, ...], list[Any]] = {}
    for j, start in enumerate(starts):
        key = (start, *(kv[j] for kv in kvals))
        _merge(combined, key, values[j], ns[j], maxes[j], op.combine)
    ordered = sorted(combined.items(), key=lambda kv: kv[0][0])
    return (np.array([k[0] for k, _ in ordered], dtype=np.int64),
            [[k[1 + i] for k, _ in ordered] for i in range(len(keys))],
            [e[0] for _, e in ordered], np.array([e[1] for _, e in ordered], dtype=np.int64),
            max(e[2] for _, e in ordered))
