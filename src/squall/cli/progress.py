"""What `squall run` shows while a topology runs, and the summary it prints at the end.

Both read the runner's `MetricsSnapshot` (squall.metrics) generically: every counter, latency,
gauge and stream of a `ComponentMetrics` is found by its type, so a figure added to the snapshot
shows up here without a change. A `None` latency or gauge means "no data yet" and is left out.

`ProgressDisplay` is the `on_progress` callback:

- on a terminal (`isatty()`), one line per component under a header, redrawn in place once per
  progress interval (ANSI cursor-up and clear-line): the component's rate since the last update
  (tuples emitted per second for a spout, executed for a bolt), its total, what is pending, the
  complete latency's p99 when known, failures and errors. Text that anything else writes through
  `wrap`ped streams (log lines, a signal's message, what components print) first erases the
  block, so it scrolls above it and the next update draws the block again below;
- anywhere else (a pipe, a file, `squall submit`), plain appended lines, and only the lines that
  changed: a header with the elapsed time and status, then each component whose line differs
  from the one printed last. A run that makes no progress prints nothing.

>>> import io
>>> from squall.metrics import ComponentMetrics, Latency, MetricsSnapshot
>>> def snap(ms, n):
...     return MetricsSnapshot("local", "active", ms, {"words": ComponentMetrics(
...         "words", "spout", 2, emitted=n, acked=n,
...         complete_latency=Latency(n, 2.0, 1.5, 4.0, 5.0) if n else None)})
>>> out = io.StringIO()
>>> show = ProgressDisplay(out)
>>> show(snap(1000, 0)); show(snap(2000, 0)); show(snap(3000, 500))
>>> print(out.getvalue(), end="")
[    1.0s] active
  words            spout x2      0.0/s  emitted=0  pending=0
[    3.0s] active
  words            spout x2      500/s  emitted=500  pending=0  complete p99=4.0ms
>>> print(summary(snap(4000, 600)))
words            spout x2  emitted=600 (150/s)  acked=600  failed=0  complete p50=1.5ms p99=4.0ms
errors reported: 0; elapsed 4.0s
"""

from __future__ import annotations

import dataclasses
import io
import os
import threading
from typing import Any, TextIO, cast

from squall.metrics.snapshot import ComponentMetrics, Latency, MetricsSnapshot

# The counter whose rate a component's line shows: what it did per second.
RATE_OF = {"spout": "emitted", "bolt": "executed"}
# Counters every summary line shows, in this order (others only when not zero).
SUMMARY_FIRST = {"spout": ("emitted", "acked", "failed"),
                 "bolt": ("executed", "emitted", "acked", "failed")}
# Counters left out of the summary: what a reader rarely needs (the JSON file has them).
SUMMARY_SKIPS = ("transferred",)
# Counters a live line shows when not zero, after its rate and total.
LIVE_IF_NONZERO = ("failed", "timed_out", "dead_lettered", "errors")
MIN_RATE_INTERVAL_MS = 200  # a rate over less time than this is noise: the last one is kept
NAME_WIDTH = 16

_UP = "\x1b[{}A"  # cursor up n lines
_CLEAR_LINE = "\r\x1b[2K"  # to column 1, clear the line
_CLEAR_BELOW = "\x1b[J"  # clear from the cursor to the end of the screen


def counters(c: ComponentMetrics) -> dict[str, int]:
    """The component's counters: every `int` field but `tasks`, in declaration order."""
    return {f.name: v for f in dataclasses.fields(c) if f.name != "tasks"
            and isinstance(v := getattr(c, f.name), int) and not isinstance(v, bool)}


def latencies(c: ComponentMetrics) -> dict[str, Latency]:
    """The component's latencies that have data, by name without `_latency`."""
    return {f.name.removesuffix("_latency"): v for f in dataclasses.fields(c)
            if isinstance(v := getattr(c, f.name), Latency)}


def gauges(c: ComponentMetrics) -> dict[str, float]:
    """The component's `float` figures that have data (capacity, ...)."""
    return {f.name: v for f in dataclasses.fields(c)
            if isinstance(v := getattr(c, f.name), float)}


def rate_text(per_s: float | None) -> str:
    """A rate for a line: `-` when unknown.

    >>> [rate_text(r) for r in (None, 0, 2.345, 12.5, 12345.6)]
    ['-', '0.0/s', '2.3/s', '12/s', '12,346/s']
    """
    if per_s is None:
        return "-"
    return f"{per_s:.1f}/s" if per_s < 10 else f"{per_s:,.0f}/s"


def ms_text(ms: float) -> str:
    """A latency for a line.

    Below a millisecond in microseconds, so that sub-millisecond latencies keep their figures.

    >>> [ms_text(v) for v in (0.0042, 0.04, 1.234, 56.78, 7428.0)]
    ['4us', '40us', '1.2ms', '57ms', '7428ms']
    """
    if ms < 1:
        return f"{ms * 1000:.0f}us"
    return f"{ms:.1f}ms" if ms < 10 else f"{ms:.0f}ms"


def _width(snapshot: MetricsSnapshot) -> int:
    return max([NAME_WIDTH, *(len(cid) for cid in snapshot.components)])


def _head(c: ComponentMetrics, width: int) -> str:
    # `name  kind xN`, as `ComponentMetrics.line` starts (what scripts and tests look for).
    return f"{c.component:<{width}} {c.kind:<5} x{c.tasks}"


def _batch_text(snapshot: MetricsSnapshot) -> str:
    """The last Spark batch: its id, how long it took and the tuples its bolts executed (Spark's
    own input rows are packets and control messages, not tuples: the JSON has them).

    >>> from squall.metrics import BatchMetrics
    >>> b = BatchMetrics(4, 120, 1, 10, 100, "", executed=1500)
    >>> _batch_text(MetricsSnapshot("spark", "active", 1000, batches=[b]))
    '; batch 4 took 120 ms, 1,500 tuples executed'
    """
    if not snapshot.batches:
        return ""
    b = snapshot.batches[-1]
    text = f"; batch {b.batch_id} took {b.duration_ms} ms"
    if b.executed is not None:
        text += f", {b.executed:,} tuples executed"
    return text


def startup_text(startup: dict[str, int]) -> str | None:
    """The summary's start-up line (Spark): starting Spark, the first results, and the spout
    tuples whose trees waited for them (acked, left out of complete latency).

    >>> startup_text({"session_ms": 4200, "query_ms": 300, "first_batch_started_ms": 900,
    ...               "first_batch_done_ms": 9100, "tuples": 20000}).split("; ")
    ['start-up: Spark 4.2s, first batch done 9.1s after the start', \
'20000 tuples waited for it (acked, not in complete latency)']
    """
    if not startup:
        return None
    parts = [f"Spark {startup.get('session_ms', 0) / 1000:.1f}s"]
    if "first_batch_done_ms" in startup:
        parts.append(f"first batch done {startup['first_batch_done_ms'] / 1000:.1f}s after "
                     "the start")
    text = "start-up: " + ", ".join(parts)
    if startup.get("tuples"):
        text += (f"; {startup['tuples']} tuples waited for it (acked, not in complete "
                 "latency)")
    return text


class ProgressDisplay:
    """The `on_progress` callback of `squall run` (see the module doc).

    `live` forces the in-place display on or off (default: whether `stream` is a terminal);
    `columns` is the terminal's width (default: asked of the terminal, else 100).
    """

    def __init__(self, stream: TextIO, *, live: bool | None = None,
                 columns: int | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.columns = columns
        self._lock = threading.RLock()
        self._drawn = 0  # lines of the live block on the screen now
        self._at_line_start = True  # whether the cursor is at a line's start (live only)
        self._printed: dict[str, str] = {}  # plain: each component's last line printed
        self._status = ""  # plain: the status printed last
        self._base: tuple[int, dict[str, int]] | None = None  # (elapsed ms, counts) of rates
        self._rates: dict[str, float | None] = {}

    # ---- the callback ------------------------------------------------------------------------
    def __call__(self, snapshot: MetricsSnapshot) -> None:
        self._update_rates(snapshot)
        width = _width(snapshot)
        header = f"[{snapshot.elapsed_ms / 1000:7.1f}s] {snapshot.status}" + _batch_text(snapshot)
        lines = {cid: self.line(c, width) for cid, c in snapshot.components.items()}
        with self._lock:
            if self.live:
                self._draw([header, *("  " + v for v in lines.values())])
                return
            changed = [v for cid, v in lines.items() if self._printed.get(cid) != v]
            if not changed and self._status == snapshot.status:
                return
            self._status = snapshot.status
            self._printed.update(lines)
            self.stream.write("\n".join([header, *("  " + v for v in changed)]) + "\n")
            self.stream.flush()

    def line(self, c: ComponentMetrics, width: int = NAME_WIDTH) -> str:
        """A component's live line: rate, total, pending, complete p99, failures, errors."""
        counts = counters(c)
        verb = RATE_OF.get(c.kind, "emitted")
        parts = [_head(c, width), f"{rate_text(self._rates.get(c.component)):>9}",
                 f"{verb}={counts.get(verb, 0)}"]
        if c.kind == "spout":
            parts.append(f"pending={c.pending}")
        parts += [f"{name}={counts[name]}" for name in LIVE_IF_NONZERO if counts.get(name)]
        lat = latencies(c).get("complete")
        if lat is not None:
            parts.append(f"complete p99={ms_text(lat.p99_ms)}")
        parts += [f"{name}={value:.2f}" for name, value in gauges(c).items()]
        return "  ".join(parts)

    def close(self) -> None:
        """Erase the live block (the summary that follows says it all)."""
        with self._lock:
            self._erase()
            self.stream.flush()

    def wrap(self, other: TextIO) -> TextIO:
        """`other` (sys.stderr, sys.stdout, a log handler's stream), writing through which first
        erases the live block; `other` itself when the display is not live."""
        if not self.live:
            return other
        return cast(TextIO, _BlockAware(self, other))

    # ---- rates -------------------------------------------------------------------------------
    def _update_rates(self, snapshot: MetricsSnapshot) -> None:
        now = snapshot.elapsed_ms
        counts = {cid: counters(c).get(RATE_OF.get(c.kind, "emitted"), 0)
                  for cid, c in snapshot.components.items()}
        if self._base is None or now < self._base[0]:  # the first, or time went back
            # Counters count from the run's start (docs/metrics.md), a resumed one's too.
            self._rates = {cid: n * 1000 / now if now > 0 else None
                           for cid, n in counts.items()}
            self._base = (now, counts)
            return
        then, before = self._base
        if now - then < MIN_RATE_INTERVAL_MS:
            return
        self._rates = {cid: (n - before[cid]) * 1000 / (now - then)
                       if cid in before and n >= before[cid] else None
                       for cid, n in counts.items()}
        self._base = (now, counts)

    # ---- the live block ----------------------------------------------------------------------
    def _columns(self) -> int:
        if self.columns:
            return self.columns
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return 100

    def _draw(self, lines: list[str]) -> None:
        room = max(self._columns() - 1, 10)  # a line that wraps would break cursor-up
        out = [] if self._at_line_start else ["\n"]
        if self._drawn:
            out.append(_UP.format(self._drawn))
        out += [_CLEAR_LINE + line[:room] + "\n" for line in lines]
        out.append(_CLEAR_BELOW)
        self.stream.write("".join(out))
        self.stream.flush()
        self._drawn = len(lines)
        self._at_line_start = True

    def _erase(self) -> None:
        if self._drawn:
            self.stream.write(_UP.format(self._drawn) + "\r" + _CLEAR_BELOW)
            self._drawn = 0

    def _written(self, text: str) -> None:
        """Something else was written to the terminal (the live block was erased first)."""
        if text:
            self._at_line_start = text.endswith("\n")


class _BlockAware(io.TextIOBase):
    """A stream whose writes erase the display's live block first (`ProgressDisplay.wrap`)."""

    def __init__(self, display: ProgressDisplay, inner: TextIO) -> None:
        self._display = display
        self._inner = inner

    def write(self, text: str) -> int:
        with self._display._lock:
            self._display._erase()
            self._display.stream.flush()
            n = self._inner.write(text)
            self._display._written(text)
            return n

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._inner.errors

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def summary(snapshot: MetricsSnapshot) -> str:
    """The end-of-run summary: every component's totals with its rate over the run, its
    latencies (p50/p99) and other figures that are not zero, the last Spark batch, start-up,
    then the errors per component and kind. Counters count from the run's start, also when it
    resumed a checkpoint, so the rates are the run's."""
    width = _width(snapshot)
    seconds = snapshot.elapsed_ms / 1000
    lines = []
    for c in snapshot.components.values():
        counts = counters(c)
        first = SUMMARY_FIRST.get(c.kind, ("emitted",))
        verb = RATE_OF.get(c.kind, "emitted")
        parts = [_head(c, width)]
        for name in first:
            text = f"{name}={counts.get(name, 0)}"
            if name == verb and seconds > 0:
                text += f" ({rate_text(counts.get(name, 0) / seconds)})"
            parts.append(text)
        parts += [f"{name}={n}" for name, n in counts.items()
                  if n and name not in first and name not in SUMMARY_SKIPS]
        parts += [f"{name} p50={ms_text(lat.p50_ms)} p99={ms_text(lat.p99_ms)}"
                  for name, lat in latencies(c).items()]
        parts += [f"{name}={value:.2f}" for name, value in gauges(c).items()]
        if set(c.streams) - {"default"}:
            parts.append("streams: " + " ".join(f"{s}={n}" for s, n in c.streams.items()))
        lines.append("  ".join(parts))
    if snapshot.batches:
        recent = snapshot.batches
        mean = sum(b.duration_ms for b in recent) / len(recent)
        lines.append(f"spark: last batch {recent[-1].batch_id}; the last {len(recent)} took "
                     f"{mean:.0f} ms on average")
    startup = startup_text(snapshot.startup)
    if startup is not None:
        lines.append(startup)
    if snapshot.restarted:
        lines.append("resumed from a checkpoint: the counters count this run's work only")
    lines.append(f"errors reported: {sum(e.count for e in snapshot.errors)}; "
                 f"elapsed {seconds:.1f}s")
    for e in snapshot.errors:
        last = e.last if len(e.last) <= 120 else e.last[:117] + "..."
        lines.append(f"  {e.component} {e.kind}: {e.count}; latest: {last}")
    return "\n".join(lines)
