"""A headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium is Debian's `chromium` package (`scripts/bootstrap.sh` installs it). It is started with
`--remote-debugging-pipe`: the protocol's JSON messages, each ended by a NUL byte, go in on its
file descriptor 3 and come out on 4, so nothing listens on a port and no client library or
browser download is needed. Used by tests/integration/test_ui.py and scripts/ui_screenshot.py::

    with Chromium() as browser:
        page = browser.open("http://127.0.0.1:8000/", width=1200, height=800)
        page.wait_for("document.querySelectorAll('svg g.node').length > 0")
        page.screenshot("shot.png")

The browser runs in its own process group, which `close` ends (by its id) if the browser does
not exit when asked.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser")


class ChromiumError(Exception):
    pass


def find_chromium() -> str:
    """The browser's path, or an error that says how to install it."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumError("Chromium is not installed: run `bash scripts/bootstrap.sh` (it installs "
                        "Debian's chromium package) or `apt-get install chromium`")


class Chromium:
    """One headless browser process (see the module doc)."""

    def __init__(self, executable: str | None = None, timeout_s: float = 20.0) -> None:
        self.executable = executable or find_chromium()
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="squall-chromium-")
        self._next_id = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()
        # The browser wants the pipes as its descriptors 3 and 4; bash puts them there (its
        # redirections take numbers above 9, which ours are moved to).
        child_in = fcntl.fcntl(commands_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(answers_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(commands_r)
        os.close(answers_w)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                 f"--user-data-dir={self.profile}", "--no-first-run",
                 "--no-default-browser-check", "--disable-extensions",
                 "--disable-background-networking", "--disable-component-update",
                 "--hide-scrollbars", "--mute-audio", "about:blank"]
        redirect = f'exec "$0" "$@" 3<&{child_in} 4>&{child_out} {child_in}<&- {child_out}>&-'
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        try:
            self.process = subprocess.Popen(
                ["bash", "-c", redirect, self.executable, *flags],
                pass_fds=(child_in, child_out), stdin=subprocess.DEVNULL, stdout=self.log,
                stderr=self.log, start_new_session=True)
        finally:
            os.close(child_in)
            os.close(child_out)
        self._commands = commands_w
        self._answers = os.fdopen(answers_r, "rb", buffering=0)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        """Send one command; its result (events that arrive meanwhile go to `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise ChromiumError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._answers], [], [], remaining)[0]:
                raise ChromiumError(f"no answer from Chromium in {self.timeout_s:g} s"
                                    f"{self._log_tail()}")
            chunk = self._answers.read(1 << 16)
            if not chunk:
                raise ChromiumError(f"Chromium exited{self._log_tail()}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def _log_tail(self) -> str:
        self.log.seek(0)
        lines = [line for line in self.log.read().decode(errors="replace").splitlines()
                 if "dbus" not in line.lower()]
        return (": " + " | ".join(lines[-5:])) if lines else ""

    def open(self, url: str, width: int = 1200, height: int = 800) -> Page:
        """A new tab of `width` x `height` CSS pixels showing `url`."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        page.send("Page.navigate", {"url": url})
        return page

    def close(self) -> None:
        """Ask the browser to exit; end its process group if it has not within 5 s."""
        with contextlib.suppress(Exception):
            self.timeout_s = 5.0
            self.send("Browser.close")
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        with contextlib.suppress(OSError):
            os.close(self._commands)
        self._answers.close()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """A tab: evaluate JavaScript in it, wait for a condition, take a screenshot."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values)."""
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise ChromiumError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 10.0) -> Any:
        """Poll until `expression` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(ChromiumError):  # e.g. while the page is loading
                value = self.evaluate(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                raise ChromiumError(f"still false after {timeout_s:g} s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: str | Path) -> bytes:
        """Save a PNG of the visible page to `path`; its bytes."""
        data = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return data

    def console_errors(self) -> list[str]:
        """Exceptions thrown in the page and messages logged as errors, so far."""
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(str(details.get("exception", {}).get("description")
                               or details.get("text")))
            elif (event.get("method") == "Runtime.consoleAPICalled"
                  and params.get("type") == "error"):
                out.append(" ".join(str(a.get("value", a.get("description")))
                                    for a in params.get("args", [])))
        return out
