"""Shared test helpers: paths to the repository's examples."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py as a module (examples are scripts, not a package)."""
    mod_name = f"squall_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, ROOT / "examples" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def spark_session():
    """One Spark session (local[2]) per test module, with squall's own defaults."""
    import os
    import sys

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from squall.runtime.spark.session import get_session

    spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    yield spark
    spark.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_redis(workdir: Path, password: str | None = None,
                port: int | None = None) -> Iterator[types.SimpleNamespace]:
    """A real redis-server on a loopback port, without persistence, stopped by its pid.

    Yields host, port, password, a client (`decode_responses=True`) and `proc`.
    """
    import redis

    port = port or free_port()
    log = open(workdir / "redis.log", "a")  # noqa: SIM115 - closed below
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"]
    if password:
        args += ["--requirepass", password]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port, password=password, decode_responses=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server did not start: {(workdir / 'redis.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield types.SimpleNamespace(host="127.0.0.1", port=port, password=password,
                                    client=client, proc=proc)
    finally:
        client.close()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


_RUN_CACHE: dict = {}


def complete_cached(request, key, runner: str, build, conf: dict) -> object:
    """`complete_topology(build(), conf, runner=runner)`, run once per (test module, key, runner).

    Modules that read one rich topology from several tests share its run; a Spark run takes
    the module's `spark_session` fixture first.
    """
    from squall.testing import complete_topology

    cache_key = (request.module.__name__, key, runner)
    if cache_key not in _RUN_CACHE:
        if runner == "spark":
            request.getfixturevalue("spark_session")
        _RUN_CACHE[cache_key] = complete_topology(build(), conf, runner=runner)
    return _RUN_CACHE[cache_key]


def half_done_batch(ckpt: Path) -> bool:
    """Whether a Spark run at `ckpt` has a task snapshot of a batch the driver has not committed
    (past its first batches): the moment a SIGKILL lands mid-batch."""
    import pickle

    commit = ckpt / "commit.pkl"
    try:
        committed = pickle.loads(commit.read_bytes())["batch_id"] if commit.exists() else -1
    except (EOFError, pickle.UnpicklingError):
        return False  # being replaced
    if committed < 1:
        return False
    return any(int(s.stem[6:]) > committed for s in (ckpt / "tasks").glob("task=*/batch=*.pkl"))


# Driver source for the crash tests' subprocesses (needs `os`, `time`, `Spout` and the globals
# ITEMS and ACKED): a spout whose progress survives a SIGKILL of the whole process.
ACKED_ITEMS_SPOUT = '''
class AckedItems(Spout):
    """Emits every item of range(ITEMS) not acked in an earlier run, in order, the item as its
    message id; each ack is appended to ACKED at once (no open file in the spout: Spark snapshots
    it), so a restart replays exactly the items whose acks never arrived. Subclasses give
    `values(i)` and declare the fields."""
    pause = 0.0  # seconds before each tuple: slow enough that kills land mid-run
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        done = set()
        if os.path.exists(ACKED):
            done = {int(x) for x in open(ACKED).read().split()}
        self.todo = [i for i in range(ITEMS) if i not in done][::-1]
    def values(self, i):
        raise NotImplementedError
    def next_tuple(self):
        if self.todo:
            if self.pause:
                time.sleep(self.pause)
            i = self.todo.pop()
            self.collector.emit(self.values(i), msg_id=i)
    def ack(self, i):
        with open(ACKED, "a") as out:
            out.write("%d\\n" % i)
    def fail(self, i):
        self.todo.append(i)
        self.todo.sort(reverse=True)
    def is_exhausted(self):
        return not self.todo
'''


def kill_mid_batch(proc: subprocess.Popen, ckpt: Path, timeout_s: float = 240) -> bool:
    """SIGKILL `proc`'s process group once a batch is half done; True if that happened.

    A process that is still running when the time is up is killed too (and False returned)."""
    killed = False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.exists() and half_done_batch(ckpt):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None and not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return killed
