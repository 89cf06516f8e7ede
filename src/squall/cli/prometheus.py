"""`squall run --metrics-port PORT`: the run's latest `MetricsSnapshot` for Prometheus to scrape.

A small HTTP server in the driver (a daemon thread, like the control endpoint), bound to
127.0.0.1 unless `--metrics-host` says otherwise, answers `GET /metrics` in Prometheus' text
exposition format, version 0.0.4 (`render`). It serves the snapshot of the last progress
interval, so a scrape never waits for the runner.

The figures are read from the snapshot generically (`squall.cli.progress.counters`, ...), so a
figure the snapshot gains shows up here too:

- every counter of a component as `squall_<name>_total` (`squall_emitted_total`,
  `squall_acked_total`, ...), one series per task with labels `component` and `task` when the
  runner reports that counter per task (the tasks' series then add up to the component's), one
  series per component otherwise: `sum by (component)` is the component's figure either way;
- gauges: `squall_pending` (per task, as above), `squall_tasks` (with a `kind` label),
  `squall_capacity` and any other fraction the snapshot has, `squall_elapsed_seconds`, and
  `squall_run_info{runner, status}` (1);
- each latency as a summary in seconds, `squall_<name>_latency_seconds` with `quantile` 0.5 and
  0.99, `_sum` and `_count`, plus its maximum, `squall_<name>_latency_max_seconds`; a latency
  without data has no series;
- tuples emitted per stream, `squall_stream_emitted_total{component, stream}`;
- errors per component and kind, `squall_errors_by_kind_total{component, kind}`;
- the last Spark micro-batch: `squall_last_batch_id`, `squall_last_batch_input_rows` and its
  durations in seconds (`squall_last_batch_duration_seconds`, `..._planning_seconds`,
  `..._processing_seconds`);
- user metrics (`register_metric`), each number as `squall_user_metric{scope, name}`.

>>> from squall.metrics import ComponentMetrics, Latency, MetricsSnapshot
>>> c = ComponentMetrics("split", "bolt", 2, emitted=7, executed=3,
...                      process_latency=Latency(3, 2.0, 1.5, 4.0, 5.0), streams={"default": 7})
>>> c.per_task = {3: ComponentMetrics("split", "bolt", 1, emitted=4, executed=1),
...               4: ComponentMetrics("split", "bolt", 1, emitted=3, executed=2)}
>>> text = render(MetricsSnapshot("local", "active", 1500, {"split": c}))
>>> print("\\n".join(line for line in text.splitlines() if "emitted" in line))
# HELP squall_emitted_total Tuples emitted by the component, on every stream.
# TYPE squall_emitted_total counter
squall_emitted_total{component="split",task="3"} 4
squall_emitted_total{component="split",task="4"} 3
# HELP squall_stream_emitted_total Tuples emitted per stream.
# TYPE squall_stream_emitted_total counter
squall_stream_emitted_total{component="split",stream="default"} 7
>>> print("\\n".join(line for line in text.splitlines() if "process_latency_seconds" in line))
# HELP squall_process_latency_seconds Bolts: execute's start to the tuple's ack (sampled).
# TYPE squall_process_latency_seconds summary
squall_process_latency_seconds{component="split",quantile="0.5"} 0.0015
squall_process_latency_seconds{component="split",quantile="0.99"} 0.004
squall_process_latency_seconds_sum{component="split"} 0.006
squall_process_latency_seconds_count{component="split"} 3
"""

from __future__ import annotations

import dataclasses
import math
import socket
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from squall.cli.control import SHUTDOWN_POLL_S
from squall.cli.progress import counters, gauges, latencies
from squall.metrics.snapshot import ComponentMetrics, MetricsSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "squall_"
GAUGE_COUNTERS = ("pending",)  # `int` figures that go up and down: gauges, not counters
QUANTILES = (("0.5", "p50_ms"), ("0.99", "p99_ms"))

# HELP texts of the figures squall knows (docs/metrics.md); a figure without one gets a generic
# text naming its field.
HELP = {
    "emitted": "Tuples emitted by the component, on every stream.",
    "transferred": "Tuples sent to tasks: an emit counts once per receiving task.",
    "executed": "Bolts: tuples whose execute ran.",
    "acked": "Spouts: tuple trees completed; bolts: tuples acked.",
    "failed": "Spouts: tuple trees failed or timed out; bolts: tuples failed.",
    "timed_out": "Spouts: tuple trees that did not complete within the message timeout.",
    "errors": "Errors reported (exceptions, report_error, reliability misuse).",
    "pending": "Spouts: tuple trees started and not yet completed or failed.",
    "dead_lettered": "Spouts: messages past the retry limit.",
    "malformed": "Spouts: records that could not be read (the malformed stream).",
    "late": "Windowed bolts: tuples behind the watermark (the late stream).",
    "complete": "Spouts: emit to the tuple tree's completion.",
    "execute": "Bolts: time in execute (sampled).",
    "process": "Bolts: execute's start to the tuple's ack (sampled).",
    "capacity": "Bolts: share of the interval spent executing (1.0: busy).",
}


class MetricsServerError(OSError):
    pass


def escape_label(value: str) -> str:
    r"""A label value as the format writes it: backslash, double quote and line feed escaped.

    >>> print(escape_label('a\\b "c"\nd'))
    a\\b \"c\"\nd
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value (Go's float syntax for the special values).

    >>> [_number(v) for v in (3, 0.25, float("inf"), float("nan"))]
    ['3', '0.25', '+Inf', 'NaN']
    """
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Exposition:
    """Metric families in order of first use, each written as one group (the format's rule)."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, labels: Mapping[str, str],
            value: float, suffix: str = "") -> None:
        family = self.families.setdefault(name, (kind, help_text, []))
        label_text = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
        family[2].append(f"{name}{suffix}{{{label_text}}} {_number(value)}" if label_text
                         else f"{name}{suffix} {_number(value)}")

    def text(self) -> str:
        out = []
        for name, (kind, help_text, samples) in self.families.items():
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")
            out += samples
        return "\n".join(out) + "\n"


def _help(field: str) -> str:
    return HELP.get(field, f"squall's {field} figure (squall.metrics.ComponentMetrics).")


def _per_task(c: ComponentMetrics, name: str, total: int) -> Iterable[tuple[dict[str, str], int]]:
    """The label sets and values of counter `name`: per task when the tasks add up to it."""
    tasks = {t: counters(m).get(name, 0) for t, m in sorted(c.per_task.items())}
    if tasks and sum(tasks.values()) == total:
        return [({"component": c.component, "task": str(t)}, n) for t, n in tasks.items()]
    return [({"component": c.component}, total)]


def render(snapshot: MetricsSnapshot | None, runner: str = "") -> str:
    """The exposition of `snapshot` (see the module doc); before the first snapshot, only
    `squall_run_info` with status "starting"."""
    ex = _Exposition()
    if snapshot is None:
        ex.add(PREFIX + "run_info", "gauge", "The run: its runner and status.",
               {"runner": runner, "status": "starting"}, 1)
        return ex.text()
    ex.add(PREFIX + "run_info", "gauge", "The run: its runner and status.",
           {"runner": snapshot.runner, "status": snapshot.status,
            "restarted": str(snapshot.restarted).lower()}, 1)
    ex.add(PREFIX + "elapsed_seconds", "gauge", "Time since the run started.", {},
           snapshot.elapsed_ms / 1000)
    for c in snapshot.components.values():
        ex.add(PREFIX + "tasks", "gauge", "Tasks of the component.",
               {"component": c.component, "kind": c.kind}, c.tasks)
    # `_Exposition` keeps each family's samples together, whatever the order they come in.
    for c in snapshot.components.values():
        for name, total in counters(c).items():
            if name in GAUGE_COUNTERS:
                metric, kind = PREFIX + name, "gauge"
            else:
                metric, kind = f"{PREFIX}{name}_total", "counter"
            for labels, count in _per_task(c, name, total):
                ex.add(metric, kind, _help(name), labels, count)
        for name, fraction in gauges(c).items():
            ex.add(PREFIX + name, "gauge", _help(name), {"component": c.component}, fraction)
        for name, lat in latencies(c).items():
            metric = f"{PREFIX}{name}_latency_seconds"
            labels = {"component": c.component}
            for q, attr in QUANTILES:
                ex.add(metric, "summary", _help(name), {**labels, "quantile": q},
                       getattr(lat, attr) / 1000)
            ex.add(metric, "summary", _help(name), labels, lat.mean_ms * lat.count / 1000,
                   "_sum")
            ex.add(metric, "summary", _help(name), labels, lat.count, "_count")
            ex.add(f"{PREFIX}{name}_latency_max_seconds", "gauge",
                   f"The longest {name} latency measured.", labels, lat.max_ms / 1000)
        for stream, n in c.streams.items():
            ex.add(PREFIX + "stream_emitted_total", "counter", "Tuples emitted per stream.",
                   {"component": c.component, "stream": stream}, n)
    for e in snapshot.errors:
        ex.add(PREFIX + "errors_by_kind_total", "counter",
               "Errors reported, per component and kind (the exception's class).",
               {"component": e.component, "kind": e.kind}, e.count)
    if snapshot.batches:
        last = snapshot.batches[-1]
        for f in dataclasses.fields(last):
            raw = getattr(last, f.name)
            if not isinstance(raw, int | float) or isinstance(raw, bool):
                continue  # the timestamp
            name = f.name.removeprefix("batch_")
            figure: float = raw
            if name.endswith("_ms"):
                name, figure = name[:-3] + "_seconds", raw / 1000
            ex.add(f"{PREFIX}last_batch_{name}", "gauge",
                   f"The last Spark micro-batch's {f.name} (Spark's progress report).", {},
                   figure)
    for scope, figures in snapshot.user_metrics.items():
        for name, number in _numbers(figures):
            ex.add(PREFIX + "user_metric", "untyped", "Metrics the topology registered.",
                   {"scope": str(scope), "name": name}, number)
    return ex.text()


def _numbers(value: Any, name: str = "") -> Iterable[tuple[str, float]]:
    """The numbers in a user metric's value (nested mappings flattened to dotted names)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield name or "value", value
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _numbers(inner, f"{name}.{key}" if name else str(key))


class MetricsServer:
    """Serves `GET /metrics` from the latest snapshot on a daemon thread (see the module doc).

    `update` is the `on_progress` callback; `port` 0 takes a free port (`port` then tells it).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, runner: str = "") -> None:
        self.runner = runner
        self.latest: MetricsSnapshot | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes are not news on the terminal

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self._send(404, "text/plain; charset=utf-8", b"only /metrics is here\n")
                    return
                body = render(server.latest, server.runner).encode()
                self._send(200, CONTENT_TYPE, body)

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server_class = _Server6 if ":" in host else ThreadingHTTPServer
        try:
            self.httpd = server_class((host, port), Handler)
        except (OSError, OverflowError) as exc:
            raise MetricsServerError(f"--metrics-port: cannot listen on {host} port {port}: "
                                     f"{getattr(exc, 'strerror', None) or exc}") from None
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="squall-metrics",
                                       kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def update(self, snapshot: MetricsSnapshot) -> None:
        self.latest = snapshot

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6
