"""What a runner computed elsewhere for a batch, handed to the executor in one object.

The Spark runner runs part of a plan as Spark jobs (`squall.runtime.spark.trident`) and the
rest through `BatchExecutor.run`, which takes what the jobs computed as one `Computed`: the
outputs of operations computed whole (`given`), the per-key aggregates a `persistent_aggregate`
applies at its turn (`partials`), a window operation's partials (`windows`), and the operations
nothing on the driver needs (`skip`). The local runner computes everything in the executor and
passes none.

>>> c = Computed(skip=frozenset({"split"}))
>>> c.given["counts"] = [[("a", 1)]]
>>> c.provides("counts"), c.provides("split"), c.provides("other")
(True, False, False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from squall.trident.windows import Segment, Window

Rows = list[tuple[Any, ...]]  # an operation's rows in one partition
Parts = list[Rows]  # an operation's output: its partitions' rows


class WindowSegments(NamedTuple):
    """A window operation's batch as partials: one segment per window (in window order), the
    tuples assigned to each window, and the largest timestamp (None for no tuple)."""

    segments: Sequence[Segment]
    assigned: Mapping[Window, int]
    max_ts: int | None

    @staticmethod
    def none() -> WindowSegments:
        """An empty batch's."""
        return WindowSegments([], {}, None)


@dataclass
class Computed:
    """A batch's results computed outside the executor, for `BatchExecutor.run`.

    `begun`: the runner called `BatchExecutor.begin(txid)` before computing them (states some
    computations write, such as an opaque state's rollback, are opened first)."""

    given: dict[str, Parts] = field(default_factory=dict)
    partials: dict[str, dict[tuple[Any, ...], Any]] = field(default_factory=dict)
    windows: dict[str, WindowSegments] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    begun: bool = True

    def provides(self, cid: str) -> bool:
        """Whether operation `cid`'s output comes from here (whole, or from its partials)."""
        return cid in self.given or cid in self.partials or cid in self.windows
