"""The pane engine's trigger drivers (`squall.panes.trigger_drivers`): one per trigger model,
chosen once when the engine is built or restored, never part of its snapshot.

The panes each driver fires are the transcripts' (`tests/runners/test_transcripts.py`, which also
runs every Apex transcript through the general driver with `TriggerOption.as_trigger()`); here,
the choice and what a snapshot keeps of it.
"""

from __future__ import annotations

import pickle

import pytest

from squall import Duration
from squall.panes.engine import WindowedEngine
from squall.panes.trigger_drivers import (
    ApexTriggerDriver,
    GeneralTriggerDriver,
    PaneHost,
    TriggerDriver,
)
from squall.windows import (
    AfterAny,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    accumulations,
)

OPTION = TriggerOption.at_watermark().with_early_firings_at_every(2)


@pytest.mark.parametrize(("trigger", "driver"), [
    (OPTION, ApexTriggerDriver),
    (OPTION.as_trigger(), GeneralTriggerDriver),
    (AfterWatermark(early=AfterCount(2)), GeneralTriggerDriver),
])
def test_the_driver_follows_the_trigger_model_and_is_not_in_a_snapshot(trigger, driver):
    e = WindowedEngine(TimeWindows(1000), accumulations.Sum(), trigger, 0)
    assert type(e._driver) is driver
    for ts in (100, 200, 300):
        e.process("k", ts, 1, now=0)
    state = e.__getstate__()
    assert "_driver" not in state
    assert not any(isinstance(v, TriggerDriver) for v in state.values())
    restored = pickle.loads(pickle.dumps(e))
    assert type(restored._driver) is driver
    restored.end_of_input(0)
    e.end_of_input(0)
    assert restored.take() == e.take()


def test_only_apexs_rules_are_inlined_in_the_hot_path_of_time_windows():
    apex = WindowedEngine(TimeWindows(1000), accumulations.Sum(), OPTION)
    general = WindowedEngine(TimeWindows(1000), accumulations.Sum(), OPTION.as_trigger())
    sessions = WindowedEngine(SessionWindows(100), accumulations.Sum(), OPTION)
    assert (apex._fixed, apex._early_count) == (1000, 2)
    assert (general._fixed, general._early_count) == (0, None)
    assert sessions._fixed == 0


def test_a_snapshot_from_before_beams_triggers_runs_on_apexs_driver():
    e = WindowedEngine(TimeWindows(1000), accumulations.Sum(), OPTION)
    e.process("k", 10, 3, 0)
    old = e.__getstate__()
    del old["_root"]  # written before the engine compiled Beam's triggers
    restored = WindowedEngine.__new__(WindowedEngine)
    restored.__setstate__(old)
    assert type(restored._driver) is ApexTriggerDriver
    restored.process("k", 20, 4, 0)  # the second tuple: the count trigger's early pane
    assert [p[3:5] for p in restored.take()] == [(7, "EARLY")]


# ---- the seam: a driver sees its engine through PaneHost only ------------------------------------

class _HostView:
    """An engine as `PaneHost` shows it: its public members that the protocol names, nothing
    else (an underscore field, or any other member, raises)."""

    _NAMES = frozenset(n for n in (*vars(PaneHost), *PaneHost.__annotations__)
                       if not n.startswith("_"))
    _SETTABLE = frozenset(("now", "closed_drops"))

    def __init__(self, engine):
        object.__setattr__(self, "_engine", engine)

    def __getattr__(self, name):
        if name not in self._NAMES:
            raise AssertionError(f"a trigger driver read {name!r}, which PaneHost does not name")
        return getattr(self._engine, name)

    def __setattr__(self, name, value):
        if name not in self._SETTABLE:
            raise AssertionError(f"a trigger driver set {name!r}, which PaneHost does not let it")
        setattr(self._engine, name, value)


class _SeamDriver:
    """The engine's driver, called with a `_HostView` of the engine instead of the engine."""

    def __init__(self, engine):
        self._engine = engine
        self._driver = engine._driver
        self._view = _HostView(engine)

    def __getattr__(self, name):
        method = getattr(self._driver, name)
        if not callable(method):
            return method  # what the driver says of itself
        return lambda *args: method(*(self._view if a is self._engine else a for a in args))


SEAM_CASES = {
    "apex: counts, time triggers, late firings, tumbling windows": dict(
        window=TimeWindows(1000), trigger=TriggerOption.at_watermark()
        .with_early_firings_at_every(2).with_late_firings_at_every(1)),
    "apex: early firings by time, retracting": dict(
        window=TimeWindows(1000), trigger=TriggerOption.at_watermark()
        .with_early_firings_at_every(Duration.seconds(1))
        .accumulating_and_retracting_fired_panes()),
    "apex: no on-time pane, sessions, retracting": dict(
        window=SessionWindows(300), trigger=TriggerOption()
        .with_early_firings_at_every(2).accumulating_and_retracting_fired_panes()),
    "beam: early and late counts, sessions": dict(
        window=SessionWindows(300), trigger=AfterWatermark(early=AfterCount(2),
                                                           late=AfterCount(1))),
    "beam: processing time, a finishing trigger, sliding windows": dict(
        window=TimeWindows(1000, 500),
        trigger=AfterAny(AfterProcessingTime(Duration.seconds(1)), AfterCount(3))),
    "beam: firings by time, late data closed by the purge": dict(
        window=TimeWindows(1000, 500),
        trigger=AfterWatermark(early=AfterProcessingTime(Duration.seconds(1)),
                               late=AfterProcessingTime(Duration.seconds(10)))),
}


def _seam_run(case, seam):
    e = WindowedEngine(case["window"], accumulations.Sum(), case["trigger"], 500)
    if seam:
        e._driver = _SeamDriver(e)
    steps = [("t", 100, 0), ("t", 400, 0), ("t", 350, 700), ("b", 1500), ("t", 900, 1600),
             ("w", 1200, 1700), ("t", 1100, 1800), ("t", 1000, 1900), ("b", 3000),
             ("t", 2300, 3100), ("t", 2350, 3200), ("t", 2600, 3300), ("w", 1900, 3400),
             ("t", 1300, 3500), ("b", 4600)]
    for step in steps:
        if step[0] == "t":
            e.process(f"k{step[1] % 2}", step[1], 1, now=step[2])
        elif step[0] == "w":
            e.advance(step[1], now=step[2])
        else:
            e.batch_end(step[1])
    e.end_of_input(5000)
    return e.take(), e.closed_drops


@pytest.mark.parametrize("name", list(SEAM_CASES))
def test_a_trigger_driver_uses_only_what_pane_host_names(name):
    panes, closed = _seam_run(SEAM_CASES[name], seam=True)
    assert (panes, closed) == _seam_run(SEAM_CASES[name], seam=False)
    assert panes  # the steps fire panes through every driver path the case has
