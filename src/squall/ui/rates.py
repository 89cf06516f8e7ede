"""Live rates for the web UI: tuples per second over the last few seconds of snapshots.

`Rates` is fed `MetricsSnapshot.to_dict()` documents as the UI samples the runner and answers,
per component, per stream of a component and per task, how fast each counter grew between the
oldest and the newest sample of its window. Time is the snapshots' own `elapsed_ms` (the
runner's clock), so a slow answer does not bend a rate. A counter that went down, or time that
went back, means a new run (a rebalance starts one): the samples start over.

An edge of the picture carries its source's stream, which every subscriber receives whole, so
its rate is the source's emitted rate on that stream (`streams`): what the runners count.

>>> rates = Rates(window_s=3)
>>> def snap(ms, emitted):
...     return {"elapsed_ms": ms, "components": {"words": {
...         "emitted": emitted, "acked": emitted, "streams": {"default": emitted},
...         "per_task": {"1": {"emitted": emitted}}}}}
>>> rates.add(snap(1000, 100))
>>> rates.current() is None          # one sample: no rate yet
True
>>> rates.add(snap(2000, 300))
>>> r = rates.current()
>>> r["components"]["words"]["emitted"], r["streams"]["words"]["default"], r["window_s"]
(200.0, 200.0, 1.0)
>>> r["tasks"]["1"]["emitted"]
200.0
>>> rates.add(snap(5000, 900))       # the sample at 1 s left the 3-second window
>>> rates.current()["components"]["words"]["emitted"]
200.0
>>> rates.add(snap(500, 10))         # time went back: a new run
>>> rates.current() is None
True
"""

from __future__ import annotations

from collections import deque
from typing import Any

# The counters whose growth is a rate worth showing (tuples per second).
RATE_COUNTERS = ("emitted", "transferred", "executed", "acked", "failed")

Key = tuple[str, str, str]  # ("components" | "streams" | "tasks", owner, counter or stream)


def counts(snapshot: dict[str, Any]) -> dict[Key, float]:
    """The counters of a snapshot document that rates are computed for, flattened.

    >>> sorted(counts({"components": {"c": {"emitted": 3, "executed": None,
    ...                                      "streams": {"s": 3}}}}))
    [('components', 'c', 'emitted'), ('streams', 'c', 's')]
    """
    out: dict[Key, float] = {}
    for cid, c in (snapshot.get("components") or {}).items():
        for name in RATE_COUNTERS:
            if isinstance(c.get(name), int | float):
                out[("components", cid, name)] = c[name]
        for stream, n in (c.get("streams") or {}).items():
            if isinstance(n, int | float):
                out[("streams", cid, stream)] = n
        for task, t in (c.get("per_task") or {}).items():
            for name in RATE_COUNTERS:
                if isinstance(t.get(name), int | float):
                    out[("tasks", str(task), name)] = t[name]
    return out


class Rates:
    """Rates over the last `window_s` seconds of samples (see the module doc)."""

    def __init__(self, window_s: float = 3.0) -> None:
        self.window_ms = window_s * 1000
        self.samples: deque[tuple[int, dict[Key, float]]] = deque()

    def add(self, snapshot: dict[str, Any]) -> None:
        """Take a snapshot document (`MetricsSnapshot.to_dict()`) as the newest sample."""
        elapsed = int(snapshot.get("elapsed_ms") or 0)
        now = counts(snapshot)
        if self.samples:
            last_ms, last = self.samples[-1]
            if elapsed < last_ms or any(now.get(k, 0) < v for k, v in last.items()):
                self.samples.clear()  # a new run
            elif elapsed == last_ms:
                self.samples.pop()  # the same moment: keep the newer figures
        self.samples.append((elapsed, now))
        while self.samples[0][0] < elapsed - self.window_ms:
            self.samples.popleft()

    def clear(self) -> None:
        self.samples.clear()

    def current(self) -> dict[str, Any] | None:
        """`{"window_s", "components": {cid: {counter: rate}}, "streams": {cid: {stream: rate}},
        "tasks": {task: {counter: rate}}}`, or None before two samples of a run."""
        if len(self.samples) < 2:
            return None
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        seconds = (t1 - t0) / 1000
        out: dict[str, Any] = {"window_s": seconds, "components": {}, "streams": {}, "tasks": {}}
        for (group, owner, name), value in last.items():
            rate = (value - first.get((group, owner, name), 0)) / seconds
            out[group].setdefault(owner, {})[name] = round(rate, 3)
        return out


__all__ = ["RATE_COUNTERS", "Rates", "counts"]
