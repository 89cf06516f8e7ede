"""Creating the Spark session squall runs on, with defaults that suit a streaming topology."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from typing import Any

from squall.errors import SquallError

DEFAULT_MASTER = "local[*]"

DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    # Arrow batches between the JVM and Python workers; mapInArrow stages rely on it.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",  # keep one partition per task: no coalescing
    # The query's offset and commit logs (two files a micro-batch) written through Hadoop's
    # FileSystem (a temporary file renamed), not its FileContext, whose rename on a local file
    # system without Hadoop's native library runs `readlink` four times and `chmod` once per
    # file as child processes of the JVM: 90 ms a batch of the two logs against 28 ms
    # (docs/design/spark-runner.md, "Batch size"). Spark's own choice where FileContext is not
    # supported; the rename is as atomic on a local or HDFS file system.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager",
}

# The daemon the Python workers are forked from, with squall's worker-side modules loaded
# (worker_daemon.py); set only where the executors run this interpreter (a loopback master).
WORKER_DAEMON = {"spark.python.daemon.module": "squall.runtime.spark.worker_daemon"}


class SparkUnavailableError(SquallError):
    """Spark cannot start here; the message says why and what to do."""


def check_master(master: str | None) -> None:
    """Refuse a master URL Spark would refuse (its rule: "yarn", or `local...`, `spark://...`,
    `k8s://...`), before Spark starts and says so only in its own log.

    >>> check_master("local[2]"); check_master("spark://10.0.0.5:7077"); check_master(None)
    >>> check_master("sprak://10.0.0.5:7077")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.runtime.spark.session.SparkUnavailableError: master 'sprak://10.0.0.5:7077' is ...
    """
    if master is None or master == "yarn" or master.startswith(("local", "spark://", "k8s://")):
        return
    raise SparkUnavailableError(
        f"master {master!r} is not a Spark master URL: give local[*] (or local, local[N]), "
        "spark://HOST:PORT, yarn or k8s://HOST:PORT; nothing was run")


def get_session(master: str | None = None, conf: Mapping[str, Any] | None = None):
    """The active session, or a new one for `master` with squall's defaults and `spark.*` conf."""
    check_master(master)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkUnavailableError(
            "Java was not found: Spark needs Java 17 (install openjdk-17-jre-headless, or set "
            "JAVA_HOME), or run with --runner local"
        )
    if master and master.startswith("spark://"):
        _check_reachable(master)
    # Executors' Python workers must run this interpreter (the one squall is installed in).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    loopback = is_loopback_master(master or (conf or {}).get("spark.master"))
    if loopback:
        # Listen on loopback only (the host name may resolve to an unreachable interface). Not
        # for a remote cluster: its executors must reach the driver at a routable address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Imported here: `squall submit` imports this module for `is_loopback_master`, and the CLI
    # must not take the seconds pyspark needs to load before it has anything to run.
    from pyspark.sql import SparkSession  # noqa: PLC0415

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName("squall")
    for key, value in session_settings(conf, loopback).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkUnavailableError(
            f"could not start Spark with master {master or DEFAULT_MASTER!r}: {exc}. Check the "
            "master URL (spark://host:port, local[*], yarn, k8s://...) and that it is reachable"
        ) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_settings(conf: Mapping[str, Any] | None, loopback: bool) -> dict[str, str]:
    """squall's settings of a new session, and the `spark.*` keys of `conf` over them.

    >>> session_settings({}, loopback=True)["spark.python.daemon.module"]
    'squall.runtime.spark.worker_daemon'
    >>> "spark.python.daemon.module" in session_settings({}, loopback=False)
    False
    >>> own = session_settings({"spark.python.daemon.module": "pyspark.daemon",
    ...                         "squall.spark.fusion": False}, loopback=True)
    >>> own["spark.python.daemon.module"], "squall.spark.fusion" in own
    ('pyspark.daemon', False)
    """
    settings = dict(DEFAULTS) | (WORKER_DAEMON if loopback else {})
    log_config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log_config}"
    settings.update({k: str(v) for k, v in (conf or {}).items() if k.startswith("spark.")})
    return settings


def is_loopback_master(master: str | None) -> bool:
    """Whether every executor of `master` runs on this machine (local modes, spark://127.x)."""
    if not master or master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [hp.rpartition(":")[0] for hp in master[len("spark://"):].split(",")]
    return all(h.startswith("127.") or h in ("localhost", "[::1]") for h in hosts)


def _check_reachable(master: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a standalone master nobody listens on (Spark itself retries for minutes)."""
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            last = exc
    raise SparkUnavailableError(
        f"cannot reach the Spark master {master} ({last}); start it, or check the URL "
        "(spark://HOST:PORT, default port 7077); nothing was run"
    )
