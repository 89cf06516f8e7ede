"""A running topology's metrics: latency histograms, and the snapshot runners hand to
`on_progress`, `--metrics-json`, Prometheus and the web UI (definitions: docs/metrics.md)."""

from squall.metrics.histogram import LatencyHistogram
from squall.metrics.snapshot import (
    BatchMetrics,
    ComponentMetrics,
    ErrorSummary,
    Latency,
    MetricsSnapshot,
)

__all__ = [
    "BatchMetrics",
    "ComponentMetrics",
    "ErrorSummary",
    "Latency",
    "LatencyHistogram",
    "MetricsSnapshot",
]
