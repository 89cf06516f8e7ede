"""The windowed-operator engine: pure Python, no runner, no clock of its own.

`WindowedEngine` holds the state of one operator task: per window, per key, a `PaneState`
(accumulator, counters, last emitted value, pane index). The caller feeds it tuples
(`process`), watermarks (`advance`), batch boundaries (`batch_end`) and the end of input; every
call takes the processing time `now` from the caller and appends the panes it fires to `out`
as `(key, window_start, window_end, value, timing, pane_index, is_retraction, is_first, is_last,
on_time_index, timestamp)`: the pane, then its pane info (`squall.panes.pane_info.PaneInfo.of`).

Triggers: Apex's `TriggerOption` (its rules inlined: the operators' hot path) or a trigger of
Beam's model (`squall.panes.beam_triggers`), run over a per-(key, window) state context. Each
model is a trigger driver (`squall.panes.trigger_drivers`), which the engine chooses once, when
it is built or restored, and calls where a pane may fire: the window bookkeeping, lateness,
sessions and the panes themselves are the engine's. A driver sees the engine through
`trigger_drivers.PaneHost` (`fire`, `fire_on_time`, `track`, `windows_by_end` and a few
attributes), never through its private fields.

Rules (docs/design/windowed-operators.md has the reasons):
- a tuple is dropped as too late (`dropped` counts it) by the `lateness_rule`: with Apex's
  triggers when its timestamp is below watermark - allowed lateness (`BEHIND_WATERMARK`); with
  Beam's when every window it belongs to has expired, its end at or before watermark - allowed
  lateness (`WINDOW_EXPIRED`; it counts in the windows that have not);
- the on-time pane of a window fires when the watermark reaches its end (W >= end);
- count triggers fire at exactly the N-th tuple of a (key, window) since its last firing; time
  triggers at `batch_end`, once `now` is a period past the last firing;
- a window is purged once its end is at or before W - allowed lateness, after a final (LATE) pane
  if it holds data no pane has emitted; the pane fired last before a purge (or at the end of
  input) has `is_last`;
- the on-time pane fires also when nothing arrived since the previous pane (Beam's default,
  `OnTimeBehavior.FIRE_ALWAYS`), unless `on_time_behavior=OnTimeBehavior.FIRE_IF_NON_EMPTY`;
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
('k', 0, 1000, 5, 'EARLY', 0, False, True, False, -1, 999)
('k', 0, 1000, -5, 'EARLY', 0, True, True, False, -1, 999)
('k', 0, 1000, 14, 'EARLY', 1, False, False, False, -1, 999)
('k', 0, 1000, -14, 'ON_TIME', 1, True, False, False, -1, 999)
('k', 0, 1000, 14, 'ON_TIME', 2, False, False, False, 0, 999)

A trigger of Beam's model, with the earliest tuple as the panes' timestamp:

>>> from squall.panes.beam_triggers import AfterCount, AfterWatermark
>>> from squall.panes.pane_info import TimestampCombiner
>>> e = WindowedEngine(TimeWindows(1000), Sum(), AfterWatermark(early=AfterCount(2)),
...                    timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
>>> for ts, v in [(300, 2), (100, 3), (700, 4)]:
...     _ = e.process("k", ts, v, now=0)
>>> e.advance(1000, now=0)
>>> for pane in e.take(): print(pane)
('k', 0, 1000, 5, 'EARLY', 0, False, True, False, -1, 100)
('k', 0, 1000, 4, 'ON_TIME', 1, False, False, True, 0, 700)
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, MutableMapping
from typing import Any

from squall.panes.beam_triggers import Node, Trigger, compile_trigger

# Re-exported: its home was this module, and operator snapshots written then name it here.
from squall.panes.input_watermarks import InputWatermarks as InputWatermarks
from squall.panes.pane_info import (
    EARLY,
    LATE,
    ON_TIME,
    ClosingBehavior,
    LatenessRule,
    OnTimeBehavior,
    TimestampCombiner,
)
from squall.panes.trigger_drivers import (
    HI,
    LO,
    NONSPEC,
    PaneRecord,
    TriggerDriver,
    create_trigger_driver,
)
from squall.panes.triggers import AccumulationMode, TriggerOption
from squall.panes.windowing import Windowing
from squall.panes.windows import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    TimeWindows,
    Window,
    WindowOption,
)
from squall.protocols import Accumulation

Pane = tuple[Any, int, int, Any, str, int, bool, bool, bool, int, int]
"""(key, window_start, window_end, value, timing, pane_index, is_retraction, is_first, is_last,
on_time_index, timestamp)"""

# What `WindowedEngine.process` returns when it also generates the watermark (`delay=`), as
# bit flags: the tuple was accumulated (not dropped); the watermark moved with nothing due below
# it; the generated watermark reached `due`, so the caller must `advance` to it.
ACCEPTED = 1
WATERMARK_MOVED = 2
WATERMARK_DUE = 4


class PaneState:
    """The state of one (key, window): plain data, so it pickles into snapshots.

    `late` is False until the watermark reaches the window end (or the window is created behind
    it); then it is 1 + the pane index at that moment (True, which counts as 1, for a window
    created late), so that a later pane's on-time index is `index - late + 1` (Apex triggers).
    `ext` is None or `[lo, hi, nonspec, trigger state]` (the slots LO, HI, NONSPEC, TRIG of
    `squall.panes.trigger_drivers`).
    """

    __slots__ = ("acc", "count", "ext", "fired_ms", "index", "last", "late", "updated")

    def __init__(self, acc: Any, now: int, late: bool) -> None:
        self.acc = acc
        self.count = 0  # tuples since the last firing (count triggers)
        self.updated = False  # accumulated since the last firing
        self.last: tuple[Any, ...] | None = None  # (value, on-time index, timestamp) of the
        # last pane, when one is kept
        self.index = 0  # index of the next pane
        self.fired_ms = now  # processing time of the last firing (or of creation)
        self.late: bool | int = late  # the watermark has reached the window end (see above)
        self.ext: list[Any] | None = None

    def __getstate__(self) -> tuple:
        return (self.acc, self.count, self.updated, self.last, self.index, self.fired_ms,
                self.late, self.ext)

    def __setstate__(self, s: tuple) -> None:
        if len(s) == 7:  # written before pane info
            s = (*s, None)
        (self.acc, self.count, self.updated, self.last, self.index, self.fired_ms,
         self.late, self.ext) = s

    def __repr__(self) -> str:
        return (f"PaneState(acc={self.acc!r}, count={self.count}, updated={self.updated}, "
                f"last={self.last!r}, index={self.index}, late={self.late}, ext={self.ext!r})")


WindowStore = MutableMapping[Window, dict[Any, PaneState]]
"""Where an engine keeps its panes: window -> key -> state. Any dict-like store will do: an
in-memory dict by default, `squall.panes.state_mapping.StateWindowStore` over a state provider."""


class WindowedEngine:
    """State, triggers and accumulation of one windowed-operator task (see the module doc).

    `window=None` means the windows come with the tuples (window propagation: pass `window=` to
    `process`). `allowed_lateness_ms=None` never drops or purges (state grows without bound).
    `trigger`: Apex's `TriggerOption` (it carries the accumulation mode) or a trigger of Beam's
    model (`squall.panes.beam_triggers`; `mode` is the accumulation mode, discarding by default).
    `on_time_behavior`, `closing_behavior`: whether the on-time pane and the final pane fire when
    nothing arrived since the previous pane. `timestamp_combiner`: the panes' output timestamp.
    These settings are an operator's windowing strategy; `WindowedEngine.of(windowing,
    accumulation)` takes them as one `squall.panes.windowing.Windowing`.
    """

    def __init__(self, window: WindowOption | None, accumulation: Accumulation,
                 trigger: TriggerOption | Trigger, allowed_lateness_ms: int | None = None,
                 store: WindowStore | None = None,
                 sessions: MutableMapping[Any, list[Window]] | None = None, *,
                 mode: AccumulationMode | None = None,
                 on_time_behavior: OnTimeBehavior = OnTimeBehavior.FIRE_ALWAYS,
                 closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
                 timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW,
                 lateness_rule: LatenessRule | None = None) -> None:
        self._configure(Windowing(window, trigger, allowed_lateness_ms, mode, on_time_behavior,
                                  closing_behavior, timestamp_combiner, lateness_rule),
                        accumulation, store, sessions)

    @classmethod
    def of(cls, windowing: Windowing, accumulation: Accumulation,
           store: WindowStore | None = None,
           sessions: MutableMapping[Any, list[Window]] | None = None) -> WindowedEngine:
        """The engine of an operator's windowing strategy (`squall.panes.windowing`): what the
        operators build their tasks' engines from.

        >>> from squall.panes.accumulations import Sum
        >>> e = WindowedEngine.of(Windowing(TimeWindows(1000), allowed_lateness_ms=0), Sum())
        >>> e.lateness, e.mode.value, e.lateness_rule.value
        (0, 'discarding', 'behind_watermark')
        """
        engine = cls.__new__(cls)
        engine._configure(windowing, accumulation, store, sessions)
        return engine

    def _configure(self, windowing: Windowing, accumulation: Accumulation,
                   store: WindowStore | None,
                   sessions: MutableMapping[Any, list[Window]] | None) -> None:
        windowing.check(accumulation)
        trigger = windowing.trigger
        # Beam's triggers (and TriggerOption.as_trigger()) run compiled, as a tree of nodes.
        self._root: Node | None = (None if isinstance(trigger, TriggerOption)
                                   else compile_trigger(trigger))
        # The engine keeps the strategy's settings as attributes of its own: they are what its
        # snapshots hold, and what its hot paths read.
        self.window = windowing.window
        self.accumulation = accumulation
        self.trigger = trigger
        self.mode = windowing.accumulation_mode
        self.on_time_behavior = windowing.on_time_behavior
        self.closing_behavior = windowing.closing_behavior
        self.timestamp_combiner = windowing.timestamp_combiner
        self.lateness_rule = windowing.rule
        self.lateness = windowing.allowed_lateness_ms
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
        self.closed_drops = 0  # (tuple, window)s dropped because the window's trigger finished
        # (tuple, window)s left out because that window expired while others of the tuple had
        # not (Beam's lateness rule, sliding windows)
        self.expired_drops = 0
        self.now = 0
        self._init_derived()

    def _init_derived(self) -> None:
        """What follows from the configuration: the trigger driver and the flags the hot paths
        read (not state: a snapshot leaves them out and a restore rebuilds them)."""
        window = self.window
        mode = self.mode
        self._discarding = mode is AccumulationMode.DISCARDING
        self._retracting = mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self._only_updated = bool(getattr(self.trigger, "only_updated", False))
        self._keep_last = self._retracting or self._only_updated
        self._on_time_always = self.on_time_behavior is OnTimeBehavior.FIRE_ALWAYS
        self._closing_always = self.closing_behavior is ClosingBehavior.FIRE_ALWAYS
        self.track_ts = self.timestamp_combiner is not TimestampCombiner.OUTPUT_AT_EOW
        self._earliest = self.timestamp_combiner is TimestampCombiner.OUTPUT_AT_EARLIEST
        self._slide = window.slide_ms if isinstance(window, TimeWindows) else 0
        self._default = self.accumulation.default_accumulated_value
        self._accumulate1 = self.accumulation.accumulate
        self._merging = bool(window is not None and window.merging)
        self._window_rule = self.lateness_rule is LatenessRule.WINDOW_EXPIRED
        self._final = False  # panes fired now are the last of their (key, window)
        self._finals: set[tuple[Any, Window]] = set()  # ... and had one (closing FIRE_ALWAYS)
        driver: TriggerDriver = create_trigger_driver(self.trigger, self._root, self._merging)
        self._driver = driver
        # A pane with nothing new since the previous one: Apex repeats it in accumulating modes
        # (time triggers); Beam triggers and discarding panes skip it. On-time and final panes
        # follow the on-time and closing behaviours.
        self._skip_empty = self._discarding or driver.skips_empty_panes
        self._nonspec_kept = driver.keeps_on_time_index
        # Time windows (tumbling or sliding) under a driver whose rules `process` may inline
        # (Apex's) take its hot path, which checks Apex's count triggers itself.
        self._fixed = window.duration_ms if isinstance(window, TimeWindows) and (
            driver.inlined) else 0
        self._early_count = driver.early_count
        self._late_count = driver.late_count
        self._counting = bool(self._early_count or self._late_count)

    # The driver, bound methods and flags derived from the configuration are not state: a
    # snapshot leaves them out and a restore rebuilds them.
    _DERIVED = frozenset(("_driver", "_fixed", "_slide", "_default", "_accumulate1", "_counting",
                          "_window_rule", "_nonspec_kept",
                          "_merging", "_discarding", "_retracting", "_only_updated",
                          "_keep_last", "_skip_empty", "_on_time_always", "_closing_always",
                          "track_ts", "_earliest", "_final", "_finals",
                          "_early_count", "_late_count"))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._DERIVED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Snapshots written before a setting existed get the behaviour they were written with.
        self.__dict__.update({"_root": None, "closed_drops": 0, "expired_drops": 0,
                              "on_time_behavior": OnTimeBehavior.FIRE_IF_NON_EMPTY,
                              "closing_behavior": ClosingBehavior.FIRE_IF_NON_EMPTY,
                              "timestamp_combiner": TimestampCombiner.OUTPUT_AT_EOW,
                              "lateness_rule": LatenessRule.BEHIND_WATERMARK})
        self.__dict__.update(state)
        if "mode" not in state:
            self.mode = self.trigger.mode  # type: ignore[union-attr]
        self._init_derived()
        self._update_due()  # derived from the heaps (and absent from older snapshots)

    # What defines the engine besides its two stores: small (per window at most, never per key).
    PROGRESS = ("watermark", "on_time_heap", "purge_heap", "dropped", "now", "closed_drops",
                "expired_drops")

    def progress(self) -> dict[str, Any]:
        """The engine's state outside `windows` and `sessions` (a stored operator keeps it
        next to them); the heaps are copied, so later changes do not alter the result."""
        return {"watermark": self.watermark, "on_time_heap": list(self.on_time_heap),
                "purge_heap": list(self.purge_heap), "dropped": self.dropped, "now": self.now,
                "closed_drops": self.closed_drops, "expired_drops": self.expired_drops}

    def restore_progress(self, progress: dict[str, Any]) -> None:
        for name in self.PROGRESS:
            value = progress.get(name, 0)  # (progress written before a counter existed: 0)
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
        behind = lateness is not None and ts < self.watermark - lateness
        if behind and (not self._window_rule or self._expired(ts, window)):
            self.dropped += 1
            return False if delay is None else self._generated(ts - delay)
        self.now = now
        fixed = self._fixed
        if behind:  # Beam's rule: it counts in its windows that have not expired
            self._unexpired(key, ts, value, now, second, window,
                            self.watermark - lateness)  # type: ignore[operator]
        elif fixed and window is None and not second:
            # The hot path (time windows, one input): assign, _add and _accumulate inlined.
            slide = self._slide
            last = ts - ts % slide
            start = last - fixed + slide  # the earliest window: by end, as `assign`
            windows = self.windows
            track = self.track_ts
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
                if track:
                    self.track(st, ts)
                if self._counting:
                    n = self._late_count if st.late else self._early_count
                    if n is not None and st.count >= n:
                        self.fire(key, w, st, LATE if st.late else EARLY)
                if start == last:
                    break
                start += slide
        elif window is not None:
            self._add(key, window, value, ts, now, second)
        elif self.window.merging:  # type: ignore[union-attr]
            self._add_session(key, ts, value, now, second)
        else:
            for w in self.window.assign(ts):  # type: ignore[union-attr]
                self._add(key, w, value, ts, now, second)
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

    def process_at(self, key: Any, ts: int, value: Any, now: int, second: bool,
                   window: Window | None, watermark: int) -> bool:
        """`process`, the tuple judged by the lateness rule against `watermark` (its source
        partition's just before it) where that is above the engine's own: False if dropped.

        >>> from squall.panes.accumulations import Sum
        >>> from squall.panes.beam_triggers import AfterCount, AfterWatermark
        >>> from squall.panes.windows import TimeWindows
        >>> e = WindowedEngine(TimeWindows(10_000, 5_000), Sum(), AfterWatermark(),
        ...                    allowed_lateness_ms=0)
        >>> e.process_at("k", 6_000, 1, 0, False, None, 9_000)  # [0, 10 s) is not expired
        True
        >>> sorted(e.windows), e.expired_drops  # [5 s, 15 s) takes it; [0, 10 s) too
        ([(0, 10000), (5000, 15000)], 0)
        >>> e.process_at("k", 6_000, 1, 0, False, None, 12_000)  # only [5 s, 15 s) is not
        True
        >>> e.expired_drops, e.process_at("k", 6_000, 1, 0, False, None, 15_000)
        (1, False)
        """
        lateness = self.lateness
        if lateness is None or watermark <= self.watermark or ts >= watermark - lateness:
            return bool(self.process(key, ts, value, now, second, window))
        horizon = watermark - lateness
        if not self._window_rule or self._expired(ts, window, horizon):
            self.dropped += 1
            return False
        self.now = now
        self._unexpired(key, ts, value, now, second, window, horizon)
        return True

    def drops_at(self, ts: int, window: Window | None, watermark: int) -> bool:
        """Whether `process_at` would drop a tuple at `ts` judged against `watermark`, which is
        above the engine's own (the lateness rule alone; nothing changes).

        >>> from squall.panes.accumulations import Max
        >>> from squall.panes.beam_triggers import AfterWatermark
        >>> from squall.panes.windows import TimeWindows
        >>> e = WindowedEngine(TimeWindows(10_000), Max(), AfterWatermark(),
        ...                    allowed_lateness_ms=30_000)
        >>> e.drops_at(4_000, None, 35_000), e.drops_at(4_000, None, 45_000)
        (False, True)
        """
        lateness = self.lateness
        if lateness is None or ts >= watermark - lateness:
            return False
        return not self._window_rule or self._expired(ts, window, watermark - lateness)

    def behind_unfired(self, ts: int, window: Window | None, watermark: int) -> bool:
        """Whether a window of a tuple at `ts` ends at or below `watermark` (the tuple is behind
        it there) but has not had its on-time pane here yet (the engine's watermark is below its
        end). A session's window is the tuple's own, before any merge.

        >>> from squall.panes.accumulations import Count
        >>> from squall.panes.beam_triggers import AfterWatermark
        >>> from squall.panes.windows import SessionWindows
        >>> e = WindowedEngine(SessionWindows(5_000), Count(), AfterWatermark())  # [ts, ts + gap)
        >>> [e.behind_unfired(4_000, None, w) for w in (8_000, 9_000)]
        [False, True]
        """
        if window is not None:
            ends = [window[1]]
        elif self._merging:
            ends = [ts + self.window.gap_ms]  # type: ignore[union-attr]
        else:
            ends = [w[1] for w in self.window.assign(ts)]  # type: ignore[union-attr]
        own = self.watermark
        return any(own < end <= watermark for end in ends)

    def _unexpired(self, key: Any, ts: int, value: Any, now: int, second: bool,
                   window: Window | None, horizon: int) -> None:
        """Beam's rule for a tuple behind the watermark: it counts in its windows that end
        after `horizon` (watermark - allowed lateness)."""
        if window is not None:
            self._add(key, window, value, ts, now, second)
        elif self._merging:
            self._add_session(key, ts, value, now, second)
        else:
            for w in self.window.assign(ts):  # type: ignore[union-attr]
                if w[1] > horizon:
                    self._add(key, w, value, ts, now, second)
                else:
                    self.expired_drops += 1

    def _expired(self, ts: int, window: Window | None, horizon: int | None = None) -> bool:
        """Beam's rule: every window of a tuple at `ts` has expired (its end at or before
        `horizon`, by default watermark - allowed lateness); a session's is the tuple's own,
        before any merge."""
        if horizon is None:
            horizon = self.watermark - self.lateness  # type: ignore[operator]
        if window is not None:
            return window[1] <= horizon
        if self._merging:
            return ts + self.window.gap_ms <= horizon  # type: ignore[union-attr]
        return max(w[1] for w in self.window.assign(ts)) <= horizon  # type: ignore[union-attr]

    def _generated(self, w: int) -> int:
        """A generated watermark `w`: moved here if nothing is due below it (what `advance`
        would do); WATERMARK_DUE if the caller must `advance` to it."""
        if w <= self.watermark:
            return 0
        if w < self.due:
            self.watermark = w
            return WATERMARK_MOVED
        return WATERMARK_DUE

    def _add(self, key: Any, w: Window, value: Any, ts: int, now: int, second: bool) -> None:
        """A tuple for (key, w), whose state is created (and the window scheduled) if new."""
        keys = self.windows.get(w)
        if keys is None:
            keys = self.windows[w] = {}
            self._scheduled(w)
        driver = self._driver
        st = keys.get(key)
        if st is None:
            st = keys[key] = PaneState(self._default(), now, w[1] <= self.watermark)
            driver.init_pane(st)
        driver.element(self, key, w, st, value, ts, now, second)

    # ---- what trigger drivers use (`squall.panes.trigger_drivers.PaneHost`) ---------------
    def windows_by_end(self) -> list[Window]:
        """The live windows in firing order: by end, then start."""
        return sorted(self.windows, key=_by_end)

    def track(self, st: PaneRecord, ts: int) -> None:
        """Remember the smallest and largest timestamp since the last pane (TimestampCombiner)."""
        ext = st.ext
        if ext is None:
            st.ext = [ts, ts, 0, None]
        elif ext[LO] is None:
            ext[LO] = ext[HI] = ts
        elif ts < ext[LO]:
            ext[LO] = ts
        elif ts > ext[HI]:
            ext[HI] = ts

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
            self._add(key, sessions[lo], value, ts, now, second)  # inside an existing session
            return
        if hi == lo:  # a new session
            w = (start, end)
            sessions.insert(lo, w)
            self._add(key, w, value, ts, now, second)
            return
        merged = sessions[lo:hi]
        w = (min(start, merged[0][0]), max(end, merged[-1][1]))
        sessions[lo:hi] = [w]
        self._merge_sessions(key, merged, w, value, ts, now, second)

    def _merge_sessions(self, key: Any, merged: list[Window], w: Window, value: Any, ts: int,
                        now: int, second: bool) -> None:
        acc = self.accumulation
        windows = self.windows
        new_acc = acc.default_accumulated_value()
        count, updated, fired_ms, emitted = 0, False, now, False
        parts: list[PaneState] = []
        for old in merged:
            keys = windows[old]
            st = keys.pop(key)
            if not keys:
                del windows[old]
            if self._retracting and st.last is not None:
                self.out.append(self._retraction(key, old, st, LATE if st.late else EARLY))
            new_acc = acc.merge(new_acc, st.acc)
            count += st.count
            updated = updated or st.updated
            fired_ms = min(fired_ms, st.fired_ms)
            emitted = emitted or st.index > 0
            parts.append(st)
        target = windows.get(w)
        if target is None:
            target = windows[w] = {}
            self._scheduled(w)
        # A merged session is a new window: pane index from 0, nothing emitted yet.
        st = target[key] = PaneState(new_acc, fired_ms, w[1] <= self.watermark)
        st.count, st.updated = count, updated
        exts = [p.ext for p in parts if p.ext is not None]
        lows = [e[LO] for e in exts if e[LO] is not None]
        if lows:
            st.ext = [min(lows), max(e[HI] for e in exts if e[HI] is not None), 0, None]
        self._driver.merged(self, key, w, st, parts, value, ts, now, second, emitted)

    # ---- firing --------------------------------------------------------------------------
    def fire(self, key: Any, w: Window, st: PaneRecord, timing: str, last: bool = False
             ) -> None:
        """(key, w) fires a pane of `timing` (`last`: no pane of it follows): after the
        retraction of the previous one in accumulating-and-retracting mode, unless it is empty and
        the on-time or closing behaviour (or the driver) skips it, or `only_updated` suppresses
        an unchanged value."""
        if not st.updated:  # nothing arrived since the last pane
            if timing is ON_TIME:
                if not (self._on_time_always or (last and self._closing_always)):
                    return
            elif last:
                if not self._closing_always:
                    return
            elif self._skip_empty:
                return
        acc = self.accumulation
        value = acc.get_output(st.acc)
        prev = st.last
        st.count = 0
        st.updated = False
        st.fired_ms = self.now
        if prev is not None and self._only_updated and prev[0] == value:
            return
        index = st.index
        if timing is EARLY:
            on_time_index = -1
        elif self._nonspec_kept:
            ext = st.ext
            on_time_index = ext[NONSPEC]  # type: ignore[index]
            ext[NONSPEC] = on_time_index + 1  # type: ignore[index]
        else:
            on_time_index = index - st.late + 1
        stamp = self._stamp(st, w)
        if prev is not None and self._retracting:
            self.out.append(self._retraction(key, w, st, timing))
        self.out.append((key, w[0], w[1], value, timing, index, False, index == 0, last,
                         on_time_index, stamp))
        st.index = index + 1
        if self._keep_last:
            st.last = (value, on_time_index, stamp)
        if self._discarding:
            st.acc = acc.default_accumulated_value()
        if last and self._closing_always:
            self._finals.add((key, w))

    def fire_on_time(self, w: Window, keys: Mapping[Any, PaneRecord], final: bool) -> None:
        """Every key of `w` not yet late becomes late and fires its ON_TIME pane (`final`: the
        window is purged in this step, or input ended, so the panes are its last); keys already
        late are left alone."""
        if self._keep_last or self.track_ts:  # retractions, suppressed repeats, timestamps
            for key, st in keys.items():
                if not st.late:
                    st.late = st.index + 1
                    self.fire(key, w, st, ON_TIME, final)
            return
        # `fire` inlined for the common modes (no last value kept): a window's on-time firing
        # is one pane per key, the bulk of all panes of a tumbling-window count.
        start, end = w
        append = self.out.append
        get_output = self.accumulation.get_output
        discarding = self._discarding
        closing = final and self._closing_always  # the panes are final, and noted as such
        skip = not self._on_time_always and not closing
        default = self._default
        now = self.now
        stamp = end - 1
        for key, st in keys.items():
            if st.late:
                continue
            index = st.index
            st.late = index + 1
            if skip and not st.updated:
                continue  # nothing arrived since the last pane (FIRE_IF_NON_EMPTY)
            append((key, start, end, get_output(st.acc), ON_TIME, index, False, index == 0,
                    final, 0, stamp))
            st.count = 0
            st.updated = False
            st.fired_ms = now
            st.index = index + 1
            if discarding:
                st.acc = default()
            if closing:
                self._finals.add((key, w))

    def _retraction(self, key: Any, w: Window, st: PaneRecord, timing: str) -> Pane:
        """The retraction of the last pane of (key, w): its value retracted, the timing of the
        pane that replaces it, the retracted pane's index, on-time index and timestamp."""
        last = st.last
        assert last is not None
        index = st.index - 1
        on_time_index, stamp = last[1:] if len(last) == 3 else (-1, w[1] - 1)
        return (key, w[0], w[1], self.accumulation.get_retraction(last[0]),
                timing, index, True, index == 0, False, on_time_index, stamp)

    def _stamp(self, st: PaneRecord, w: Window) -> int:
        """The output timestamp of the pane (key, w) fires now; forgets the tuples' range."""
        ext = st.ext
        if not self.track_ts or ext is None or ext[LO] is None:
            return w[1] - 1
        stamp = ext[LO] if self._earliest else ext[HI]
        ext[LO] = ext[HI] = None
        return stamp

    def advance(self, watermark: int, now: int) -> None:
        """Apply a watermark (ignored unless it is larger than the current one): on-time panes
        for the windows it reaches, in window order (end, start), then purges."""
        previous = self.watermark
        if watermark <= previous:
            return
        self.watermark = watermark
        self.now = now
        if watermark < self.due:
            return  # nothing is due yet
        self._finals.clear()
        windows = self.windows
        heap = self.on_time_heap
        horizon = None if self.lateness is None else watermark - self.lateness
        driver = self._driver
        # A driver whose on-time step is `fire_on_time` and nothing else (Apex's) is not called
        # per window: a call more per window is one per tuple with sessions.
        fire_all = self.fire_on_time if driver.fires_on_time_panes else None
        on_time = driver.on_time
        while heap and heap[0][0] <= watermark:
            end, start = heapq.heappop(heap)
            w = (start, end)
            keys = windows.get(w)
            if keys:  # else merged away
                final = self._final or (horizon is not None and end <= horizon)
                if fire_all is not None:
                    fire_all(w, keys, final)
                else:
                    on_time(self, w, keys, final)
        if horizon is not None:
            self._purge(horizon, previous)
        self._update_due()

    def _purge(self, horizon: int, previous: int) -> None:
        windows = self.windows
        heap = self.purge_heap
        while heap and heap[0][0] <= horizon:
            end, start = heapq.heappop(heap)
            w = (start, end)
            keys = windows.pop(w, None)
            if not keys:
                continue
            for key, st in keys.items():
                # Data no pane has emitted: a final pane, not a silent loss.
                self._final_pane(key, w, st, end > previous)
                if self._merging:  # (the session map may be a store: not tested for emptiness)
                    sessions = self.sessions[key]
                    sessions.remove(w)
                    if not sessions:
                        del self.sessions[key]

    def _final_pane(self, key: Any, w: Window, st: PaneState, timer: bool) -> None:
        """The window closes (purge, end of input): a last pane if it holds data no pane has
        emitted (or always, with ClosingBehavior.FIRE_ALWAYS). `timer`: the watermark reached
        the window end in this step (Beam: the pane may be ON_TIME)."""
        if not (st.updated or self._closing_always) or (key, w) in self._finals:
            return
        self._driver.final_pane(self, key, w, st, timer)

    def batch_end(self, now: int) -> None:
        """A batch boundary at processing time `now`: time triggers that are due fire."""
        self._driver.batch_end(self, now)

    def end_of_input(self, now: int) -> None:
        """Input ended: the watermark goes to the end of time, every window fires its final pane
        (on-time, or LATE for data that arrived after it), and windows are purged. Every pane
        fired here is the last of its (key, window)."""
        self._final = True
        try:
            self.advance(MAX_TIMESTAMP, now)
            self.now = now
            for w in self.windows_by_end():
                for key, st in self.windows[w].items():
                    self._final_pane(key, w, st, False)
        finally:
            self._final = False

    def take(self) -> list[Pane]:
        """The panes fired since the last call, in firing order."""
        out, self.out = self.out, []
        return out


def _by_end(w: Window) -> tuple[int, int]:
    return (w[1], w[0])
