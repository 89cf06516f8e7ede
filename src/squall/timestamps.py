"""Event timestamps as the windowed components accept them: milliseconds since the epoch.

Both kinds of windowed component (Storm's windowed bolts and the Beam/Apex operators) read a
tuple's timestamp from a field or an extractor and validate it here, so that they accept and
reject exactly the same values.

>>> valid_timestamp(1500), valid_timestamp(1500.9), valid_timestamp(-0.5)
(1500, 1500, -1)
>>> valid_timestamp(True)
Traceback (most recent call last):
    ...
TypeError: timestamp must be a number of ms since epoch, got True
>>> valid_timestamp(float("nan"))
Traceback (most recent call last):
    ...
ValueError: timestamp must be finite, got nan
"""

from __future__ import annotations

import math
from typing import Any


def valid_timestamp(value: Any) -> int:
    """`value` as an integer timestamp in ms: ints as they are, finite floats floored; raises
    TypeError for anything else (bools too, though they are ints), ValueError for inf and nan."""
    if value.__class__ is int:  # the usual case first: a windowed bolt's every tuple
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timestamp must be a number of ms since epoch, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"timestamp must be finite, got {value!r}")
        return math.floor(value)
    return value
