"""The live web UI (`squall run --ui`): its HTTP API on a running topology, and its page in a
real headless Chromium (tests/support/headless_chromium.py), which must be installed: CI's
`scripts/bootstrap.sh` installs Debian's chromium package, and without it these tests fail
saying so. The page's screenshot is saved under test-artifacts/ (not committed)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.headless_chromium import Chromium, ChromiumError, Page, find_chromium

from squall import Bolt, Fields, Spout, TopologyBuilder, Values
from squall.protocols import Runner
from squall.runners import make_runner
from squall.topology.description import Topology
from squall.ui import TOKEN_HEADER, UiServer
from squall.ui.server import static_file

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SQUALL = [sys.executable, "-m", "squall.cli.main"]

# Text that would run script if the page put it in as markup.
NASTY_ID = '<img src=x onerror="window.pwned=1">'
NASTY_BOLT = "<script>window.pwned=2</script>"
NASTY_ERROR = '<img src=y onerror="window.pwned=3"><script>window.pwned=4</script> & "quotes"'


class Ticks(Spout):
    """An endless, paced spout: about 500 tuples a second per task."""

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.n = 0

    def next_tuple(self) -> None:
        time.sleep(0.002)
        self.n += 1
        self.collector.emit(Values(self.n), msg_id=self.n)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("n"))


class Pass(Bolt):
    """Passes every tuple on; reports an error (NASTY_ERROR) on every 100th when asked to."""

    def __init__(self, noisy: bool = False) -> None:
        self.noisy = noisy

    def execute(self, tup) -> None:
        if self.noisy and tup[0] % 100 == 1:
            self.collector.report_error(ValueError(NASTY_ERROR))
        self.collector.emit(Values(tup[0]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("n"))


def plain_topology() -> Topology:
    b = TopologyBuilder()
    b.set_spout("ticks", Ticks(), parallelism=2)
    b.set_bolt("double", Pass(), parallelism=2).shuffle_grouping("ticks")
    b.set_bolt("sink", Pass()).global_grouping("double")
    return b.create_topology()


def nasty_topology() -> Topology:
    b = TopologyBuilder()
    b.set_spout(NASTY_ID, Ticks())
    b.set_bolt(NASTY_BOLT, Pass(noisy=True)).shuffle_grouping(NASTY_ID)
    return b.create_topology()


@contextlib.contextmanager
def running(topology: Topology) -> Iterator[Runner]:
    """`topology` running on the local runner (real time) on a thread, until the block ends."""
    runner = make_runner(topology, {"topology.max.spout.pending": 50}, runner="local")
    thread = threading.Thread(target=lambda: runner.run(until_complete=False), daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        runner.request_stop(0)
        thread.join(15)
        assert not thread.is_alive(), "the topology did not stop"


@contextlib.contextmanager
def ui_for(runner: Runner, name: str = "test") -> Iterator[UiServer]:
    server = UiServer(lambda: runner, lambda: runner.topology, name=name,
                      runner_name="local").start()
    try:
        yield server
    finally:
        server.close(linger_s=0)


def get(server: UiServer, path: str, token: str | None = "header",
        method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", method=method)
    if token == "header":
        request.add_header(TOKEN_HEADER, server.token)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def get_json(server: UiServer, path: str) -> dict[str, Any]:
    status, _, body = get(server, path)
    assert status == 200, body
    return json.loads(body)


def wait_until(condition, timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- the API ------------------------------------------------------------------------------------


def test_api_answers_the_topology_and_live_metrics_consistent_with_the_runner():
    topology = plain_topology()
    with running(topology) as runner, ui_for(runner, "plain") as server:
        doc = get_json(server, "/api/topology")
        assert doc["name"] == "plain" and doc["runner"] == "local"
        assert [n["id"] for n in doc["nodes"]] == ["ticks", "double", "sink"]
        assert [n["tasks"] for n in doc["nodes"]] == [2, 2, 1]
        assert sorted(t for n in doc["nodes"] for t in n["task_ids"]) == [1, 2, 3, 4, 5]
        assert [(e["source"], e["stream"], e["target"], e["grouping"]) for e in doc["edges"]] == [
            ("ticks", "default", "double", "shuffle"), ("double", "default", "sink", "global")]
        assert {n["id"] for n in doc["layout"]["nodes"]} == {"ticks", "double", "sink"}
        assert all(e["d"].startswith("M ") for e in doc["layout"]["edges"])

        first = wait_until(lambda: _emitted(get_json(server, "/api/metrics"), "ticks") > 20,
                           what="the spout to emit")
        time.sleep(0.6)
        answer = get_json(server, "/api/metrics")
        assert answer["status"] == "active" and answer["finished"] is False
        assert answer["spark_ui"] is None and answer["topology_version"] == doc["topology_version"]
        assert _emitted(answer, "ticks") > first
        after = runner.metrics().to_dict()  # the runner's own figures, taken after the answer's
        for cid, figures in answer["metrics"]["components"].items():
            for counter in ("emitted", "executed", "acked"):
                assert figures[counter] <= after["components"][cid][counter]
        ticks_tasks = [str(t) for t in topology.component_tasks("ticks")]
        assert sorted(answer["metrics"]["components"]["ticks"]["per_task"]) == ticks_tasks
        rates = answer["rates"]
        assert rates["window_s"] > 0
        assert rates["components"]["ticks"]["emitted"] > 0
        assert rates["streams"]["ticks"]["default"] == rates["components"]["ticks"]["emitted"]
        assert rates["tasks"][ticks_tasks[0]]["emitted"] > 0

        runner.request_stop(0)
        wait_until(lambda: runner.status() == "stopping", what="the stop")
        time.sleep(0.3)
        server.finish()
        final = get_json(server, "/api/metrics")
        assert final["status"] == "finished" and final["finished"] is True
        assert final["rates"] is None
        now = runner.metrics().to_dict()
        for cid, figures in final["metrics"]["components"].items():
            for counter in ("emitted", "executed", "acked", "failed"):
                assert figures[counter] == now["components"][cid][counter], (cid, counter)
            for task, t in figures["per_task"].items():
                assert t["emitted"] == now["components"][cid]["per_task"][task]["emitted"]


def _emitted(answer: dict[str, Any], component: str) -> int:
    metrics = answer.get("metrics") or {}
    return (metrics.get("components") or {}).get(component, {}).get("emitted", 0)


def test_api_needs_the_token_serves_only_its_pages_and_is_read_only():
    topology = plain_topology()
    runner = make_runner(topology, {}, runner="local")  # never run: "active", zero counters
    with ui_for(runner) as server:
        assert get(server, "/api/metrics", token=None)[0] == 403
        assert get(server, "/api/topology", token=None)[0] == 403
        status, _, body = get(server, f"/api/metrics?token={server.token}x", token=None)
        assert status == 403 and b"token" in body
        status, _, body = get(server, f"/api/metrics?token={server.token}", token=None)
        assert status == 200 and json.loads(body)["status"] == "active"
        for path in ("/nope", "/api/nope", "/api/", "/static/../server.py", "/../rates.py",
                     "/app.js/../server.py", "/favicon.ico"):
            status, headers, body = get(server, path)
            assert status == 404, path
            assert headers["Content-Type"] == "application/json"
        for method in ("POST", "PUT", "DELETE"):
            status, headers, _ = get(server, "/api/metrics", method=method)
            assert status == 405 and headers["Allow"] == "GET"
        status, headers, body = get(server, "/", token=None)  # the page itself has no data
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["Referrer-Policy"] == "no-referrer"
        assert server.url == f"http://127.0.0.1:{server.port}/?token={server.token}"


def test_the_page_needs_nothing_from_elsewhere():
    """No CDN, no build: three plain files shipped with the package, loading only each other."""
    page = static_file("index.html").decode()
    assert re.findall(r'(?:src|href)="([^"]+)"', page) == ["style.css", "app.js"]
    for name in ("index.html", "app.js", "style.css"):
        text = static_file(name).decode()
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text
        assert "document.write" not in text and "eval(" not in text


def test_a_restarted_run_starts_its_rates_again():
    from squall.ui.rates import Rates

    rates = Rates()
    rates.add({"elapsed_ms": 1000, "components": {"a": {"emitted": 50}}})
    rates.add({"elapsed_ms": 2000, "components": {"a": {"emitted": 100}}})
    assert rates.current()["components"]["a"]["emitted"] == 50.0
    rates.add({"elapsed_ms": 3000, "components": {"a": {"emitted": 10}}})  # counters went down
    assert rates.current() is None


# ---- the page in a real browser ---------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    try:
        find_chromium()
    except ChromiumError as exc:
        pytest.fail(str(exc))  # CI installs it (scripts/bootstrap.sh): never skip silently
    with Chromium() as chromium:
        yield chromium


def _count(page: Page, metric: str) -> float:
    value = page.evaluate(f"(document.querySelector('td[data-metric=\"{metric}\"]') || "
                          "{dataset: {}}).dataset.value")
    return float(value) if value is not None else -1.0


def test_page_draws_the_topology_and_its_numbers_move(browser):
    topology = plain_topology()
    with running(topology) as runner, ui_for(runner, "plain") as server:
        page = browser.open(server.url, width=1200, height=800)
        ids = page.wait_for("(() => { const ids = [...document.querySelectorAll("
                            "'#graph svg g.node')].map(g => g.dataset.id);"
                            " return ids.length ? ids : null; })()")
        assert ids == ["ticks", "double", "sink"]
        edges = page.evaluate("[...document.querySelectorAll('#graph svg g.edge')].map("
                              "g => [g.dataset.source, g.dataset.target, "
                              "g.querySelector('path').getAttribute('d').slice(0, 2)])")
        assert edges == [["ticks", "double", "M "], ["double", "sink", "M "]]
        page.wait_for("document.querySelector('td[data-metric=\"ticks.emitted\"]') !== null")
        first = {m: _count(page, m) for m in ("ticks.emitted", "double.executed")}
        # Two observations a second and a half apart, in the same page: the counts went up.
        time.sleep(1.5)
        page.wait_for(f"Number(document.querySelector('td[data-metric=\"ticks.emitted\"]')"
                      f".dataset.value) > {first['ticks.emitted']}", timeout_s=5)
        assert _count(page, "double.executed") > first["double.executed"]
        # Rates are on the edges and the badges once two samples exist.
        page.wait_for("document.querySelector('#graph g.edge[data-source=\"ticks\"]')"
                      ".dataset.rate > 0", timeout_s=5)
        rate_text = page.evaluate("document.querySelector('#graph g.edge text.rate').textContent")
        assert rate_text.endswith("/s")
        assert page.evaluate("document.getElementById('status').textContent") == "active"
        page.screenshot(ARTIFACTS / "ui.png")
        # The tasks of a component clicked in the picture.
        page.evaluate("document.querySelector('#graph g.node[data-id=\"double\"]')"
                      ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        tasks = page.wait_for("(() => { const t = document.getElementById('tasks-title');"
                              " return t.textContent === 'Tasks of double' && [...document"
                              ".querySelectorAll('#tasks tbody tr')].map(r => r.dataset.key); })()")
        assert tasks == [str(t) for t in topology.component_tasks("double")]

        runner.request_stop(0)
        server.finish()
        page.wait_for("document.getElementById('status').textContent === 'finished'")
        assert "finished" in page.evaluate("document.getElementById('notice').textContent")
        server.close(linger_s=0)
        page.wait_for("document.getElementById('status').textContent === 'disconnected'")
        notice = page.evaluate("document.getElementById('notice').textContent")
        assert "exited" in notice and "final figures" in notice
        # The last figures stay on the page.
        assert _count(page, "ticks.emitted") > first["ticks.emitted"]
        assert page.console_errors() == []


def test_page_shows_text_from_the_topology_as_text(browser):
    """Component ids and error messages holding markup are shown as they are, never run."""
    with running(nasty_topology()) as runner, ui_for(runner) as server:
        page = browser.open(server.url, width=1000, height=700)
        page.wait_for("document.querySelectorAll('#graph svg g.node').length === 2")
        page.wait_for("document.querySelector('#errors td.message') !== null")
        ids = page.evaluate("[...document.querySelectorAll('#graph svg g.node')]"
                            ".map(g => g.querySelector('text.id').textContent)")
        assert ids == [NASTY_ID, NASTY_BOLT]
        assert page.evaluate("document.querySelector('#errors td.message').textContent") \
            == NASTY_ERROR
        badges = page.evaluate("[...document.querySelectorAll('#graph svg g.node g.errors')]"
                               ".map(g => g.getAttribute('visibility'))")
        assert badges == ["hidden", "visible"]  # the bolt's errors, counted on its box
        rows = page.evaluate("[...document.querySelectorAll('#spouts tbody td.id, "
                             "#bolts tbody td.id')].map(td => td.textContent)")
        assert rows == [NASTY_ID, NASTY_BOLT]
        time.sleep(1.2)  # another refresh or two
        assert page.evaluate("window.pwned === undefined")
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert page.evaluate("document.querySelectorAll('script').length") == 1  # app.js
        assert page.console_errors() == []


# ---- squall run --ui --------------------------------------------------------------------------


@contextlib.contextmanager
def squall_run_ui(*args: str) -> Iterator[tuple[subprocess.Popen[str], urllib.request.Request]]:
    """`squall run ... --ui` in a subprocess, and a request for its `/api/metrics`, made from
    the address it printed."""
    proc = subprocess.Popen([*SQUALL, "run", *args, "--ui", "--progress-every", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            match = re.match(r"squall: web UI at http://127\.0\.0\.1:(\d+)/\?token=(\S+)$",
                             line.strip())
            if match:
                break
        else:
            raise AssertionError(f"no address printed; exit {proc.wait()}")
        port, token = match.groups()
        yield proc, urllib.request.Request(f"http://127.0.0.1:{port}/api/metrics",
                                           headers={TOKEN_HEADER: token})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _answer(request: urllib.request.Request) -> dict[str, Any] | None:
    """The run's metrics answer, or None once squall has gone."""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError):
        return None


def test_squall_run_ui_prints_the_address_and_serves_the_run():
    with squall_run_ui("examples/wordcount.py:topology", "--runner", "local", "--duration", "4",
                       "-c", "wordcount.sentences=1000000") as (proc, request):
        answer = wait_until(lambda: (a := _answer(request)) and a["metrics"] and a,
                            what="an active run")
        assert answer["name"] == "wordcount.topology" and answer["runner"] == "local"
        assert answer["status"] == "active" and answer["spark_ui"] is None
        assert set(answer["metrics"]["components"]) == {"sentences", "split", "count", "report"}
        rest = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0, rest


@pytest.mark.spark
def test_squall_run_ui_on_spark_links_the_spark_ui_and_shows_batches():
    answers = []
    with squall_run_ui("examples/wordcount.py:topology",
                       "-c", "wordcount.sentences=300") as (proc, request):
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            answer = _answer(request)
            if answer is not None:
                answers.append(answer)
            time.sleep(0.5)
        rest = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0, rest
    statuses = [a["status"] for a in answers]
    assert statuses[0] == "starting" and "active" in statuses, statuses
    links = {a["spark_ui"] for a in answers if a["status"] == "active"}
    assert len(links) == 1 and re.match(r"http://[^/]+:\d+$", links.pop()), links
    last = answers[-1]  # squall waited for this page's last look before it exited
    assert last["status"] == "finished" and last["metrics"]["runner"] == "spark"
    assert last["metrics"]["batches"]
    assert last["metrics"]["components"]["sentences"]["acked"] == 300


# A process that serves the UI for a finished run, answers slowly (as under load: every JSON
# answer takes a second to encode), and exits the moment `close` returns, as `squall run` does.
_SLOW_SERVER = """
import json, os, sys, time
from squall import Bolt, Fields, Spout, TopologyBuilder
from squall.ui import UiServer

class S(Spout):
    def next_tuple(self): pass
    def declare_output_fields(self, d): d.declare(Fields("n"))

class B(Bolt):
    def execute(self, t): pass

b = TopologyBuilder()
b.set_spout("s", S())
b.set_bolt("b", B()).shuffle_grouping("s")
topology = b.create_topology()
dumps = json.dumps
json.dumps = lambda *a, **k: (time.sleep(1.0), dumps(*a, **k))[1]
server = UiServer(lambda: None, lambda: topology, name="t", runner_name="local").start()
print(server.port, server.token, flush=True)
sys.stdin.readline()
server.finish()
print("finished", flush=True)
server.close(linger_s=10)
os._exit(0)
"""


def test_the_last_answer_is_written_whole_before_squall_exits():
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SERVER], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        port, token = proc.stdout.readline().split()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/metrics",
                                         headers={TOKEN_HEADER: token})
        assert _answer(request)["status"] == "starting"  # a page is watching
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "finished"
        # `close` waits for this answer to be written, not merely computed.
        with urllib.request.urlopen(request, timeout=10) as response:
            last = json.loads(response.read())
        assert last["status"] == "finished" and last["finished"] is True
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_squall_run_ui_port_in_use_is_refused_in_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [*SQUALL, "run", "examples/wordcount.py:topology", "--runner", "local", "--ui",
             "--ui-port", str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"squall run: the web UI cannot listen on 127.0.0.1:{port}" in proc.stderr
