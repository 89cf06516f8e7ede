"""The web UI's server: a small HTTP server in the driver process (`squall run --ui`).

Bound to 127.0.0.1 on a free port unless told otherwise, on a daemon thread, it serves:

- `/` (and `/index.html`, `/app.js`, `/style.css`): the page, plain files shipped with the
  package (`squall/ui/static`), nothing to build and nothing fetched from elsewhere;
- `GET /api/topology`: the topology's picture as data: every component and subscription
  (`squall.visualize.graph`), their places (`squall.visualize.layout`) and each component's
  task ids;
- `GET /api/metrics`: the run's name, runner and status (`starting` before the runner exists,
  then the runner's, `finished` once the run is over), the latest `MetricsSnapshot.to_dict()`,
  rates per component, stream and task (`squall.ui.rates`), the Spark UI's address when there
  is one, and a `topology_version` that changes when a rebalance starts the run on a new
  topology (the page then asks for `/api/topology` again).

The API answers only requests carrying the run's token (header `X-Squall-Token`, or `token=`
in the query), which the address printed at start holds; the page reads it from its own
address. Everything is read-only: any other method gets 405. Why a token on a read-only page,
and the other choices, are in docs/design/web-ui.md.

The runner is sampled when a page asks (at most every `SAMPLE_INTERVAL_S`, shared by every
page), so nothing is computed while nobody watches.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from squall.protocols import Runner
from squall.topology.description import Topology
from squall.ui.rates import Rates
from squall.visualize.graph import topology_graph
from squall.visualize.layout import layout

TOKEN_HEADER = "X-Squall-Token"
SAMPLE_INTERVAL_S = 0.25  # pages asking more often than this share one snapshot
WATCHING_S = 5.0  # a page that asked this recently is watching (see `close`)
# Rates are measured over this many seconds: the local runner's counters move continuously,
# Spark's once per micro-batch (a second or more apart), which a short window would show as
# bursts and zeros.
RATE_WINDOW_S = {"local": 3.0, "spark": 10.0}
STATIC = {  # path -> (file under squall/ui/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
# The page runs only its own script and talks only to this server, so text that slipped
# through as markup still could not run or load anything.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the address holds the token
    "Cache-Control": "no-store",
}


def topology_document(topology: Topology) -> dict[str, Any]:
    """What `/api/topology` answers for `topology`: nodes, edges, layout, task ids.

    >>> from squall import BasicBolt, Fields, TopologyBuilder
    >>> from squall.testing import FixedTupleSpout
    >>> class Count(BasicBolt):
    ...     def execute(self, tup, collector): pass
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("words", FixedTupleSpout([], Fields("word")))
    >>> _ = b.set_bolt("count", Count(), parallelism=2).fields_grouping("words", Fields("word"))
    >>> doc = topology_document(b.create_topology())
    >>> [(n["id"], n["kind"], n["tasks"], n["task_ids"]) for n in doc["nodes"]]
    [('words', 'spout', 1, [3]), ('count', 'bolt', 2, [1, 2])]
    >>> [(e["source"], e["stream"], e["target"], e["label"]) for e in doc["edges"]]
    [('words', 'default', 'count', 'fields(word)')]
    >>> sorted(doc["layout"])
    ['edges', 'height', 'nodes', 'width']
    """
    graph = topology_graph(topology)
    return {
        "nodes": [{"id": n.id, "kind": n.kind, "role": n.role, "class_name": n.class_name,
                   "tasks": n.tasks, "summary": n.summary,
                   "task_ids": list(topology.component_tasks(n.id)),
                   "streams": [{"name": s.name, "fields": list(s.fields), "direct": s.direct}
                               for s in n.streams]}
                  for n in graph.nodes],
        "edges": [{"source": e.source, "stream": e.stream, "target": e.target,
                   "grouping": e.grouping, "label": e.label, "framework": e.framework}
                  for e in graph.edges],
        "layout": layout(graph).to_dict(),
    }


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity replaced by None (JSON has neither).

    >>> finite({"a": [1.5, float("nan")], "b": float("inf")})
    {'a': [1.5, None], 'b': None}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def url_host(host: str) -> str:
    """The host part of an address to open for a server bound to `host`.

    >>> url_host("127.0.0.1"), url_host("0.0.0.0"), url_host("::1"), url_host("")
    ('127.0.0.1', '127.0.0.1', '[::1]', '127.0.0.1')
    """
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class UiServer:
    """Serves one run's web UI on a daemon thread (see the module doc).

    `runner_ref` gives the current runner (None while one starts), `topology_ref` the topology
    it runs, and `spark_ui_of` a runner's Spark UI address (None when it has none); each is
    asked from the server's threads.
    """

    def __init__(self, runner_ref: Callable[[], Runner | None],
                 topology_ref: Callable[[], Topology], *, name: str, runner_name: str,
                 host: str = "127.0.0.1", port: int = 0,
                 spark_ui_of: Callable[[Runner], str | None] | None = None) -> None:
        self.token = secrets.token_urlsafe(16)
        self.runner_ref = runner_ref
        self.topology_ref = topology_ref
        self.spark_ui_of = spark_ui_of
        self.info = {"name": name, "runner": runner_name}
        self._lock = threading.Lock()
        self._rates = Rates(RATE_WINDOW_S.get(runner_name, 3.0))
        self._sampled: tuple[Runner, float, dict[str, Any]] | None = None  # runner, when, doc
        self._spark_ui: tuple[Runner, str | None] | None = None
        self._topology: tuple[Topology, int, dict[str, Any]] | None = None
        self._final: dict[str, Any] | None = None
        self._finished = False
        self._last_request = -math.inf  # when a page last asked for metrics (monotonic)
        self._seen_finished = threading.Event()  # a page asked after the run finished
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # requests are not news on the terminal

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path in STATIC:
                    file, content_type = STATIC[url.path]
                    self._send(200, static_file(file), content_type)
                    return
                if url.path not in ("/api/topology", "/api/metrics"):
                    self._json(404, {"error": f"no such page: {url.path}"})
                    return
                given = self.headers.get(TOKEN_HEADER) or parse_qs(url.query).get(
                    "token", [""])[0]
                if not hmac.compare_digest(given.encode(), server.token.encode()):
                    self._json(403, {"error": "wrong or missing token: open the address "
                                              "`squall run --ui` printed"})
                    return
                if url.path == "/api/topology":
                    self._json(200, server.topology_answer())
                else:
                    answer = server.metrics_answer()
                    self._json(200, answer)
                    if answer["finished"]:
                        # Only now, with the whole answer written: `close` waits for this, and
                        # the process may exit (killing this daemon thread) right after it.
                        server._seen_finished.set()

            def _not_allowed(self) -> None:
                self._json(405, {"error": "the web UI is read-only"}, {"Allow": "GET"})

            do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

            def _json(self, code: int, body: dict[str, Any],
                      headers: dict[str, str] | None = None) -> None:
                data = json.dumps(finite(body), allow_nan=False).encode()
                self._send(code, data, "application/json", headers)

            def _send(self, code: int, data: bytes, content_type: str,
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for key, value in {**SECURITY_HEADERS, **(headers or {})}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            self.httpd = Server((host, port), Handler)
        except OSError as exc:
            raise OSError(f"the web UI cannot listen on {url_host(host)}:{port}: "
                          f"{exc.strerror or exc}") from exc
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="squall-ui",
                                       daemon=True)

    @property
    def url(self) -> str:
        """The page's address, with the token."""
        return f"http://{url_host(self.host)}:{self.port}/?token={self.token}"

    def start(self) -> UiServer:
        self.thread.start()
        return self

    def finish(self) -> None:
        """The run is over: answer its final figures, with status `finished`, from now on."""
        runner = self.runner_ref()
        final = runner.metrics().to_dict() if runner is not None else None
        with self._lock:
            if final is None and self._sampled is not None:
                final = self._sampled[2]
            self._final, self._finished = final, True

    def close(self, linger_s: float = 2.0) -> None:
        """Stop serving. After `finish`, a page that was watching may first ask once more (at
        most `linger_s` seconds), so it shows the final figures and `finished`."""
        if (self._finished and self.thread.is_alive()
                and time.monotonic() - self._last_request < WATCHING_S):
            self._seen_finished.wait(linger_s)
        if self.thread.is_alive():  # shutdown() waits for serve_forever, which may never have run
            self.httpd.shutdown()
        self.httpd.server_close()

    def topology_answer(self) -> dict[str, Any]:
        _, version, doc = self._current_topology()
        return {**self.info, "topology_version": version, **doc}

    def metrics_answer(self) -> dict[str, Any]:
        runner = self.runner_ref()
        _, version, _ = self._current_topology()
        with self._lock:
            self._last_request = time.monotonic()
            if self._finished:
                status, snapshot, rates = "finished", self._final, None
            elif runner is None:
                status, snapshot, rates = "starting", None, None
            else:
                snapshot = self._sample(runner)
                status, rates = snapshot["status"], self._rates.current()
            spark_ui = self._spark_ui[1] if self._spark_ui else None
            if runner is not None and not self._finished and (
                    self._spark_ui is None or self._spark_ui[0] is not runner):
                spark_ui = self._ask_spark_ui(runner)
        return {**self.info, "status": status, "finished": self._finished,
                "topology_version": version, "spark_ui": spark_ui, "metrics": snapshot,
                "rates": rates}

    def _sample(self, runner: Runner) -> dict[str, Any]:
        """The runner's snapshot document, sampled at most every `SAMPLE_INTERVAL_S`."""
        now = time.monotonic()
        if self._sampled is not None and self._sampled[0] is runner and (
                now - self._sampled[1] < SAMPLE_INTERVAL_S):
            return self._sampled[2]
        if self._sampled is not None and self._sampled[0] is not runner:
            self._rates.clear()  # a new run (a rebalance)
        doc = runner.metrics().to_dict()
        self._rates.add(doc)
        self._sampled = (runner, now, doc)
        return doc

    def _ask_spark_ui(self, runner: Runner) -> str | None:
        url = None
        if self.spark_ui_of is not None:
            try:
                url = self.spark_ui_of(runner)
            except Exception:  # the link is a convenience: no answer is no link
                url = None
        if url is not None and not url.startswith(("http://", "https://")):
            url = None
        self._spark_ui = (runner, url)
        return url

    def _current_topology(self) -> tuple[Topology, int, dict[str, Any]]:
        topology = self.topology_ref()
        with self._lock:
            if self._topology is None or self._topology[0] is not topology:
                version = 1 if self._topology is None else self._topology[1] + 1
                self._topology = (topology, version, topology_document(topology))
            return self._topology


def static_file(name: str) -> bytes:
    """A file of the page, from the package's `static` folder."""
    package = __name__.rsplit(".", 1)[0]  # squall.ui
    return resources.files(package).joinpath("static", name).read_bytes()


__all__ = ["TOKEN_HEADER", "UiServer", "finite", "static_file", "topology_document", "url_host"]
