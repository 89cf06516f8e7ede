"""The run directory: one file per topology running under `squall run`, for the lifecycle verbs.

Each entry (`NAME.json`, mode 0600 in a 0700 directory, since it holds the control secret) says
how to reach the run's control endpoint: name, pid, loopback port, secret token, runner, start
time, checkpoint, log file. `squall list`, `kill`, `deactivate` and `activate` find a topology
here. An entry whose pid is gone (a run killed with SIGKILL) is stale: it is ignored, and removed
when seen.

The directory is `$SQUALL_RUN_DIR` when set, else `$XDG_RUNTIME_DIR/squall`, else
`~/.squall/run`.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> entry = RunEntry(name="wc", pid=os.getpid(), port=1, token="t", runner="local",
...                  started=0.0, checkpoint=None, target="m:wc", log=None)
>>> path = register(entry, d)
>>> oct(os.stat(path).st_mode & 0o777)
'0o600'
>>> [e.name for e in running(d)]
['wc']
>>> unregister(entry, d); running(d)
[]
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

RUN_DIR_ENV = "SQUALL_RUN_DIR"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class RunDirError(Exception):
    pass


@dataclass(frozen=True)
class RunEntry:
    name: str
    pid: int
    port: int
    token: str
    runner: str
    started: float  # wall time (seconds since the epoch), for `squall list`'s uptime
    checkpoint: str | None
    target: str
    log: str | None  # where Spark's own output goes, if anywhere


def run_dir() -> Path:
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "squall"
    return Path.home() / ".squall" / "run"


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise RunDirError(f"topology name {name!r}: use letters, digits, '_', '.' and '-' "
                          "(at most 100, starting with a letter or digit)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, though not ours to control
    try:  # a process that has ended but whose parent has not reaped it yet is a zombie
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): signal 0 is all there is


def _path(name: str, directory: str | Path | None) -> Path:
    return Path(directory or run_dir()) / f"{name}.json"


def lookup(name: str, directory: str | Path | None = None) -> RunEntry | None:
    """The live entry named `name`, or None (a stale one is removed)."""
    path = _path(name, directory)
    try:
        entry = RunEntry(**json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    if not alive(entry.pid):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return None
    return entry


def refuse_if_running(name: str, pid: int | None = None,
                      directory: str | Path | None = None) -> None:
    """`RunDirError` if a live process other than `pid` (default: this one) runs a topology
    named `name`."""
    other = lookup(name, directory)
    if other is not None and other.pid != (os.getpid() if pid is None else pid):
        raise RunDirError(f"a topology named {name!r} is already running (pid {other.pid}); "
                          f"stop it with `squall kill {name}` or choose another --name")


def register(entry: RunEntry, directory: str | Path | None = None) -> Path:
    """Write `entry`; refuses a name a live run already has."""
    check_name(entry.name)
    base = Path(directory or run_dir())
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    refuse_if_running(entry.name, entry.pid, base)
    path = _path(entry.name, base)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(entry), f)
    os.replace(tmp, path)
    return path


def unregister(entry: RunEntry, directory: str | Path | None = None) -> None:
    path = _path(entry.name, directory)
    with contextlib.suppress(FileNotFoundError, ValueError):
        if json.loads(path.read_text()).get("pid") == entry.pid:
            path.unlink()


def running(directory: str | Path | None = None) -> list[RunEntry]:
    """Every live entry, by name; stale ones are removed."""
    base = Path(directory or run_dir())
    names = sorted(p.stem for p in base.glob("*.json")) if base.is_dir() else []
    return [e for n in names if (e := lookup(n, base)) is not None]
