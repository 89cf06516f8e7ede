"""The SIGKILL harness the crash tests share: a driver program started again and again on one
checkpoint, killed with its whole process group, until a start finishes.

A driver runs in a session of its own (its JVM and Python workers on Spark share its process
group), so one `killpg` takes everything it started, as a machine's power cut would. Its output
goes to numbered files in the work directory (a pipe nobody reads would fill and block it), and
a start that outlives its time is killed and reported with the end of its stderr.

    crash = Restarts(tmp, lambda n: [sys.executable, str(script), str(n)])
    mid_batch = lambda proc, n: crash.kill_when(proc, lambda: half_done_batch(ckpt))
    kills = crash.until_done(lambda: (tmp / "done.json").exists(), limit=12, kill=mid_batch)

`Restarts` is a context manager: leaving it kills whatever start is still running.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from support.processes import spawn, stop_group

Killer = Callable[[subprocess.Popen, int], bool]


class Restarts:
    """Starts of one driver program in `workdir`; `argv(n)` is the command of start `n`."""

    def __init__(self, workdir: Path, argv: Callable[[int], Sequence[str]] | Sequence[str], *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 start_timeout_s: float = 600.0) -> None:
        self.workdir = workdir
        self._argv = argv
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        self.cwd = cwd
        self.start_timeout_s = start_timeout_s
        self.starts = 0
        self.kills = 0
        self._live: list[subprocess.Popen] = []

    def __enter__(self) -> Restarts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def argv(self, n: int) -> list[str]:
        """The command of start `n`."""
        return list(self._argv(n) if callable(self._argv) else self._argv)

    def stderr(self, n: int | None = None) -> str:
        """Start `n`'s stderr (the last start's by default)."""
        n = self.starts - 1 if n is None else n
        path = self.workdir / f"start-{n}.err"
        return path.read_text(errors="replace") if path.exists() else ""

    def stdout(self, n: int | None = None) -> str:
        """Start `n`'s stdout (the last start's by default)."""
        n = self.starts - 1 if n is None else n
        path = self.workdir / f"start-{n}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def output(self, n: int | None = None, tail: int = 3000) -> str:
        """The ends (`tail` characters each) of start `n`'s stdout and stderr, the last start's
        by default: an assertion message."""
        return (f"start {self.starts - 1 if n is None else n}: stdout ends:\n"
                f"{self.stdout(n)[-tail:]}\nstderr ends:\n{self.stderr(n)[-tail:]}")

    def start(self, **env: str) -> subprocess.Popen:
        """Start the next run (its number is `proc.start`), with `env` added to its environment."""
        n = self.starts
        self.starts += 1
        with open(self.workdir / f"start-{n}.out", "w") as out, \
                open(self.workdir / f"start-{n}.err", "w") as err:
            proc = spawn(self.argv(n), env={**self.env, **env}, cwd=self.cwd, stdout=out,
                         stderr=err)
        proc.start = n  # type: ignore[attr-defined]
        self._live.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL the start's whole process group, and reap it."""
        self._end(proc)
        self.kills += 1

    def wait_until(self, proc: subprocess.Popen, moment: Callable[[], bool],
                   timeout_s: float = 300.0, poll_s: float = 0.005) -> bool:
        """Wait while `proc` runs until `moment()` holds; True if it did. False if the start
        ended first or the time is up (it is then left running). `moment` may read files the
        driver is writing: an error reading one counts as "not yet"."""
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if moment():
                    return True
            except (OSError, EOFError, ValueError, pickle.UnpicklingError):
                pass  # a file being written
            time.sleep(poll_s)
        return False

    def kill_when(self, proc: subprocess.Popen, moment: Callable[[], bool],
                  timeout_s: float = 300.0, poll_s: float = 0.005) -> bool:
        """Kill `proc` the moment `moment()` holds; True if it did. A start that ends first
        returns False; one still running when the time is up is killed (and counted) too."""
        if self.wait_until(proc, moment, timeout_s, poll_s):
            self.kill(proc)
            return True
        if proc.poll() is None:
            self.kill(proc)
        return False

    def kill_mid_batch(self, proc: subprocess.Popen, ckpt: Path,
                       timeout_s: float = 240.0) -> bool:
        """Kill a Spark start at checkpoint `ckpt` once a batch is half done (`half_done_batch`);
        True if it did, as `kill_when`."""
        return self.kill_when(proc, lambda: half_done_batch(ckpt), timeout_s)

    def kill_after(self, proc: subprocess.Popen, delay_s: float) -> bool:
        """Kill `proc` after `delay_s` unless it ends before; True if it was killed."""
        try:
            proc.wait(delay_s)
            return False
        except subprocess.TimeoutExpired:
            self.kill(proc)
            return True

    def finish(self, proc: subprocess.Popen, timeout_s: float | None = None) -> int:
        """Wait for the start to end by itself; its exit code. One that runs past the time is
        killed and the test fails with the end of its stderr."""
        try:
            rc = proc.wait(self.start_timeout_s if timeout_s is None else timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise AssertionError(f"start {proc.start} did not end in time; its stderr ends:\n"  # type: ignore[attr-defined]
                                 f"{self.stderr(proc.start)[-3000:]}") from None  # type: ignore[attr-defined]
        self._end(proc)  # anything it left behind in its group
        return rc

    def until_done(self, done: Callable[[], bool], limit: int,
                   kill: Killer | None = None, **env: str) -> int:
        """Start again and again until `done()` holds after a start; the number of kills.

        Each start is handed to `kill(proc, n)` (None: the driver kills itself, or ends), then
        waited for. A start that ends with neither `done()` nor a SIGKILL fails the test."""
        for _ in range(limit):
            proc = self.start(**env)
            killed = kill(proc, proc.start) if kill else False  # type: ignore[attr-defined]
            rc = proc.returncode if killed else self.finish(proc)
            if killed:
                continue
            if done():
                return self.kills
            if rc == -signal.SIGKILL:  # the driver killed its own group
                self.kills += 1
                continue
            raise AssertionError(f"start {proc.start} ended with {rc} and is not done; its "  # type: ignore[attr-defined]
                                 f"stderr ends:\n{self.stderr(proc.start)[-3000:]}")  # type: ignore[attr-defined]
        raise AssertionError(f"not done after {limit} starts ({self.kills} killed)")

    def _end(self, proc: subprocess.Popen) -> None:
        """SIGKILL what is left of the start's group and reap it; `close` then leaves it alone
        (its pid, once reaped, may be another process's)."""
        stop_group(proc)
        if proc in self._live:
            self._live.remove(proc)

    def close(self) -> None:
        """SIGKILL the group of every start not yet ended through `kill` or `finish`."""
        for proc in self._live:
            stop_group(proc)
        self._live.clear()


def half_done_batch(ckpt: Path) -> bool:
    """Whether a Spark run at `ckpt` has a task snapshot of a batch the driver has not committed
    (past its first batches): the moment a SIGKILL lands mid-batch."""
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
