"""Metrics a component registers itself: Storm's `CountMetric`, `MultiCountMetric` and
`ReducedMetric(MeanReducer())`, through `context.register_metric(name, metric)`.

Storm calls `getValueAndReset()` every time bucket and hands the value to metrics consumers.
squall's runners collect each task's metrics the same way (`partial_and_reset`), as partials
that merge across tasks and Spark batches, and the run's snapshot shows their totals since the
run started (`MetricsSnapshot.user_metrics`: component -> name -> value).

>>> words = CountMetric()
>>> words.incr(); words.incr_by(4)
>>> langs = MultiCountMetric()
>>> langs.scope("en").incr(); langs.scope("de").incr_by(2)
>>> size = ReducedMetric(MeanReducer())
>>> size.update(3); size.update(5)
>>> total = merge_partial(words.partial_and_reset(), {"kind": "count", "value": 10})
>>> value_of(total), value_of(langs.partial_and_reset()), value_of(size.partial_and_reset())
(15, {'en': 1, 'de': 2}, 4.0)
>>> words.get_value_and_reset()  # reset by the partial above
0
"""

from __future__ import annotations

from typing import Any


class Metric:
    """What the registered metrics share: the name they were registered under."""

    _squall_name: str | None = None

    def partial_and_reset(self) -> dict[str, Any]:
        raise NotImplementedError


class CountMetric(Metric):
    """A count (Storm's `CountMetric`)."""

    def __init__(self) -> None:
        self._value = 0

    def incr(self) -> None:
        self._value += 1

    def incr_by(self, n: int) -> None:
        self._value += n

    def get_value_and_reset(self) -> int:
        value, self._value = self._value, 0
        return value

    def partial_and_reset(self) -> dict[str, Any]:
        return {"kind": "count", "value": self.get_value_and_reset()}


class MultiCountMetric(Metric):
    """Counts by key (Storm's `MultiCountMetric`): `scope(key)` is the key's `CountMetric`."""

    def __init__(self) -> None:
        self._scopes: dict[str, CountMetric] = {}

    def scope(self, key: str) -> CountMetric:
        metric = self._scopes.get(key)
        if metric is None:
            metric = self._scopes[key] = CountMetric()
        return metric

    def get_value_and_reset(self) -> dict[str, int]:
        return {str(k): m.get_value_and_reset() for k, m in self._scopes.items()}

    def partial_and_reset(self) -> dict[str, Any]:
        return {"kind": "multi_count", "value": self.get_value_and_reset()}


class MeanReducer:
    """Storm's `MeanReducer`: the mean of the values given to a `ReducedMetric`."""


class ReducedMetric(Metric):
    """Values reduced by a reducer (Storm's `ReducedMetric`; squall's reducer: `MeanReducer`)."""

    def __init__(self, reducer: MeanReducer) -> None:
        if not isinstance(reducer, MeanReducer):
            raise TypeError(f"ReducedMetric takes a MeanReducer, got {type(reducer).__name__}")
        self.reducer = reducer
        self._sum = 0.0
        self._count = 0

    def update(self, value: float) -> None:
        self._sum += value
        self._count += 1

    def get_value_and_reset(self) -> float | None:
        mean = self._sum / self._count if self._count else None
        self._sum, self._count = 0.0, 0
        return mean

    def partial_and_reset(self) -> dict[str, Any]:
        partial = {"kind": "mean", "value": [self._sum, self._count]}
        self._sum, self._count = 0.0, 0
        return partial


METRIC_TYPES = (CountMetric, MultiCountMetric, ReducedMetric)


def merge_partial(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    """Two partials of one metric combined (from two tasks, or two batches of one)."""
    if a is None:
        return {"kind": b["kind"], "value": _copy(b["value"])}
    if a["kind"] != b["kind"]:
        raise ValueError(f"cannot merge a {a['kind']} metric with a {b['kind']} one")
    kind, x, y = a["kind"], a["value"], b["value"]
    if kind == "count":
        return {"kind": kind, "value": x + y}
    if kind == "multi_count":
        out = dict(x)
        for key, n in y.items():
            out[key] = out.get(key, 0) + n
        return {"kind": kind, "value": out}
    return {"kind": kind, "value": [x[0] + y[0], x[1] + y[1]]}


def value_of(partial: dict[str, Any]) -> Any:
    """What a merged partial shows: a count, counts by key, or a mean (None without values)."""
    if partial["kind"] == "mean":
        total, count = partial["value"]
        return total / count if count else None
    return _copy(partial["value"])


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(
        value, list) else value
