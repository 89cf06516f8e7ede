"""`WindowManager`: the pure window core. Time is injected; state is plain and picklable.

The manager receives events (any value: the windowed bolt passes tuples) and the current time, and
answers with what happened, in order: `Expired` events (the bolt acks them) and `Activation`s (the
bolt calls `execute(window)`), or `Late` for an event-time event behind the watermark. It never
reads a clock, so it behaves the same on every runner and in tests.

The worked example of Storm's windowing docs: a 20 s window sliding every 10 s, lag 5 s. The first
watermark (06:00:36 - 5 s) closes three windows:

>>> from squall.duration import Duration
>>> m = WindowManager(WindowSpec(Duration.seconds(20), Duration.seconds(10), event_time=True,
...                              lag_ms=5000), streams=["s"])
>>> t0 = 6 * 3_600_000  # 06:00:00
>>> for name, sec in [("e1", 3), ("e2", 5), ("e3", 7), ("e4", 18), ("e5", 26), ("e6", 36)]:
...     _ = m.add(name, now_ms=0, ts=t0 + sec * 1000, stream="s")
>>> for a in m.tick(now_ms=1000):
...     if isinstance(a, Activation):
...         print((a.window.end_timestamp - t0) // 1000, a.window.get(), a.window.get_new(),
...               a.window.get_expired())
10 ['e1', 'e2', 'e3'] ['e1', 'e2', 'e3'] []
20 ['e1', 'e2', 'e3', 'e4'] ['e4'] []
30 ['e4', 'e5'] ['e5'] ['e1', 'e2', 'e3']
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from squall.partition_watermarks import PartitionWatermarks
from squall.tuple_windows.policies import aligned_end, eviction_for
from squall.tuple_windows.spec import WindowSpec
from squall.tuple_windows.watermarks import INFINITY, WatermarkTracker
from squall.tuple_windows.window import TupleWindow

log = logging.getLogger("squall")


class Expired:
    """Events that left the window for good (a windowed bolt acks them)."""

    __slots__ = ("events",)

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def __repr__(self) -> str:
        return f"Expired({self.events!r})"


class Activation:
    """A non-empty window to hand to `execute`."""

    __slots__ = ("window",)

    def __init__(self, window: TupleWindow) -> None:
        self.window = window

    def __repr__(self) -> str:
        return f"Activation({self.window!r})"


class Late:
    """An event-time event whose timestamp is below the watermark: it joins no window."""

    __slots__ = ("event", "ts", "watermark")

    def __init__(self, event: Any, ts: int, watermark: float) -> None:
        self.event = event
        self.ts = ts
        self.watermark = watermark

    def __repr__(self) -> str:
        return f"Late({self.event!r}, ts={self.ts}, watermark={self.watermark})"


Action = Expired | Activation | Late


class WindowManager:
    """Windows over a stream of events, for one `WindowSpec`.

    Queued events are kept sorted by (timestamp, source, arrival): in processing time the
    timestamp is the arrival time, so this is arrival order; in event time it makes window
    contents independent of how tuples from different sources interleave, and so of where a runner
    cuts its batches. `streams` are the input streams whose timestamps make the watermark (event
    time only).
    """

    # With source watermarks (`partition_tasks`): the upstream sources' partitions, which make
    # the watermark and judge lateness instead of the per-stream rule (squall.partition_watermarks).
    partitions: PartitionWatermarks | None = None
    # With positions carried from the sources (`carried`): each tuple is judged against its
    # partition's watermark at its source position, and the watermark that closes windows, the
    # smallest over the partitions, moves at batch ends (`apply_positions`).
    carried = False

    def __init__(self, spec: WindowSpec, streams: Iterable[Hashable] = (),
                 partition_tasks: dict[int, str] | None = None,
                 carried: bool = False) -> None:
        self.spec = spec
        self.eviction = eviction_for(spec)
        self.tracker = (WatermarkTracker(streams, spec.watermark_lag_ms) if spec.event_time
                        else None)
        if partition_tasks and spec.event_time:
            self.partitions = PartitionWatermarks(frozenset(partition_tasks),
                                                  spec.watermark_lag_ms, dict(partition_tasks))
            self.carried = carried
        self.events: list[Any] = []  # the queued values, in key order
        self.keys: list[tuple] = []  # (ts, source, seq) of each queued value
        self.ts: list[int] = []  # the timestamps alone, for bisecting
        self.seq = 0  # arrival counter: event identity and tie-breaker
        self.prev_window: set[int] = set()  # seqs of the last activated window
        self.expired: list[Any] = []  # expired since the last activation
        self.count_since = 0  # events counted towards the next count trigger
        self.cursor: tuple | None = None  # event-time count trigger: last counted key
        self.next_end: int | None = None  # time trigger: end of the next window
        self.next_eval: int | None = None  # processing time of the next evaluation
        self.late_count = 0
        self._out: list[Action] = []

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_out"] = []
        return state

    # Whether `_insert` is this class's, which `add_event` runs inline (a subclass that keeps
    # its queue elsewhere overrides `_insert`).
    _plain_insert = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._plain_insert = cls._insert is WindowManager._insert

    # ---- inputs ------------------------------------------------------------------------------
    def add(self, event: Any, now_ms: int, ts: int | None = None,
            stream: Hashable = None, source_task: int = 0) -> list[Action]:
        """A new event at processing time `now_ms`; in event time with its own `ts`.

        `stream` is the input stream the event came on (it feeds the watermark) and
        `source_task` the task that sent it; with the arrival order they break timestamp ties.
        """
        spec = self.spec
        if spec.event_time:
            if ts is None:
                raise ValueError("an event-time window needs each event's timestamp")
            tracker = self.tracker
            assert tracker is not None
            partitions = self.partitions
            if partitions is not None:
                # Late against its own partition (or behind the watermark: a partition that was
                # idle and woke up late).
                before = partitions.before(source_task)
                if tracker.is_late(ts) or (before is not None and ts < before):
                    self.late_count += 1
                    return [Late(event, ts, before if before is not None  # type: ignore[arg-type]
                                 else tracker.watermark)]
                self._insert(event, ts, (stream, source_task))
                if partitions.observe(source_task, ts) is not None:
                    tracker.advance(partitions.value)
                if self._due(now_ms):
                    self._evaluate_event_time()
                return self._flush()
            return list(self.add_event(event, now_ms, ts, (stream, source_task)))
        self._advance_processing_time(now_ms)
        self._insert(event, now_ms, ())
        n = spec.length_count
        if n is not None and len(self.events) > n:
            # Count windows in processing time hold the last n arrivals whatever the trigger's
            # reference time, so older ones are acked as soon as they are pushed out.
            self._expire(len(self.events) - n)
        if spec.slide_count is not None:
            self.count_since += 1
            if self.count_since >= spec.slide_count:
                self.count_since = 0
                self._activate_processing(now_ms)
        return self._flush()

    def add_event(self, event: Any, now_ms: int, ts: int, source: tuple[Hashable, int]
                  ) -> Sequence[Action]:
        """`add(event, now_ms, ts, stream, source_task)` of an event-time event, `source` being
        `(stream, source_task)`: the windowed bolt's per-tuple path. The caller keeps one
        `source` per upstream task and stream, so timestamp ties compare it by identity; returns
        an empty tuple when nothing happened (most events).

        >>> from squall.duration import Duration
        >>> m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True, lag_ms=0,
        ...                              watermark_interval_ms=0), streams=["s"])
        >>> m.add_event("a", 0, 3, ("s", 1)), m.add_event("b", 0, 5, ("s", 1))
        ((), ())
        >>> [(a.window.end_timestamp, a.window.get()) for a in m.add_event("c", 0, 12, ("s", 1))]
        [(10, ['a', 'b'])]
        """
        tracker = self.tracker
        if self.partitions is not None or tracker is None:
            return self.add(event, now_ms, ts, source[0], source[1])
        watermark = tracker.watermark
        if watermark is not None and ts < watermark:
            self.late_count += 1
            return [Late(event, ts, watermark)]
        if self._plain_insert:
            # `_insert` inline, appending when the event sorts last (in order, the usual case).
            self.seq = seq = self.seq + 1
            key = (ts, source, seq)
            keys = self.keys
            if not keys or key >= keys[-1]:
                keys.append(key)
                self.ts.append(ts)
                self.events.append(event)
            else:
                i = bisect_right(keys, key)
                keys.insert(i, key)
                self.ts.insert(i, ts)
                self.events.insert(i, event)
        else:
            self._insert(event, ts, source)  # a subclass's own queue
        stream = source[0]
        seen = tracker.max_ts.get(stream)
        if seen is None or ts > seen:  # else the watermark cannot move (`track`)
            tracker.track(stream, ts)
        after = self.next_eval
        if (after is None or now_ms >= after or not self.spec.watermark_interval_ms) \
                and self._due(now_ms):
            self._evaluate_event_time()
        return self._flush() if self._out else ()

    def add_at(self, event: Any, now_ms: int, ts: int, source: tuple[Hashable, int],
               at: int | None) -> list[Action]:
        """An event-time event whose source position `at` came with it (`carried`): late when
        below the watermark at that position (the position less the lag), or below the
        watermark the windows have closed at. Nothing closes here: `apply_positions` does.

        >>> from squall.duration import Duration
        >>> m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True, lag_ms=2,
        ...                              watermark_interval_ms=0), ["s"], {1: "src"}, True)
        >>> m.add_at("a", 0, 30, ("s", 5), None), m.add_at("b", 0, 9, ("s", 6), 30)
        ([], [Late('b', ts=9, watermark=28)])
        >>> m.add_at("c", 0, 29, ("s", 6), 30), len(m.events)
        ([], 2)
        """
        tracker = self.tracker
        assert tracker is not None and self.carried
        watermark = tracker.watermark
        if at is not None:
            own = at - self.spec.watermark_lag_ms
            if watermark is None or own > watermark:
                watermark = own
        if watermark is not None and ts < watermark:
            self.late_count += 1
            return [Late(event, ts, watermark)]
        self._insert(event, ts, source)
        return self._flush()

    def apply_positions(self) -> list[Action]:
        """A batch end (`carried`): the `at` events received since the last one tell how far
        the partitions are read, and everything read before them has arrived: the watermark
        (the smallest over the partitions, idle and finished ones aside, less the lag) moves
        and the windows it passes close."""
        watched, tracker = self.partitions, self.tracker
        if watched is None or tracker is None or not self.carried:
            return []
        watched.apply()
        tracker.advance(watched.value)  # (idle and finished partitions move it too)
        self._evaluate_event_time()
        return self._flush()

    def partition_event(self, source_task: int, event: str, partitions: list[Any],
                        now_ms: int) -> list[Action]:
        """A partition event of an upstream source task (squall.partition_watermarks)."""
        watched = self.partitions
        if watched is not None and self.carried:
            # Positions: `at` events wait for the batch end; the others say which partitions
            # there are (what `apply_positions` waits for) and move nothing themselves.
            watched.control(source_task, event, partitions)
            return []
        if watched is not None and self.tracker is not None:
            if watched.control(source_task, event, partitions) is not None:
                self.tracker.advance(watched.value)
            if self._due(now_ms):
                self._evaluate_event_time()
        return self._flush()

    def tick(self, now_ms: int) -> list[Action]:
        """Time passes without input: time triggers, time eviction, watermark evaluation."""
        if self.spec.event_time:
            if self._due(now_ms):
                self._evaluate_event_time()
        else:
            self._advance_processing_time(now_ms)
        return self._flush()

    def end_of_input(self, now_ms: int) -> list[Action]:
        """Input is over: fire every window that is left, then expire every queued event.

        Event time: the watermark advances to infinity, so all remaining windows close; a count
        trigger with fewer than its count left fires one last, partial window ending at the last
        event. Processing time: events that were never in a window get one last window ending
        now. Every event of a window that slides by at most its length thus appears in at
        least one window, and all events are acked.
        """
        if self.spec.event_time:
            assert self.tracker is not None
            self.tracker.advance_to_infinity()
            self._evaluate_event_time(final=True)
        else:
            self._advance_processing_time(now_ms)
            if self._has_new(len(self.keys)):
                slide = self.spec.slide_count
                self._activate_processing(now_ms, slide - self.count_since if slide else 0)
        if self.events:
            self._expire(len(self.events))
        self.count_since = 0
        self.cursor = None
        self.prev_window = set()
        return self._flush()

    @property
    def watermark(self) -> float | None:
        return None if self.tracker is None else self.tracker.watermark

    # ---- processing time ---------------------------------------------------------------------
    def _advance_processing_time(self, now: int) -> None:
        spec = self.spec
        slide, length = spec.slide_ms, spec.length_ms
        if slide is not None:
            if self.next_end is None:
                self.next_end = now + slide  # the timer starts with the first input or tick
            # The timer fires on a fixed schedule from its start, as Storm's TimeTriggerPolicy
            # (a fixed-rate executor): a firing noticed late (no tuple or tick at its due time)
            # fires every window due since, each at its own reference time, so consecutive
            # windows tile the time line and no tuple falls between two of them. As Storm, the
            # reference is one ms before the firing: a tuple arriving in the firing's
            # millisecond goes into the next window, not in neither. Empty windows are skipped
            # (Storm's onTrigger does not activate them).
            while now >= self.next_end:
                last_due = self.next_end + (now - self.next_end) // slide * slide
                if length is None:
                    # A count window holds the last n arrivals whatever the reference time:
                    # the windows due since are all the same one, activated once.
                    self._activate_processing(last_due - 1)
                    self.next_end = last_due + slide
                    break
                if not self.ts or self.next_end - 1 - length >= self.ts[-1]:
                    self.next_end = last_due + slide  # every window due from here is empty
                    break
                self._activate_processing(self.next_end - 1)
                self.next_end += slide
        if length is not None and self.ts:
            # No later window can reach back past (now - 1) - length: ack those events now
            # rather than at the next trigger.
            k = bisect_right(self.ts, now - 1 - length)
            if k:
                self._expire(k)

    def _activate_processing(self, ref: int, missing: int = 0) -> None:
        hi = len(self.events) if self.spec.length_count is not None else bisect_right(self.ts, ref)
        self._window(hi, ref, missing)

    # ---- event time --------------------------------------------------------------------------
    def _due(self, now: int) -> bool:
        interval = self.spec.watermark_interval_ms
        if interval == 0:
            return True
        if self.next_eval is None:
            self.next_eval = now + interval
            return False
        if now >= self.next_eval:
            self.next_eval = now + interval
            return True
        return False

    def _evaluate_event_time(self, final: bool = False) -> None:
        assert self.tracker is not None
        watermark = self.tracker.watermark
        if watermark is None:
            return
        if self.spec.slide_ms is not None:
            self._fire_time_windows(watermark, self.spec.slide_ms)
        else:
            self._fire_count_windows(watermark, self.spec.slide_count, final)  # type: ignore

    def _fire_time_windows(self, watermark: float, slide: int) -> None:
        # A window (end - length, end] closes once the watermark is past its end: every tuple
        # that could still belong to it would be late by then, so none is ever left out.
        # The trigger jumps over empty windows to the aligned end of the next queued event, but
        # never past the watermark's own aligned end (`_skip_to`): a window ending at or after
        # the watermark is still open to tuples that are not late.
        count_length = self.spec.length_count is not None
        while self.events:
            if self.next_end is None:
                self.next_end = self._skip_to(self.ts[0], watermark, slide)
            end = self.next_end
            if not end < watermark:
                return
            hi = bisect_right(self.ts, end)
            new = self._has_new(hi)
            if hi and (new or not count_length):
                # A count window with nothing new is the previous one again: it is skipped
                # (below), or windows would repeat for ever as the watermark advances.
                self._window(hi, end)
                self.next_end = end + slide
                continue
            if hi >= len(self.events):
                return  # nothing after this end yet: it is found again when events arrive
            # Empty (or unchanged) window: jump to the aligned end of the next event, which
            # skips gaps in the input without activating empty windows.
            self.next_end = self._skip_to(self.ts[hi], watermark, slide)

    @staticmethod
    def _skip_to(ts: int, watermark: float, slide: int) -> int:
        """The next window end to evaluate when the queue's next event is at `ts`: its aligned
        end if the event is at or below the watermark (every window skipped then ends before
        `ts`, so before the watermark: closed, and empty), else the watermark's aligned end,
        the first window still open to tuples that are not late (a tuple at or after the
        watermark may still arrive before `ts`). Storm's trigger jumps the same way: only to
        events at or below the watermark (`getNextAlignedWindowTs(end, watermark)`).

        >>> WindowManager._skip_to(175, 200, 10), WindowManager._skip_to(200, 170, 10)
        (180, 170)
        """
        return aligned_end(ts if ts <= watermark else int(watermark), slide)

    def _fire_count_windows(self, watermark: float, slide: int, final: bool) -> None:
        # Every slide-th event in timestamp order ends a window. Only events below the watermark
        # are counted: no tuple that is not late can sort before them any more.
        i = 0 if self.cursor is None else bisect_right(self.keys, self.cursor)
        while i < len(self.events) and self.ts[i] < watermark:
            self.count_since += 1
            self.cursor = self.keys[i]
            if self.count_since >= slide:
                self.count_since = 0
                i -= self._window(i + 1, self.ts[i])
            i += 1
        if final and self.count_since and self.cursor is not None:
            missing, self.count_since = slide - self.count_since, 0
            self._window(bisect_right(self.keys, self.cursor), self.cursor[0], missing)

    # ---- shared ------------------------------------------------------------------------------
    def _insert(self, event: Any, ts: int, source: Hashable) -> None:
        self.seq += 1
        key = (ts, source, self.seq)
        if not self.keys or key >= self.keys[-1]:
            i = len(self.keys)
        else:
            i = bisect_right(self.keys, key)
        self.keys.insert(i, key)
        self.ts.insert(i, ts)
        self.events.insert(i, event)

    def _window(self, hi: int, end: int, missing: int = 0) -> int:
        """Activate the window over the first `hi` queued events ending at `end`.

        `missing` > 0 makes the last, partial window of a count trigger at end of input: the
        window the trigger would have fired after `missing` more events, without them. A
        count window then holds `missing` fewer events, so a tumbling window holds exactly the
        events left over, and never events of the window before.
        Returns how many events expired first (they were removed from the queue's front).
        """
        lo = self.eviction.first_kept(self.ts, hi, end)
        n = self.spec.length_count
        if missing and n is not None:
            lo = max(lo, hi - max(0, n - missing))
        if lo:
            self._expire(lo)
        hi -= lo
        if hi > 0:
            seqs = [k[2] for k in self.keys[:hi]]
            prev = self.prev_window
            events = self.events[:hi]
            new = [e for e, s in zip(events, seqs, strict=True) if s not in prev]
            expired, self.expired = self.expired, []
            self.prev_window = set(seqs)
            self._out.append(Activation(TupleWindow(
                events, new, expired, self.eviction.start(end), end)))
        return lo

    def _has_new(self, hi: int) -> bool:
        """Whether any of the first `hi` queued events was not in the last activated window."""
        prev = self.prev_window
        return any(k[2] not in prev for k in self.keys[:hi])

    def _expire(self, k: int) -> None:
        gone = self.events[:k]
        del self.events[:k], self.keys[:k], self.ts[:k]
        self.expired.extend(gone)
        self._out.append(Expired(gone))

    def _flush(self) -> list[Action]:
        out, self._out = self._out, []
        return out


__all__ = ["INFINITY", "Action", "Activation", "Expired", "Late", "WindowManager", "WindowSpec"]
