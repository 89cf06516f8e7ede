"""The Storm window core (`squall.tuple_windows`): what is not a scenario.

The window scenarios (Storm's worked example, the eight window forms in event and processing
time, out-of-order input within the lag, late tuples, the watermark over several streams, and
snapshots after every step) are transcripts in `tests/transcripts/storm_*.json`, run on this core
and on both runners by `tests/runners/test_transcripts.py`. Here: the errors of the core's API.
"""

from __future__ import annotations

import pytest

from squall import Count, Duration
from squall.tuple_windows import WindowManager, WindowSpec


def test_an_event_time_window_refuses_an_event_without_a_timestamp():
    m = WindowManager(WindowSpec(Duration(10), Duration(10), event_time=True), streams=["s"])
    with pytest.raises(ValueError, match="needs each event's timestamp"):
        m.add("a", now_ms=0, stream="s")
    assert m.events == []  # refused before anything was queued


@pytest.mark.parametrize("length,slide,kw,error,match", [
    (5, Count(1), {}, TypeError, "window length must be a Count or a Duration"),
    (Count(2), 5, {}, TypeError, "window sliding interval must be a Count or a Duration"),
    (Duration(0), Count(1), {}, ValueError, "window length must be at least 1 ms"),
    (Count(2), Count(1), {"lag_ms": -1}, ValueError, "cannot be negative"),
    (Count(2), Count(1), {"watermark_interval_ms": -1}, ValueError, "cannot be negative"),
])
def test_window_spec_refuses_what_is_not_a_window(length, slide, kw, error, match):
    with pytest.raises(error, match=match):
        WindowSpec(length, slide, **kw)
