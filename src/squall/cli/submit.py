"""`squall submit TARGET --master URL`: run a topology through spark-submit, shipping its code.

The driver runs `squall run TARGET --runner spark --master URL ...` (via `submit_entry.py`, the
primary resource) in client mode. The user's code travels with `--py-files`: a file TARGET is
shipped as that file (the driver loads it from its absolute path, as `squall run` does); a module
of a package outside site-packages ships the package directory as a zip, which spark-submit puts
on the driver's and the executors' `PYTHONPATH`; a top-level module outside site-packages ships
its `.py` file. Installed packages ship nothing: the cluster's Python must have them.

spark-submit's own output (its JVM is the driver's in client mode: Spark's log lines) goes to a
log file in `squall run`'s log directory unless `--verbose`, as `squall run` keeps Spark's output
off the terminal; the driver's progress and summary come to standard error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

from squall.cli.control import ControlError, request
from squall.cli.rundir import lookup
from squall.cli.stopping import log_dir
from squall.cli.target import TargetError, parse_overrides, run_name, split_target
from squall.runtime.spark.session import is_loopback_master

SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
# spark-submit merges the Python driver's stderr into its stdout; the driver entry sends its
# stderr (progress, summary) to the FIFO this names instead, and `submit` relays it to stderr.
STDERR_FIFO_ENV = "SQUALL_SUBMIT_STDERR"


class SubmitError(Exception):
    pass


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser("submit", help="run a topology on a Spark cluster through spark-submit")
    p.add_argument("target", help="module:attribute or path/to/file.py:attribute")
    p.add_argument("--master", required=True, metavar="URL",
                   help="Spark master URL (spark://host:port, yarn, k8s://..., local[*])")
    p.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                   help="configuration override (repeatable); spark.* keys also go to "
                        "spark-submit as --conf")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint location; it must be visible at the same path on every "
                        "executor's machine")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds")
    p.add_argument("--progress-every", type=float, default=None, metavar="SECONDS",
                   help="how often the driver prints progress (0 disables)")
    p.add_argument("--name", default=None,
                   help="the name `squall list`/`kill` know the run by (default: TARGET's "
                        "module or file name and attribute)")
    p.add_argument("--stop-timeout", type=float, default=None, metavar="SECONDS",
                   help="on SIGINT/SIGTERM, how long work in flight may take to finish "
                        "(default: squall run's)")
    p.add_argument("--metrics-json", default=None, metavar="FILE",
                   help="as squall run's: the driver appends its metrics snapshots to FILE")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="as squall run's: the driver serves /metrics for Prometheus on PORT")
    p.add_argument("--metrics-host", default=None, metavar="HOST",
                   help="the address --metrics-port listens on (default 127.0.0.1)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="Spark's own output on the terminal instead of the driver's log file")
    p.add_argument("--deploy-mode", default="client", choices=["client"],
                   help="client only: the driver runs here (Spark standalone cannot run a "
                        "Python driver in cluster mode)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the spark-submit command line and exit without running it")
    p.set_defaults(func=main)


def spark_submit_path() -> Path:
    """`bin/spark-submit` of the installed pyspark package."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SubmitError("pyspark is not installed in this Python (pip install pyspark)")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "spark-submit"
    if not os.access(path, os.X_OK):
        raise SubmitError(f"spark-submit not found (or not executable) at {path}; reinstall "
                          "pyspark (pip install --force-reinstall pyspark)")
    return path


def _is_installed(top: str, path: Path) -> bool:
    """True for code the cluster's Python imports without help: installed distributions
    (editable ones too), site-packages and the standard library."""
    if top in importlib.metadata.packages_distributions():
        return True
    path = path.resolve()
    if "site-packages" in path.parts or "dist-packages" in path.parts:
        return True
    return path.is_relative_to(Path(sysconfig.get_paths()["stdlib"]).resolve())


def _package_files(directory: Path) -> list[Path]:
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(
            ".egg-info"))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith(".pyc"))
    return files


def _zip_path(directory: Path, files: list[Path]) -> Path:
    """Where the package's zip goes: named by its contents, so a dry run can name it exactly."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(directory.parent)).encode() + b"\0")
        digest.update(f.read_bytes() + b"\0")
    name = f"{directory.name}-{digest.hexdigest()[:16]}.zip"
    return Path(tempfile.gettempdir()) / "squall-submit" / name


def _write_zip(directory: Path, files: list[Path], dest: Path) -> None:
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.write(f, f.relative_to(directory.parent))
    os.replace(tmp, dest)


def resolve_target(target: str) -> tuple[str, list[Path], tuple[Path, list[Path]] | None]:
    """(target as the driver names it, files to ship, (package dir, its files) to zip or None).

    Only finds the code: the driver imports it and reports a missing attribute.
    """
    module_part, attr, path = split_target(target)
    if path is not None:
        path = path.resolve()
        return f"{path}:{attr}", [path], None
    top = module_part.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise TargetError(f"cannot import module {module_part!r}: {exc}") from exc
    if spec is None:
        raise TargetError(f"cannot import module {module_part!r}: no module named {top!r}")
    locations = list(spec.submodule_search_locations or [])
    if not locations:  # a top-level module, not a package
        if "." in module_part:
            raise TargetError(f"cannot import module {module_part!r}: {top!r} is not a package")
        origin = Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
        if origin is None or _is_installed(top, origin):
            return target, [], None
        return target, [origin.resolve()], None
    package = Path(locations[0])
    if _is_installed(top, package):
        return target, [], None
    rel = Path(*module_part.split(".")[1:]) if "." in module_part else Path()
    candidate = package / rel
    if not (candidate.with_suffix(".py").is_file() or candidate.is_dir()):
        raise TargetError(f"cannot import module {module_part!r}: no {candidate}.py or "
                          f"{candidate}/ in {package}")
    if len(locations) > 1:
        raise TargetError(f"{top!r} is a namespace package spread over {locations}; "
                          "submit cannot ship it as one zip")
    return target, [], (package.resolve(), _package_files(package))


def _forwarded_env(master: str) -> dict[str, str]:
    """The environment spark-submit needs: this interpreter everywhere, the pip package's Spark."""
    env = {
        "SPARK_HOME": str(spark_submit_path().parent.parent),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    if is_loopback_master(master):
        # As `squall run` does: on this machine, the driver JVM listens on loopback only.
        env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def build_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str], Any]:
    """(argv, extra environment, a function writing the files the command needs)."""
    driver_target, ship, package = resolve_target(args.target)
    overrides = parse_overrides(args.conf)  # validates every -c before anything runs
    submit = spark_submit_path()
    cmd = [str(submit), "--master", args.master, "--deploy-mode", args.deploy_mode]
    for pair in args.conf:
        key, _, raw = pair.partition("=")
        if key.startswith("spark.") and key in overrides:
            cmd += ["--conf", f"{key}={raw}"]
    zip_dest = None
    if package is not None:
        zip_dest = _zip_path(*package)
        ship = [*ship, zip_dest]
    if ship:
        cmd += ["--py-files", ",".join(str(p) for p in ship)]
    entry = Path(__file__).resolve().with_name("submit_entry.py")
    cmd += [str(entry), "run", driver_target, "--runner", "spark", "--master", args.master]
    for pair in args.conf:
        cmd += ["-c", pair]
    if args.checkpoint is not None:
        cmd += ["--checkpoint", os.path.abspath(args.checkpoint)]
    if args.duration is not None:
        cmd += ["--duration", repr(args.duration)]
    if args.progress_every is not None:
        cmd += ["--progress-every", repr(args.progress_every)]
    # getattr: callers that build the namespace themselves may leave these out.
    # Named here, so the driver is found by the name `squall submit` knows (its target may
    # be rewritten for the cluster).
    cmd += ["--name", getattr(args, "name", None) or run_name(args.target)]
    if getattr(args, "stop_timeout", None) is not None:
        cmd += ["--stop-timeout", repr(args.stop_timeout)]
    if getattr(args, "metrics_json", None) is not None:
        cmd += ["--metrics-json", os.path.abspath(args.metrics_json)]
    if getattr(args, "metrics_port", None) is not None:
        cmd += ["--metrics-port", str(args.metrics_port)]
    if getattr(args, "metrics_host", None) is not None:
        cmd += ["--metrics-host", args.metrics_host]
    if getattr(args, "verbose", False):
        cmd.append("--verbose")

    def prepare() -> None:
        if package is not None and zip_dest is not None:
            _write_zip(package[0], package[1], zip_dest)

    return cmd, _forwarded_env(args.master), prepare


def main(args: argparse.Namespace) -> int:
    try:
        cmd, env, prepare = build_command(args)
    except (TargetError, SubmitError) as exc:
        print(f"squall submit: {exc}", file=sys.stderr)
        return 2
    line = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(cmd)
    if args.dry_run:
        print(line)
        return 0
    prepare()
    print(f"squall submit: {line}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="squall-submit-") as tmp:
        fifo = os.path.join(tmp, "stderr")
        os.mkfifo(fifo)
        relay = threading.Thread(target=_relay, args=(fifo,), daemon=True)
        relay.start()
        # Its own session: a Ctrl-C on the terminal reaches `squall submit` only, which asks the
        # driver for a graceful stop; spark-submit's JVM would otherwise shut the driver down.
        # spark-submit's own output (its JVM is the driver's: Spark's INFO lines) goes to a log
        # file unless --verbose, as `squall run` sends Spark's output to one.
        log = None if getattr(args, "verbose", False) else _submit_log(
            args.name or run_name(args.target))
        proc = subprocess.Popen(cmd, env={**os.environ, **env, STDERR_FIFO_ENV: fifo},
                                start_new_session=True, stderr=log)
        if log is not None:
            log.close()  # the child holds it
        forward = _ForwardStop(proc, args.name or run_name(args.target), args.stop_timeout)
        forward.install()
        try:
            return proc.wait()
        finally:
            forward.restore()
            if relay.is_alive():  # the driver never opened the FIFO: end the blocked open
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            relay.join(timeout=5)


class _ForwardStop:
    """SIGINT/SIGTERM to `squall submit`: the first asks the driver (found by name in the run
    directory) for a graceful stop through its control endpoint, or, before it has registered,
    sends spark-submit SIGTERM; a second kills spark-submit's process group at once."""

    def __init__(self, proc: subprocess.Popen, name: str, stop_timeout: float | None) -> None:
        self.proc, self.name, self.stop_timeout = proc, name, stop_timeout
        self.signals = 0
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            entry = lookup(self.name)
            if entry is not None:
                print(f"squall submit: {name} received: asking {self.name!r} to stop "
                      "gracefully (a second signal stops it at once)", file=sys.stderr,
                      flush=True)
                path = "/kill" if self.stop_timeout is None else f"/kill?wait={self.stop_timeout}"
                with contextlib.suppress(ControlError):
                    request(entry, "POST", path)
                    return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            return
        print(f"squall submit: {name} received again: stopping spark-submit at once",
              file=sys.stderr, flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _submit_log(name: str) -> Any:
    """A new log file for spark-submit's own output, in `squall run`'s log directory; says where
    on standard error."""
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{name}-submit-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    print(f"squall submit: spark-submit's own output (the driver's JVM) goes to {path}",
          file=sys.stderr, flush=True)
    return open(path, "a")


def _relay(fifo: str) -> None:
    with open(fifo, "rb", buffering=0) as src:
        while chunk := src.read(65536):
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()
