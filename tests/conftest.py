"""The suite's fixtures and hooks: Spark sessions, the `runner` fixture, markers by place, and the
check that no process the suite started outlives its test or the run.

Support code (servers, harnesses, shared topologies) is in the `support` package beside this
file; `docs/testing.md` says how the suite is laid out and how to run a part of it.

Markers
-------
Tests under `tests/crash/` are marked `crash`; files mark themselves `kafka` (the Tansu broker),
`browser` (headless Chromium) or `cluster` (a standalone Spark cluster); Spark runner variants
are marked `spark`. `long` marks the sweeps (many kill points, long chaos), which the default run
leaves out (`-m long` runs them); `extended` marks the checks CI runs in a second run after the
default one (`-m extended`). The fast part, no Spark, no broker, no browser::

    pytest -m "not (spark or crash or kafka or browser or cluster or long)"

Runners
-------
A test that takes a `runner` argument runs once per runner variant and gets the runner's name,
"local" or "spark" (the variant's id is the test id's part). By default the variants are `local`
and `spark`; each file declares nothing::

    def test_word_count(runner):
        result = complete_topology(build(), runner=runner)

Spark variants carry the `spark` marker (`-m "not spark"` runs the local ones only) and take
`spark_session` first, so every Spark test a process runs (an xdist worker) shares one session.

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
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import processes, schedule
from support.examples import ROOT
from support.runs import ONE_BATCH, ONE_TUPLE

TESTS = Path(__file__).resolve().parent
# Marks a folder gives its tests: a crash test's driver runs in subprocesses of its own, so the
# tests of a crash module share nothing costly and may go to different workers.
MARK_BY_DIR = {"crash": ("crash", "spread")}
# The JVMs the suite starts (its own Spark sessions, `squall run` subprocesses) run short jobs:
# the client compiler alone starts them and runs them about a third faster on two cores than
# tiered compilation, whose optimising compiler competes with the tests for the cores.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
MARKERS = {
    "spark": "needs a Spark session (in this process or in a subprocess)",
    "crash": "SIGKILL tests: a driver killed and restarted (tests/crash)",
    "kafka": "needs the Tansu Kafka-protocol broker",
    "browser": "drives a headless Chromium",
    "cluster": "starts a Spark standalone cluster on loopback",
    "spread": "a module whose tests share no costly fixture: xdist may run them on different "
    "workers",
    "long": "a sweep (many kill points, long chaos): not in the default run; -m long runs them",
    "extended": "a check CI runs after the default run (`-m extended`): a second kill schedule "
    "of a path the default run already kills, a real standalone cluster, the Spark cut of "
    "one tuple per micro-batch of checks the default run makes at other cuts, or a Spark case "
    "whose parts other tests of the default run check on Spark (each says which)",
    "slow": "long-running",
    "chaos": "the chaos suite (tests/crash/chaos; SQUALL_CHAOS=long for the long version)",
    "runners(*variant_ids, spark_session=True)": "the runner variants of a test taking the "
    "`runner` fixture (default local and spark; see tests/conftest.py)",
}


def pytest_configure(config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # One tag per run, inherited by every process the suite starts (see support.processes);
    # xdist's workers inherit the controller's.
    if not hasattr(config, "workerinput"):
        os.environ[processes.SUITE] = uuid.uuid4().hex
    os.environ[processes.OWNER] = processes.FIXTURE_OWNER
    os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


def pytest_addoption(parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help="write this run's test durations to tests/durations.json (merged), "
                     "which orders the work handed to xdist's workers")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group markers added here
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        try:
            part = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
        except ValueError:
            continue  # a doctest under src/
        for mark in MARK_BY_DIR.get(part, ()):
            item.add_marker(mark)
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker("browser")
    # Units of work for xdist (--dist loadgroup): a module as a whole (its Spark session and
    # servers are per module) unless it is marked `spread`; the longest units first.
    unit_of = {}
    for item in items:
        spread = item.get_closest_marker("spread") is not None
        unit_of[item.nodeid] = item.nodeid if spread else item.nodeid.split("::")[0]
        if not spread:
            item.add_marker(pytest.mark.xdist_group(unit_of[item.nodeid]))
    order = schedule.order_units(schedule.load_durations(),
                                 [(item.nodeid, unit_of[item.nodeid]) for item in items])
    rank = {unit: i for i, unit in enumerate(order)}
    items.sort(key=lambda item: rank[unit_of[item.nodeid]])  # stable: a module keeps its order
    if getattr(config.option, "loadgroup", False):  # an xdist worker of a loadgroup run
        _name_groups(items, unit_of)


def _name_groups(items, unit_of: dict[str, str]) -> None:
    """Give each grouped test the id xdist's loadgroup scheduler groups by: `<id>@<unit>`.

    pytest-xdist appends that suffix by setting `item._nodeid`, which pytest 9 no longer reads
    (an item's id is `item._id`): every test then was a unit of its own, a module's tests went
    to both workers, and its cached Spark runs and servers were started on each. The suffix is
    set here where pytest reads it (`pytest_runtest_logreport` strips it again). A pytest that
    has no `_id` reads xdist's own suffix, so it is left alone."""
    for item in items:
        if not hasattr(item, "_id"):
            return
        unit = unit_of[item.nodeid]
        if unit != item.nodeid and not item.nodeid.endswith(f"@{unit}"):
            item._id = type(item._id).parse(f"{item.nodeid}@{unit}")


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    """The controller (or a run without workers) adds up each test's setup, call and teardown."""
    nodeid = report.nodeid.split("@")[0]  # xdist's loadgroup appends @<group>
    _DURATIONS[nodeid] = _DURATIONS.get(nodeid, 0.0) + report.duration


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


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A module or session fixture's processes (a Spark session's JVM, a broker) belong to the
    fixture, not to the test that first asked for it: they outlive that test by design."""
    if fixturedef.scope == "function":
        return (yield)
    saved = os.environ.get(processes.OWNER)
    os.environ[processes.OWNER] = processes.FIXTURE_OWNER
    try:
        return (yield)
    finally:
        if saved is not None:
            os.environ[processes.OWNER] = saved


@pytest.fixture(autouse=True)
def _stops_what_it_started(request) -> Iterator[None]:
    """A process the test started (directly or through a subprocess) must be gone when its
    teardown ends: one still alive is SIGKILLed with its process group and the test errors."""
    owner = request.node.nodeid
    os.environ[processes.OWNER] = owner
    try:
        yield
    finally:
        os.environ[processes.OWNER] = processes.FIXTURE_OWNER
    suite = os.environ.get(processes.SUITE, "")
    # This process's own Spark JVM (and the Python workers it forks) serves every test after the
    # one that happened to start it; it is stopped when the worker's session ends.
    left = processes.wait_gone(suite, timeout_s=20, owner=owner, spare=_spark_gateway_pids())
    if left:
        processes.kill_all(left)
        pytest.fail("the test left processes running (killed now): "
                    + "; ".join(str(f) for f in left), pytrace=False)


def _spark_gateway_pids() -> set[int]:
    """The pid of this process's PySpark JVM, if it started one."""
    if "pyspark" not in sys.modules:
        return set()
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return {proc.pid} if proc is not None else set()


def _stop_spark_gateway() -> None:
    """Stop this process's Spark JVM, if it started one (PySpark keeps it until exit)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):  # the JVM is going anyway
        gateway.shutdown()
    if proc is not None:
        processes.stop(proc)
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.fixture(autouse=True, scope="session")
def _spark_jvm_stopped() -> Iterator[None]:
    yield
    _stop_spark_gateway()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        schedule.save_durations(_DURATIONS)
        terminalreporter.write_line(f"durations of {len(_DURATIONS)} tests recorded in "
                                    f"{schedule.DURATIONS}")
    _check_nothing_left_running(terminalreporter, config)


def _check_nothing_left_running(terminalreporter, config) -> None:
    """After the last test (under xdist, once the workers are gone) and before the closing line:
    every process that carries this run's tag must have ended. Stragglers are killed and the
    run fails."""
    if hasattr(config, "workerinput"):
        return
    left = processes.wait_gone(os.environ.get(processes.SUITE, ""), timeout_s=60)
    if not left:
        return
    processes.kill_all(left)
    terminalreporter.write_sep("=", "processes left running by the suite (killed now)", red=True)
    for found in left:
        terminalreporter.write_line(f"  {found}")
    session = terminalreporter._session
    if session is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def spark_session():
    """One Spark session (local[2]) per test process (each xdist worker), with squall's own
    defaults, shared by the modules the process runs: a new session per module cost each
    module's first Spark run 3-4 s more (Python workers started again). The runners stop their
    queries and set no session configuration, so a module meets the session as a new one."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from squall.runtime.spark.session import get_session

    spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    _SHARED_SPARK.append(spark)
    yield spark
    _SHARED_SPARK.clear()
    spark.stop()


_SHARED_SPARK: list = []  # the process's shared session, once a test has asked for it


@pytest.fixture(autouse=True)
def _no_query_outlives_its_test():
    """The shared session meets every module as a new one: a streaming query a test leaves
    running (a runner that did not stop it, a test that failed halfway) is stopped after the
    test, and the test errors naming it."""
    yield
    if not _SHARED_SPARK:
        return
    left = list(_SHARED_SPARK[0].streams.active)
    for query in left:
        query.stop()
    if left:
        pytest.fail(f"streaming queries left running: {[q.name or q.id for q in left]}",
                    pytrace=False)


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
