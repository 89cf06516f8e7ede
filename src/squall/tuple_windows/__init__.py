"""Windowing core: pure Python, time injected by the caller, state plain and picklable.

`WindowManager` turns events and times into expiries and window activations for a `WindowSpec`
(length and slide, each a `Count` or a `Duration`, in processing or event time);
`WatermarkTracker` follows event-time progress; `TupleWindow` is what a windowed bolt's
`execute` receives. `squall.components.windowed.WindowedBolt` hosts this core in a topology.
"""

from squall.tuple_windows.manager import Activation, Expired, Late, WindowManager
from squall.tuple_windows.spec import Count, WindowSpec
from squall.tuple_windows.watermarks import WatermarkTracker
from squall.tuple_windows.window import TupleWindow

__all__ = [
    "Activation",
    "Count",
    "Expired",
    "Late",
    "TupleWindow",
    "WatermarkTracker",
    "WindowManager",
    "WindowSpec",
]
