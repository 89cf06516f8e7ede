"""Trident windows on event time: which windows a tuple falls in, and a window operation's
step per batch over its window state (shared by both runners).

A window operation (`Stream.tumbling_window`, `sliding_window`, and the same on a grouped
stream) combines each window's tuples with a `CombinerAggregator`, per group key, and emits
`(keys..., window_start, window_end, value)` once the watermark passes the window's end. The
watermark is the largest timestamp seen minus the lag, kept with the open windows' partial
aggregates in an opaque map state, so a replayed batch recomputes its windows from the state
as it was before the batch: exactly once. When every spout's input has ended the watermark
jumps to the end of time and every open window fires. A tuple for a window whose end the
watermark already passed is late: dropped, counted in the run's `late` counts and logged.

>>> assign(12_345, 10_000, 10_000)
[(10000, 20000)]
>>> assign(12_345, 10_000, 5_000)
[(5000, 15000), (10000, 20000)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

META = ("$window-meta",)  # the state's key of (watermark, open windows)
NEVER = -(2 ** 63)  # the watermark before any tuple
END_OF_TIME = 2 ** 63 - 1

Window = tuple[int, int]


def assign(ts: int, size: int, slide: int) -> list[Window]:
    """The windows `[start, start + size)` holding `ts`, starts multiples of `slide`."""
    last = ts - ts % slide
    out = []
    start = last - ((size - 1) // slide) * slide
    while start <= last:
        if start + size > ts:
            out.append((start, start + size))
        start += slide
    return out


class WindowStep:
    """One batch of one window operation: the partials by window and key in, the fired rows
    out, the state updated once for the batch's txid (see the module documentation)."""

    def __init__(self, state: Any, combine: Callable[[Any, Any], Any], lag: int) -> None:
        self.state, self.combine, self.lag = state, combine, lag

    def apply(self, txid: int, partials: Mapping[Window, Mapping[tuple[Any, ...], Any]],
              assigned: Mapping[Window, int], max_ts: int | None, final: bool
              ) -> tuple[list[tuple[Any, ...]], int]:
        """The fired `(key..., start, end, value)` rows and the number of late assignments.

        `assigned` counts the tuples assigned to each window (to count the late ones)."""
        before: dict[str, Any] = {}

        def meta(old: Any) -> Any:
            wm, open_windows = old if old is not None else (NEVER, ())
            before["wm"], before["open"] = wm, open_windows
            new_wm = wm if max_ts is None else max(wm, max_ts - self.lag)
            if final:
                new_wm = END_OF_TIME
            live = {w for w in partials if w[1] > wm}
            still_open = tuple(sorted(w for w in set(open_windows) | live if w[1] > new_wm))
            before["new_wm"] = new_wm
            return (new_wm, still_open)

        # Opaque state: on a replay of txid the updater sees the value before the txid.
        self.state.multi_update(txid, [META], [meta])
        wm, open_before, new_wm = before["wm"], set(before["open"]), before["new_wm"]
        late = sum(n for w, n in assigned.items() if w[1] <= wm)
        live = {w: p for w, p in partials.items() if w[1] > wm}
        fired: dict[Window, dict[tuple[Any, ...], Any]] = {}
        # Windows the state holds (open before this batch) and that this batch touches or
        # fires; windows opened and fired within this batch never touch the state.
        stored = sorted(w for w in open_before if w in live or w[1] <= new_wm)
        combine = self.combine

        def window_updater(w: Window) -> Callable[[Any], Any]:
            def update(old: Any) -> Any:
                merged = dict(old or {})
                for k, v in live.get(w, {}).items():
                    merged[k] = v if k not in merged else combine(merged[k], v)
                if w[1] <= new_wm:
                    fired[w] = merged
                    return None  # fired: closed
                return merged
            return update

        new_windows = [w for w in live if w not in open_before and w[1] > new_wm]
        keys = [*stored, *new_windows]
        if keys:
            self.state.multi_update(txid, keys, [window_updater(w) for w in keys])
        for w, p in live.items():
            if w not in open_before and w[1] <= new_wm:
                fired[w] = dict(p)
        rows = [(*k, w[0], w[1], v) for w in sorted(fired) for k, v in fired[w].items()]
        return rows, late
