"""Column-wise windows for Storm's windowed bolt: one batch of a task's input at once.

`process_columns(manager, rows, timestamps, source_codes, sources, now_ms)` gives a
`squall.tuple_windows.manager.WindowManager` one batch of a task's input as columns (in arrival
order: each row's event time and the index of its source in `sources`, each source being what
`WindowManager.add_event` takes, `((component, stream), task)`) and leaves the manager exactly as
adding the rows one at a time would (`add_event` in event time, `add` in processing time, all at
`now_ms`): the same expiries, windows and late rows in the same order, and the same state (queue,
watermark tracker, triggers, counters), so a snapshot means the same whichever path wrote it.
`rows` stands for the tuples: it is indexed only for the rows the manager keeps, expires or
reports late, so a host can hand a sequence that builds each tuple when it is asked for it.

How, in event time: the watermark after each row is a running maximum per input stream, the
smallest over the streams less the lag, kept only when it rises (`numpy.maximum.accumulate`),
and a row is late when its timestamp is below the watermark before it. A late row never moves its
stream's largest timestamp (it is below the watermark, so below that timestamp), so the columns
need no feedback from lateness. Windows are evaluated only where the per-tuple path would do
something: with a watermark interval, at the first row that is not late, when the interval has
passed (at most once a batch); with an interval of 0, at the rows where the watermark passes the
next window end (time slides) or rises (count slides). Between two evaluations the rows not late
are inserted into the queue at once (appended when they sort last, as in order they do; merged
otherwise), and each evaluation is the manager's own (`_evaluate_event_time`), so every window,
expiry and count boundary is the per-tuple code's. In processing time every row has the batch's
time: the timer and the time eviction run once, then the rows go in between count triggers.

What is not column-wise (`unsupported` names the reason; `process_columns` logs it once and adds
the rows one at a time through the same manager): a manager that keeps its queue elsewhere
(stateful windowed bolts), an eviction policy other than count and time, source watermarks; per
batch, a timestamp that is not an int within +-2**61, a row from a stream the watermark does not
follow, a processing time before the queue's last.

>>> from squall.duration import Duration
>>> from squall.tuple_windows.spec import WindowSpec
>>> m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True,
...                              watermark_interval_ms=0), streams=["s"])
>>> src = [("s", 1)]
>>> r = process_columns(m, ["a", "b", "c", "d"], [3, 5, 12, 1], [0, 0, 0, 0], src, 0)
>>> for i, a in r.actions: print(i, a)
2 Activation(TupleWindow((0, 10], 2 items, 2 new, 0 expired))
3 Late('d', ts=1, watermark=12)
>>> m.events, m.tracker.watermark, m.late_count
(['a', 'b', 'c'], 12, 1)
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from squall.tuple_windows.manager import Action, Late, WindowManager
from squall.tuple_windows.policies import CountEviction, TimeEviction
from squall.tuple_windows.watermarks import INFINITY

log = logging.getLogger("squall")

# Timestamps beyond this go tuple by tuple (their arithmetic could overflow int64).
_SAFE = 2**61
_NONE = -(2**62)  # "no timestamp yet" in the int64 columns

_reported: set[str] = set()


class Rows(Protocol):
    """The rows of a batch, standing for its tuples: each asked for by its index only."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Any: ...


@dataclass
class ColumnarResult:
    """What a batch produced: `actions`, `(row index, action)` in the order the per-tuple path
    produces them (the row at which it happened); `columnar`, whether the batch went
    column-wise (else row by row, for `reason`)."""

    actions: list[tuple[int, Action]] = field(default_factory=list)
    columnar: bool = True
    reason: str | None = None


def unsupported(manager: WindowManager) -> str | None:
    """Why `manager`'s batches cannot go column-wise, or None if they can."""
    if type(manager) is not WindowManager:
        return f"window manager {type(manager).__name__} (it keeps its own queue)"
    if type(manager.eviction) not in (CountEviction, TimeEviction):
        return f"eviction policy {type(manager.eviction).__name__}"
    if manager.partitions is not None:
        return "source watermarks"
    return None


def _batch_unsupported(manager: WindowManager, timestamps: Sequence[Any], codes: Any,
                       sources: Sequence[tuple[Hashable, int]], now_ms: int) -> str | None:
    if not manager.spec.event_time:
        if manager.ts and manager.ts[-1] > now_ms:
            return "a processing time before the queue's last"
        return None
    try:
        column = np.asarray(timestamps)
    except OverflowError:
        column = None
    if column is None or (len(column) and (
            column.dtype.kind not in "iu" or column.min() <= -_SAFE or column.max() >= _SAFE)):
        return "a timestamp that is not an int within +-2**61"
    assert manager.tracker is not None
    streams = manager.tracker.streams
    used = np.unique(np.asarray(codes, dtype=np.int64)).tolist() if len(codes) else []
    if not streams or any(sources[c][0] not in streams for c in used):
        return "an input stream the watermark does not follow"
    return None


def per_tuple(manager: WindowManager, rows: Rows, timestamps: Sequence[int] | None,
              source_codes: Sequence[int] | None, sources: Sequence[tuple[Hashable, int]],
              now_ms: int) -> ColumnarResult:
    """The rows one at a time (`add_event` in event time, `add` in processing time): the
    reference `process_columns` equals, and its fallback."""
    out: list[tuple[int, Action]] = []
    if manager.spec.event_time:
        assert timestamps is not None and source_codes is not None
        for i in range(len(rows)):
            out.extend((i, a) for a in manager.add_event(rows[i], now_ms, timestamps[i],
                                                          sources[source_codes[i]]))
    else:
        for i in range(len(rows)):
            out.extend((i, a) for a in manager.add(rows[i], now_ms))
    return ColumnarResult(out)


def process_columns(manager: WindowManager, rows: Rows,
                    timestamps: Sequence[int] | None, source_codes: Sequence[int] | None,
                    sources: Sequence[tuple[Hashable, int]], now_ms: int) -> ColumnarResult:
    """A batch of rows (in arrival order) through `manager` column-wise; see the module doc.

    `timestamps` and `source_codes` are read in event time only (None in processing time)."""
    n = len(rows)
    if manager.spec.event_time and (timestamps is None or source_codes is None
                                    or len(timestamps) != n or len(source_codes) != n):
        raise ValueError("columns of different lengths: one timestamp and one source per row")
    reason = unsupported(manager) or _batch_unsupported(
        manager, () if timestamps is None else timestamps,
        () if source_codes is None else source_codes, sources, now_ms)
    if reason is not None:
        if reason not in _reported:
            _reported.add(reason)
            log.info("windowed bolt: batches go tuple by tuple, not column-wise: %s", reason)
        result = per_tuple(manager, rows, timestamps, source_codes, sources, now_ms)
        result.columnar, result.reason = False, reason
        return result
    if n == 0:
        return ColumnarResult()
    if manager.spec.event_time:
        assert timestamps is not None and source_codes is not None
        return _event_time(manager, rows, timestamps, source_codes, sources, now_ms)
    return _processing_time(manager, rows, now_ms)


# ---- processing time -------------------------------------------------------------------------
def _processing_time(manager: WindowManager, rows: Rows, now: int) -> ColumnarResult:
    # The first row runs the timer and the time eviction; for the rows after it, at the same
    # time, both have nothing left to do (the timer's next end is after `now`, and everything
    # older than `now - 1 - length` is gone).
    out: list[tuple[int, Action]] = []
    spec = manager.spec
    manager._advance_processing_time(now)
    out.extend((0, a) for a in manager._flush())
    slide, length = spec.slide_count, spec.length_count
    n, i = len(rows), 0
    while i < n:
        j = n if slide is None else min(n, i + slide - manager.count_since)
        seq = manager.seq
        manager.keys.extend([(now, (), s) for s in range(seq + 1, seq + 1 + j - i)])
        manager.ts.extend([now] * (j - i))
        manager.events.extend(rows[i:j] if isinstance(rows, list) else
                              [rows[k] for k in range(i, j)])
        manager.seq = seq + j - i
        if length is not None and len(manager.events) > length:
            manager._expire(len(manager.events) - length)
        if slide is not None:
            manager.count_since += j - i
            if manager.count_since >= slide:
                manager.count_since = 0
                manager._activate_processing(now)
        out.extend((j - 1, a) for a in manager._flush())
        i = j
    return ColumnarResult(out)


# ---- event time ------------------------------------------------------------------------------
def _event_time(manager: WindowManager, rows: Rows, timestamps: Sequence[int],
                source_codes: Sequence[int], sources: Sequence[tuple[Hashable, int]],
                now: int) -> ColumnarResult:
    tracker = manager.tracker
    assert tracker is not None
    n = len(rows)
    out: list[tuple[int, Action]] = []
    start = tracker.watermark
    if start == INFINITY:  # input is over: every row is late
        for i in range(n):
            out.append((i, Late(rows[i], timestamps[i], start)))
        manager.late_count += n
        return ColumnarResult(out)
    ts = np.asarray(timestamps, dtype=np.int64)
    codes = np.asarray(source_codes, dtype=np.int64)
    # Per input stream, its largest timestamp after each row (from what the tracker had).
    stream_of = [s[0] for s in sources]
    order = list(dict.fromkeys(stream_of[c] for c in dict.fromkeys(source_codes)))
    running: dict[Hashable, Any] = {}
    for stream in order:
        mine = np.isin(codes, [k for k, s in enumerate(stream_of) if s == stream])
        col = np.where(mine, ts, _NONE)
        seen = tracker.max_ts.get(stream)
        if seen is not None:
            col[0] = max(int(col[0]), seen)
        running[stream] = np.maximum.accumulate(col)
    lowest = None
    for stream in tracker.streams:
        if stream in running:
            col = running[stream]
        elif stream in tracker.max_ts:
            col = np.full(n, tracker.max_ts[stream], dtype=np.int64)
        else:
            col = np.full(n, _NONE, dtype=np.int64)
        lowest = col if lowest is None else np.minimum(lowest, col)
    assert lowest is not None
    candidate = np.where(lowest > _NONE, lowest - tracker.lag_ms, _NONE)
    # The watermark after each row: only rising, none until it is above 0 (as the tracker).
    after = np.maximum(np.maximum.accumulate(candidate), 0 if start is None else int(start))
    before = np.empty(n, dtype=np.int64)
    before[0] = 0 if start is None else int(start)
    before[1:] = after[:-1]
    late = (before > 0) & (ts < before)
    kept = np.flatnonzero(~late)
    late_rows = np.flatnonzero(late).tolist()
    # Where windows are evaluated (`WindowManager.add_event`): see the module doc.
    interval = manager.spec.watermark_interval_ms
    evaluate: list[int] | None = None  # the rows, when known in advance
    if interval:
        evaluate = []
        if len(kept):
            if manager.next_eval is None:
                manager.next_eval = now + interval
            elif now >= manager.next_eval:
                manager.next_eval = now + interval
                evaluate = [int(kept[0])]
    kept_after = after[kept]
    time_slide = manager.spec.slide_ms is not None
    inserted = 0  # rows of `kept` already in the queue
    late_out = 0  # rows of `late_rows` already reported
    last_eval = None  # the watermark of the last evaluation in this batch
    k = 0  # the next position in `kept` that may be evaluated
    while True:
        if evaluate is not None:
            if not evaluate:
                break
            e = evaluate.pop()
            k = int(np.searchsorted(kept, e))
        else:
            # The next row, not late, with a watermark, where an evaluation does something.
            if time_slide:
                end = manager.next_end
                floor = 0 if end is None else end
            else:
                floor = 0 if last_eval is None else last_eval
            k = int(np.searchsorted(kept_after[k:], floor, side="right")) + k
            if k >= len(kept):
                break
            e = int(kept[k])
        _insert(manager, rows, kept[inserted:k + 1], ts, codes, sources)
        inserted = k + 1
        while late_out < len(late_rows) and late_rows[late_out] < e:
            i = late_rows[late_out]
            out.append((i, Late(rows[i], timestamps[i], int(before[i]))))
            late_out += 1
        for stream, col in running.items():
            if col[e] > _NONE:
                tracker.max_ts[stream] = int(col[e])
        tracker.watermark = int(after[e]) if after[e] > 0 else None
        last_eval = int(after[e])
        manager._evaluate_event_time()
        out.extend((e, a) for a in manager._flush())
        k += 1
    _insert(manager, rows, kept[inserted:], ts, codes, sources)
    for i in late_rows[late_out:]:
        out.append((i, Late(rows[i], timestamps[i], int(before[i]))))
    for stream, col in running.items():
        if col[-1] > _NONE:
            tracker.max_ts[stream] = int(col[-1])
    tracker.watermark = int(after[-1]) if after[-1] > 0 else None
    manager.late_count += len(late_rows)
    return ColumnarResult(out)


def _insert(manager: WindowManager, rows: Rows, which: Any, ts: Any, codes: Any,
            sources: Sequence[tuple[Hashable, int]]) -> None:
    """Rows `which` (indices, in arrival order) into the queue, each keyed (timestamp, source,
    arrival) as `WindowManager._insert` keys it."""
    m = len(which)
    if not m:
        return
    new_ts = ts[which]
    new_codes = codes[which]
    seq = manager.seq
    manager.seq = seq + m
    ts_list = new_ts.tolist()
    if len(sources) == 1:
        source = sources[0]
        new_keys = [(t, source, s) for t, s in zip(ts_list, range(seq + 1, seq + 1 + m),
                                                    strict=True)]
    else:
        new_keys = [(t, sources[c], s) for t, c, s in zip(
            ts_list, new_codes.tolist(), range(seq + 1, seq + 1 + m), strict=True)]
    idx = which.tolist()
    new_events = [rows[i] for i in idx]
    keys = manager.keys
    if (not keys or new_keys[0] >= keys[-1]) and _sorted(new_ts, new_codes, sources):
        keys.extend(new_keys)
        manager.ts.extend(ts_list)
        manager.events.extend(new_events)
        return
    # Out of order: the queue from the first place a new key goes, merged with the new keys.
    p = bisect_right(keys, min(new_keys))
    tail_keys = keys[p:] + new_keys
    tail_events = manager.events[p:] + new_events
    order = sorted(range(len(tail_keys)), key=tail_keys.__getitem__)
    keys[p:] = [tail_keys[i] for i in order]
    manager.ts[p:] = [tail_keys[i][0] for i in order]
    manager.events[p:] = [tail_events[i] for i in order]


def _sorted(new_ts: Any, new_codes: Any, sources: Sequence[tuple[Hashable, int]]) -> bool:
    """Whether keys (timestamp, source, increasing arrival) are in order."""
    if len(new_ts) < 2:
        return True
    step = np.diff(new_ts)
    if (step < 0).any():
        return False
    ties = np.flatnonzero(step == 0)
    if not len(ties) or len(sources) == 1:
        return True
    rank = np.empty(len(sources), dtype=np.int64)
    rank[sorted(range(len(sources)), key=sources.__getitem__)] = np.arange(len(sources))
    ranked = rank[new_codes]
    return bool((ranked[ties + 1] >= ranked[ties]).all())


__all__ = ["ColumnarResult", "Rows", "per_tuple", "process_columns", "unsupported"]
