"""Column-wise windows: one batch of an operator task's input applied to its pane engine at once.

`process_columns(engine, keys, timestamps, values, now, delay)` gives a
`squall.panes.engine.WindowedEngine` a batch of tuples as columns (a key, a timestamp and a value
per tuple, in arrival order) with the watermark generated from event time (`delay` behind the
largest timestamp, the operators' `watermark_delay`), and leaves the engine exactly as feeding
the tuples one at a time would (`WindowedEngine.process(..., delay=)`, then `advance` where the
generated watermark makes something due): the same panes in the same order, the same late
tuples judged against the same watermark, the same windows, keys, counters and heaps, so a
snapshot is the same whichever path wrote it.

How: the watermark before and after each tuple is a running maximum (`numpy.maximum.accumulate`)
and each tuple's lateness a comparison with it. A pane can fire only at a *boundary*: the first
tuple whose generated watermark reaches the engine's `due` (the smallest window end or purge
time scheduled, which the tuples before it lower as they create windows: a running minimum), or
the first tuple at which a (key, window)'s count trigger reaches its count (its count so far
plus a cumulative count in the batch). Between two boundaries nothing fires, so the tuples there
are grouped by (key, window) and each group accumulated in one step (a count, an integer sum,
min or max as one numpy reduction; any other accumulation folded over the group's values in
arrival order, which is exactly what the per-tuple path computes), the windows and keys created
in the order the per-tuple path creates them. The boundary tuple itself goes through the
engine's own `process` and `advance`, so every firing (on-time, early and late count panes,
purges with their final panes, retractions, pane info) is the engine's code.

What is column-wise: time windows (tumbling and sliding) under Apex's `TriggerOption` (on-time
panes, count and time triggers; time triggers fire at batch ends, outside a batch), every
accumulation mode, allowed lateness (None, 0 or more), Apex's lateness rule. What is not
(`unsupported` names the reason, `process_columns` logs it once and applies the batch tuple by
tuple through the same engine): sessions and the global window, window propagation, triggers of
Beam's model, the window-expired lateness rule, a timestamp combiner other than end-of-window.

>>> from squall.panes.accumulations import Count
>>> from squall.panes.triggers import TriggerOption
>>> from squall.panes.windows import TimeWindows
>>> e = WindowedEngine(TimeWindows(1000), Count(), TriggerOption.at_watermark(),
...                    allowed_lateness_ms=0)
>>> r = process_columns(e, ["a", "b", "a", "a", "b"], [100, 200, 1100, 50, 2500],
...                     [None] * 5, now=0, delay=0)
>>> for i, kind, x in r.steps: print(i, kind, x if kind == LATE_TUPLE else [p[:5] for p in x])
2 2 [('a', 0, 1000, 1, 'ON_TIME'), ('b', 0, 1000, 1, 'ON_TIME')]
3 1 1100
4 2 [('a', 1000, 2000, 1, 'ON_TIME')]
>>> e.watermark, e.dropped, sorted(e.windows)
(2500, 1, [(2000, 3000)])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from squall.panes.accumulations import Count, Max, Min, Sum
from squall.panes.engine import ACCEPTED, WATERMARK_DUE, PaneState, WindowedEngine
from squall.panes.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeWindows

log = logging.getLogger("squall")

# What a step of `ColumnarResult.steps` holds, after the tuple's index.
PROCESSED = 0
"""panes fired while the tuple was accumulated (count triggers)"""
LATE_TUPLE = 1
"""the tuple was dropped as too late: the watermark it was judged against"""
ADVANCED = 2
"""panes fired when the watermark the tuple generated was applied (on-time, purges)"""

# Timestamps beyond this are left to the per-tuple path (their arithmetic could overflow int64).
_SAFE = 2**61
# Tuples examined at a time for the next boundary: doubled while none is found, so a batch costs
# linear work plus about this much per boundary.
_FIRST_CHUNK = 1024

_reported: set[str] = set()


@dataclass
class ColumnarResult:
    """What a batch produced, in the order the per-tuple path produces it.

    `steps`: `(tuple index, PROCESSED, panes)`, `(tuple index, LATE_TUPLE, watermark)` and
    `(tuple index, ADVANCED, panes)`, ordered by tuple index, then in that order within a tuple
    (a tuple's count-trigger panes, then its late record, then the panes its watermark fired).
    `columnar`: whether the batch went column-wise (else tuple by tuple, for `reason`).
    """

    steps: list[tuple[int, int, Any]] = field(default_factory=list)
    columnar: bool = True
    reason: str | None = None

    @property
    def panes(self) -> list[Any]:
        """Every pane fired, in order."""
        return [p for _i, kind, x in self.steps if kind != LATE_TUPLE for p in x]

    @property
    def late(self) -> list[tuple[int, int]]:
        """(tuple index, watermark it was judged against) of each tuple dropped as too late."""
        return [(i, x) for i, kind, x in self.steps if kind == LATE_TUPLE]


def unsupported(engine: WindowedEngine) -> str | None:
    """Why `engine`'s batches cannot go column-wise, or None if they can."""
    if not isinstance(engine.window, TimeWindows):
        return f"window {engine.window!r} (only tumbling and sliding time windows are)"
    if not engine._fixed:
        return f"trigger {engine.trigger!r} (only Apex's TriggerOption is)"
    if engine._window_rule:
        return "the window-expired lateness rule"
    if engine.track_ts:
        return f"timestamp combiner {engine.timestamp_combiner.value}"
    return None


def process_columns(engine: WindowedEngine, keys: Sequence[Any], timestamps: Any,
                    values: Sequence[Any], now: int, delay: int) -> ColumnarResult:
    """Apply a batch of tuples (columns `keys`, `timestamps` as ints, `values`, in arrival order)
    to `engine` at processing time `now`, the watermark trailing the largest timestamp by
    `delay`: what `process(key, ts, value, now, delay=delay)` per tuple, then `advance(ts -
    delay, now)` where it returns `WATERMARK_DUE`, would do (see the module doc). Falls back to
    exactly that loop, saying so once per reason in the log, where the engine's configuration
    or the timestamps' range is not covered."""
    ts = np.asarray(timestamps, dtype=np.int64)
    n = len(ts)
    if not (len(keys) == n == len(values)):
        raise ValueError(f"columns of different lengths: {len(keys)} keys, {n} timestamps, "
                         f"{len(values)} values")
    reason = unsupported(engine)
    if reason is None and n and (int(ts.min()) < -_SAFE or int(ts.max()) > _SAFE
                                 or abs(delay) > _SAFE):
        reason = "timestamps beyond +-2**61 ms"
    if reason is not None:
        if reason not in _reported:
            _reported.add(reason)
            log.info("windowed operator: batches go tuple by tuple, not column-wise, for %s",
                     reason)
        return per_tuple(engine, keys, ts.tolist(), values, now, delay, reason)
    if n == 0:
        return ColumnarResult()
    return _Batch(engine, keys, ts, values, now, delay).run()


def per_tuple(engine: WindowedEngine, keys: Sequence[Any], timestamps: Sequence[int],
              values: Sequence[Any], now: int, delay: int, reason: str | None = None
              ) -> ColumnarResult:
    """The batch tuple by tuple, as the operator's per-tuple path applies it."""
    result = ColumnarResult(columnar=False, reason=reason)
    steps = result.steps
    for i, (key, ts, value) in enumerate(zip(keys, timestamps, values, strict=True)):
        before = engine.watermark
        r = engine.process(key, ts, value, now, False, None, delay)
        if engine.out:
            steps.append((i, PROCESSED, engine.take()))
        if not r & ACCEPTED:
            steps.append((i, LATE_TUPLE, before))
        if r & WATERMARK_DUE:
            engine.advance(ts - delay, now)
            if engine.out:
                steps.append((i, ADVANCED, engine.take()))
    return result


class _Batch:
    """One batch going column-wise through one engine (`process_columns`)."""

    def __init__(self, engine: WindowedEngine, keys: Sequence[Any], ts: np.ndarray,
                 values: Sequence[Any], now: int, delay: int) -> None:
        self.e = e = engine
        self.keys = keys
        self.ts = ts
        self.values = values
        self.now = now
        self.delay = delay
        n = len(ts)
        window = e.window
        assert isinstance(window, TimeWindows)
        self.d, self.s = window.duration_ms, window.slide_ms
        self.k = self.d // self.s  # windows per tuple
        # The watermark before and after each tuple: a running maximum of the generated ones.
        after = np.maximum.accumulate(np.maximum(ts - delay, e.watermark))
        before = np.empty(n, dtype=np.int64)
        before[0] = e.watermark
        before[1:] = after[:-1]
        self.after, self.before = after, before
        lateness = e.lateness
        if lateness is None:
            self.accepted = np.ones(n, dtype=bool)
        else:
            horizon = np.where(before == MIN_TIMESTAMP, MIN_TIMESTAMP, before - lateness)
            self.accepted = ts >= horizon
        # The first window's start of each tuple (windows ordered by end, as `assign`).
        self.first = ts - ts % self.s - self.d + self.s
        self.due_of = self._due_contributions()
        self.kind, self.ints = _kernel(e.accumulation, values)
        self.result = ColumnarResult()

    def _due_contributions(self) -> np.ndarray:
        """Per tuple, the smallest `due` its windows would schedule (`_scheduled`): a window's
        end if it is above the watermark, its end + allowed lateness if windows are purged;
        an existing window's entries are already at or above `due`, so counting them too
        changes nothing. A dropped tuple schedules nothing."""
        e = self.e
        never = MAX_TIMESTAMP
        out = np.full(len(self.ts), never, dtype=np.int64)
        for m in range(self.k):
            end = self.first + m * self.s + self.d
            out = np.minimum(out, np.where(end > self.before, end, never))
            if e.lateness is not None:
                out = np.minimum(out, end + e.lateness)
        return np.where(self.accepted, out, never)

    def run(self) -> ColumnarResult:
        e, n = self.e, len(self.ts)
        pos = 0
        chunk = _FIRST_CHUNK
        while pos < n:
            hi = min(n, pos + chunk)
            # The first tuple at which the generated watermark reaches `due`, which the tuples
            # before it (and itself) lower as they schedule windows.
            due = np.minimum.accumulate(np.minimum(self.due_of[pos:hi],
                                                   min(e.due, MAX_TIMESTAMP)))
            after = self.after[pos:hi]
            hits = np.flatnonzero((after >= due) & (after > self.before[pos:hi]))
            b = pos + int(hits[0]) if len(hits) else hi
            groups = self._groups(pos, b)
            states = self._states(groups)
            if e._counting:
                fires = self._count_fire(groups, states)
                if fires < b:
                    b = fires
                    groups = self._groups(pos, b)
                    states = self._states(groups)
            self._accumulate(pos, b, groups, states)
            if b < hi:
                self._boundary(b)
                pos = b + 1
                chunk = _FIRST_CHUNK
            else:
                pos = hi
                chunk *= 2
        return self.result

    def _groups(self, lo: int, hi: int) -> _Groups | None:
        """The accepted tuples of [lo, hi) grouped by (key, window), groups in the order the
        per-tuple path meets them (by their first (tuple, window) pair)."""
        if hi <= lo:
            return None
        idx = lo + np.flatnonzero(self.accepted[lo:hi])
        if not len(idx):
            return None
        keys = self.keys
        codes: dict[Any, int] = {}
        setdefault = codes.setdefault
        kcode = np.fromiter((setdefault(keys[i], len(codes)) for i in idx.tolist()),
                            dtype=np.int64, count=len(idx))
        k, s = self.k, self.s
        # Pairs (tuple, window) in the per-tuple path's order: by tuple, then by window.
        slot = (self.first[idx] // s)[:, None] + np.arange(k, dtype=np.int64)[None, :]
        slot = slot.ravel()
        tuples = np.repeat(idx, k)
        pk = np.repeat(kcode, k)
        low = int(slot.min())
        span = int(slot.max()) - low + 1
        gid = pk * span + (slot - low)
        _u, first_pair, inverse, counts = np.unique(gid, return_index=True,
                                                    return_inverse=True, return_counts=True)
        order = np.argsort(first_pair, kind="stable")  # groups by first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        group_of_pair = rank[inverse.ravel()]
        counts = counts[order]
        first_pair = first_pair[order]
        # Pairs sorted by group, in arrival order within each group.
        by_group = np.argsort(group_of_pair, kind="stable")
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return _Groups(starts=(slot[first_pair] * s).tolist(),
                       first_tuple=tuples[first_pair].tolist(),
                       counts=counts.tolist(), offsets=offsets, pair_tuple=tuples[by_group])

    def _states(self, groups: _Groups | None) -> list[PaneState | None]:
        """Each group's (key, window) state if it exists."""
        if groups is None:
            return []
        windows, keys, d = self.e.windows, self.keys, self.d
        out: list[PaneState | None] = []
        for start, j in zip(groups.starts, groups.first_tuple, strict=True):
            kd = windows.get((start, start + d))
            out.append(None if kd is None else kd.get(keys[j]))
        return out

    def _count_fire(self, groups: _Groups | None, states: list[PaneState | None]) -> int:
        """The first tuple at which a group's count trigger reaches its count (its count so
        far, plus its tuples in the batch); a large number if none does."""
        best = MAX_TIMESTAMP
        if groups is None:
            return best
        e, d, before = self.e, self.d, self.before
        early, late = e._early_count, e._late_count
        for g, st in enumerate(states):
            if st is None:
                start = groups.starts[g]
                is_late = start + d <= before[groups.first_tuple[g]]
                c0 = 0
            else:
                is_late, c0 = bool(st.late), st.count
            need = late if is_late else early
            if need is None:
                continue
            k = max(1, need - c0)
            if k <= groups.counts[g]:
                j = int(groups.pair_tuple[groups.offsets[g] + k - 1])
                if j < best:
                    best = j
        return best

    def _accumulate(self, lo: int, hi: int, groups: _Groups | None,
                    states: list[PaneState | None]) -> None:
        """The tuples of [lo, hi), where nothing fires: dropped ones counted, groups
        accumulated, windows and keys created as the per-tuple path creates them."""
        e = self.e
        if hi <= lo:
            return
        steps = self.result.steps
        before = self.before
        for i in np.flatnonzero(~self.accepted[lo:hi]).tolist():
            e.dropped += 1
            steps.append((lo + i, LATE_TUPLE, int(before[lo + i])))
        if groups is not None:
            windows, keys, d, now = e.windows, self.keys, self.d, self.now
            default = e._default
            partial = self._partials(groups)
            for g, st in enumerate(states):
                if st is None:
                    start, j = groups.starts[g], groups.first_tuple[g]
                    w = (start, start + d)
                    wb = int(before[j])
                    e.watermark = wb  # the watermark when the per-tuple path creates it
                    kd = windows.get(w)
                    if kd is None:
                        kd = windows[w] = {}
                        e._scheduled(w)
                    st = kd[keys[j]] = PaneState(default(), now, w[1] <= wb)
                st.acc = partial(g, st.acc)
                st.updated = True
                st.count += groups.counts[g]
            e.now = now
        e.watermark = int(self.after[hi - 1])  # moved by each tuple: nothing was due

    def _partials(self, groups: _Groups) -> Any:
        """`partial(g, acc)`: acc with group g's values accumulated, in arrival order."""
        kind, offsets, counts = self.kind, groups.offsets, groups.counts
        if kind == "count":
            return lambda g, acc: acc + counts[g]
        pair_tuple = groups.pair_tuple
        if self.ints is not None:
            v = self.ints[pair_tuple]
            starts = offsets[:-1]
            if kind == "sum":
                sums = np.add.reduceat(v, starts).tolist()
                return lambda g, acc: (acc + sums[g] if acc.__class__ is int
                                       else self._fold(acc, pair_tuple, offsets, g))
            red = (np.minimum if kind == "min" else np.maximum).reduceat(v, starts).tolist()
            if kind == "min":
                return lambda g, acc: red[g] if acc is None or red[g] < acc else acc
            return lambda g, acc: red[g] if acc is None or red[g] > acc else acc
        return lambda g, acc: self._fold(acc, pair_tuple, offsets, g)

    def _fold(self, acc: Any, pair_tuple: np.ndarray, offsets: np.ndarray, g: int) -> Any:
        accumulate, values = self.e._accumulate1, self.values
        for j in pair_tuple[offsets[g]:offsets[g + 1]].tolist():
            acc = accumulate(acc, values[j])
        return acc

    def _boundary(self, b: int) -> None:
        """Tuple `b`, where something may fire: through the engine's own per-tuple path."""
        e = self.e
        steps = self.result.steps
        ts = int(self.ts[b])
        before = e.watermark
        r = e.process(self.keys[b], ts, self.values[b], self.now, False, None, self.delay)
        if e.out:
            steps.append((b, PROCESSED, e.take()))
        if not r & ACCEPTED:
            steps.append((b, LATE_TUPLE, before))
        if r & WATERMARK_DUE:
            e.advance(ts - self.delay, self.now)
            if e.out:
                steps.append((b, ADVANCED, e.take()))


@dataclass
class _Groups:
    """(key, window) groups of a run of tuples, in first-appearance order: each group's window
    start, first tuple and size; its tuples are `pair_tuple[offsets[g]:offsets[g + 1]]`."""

    starts: list[int]
    first_tuple: list[int]
    counts: list[int]
    offsets: np.ndarray
    pair_tuple: np.ndarray


def _kernel(accumulation: Any, values: Sequence[Any]) -> tuple[str, np.ndarray | None]:
    """How the groups accumulate: `count`; `sum`, `min`, `max` as numpy reductions (with the
    values as an int64 array) where every value is a Python int of at most 2**31 in magnitude
    (the per-tuple path's results exactly, with no overflow); else `fold`."""
    kind = type(accumulation)
    if kind is Count:
        return "count", None
    if (kind is Sum or ((kind is Min or kind is Max) and accumulation.key is None)) and (
            len(values) < 2**31 and all(v.__class__ is int for v in values)):
        try:
            ints = np.asarray(values, dtype=np.int64)
        except OverflowError:
            return "fold", None
        if not len(ints) or int(np.abs(ints).max()) <= 2**31:
            return ("sum" if kind is Sum else "min" if kind is Min else "max"), ints
    return "fold", None
