"""Accumulations: how a pane's value is built from the tuples of a (key, window).

The `Accumulation` protocol has five operations (Apex's `Accumulation`):
`default_accumulated_value()` a fresh accumulator, `accumulate(acc, value) -> acc` (may update acc
in place), `merge(acc1, acc2) -> acc` (session merges), `get_output(acc)` the pane value, and
`get_retraction(output)` the value that takes an emitted pane back. `retractable` says whether
that retraction is real (accumulating-and-retracting is refused otherwise). A merge accumulation
(`InnerJoin`, `CoGroup`) adds `accumulate2` for the second input of `WindowedMergeOperator`.

Accumulators and outputs are plain data (numbers, lists, dicts, sets): they pickle into the Spark
runner's snapshots. `get_output` never returns the accumulator itself, so a later in-place update
cannot change a value already emitted (or kept as the last emitted one).

>>> def run(acc, values):
...     a = acc.default_accumulated_value()
...     for v in values:
...         a = acc.accumulate(a, v)
...     return acc.get_output(a)
>>> run(Sum(), [1, 2, 3]), run(Count(), "abc"), run(Min(), [3, 1, 2]), run(Max(), [3, 1, 2])
(6, 3, 1, 3)
>>> run(Average(), range(1, 11)), run(TopN(2), [3, 9, 1, 7]), run(ToList(), "aba")
(5.5, [9, 7], ['a', 'b', 'a'])
>>> run(ToSet(), "abca"), Sum().get_retraction(6), Count().retractable, Max().retractable
(['a', 'b', 'c'], -6, True, False)
>>> avg = Average()
>>> avg.get_output(avg.merge(avg.accumulate([0.0, 0], 1), avg.accumulate([0.0, 0], 4)))
2.5
>>> j = InnerJoin()
>>> a = j.accumulate2(j.accumulate(j.accumulate(j.default_accumulated_value(), 1), 2), "x")
>>> j.get_output(a), CoGroup().get_output([[1, 2], ["x"]])
([[1, 'x'], [2, 'x']], [[1, 2], ['x']])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The protocols live with the other seams; `accumulations.Accumulation` stays a public name.
from squall.protocols import Accumulation as Accumulation
from squall.protocols import MergeAccumulation as MergeAccumulation


class _NoRetraction:
    """Accumulations without a real inverse: accumulating-and-retracting is refused for them."""

    retractable = False

    def get_retraction(self, output: Any) -> Any:
        raise TypeError(f"{type(self).__name__} has no retraction")


class Sum:
    """The sum of the values; retraction: the negated sum."""

    retractable = True

    def default_accumulated_value(self) -> Any:
        return 0

    def accumulate(self, acc: Any, value: Any) -> Any:
        return acc + value

    def merge(self, acc1: Any, acc2: Any) -> Any:
        return acc1 + acc2

    def get_output(self, acc: Any) -> Any:
        return acc

    def get_retraction(self, output: Any) -> Any:
        return -output


class Count:
    """How many tuples (the values are ignored); retraction: the negated count."""

    retractable = True

    def default_accumulated_value(self) -> int:
        return 0

    def accumulate(self, acc: int, value: Any) -> int:
        return acc + 1

    def merge(self, acc1: int, acc2: int) -> int:
        return acc1 + acc2

    def get_output(self, acc: int) -> int:
        return acc

    def get_retraction(self, output: int) -> int:
        return -output


class Min(_NoRetraction):
    """The smallest value (by `key`, if given); None for no value."""

    def __init__(self, key: Callable[[Any], Any] | None = None) -> None:
        self.key = key

    def default_accumulated_value(self) -> Any:
        return None

    def accumulate(self, acc: Any, value: Any) -> Any:
        if acc is None:
            return value
        k = self.key
        return value if (k(value) < k(acc) if k else value < acc) else acc

    def merge(self, acc1: Any, acc2: Any) -> Any:
        return acc1 if acc2 is None else self.accumulate(acc1, acc2)

    def get_output(self, acc: Any) -> Any:
        return acc


class Max(Min):
    """The largest value (by `key`, if given); None for no value."""

    def accumulate(self, acc: Any, value: Any) -> Any:
        if acc is None:
            return value
        k = self.key
        return value if (k(value) > k(acc) if k else value > acc) else acc


class Average(_NoRetraction):
    """The mean of the values; the accumulator is [sum, count] (merge weights correctly)."""

    def default_accumulated_value(self) -> list:
        return [0.0, 0]

    def accumulate(self, acc: list, value: Any) -> list:
        acc[0] += value
        acc[1] += 1
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        return [acc1[0] + acc2[0], acc1[1] + acc2[1]]

    def get_output(self, acc: list) -> float | None:
        return acc[0] / acc[1] if acc[1] else None


class TopN(_NoRetraction):
    """The `n` largest values (by `key`, if given), largest first."""

    def __init__(self, n: int, key: Callable[[Any], Any] | None = None) -> None:
        if n < 1:
            raise ValueError(f"TopN needs n >= 1, got {n}")
        self.n = n
        self.key = key

    def default_accumulated_value(self) -> list:
        return []

    def accumulate(self, acc: list, value: Any) -> list:
        acc.append(value)
        if len(acc) > 2 * self.n:  # trim now and then: amortised O(log n) per value
            acc[:] = self.get_output(acc)
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        return self.get_output(acc1 + acc2)

    def get_output(self, acc: list) -> list:
        return sorted(acc, key=self.key, reverse=True)[: self.n]


class ToList(_NoRetraction):
    """Every value, in arrival order."""

    def default_accumulated_value(self) -> list:
        return []

    def accumulate(self, acc: list, value: Any) -> list:
        acc.append(value)
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        return acc1 + acc2

    def get_output(self, acc: list) -> list:
        return list(acc)


class ToSet(_NoRetraction):
    """The distinct values, as a sorted list (by repr when the values do not compare)."""

    def default_accumulated_value(self) -> set:
        return set()

    def accumulate(self, acc: set, value: Any) -> set:
        acc.add(value)
        return acc

    def merge(self, acc1: set, acc2: set) -> set:
        return acc1 | acc2

    def get_output(self, acc: set) -> list:
        try:
            return sorted(acc)
        except TypeError:
            return sorted(acc, key=repr)


class InnerJoin(_NoRetraction):
    """Merge operator: every [value1, value2] pair of the window (an empty list when a side has
    none). The accumulator is [values of input 1, values of input 2], in arrival order."""

    def default_accumulated_value(self) -> list:
        return [[], []]

    def accumulate(self, acc: list, value: Any) -> list:
        acc[0].append(value)
        return acc

    def accumulate2(self, acc: list, value: Any) -> list:
        acc[1].append(value)
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        return [acc1[0] + acc2[0], acc1[1] + acc2[1]]

    def get_output(self, acc: list) -> list:
        return [[a, b] for a in acc[0] for b in acc[1]]


class CoGroup(InnerJoin):
    """Merge operator: [values of input 1, values of input 2]."""

    def get_output(self, acc: list) -> list:
        return [list(acc[0]), list(acc[1])]
