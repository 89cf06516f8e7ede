"""Shared test helpers: the examples, Spark sessions, Redis servers, and the `runner` fixture.

Runners
-------
A test that takes a `runner` argument runs once per runner variant and gets the runner's name,
"local" or "spark" (the variant's id is the test id's part). By default the variants are `local`
and `spark`; each file declares nothing::

    def test_word_count(runner):
        result = complete_topology(build(), runner=runner)

Spark variants carry the `spark` marker (`-m "not spark"` runs the local ones only) and take the
module's `spark_session` first, so every Spark test of a module shares one session.

Batch cuts: results must not depend on how input is cut into Spark micro-batches. A variant may
add configuration, which the test reads from the `runner_conf` fixture (a fresh dict, empty for
the plain variants) and passes to its run:

- `spark-1tuple`: Spark with one tuple per micro-batch (`squall.spark.batch.max.tuples` 1);
- `spark-1batch`: Spark with micro-batches of up to a million tuples (whatever input is ready);
- `local-1tuple`: the local runner given the same one-tuple configuration (which it ignores:
  the conf must not change its results either).

`@pytest.mark.runners(*variant_ids)` chooses a test's variants (a subset, or cuts)::

    @pytest.mark.runners("local", "spark", "spark-1tuple")
    def test_event_time(runner, runner_conf):
        result = complete_topology(build(), runner_conf, runner=runner)

`@pytest.mark.runners(spark_session=False)` keeps the default variants (or the ones given) but
takes no Spark session, for tests whose Spark runs happen in a subprocess.

A test that needs `runner` combined with other arguments in a way that is not a product can
parametrize it itself with variant ids and `indirect=["runner"]`; it then marks its Spark cases
`spark` itself (the fixture fails a Spark case without that marker). A test that parametrizes
`runner` directly (not indirect) gets its plain values and none of the above.
"""

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
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from squall import Fields, StatefulBolt, Values

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


@pytest.fixture(autouse=True, scope="session")
def _run_and_log_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`squall run` subprocesses register in a run directory and write Spark's output to a log
    file (squall.cli.rundir, squall.cli.stopping): the tests' go to a temporary directory, not
    the user's home."""
    base = tmp_path_factory.mktemp("squall-run")
    saved = {k: os.environ.get(k) for k in ("SQUALL_RUN_DIR", "SQUALL_LOG_DIR")}
    os.environ["SQUALL_RUN_DIR"] = str(base / "run")
    os.environ["SQUALL_LOG_DIR"] = str(base / "logs")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


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


MAX_TUPLES = "squall.spark.batch.max.tuples"
ONE_TUPLE = {MAX_TUPLES: 1}  # a Spark micro-batch per tuple
ONE_BATCH = {MAX_TUPLES: 1_000_000}  # a micro-batch takes whatever input is ready


@dataclass(frozen=True)
class RunnerVariant:
    """A runner ("local" or "spark") and the configuration a run on it adds (a batch cut)."""

    id: str
    runner: str
    conf: dict = field(default_factory=dict)


RUNNER_VARIANTS = {v.id: v for v in (
    RunnerVariant("local", "local"),
    RunnerVariant("local-1tuple", "local", ONE_TUPLE),
    RunnerVariant("spark", "spark"),
    RunnerVariant("spark-1tuple", "spark", ONE_TUPLE),
    RunnerVariant("spark-1batch", "spark", ONE_BATCH),
)}
DEFAULT_RUNNERS = ("local", "spark")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "runners(*variant_ids, spark_session=True): the runner variants of a test "
        "taking the `runner` fixture (default local and spark; see tests/conftest.py)")


def _parametrizes(metafunc, argname: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if argname in names:
            return True
    return False


def pytest_generate_tests(metafunc) -> None:
    """Parametrize the `runner` fixture with the test's variants (`runners` marker)."""
    if "runner" not in metafunc.fixturenames or _parametrizes(metafunc, "runner"):
        return
    marker = metafunc.definition.get_closest_marker("runners")
    ids = (marker.args if marker and marker.args else None) or DEFAULT_RUNNERS
    unknown = [i for i in ids if i not in RUNNER_VARIANTS]
    if unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: unknown runner variants "
                                f"{unknown}; known: {sorted(RUNNER_VARIANTS)}")
    if any(RUNNER_VARIANTS[i].conf for i in ids) and "runner_conf" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a variant with its own "
                                "configuration needs the runner_conf fixture")
    metafunc.parametrize("runner", [
        pytest.param(i, id=i, marks=[pytest.mark.spark] if RUNNER_VARIANTS[i].runner == "spark"
                     else []) for i in ids], indirect=True)


def _variant(request) -> RunnerVariant:
    return RUNNER_VARIANTS[request.node.callspec.params["runner"]]


@pytest.fixture
def runner(request) -> str:
    """The runner's name, "local" or "spark"; Spark runs take the module's `spark_session`."""
    variant = _variant(request)
    if variant.runner == "spark":
        if request.node.get_closest_marker("spark") is None:
            pytest.fail(f"{request.node.nodeid}: a Spark runner variant must be marked spark")
        marker = request.node.get_closest_marker("runners")
        if marker is None or marker.kwargs.get("spark_session", True):
            request.getfixturevalue("spark_session")
    return variant.runner


@pytest.fixture
def runner_conf(runner, request) -> dict:
    """The configuration the test's runner variant adds (a batch cut), empty for plain runs."""
    return dict(_variant(request).conf)


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



class RunningCount(StatefulBolt):
    """Counts records per `key` in its state and passes each record on as (id, key, running
    count): the last count per key is the state's total, so a record applied twice shows as a
    count past the true one. Shared by the resume and timeout tests."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        key = tup["key"]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        self.collector.emit(Values(tup["id"], key, n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "key", "n"))
