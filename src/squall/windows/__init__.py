"""Windowed operators with Apache Beam / Apex Malhar semantics.

Windows (`GlobalWindow`, `TimeWindows`, `SessionWindows`), triggers and accumulation modes
(Apex's `TriggerOption`, or Beam's trigger model: `AfterWatermark`, `AfterCount`,
`AfterProcessingTime`, `Repeatedly`, `AfterAny`, `AfterAll`, `AfterEach`, `OrFinally`, `Never`,
`Always` with `AccumulationMode`), pane info (`PaneInfo`, `OnTimeBehavior`, `ClosingBehavior`,
`TimestampCombiner`), the windowing strategy as one value (`Windowing`), accumulations
(`accumulations.Sum`, ...; the composite and the outer joins also here: `Composite`, `Reduce`,
`Fold`, `Sorted`, `TopNByKey`, `LeftOuterJoin`, `RightOuterJoin`, `FullOuterJoin`), and the
operators that host them in a topology (`KeyedWindowedOperator`, `WindowedOperator`,
`WindowedMergeOperator`). The engine (`squall.panes.engine`) is pure Python and
runner-independent.
"""

from squall.components.operators import (
    WATERMARK_STREAM,
    KeyedWindowedOperator,
    WindowedMergeOperator,
    WindowedOperator,
    WindowedOperatorBase,
)
from squall.panes import accumulations
from squall.panes.accumulations import (
    Composite,
    Fold,
    FullOuterJoin,
    LeftOuterJoin,
    Reduce,
    RightOuterJoin,
    Sorted,
    TopNByKey,
)
from squall.panes.beam_triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
)
from squall.panes.engine import PaneState, WindowedEngine
from squall.panes.input_watermarks import InputWatermarks
from squall.panes.pane_info import (
    PANE_INFO_FIELDS,
    ClosingBehavior,
    LatenessRule,
    OnTimeBehavior,
    PaneInfo,
    TimestampCombiner,
)
from squall.panes.triggers import EARLY, LATE, ON_TIME, AccumulationMode, TriggerOption
from squall.panes.windowing import Windowing
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
    "PANE_INFO_FIELDS",
    "WATERMARK_STREAM",
    "Accumulation",
    "AccumulationMode",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "ClosingBehavior",
    "Composite",
    "Fold",
    "FullOuterJoin",
    "GlobalWindow",
    "InputWatermarks",
    "KeyedWindowedOperator",
    "LatenessRule",
    "LeftOuterJoin",
    "MergeAccumulation",
    "Never",
    "OnTimeBehavior",
    "OrFinally",
    "PaneInfo",
    "PaneState",
    "Reduce",
    "Repeatedly",
    "RightOuterJoin",
    "SessionWindows",
    "Sorted",
    "TimeWindows",
    "TimestampCombiner",
    "TopNByKey",
    "Trigger",
    "TriggerOption",
    "Window",
    "WindowOption",
    "WindowedEngine",
    "WindowedMergeOperator",
    "WindowedOperator",
    "WindowedOperatorBase",
    "Windowing",
    "accumulations",
]
