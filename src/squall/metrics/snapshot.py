"""`MetricsSnapshot`: what a running topology reports, typed and JSON-serialisable.

A runner builds one per progress interval (`Runner.metrics()`); `squall.run(...,
on_progress=callback)` hands it to the callback, `squall run --metrics-json FILE` appends
`to_dict()` as one JSON line per interval, and the Prometheus endpoint and web UI read it. The
definitions of every figure are Storm's, written down in docs/metrics.md; each field's comment
gives the short form.

>>> snap = MetricsSnapshot(runner="local", status="active", elapsed_ms=1500, components={
...     "words": ComponentMetrics("words", "spout", 1, emitted=10, acked=10,
...                               complete_latency=Latency(10, 1.5, 1.2, 4.0, 4.1))})
>>> d = snap.to_dict()
>>> d["components"]["words"]["complete_latency"]["p99_ms"], d["elapsed_ms"]
(4.0, 1500)
>>> MetricsSnapshot.from_dict(d) == snap
True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from squall.metrics.histogram import LatencyHistogram

SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class Latency:
    """A latency distribution's summary, in milliseconds (sub-millisecond resolution)."""

    count: int  # how many values were measured (sampled ones, for execute/process latency)
    mean_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, histogram: LatencyHistogram | None) -> Latency | None:
        if histogram is None or not histogram.count:
            return None
        return cls(histogram.count, round(histogram.mean_ms() or 0.0, 4),
                   round(histogram.percentile_ms(50) or 0.0, 4),
                   round(histogram.percentile_ms(99) or 0.0, 4), histogram.max_us / 1000)


@dataclass
class ComponentMetrics:
    """One component's figures (or one task's, in `ComponentMetrics.per_task`)."""

    component: str
    kind: str  # "spout" or "bolt"
    tasks: int
    emitted: int = 0  # tuples emitted by the component, on every stream
    transferred: int = 0  # tuples sent to tasks: an emit counts once per receiving task
    executed: int = 0  # bolts: tuples whose execute ran
    acked: int = 0  # spouts: tuples whose tree completed; bolts: tuples acked
    failed: int = 0  # spouts: trees failed or timed out; bolts: tuples failed
    timed_out: int = 0  # spouts: trees that did not complete within the message timeout
    errors: int = 0  # errors reported (exceptions, report_error, reliability misuse)
    pending: int = 0  # spouts: trees started and not yet completed or failed
    dead_lettered: int = 0  # spouts: messages past the retry limit
    malformed: int = 0  # spouts: records that could not be read (the `malformed` stream)
    late: int = 0  # windowed bolts and operators: tuples behind the watermark, not windowed
    in_windows: int | None = None  # windowed bolts: input tuples their windows hold now
    state_size: int | None = None  # stateful bolts: keys in their key-value state (committed)
    complete_latency: Latency | None = None  # spouts: emit to the tree's completion
    execute_latency: Latency | None = None  # bolts: time in execute (sampled)
    process_latency: Latency | None = None  # bolts: execute's start to the tuple's ack (sampled)
    capacity: float | None = None  # bolts: share of the interval spent executing (1.0: busy)
    streams: dict[str, int] = field(default_factory=dict)  # emitted per stream
    per_task: dict[int, ComponentMetrics] = field(default_factory=dict)

    def line(self) -> str:
        """One line of counters, as squall's progress and summary print them."""
        parts = [f"{self.component:<16} {self.kind:<5} x{self.tasks}", f"emitted={self.emitted}"]
        if self.kind == "bolt":
            parts.append(f"executed={self.executed}")
        parts += [f"acked={self.acked}", f"failed={self.failed}"]
        if self.kind == "spout":
            if self.timed_out:
                parts.append(f"timed_out={self.timed_out}")
            if self.dead_lettered:
                parts.append(f"dead_lettered={self.dead_lettered}")
            parts.append(f"pending={self.pending}")
            lat = self.complete_latency
            parts.append("latency=" + ("-" if lat is None else f"{lat.mean_ms:.1f}ms"))
        if self.errors:
            parts.append(f"errors={self.errors}")
        return "  ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "per_task"}
        for name in ("complete_latency", "execute_latency", "process_latency"):
            value = out[name]
            out[name] = None if value is None else dataclasses.asdict(value)
        out["streams"] = dict(self.streams)
        out["per_task"] = {str(t): m.to_dict() for t, m in self.per_task.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComponentMetrics:
        kwargs = dict(d)
        for name in ("complete_latency", "execute_latency", "process_latency"):
            if kwargs.get(name) is not None:
                kwargs[name] = Latency(**kwargs[name])
        kwargs["per_task"] = {int(t): cls.from_dict(m)
                              for t, m in (d.get("per_task") or {}).items()}
        return cls(**kwargs)


@dataclass(frozen=True)
class BatchMetrics:
    """A Spark micro-batch, from Spark's own progress report (`StreamingQueryProgress`)."""

    batch_id: int
    duration_ms: int  # the whole trigger
    input_rows: int  # Spark's rows the source gave (a row: a packet of spout tuples, a range,
    # or a control message; a Trident source's rows only trigger its batches: 0)
    planning_ms: int  # asking the spouts for the batch (latestOffset) and planning the query
    processing_ms: int  # running the batch's stages and committing it (addBatch)
    timestamp: str  # when the trigger started (ISO 8601, Spark's)
    executed: int | None = None  # tuples the batch's bolts (Trident: operations) executed


@dataclass(frozen=True)
class ErrorSummary:
    """The errors of a component of one kind: how many, and the latest's text."""

    component: str
    kind: str
    count: int
    last: str


@dataclass
class MetricsSnapshot:
    """Every figure of a run at one moment (see the module doc)."""

    runner: str  # "local" or "spark"
    status: str  # "active", "inactive", "stopping", ...
    elapsed_ms: int  # time since this run started (the runner's clock)
    components: dict[str, ComponentMetrics] = field(default_factory=dict)
    batches: list[BatchMetrics] = field(default_factory=list)  # Spark: the recent ones
    errors: list[ErrorSummary] = field(default_factory=list)
    user_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # register_metric
    restarted: bool = False  # the run resumed a checkpoint (counters are still this run's)
    # Spark: how long start-up took: `session_ms` (starting Spark), then from `run`'s start
    # `query_ms` (starting the streaming query), `first_batch_started_ms`, `first_batch_done_ms`.
    startup: dict[str, int] = field(default_factory=dict)
    version: int = SNAPSHOT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (`json.dumps` takes it as is)."""
        return {
            "version": self.version, "runner": self.runner, "status": self.status,
            "elapsed_ms": self.elapsed_ms, "restarted": self.restarted,
            "components": {cid: c.to_dict() for cid, c in self.components.items()},
            "batches": [dataclasses.asdict(b) for b in self.batches],
            "errors": [dataclasses.asdict(e) for e in self.errors],
            "user_metrics": self.user_metrics, "startup": dict(self.startup),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricsSnapshot:
        return cls(
            runner=d["runner"], status=d["status"], elapsed_ms=d["elapsed_ms"],
            components={cid: ComponentMetrics.from_dict(c) for cid, c in d["components"].items()},
            batches=[BatchMetrics(**b) for b in d.get("batches", [])],
            errors=[ErrorSummary(**e) for e in d.get("errors", [])],
            user_metrics=d.get("user_metrics", {}), restarted=d.get("restarted", False),
            startup=d.get("startup", {}),
            version=d.get("version", SNAPSHOT_VERSION),
        )
