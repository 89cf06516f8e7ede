"""Accumulations: how a pane's value is built from the tuples of a (key, window).

The `Accumulation` protocol has five operations (Apex's `Accumulation`):
`default_accumulated_value()` a fresh accumulator, `accumulate(acc, value) -> acc` (may update acc
in place), `merge(acc1, acc2) -> acc` (session merges), `get_output(acc)` the pane value, and
`get_retraction(output)` the value that takes an emitted pane back. `retractable` says whether
that retraction is real (accumulating-and-retracting is refused otherwise); `mergeable` (optional,
True when absent) whether `merge` works (session windows are refused otherwise). A merge
accumulation (`InnerJoin`, `LeftOuterJoin`, `RightOuterJoin`, `FullOuterJoin`, `CoGroup`) adds
`accumulate2` for the second input of `WindowedMergeOperator`.

Built-ins: `Sum`, `Count`, `Min`, `Max`, `Average`, `TopN`, `ToList`, `ToSet`, `Sorted`,
`Reduce`, `Fold`, `TopNByKey`, `Composite` (several in one pass), and the merge accumulations.
Bad arguments (a non-callable function, n < 1) fail when the accumulation is built.

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

import bisect
import copy
import heapq
from collections.abc import Callable
from typing import Any

# The protocols live with the other seams; `accumulations.Accumulation` stays a public name.
from squall.protocols import Accumulation as Accumulation
from squall.protocols import MergeAccumulation as MergeAccumulation

ACCUMULATION_METHODS = ("default_accumulated_value", "accumulate", "merge", "get_output")


def check_accumulation(accumulation: Any, what: str = "accumulation") -> None:
    """A TypeError unless `accumulation` has the protocol's methods (`what` names it)."""
    for op in ACCUMULATION_METHODS:
        if not callable(getattr(accumulation, op, None)):
            raise TypeError(f"{what} {accumulation!r} has no {op}() method")


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
    """How many tuples (the values are ignored); retraction: the negated count. The windowed
    operators' accumulation; `squall.Count` is a window length in tuples, `squall.trident.Count`
    Trident's aggregator."""

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


def _check_n(owner: str, n: Any) -> int:
    """`n` as a positive int, or an error naming the argument."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{owner} needs n >= 1 (how many to keep), got {n!r}")
    return n


def _check_callable(owner: str, name: str, fn: Any, optional: bool = False) -> Any:
    """`fn` if callable (or None when optional), else an error naming the argument."""
    if fn is None and optional:
        return None
    if not callable(fn):
        raise TypeError(f"{owner}: {name} must be a function{' or None' if optional else ''}, "
                        f"got {fn!r}")
    return fn


def _largest(values: Any, n: int, key: Callable[[Any], Any] | None) -> list:
    """The `n` largest of `values` by `key`, largest first; ties keep their order."""
    return sorted(values, key=key, reverse=True)[:n]


class TopN(_NoRetraction):
    """The `n` largest values (by `key`, if given), largest first."""

    def __init__(self, n: int, key: Callable[[Any], Any] | None = None) -> None:
        self.n = _check_n("TopN", n)
        self.key = _check_callable("TopN", "key", key, optional=True)

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
        return _largest(acc, self.n, self.key)


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


class _OuterJoin(InnerJoin):
    """An inner join that also keeps the values of one side (or both) when the other side has
    none in the (key, window): each as `[value1, null]` or `[null, value2]` (Beam's join
    library, whose outer joins take a null value)."""

    keep1 = keep2 = False

    def __init__(self, null: Any = None) -> None:
        self.null = null

    def get_output(self, acc: list) -> list:
        ones, twos = acc
        if ones and twos:
            return super().get_output(acc)
        if ones and self.keep1:
            return [[a, self.null] for a in ones]
        if twos and self.keep2:
            return [[self.null, b] for b in twos]
        return []


class LeftOuterJoin(_OuterJoin):
    """Merge operator: as `InnerJoin`, and each value of input 1 with `null` (default None) when
    input 2 has none in the (key, window).

    >>> j = LeftOuterJoin()
    >>> j.get_output([[1, 2], []]), j.get_output([[], ["x"]]), j.get_output([[1], ["x"]])
    ([[1, None], [2, None]], [], [[1, 'x']])
    """

    keep1 = True


class RightOuterJoin(_OuterJoin):
    """Merge operator: as `InnerJoin`, and each value of input 2 with `null` (default None) when
    input 1 has none in the (key, window).

    >>> j = RightOuterJoin(null="-")
    >>> j.get_output([[], ["x", "y"]]), j.get_output([[1], []])
    ([['-', 'x'], ['-', 'y']], [])
    """

    keep2 = True


class FullOuterJoin(_OuterJoin):
    """Merge operator: as `InnerJoin`, and the values of whichever side is alone in the
    (key, window), paired with `null` (default None); `[]` when both are empty.

    >>> j = FullOuterJoin()
    >>> j.get_output([[1], []]), j.get_output([[], ["x"]]), j.get_output([[], []])
    ([[1, None]], [[None, 'x']], [])
    """

    keep1 = keep2 = True


class Composite:
    """Several accumulations in one pass over the same values (Apex's `CompositeAccumulation`,
    Beam's `CombineFns.compose()`). Named parts give a dict of their outputs, positional parts a
    tuple. A part may be a pair `(extract, accumulation)`: it accumulates `extract(value)`
    (Beam's `with(extractInputFn, combineFn, tag)`). Retractable (the retraction of each part's
    output) iff every part is; sessions merge it iff every part merges.

    >>> c = Composite(count=Count(), total=Sum(), top=TopN(2))
    >>> acc = c.default_accumulated_value()
    >>> for v in [3, 9, 1]:
    ...     acc = c.accumulate(acc, v)
    >>> c.get_output(acc)
    {'count': 3, 'total': 13, 'top': [9, 3]}
    >>> c.retractable, Composite(Count(), Sum()).get_retraction((3, 13))
    (False, (-3, -13))
    >>> pairs = Composite((lambda kv: kv[1], Sum()), (lambda kv: kv[0], ToSet()))
    >>> pairs.get_output(pairs.merge(pairs.accumulate(pairs.default_accumulated_value(),
    ...                                              ("a", 2)),
    ...                              pairs.accumulate(pairs.default_accumulated_value(),
    ...                                               ("b", 5))))
    (7, ['a', 'b'])
    """

    def __init__(self, *parts: Any, **named: Any) -> None:
        if parts and named:
            raise TypeError("Composite takes positional parts (a tuple of outputs) or named "
                            "parts (a dict), not both")
        if not parts and not named:
            raise TypeError("Composite needs at least one part, e.g. Composite(n=Count())")
        self.names: tuple[str, ...] | None = tuple(named) if named else None
        self.parts: list[Any] = []
        self.extracts: list[Callable[[Any], Any] | None] = []
        for name, part in (named.items() if named else enumerate(parts)):
            what = f"Composite part {name!r}:"
            extract = None
            if isinstance(part, tuple):
                if len(part) != 2:
                    raise TypeError(f"{what} give an accumulation or a pair (extract, "
                                    f"accumulation), got {part!r}")
                extract, part = part
                _check_callable(what[:-1], "extract", extract)
            check_accumulation(part, what)
            self.parts.append(part)
            self.extracts.append(extract)
        self.retractable = all(getattr(p, "retractable", False) for p in self.parts)
        self.mergeable = all(getattr(p, "mergeable", True) for p in self.parts)

    def default_accumulated_value(self) -> list:
        return [p.default_accumulated_value() for p in self.parts]

    def accumulate(self, acc: list, value: Any) -> list:
        for i, (part, extract) in enumerate(zip(self.parts, self.extracts, strict=True)):
            acc[i] = part.accumulate(acc[i], value if extract is None else extract(value))
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        return [p.merge(a, b) for p, a, b in zip(self.parts, acc1, acc2, strict=True)]

    def _outputs(self, values: list) -> Any:
        return dict(zip(self.names, values, strict=True)) if self.names else tuple(values)

    def get_output(self, acc: list) -> Any:
        return self._outputs([p.get_output(a) for p, a in zip(self.parts, acc, strict=True)])

    def get_retraction(self, output: Any) -> Any:
        if not self.retractable:
            raise TypeError("Composite has no retraction: some of its parts have none")
        outs = [output[n] for n in self.names] if self.names else list(output)
        return self._outputs([p.get_retraction(o) for p, o in zip(self.parts, outs,
                                                                     strict=True)])


class Reduce(_NoRetraction):
    """The values combined with `fn(a, b)`, a binary associative function (Apex's `ReduceFn`,
    Beam's `CombineGlobally(fn)`); sessions merge with `fn` too. `fn` returns a new value and
    leaves its arguments alone. A pane without values (an empty discarding on-time pane) has
    the value None, as `Min`/`Max`.

    >>> r = Reduce(lambda a, b: a * b)
    >>> acc = r.default_accumulated_value()
    >>> for v in [2, 3, 4]:
    ...     acc = r.accumulate(acc, v)
    >>> r.get_output(acc), r.get_output(r.merge(acc, r.accumulate([], 10))), r.get_output([])
    (24, 240, None)
    """

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = _check_callable("Reduce", "fn", fn)

    def default_accumulated_value(self) -> list:
        return []  # [] or [the value so far]: None may be a value

    def accumulate(self, acc: list, value: Any) -> list:
        if acc:
            acc[0] = self.fn(acc[0], value)
        else:
            acc.append(value)
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        if acc1 and acc2:
            return [self.fn(acc1[0], acc2[0])]
        return list(acc1 or acc2)

    def get_output(self, acc: list) -> Any:
        return acc[0] if acc else None


class Fold(_NoRetraction):
    """`add(acc, value)` over the values from `initial` (Apex's `FoldFn`, Beam's
    `CombineFn.add_input`); `add` may update the accumulator in place and return it. Session
    windows merge accumulators with `merge(acc1, acc2)`: without it the operator refuses
    sessions when it is built; `initial` must be neutral for it (merged sessions start from a
    fresh `initial`). Each window starts from a deep copy of `initial`, and a pane's value is a
    deep copy of the accumulator.

    >>> f = Fold([], lambda acc, v: acc + [v * 10], merge=lambda a, b: a + b)
    >>> acc = f.accumulate(f.accumulate(f.default_accumulated_value(), 1), 2)
    >>> f.get_output(acc), f.get_output(f.merge(acc, [99])), f.mergeable
    ([10, 20], [10, 20, 99], True)
    >>> Fold(0, max).mergeable
    False
    """

    def __init__(self, initial: Any, add: Callable[[Any, Any], Any],
                 merge: Callable[[Any, Any], Any] | None = None) -> None:
        self.initial = initial
        self.add = _check_callable("Fold", "add", add)
        self.merge_fn = _check_callable("Fold", "merge", merge, optional=True)
        self.mergeable = merge is not None

    def default_accumulated_value(self) -> Any:
        return copy.deepcopy(self.initial)

    def accumulate(self, acc: Any, value: Any) -> Any:
        return self.add(acc, value)

    def merge(self, acc1: Any, acc2: Any) -> Any:
        if self.merge_fn is None:
            raise TypeError("Fold without merge= cannot merge accumulators (session windows): "
                            "give Fold(initial, add, merge=fn)")
        return self.merge_fn(acc1, acc2)

    def get_output(self, acc: Any) -> Any:
        return copy.deepcopy(acc)


class Sorted(_NoRetraction):
    """The values as a sorted list (by `key`, if given; largest first with `reverse=True`),
    as `sorted(values, key=key, reverse=reverse)`: equal values keep their arrival order
    (Apex's `Sort`). The accumulator stays sorted and sessions merge the sorted lists.

    >>> s = Sorted(key=len, reverse=True)
    >>> acc = s.default_accumulated_value()
    >>> for v in ["bb", "a", "ccc", "dd"]:
    ...     acc = s.accumulate(acc, v)
    >>> s.get_output(acc), s.get_output(s.merge(acc, s.accumulate([], "ee")))
    (['ccc', 'bb', 'dd', 'a'], ['ccc', 'bb', 'dd', 'ee', 'a'])
    """

    def __init__(self, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        self.key = _check_callable("Sorted", "key", key, optional=True)
        if not isinstance(reverse, bool):
            raise TypeError(f"Sorted: reverse must be True or False, got {reverse!r}")
        self.reverse = reverse

    def default_accumulated_value(self) -> list:
        return []

    # Ascending by key; with reverse, equal keys newest first, so that the reversed list has
    # them in arrival order (sorted()'s stability).
    def accumulate(self, acc: list, value: Any) -> list:
        (bisect.insort_left if self.reverse else bisect.insort_right)(acc, value, key=self.key)
        return acc

    def merge(self, acc1: list, acc2: list) -> list:
        first, second = (acc2, acc1) if self.reverse else (acc1, acc2)
        return list(heapq.merge(first, second, key=self.key))

    def get_output(self, acc: list) -> list:
        return acc[::-1] if self.reverse else list(acc)


class TopNByKey(_NoRetraction):
    """Over `(key, value)` pairs in one window: per key the latest value (Apex's `TopNByKey`),
    or with `combine` the key's values combined (`operator.add`: summed); the output is the
    `n` entries with the largest values (by `key`, a function of the value, if given) as
    `[key, value]` pairs, largest first, ties in the order the keys came. Sessions merge a key
    with `combine`, or without it keep the larger value (Apex). Use it on `WindowedOperator`
    (one state per window) with a value extractor giving the pair; `TopN` ranks values alone.

    >>> t = TopNByKey(2)
    >>> acc = t.default_accumulated_value()
    >>> for pair in [("a", 3), ("b", 1), ("a", 2), ("c", 5)]:
    ...     acc = t.accumulate(acc, pair)
    >>> t.get_output(acc)
    [['c', 5], ['a', 2]]
    >>> import operator
    >>> s = TopNByKey(2, combine=operator.add)
    >>> s.get_output(s.merge(s.accumulate({"a": 3, "b": 1}, ("b", 4)), {"a": 1, "c": 4}))
    [['b', 5], ['a', 4]]
    """

    def __init__(self, n: int, key: Callable[[Any], Any] | None = None,
                 combine: Callable[[Any, Any], Any] | None = None) -> None:
        self.n = _check_n("TopNByKey", n)
        self.key = _check_callable("TopNByKey", "key", key, optional=True)
        self.combine = _check_callable("TopNByKey", "combine", combine, optional=True)

    def default_accumulated_value(self) -> dict:
        return {}

    def accumulate(self, acc: dict, value: Any) -> dict:
        try:
            k, v = value
        except (TypeError, ValueError):
            raise TypeError(f"TopNByKey accumulates (key, value) pairs, got {value!r}: give the "
                            "operator a value_extractor returning the pair") from None
        if self.combine is not None and k in acc:
            v = self.combine(acc[k], v)
        acc[k] = v
        return acc

    def merge(self, acc1: dict, acc2: dict) -> dict:
        out = dict(acc1)
        for k, v in acc2.items():
            if k in out:
                old = out[k]
                if self.combine is not None:
                    v = self.combine(old, v)
                elif not self._rank((k, v)) > self._rank((k, old)):
                    v = old
            out[k] = v
        return out

    def _rank(self, item: tuple) -> Any:
        return item[1] if self.key is None else self.key(item[1])

    def get_output(self, acc: dict) -> list:
        return [[k, v] for k, v in _largest(acc.items(), self.n, self._rank)]
