"""The pane engine's trigger drivers (`squall.panes.engine`): one per trigger model, chosen once
when the engine is built or restored, never part of its snapshot.

The panes each driver fires are the transcripts' (`tests/runners/test_transcripts.py`, which also
runs every Apex transcript through the general driver with `TriggerOption.as_trigger()`); here,
the choice and what a snapshot keeps of it.
"""

from __future__ import annotations

import pickle

import pytest

from squall.panes.engine import (
    ApexTriggerDriver,
    GeneralTriggerDriver,
    TriggerDriver,
    WindowedEngine,
)
from squall.windows import (
    AfterCount,
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
