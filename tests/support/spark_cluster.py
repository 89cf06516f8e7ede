"""A Spark standalone cluster on loopback: a master and one-core workers, started from
PySpark's own `spark-class` and stopped by pid (workers first, so their executors go too).

Used by the cluster tests and by benchmarks that compare one executor with two.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.ports import free_port


def spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    assert spec and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def master_state(webui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as resp:
        return json.load(resp)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (a worker then stops its executors), SIGKILL if it lingers; always reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:<port>
    webui: int
    work_dirs: list[Path]


@contextlib.contextmanager
def standalone_cluster(base: Path, workers: int = 2, memory: str = "1g",
                       timeout: float = 120) -> Iterator[Cluster]:
    """A master and `workers` one-core workers with their logs and work directories under
    `base`, running until the block ends; waits until every worker has registered."""
    home = spark_home()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    spark_class = str(home / "bin" / "spark-class")
    port, webui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(name: str, *args: str) -> None:
        log = base / f"{name}.log"
        with open(log, "wb") as out:  # spark-class execs java: the pid is the JVM's
            proc = subprocess.Popen([spark_class, *args], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append((name, proc, log))

    def logs() -> str:
        return "\n".join(f"--- {n} (exit {p.poll()}):\n" + log.read_text()[-2000:]
                         for n, p, log in procs)

    work_dirs = [base / f"work-{i}" for i in range(1, workers + 1)]
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(webui))
        for i, work in enumerate(work_dirs, 1):
            work.mkdir()
            start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", url,
                  "--host", "127.0.0.1", "--cores", "1", "--memory", memory,
                  "--work-dir", str(work), "--webui-port", str(free_port()))
        deadline = time.monotonic() + timeout
        while True:
            dead = [n for n, p, _ in procs if p.poll() is not None]
            assert not dead, f"{dead} exited during startup\n{logs()}"
            try:
                if master_state(webui).get("aliveworkers") == workers:
                    break
            except (OSError, ValueError):
                # The master's web UI is not up yet, or answers its HTML page where the JSON
                # will be (seen on a loaded machine).
                pass
            assert time.monotonic() < deadline, \
                f"workers not registered in {timeout:.0f} s\n{logs()}"
            time.sleep(1)
        yield Cluster(url, webui, work_dirs)
    finally:
        for _, proc, _ in reversed(procs):  # workers (and their executors) first
            stop(proc)
