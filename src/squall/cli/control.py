"""The control endpoint of a running `squall run`, and its client (the lifecycle verbs).

A small HTTP server in the driver, bound to 127.0.0.1 on a free port (another address only when
`--control-host` asks for it), answers requests that carry the run's secret token in the
`X-Squall-Token` header:

- `GET /status`: name, runner, status (`active`, `inactive`, `stopping`), uptime, checkpoint,
  pid, and every component's counters line;
- `POST /deactivate`, `POST /activate`: Storm's deactivate/activate of the spouts;
- `POST /kill?wait=SECONDS`: Storm's kill: deactivate the spouts, give the trees in flight up
  to SECONDS to finish (the run's `--stop-timeout` when not given), then stop.
- `POST /rebalance?set=COMPONENT=N&...&wait=SECONDS`: Storm's rebalance: checked first (the
  run has a checkpoint, the components exist, the checkpoint can be resumed with the new
  parallelism), then stopped as by kill and started again on its checkpoint with the new
  parallelism (`squall.cli.run`).

The server only sets requests on the runner (`Runner.deactivate`, `request_stop`, ...); the
run's own loop carries them out on its thread.
"""

from __future__ import annotations

import hmac
import http.client
import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from squall.cli.rundir import RunEntry
from squall.cli.target import TargetError, parse_parallelism
from squall.errors import SquallError
from squall.protocols import Runner

TOKEN_HEADER = "X-Squall-Token"
SHUTDOWN_POLL_S = 0.05  # how often a serving thread checks for its shutdown


class ControlError(Exception):
    pass


class ControlServer:
    """Serves one run's control requests on a daemon thread (see the module doc)."""

    def __init__(self, runner_ref: Callable[[], Runner | None], *, name: str, runner_name: str,
                 checkpoint: str | None, stop_timeout_s: float,
                 on_kill: Callable[[float], None],
                 on_rebalance: Callable[[dict[str, int], float], str] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.token = secrets.token_hex(16)
        self.runner_ref = runner_ref
        self.info = {"name": name, "runner": runner_name, "checkpoint": checkpoint}
        self.started = time.monotonic()
        self.stop_timeout_s = stop_timeout_s
        self.on_kill = on_kill
        self.on_rebalance = on_rebalance
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # requests are not news on the terminal

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def _answer(self, method: str) -> None:
                given = self.headers.get(TOKEN_HEADER) or ""
                if not hmac.compare_digest(given.encode(), server.token.encode()):
                    self._send(403, {"error": "wrong or missing token"})
                    return
                url = urlsplit(self.path)
                try:
                    code, body = server.handle(method, url.path, parse_qs(url.query))
                except SquallError as exc:
                    code, body = 409, {"error": str(exc)}
                self._send(code, body)

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        # `close` waits for serve_forever to notice the shutdown: every 0.05 s, not the
        # default 0.5 s, which every run paid at its exit.
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="squall-control",
                                       kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        if self.thread.is_alive():  # shutdown() waits for serve_forever, which may never have run
            self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, dict]:
        runner = self.runner_ref()
        if method == "GET" and path == "/status":
            body: dict[str, Any] = dict(self.info)
            body["uptime_s"] = round(time.monotonic() - self.started, 1)
            if runner is None:
                body["status"], body["components"] = "starting", []
            else:
                body["status"] = runner.status()
                # The snapshot's counters: a rebalanced run's totals (Reporting.carry).
                body["components"] = [c.line() for c in runner.metrics().components.values()]
            return 200, body
        paths = ("/deactivate", "/activate", "/kill", "/rebalance")
        if method != "POST" or path not in paths or (
                path == "/rebalance" and self.on_rebalance is None):
            return 404, {"error": f"no such request: {method} {path}"}
        if runner is None:
            return 409, {"error": "the topology is still starting; try again in a moment"}
        if path == "/deactivate":
            runner.deactivate()
        elif path == "/activate":
            if runner.status() == "stopping":
                return 409, {"error": "the topology is stopping; it cannot be activated"}
            runner.activate()
        else:
            try:
                wait = float(query["wait"][0]) if "wait" in query else self.stop_timeout_s
            except ValueError:
                return 400, {"error": f"wait must be a number of seconds, got {query['wait'][0]!r}"}
            if wait < 0:
                return 400, {"error": f"wait must be >= 0 seconds, got {wait}"}
            if path == "/kill":
                self.on_kill(wait)
            else:
                if runner.status() == "stopping":
                    return 409, {"error": "the topology is already stopping"}
                try:
                    changes = parse_parallelism(query.get("set", []), "rebalance")
                except TargetError as exc:
                    return 400, {"error": str(exc)}
                if not changes:
                    return 400, {"error": "rebalance needs at least one COMPONENT=N"}
                assert self.on_rebalance is not None  # checked above
                message = self.on_rebalance(changes, wait)  # raises SquallError: 409
                return 200, {"status": runner.status(), "message": message}
        return 200, {"status": runner.status()}


def request(entry: RunEntry, method: str, path: str, timeout_s: float = 10.0) -> dict:
    """Send one control request to the run `entry` describes; its JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", entry.port, timeout=timeout_s)
    try:
        conn.request(method, path, headers={TOKEN_HEADER: entry.token})
        resp = conn.getresponse()
        body = json.loads(resp.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ControlError(f"topology {entry.name!r} (pid {entry.pid}) does not answer on its "
                           f"control port {entry.port}: {exc}") from exc
    finally:
        conn.close()
    if resp.status != 200:
        raise ControlError(f"topology {entry.name!r}: {body.get('error', resp.reason)}")
    return body
