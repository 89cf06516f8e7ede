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
from itertools import repeat
from typing import Any

import numpy as np

from squall.panes.accumulations import Count, Max, Min, Sum
from squall.panes.engine import ACCEPTED, WATERMARK_DUE, PaneState, WindowedEngine
from squall.panes.pane_info import ON_TIME
from squall.panes.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeWindows

log = logging.getLogger("squall")

# What a step of `ColumnarResult.steps` holds, after the tuple's index.
PROCESSED = 0
"""panes fired while the tuple was accumulated (count triggers)"""
LATE_TUPLE = 1
"""the tuple was dropped as too late: the watermark it was judged against"""
ADVANCED = 2
"""panes fired when the watermark the tuple generated was applied (on-time, purges)"""
ON_TIME_ROWS = 3
"""with `rows=` given: on-time panes fired as `ADVANCED` ones, as the operator's output rows"""

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
    With `process_columns(..., rows=)`, the on-time panes of windows fired and purged straight
    from their tuples come as `(tuple index, ON_TIME_ROWS, rows)` instead, before any `ADVANCED`
    panes of the same tuple: the output rows those panes give (`pane_rows`).
    `columnar`: whether the batch went column-wise (else tuple by tuple, for `reason`).
    `watermarks`: the engine's watermark after each tuple.
    """

    steps: list[tuple[int, int, Any]] = field(default_factory=list)
    columnar: bool = True
    reason: str | None = None
    watermarks: Any = None
    """The engine's watermark after each tuple (an int64 array)."""

    @property
    def panes(self) -> list[Any]:
        """Every pane fired, in order (output rows for `ON_TIME_ROWS` steps)."""
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
                    values: Sequence[Any], now: int, delay: int,
                    rows: tuple[int, bool] | None = None) -> ColumnarResult:
    """Apply a batch of tuples (columns `keys`, `timestamps` as ints, `values`, in arrival order)
    to `engine` at processing time `now`, the watermark trailing the largest timestamp by
    `delay`: what `process(key, ts, value, now, delay=delay)` per tuple, then `advance(ts -
    delay, now)` where it returns `WATERMARK_DUE`, would do (see the module doc). Falls back to
    exactly that loop, saying so once per reason in the log, where the engine's configuration
    or the timestamps' range is not covered.

    `rows=(width, keyed)`: the on-time panes that windows fired and purged straight from their
    tuples give are made as output rows (`pane_rows`), in `ON_TIME_ROWS` steps, rather than
    as panes: no pane tuple per row for a caller that only emits them."""
    ts = np.asarray(timestamps, dtype=np.int64)
    n = len(ts)
    if not (len(keys) == n == len(values)):
        raise ValueError(f"columns of different lengths: {len(keys)} keys, {n} timestamps, "
                         f"{len(values)} values")
    watermarks = np.maximum.accumulate(np.maximum(ts - delay, engine.watermark))
    reason = unsupported(engine)
    if reason is None and n and (int(ts.min()) < -_SAFE or int(ts.max()) > _SAFE
                                 or abs(delay) > _SAFE):
        reason = "timestamps beyond +-2**61 ms"
    if reason is not None:
        if reason not in _reported:
            _reported.add(reason)
            log.info("windowed operator: batches go tuple by tuple, not column-wise, for %s",
                     reason)
        result = per_tuple(engine, keys, ts.tolist(), values, now, delay, reason)
    elif n == 0:
        result = ColumnarResult()
    else:
        result = _Batch(engine, keys, ts, values, now, delay, rows).run()
    result.watermarks = watermarks
    return result


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
    """One batch going column-wise through one engine (`process_columns`).

    The tuples between two boundaries are not accumulated at once: each window keeps its
    (tuple) pairs pending, in arrival order, and is brought up to date (`_settle`) only when
    something reads it: a tuple that goes through the engine's own path touches it, the
    watermark fires or purges it, or the batch ends. A (key, window) then costs one step per
    window firing, not one per tuple. Windows are created (and scheduled) as soon as their first
    tuple is met, in the per-tuple path's order; a key's state is created when its window
    settles, in the order its tuples arrived."""

    def __init__(self, engine: WindowedEngine, keys: Sequence[Any], ts: np.ndarray,
                 values: Sequence[Any], now: int, delay: int,
                 rows: tuple[int, bool] | None = None) -> None:
        self.e = e = engine
        self.rows = rows
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
        self.before_list: list[int] = before.tolist()
        lateness = e.lateness
        if lateness is None:
            self.accepted = np.ones(n, dtype=bool)
        else:
            horizon = np.where(before == MIN_TIMESTAMP, MIN_TIMESTAMP, before - lateness)
            self.accepted = ts >= horizon
        # Each tuple's first window, as a slot (start // slide); its windows are the k slots
        # from there (ordered by end, as `assign`).
        self.slot0 = (ts - ts % self.s - self.d + self.s) // self.s
        self.due_of = self._due_contributions()
        self.kind, self.ints = _kernel(e.accumulation, values)
        # Each tuple's key as a number, equal keys (as a dict sees them) the same number.
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        self.key_codes = np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=n)
        self.pending: dict[int, list[np.ndarray]] = {}  # slot -> its tuples not yet applied
        self.pending_n: dict[int, int] = {}  # slot -> how many
        # slot -> its window's keys. A window `advance` purges stays here: no later tuple of
        # the batch belongs to it (it ended at or before watermark - allowed lateness, below
        # which every later tuple is dropped).
        self.known: dict[int, dict[Any, PaneState]] = {}
        # slot -> at least the largest count of a key of its window (count triggers)
        self.most: dict[int, int] = {}
        self.result = ColumnarResult()
        # Whether a window fired on time and purged in one step may go straight from its
        # pending tuples to its panes (`_fire_pending`): on-time panes of Apex's trigger that
        # keep no last value, windows purged (a lateness), in a plain dict of windows.
        self.at_once = (type(e.windows) is dict and not e._keep_last and not e.track_ts
                        and e.lateness is not None and e._driver.fires_on_time_panes
                        and not e._final)

    def _due_contributions(self) -> np.ndarray:
        """Per tuple, the smallest `due` its windows would schedule (`_scheduled`): a window's
        end if it is above the watermark, its end + allowed lateness if windows are purged;
        an existing window's entries are already at or above `due`, so counting them too
        changes nothing. A dropped tuple schedules nothing."""
        e = self.e
        never = MAX_TIMESTAMP
        out = np.full(len(self.ts), never, dtype=np.int64)
        for m in range(self.k):
            end = (self.slot0 + m) * self.s + self.d
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
            due_at = pos + int(hits[0]) if len(hits) else n
            end = min(due_at + 1, hi)  # the due tuple itself only accumulates (or is late)
            fire_at = self._count_fire(pos, end) if e._counting else n
            if fire_at < end:  # a count trigger fires there: through the engine
                self._take(pos, fire_at)
                self._through_engine(fire_at)
                pos = fire_at + 1
                chunk = _FIRST_CHUNK
            elif due_at < hi:  # the watermark makes panes or purges due there
                self._take(pos, due_at + 1)
                self._advance(due_at)
                pos = due_at + 1
                chunk = _FIRST_CHUNK
            else:
                self._take(pos, hi)
                pos = hi
                chunk *= 2
        for slot in list(self.pending):
            self._settle(slot)
        return self.result

    # ---- the tuples between boundaries -----------------------------------------------------
    def _pairs(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The accepted tuples of [lo, hi) as (tuple, window slot) pairs, in the per-tuple
        path's order (by tuple, then window)."""
        idx = lo + np.flatnonzero(self.accepted[lo:hi])
        k = self.k
        slots = (self.slot0[idx][:, None] + np.arange(k, dtype=np.int64)[None, :]).ravel()
        return np.repeat(idx, k), slots

    def _take(self, lo: int, hi: int) -> None:
        """Tuples [lo, hi), where nothing fires: dropped ones counted and reported, windows
        created as the per-tuple path meets them, the others' tuples left pending."""
        e = self.e
        if hi <= lo:
            return
        steps = self.result.steps
        before_at = self.before_list
        for i in (lo + np.flatnonzero(~self.accepted[lo:hi])).tolist():
            e.dropped += 1
            steps.append((i, LATE_TUPLE, before_at[i]))
        tuples, slots = self._pairs(lo, hi)
        if len(tuples):
            uniq, first, inverse = np.unique(slots, return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")  # windows as the per-tuple path meets them
            by_slot = np.argsort(inverse.ravel(), kind="stable")
            bounds = np.searchsorted(inverse.ravel()[by_slot], np.arange(len(uniq) + 1))
            grouped = tuples[by_slot]
            first_tuple = tuples[first].tolist()
            for u in order.tolist():
                slot = int(uniq[u])
                self._window(slot, first_tuple[u])
                part = grouped[bounds[u]:bounds[u + 1]]
                self.pending.setdefault(slot, []).append(part)
                self.pending_n[slot] = self.pending_n.get(slot, 0) + len(part)
            e.now = self.now
        e.watermark = int(self.after[hi - 1])  # moved by each tuple: nothing was due

    def _window(self, slot: int, j: int) -> dict[Any, PaneState]:
        """The keys of window `slot`, created (and scheduled) if new by tuple `j`."""
        kd = self.known.get(slot)
        if kd is None:
            e = self.e
            start = slot * self.s
            w = (start, start + self.d)
            kd = e.windows.get(w)
            if kd is None:
                e.watermark = self.before_list[j]  # as when the per-tuple path creates it
                kd = e.windows[w] = {}
                e._scheduled(w)
                self.most[slot] = 0
            self.known[slot] = kd
        return kd

    def _settle(self, slot: int) -> None:
        """Window `slot` takes its pending tuples: per key, in arrival order, keys created in
        the order they arrived."""
        chunks = self.pending.pop(slot, None)
        if chunks is None:
            return
        self.pending_n.pop(slot)
        tuples = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        codes = self.key_codes[tuples]
        _u, first, inverse, counts = np.unique(codes, return_index=True, return_inverse=True,
                                               return_counts=True)
        order = np.argsort(first, kind="stable")  # keys as they arrived
        inverse = inverse.ravel()
        e, keys, now = self.e, self.keys, self.now
        before_at = self.before_list
        start = slot * self.s
        end = start + self.d
        kd = self.known[slot]
        default = e._default
        first_tuple = tuples[first].tolist()
        count_list = counts.tolist()
        count_only = self.kind == "count"
        partial = None
        if not count_only:
            by_key = np.argsort(inverse, kind="stable")
            offsets = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            partial = self._partials(tuples[by_key], offsets)
        top = 0
        for g in order.tolist():
            j = first_tuple[g]
            key = keys[j]
            st = kd.get(key)
            if st is None:
                st = kd[key] = PaneState(default(), now, end <= before_at[j])
            c = count_list[g]
            st.acc = st.acc + c if partial is None else partial(g, st.acc)
            st.updated = True
            c = st.count = st.count + c
            if c > top:
                top = c
        if e._counting:
            self.most[slot] = max(self._most(slot), top)

    def _most(self, slot: int) -> int:
        """At least the largest count of a key of window `slot` (settled)."""
        most = self.most.get(slot)
        if most is None:
            kd = self._window(slot, 0)
            most = self.most[slot] = max((st.count for st in kd.values()), default=0)
        return most

    def _partials(self, pair_tuple: np.ndarray, offsets: np.ndarray) -> Any:
        """`partial(g, acc)`: acc with key g's values (`pair_tuple[offsets[g]:offsets[g+1]]`)
        accumulated, in arrival order."""
        kind = self.kind
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

    # ---- boundaries --------------------------------------------------------------------------
    def _count_fire(self, lo: int, hi: int) -> int:
        """The first tuple of [lo, hi) at which a (key, window)'s count trigger reaches its
        count (its count so far plus its tuples since); `len(ts)` if none does. Windows whose
        largest count plus their pending and new tuples cannot reach the smallest count are
        not looked at key by key."""
        e = self.e
        none = len(self.ts)
        tuples, slots = self._pairs(lo, hi)
        if not len(tuples):
            return none
        early, late = e._early_count, e._late_count
        least = min(c for c in (early, late) if c is not None)
        uniq, inverse, new = np.unique(slots, return_inverse=True, return_counts=True)
        inverse = inverse.ravel()
        candidates = []
        for u, slot in enumerate(uniq.tolist()):
            kd = self.known.get(slot)
            existing = kd is not None or self.e.windows.get(
                (slot * self.s, slot * self.s + self.d)) is not None
            most = self._most(slot) if existing else 0
            if most + self.pending_n.get(slot, 0) + int(new[u]) >= least:
                candidates.append(u)
        if not candidates:
            return none
        best = none
        d, s, before_at, key_codes, keys = self.d, self.s, self.before_list, self.key_codes, \
            self.keys
        for u in candidates:
            slot = int(uniq[u])
            if slot in self.pending:
                self._settle(slot)
            mine = tuples[inverse == u]  # this window's new tuples, in arrival order
            codes = key_codes[mine]
            _c, first, kinv = np.unique(codes, return_index=True, return_inverse=True)
            kinv = kinv.ravel()
            kd = self.known.get(slot)
            if kd is None:
                kd = self.e.windows.get((slot * s, slot * s + d))
            for g, f in enumerate(first.tolist()):
                j = int(mine[f])
                st = None if kd is None else kd.get(keys[j])
                if st is None:
                    is_late, c0 = slot * s + d <= before_at[j], 0
                else:
                    is_late, c0 = bool(st.late), st.count
                need = late if is_late else early
                if need is None:
                    continue
                k = max(1, need - c0)
                hits = mine[kinv == g]
                if k <= len(hits) and int(hits[k - 1]) < best:
                    best = int(hits[k - 1])
        return best

    def _through_engine(self, b: int) -> None:
        """Tuple `b`, at which a count trigger fires: its windows settled, then the engine's
        own per-tuple path (`process`, and `advance` if its watermark is due)."""
        e = self.e
        if self.accepted[b]:
            for m in range(self.k):
                slot = int(self.slot0[b]) + m
                self._settle(slot)
        e.watermark = self.before_list[b]
        steps = self.result.steps
        ts = int(self.ts[b])
        r = e.process(self.keys[b], ts, self.values[b], self.now, False, None, self.delay)
        for m in range(self.k):  # its windows as the engine left them (a count one more)
            self.known.pop(int(self.slot0[b]) + m, None)
            self.most.pop(int(self.slot0[b]) + m, None)
        if e.out:
            steps.append((b, PROCESSED, e.take()))
        if not r & ACCEPTED:
            steps.append((b, LATE_TUPLE, self.before_list[b]))
        if r & WATERMARK_DUE:
            self._settle_due(ts - self.delay)
            e.advance(ts - self.delay, self.now)
            if e.out:
                steps.append((b, ADVANCED, e.take()))

    def _advance(self, b: int) -> None:
        """Tuple `b` (taken) generated a watermark that is due: the windows it fires or purges
        settled, then the engine's `advance`; or, where each window it reaches had all its
        tuples in this batch and is fired and purged at once, their panes from the pending
        tuples directly (`_fire_pending`)."""
        e = self.e
        w = int(self.after[b])
        e.watermark = self.before_list[b]
        panes = self._fire_pending(w) if self.at_once else None
        steps = self.result.steps
        if panes and self.rows is not None:  # output rows: a step of their own, first
            steps.append((b, ON_TIME_ROWS, panes))
            panes = None
        self._settle_due(w)
        e.advance(w, self.now)
        if e.out:
            panes = e.take() if panes is None else panes + e.take()
        if panes:
            steps.append((b, ADVANCED, panes))

    def _fire_pending(self, w: int) -> list[Any] | None:
        """The panes `advance(w)` would fire when every window it reaches ends after the
        watermark (its on-time pane is due), at or before `w` - allowed lateness (it is purged
        in the same step) and has no key's state yet (all its tuples are pending): each such
        window's on-time panes, one per key in the order the keys arrived, made from its pending
        tuples without a `PaneState`, and the window removed (its heap entries then find
        nothing, as for a purged window). None, with nothing changed, where a window does not
        qualify: the engine fires them all."""
        e = self.e
        horizon = w - e.lateness  # type: ignore[operator]
        watermark = e.watermark
        due = [win for win in e.windows if win[1] <= w]
        if not due:
            return None
        s, d = self.s, self.d
        for win in due:
            slot = win[0] // s
            if (win[1] > horizon or win[1] <= watermark or e.windows[win]
                    or slot not in self.pending or win[0] != slot * s or win[1] - win[0] != d):
                return None
        due.sort(key=lambda win: (win[1], win[0]))  # the engine's firing order
        panes: list[Any] = []
        for win in due:
            del e.windows[win]
            slot = win[0] // s
            self.known.pop(slot, None)
            self.most.pop(slot, None)
            self.pending_n.pop(slot)
            chunks = self.pending.pop(slot)
            keys, values = self._groups(np.concatenate(chunks) if len(chunks) > 1
                                        else chunks[0])
            start, end = win
            if self.rows is not None:
                panes += pane_rows(keys, values, start, end, *self.rows)
                continue
            panes += zip(keys, repeat(start), repeat(end), values, repeat(ON_TIME), repeat(0),
                         repeat(False), repeat(True), repeat(True), repeat(0), repeat(end - 1))
        e.now = self.now
        return panes

    def _groups(self, tuples: np.ndarray) -> tuple[list[Any], list[Any]]:
        """The keys of `tuples` (a window's, in arrival order) in the order they arrived, and
        each key's output value: its values accumulated from the default, in arrival order."""
        codes = self.key_codes[tuples]
        _u, first, inverse, counts = np.unique(codes, return_index=True, return_inverse=True,
                                               return_counts=True)
        order = np.argsort(first, kind="stable")
        keys = self.keys
        key_list = [keys[j] for j in tuples[first[order]].tolist()]
        if self.kind == "count":  # `Count` itself: from 0, its output the count
            return key_list, counts[order].tolist()
        e = self.e
        get_output, default = e.accumulation.get_output, e._default
        by_key = np.argsort(inverse.ravel(), kind="stable")
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        partial = self._partials(tuples[by_key], offsets)
        return key_list, [get_output(partial(g, default())) for g in order.tolist()]

    def _settle_due(self, watermark: int) -> None:
        """Settle the pending windows that end at or before `watermark` (what `advance` to it
        fires or purges)."""
        s, d = self.s, self.d
        for slot in [x for x in self.pending if x * s + d <= watermark]:
            self._settle(slot)


def pane_rows(keys: Sequence[Any], values: Sequence[Any], start: int, end: int, width: int,
              keyed: bool) -> list[list[Any]]:
    """The output rows of a window's first and only panes, on time (index 0, first and last,
    no retraction, timestamp end - 1): per key of `keys` with its value, the pane's fields
    `(key, start, end, value, timing, index, is_retraction, is_first, is_last,
    on_time_index, timestamp)` up to `width`, without the key unless `keyed` (the operator's
    output fields, `output_width`).

    >>> pane_rows(["a", "b"], [2, 1], 0, 10, 7, True)
    [['a', 0, 10, 2, 'ON_TIME', 0, False], ['b', 0, 10, 1, 'ON_TIME', 0, False]]
    >>> pane_rows([None], [3], 0, 10, 11, False)
    [[0, 10, 3, 'ON_TIME', 0, False, True, True, 0, 9]]
    """
    if keyed and width == 7:  # the usual output, without pane info
        return [[k, start, end, v, ON_TIME, 0, False] for k, v in zip(keys, values, strict=True)]
    tail = (ON_TIME, 0, False, True, True, 0, end - 1)[:width - 4]
    if keyed:
        return [[k, start, end, v, *tail] for k, v in zip(keys, values, strict=True)]
    return [[start, end, v, *tail] for _k, v in zip(keys, values, strict=True)]


def cannot_fail(accumulation: Any, values: Sequence[Any]) -> bool:
    """Whether accumulating `values` cannot raise: a count, or a sum, min or max of Python ints
    (the numpy reductions). Another accumulation may fail on a value, which the per-tuple path
    reports against that tuple alone.

    >>> cannot_fail(Count(), ["x", None]), cannot_fail(Sum(), [1, 2]), cannot_fail(Sum(), [1, "2"])
    (True, True, False)
    """
    return _kernel(accumulation, values)[0] != "fold"


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
