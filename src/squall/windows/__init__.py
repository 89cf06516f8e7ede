"""Windowed operators with Apache Beam / Apex Malhar semantics.

Windows (`GlobalWindow`, `TimeWindows`, `SessionWindows`), triggers and accumulation modes
(`TriggerOption`), accumulations (`accumulations.Sum`, ...), and the operators that host them in a
topology (`KeyedWindowedOperator`, `WindowedOperator`, `WindowedMergeOperator`). The engine
(`squall.panes.engine`) is pure Python and runner-independent.
"""

from squall.components.operators import (
    WATERMARK_STREAM,
    KeyedWindowedOperator,
    WindowedMergeOperator,
    WindowedOperator,
    WindowedOperatorBase,
)
from squall.panes import accumulations
from squall.panes.engine import InputWatermarks, PaneState, WindowedEngine
from squall.panes.triggers import EARLY, LATE, ON_TIME, AccumulationMode, TriggerOption
from squall.panes.windows import (
    GLOBAL_WINDOW,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    GlobalWindow,
    SessionWindows,
    TimeWindows,
    Window,
    WindowOption,
)
from squall.protocols import Accumulation, MergeAccumulation

__all__ = [
    "EARLY",
    "GLOBAL_WINDOW",
    "LATE",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "ON_TIME",
    "WATERMARK_STREAM",
    "Accumulation",
    "AccumulationMode",
    "GlobalWindow",
    "InputWatermarks",
    "KeyedWindowedOperator",
    "MergeAccumulation",
    "PaneState",
    "SessionWindows",
    "TimeWindows",
    "TriggerOption",
    "Window",
    "WindowOption",
    "WindowedEngine",
    "WindowedMergeOperator",
    "WindowedOperator",
    "WindowedOperatorBase",
    "accumulations",
]
