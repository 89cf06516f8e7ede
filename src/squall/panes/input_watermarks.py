"""An operator's watermark from its inputs, as Spark's "min" multiple-watermark policy.

Each input of a windowed operator (one, or two for the merge operator) takes watermarks from its
upstream operator tasks and may generate one from event time, per input or per source partition
(`squall.partition_watermarks`); the operator's watermark is the smallest over its inputs. The
operator role (`squall.task.roles.operator`) keeps one `InputWatermarks` per task and hands what
it returns to the pane engine (`squall.panes.engine.WindowedEngine.advance`).
"""

from __future__ import annotations

from typing import Any

from squall.panes.windows import MIN_TIMESTAMP
from squall.partition_watermarks import PartitionWatermarks


class InputWatermarks:
    """The operator's watermark from its inputs, as Spark's "min" multiple-watermark policy.

    Each input `i` has a set of upstream sources (task ids that send watermarks) and may
    generate one from event time, trailing the largest timestamp seen by `delay_ms`. The input's
    watermark is the larger of the two (an upstream one only once every source has sent one),
    and the operator's is the smallest over its inputs: None until every input has one.

    >>> w = InputWatermarks([frozenset({7, 8}), frozenset()], delay_ms=100)
    >>> w.upstream(0, 7, 5000), w.observe(1, 3000), w.current()
    (None, None, None)
    >>> w.upstream(0, 8, 4000)
    2900
    >>> w.observe(1, 9000)
    4000
    """

    def __init__(self, sources: list[frozenset[int]], delay_ms: int | None,
                 partitioned: list[PartitionWatermarks | None] | None = None) -> None:
        self.sources = sources
        self.delay = delay_ms
        self.latest: list[dict[int, int]] = [{} for _ in sources]
        self.max_ts: list[int | None] = [None for _ in sources]
        self.value: int | None = None
        # Inputs read from partitioned sources generate their watermark per source partition
        # (squall.partition_watermarks) instead of from the largest timestamp of the input.
        self.partitioned: list[PartitionWatermarks | None] = (
            partitioned if partitioned is not None else [None for _ in sources])

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Snapshots written before partition watermarks existed.
        state.setdefault("partitioned", [None for _ in state["sources"]])
        self.__dict__.update(state)

    def observe(self, i: int, ts: int) -> int | None:
        """A tuple of input `i` at `ts`; returns the operator's watermark if it moved."""
        if self.delay is None:
            return None
        m = self.max_ts[i]
        if m is not None and ts <= m:
            return None
        self.max_ts[i] = ts
        return self._recompute()

    def upstream(self, i: int, source: int, watermark: int) -> int | None:
        """A watermark from upstream task `source` of input `i`; returns the operator's
        watermark if it moved."""
        latest = self.latest[i]
        if watermark <= latest.get(source, MIN_TIMESTAMP):
            return None
        latest[source] = watermark
        return self._recompute()

    def input_watermark(self, i: int) -> int | None:
        up = None
        latest = self.latest[i]
        if self.sources[i] and len(latest) >= len(self.sources[i]):
            up = min(latest.values())
        parts = self.partitioned[i]
        if parts is not None:
            gen = parts.value
        else:
            m = self.max_ts[i]
            gen = None if m is None or self.delay is None else m - self.delay
        if up is None:
            return gen
        return up if gen is None else max(up, gen)

    def current(self) -> int | None:
        return self.value

    def refresh(self) -> int | None:
        """Input `i`'s partition watermarks moved: returns the operator's watermark if it
        moved."""
        return self._recompute()

    def _recompute(self) -> int | None:
        values = [self.input_watermark(i) for i in range(len(self.sources))]
        known = [v for v in values if v is not None]
        if len(known) < len(values):
            return None
        w = min(known)
        if self.value is not None and w <= self.value:
            return None
        self.value = w
        return w
