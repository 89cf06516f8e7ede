"""The windowed-operator engine: pure Python, no runner, no clock of its own.

`WindowedEngine` holds the state of one operator task: per window, per key, a `PaneState`
(accumulator, counters, last emitted value, pane index). The caller feeds it tuples
(`process`), watermarks (`advance`), batch boundaries (`batch_end`) and the end of input; every
call takes the processing time `now` from the caller and appends the panes it fires to `out`
as `(key, window_start, window_end, value, timing, pane_index, is_retraction)`.

Rules (docs/design/windowed-operators.md has the reasons):
- a tuple whose timestamp is below watermark - allowed lateness is dropped (`dropped` counts it);
- the on-time pane of a window fires when the watermark reaches its end (W >= end);
- count triggers fire at exactly the N-th tuple of a (key, window) since its last firing; time
  triggers at `batch_end`, once `now` is a period past the last firing;
- a window is purged once its end is at or before W - allowed lateness, after a final (LATE) pane
  if it holds data no pane has emitted;
- sessions merge on strict overlap, transitively; in accumulating-and-retracting mode the panes
  already emitted for the merged sessions are retracted.

>>> from squall.panes.windows import TimeWindows
>>> from squall.panes.accumulations import Sum
>>> from squall.panes.triggers import TriggerOption
>>> e = WindowedEngine(TimeWindows(1000), Sum(),
...                    TriggerOption.at_watermark().with_early_firings_at_every(2)
...                    .accumulating_and_retracting_fired_panes(), allowed_lateness_ms=1000)
>>> for ts, v in [(100, 2), (200, 3), (300, 4), (1500, 1), (400, 5)]:
...     _ = e.process("k", ts, v, now=0)
>>> e.advance(1000, now=0)   # [0, 1000) is due; [1000, 2000) is not
>>> for pane in e.out: print(pane)
('k', 0, 1000, 5, 'EARLY', 0, False)
('k', 0, 1000, -5, 'EARLY', 0, True)
('k', 0, 1000, 14, 'EARLY', 1, False)
('k', 0, 1000, -14, 'ON_TIME', 1, True)
('k', 0, 1000, 14, 'ON_TIME', 2, False)
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import MutableMapping
from typing import Any

from squall.panes.triggers import EARLY, LATE, ON_TIME, AccumulationMode, TriggerOption
from squall.panes.windows import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    TimeWindows,
    Window,
    WindowOption,
)
from squall.protocols import Accumulation

Pane = tuple[Any, int, int, Any, str, int, bool]

# What `WindowedEngine.process` returns when it also generates the watermark (`delay=`), as
# bit flags: the tuple was accumulated (not dropped); the watermark moved with nothing due below
# it; the generated watermark reached `due`, so the caller must `advance` to it.
ACCEPTED = 1
WATERMARK_MOVED = 2
WATERMARK_DUE = 4


class PaneState:
    """The state of one (key, window): plain data, so it pickles into snapshots."""

    __slots__ = ("acc", "count", "fired_ms", "index", "last", "late", "updated")

    def __init__(self, acc: Any, now: int, late: bool) -> None:
        self.acc = acc
        self.count = 0  # tuples since the last firing (count triggers)
        self.updated = False  # accumulated since the last firing
        self.last: tuple[Any] | None = None  # (last emitted value,) when one is kept
        self.index = 0  # index of the next pane
        self.fired_ms = now  # processing time of the last firing (or of creation)
        self.late = late  # the watermark has reached the window end

    def __getstate__(self) -> tuple:
        return (self.acc, self.count, self.updated, self.last, self.index, self.fired_ms,
                self.late)

    def __setstate__(self, s: tuple) -> None:
        (self.acc, self.count, self.updated, self.last, self.index, self.fired_ms,
         self.late) = s

    def __repr__(self) -> str:
        return (f"PaneState(acc={self.acc!r}, count={self.count}, updated={self.updated}, "
                f"last={self.last!r}, index={self.index}, late={self.late})")


WindowStore = MutableMapping[Window, dict[Any, PaneState]]
"""Where an engine keeps its panes: window -> key -> state. Any dict-like store will do: an
in-memory dict by default, `squall.panes.state_mapping.StateWindowStore` over a state provider."""


class WindowedEngine:
    """State, triggers and accumulation of one windowed-operator task (see the module doc).

    `window=None` means the windows come with the tuples (window propagation: pass `window=` to
    `process`). `allowed_lateness_ms=None` never drops or purges (state grows without bound).
    """

    def __init__(self, window: WindowOption | None, accumulation: Accumulation,
                 trigger: TriggerOption, allowed_lateness_ms: int | None = None,
                 store: WindowStore | None = None,
                 sessions: MutableMapping[Any, list[Window]] | None = None) -> None:
        trigger.validate(getattr(accumulation, "retractable", False), type(accumulation).__name__)
        self.window = window
        self.accumulation = accumulation
        self.trigger = trigger
        self.lateness = allowed_lateness_ms
        self.windows: WindowStore = {} if store is None else store
        # key -> its sessions, by start (any dict-like store, as `windows`)
        self.sessions: MutableMapping[Any, list[Window]] = {} if sessions is None else sessions
        self.watermark = MIN_TIMESTAMP
        self.on_time_heap: list[tuple[int, int]] = []  # (end, start) of windows not yet due
        self.purge_heap: list[tuple[int, int]] = []  # (end, start) of windows to purge
        # The smallest watermark at which `advance` has work (an on-time pane or a purge due):
        # below it, a new watermark only moves `watermark`. A lower bound (stale heap entries
        # may keep it low), recomputed from the heaps whenever they are popped or restored.
        self.due = MAX_TIMESTAMP + 1
        self.out: list[Pane] = []
        self.dropped = 0
        self.now = 0
        mode = trigger.mode
        self._discarding = mode is AccumulationMode.DISCARDING
        self._retracting = mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self._keep_last = self._retracting or trigger.only_updated
        self._init_fast_path()

    def _init_fast_path(self) -> None:
        window = self.window
        # Time windows (tumbling or sliding) take the hot path of `process`: duration, slide.
        self._fixed = window.duration_ms if isinstance(window, TimeWindows) else 0
        self._slide = window.slide_ms if isinstance(window, TimeWindows) else 0
        self._default = self.accumulation.default_accumulated_value
        self._accumulate1 = self.accumulation.accumulate
        self._counting = bool(self.trigger.early_count or self.trigger.late_count)
        self._merging = bool(window is not None and window.merging)

    # Bound methods are not state: a snapshot leaves them out and a restore rebuilds them.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_fixed", "_slide", "_default", "_accumulate1", "_counting",
                             "_merging")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_fast_path()
        self._update_due()  # derived from the heaps (and absent from older snapshots)

    # What defines the engine besides its two stores: small (per window at most, never per key).
    PROGRESS = ("watermark", "on_time_heap", "purge_heap", "dropped", "now")

    def progress(self) -> dict[str, Any]:
        """The engine's state outside `windows` and `sessions` (a stored operator keeps it
        next to them); the heaps are copied, so later changes do not alter the result."""
        return {"watermark": self.watermark, "on_time_heap": list(self.on_time_heap),
                "purge_heap": list(self.purge_heap), "dropped": self.dropped, "now": self.now}

    def restore_progress(self, progress: dict[str, Any]) -> None:
        for name in self.PROGRESS:
            value = progress[name]
            setattr(self, name, list(value) if isinstance(value, list) else value)
        self._update_due()

    def _update_due(self) -> None:
        due = self.on_time_heap[0][0] if self.on_time_heap else MAX_TIMESTAMP + 1
        if self.lateness is not None and self.purge_heap:
            due = min(due, self.purge_heap[0][0] + self.lateness)
        self.due = due

    # ---- input ---------------------------------------------------------------------------
    def process(self, key: Any, ts: int, value: Any, now: int, second: bool = False,
                window: Window | None = None, delay: int | None = None) -> int:
        """Accumulate one tuple (`second`: from the merge operator's second input); False if
        it was dropped as too late, else True.

        With `delay` the caller's watermark is generated from event time, trailing the largest
        timestamp by `delay`, and the result is `ACCEPTED` (unless dropped) combined with
        `WATERMARK_MOVED` (`ts - delay` was larger than the watermark and nothing is due below
        it: the watermark moved, nothing else to do) or `WATERMARK_DUE` (the caller must
        `advance(ts - delay, now)`: panes or purges are due). The operator's hot path: one call
        per tuple instead of a second one for every tuple that raises the watermark.
        """
        lateness = self.lateness
        if lateness is not None and ts < self.watermark - lateness:
            self.dropped += 1
            return False if delay is None else self._generated(ts - delay)
        self.now = now
        fixed = self._fixed
        if fixed and window is None and not second:
            # The hot path (time windows, one input): assign, _add and _accumulate inlined.
            slide = self._slide
            last = ts - ts % slide
            start = last - fixed + slide  # the earliest window: by end, as `assign`
            windows = self.windows
            while True:  # (not a loop over a range: for one tumbling window that costs more)
                w = (start, start + fixed)
                keys = windows.get(w)
                if keys is None:
                    keys = windows[w] = {}
                    self._scheduled(w)
                st = keys.get(key)
                if st is None:
                    st = keys[key] = PaneState(self._default(), now, w[1] <= self.watermark)
                st.acc = self._accumulate1(st.acc, value)
                st.updated = True
                st.count += 1
                if self._counting:
                    n = self.trigger.late_count if st.late else self.trigger.early_count
                    if n is not None and st.count >= n:
                        self._fire(key, w, st, LATE if st.late else EARLY)
                if start == last:
                    break
                start += slide
        elif window is not None:
            self._add(key, window, value, now, second)
        elif self.window.merging:  # type: ignore[union-attr]
            self._add_session(key, ts, value, now, second)
        else:
            for w in self.window.assign(ts):  # type: ignore[union-attr]
                self._add(key, w, value, now, second)
        if delay is None:
            return True
        # `_generated` inlined: this runs for every tuple of the hot path.
        generated = ts - delay
        if generated <= self.watermark:
            return ACCEPTED
        if generated < self.due:
            self.watermark = generated
            return ACCEPTED | WATERMARK_MOVED
        return ACCEPTED | WATERMARK_DUE

    def _generated(self, w: int) -> int:
        """A generated watermark `w`: moved here if nothing is due below it (what `advance`
        would do); WATERMARK_DUE if the caller must `advance` to it."""
        if w <= self.watermark:
            return 0
        if w < self.due:
            self.watermark = w
            return WATERMARK_MOVED
        return WATERMARK_DUE

    def _add(self, key: Any, w: Window, value: Any, now: int, second: bool) -> None:
        keys = self.windows.get(w)
        if keys is None:
            keys = self.windows[w] = {}
            self._scheduled(w)
        st = keys.get(key)
        if st is None:
            st = keys[key] = PaneState(self.accumulation.default_accumulated_value(), now,
                                       w[1] <= self.watermark)
        self._accumulate(key, w, st, value, second)

    def _accumulate(self, key: Any, w: Window, st: PaneState, value: Any, second: bool) -> None:
        acc = self.accumulation
        st.acc = acc.accumulate2(st.acc, value) if second else acc.accumulate(  # type: ignore
            st.acc, value)
        st.updated = True
        st.count += 1
        t = self.trigger
        n = t.late_count if st.late else t.early_count
        if n is not None and st.count >= n:
            self._fire(key, w, st, LATE if st.late else EARLY)

    def _scheduled(self, w: Window) -> None:
        """A window came into existence: schedule its on-time pane and its purge."""
        if w[1] > self.watermark:
            heapq.heappush(self.on_time_heap, (w[1], w[0]))
            if w[1] < self.due:
                self.due = w[1]
        if self.lateness is not None:
            heapq.heappush(self.purge_heap, (w[1], w[0]))
            if w[1] + self.lateness < self.due:
                self.due = w[1] + self.lateness

    def _add_session(self, key: Any, ts: int, value: Any, now: int, second: bool) -> None:
        gap = self.window.gap_ms  # type: ignore[union-attr]
        start, end = ts, ts + gap
        sessions = self.sessions.get(key)
        if sessions is None:
            sessions = self.sessions[key] = []
        # Sessions of a key never overlap, so sorted by start they are sorted by end too: the
        # ones that strictly overlap [start, end) are a contiguous run ending before `hi`.
        hi = bisect.bisect_left(sessions, (end, MIN_TIMESTAMP))
        lo = hi
        while lo > 0 and sessions[lo - 1][1] > start:
            lo -= 1
        if hi - lo == 1 and sessions[lo][0] <= start and end <= sessions[lo][1]:
            self._add(key, sessions[lo], value, now, second)  # inside an existing session
            return
        if hi == lo:  # a new session
            w = (start, end)
            sessions.insert(lo, w)
            self._add(key, w, value, now, second)
            return
        merged = sessions[lo:hi]
        w = (min(start, merged[0][0]), max(end, merged[-1][1]))
        sessions[lo:hi] = [w]
        self._merge_sessions(key, merged, w, value, now, second)

    def _merge_sessions(self, key: Any, merged: list[Window], w: Window, value: Any, now: int,
                        second: bool) -> None:
        acc = self.accumulation
        windows = self.windows
        new_acc = acc.default_accumulated_value()
        count, updated, fired_ms, emitted = 0, False, now, False
        for old in merged:
            keys = windows[old]
            st = keys.pop(key)
            if not keys:
                del windows[old]
            if self._retracting and st.last is not None:
                self.out.append((key, old[0], old[1], acc.get_retraction(st.last[0]),
                                 LATE if st.late else EARLY, st.index - 1, True))
            new_acc = acc.merge(new_acc, st.acc)
            count += st.count
            updated = updated or st.updated
            fired_ms = min(fired_ms, st.fired_ms)
            emitted = emitted or st.index > 0
        target = windows.get(w)
        if target is None:
            target = windows[w] = {}
            self._scheduled(w)
        # A merged session is a new window: pane index from 0, nothing emitted yet.
        st = target[key] = PaneState(new_acc, fired_ms, w[1] <= self.watermark)
        st.count, st.updated = count, updated
        self._accumulate(key, w, st, value, second)
        if st.late and emitted and st.updated:
            # Behind the watermark no on-time pane will come: replace the superseded (and, in
            # accumulating-and-retracting mode, retracted) panes at once.
            self._fire(key, w, st, LATE)

    # ---- firing --------------------------------------------------------------------------
    def _fire(self, key: Any, w: Window, st: PaneState, timing: str) -> None:
        if self._discarding and not st.updated:
            return  # nothing arrived since the last pane: there is no pane to emit
        acc = self.accumulation
        value = acc.get_output(st.acc)
        last = st.last
        st.count = 0
        st.updated = False
        st.fired_ms = self.now
        if last is not None:
            if self.trigger.only_updated and last[0] == value:
                return
            if self._retracting:
                self.out.append((key, w[0], w[1], acc.get_retraction(last[0]), timing,
                                 st.index - 1, True))
        self.out.append((key, w[0], w[1], value, timing, st.index, False))
        st.index += 1
        if self._keep_last:
            st.last = (value,)
        if self._discarding:
            st.acc = acc.default_accumulated_value()

    def _fire_on_time(self, w: Window, keys: dict[Any, PaneState]) -> None:
        """The watermark reached the end of `w`: every key not yet late becomes late and fires
        its on-time pane (`_fire(key, w, st, ON_TIME)`). A key already late belongs to a
        duplicate schedule of a re-created window: it fired once already."""
        if not self.trigger.on_time:
            for st in keys.values():
                st.late = True
            return
        if self._keep_last:  # retractions or suppressed repeats: the general path
            for key, st in keys.items():
                if not st.late:
                    st.late = True
                    self._fire(key, w, st, ON_TIME)
            return
        # `_fire` inlined for the common modes (no last value kept): a window's on-time firing
        # is one pane per key, the bulk of all panes of a tumbling-window count.
        start, end = w
        append = self.out.append
        get_output = self.accumulation.get_output
        discarding = self._discarding
        default = self.accumulation.default_accumulated_value
        now = self.now
        for key, st in keys.items():
            if st.late:
                continue
            st.late = True
            if discarding and not st.updated:
                continue  # nothing arrived since the last pane: there is no pane to emit
            append((key, start, end, get_output(st.acc), ON_TIME, st.index, False))
            st.count = 0
            st.updated = False
            st.fired_ms = now
            st.index += 1
            if discarding:
                st.acc = default()

    def advance(self, watermark: int, now: int) -> None:
        """Apply a watermark (ignored unless it is larger than the current one): on-time panes
        for the windows it reaches, in window order (end, start), then purges."""
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        self.now = now
        if watermark < self.due:
            return  # nothing is due yet
        windows = self.windows
        heap = self.on_time_heap
        while heap and heap[0][0] <= watermark:
            end, start = heapq.heappop(heap)
            w = (start, end)
            keys = windows.get(w)
            if keys:  # else merged away
                self._fire_on_time(w, keys)
        if self.lateness is not None:
            self._purge(watermark - self.lateness)
        self._update_due()

    def _purge(self, horizon: int) -> None:
        windows = self.windows
        heap = self.purge_heap
        while heap and heap[0][0] <= horizon:
            end, start = heapq.heappop(heap)
            w = (start, end)
            keys = windows.pop(w, None)
            if not keys:
                continue
            for key, st in keys.items():
                if st.updated:  # data no pane has emitted: a final pane, not a silent loss
                    self._fire(key, w, st, LATE)
                if self._merging:  # (the session map may be a store: not tested for emptiness)
                    sessions = self.sessions[key]
                    sessions.remove(w)
                    if not sessions:
                        del self.sessions[key]

    def batch_end(self, now: int) -> None:
        """A batch boundary at processing time `now`: time triggers that are due fire."""
        t = self.trigger
        early, late = t.early_ms, t.late_ms
        if not (early or late):
            return
        self.now = now
        ended = self.watermark == MAX_TIMESTAMP
        for w in sorted(self.windows, key=_by_end):
            keys = self.windows[w]
            for key, st in list(keys.items()):
                period = late if st.late else early
                if period and now - st.fired_ms >= period and (st.updated or not ended):
                    self._fire(key, w, st, LATE if st.late else EARLY)

    def end_of_input(self, now: int) -> None:
        """Input ended: the watermark goes to the end of time, every window fires its final pane
        (on-time, or LATE for data that arrived after it), and windows are purged."""
        self.advance(MAX_TIMESTAMP, now)
        self.now = now
        for w in sorted(self.windows, key=_by_end):
            for key, st in self.windows[w].items():
                if st.updated:
                    self._fire(key, w, st, LATE)

    def take(self) -> list[Pane]:
        """The panes fired since the last call, in firing order."""
        out, self.out = self.out, []
        return out


def _by_end(w: Window) -> tuple[int, int]:
    return (w[1], w[0])


class InputWatermarks:
    """The operator's watermark from its inputs, as Spark's "min" multiple-watermark policy.

    Each input `i` has a set of upstream sources (task ids that send watermarks) and may
    generate one from event time, trailing the largest timestamp seen by `delay_ms`. The input's
    watermark is the larger of the two (an upstream one only once every source has sent one),
    and the operator's is the smallest over its inputs: None until every input has one.

    >>> w = InputWatermarks([frozenset({7, 8}), frozenset()], delay_ms=100)
    >>> w.upstream(0, 7, 5000), w.observe(1, 3000), w.current()
    (None, None, None)
    >>> w.upstream(0, 8, 4000)
    2900
    >>> w.observe(1, 9000)
    4000
    """

    def __init__(self, sources: list[frozenset[int]], delay_ms: int | None) -> None:
        self.sources = sources
        self.delay = delay_ms
        self.latest: list[dict[int, int]] = [{} for _ in sources]
        self.max_ts: list[int | None] = [None for _ in sources]
        self.value: int | None = None

    def observe(self, i: int, ts: int) -> int | None:
        """A tuple of input `i` at `ts`; returns the operator's watermark if it moved."""
        if self.delay is None:
            return None
        m = self.max_ts[i]
        if m is not None and ts <= m:
            return None
        self.max_ts[i] = ts
        return self._recompute()

    def upstream(self, i: int, source: int, watermark: int) -> int | None:
        """A watermark from upstream task `source` of input `i`; returns the operator's
        watermark if it moved."""
        latest = self.latest[i]
        if watermark <= latest.get(source, MIN_TIMESTAMP):
            return None
        latest[source] = watermark
        return self._recompute()

    def input_watermark(self, i: int) -> int | None:
        up = None
        latest = self.latest[i]
        if self.sources[i] and len(latest) >= len(self.sources[i]):
            up = min(latest.values())
        m = self.max_ts[i]
        gen = None if m is None or self.delay is None else m - self.delay
        if up is None:
            return gen
        return up if gen is None else max(up, gen)

    def current(self) -> int | None:
        return self.value

    def _recompute(self) -> int | None:
        values = [self.input_watermark(i) for i in range(len(self.sources))]
        known = [v for v in values if v is not None]
        if len(known) < len(values):
            return None
        w = min(known)
        if self.value is not None and w <= self.value:
            return None
        self.value = w
        return w
