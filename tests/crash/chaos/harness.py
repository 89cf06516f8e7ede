"""The chaos harness: runs `tests/crash/chaos/pipeline.py` through `squall run`, kills it, checks
it.

One *scenario* on one *runner* is a sequence of runs on the same checkpoint directory, input and
output directories. Every run but the last is killed (SIGKILL of the CLI's whole session: driver,
JVM, Python workers) at a moment chosen by a *kill plan*; the last run is left alone and must
finish. Then:

- every input id must be in the sink exactly once (`lost`: ids missing; `duplicated`: ids seen
  more than once), and in the optional Redis sink's hash;
- the counting bolt's state (read after the run through `squall.state.providers.new_state`, from
  the durable SQLite files under the checkpoint or from Redis) must equal the true count per key,
  and so must the highest running count the bolt emitted per key.

Kill plans combine timers with hooks in the pipeline's user code (see `pipeline.py`): the harness
arms a hook by creating a file, and the pipeline kills itself when it next passes that point.

- `start-up`: a timer shorter than Spark's start (or the local runner's first output).
- `first-batch`: the `execute` hook armed from the start: the first record counted in the run.
- `mid-batch`: the `execute` hook armed once the run has committed a batch.
- `after-sink-write`: the sink's `after-write` hook: the sink has written a batch's part file,
  the driver has not committed the batch.
- `mid-commit`: on Spark the harness polls the checkpoint without pausing and kills as soon as
  the outcomes file of the batch after the committed one exists: the driver has started the
  batch's commit (outcomes first, `commit.pkl` last) and not finished it. On the local runner
  the state's `pre-commit` hook, which runs after the commit record is written and before the
  sinks publish the batch.
- `recovery`: the `execute` hook armed from the start of a run that has a batch to replay (the
  previous run was killed inside a batch): the kill lands in the replay.
- `planning` (Spark): the harness polls without pausing and kills as soon as the spout reader
  has snapshotted a segment it planned that Spark's offsets log does not name yet: the reader
  has planned the next batch, Spark has not logged it. (On the local runner, a timer.)
- `random`: a timer anywhere in the run.

Every kill is then *classified* by what the frozen checkpoint and output show, not by the plan
that caused it (a timer meant for start-up may land in the first batch; a poll may be late):
see `classify_spark` and `classify_local`.

Recovery time is measured for every run that follows a kill and writes output: from the restart
(the CLI process started) to the first sink part file it writes, and, on Spark, also from the
moment Spark was up: the runner rewrites `plan.pkl` under the checkpoint once its session exists
and right before it starts the streaming query, so its modification time is "Spark started".
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.ports import free_port

from . import pipeline

PIPELINE = Path(pipeline.__file__).resolve()
RUNNERS = ("spark", "local")

# Every phase a kill can be classified in, in the order of a run's life.
PHASES = ("start-up", "first-batch", "recovery", "mid-batch", "after-sink-write", "mid-commit",
          "planning", "between-batches")
KILL_PLANS = ("start-up", "first-batch", "mid-batch", "after-sink-write", "mid-commit",
              "recovery", "planning", "random")

_PART = re.compile(r"^part-b(\d+)-t(\d+)\.(\w+)$")
_STAGED = re.compile(r"^\.staged-part-b(\d+)-t(\d+)\.(\w+)$")  # local runner, two phases


# ---- scenarios ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """What one chaos scenario does; `kills` is how many runs are killed before the last one."""

    name: str
    description: str
    kills: int
    plans: tuple[str, ...] = KILL_PLANS  # cycled through, one per killed run
    files_first: int = 4  # input files before the first run
    files_between: int = 2  # new input files before every restart
    files_during: int = 0  # new input files written while each run goes on
    records_per_file: int = 40
    keys: int = 7
    sink: str = "jsonl"  # or "parquet"
    redis_sink: bool = False  # also a RedisSink (hash id -> running count)
    provider: str = "durable"  # or "redis": the counting bolt's state
    sleep_ms: float = 0.0  # per record, in the counting bolt
    timeout_s: float | None = None  # topology.message.timeout.secs
    redis_outages: bool = False  # SIGKILL Redis mid-run and restart it, in every run

    @property
    def needs_redis(self) -> bool:
        return self.redis_sink or self.provider == "redis"


def scenarios(long: bool) -> list[Scenario]:
    """The suite: a short version for CI (every phase planned at least once over the Spark
    scenarios) and a long one (at least 20 kills per scenario; the local runner takes 10)."""
    n = 21 if long else 0
    return [
        Scenario("random-kills", "kills at every phase; JSON-lines sink and a RedisSink",
                 kills=n or 3, redis_sink=True,
                 plans=KILL_PLANS if long else ("after-sink-write", "recovery", "mid-commit")),
        Scenario("slow-batches", "a bolt sleeping 40 ms per record, message timeout 2 s",
                 kills=n or 2, sleep_ms=40, timeout_s=2, files_first=3, files_between=2,
                 plans=KILL_PLANS if long else ("planning", "mid-batch")),
        Scenario("new-input", "input files arriving between and during runs; Parquet sink",
                 kills=n or 1, sink="parquet", files_first=2, files_between=3, files_during=3,
                 plans=KILL_PLANS if long else ("start-up",)),
        Scenario("redis-restart", "Redis state, Redis SIGKILLed and restarted in every run",
                 kills=n or 1, provider="redis", redis_outages=True,
                 plans=KILL_PLANS if long else ("first-batch",)),
    ]


def local_kills(scenario: Scenario, long: bool) -> int:
    """Kills on the local runner: 10 per scenario in the long version, 2 in the short one."""
    return 10 if long else 2


# ---- processes ---------------------------------------------------------------------------------


def session_members(sid: int) -> list[int]:
    """Pids of every process whose session is `sid` (the CLI's, started with a new session)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry))
    return out


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the CLI's process group, then whatever else is left of its session (PySpark's
    worker daemon has a group of its own), and reap the CLI."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    reap_session(proc)


def reap_session(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the CLI, and SIGKILL what is left of its session (processes we started)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = session_members(proc.pid)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


class Redis:
    """A redis-server on loopback with an append-only file fsynced on every write, so a server
    killed with SIGKILL and started again has every acknowledged write. Stopped by its pid."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        import redis

        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the server holds it
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir),
             "--daemonize", "no"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start: "
                                       + (self.dir / "redis.log").read_text()[-2000:]) from None
                time.sleep(0.05)
            finally:
                client.close()

    def kill(self) -> None:
        """SIGKILL, as a crash: whatever the append-only file holds is what survives."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)


# ---- what the checkpoint and the sink show -----------------------------------------------------


def committed_batch(ckpt: Path) -> int:
    """The last committed batch, or -1: `commit.pkl`, the commit record of both runners (on Spark
    the driver writes it last per batch; the local runner's write of it is its commit point)."""
    try:
        return int(pickle.loads((ckpt / "commit.pkl").read_bytes())["batch_id"])
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):
        return -1


def planned_batch(ckpt: Path) -> int:
    """The newest batch Spark has planned (its offsets log under `query/offsets`), or -1."""
    try:
        names = os.listdir(ckpt / "query" / "offsets")
    except FileNotFoundError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


def logged_segment(ckpt: Path, batch_id: int) -> int:
    """The spout reader's segment that Spark's offsets log names for `batch_id` (-1 if none).

    The log file's last line is the source's end offset, `{"seg": N}`."""
    try:
        lines = (ckpt / "query" / "offsets" / str(batch_id)).read_text().split("\n")
    except FileNotFoundError:
        return -1
    try:
        return int(json.loads([x for x in lines if x.strip()][-1])["seg"])
    except (ValueError, KeyError, IndexError, TypeError):
        return -1  # being written


def snapshotted_segment(ckpt: Path) -> int:
    """The newest segment the spout reader planned and snapshotted its spouts after (-1 if none).
    """
    try:
        names = os.listdir(ckpt / "spouts")
    except FileNotFoundError:
        return -1
    return max((int(n[4:-4]) for n in names if n.startswith("seg=") and n.endswith(".pkl")),
               default=-1)


def outcomes_exist(ckpt: Path, batch_id: int) -> bool:
    """Whether the driver has written the outcomes of `batch_id` (the first step of its commit)."""
    return (ckpt / "outcomes" / f"batch={batch_id:012d}.pkl").exists()


def sink_parts(out: Path, staged: bool = False) -> dict[str, tuple[int, float]]:
    """Every part file of the sink (or, with `staged`, every batch the local runner staged and
    has not published): name -> (batch id, modification time)."""
    parts: dict[str, tuple[int, float]] = {}
    pattern = _STAGED if staged else _PART
    try:
        entries = list(os.scandir(out))
    except FileNotFoundError:
        return parts
    for entry in entries:
        m = pattern.match(entry.name)
        if m:
            with contextlib.suppress(FileNotFoundError):
                parts[entry.name] = (int(m.group(1)), entry.stat().st_mtime)
    return parts


def written_since(paths: Iterator[Path], since: float) -> bool:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime >= since:
                return True
    return False


@dataclass(frozen=True)
class RunStart:
    """The checkpoint as a run found it."""

    wall: float  # time.time() when the CLI was started
    committed: int
    planned: int

    @property
    def replay_pending(self) -> bool:
        """Spark has planned a batch the driver has not committed: the run replays it first."""
        return self.planned > self.committed


def classify_spark(ckpt: Path, out: Path, start: RunStart, fired: str | None) -> str:
    """The phase a Spark run was in when it was killed, from the checkpoint it left behind.

    In this order: Spark not up yet, i.e. the runner has not rewritten `plan.pkl`, which it does
    once its session exists, right before it starts the query (`start-up`); the batch planned
    before the run not committed yet (`recovery`); the outcomes of the next batch written but not
    `commit.pkl` (`mid-commit`); a sink part of an uncommitted batch written by this run
    (`after-sink-write`); nothing committed by this run yet (`first-batch`); a batch planned and
    not committed (`mid-batch`); a segment the reader planned that Spark's offsets log does not
    name (`planning`); else `between-batches` (finishing, or idle).
    """
    since = start.wall
    parts = sink_parts(out)
    if fired is None and not written_since(iter([ckpt / "plan.pkl"]), since):
        return "start-up"
    committed = committed_batch(ckpt)
    if start.replay_pending and committed < start.planned:
        return "recovery"
    if outcomes_exist(ckpt, committed + 1):
        return "mid-commit"
    if any(b > committed and t >= since for b, t in parts.values()):
        return "after-sink-write"
    if committed == start.committed:
        return "first-batch"
    planned = planned_batch(ckpt)
    if planned > committed:
        return "mid-batch"
    if snapshotted_segment(ckpt) > logged_segment(ckpt, planned):
        return "planning"
    return "between-batches"


def classify_local(ckpt: Path, out: Path, start: RunStart, fired: str | None,
                   after_kill: bool) -> str:
    """The phase a local run was in when it was killed (a batch is a transaction whose commit
    point is the write of `commit.pkl`; sinks stage a batch before it and publish it after).

    A staged batch at or below the committed one, or the `pre-commit` hook: `mid-commit` (the
    record is written, the state not promoted or the sink not published). A staged batch above
    it, or the `after-write` hook: `after-sink-write`. Nothing written by the run: `start-up`.
    No commit by this run yet: `recovery` after a kill, else `first-batch`. Else `mid-batch`.
    """
    since = start.wall
    committed = committed_batch(ckpt)
    staged = [(b, t) for b, t in sink_parts(out, staged=True).values() if t >= since]
    if fired == "pre-commit" or any(b <= committed for b, _t in staged):
        return "mid-commit"
    if fired == "after-write" or any(b > committed for b, _t in staged):
        return "after-sink-write"
    wrote = written_since(iter([ckpt / "commit.pkl", *(ckpt / "state").glob("*")]), since) or \
        any(t >= since for _b, t in sink_parts(out).values())
    if not wrote and fired is None:
        return "start-up"
    if committed == start.committed:
        return "recovery" if after_kill else "first-batch"
    return "mid-batch"


# ---- one run -----------------------------------------------------------------------------------


@dataclass
class RunRecord:
    """One run of the CLI."""

    index: int
    plan: str | None  # the kill plan, None for the last run
    after_kill: bool  # the previous run was killed
    started: float = 0.0  # wall clock
    killed: bool = False
    phase: str | None = None  # where the kill landed
    returncode: int | None = None
    spark_up: float | None = None  # wall clock, from plan.pkl
    first_output: float | None = None  # wall clock, the first sink part the run wrote
    outages: int = 0
    log: str = ""

    @property
    def recovery_s(self) -> float | None:
        """Restart to first new output, Spark's start included."""
        if not self.after_kill or self.first_output is None:
            return None
        return self.first_output - self.started

    @property
    def recovery_after_start_s(self) -> float | None:
        """Spark up to first new output (Spark only)."""
        if not self.after_kill or self.first_output is None or self.spark_up is None:
            return None
        return max(0.0, self.first_output - self.spark_up)


@dataclass
class Outcome:
    """The result of one scenario on one runner: a row of the table."""

    scenario: str
    runner: str
    runs: list[RunRecord] = field(default_factory=list)
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_copies: int = 0
    state_exact: bool = False
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workdir: str = ""
    unsupported: str | None = None  # why the runner could not run the scenario at all

    @property
    def kills(self) -> collections.Counter[str]:
        return collections.Counter(r.phase for r in self.runs if r.killed and r.phase)

    @property
    def outages(self) -> int:
        return sum(r.outages for r in self.runs)

    @property
    def ok(self) -> bool:
        return (self.unsupported is None and not self.problems and self.lost == 0
                and self.duplicated == 0 and self.state_exact)

    def recovery(self, after_start: bool) -> list[float]:
        values = [r.recovery_after_start_s if after_start else r.recovery_s for r in self.runs]
        return [v for v in values if v is not None]


class Unsupported(Exception):
    """The runner refused the CLI invocation (e.g. no --checkpoint on the local runner yet)."""


class ChaosRun:
    """One scenario on one runner, in `workdir` (created empty)."""

    def __init__(self, scenario: Scenario, runner: str, workdir: Path, seed: int,
                 kills: int | None = None, log: Any = None) -> None:
        self.s = scenario
        self.runner = runner
        self.kills = scenario.kills if kills is None else kills
        self.dir = workdir
        self.input = workdir / "input"
        self.output = workdir / "output"
        self.ckpt = workdir / "checkpoint"
        self.ctl = workdir / "control"
        self.logs = workdir / "logs"
        for d in (self.input, self.output, self.ctl, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.truth: collections.Counter[str] = collections.Counter()  # key -> records
        self.ids: set[str] = set()
        self.files = 0
        self.redis: Redis | None = None
        self.say = log or (lambda msg: None)
        # Learned as runs go: seconds from the CLI's start to the first output, and the length
        # of runs that were not killed (random timers are drawn within them).
        self.startup_s: list[float] = []
        self.run_s: list[float] = []

    # ---- input ---------------------------------------------------------------------------
    def add_files(self, n: int) -> None:
        """Write `n` new input files, each under a hidden name first and renamed into place (the
        source skips names starting with '.'), so a run never reads half a file."""
        for _ in range(n):
            name = f"in-{self.files:05d}.jsonl"
            lines = []
            for i in range(self.s.records_per_file):
                rid = f"r{self.files:05d}-{i:04d}"
                key = f"k{self.rng.randrange(self.s.keys)}"
                self.ids.add(rid)
                self.truth[key] += 1
                # Padding makes a line about 64 bytes: the Spark planner estimates a file's
                # records as bytes / 64, which with the batch budget below puts about one file
                # in each micro-batch.
                lines.append(json.dumps({"id": rid, "key": key, "pad": "-" * 22}) + "\n")
            tmp = self.input / f".{name}"
            tmp.write_text("".join(lines))
            os.replace(tmp, self.input / name)
            self.files += 1

    # ---- running -------------------------------------------------------------------------
    def _conf(self) -> list[str]:
        s = self.s
        conf: dict[str, Any] = {}
        if self.runner == "spark":
            conf["squall.spark.batch.max.tuples"] = s.records_per_file
            conf["spark.ui.enabled"] = "false"
        else:
            conf["squall.local.batch.ms"] = 200
            conf["topology.state.checkpoint.interval.ms"] = 200
        if s.timeout_s is not None:
            conf["topology.message.timeout.secs"] = s.timeout_s
        if s.provider == "redis":
            assert self.redis is not None
            conf["topology.state.provider"] = "redis"
            conf["topology.state.provider.config"] = {"host": "127.0.0.1",
                                                      "port": self.redis.port}
        elif self.runner == "local":
            # The local runner's durable state needs a directory; the same place as Spark's.
            conf["topology.state.provider"] = "durable"
            conf["topology.state.provider.config"] = {"dir": str(self.ckpt / "state")}
        args = []
        for key, value in conf.items():
            args += ["-c", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
        return args

    def _sleep_ms(self) -> float:
        if self.runner == "local":
            # A local run of this input takes a fraction of a second: slow it down enough that
            # timers and hooks land inside it.
            return max(self.s.sleep_ms, 3.0)
        return self.s.sleep_ms

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        squall = Path(sys.executable).with_name("squall")
        cli = [str(squall)] if squall.exists() else [sys.executable, "-m", "squall.cli.main"]
        args = [*cli, "run", f"{PIPELINE}:topology", "--runner", self.runner,
                "--checkpoint", str(self.ckpt), "--progress-every", "0", *self._conf()]
        env = dict(os.environ, CHAOS_INPUT=str(self.input), CHAOS_OUTPUT=str(self.output),
                   CHAOS_SINK=self.s.sink, CHAOS_CTL=str(self.ctl), CHAOS_RUN=str(index),
                   CHAOS_SLEEP_MS=str(self._sleep_ms()), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=sys.executable)
        if self.s.redis_sink:
            assert self.redis is not None
            env["CHAOS_REDIS_SINK"] = f"127.0.0.1:{self.redis.port}"
        log = open(self.logs / f"run-{index:03d}.log", "wb")  # noqa: SIM115 - closed below
        try:
            # A new session: one killpg takes the driver and its JVM, and the session id lets
            # the harness find PySpark's worker daemon, which makes a process group of its own.
            return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        finally:
            log.close()

    def _arm(self, index: int, point: str) -> None:
        (self.ctl / f"arm-{index}-{point}").touch()

    def _fired(self, index: int) -> str | None:
        for point in ("execute", "after-write", "pre-commit"):
            if (self.ctl / f"fired-{index}-{point}").exists():
                return point
        return None

    def _startup_estimate(self) -> float:
        if self.startup_s:
            return statistics.median(self.startup_s)
        return 10.0 if self.runner == "spark" else 1.0

    def _progressed(self, start: RunStart) -> bool:
        """The run has committed a batch."""
        return committed_batch(self.ckpt) > start.committed

    def run_once(self, index: int, plan: str | None, after_kill: bool,
                 limit_s: float = 900) -> RunRecord:
        """Start the CLI, carry out `plan` (None: let it finish), wait for it to end."""
        rec = RunRecord(index, plan, after_kill)
        start = RunStart(time.time(), committed_batch(self.ckpt), planned_batch(self.ckpt))
        rng = self.rng
        t0 = time.monotonic()
        proc = self._start(index)
        rec.started = start.wall
        est = self._startup_estimate()
        kill_at: float | None = None
        arm_when_progressed: str | None = None
        armed_at: float | None = None
        poll_commit = False
        poll_planning = False
        replay = self.runner == "spark" and start.replay_pending
        if plan == "start-up":
            kill_at = t0 + rng.uniform(0.2, 0.8) * est
        elif plan == "random":
            length = max(self.run_s) if self.run_s else 1.6 * est + 4
            kill_at = t0 + rng.uniform(0.3 * est, max(0.3 * est, 0.9 * length))
        elif plan == "first-batch" or (plan == "recovery" and (replay or (
                self.runner == "local" and after_kill))):
            self._arm(index, "execute")
        elif plan in ("mid-batch", "recovery"):
            arm_when_progressed = "execute"
        elif plan == "after-sink-write":
            arm_when_progressed = "after-write"
        elif plan == "planning":
            if self.runner == "spark":
                poll_planning = True
            else:
                length = max(self.run_s) if self.run_s else 1.6 * est + 4
                kill_at = t0 + rng.uniform(0.3 * est, max(0.3 * est, 0.9 * length))
        elif plan == "mid-commit":
            if self.runner == "spark":
                poll_commit = True
            else:  # the state's commit hook runs between the commit record and the publish
                arm_when_progressed = "pre-commit"
        # New input while the run goes on, and Redis outages, on timers of their own. Not in the
        # last run: the source is bounded (a run reads the files there when it first plans), so
        # files arriving after that are for the next run, and the last run has none.
        during = sorted(t0 + rng.uniform(0.3, 1.5) * est
                        for _ in range(self.s.files_during if plan is not None else 0))
        outage_at: float | None = None
        outage_end: float | None = None
        outage_armed = self.s.redis_outages
        delay = rng.uniform(0.0, 0.6)
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now - t0 > limit_s:
                    rec.log = f"run {index} still running after {limit_s:.0f}s: killed"
                    break
                while during and now >= during[0]:
                    during.pop(0)
                    self.add_files(1)
                if outage_armed and outage_at is None and self._progressed(start):
                    outage_at = now + rng.uniform(0.0, 1.0)
                if outage_at is not None and outage_end is None and now >= outage_at:
                    assert self.redis is not None
                    self.redis.kill()
                    rec.outages += 1
                    outage_end = now + rng.uniform(1.0, 3.0)
                    outage_armed = False
                if outage_end is not None and now >= outage_end and self.redis is not None \
                        and self.redis.proc is not None and self.redis.proc.poll() is not None:
                    self.redis.start()
                    self.redis.restarts += 1
                if kill_at is not None and now >= kill_at:
                    kill_session(proc)
                    rec.killed = True
                    break
                if (arm_when_progressed or poll_commit or poll_planning) \
                        and armed_at is None \
                        and self._progressed(start):
                    armed_at = now + delay
                if armed_at is not None and now >= armed_at:
                    if arm_when_progressed:
                        self._arm(index, arm_when_progressed)
                        arm_when_progressed = None
                    if poll_commit:
                        # Busy-wait for the outcomes file of the batch after the committed one
                        # (commit.pkl follows it within milliseconds).
                        if self._poll_mid_commit(proc, limit_s=60):
                            rec.killed = True
                            break
                        poll_commit = False
                    if poll_planning:
                        if self._poll_planning(proc, limit_s=60):
                            rec.killed = True
                            break
                        poll_planning = False
                time.sleep(0.01)
        finally:
            if proc.poll() is None and not rec.killed:
                kill_session(proc)  # over its time limit
            else:
                reap_session(proc)
        rec.returncode = proc.returncode
        if not rec.killed and proc.returncode == 0:
            self.run_s.append(time.monotonic() - t0)
        fired = self._fired(index)
        if fired is not None:
            rec.killed = True
        if rec.killed:
            rec.phase = self._classify(start, fired, after_kill)
        for _ in during:  # files that were due during the run arrive now
            self.add_files(1)
        if self.redis is not None and self.redis.proc is not None \
                and self.redis.proc.poll() is not None:
            self.redis.start()
            self.redis.restarts += 1
        self._timings(rec, start)
        return rec

    def _poll_mid_commit(self, proc: subprocess.Popen[bytes], limit_s: float) -> bool:
        deadline = time.monotonic() + limit_s
        commit = self.ckpt / "commit.pkl"
        outcomes = self.ckpt / "outcomes"
        seen_ns = -1
        target = None
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                mtime_ns = commit.stat().st_mtime_ns
            except FileNotFoundError:
                mtime_ns = 0
            if mtime_ns != seen_ns:
                seen_ns = mtime_ns
                target = outcomes / f"batch={committed_batch(self.ckpt) + 1:012d}.pkl"
            if target is not None and target.exists():
                kill_session(proc)
                return True
        return False

    def _poll_planning(self, proc: subprocess.Popen[bytes], limit_s: float) -> bool:
        """Busy-wait for a segment the reader snapshotted and Spark has not logged; kill then."""
        deadline = time.monotonic() + limit_s
        offsets = self.ckpt / "query" / "offsets"
        newest, logged = -2, -1  # the newest offsets file read, and the segment it names
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                latest = max((int(n) for n in os.listdir(offsets) if n.isdigit()), default=-1)
            except FileNotFoundError:
                latest = -1
            if latest != newest:
                seg = logged_segment(self.ckpt, latest)
                if latest >= 0 and seg < 0:
                    continue  # being written: read it again
                newest, logged = latest, seg
            if snapshotted_segment(self.ckpt) > logged:
                kill_session(proc)
                return True
        return False

    def _classify(self, start: RunStart, fired: str | None, after_kill: bool) -> str:
        if self.runner == "spark":
            return classify_spark(self.ckpt, self.output, start, fired)
        return classify_local(self.ckpt, self.output, start, fired, after_kill)

    def _timings(self, rec: RunRecord, start: RunStart) -> None:
        new = [t for _b, t in sink_parts(self.output).values() if t >= start.wall]
        rec.first_output = min(new) if new else None
        with contextlib.suppress(FileNotFoundError):
            up = (self.ckpt / "plan.pkl").stat().st_mtime
            if up >= start.wall:
                rec.spark_up = up
        if rec.first_output is not None:
            self.startup_s.append(rec.first_output - start.wall)

    # ---- the whole scenario ---------------------------------------------------------------
    def run(self) -> Outcome:
        out = Outcome(self.s.name, self.runner, workdir=str(self.dir))
        began = time.monotonic()
        try:
            if self.s.needs_redis:
                self.redis = Redis(self.dir)
                self.redis.start()
            self.add_files(self.s.files_first)
            after_kill = False
            plans = list(self.s.plans)
            for i in range(self.kills):
                if i:
                    self.add_files(self.s.files_between)
                plan = plans[i % len(plans)]
                rec = self.run_once(i, plan, after_kill)
                out.runs.append(rec)
                self.say(f"{self.s.name}/{self.runner} run {i}: plan {plan}, "
                         f"{'killed in ' + str(rec.phase) if rec.killed else 'not killed'}, "
                         f"rc {rec.returncode}")
                if i == 0 and self._refused(rec):
                    out.unsupported = self._refused(rec)
                    return out
                if not rec.killed and rec.returncode != 0:
                    out.problems.append(f"run {i} exited with {rec.returncode} without being "
                                        f"killed: {rec.log or self._tail(i)}")
                after_kill = rec.killed
            self.add_files(self.s.files_between)
            final = self.run_once(self.kills, None, after_kill)
            out.runs.append(final)
            self.say(f"{self.s.name}/{self.runner} final run: rc {final.returncode}")
            if self.kills == 0 and self._refused(final):
                out.unsupported = self._refused(final)
                return out
            if final.returncode != 0:
                out.problems.append(f"the last run (not killed) exited with "
                                    f"{final.returncode}: {final.log or self._tail(self.kills)}")
            self.check(out)
        finally:
            if self.redis is not None:
                self.redis.stop()
            out.seconds = time.monotonic() - began
        return out

    def _tail(self, index: int, n: int = 1500) -> str:
        text = (self.logs / f"run-{index:03d}.log").read_text(errors="replace")
        return text[-n:]

    def _refused(self, rec: RunRecord) -> str | None:
        if rec.returncode == 2:
            text = self._tail(rec.index, 4000)
            if "--checkpoint" in text and "apply to the spark runner" in text:
                return "squall run refuses --checkpoint on the local runner"
        return None

    # ---- checks ---------------------------------------------------------------------------
    def check(self, out: Outcome) -> None:
        """Fill `out` with what the sink and the state hold compared with the input."""
        from squall.connectors import read_jsonl, read_parquet

        records = read_jsonl(self.output) if self.s.sink == "jsonl" else read_parquet(
            self.output)
        seen = collections.Counter(str(r["id"]) for r in records)
        out.records = len(self.ids)
        missing = self.ids - set(seen)
        out.duplicated = sum(1 for n in seen.values() if n > 1)
        out.duplicate_copies = sum(n - 1 for n in seen.values() if n > 1)
        unknown = set(seen) - self.ids
        if unknown:
            out.problems.append(f"{len(unknown)} ids in the sink that no input has, e.g. "
                                f"{sorted(unknown)[:3]}")
        if self.s.redis_sink:
            assert self.redis is not None
            client = self.redis.client()
            try:
                in_redis = set(client.hkeys(pipeline.REDIS_HASH))
            finally:
                client.close()
            missing_redis = self.ids - in_redis
            if missing_redis:
                out.problems.append(f"{len(missing_redis)} ids missing from the RedisSink's "
                                    f"hash, e.g. {sorted(missing_redis)[:3]}")
            missing |= missing_redis
        out.lost = len(missing)
        if missing:
            out.problems.append(f"{len(missing)} ids lost, e.g. {sorted(missing)[:3]}")
        if out.duplicated:
            dups = sorted(i for i, n in seen.items() if n > 1)
            out.problems.append(f"{out.duplicated} ids in the sink more than once "
                                f"({out.duplicate_copies} extra copies), e.g. {dups[:3]}")
        state = self.read_state()
        truth = dict(self.truth)
        out.state_exact = state == truth
        if not out.state_exact:
            diff = {k: (state.get(k), truth.get(k)) for k in sorted(set(state) | set(truth))
                    if state.get(k) != truth.get(k)}
            out.problems.append(f"state differs from the true counts (key: state, truth): {diff}")
        emitted: dict[str, int] = {}
        for r in records:
            emitted[r["key"]] = max(emitted.get(r["key"], 0), int(r["count"]))
        if emitted != truth:
            diff = {k: (emitted.get(k), truth.get(k)) for k in sorted(set(emitted) | set(truth))
                    if emitted.get(k) != truth.get(k)}
            out.problems.append(f"highest emitted count per key differs from the truth "
                                f"(key: emitted, truth): {diff}")

    def read_state(self) -> dict[str, int]:
        """The counting bolt's committed state, merged over its tasks, via the public API."""
        from squall.state.base import KeyValueState
        from squall.state.providers import new_state

        topology = pipeline.build(str(self.input), str(self.output), self.s.sink,
                                  "127.0.0.1:1" if self.s.redis_sink else None)
        if self.s.provider == "redis":
            assert self.redis is not None
            conf: dict[str, Any] = {
                "topology.state.provider": "redis",
                "topology.state.provider.config": {"host": "127.0.0.1", "port": self.redis.port}}
        else:
            conf = {"topology.state.provider": "durable",
                    "topology.state.provider.config": {"dir": str(self.ckpt / "state")}}
        state: dict[str, int] = {}
        for task in topology.component_tasks(pipeline.COUNT):
            store = new_state(conf, f"{pipeline.COUNT}-{task}")
            assert isinstance(store, KeyValueState), store
            for key, value in store:
                state[key] = state.get(key, 0) + int(value)
        return state


def run_scenario(scenario: Scenario, runner: str, workdir: Path, seed: int = 0,
                 kills: int | None = None, log: Any = None, keep: bool = False) -> Outcome:
    """Run one scenario on one runner in a fresh `workdir` (removed afterwards unless it failed
    or `keep`)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    outcome = ChaosRun(scenario, runner, workdir, seed, kills, log).run()
    if outcome.ok and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome


# ---- the table ---------------------------------------------------------------------------------


def _seconds(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f}/{max(values):.1f}"


def table(outcomes: Sequence[Outcome]) -> str:
    """The results as a text table, one row per scenario and runner."""
    header = ["scenario", "runner", "runs", "kills by phase", "records", "lost", "duplicated",
              "state exact", "recovery s med/max (incl. start)", "(after Spark up)", "time s"]
    rows = [header]
    for o in outcomes:
        if o.unsupported:
            rows.append([o.scenario, o.runner, str(len(o.runs)), f"not run: {o.unsupported}",
                         "-", "-", "-", "-", "-", "-", f"{o.seconds:.0f}"])
            continue
        kills = o.kills
        cell = ", ".join(f"{p} {kills[p]}" for p in PHASES if kills[p]) or "none"
        if o.outages:
            cell += f"; redis restarts {o.outages}"
        rows.append([o.scenario, o.runner, str(len(o.runs)), cell, str(o.records), str(o.lost),
                     f"{o.duplicated}" + (f" (+{o.duplicate_copies})" if o.duplicated else ""),
                     "yes" if o.state_exact else "no", _seconds(o.recovery(False)),
                     _seconds(o.recovery(True)) if o.runner == "spark" else "-",
                     f"{o.seconds:.0f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {o.scenario}/{o.runner}: {p}" for o in outcomes for p in o.problems]
    if notes:
        lines += ["", "problems:", *notes]
    return "\n".join(lines)
