"""Processes the suite starts, and the check that none of them outlives its test or the run.

Every process the suite starts carries two environment variables, inherited from the pytest
process that started it (directly, or through a JVM, a shell or a daemon):

- `SQUALL_TEST_SUITE`: one value per pytest run, set when the run is configured. After the
  last test the run waits for every process carrying it to exit, kills the ones that do not,
  and fails (`leftovers`, used by `tests/conftest.py`).
- `SQUALL_TEST_OWNER`: the test id while a test's own code and function fixtures run,
  `fixture` while module and session fixtures are set up. After each test, a process owned by
  it that is still alive is killed with its process group and the test fails.

`spawn` starts a process in a session (process group) of its own, so that one signal reaches it
and everything it starts (a Spark driver's JVM and Python workers); `stop` ends that group by
its id. `running` brackets both::

    with running([sys.executable, "-c", "import time; time.sleep(60)"]) as proc:
        ...                      # the process group is SIGKILLed on leaving, whatever happened
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUITE = "SQUALL_TEST_SUITE"
OWNER = "SQUALL_TEST_OWNER"
FIXTURE_OWNER = "fixture"


@dataclass(frozen=True)
class Found:
    """A live process of the suite: its pid, process group, owner and command line."""

    pid: int
    pgid: int
    owner: str
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (group {self.pgid}, owner {self.owner}): {self.cmdline[:200]}"


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (SUITE.encode(), OWNER.encode()):
            out[key.decode()] = value.decode(errors="replace")
    return out


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid, or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _descends(pid: int, roots: set[int]) -> bool:
    """Whether `pid` is one of `roots` or a descendant of one."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid in roots:
            return True
        stat = _stat(pid)
        if stat is None:
            return False
        pid, seen = stat[1], seen + 1
    return False


def suite_processes(suite: str, owner: str | None = None,
                    spare: set[int] | None = None) -> list[Found]:
    """The live processes carrying this run's `suite` tag (and `owner`, if given), but this one
    and the trees of the processes in `spare`."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        env = _environ(pid)
        if env.get(SUITE) != suite or (owner is not None and env.get(OWNER) != owner):
            continue
        stat = _stat(pid)
        if stat is None or stat[0] == "Z":  # gone, or a zombie waiting to be reaped
            continue
        if spare and _descends(pid, spare):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
            pgid = os.getpgid(pid)
        except OSError:
            continue
        found.append(Found(pid, pgid, env.get(OWNER, ""), cmdline))
    return found


def kill_all(found: Sequence[Found]) -> None:
    """SIGKILL each process and, when it leads one, its process group; reap our own children."""
    for f in found:
        with contextlib.suppress(OSError):
            if f.pgid == f.pid:
                os.killpg(f.pgid, signal.SIGKILL)
            os.kill(f.pid, signal.SIGKILL)
    for f in found:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(f.pid, os.WNOHANG)


def wait_gone(suite: str, timeout_s: float, owner: str | None = None,
              spare: set[int] | None = None) -> list[Found]:
    """The processes still alive after waiting up to `timeout_s` for them to exit."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = suite_processes(suite, owner, spare)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


@contextlib.contextmanager
def owned_by_fixture() -> Iterator[None]:
    """Processes started in the block belong to the fixtures, not to the running test: a
    module's server that a test restarts is still the fixture's, which stops it."""
    saved = os.environ.get(OWNER)
    os.environ[OWNER] = FIXTURE_OWNER
    try:
        yield
    finally:
        if saved is not None:
            os.environ[OWNER] = saved


def spawn(args: Sequence[str], **popen: Any) -> subprocess.Popen:
    """`subprocess.Popen(args)` in a new session: the process leads a group of its own."""
    popen.setdefault("start_new_session", True)
    return subprocess.Popen(list(args), **popen)


def stop(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 30.0) -> int | None:
    """Send `sig` to `proc`'s process group (or to `proc` if it leads none), then reap it.

    Returns its exit code, or None if it is still running after `wait_s` of a signal other than
    SIGKILL."""
    if proc.poll() is None:
        try:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        if sig == signal.SIGKILL:
            raise
        return None


def stop_group(proc: subprocess.Popen) -> None:
    """Whatever `proc` left in its process group (a JVM, workers) is SIGKILLed too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


@contextlib.contextmanager
def running(args: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """`spawn(args)`, and its whole process group SIGKILLed when the block ends."""
    proc = spawn(args, **popen)
    try:
        yield proc
    finally:
        stop_group(proc)
