"""Observing a run from the CLI: `--metrics-json`, the Prometheus endpoint, the
progress display on a terminal and off it, the summary, `--verbose` and the Spark UI's address.

The end-to-end runs are `squall run` subprocesses of `tests/support/stop_topology.py` (a slow
bolt keeps the run going for seconds), scraped while they run; the display is driven with snapshots
against a fake terminal whose screen the test reconstructs from the ANSI sequences.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from squall.cli.control import ControlServer
from squall.cli.progress import ProgressDisplay, summary
from squall.cli.prometheus import CONTENT_TYPE, MetricsServer, render
from squall.metrics import (
    BatchMetrics,
    ComponentMetrics,
    ErrorSummary,
    Latency,
    MetricsSnapshot,
)

# Each test runs `squall run` in subprocesses of its own: they may go to different workers.
pytestmark = pytest.mark.spread

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/support/stop_topology.py:build"
SQUALL = [sys.executable, "-m", "squall.cli.main"]


# ---- a strict reader of the text exposition format 0.0.4 -------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_TYPES = ("counter", "gauge", "summary", "histogram", "untyped")


def _unescape(value: str) -> str:
    return re.sub(r"\\([\\\"n])", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_exposition(text: str) -> tuple[dict[tuple[str, frozenset], float], dict[str, str]]:
    """Every sample `{(name, labels): value}` and every family's type, failing on anything the
    format (Prometheus' exposition_formats, text format 0.0.4) does not allow: a sample before
    its family's TYPE or outside its family's group, a second HELP or TYPE for a name, a
    duplicate series, a bad name, label or value, a summary sample without its quantile, a
    negative counter, a missing final line feed."""
    assert text.endswith("\n"), "the last line must end with a line feed"
    samples: dict[tuple[str, frozenset], float] = {}
    types: dict[str, str] = {}
    helps: set[str] = set()
    done: set[str] = set()  # families whose group has ended
    family = None
    for line in text[:-1].split("\n"):
        assert line, "no empty lines here"
        if line.startswith("#"):
            parts = line.split(" ", 3)
            assert parts[0] == "#" and parts[1] in ("HELP", "TYPE"), line
            name = parts[2]
            assert re.fullmatch(_NAME, name), line
            assert name not in done, f"{name}'s lines are not one group"
            if family is not None and family != name:
                done.add(family)
            family = name
            if parts[1] == "HELP":
                assert name not in helps, f"second HELP for {name}"
                assert re.fullmatch(r"(?:[^\\\n]|\\[\\n])*", parts[3]), line
                helps.add(name)
            else:
                assert name not in types, f"second TYPE for {name}"
                assert parts[3] in _TYPES, line
                types[name] = parts[3]
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, label_text, value_text = m.groups()
        labels = {k: _unescape(v) for k, v in _LABEL_PAIR.findall(label_text or "")}
        assert len(labels) == len(_LABEL_PAIR.findall(label_text or "")), "repeated label"
        assert family is not None and family in types, f"{name}: sample before its TYPE"
        kind = types[family]
        allowed = {family}
        if kind == "summary":
            allowed |= {family + "_sum", family + "_count"}
        assert name in allowed, f"{name} outside its family's group ({family})"
        if value_text in ("+Inf", "-Inf", "NaN"):
            value = float(value_text.replace("Inf", "inf").replace("NaN", "nan"))
        else:
            assert re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", value_text), line
            value = float(value_text)
        if kind == "summary" and name == family:
            q = float(labels["quantile"])  # KeyError: a quantile sample without its label
            assert 0 <= q <= 1
        if kind == "counter" or name.endswith(("_count", "_sum")):
            assert value >= 0, line
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate series {line}"
        samples[key] = value
    return samples, types


def total(samples: dict, metric: str, /, **labels: str) -> float:
    """The sum of `metric`'s series whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and want <= set(ls))


def _snapshot(elapsed_ms: int = 2000, emitted: int = 10, status: str = "active",
              **spout_fields) -> MetricsSnapshot:
    spout = ComponentMetrics("words", "spout", 2, emitted=emitted, acked=emitted, pending=3,
                             complete_latency=Latency(emitted, 2.0, 1.5, 4.0, 5.0),
                             streams={"default": emitted}, **spout_fields)
    spout.per_task = {1: ComponentMetrics("words", "spout", 1, emitted=emitted - 4,
                                          acked=emitted - 4, pending=1),
                      2: ComponentMetrics("words", "spout", 1, emitted=4, acked=4, pending=2)}
    bolt = ComponentMetrics("count", "bolt", 1, executed=emitted, acked=emitted, errors=2,
                            execute_latency=None, capacity=0.5)
    return MetricsSnapshot("local", status, elapsed_ms, {"words": spout, "count": bolt},
                           errors=[ErrorSummary("count", "ValueError", 2, "bad 'x'")])


# ---- the Prometheus exposition -----------------------------------------------------------------
def test_the_exposition_parses_strictly_and_has_every_figure():
    snap = _snapshot()
    snap.components["words"].errors = 5
    snap.components['we"ird\\name\n'] = ComponentMetrics('we"ird\\name\n', "bolt", 1, executed=4)
    snap.batches = [BatchMetrics(6, 1200, 60, 100, 1000, "t"), BatchMetrics(7, 900, 30, 50, 800,
                                                                            "t")]
    snap.user_metrics = {"count": {"seen": 12, "by": {"a": 1.5}, "label": "text", "on": True}}
    text = render(snap)
    samples, types = parse_exposition(text)
    # Per task where the tasks add up to the component, labels as given.
    assert samples[("squall_emitted_total",
                    frozenset({"component": "words", "task": "1"}.items()))] == 6
    assert total(samples, "squall_emitted_total", component="words") == 10
    assert total(samples, "squall_pending", component="words") == 3
    assert types["squall_pending"] == "gauge" and types["squall_emitted_total"] == "counter"
    # A counter the tasks do not carry (errors: 0 per task, 5 in all) is the component's.
    assert samples[("squall_errors_total", frozenset({"component": "words"}.items()))] == 5
    assert total(samples, "squall_errors_total", component="words") == 5
    assert samples[("squall_errors_total", frozenset({"component": "count"}.items()))] == 2
    # Label values escaped, and read back as they were.
    assert total(samples, "squall_executed_total", component='we"ird\\name\n') == 4
    assert 'component="we\\"ird\\\\name\\n"' in text
    # Latencies: a summary in seconds; no series for a latency without data.
    q99 = ("squall_complete_latency_seconds",
           frozenset({"component": "words", "quantile": "0.99"}.items()))
    assert types["squall_complete_latency_seconds"] == "summary" and samples[q99] == 0.004
    assert total(samples, "squall_complete_latency_seconds_count") == 10
    assert math.isclose(total(samples, "squall_complete_latency_seconds_sum"), 0.02)
    assert "squall_execute_latency_seconds" not in types
    assert total(samples, "squall_capacity", component="count") == 0.5
    assert total(samples, "squall_stream_emitted_total", component="words",
                 stream="default") == 10
    assert total(samples, "squall_errors_by_kind_total", component="count",
                 kind="ValueError") == 2
    # The last Spark batch, durations in seconds.
    assert total(samples, "squall_last_batch_id") == 7
    assert total(samples, "squall_last_batch_duration_seconds") == 0.9
    assert total(samples, "squall_last_batch_input_rows") == 30
    assert total(samples, "squall_elapsed_seconds") == 2.0
    assert total(samples, "squall_run_info", runner="local", status="active") == 1
    assert total(samples, "squall_user_metric", scope="count", name="by.a") == 1.5
    assert total(samples, "squall_user_metric", name="on") == 0  # not a number: left out
    # Every family has its HELP and TYPE.
    families = set(types)
    assert families == {line.split()[2] for line in text.splitlines()
                        if line.startswith("# HELP")}


def test_the_exposition_is_read_by_prometheus_own_parser():
    from prometheus_client.parser import text_string_to_metric_families

    text = render(_snapshot())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # The reference parser names a counter's family without `_total`.
    assert families["squall_emitted"].type == "counter"
    assert families["squall_complete_latency_seconds"].type == "summary"
    assert sum(len(f.samples) for f in families.values()) == len(parse_exposition(text)[0])
    assert render(None, "spark") == ('# HELP squall_run_info The run: its runner and status.\n'
                                     '# TYPE squall_run_info gauge\n'
                                     'squall_run_info{runner="spark",status="starting"} 1\n')


def test_the_strict_reader_refuses_what_the_format_does_not_allow():
    """The checker above is not vacuous."""
    bad = [
        "x 1",  # no final line feed
        "x 1\n",  # a sample without TYPE
        "# TYPE x counter\nx 1\n# TYPE y gauge\ny 1\nx 2\n",  # x's lines split
        "# TYPE x counter\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",  # duplicate series
        '# TYPE x gauge\nx{a="b"c"} 1\n',  # unescaped quote
        "# TYPE x summary\nx 1\n",  # a quantile sample without quantile
        "# TYPE x counter\nx -1\n",  # a negative counter
        "# TYPE x counter\n# TYPE x counter\nx 1\n",  # two TYPEs
    ]
    for text in bad:
        with pytest.raises((AssertionError, KeyError)):
            parse_exposition(text)


# ---- the display -------------------------------------------------------------------------------
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`: the cursor moves, clear-line, clear-below and text."""
    lines = [""]
    row = col = 0
    for token in re.findall(r"\x1b\[(\d*)([AJK])|(\r)|(\n)|([^\x1b\r\n]+)", raw):
        count, code, cr, nl, text = token
        if code == "A":
            row = max(row - int(count or 1), 0)
        elif code == "J":
            lines[row] = lines[row][:col]
            del lines[row + 1:]
        elif code == "K":
            lines[row] = ""
        elif cr:
            col = 0
        elif nl:
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif text:
            lines[row] = lines[row][:col] + text + lines[row][col + len(text):]
            col += len(text)
    return lines if lines[-1] else lines[:-1]


def test_on_a_terminal_each_component_has_one_line_updated_in_place():
    term = FakeTerminal()
    show = ProgressDisplay(term, columns=120)
    assert show.live
    show(_snapshot(1000, 10))
    assert "A" not in re.findall(r"\x1b\[\d*([A-Z])", term.getvalue())  # nothing to go up over
    show(_snapshot(2000, 50))
    show(_snapshot(3000, 50))
    raw = term.getvalue()
    assert raw.count("\x1b[3A") == 2  # up over the header and two components, twice
    assert raw.count("\r\x1b[2K") == 9  # each line cleared before it is written
    shown = screen(raw)
    assert len(shown) == 3, shown  # the block once, not three times
    assert shown[0].startswith("[    3.0s] active")
    words = next(line for line in shown if "words" in line)
    assert "0.0/s" in words and "emitted=50" in words and "pending=3" in words
    assert "complete p99=4.0ms" in words
    count = next(line for line in shown if "count " in line)
    assert "executed=50" in count and "errors=2" in count and "capacity=0.50" in count
    narrow = FakeTerminal()
    ProgressDisplay(narrow, columns=40)(_snapshot(1000, 10))
    assert max(len(line) for line in screen(narrow.getvalue())) == 39  # cut: nothing wraps
    # The rate is per second since the last update: 40 tuples in 1 s.
    show2 = ProgressDisplay(FakeTerminal(), columns=200)
    show2(_snapshot(1000, 10))
    show2(_snapshot(2000, 50))
    assert "40/s" in show2.line(_snapshot(2000, 50).components["words"])


def test_other_output_scrolls_above_the_block_and_close_erases_it():
    term = FakeTerminal()
    show = ProgressDisplay(term, columns=100)
    log = show.wrap(term)
    show(_snapshot(1000, 10))
    log.write("ERROR squall: something happened\n")
    assert screen(term.getvalue()) == ["ERROR squall: something happened"]  # block erased
    log.write("half a line")
    show(_snapshot(2000, 20))
    shown = screen(term.getvalue())
    assert shown[:2] == ["ERROR squall: something happened", "half a line"]
    assert len(shown) == 5 and "emitted=20" in shown[3] + shown[4]
    show.close()
    assert screen(term.getvalue()) == ["ERROR squall: something happened", "half a line"]


def test_off_a_terminal_only_what_changed_is_printed():
    out = io.StringIO()
    show = ProgressDisplay(out)
    assert not show.live and show.wrap(out) is out
    show(_snapshot(1000, 10))
    assert out.getvalue().count("\n") == 3 and "\x1b" not in out.getvalue()
    show(_snapshot(2000, 10))
    # The rate changed (10/s over the first second, 0 since), so the lines changed once...
    before = out.getvalue()
    show(_snapshot(3000, 10))
    show(_snapshot(4000, 10))
    assert out.getvalue() == before  # ...and an unchanged snapshot prints nothing
    show(_snapshot(5000, 10, status="inactive"))
    assert out.getvalue()[len(before):] == "[    5.0s] inactive\n"  # only the header
    show(_snapshot(6000, 30, status="inactive"))
    added = out.getvalue()[len(before):].splitlines()
    assert [line.split()[0] for line in added[2:]] == ["words", "count"]


def test_the_summary_gives_totals_rates_latencies_and_errors_not_the_last_table():
    snap = _snapshot(4000, 400, timed_out=3)
    text = summary(snap)
    words = next(line for line in text.splitlines() if line.startswith("words"))
    assert words.startswith("words            spout x2  emitted=400 (100/s)  acked=400")
    assert "timed_out=3" in words and "pending=3" in words  # not zero: shown
    assert "complete p50=1.5ms p99=4.0ms" in words
    assert "transferred" not in text
    count = next(line for line in text.splitlines() if line.startswith("count"))
    assert "executed=400 (100/s)" in count and "capacity=0.50" in count
    assert "errors reported: 2; elapsed 4.0s" in text
    assert "  count ValueError: 2; latest: bad 'x'" in text
    show = ProgressDisplay(io.StringIO())
    show(snap)
    table = [show.line(c) for c in snap.components.values()]
    assert not set(table) & set(text.splitlines())
    # A resumed run's counters count its own work (from zero), so its rates hold; the summary
    # says it resumed.
    snap.restarted = True
    resumed = summary(snap)
    assert "emitted=400 (100/s)" in resumed and "no rates" not in resumed
    assert "resumed from a checkpoint: the counters count this run's work only" in resumed


# ---- `squall run` ------------------------------------------------------------------------------
def _input(tmp: Path, files: int = 30, per_file: int = 30) -> int:
    (tmp / "in").mkdir(parents=True)
    for f in range(files):
        (tmp / "in" / f"part-{f:04d}.jsonl").write_text("".join(
            json.dumps({"id": f * per_file + i, "key": f"k{i % 7}"}) + "\n"
            for i in range(per_file)))
    return files * per_file


def _start(tmp: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, STOP_TEST_DIR=str(tmp), SQUALL_RUN_DIR=str(tmp / "run"),
               SQUALL_LOG_DIR=str(tmp / "logs"))
    err = tmp / "stderr"
    proc = subprocess.Popen([*SQUALL, "run", TARGET, *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(err, "w"))  # noqa: SIM115
    return proc, err


def _summary_counters(err: str) -> dict[str, dict[str, int]]:
    out = {}
    for line in err.split("squall: summary\n")[1].splitlines():
        if " spout x" in line or " bolt  x" in line:
            out[line.split()[0]] = {k: int(v) for k, _, v in (p.partition("=")
                                                             for p in line.split())
                                    if v.isdigit()}
    return out


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        return resp.read().decode()


@pytest.mark.runners(spark_session=False)
def test_metrics_json_and_prometheus_while_squall_run_runs(runner, tmp_path):
    records = _input(tmp_path, files=20, per_file=20)
    metrics = tmp_path / "metrics.jsonl"
    spark = ["-c", "spark.master=local[2]"] if runner == "spark" else []
    proc, err_path = _start(tmp_path, "--runner", runner, "--metrics-json", str(metrics),
                            "--metrics-port", "0", "--progress-every", "0.3",
                            "-c", "stop.test.sleep.ms=15", "-c", "squall.spark.batch.max.tuples=60",
                            *spark)
    scrapes = []
    try:
        deadline = time.monotonic() + 300  # a bound for a broken run, not a timed assertion
        url = None
        while url is None:
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            found = re.search(r"Prometheus metrics at (http://\S+)", err_path.read_text())
            url = found.group(1) if found else None
            time.sleep(0.1)
        assert url.startswith("http://127.0.0.1:")  # loopback by default
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                text = _scrape(url)
            except OSError:
                break  # the run ended meanwhile
            if "squall_elapsed_seconds" in text:
                scrapes.append(parse_exposition(text)[0])
            time.sleep(0.2)
        assert proc.wait(timeout=120) == 0, err_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err_path.read_text()

    # The JSON lines: each parses into a snapshot, and they grow.
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(lines) >= 3
    for d in lines:
        assert MetricsSnapshot.from_dict(d).to_dict() == d
    for a, b in itertools.pairwise(lines):
        assert b["elapsed_ms"] >= a["elapsed_ms"]
        for cid, c in a["components"].items():
            for name in ("emitted", "executed", "acked"):
                assert b["components"][cid][name] >= c[name], (cid, name)
    last = lines[-1]["components"]
    assert last["src"]["emitted"] == records and last["slow"]["emitted"] == records
    # The last one is the run's final figures: the summary's.
    for cid, printed in _summary_counters(err).items():
        assert printed == {k: last[cid][k] for k in printed}, cid

    # The scrapes: taken during the run, each the snapshot of one of the JSON lines.
    assert len(scrapes) >= 2
    assert any(0 < total(s, "squall_emitted_total", component="slow") < records
               for s in scrapes), "no scrape mid-run"
    for s in scrapes:
        elapsed = round(total(s, "squall_elapsed_seconds") * 1000)
        same_time = [d for d in lines if d["elapsed_ms"] == elapsed]
        assert same_time, f"no JSON line of the scraped snapshot ({elapsed} ms)"
        assert any(_differences(s, d) == [] for d in same_time), _differences(s, same_time[0])
    for a, b in itertools.pairwise(scrapes):
        for (name, labels), value in a.items():
            if name.endswith("_total") and (name, labels) in b:
                assert b[(name, labels)] >= value, name

    if runner == "spark":  # Spark's start-up noise stays in its log file
        assert len(re.findall(r"squall: Spark UI at http://\S+:\d+", err)) == 1
        ours = "squall: Spark's own output (JVM, Py4J, Python workers) goes to "
        assert ours in err
        rest = "\n".join(line for line in err.splitlines() if not line.startswith(ours))
        for noise in ("incubator", " WARN ", "py4j", "Py4J"):
            assert noise not in rest, noise


def _differences(s: dict, d: dict) -> list:
    """Where the scrape `s` and the JSON line `d` disagree."""
    out = []
    for cid, c in d["components"].items():
        for name in ("emitted", "transferred", "executed", "acked", "failed"):
            if total(s, f"squall_{name}_total", component=cid) != c[name]:
                out.append((cid, name))
        if total(s, "squall_pending", component=cid) != c["pending"]:
            out.append((cid, "pending"))
        if total(s, "squall_tasks", component=cid, kind=c["kind"]) != c["tasks"]:
            out.append((cid, "tasks"))
        for stream, n in c["streams"].items():
            if total(s, "squall_stream_emitted_total", component=cid, stream=stream) != n:
                out.append((cid, stream))
        lat = c["complete_latency"]
        if lat is not None and total(s, "squall_complete_latency_seconds_count",
                                     component=cid) != lat["count"]:
            out.append((cid, "complete_latency"))
    return out


@pytest.mark.spark
def test_verbose_shows_spark_output_on_the_terminal(tmp_path):
    _input(tmp_path, files=2, per_file=10)
    proc, err_path = _start(tmp_path, "--runner", "spark", "--verbose",
                            "-c", "spark.master=local[2]", "--progress-every", "0")
    assert proc.wait(timeout=300) == 0, err_path.read_text()[-3000:]
    err = err_path.read_text()
    # The JVM's own start-up line, which goes to the log file without --verbose.
    assert "Using incubator modules" in err
    assert "goes to" not in err and not (tmp_path / "logs").exists()
    assert len(re.findall(r"squall: Spark UI at http://\S+:\d+", err)) == 1
    assert "src              spout x2  emitted=20" in err.split("squall: summary")[1]


def test_metrics_outputs_that_cannot_be_opened_are_refused_before_running(tmp_path):
    target = "examples/wordcount.py:topology"
    proc = subprocess.run([*SQUALL, "run", target, "--runner", "local", "--metrics-json",
                           str(tmp_path / "missing" / "m.jsonl")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"--metrics-json: the directory {tmp_path / 'missing'} does not exist" in proc.stderr
    assert "squall: running" not in proc.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*SQUALL, "run", target, "--runner", "local", "--metrics-port",
                               str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"--metrics-port: cannot listen on 127.0.0.1 port {port}" in proc.stderr


def test_submit_passes_the_metrics_options_to_the_driver(tmp_path):
    proc = subprocess.run([*SQUALL, "submit", f"{ROOT}/examples/wordcount.py:topology",
                           "--master", "local[2]", "--metrics-json", "m.jsonl",
                           "--metrics-port", "9464", "--metrics-host", "0.0.0.0", "--verbose",
                           "--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.split()
    run = argv[argv.index("run"):]
    assert run[run.index("--metrics-json") + 1] == str(tmp_path / "m.jsonl")
    assert run[run.index("--metrics-port") + 1] == "9464"
    assert run[run.index("--metrics-host") + 1] == "0.0.0.0"
    assert "--verbose" in run


def test_the_control_and_metrics_servers_close_without_waiting_out_a_poll():
    """`squall run` closes its control endpoint (and the Prometheus one) as it exits, often
    just after serving a request (`squall list`, a scrape): closing must not wait out the
    serving loop's poll (half a second by default, paid by every run)."""
    control = ControlServer(lambda: None, name="closing", runner_name="local", checkpoint=None,
                            stop_timeout_s=1.0, on_kill=lambda _wait: None,
                            on_rebalance=lambda _changes, _wait: "")
    metrics = MetricsServer("127.0.0.1", 0, "local")
    for server, url in ((control, f"http://127.0.0.1:{control.port}/"), (metrics, metrics.url)):
        server.start()
        try:
            with contextlib.suppress(urllib.error.HTTPError):  # served: any status will do
                urllib.request.urlopen(url, timeout=30).close()
        finally:
            began = time.monotonic()
            server.close()
            took = time.monotonic() - began
        assert took < 0.25, f"{type(server).__name__}.close() took {took:.2f} s"
