"""Where the time of a short `squall run` goes, from its launch to its exit and its JVM's end.

    .venv/bin/python benchmarks/startup.py [--tree DIR ...] [--runs 2] [--json FILE]
        -- run examples/wordcount.py:topology -c wordcount.sentences=200 --master 'local[2]'

Runs `squall ARGS...` in a process group of its own, `--runs` times per `--tree` (a checkout
whose `src` is imported; default this one), interleaved, and prints for each run the seconds
from the launch at which each step was reached: squall's CLI imported, the Spark runner's
modules imported, the JVM's gateway up, the session up, the runner made (the Python data source
registered), the query's `start()` called and returned, every micro-batch's `foreachBatch` begun
and ended, `query.stop()`, the bolts' cleanup, `main` returned, the process's exit and the end
of the last process of its group (the JVM and its Python workers). The steps are timed by
wrapping the functions that take them in the measured process (`--child`); nothing else changes.
Spark's own parts of each batch (its progress report's `durationMs`) are printed too. Run it
with nothing else on Spark: it starts one Spark per run.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child(argv: list[str]) -> int:
    """Run `squall argv` in this process with its steps timed (written to $STARTUP_MARKS)."""
    launched = int(os.environ["STARTUP_LAUNCH_NS"])
    marks: list[Any] = []

    def mark(what: str) -> None:
        marks.append((what, round((time.time_ns() - launched) / 1e9, 3)))

    def dump() -> None:
        mark("atexit")
        Path(os.environ["STARTUP_MARKS"]).write_text(json.dumps(marks))

    mark("python up")
    atexit.register(dump)
    import squall.cli.main as cli
    import squall.runners as runners

    mark("squall.cli imported")
    make = runners._spark_runner

    def timed(owner: Any, name: str, before: str, after: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(before.format(*args))
            out = inner(*args, **kwargs)
            mark(after.format(*args))
            return out
        setattr(owner, name, wrapper)

    def spark_runner(*args: Any, **kwargs: Any) -> Any:
        mark("make_runner")
        import pyspark.context as context
        from pyspark.sql.streaming.query import StreamingQuery
        from pyspark.sql.streaming.readwriter import DataStreamWriter

        import squall.runtime.spark.driver as driver

        mark("spark modules imported")
        timed(context, "launch_gateway", "JVM launched", "JVM gateway up")
        timed(driver, "get_session", "session asked", "session up")
        timed(DataStreamWriter, "start", "query start()", "query started")
        timed(driver.SparkRunner, "_batch", "batch {2} begins", "batch {2} ends")
        timed(driver.SparkRunner, "_cleanup", "cleanup", "cleanup done")
        stop = StreamingQuery.stop

        def stop_query(query: Any) -> None:
            mark("query.stop()")
            marks.extend(("progress", p["batchId"], p["durationMs"]) for p in query.recentProgress)
            stop(query)
            mark("query stopped")
        StreamingQuery.stop = stop_query  # type: ignore[method-assign]
        runner = make(*args, **kwargs)
        mark("runner made")
        return runner

    runners._spark_runner = spark_runner
    status = cli.main(argv)
    mark("main returned")
    return status


def measure(tree: Path, argv: list[str], marks_file: Path) -> list[Any]:
    env = dict(os.environ, STARTUP_LAUNCH_NS=str(time.time_ns()), STARTUP_MARKS=str(marks_file),
               PYTHONPATH=str(tree / "src"))
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--", *argv], cwd=tree, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    status = proc.wait()
    exited = time.monotonic() - began
    while subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout.strip():
        time.sleep(0.02)
    gone = time.monotonic() - began
    marks = json.loads(marks_file.read_text()) if marks_file.exists() else []
    return [*marks, ("exit", round(exited, 3)), ("group gone", round(gone, 3)), ("status", status)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, default=[])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write every run's steps here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.child:
        sys.exit(child(argv))
    trees = args.tree or [ROOT]
    results = []
    for i in range(args.runs):
        for tree in trees:
            marks_file = Path(tempfile.gettempdir()) / f"squall-startup-{os.getpid()}.json"
            marks = measure(tree.resolve(), [*argv, "--name", f"startup-{i}"], marks_file)
            marks_file.unlink(missing_ok=True)
            results.append({"tree": str(tree), "run": i, "marks": marks})
            print(f"{tree} run {i}")
            for mark in marks:
                print("  ", *mark)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
