"""Trigger drivers: what one trigger model does where a pane may fire (Beam's `TriggerDriver`).

A `squall.panes.engine.WindowedEngine` keeps the windows, the lateness, the sessions and the
panes; its driver decides when a (key, window) fires. The engine chooses the driver once, when
it is built or restored (`create_trigger_driver`, as Beam's), and calls it at a tuple of a
(key, window), a session merge, the watermark reaching a window's end, a window's close and a
batch end, so no per-tuple path asks which model it runs:

- `ApexTriggerDriver`: Apex's `TriggerOption`, its rules inlined (the operators' hot path);
- `GeneralTriggerDriver`: a trigger of Beam's model (`squall.panes.beam_triggers`), compiled
  into a tree of nodes, `TriggerOption.as_trigger()` included (the same panes for the same
  option).

A driver holds only what it derives from the engine's configuration. It sees the engine through
`PaneHost`, the engine's side of the seam: the (key, window) records (`PaneRecord`, plain data
whose `ext` slots are `LO`, `HI`, `NONSPEC`, `TRIG`), the watermark and processing time, and the
engine's own firing (`fire`, `fire_on_time`), which applies the accumulation mode, the on-time
and closing behaviours, retractions and pane info. The engine passes itself to every call, so
the two do not refer to each other and a snapshot of the engine leaves the driver out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from squall.panes.beam_triggers import (
    BATCH_END,
    BEFORE_ELEMENT,
    ELEMENT,
    WATERMARK,
    Node,
    Trigger,
    TriggerContext,
    new_state,
)
from squall.panes.pane_info import EARLY, LATE, ON_TIME
from squall.panes.triggers import TriggerOption
from squall.panes.windows import MAX_TIMESTAMP, Window
from squall.protocols import Accumulation

# The slots of `PaneState.ext`: the smallest and largest timestamp since the last pane (for
# TimestampCombiner), the next on-time (non-speculative) index and the trigger state (Beam
# triggers only).
LO, HI, NONSPEC, TRIG = 0, 1, 2, 3


class PaneRecord(Protocol):
    """The state of one (key, window) (`squall.panes.engine.PaneState`, which has the meanings):
    the accumulator, the tuples and whether any came since the last pane, the last pane kept,
    the next pane index, when it last fired, whether the watermark has reached the window end,
    and `ext` (None, or the slots `LO`, `HI`, `NONSPEC`, `TRIG`)."""

    acc: Any
    count: int
    updated: bool
    last: tuple[Any, ...] | None
    index: int
    fired_ms: int
    late: bool | int
    ext: list[Any] | None


class PaneHost(Protocol):
    """What a trigger driver uses of its engine (`squall.panes.engine.WindowedEngine`).

    Read: `accumulation`, `windows` (window -> key -> its `PaneRecord`), `watermark`, `track_ts`
    (the panes' timestamps come from their tuples: `track` each one a driver adds). Set: `now`
    (the processing time of the step being handled), `closed_drops` (a tuple dropped because its
    (key, window)'s trigger finished). The pane records' fields are the driver's to read and
    update as `PaneState` says; panes go out only through `fire` and `fire_on_time`.
    """

    accumulation: Accumulation
    watermark: int
    now: int
    closed_drops: int
    track_ts: bool

    @property
    def windows(self) -> Mapping[Window, Mapping[Any, PaneRecord]]: ...

    def track(self, st: PaneRecord, ts: int) -> None:
        """Note the timestamp `ts` of a tuple added to the record (for the pane's own), when
        `track_ts`."""
        ...

    def fire(self, key: Any, w: Window, st: PaneRecord, timing: str, last: bool = False) -> None:
        """(key, w) fires a pane of `timing` (`last`: no pane of it follows), unless empty panes
        are skipped there or an unchanged value is suppressed."""
        ...

    def fire_on_time(self, w: Window, keys: Mapping[Any, PaneRecord], final: bool) -> None:
        """Every key of `w` not yet late becomes late and fires its ON_TIME pane (`final`: the
        last of its (key, window)); keys already late are left alone."""
        ...

    def windows_by_end(self) -> list[Window]:
        """The live windows in firing order: by end, then start."""
        ...


class TriggerDriver(ABC):
    """What one trigger model does where a pane may fire (Beam's `TriggerDriver`): a tuple of a
    (key, window), a session merge, the watermark reaching a window's end, a window's close, a
    batch end.

    An engine chooses its driver once, when it is built or restored (`create_trigger_driver`),
    and calls it at those points, so no per-tuple path asks which model it runs. A driver holds
    only what it derives from the engine's configuration; the state is the engine's, passed to
    every call as `e` (so the two do not refer to each other, and a snapshot of the engine
    leaves the driver out).
    """

    # The engine's hot path for time windows (`WindowedEngine.process`) may do what `element`
    # does itself: accumulate and check the count triggers `early_count` and `late_count`.
    inlined = False
    early_count: int | None = None
    late_count: int | None = None
    # A pane with nothing new since the previous one is skipped (discarding panes always are).
    skips_empty_panes = False
    # The on-time index is counted in the pane's state (`ext[NONSPEC]`), not derived from the
    # pane index at the moment the window went late (`PaneState.late`).
    keeps_on_time_index = False
    # `on_time` is `e.fire_on_time(w, keys, final)` and nothing else, which the engine then
    # calls itself.
    fires_on_time_panes = False

    @abstractmethod
    def init_pane(self, st: PaneRecord) -> None:
        """A (key, window) starts: `st` is its state, which has seen nothing."""

    @abstractmethod
    def element(self, e: PaneHost, key: Any, w: Window, st: PaneRecord, value: Any,
                ts: int, now: int, second: bool) -> None:
        """A tuple for (key, w): accumulate it, and fire what it makes due."""

    @abstractmethod
    def merged(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
               parts: Sequence[PaneRecord], value: Any, ts: int, now: int, second: bool,
               emitted: bool) -> None:
        """Sessions `parts` of `key` merged into `w` (state `st`, their data merged) because of
        this tuple, which is not in it yet; `emitted`: some part had fired a pane."""

    @abstractmethod
    def on_time(self, e: PaneHost, w: Window, keys: Mapping[Any, PaneRecord],
                final: bool) -> None:
        """The watermark reached the end of `w`; `final`: the window is purged in this step
        (or input ended), so the panes fired now are its last."""

    @abstractmethod
    def final_pane(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
                   timer: bool) -> None:
        """(key, w) closes holding data no pane has emitted (or with ClosingBehavior.FIRE_ALWAYS):
        its last pane. `timer`: the watermark reached the window end in this step."""

    @abstractmethod
    def batch_end(self, e: PaneHost, now: int) -> None:
        """A batch boundary at processing time `now`."""


def create_trigger_driver(trigger: TriggerOption | Trigger, root: Node | None,
                          merging: bool) -> TriggerDriver:
    """The driver of an engine's trigger (Beam's `create_trigger_driver`), given the trigger, its
    compiled tree (`compile_trigger`; None for Apex's option) and whether the engine's windows
    merge (sessions). Apex's
    `TriggerOption` runs with its rules inlined (`ApexTriggerDriver`, the operators' hot path);
    a trigger of Beam's model, `TriggerOption.as_trigger()` included, runs compiled
    (`GeneralTriggerDriver`), with the same panes for the same option.

    >>> from squall.panes.beam_triggers import AfterWatermark, compile_trigger
    >>> option = TriggerOption.at_watermark()
    >>> print(type(create_trigger_driver(option, None, False)).__name__)
    ApexTriggerDriver
    >>> for trigger in (option.as_trigger(), AfterWatermark()):
    ...     root = compile_trigger(trigger)
    ...     print(type(create_trigger_driver(trigger, root, False)).__name__)
    GeneralTriggerDriver
    GeneralTriggerDriver
    """
    if root is None:
        assert isinstance(trigger, TriggerOption), "a trigger of Beam's model runs compiled"
        return ApexTriggerDriver(trigger)
    assert isinstance(trigger, Trigger)
    return GeneralTriggerDriver(trigger, root, merging)


class ApexTriggerDriver(TriggerDriver):
    """Apex's `TriggerOption`, its rules inlined: a count trigger fires at exactly the N-th tuple
    of a (key, window) since its last pane, a time trigger at a batch end once its period has
    passed since the last pane, the on-time pane when the watermark reaches the window end, the
    final pane of a window LATE; a pane's on-time index follows from its pane index."""

    inlined = True

    def __init__(self, option: TriggerOption) -> None:
        self.early_count = option.early_count
        self.late_count = option.late_count
        self._early_ms = option.early_ms
        self._late_ms = option.late_ms
        self._on_time_pane = self.fires_on_time_panes = option.on_time

    def init_pane(self, st: PaneRecord) -> None:
        """Apex's rules keep no state besides the engine's record."""

    def element(self, e: PaneHost, key: Any, w: Window, st: PaneRecord, value: Any,
                ts: int, now: int, second: bool) -> None:
        acc = e.accumulation  # (a call to share these lines would cost this path 2 to 7 %)
        st.acc = acc.accumulate2(st.acc, value) if second else acc.accumulate(  # type: ignore
            st.acc, value)
        st.updated = True
        st.count += 1
        if e.track_ts:
            e.track(st, ts)
        n = self.late_count if st.late else self.early_count
        if n is not None and st.count >= n:
            e.fire(key, w, st, LATE if st.late else EARLY)

    def merged(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
               parts: Sequence[PaneRecord], value: Any, ts: int, now: int, second: bool,
               emitted: bool) -> None:
        self.element(e, key, w, st, value, ts, now, second)
        if st.late and emitted and st.updated:
            # Behind the watermark no on-time pane will come: replace the superseded (and, in
            # accumulating-and-retracting mode, retracted) panes at once.
            e.fire(key, w, st, LATE)

    def on_time(self, e: PaneHost, w: Window, keys: Mapping[Any, PaneRecord],
                final: bool) -> None:
        """Every key not yet late becomes late and fires its on-time pane. A key already late
        belongs to a duplicate schedule of a re-created window: it fired once already."""
        if self._on_time_pane:
            e.fire_on_time(w, keys, final)
            return
        for st in keys.values():
            if not st.late:
                st.late = st.index + 1

    def final_pane(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
                   timer: bool) -> None:
        e.fire(key, w, st, LATE, True)

    def batch_end(self, e: PaneHost, now: int) -> None:
        """Time triggers that are due fire, in window order."""
        early, late = self._early_ms, self._late_ms
        if not (early or late):
            return
        e.now = now
        ended = e.watermark == MAX_TIMESTAMP
        windows = e.windows
        for w in e.windows_by_end():
            keys = windows[w]
            for key, st in list(keys.items()):
                period = late if st.late else early
                if period and now - st.fired_ms >= period and (st.updated or not ended):
                    e.fire(key, w, st, LATE if st.late else EARLY)


class GeneralTriggerDriver(TriggerDriver):
    """A trigger of Beam's model (`squall.panes.beam_triggers`), compiled into a tree of nodes
    whose state is the pane's `ext[TRIG]`, asked as Beam's runners ask it: at each tuple
    (after the processing-time firings due before it), when the watermark reaches the window
    end (Beam's end-of-window timer), at batch ends if it uses processing time; never at the
    close, whose pane is Beam Java's garbage-collection pane. A finished trigger closes its
    (key, window): later tuples for it are dropped (`closed_drops`)."""

    keeps_on_time_index = True

    def __init__(self, trigger: Trigger, root: Node, merging: bool) -> None:
        self._root = root
        self._merging = merging
        self._pt = trigger.uses_processing_time
        self._has_on_time_pane = trigger.has_on_time_pane
        self.skips_empty_panes = not trigger.fires_empty_panes

    def init_pane(self, st: PaneRecord) -> None:
        st.ext = [None, None, 0, new_state(self._root)]

    def element(self, e: PaneHost, key: Any, w: Window, st: PaneRecord, value: Any,
                ts: int, now: int, second: bool) -> None:
        """Processing-time firings due before the tuple, then the tuple, then the trigger (each
        tuple is a bundle: results do not depend on how input is cut into batches)."""
        ext = st.ext
        assert ext is not None
        trig = ext[TRIG]
        root = self._root
        if trig[0] & 1:  # the trigger finished: the window is closed for this key
            e.closed_drops += 1
            return
        if self._pt:
            c = TriggerContext(trig, w, e.watermark, now, self._merging, (), BEFORE_ELEMENT, st)
            if root.should_fire(c):
                self._fire(e, key, w, st, c, False)
                if trig[0] & 1:
                    e.closed_drops += 1
                    return
        acc = e.accumulation  # (a call to share these lines would cost this path 2 to 7 %)
        st.acc = acc.accumulate2(st.acc, value) if second else acc.accumulate(  # type: ignore
            st.acc, value)
        st.updated = True
        st.count += 1
        if e.track_ts:
            e.track(st, ts)
        c = TriggerContext(trig, w, e.watermark, now, self._merging, (), ELEMENT, st)
        root.on_element(c)
        if root.should_fire(c):
            self._fire(e, key, w, st, c, False)

    def merged(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
               parts: Sequence[PaneRecord], value: Any, ts: int, now: int, second: bool,
               emitted: bool) -> None:
        """The trigger merges its parts' states (counts summed, the earliest due time, finished
        bits after each trigger's rule); the pane index restarts (Beam Python)."""
        root = self._root
        if st.ext is None:
            st.ext = [None, None, 0, None]
        st.ext[TRIG] = new_state(root)
        c = TriggerContext(st.ext[TRIG], w, e.watermark, now, True,
                           [p.ext[TRIG] for p in parts], ELEMENT, st)  # type: ignore[index]
        root.on_merge(c)
        self.element(e, key, w, st, value, ts, now, second)

    def on_time(self, e: PaneHost, w: Window, keys: Mapping[Any, PaneRecord],
                final: bool) -> None:
        """Each key's trigger is asked, as by Beam's end-of-window timer."""
        root = self._root
        watermark, now, merging = e.watermark, e.now, self._merging
        for key, st in list(keys.items()):
            st.late = st.late or st.index + 1
            trig = st.ext[TRIG]  # type: ignore[index]
            if trig[0] & 1:
                continue
            c = TriggerContext(trig, w, watermark, now, merging, (), WATERMARK, st)
            if root.should_fire(c):
                self._fire(e, key, w, st, c, True, final)

    def final_pane(self, e: PaneHost, key: Any, w: Window, st: PaneRecord,
                   timer: bool) -> None:
        trig = st.ext[TRIG]  # type: ignore[index]
        if trig[0] & 1:
            return  # the trigger finished: its pane was the last
        e.fire(key, w, st, self._timing(e, w, st, timer and self._has_on_time_pane), True)
        trig[0] |= 1

    def batch_end(self, e: PaneHost, now: int) -> None:
        """Processing-time triggers (AfterProcessingTime) that are due fire, in window order."""
        if not self._pt or e.watermark == MAX_TIMESTAMP:
            return
        e.now = now
        root, watermark, merging = self._root, e.watermark, self._merging
        windows = e.windows
        for w in e.windows_by_end():
            for key, st in list(windows[w].items()):
                trig = st.ext[TRIG]  # type: ignore[index]
                if trig[0] & 1:
                    continue
                c = TriggerContext(trig, w, watermark, now, merging, (), BATCH_END, st)
                if root.should_fire(c):
                    self._fire(e, key, w, st, c, False)

    def _fire(self, e: PaneHost, key: Any, w: Window, st: PaneRecord, c: TriggerContext,
              timer: bool, last: bool = False) -> None:
        """The trigger of (key, w) fires: its state moves on and the pane goes out (unless it is
        empty and the behaviours say so). `timer`: fired by the watermark reaching the window
        end, which makes the first non-early pane ON_TIME (Beam Python)."""
        root = self._root
        root.on_fire(c)
        finished = c.finished(root)
        e.fire(key, w, st, self._timing(e, w, st, timer), last or finished)
        if finished:  # the window is closed for this key: its data is not kept
            st.acc = e.accumulation.default_accumulated_value()
            st.updated = False

    @staticmethod
    def _timing(e: PaneHost, w: Window, st: PaneRecord, timer: bool) -> str:
        if e.watermark < w[1]:
            return EARLY
        return ON_TIME if timer and st.ext[NONSPEC] == 0 else LATE  # type: ignore[index]
