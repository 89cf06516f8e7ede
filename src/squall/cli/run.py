"""`squall run TARGET`: run a topology, showing live progress per component and a summary.

Progress goes to standard error (`squall.cli.progress`): on a terminal one line per component
updated in place, elsewhere plain lines when something changed; the summary at the end gives
totals, rates and latencies. `--metrics-json FILE` appends every interval's `MetricsSnapshot` as
a JSON line (`squall.cli.metrics_file`); `--metrics-port PORT` serves it to Prometheus
(`squall.cli.prometheus`). On Spark, Spark's own output goes to a log file unless `--verbose`,
and the Spark UI's address is printed once Spark has started.

While it runs, the topology is registered in the run directory (`squall.cli.rundir`) under its
`--name`, with a control endpoint on loopback (`squall.cli.control`) that `squall list`, `kill`,
`deactivate`, `activate` and `rebalance` use. SIGINT/SIGTERM stop it gracefully
(`squall.cli.stopping`). A rebalance stops the run as a kill does, then starts it again in this
process on its checkpoint with the new parallelism (the checkpoint carries state, source positions
and pending trees over, `squall.task.reshape`); `--duration` counts from the first start.

Exit status: 0 when the run ended (input done, `--duration` over) or a requested stop finished
every tree in flight (a Trident transaction that failed during the stop is not tried again: it
counts as settled, as a failed tuple tree does, and a restart replays it); 1 on an error, or
when a `squall kill` stop reached its deadline with work in flight; 128 + the signal's number
(130 SIGINT, 143 SIGTERM) when a signal's stop reached `--stop-timeout` with work in flight, or
a second signal stopped the run at once; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from squall.cli.control import ControlServer
from squall.cli.metrics_file import MetricsFile, MetricsFileError
from squall.cli.progress import ProgressDisplay, summary
from squall.cli.prometheus import MetricsServer, MetricsServerError
from squall.cli.rundir import (
    RunDirError,
    RunEntry,
    check_name,
    refuse_if_running,
    register,
    unregister,
)
from squall.cli.stopping import DEFAULT_STOP_TIMEOUT_S, SignalStop, route_spark_output
from squall.cli.target import (
    TargetError,
    load_target,
    merge_conf,
    parse_overrides,
    parse_parallelism,
    run_name,
)
from squall.errors import InvalidTopologyError, SquallError
from squall.metrics.snapshot import MetricsSnapshot
from squall.protocols import Progress, Runner
from squall.results import TRACEBACK_LOGGER
from squall.runners import DEFAULT_RUNNER, RUNNERS, make_runner
from squall.runtime.checkpoint_location import prepare_location
from squall.runtime.lifecycle import ABANDONED
from squall.runtime.spark.session import check_master
from squall.state.providers import DURABLE
from squall.task.reshape import compare, shape
from squall.topology.description import Topology
from squall.ui import UiServer


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser("run", help="run a topology until its input is done or --duration ends")
    p.add_argument("target", help="module:attribute or path/to/file.py:attribute")
    p.add_argument("--runner", default=DEFAULT_RUNNER, choices=RUNNERS,
                   help="spark (default: Spark, local mode unless --master) or local (in-process)")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master URL (default local[*]); -c spark.key=value sets Spark conf")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint location: a restart with the same DIR resumes where the "
                        "last committed batch left off (both runners)")
    p.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                   help="configuration override (repeatable)")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds")
    p.add_argument("--progress-every", type=float, default=1.0, metavar="SECONDS",
                   help="how often to print progress (0 disables)")
    p.add_argument("--parallelism", "-p", action="append", default=[], metavar="COMPONENT=N",
                   help="run COMPONENT with N tasks instead of its parallelism hint "
                        "(repeatable); on a checkpoint, a rescale (see `squall rebalance`)")
    p.add_argument("--name", default=None,
                   help="the name `squall list`/`kill`/`deactivate`/`activate` know this run by "
                        "(default: TARGET's module or file name and attribute, e.g. "
                        "wordcount.topology); one running topology per name")
    p.add_argument("--stop-timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S,
                   metavar="SECONDS",
                   help="on SIGINT/SIGTERM, how long work in flight may take to finish before "
                        f"the run stops anyway (default {DEFAULT_STOP_TIMEOUT_S:g})")
    p.add_argument("--metrics-json", default=None, metavar="FILE",
                   help="append every progress interval's metrics snapshot to FILE as one JSON "
                        "line, and the final one when the run ends (see squall.metrics)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve the latest metrics at http://HOST:PORT/metrics in Prometheus' "
                        "text format (0 picks a free port; the URL is printed at start)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="the address --metrics-port listens on (default 127.0.0.1, loopback "
                        "only; 0.0.0.0 for every interface)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show Spark's own output (JVM, Py4J, Python workers) and errors' full "
                        "tracebacks on the terminal instead of writing them to a log file")
    p.add_argument("--ui", action="store_true",
                   help="serve a live web UI of the run (its address is printed at start)")
    p.add_argument("--ui-port", type=int, default=0, metavar="PORT",
                   help="the web UI's port (default: a free one)")
    p.add_argument("--ui-host", default="127.0.0.1", metavar="HOST",
                   help="the web UI's address (default 127.0.0.1: this machine only)")
    p.set_defaults(func=main)


def _fan_out(callbacks: list[Progress]) -> Progress:
    """One `on_progress` callback calling each of `callbacks` in turn."""
    def each(snapshot: MetricsSnapshot) -> None:
        for callback in callbacks:
            callback(snapshot)
    return each


def _spark_ui(runner: Runner) -> str | None:
    """The Spark UI's address, for a runner on Spark that has one (pyspark is not imported
    here: the runner's session is asked, typed loosely)."""
    spark: Any = getattr(runner, "spark", None)
    url = getattr(getattr(spark, "sparkContext", None), "uiWebUrl", None)
    return url if isinstance(url, str) and url else None


class _Terminal:
    """Points standard error, standard output (when a terminal) and the log handlers that
    write to standard error at `display.wrap(...)`, so that they erase the live progress
    block before writing; `restore` puts everything back."""

    def __init__(self, display: ProgressDisplay) -> None:
        self.saved = (sys.stdout, sys.stderr)
        self.handlers: list[tuple[logging.StreamHandler, TextIO]] = []
        sys.stderr = display.wrap(sys.stderr)
        if sys.stdout.isatty():
            sys.stdout = display.wrap(sys.stdout)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.saved[1]:
                self.handlers.append((handler, handler.stream))
                handler.setStream(sys.stderr)

    def restore(self) -> None:
        for handler, stream in self.handlers:
            handler.setStream(stream)
        sys.stdout, sys.stderr = self.saved


def main(args: argparse.Namespace) -> int:
    try:
        overrides = parse_overrides(args.conf)
        topology, conf = load_target(args.target, overrides)
        conf = merge_conf(conf, overrides)
        topology = topology.with_parallelism(parse_parallelism(args.parallelism))
        name = args.name or run_name(args.target)
        check_name(name)
        refuse_if_running(name)  # before anything starts (register checks it again)
    except (TargetError, RunDirError, InvalidTopologyError) as exc:
        print(f"squall run: {exc}", file=sys.stderr)
        return 2
    if args.runner != "spark" and args.master:
        print("squall run: --master applies to the spark runner", file=sys.stderr)
        return 2
    if args.stop_timeout < 0:
        print(f"squall run: --stop-timeout must be >= 0 seconds, got {args.stop_timeout:g}",
              file=sys.stderr)
        return 2
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        print(f"squall run: --metrics-port must be 0 to 65535, got {args.metrics_port}",
              file=sys.stderr)
        return 2
    try:
        # What Spark would refuse, or a checkpoint that cannot be written: said before Spark
        # starts, in one line.
        if args.runner == "spark":
            check_master(args.master)
        if args.checkpoint is not None:
            prepare_location(args.checkpoint)
    except SquallError as exc:
        print(f"squall run: {exc}", file=sys.stderr)
        return 2
    metrics_file = metrics_server = None
    try:
        if args.metrics_json is not None:
            metrics_file = MetricsFile(args.metrics_json)
        if args.metrics_port is not None:
            metrics_server = MetricsServer(args.metrics_host, args.metrics_port, args.runner)
    except (MetricsFileError, MetricsServerError) as exc:
        if metrics_file is not None:
            metrics_file.close()
        print(f"squall run: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args, topology, conf, name, metrics_file, metrics_server)
    finally:
        if metrics_server is not None:
            metrics_server.close()
        if metrics_file is not None:
            metrics_file.close()


def _run(args: argparse.Namespace, topology: Topology, conf: dict[str, Any], name: str,
         metrics_file: MetricsFile | None, metrics_server: MetricsServer | None) -> int:
    """`main` once the arguments are checked and the metrics outputs are open."""
    print(f"squall: running {args.target} as {name!r} on the {args.runner} runner: "
          f"{topology}", file=sys.stderr)
    # At a second signal the counters come from `result()`, which asks nothing of Spark: the
    # handler interrupts the main thread, maybe inside a Py4J call, so `metrics()` (which asks
    # the query for its progress) could fail there.
    signals = SignalStop(args.stop_timeout, lambda r: r.result().summary())
    signals.install()  # before Spark starts: a stop asked for meanwhile is kept for later
    holder: list[Runner] = []

    rebalance: dict[str, int] = {}  # set by a rebalance request: the next start's changes
    current = [topology]

    def kill(wait_s: float) -> None:
        holder[0].request_stop(wait_s)

    def on_rebalance(changes: dict[str, int], wait_s: float) -> str:
        return _rebalance(current[0], conf, args.checkpoint, changes, rebalance,
                          lambda: kill(wait_s))

    server = ControlServer(lambda: holder[0] if holder else None, name=name,
                           runner_name=args.runner, checkpoint=args.checkpoint,
                           stop_timeout_s=args.stop_timeout, on_kill=kill,
                           on_rebalance=on_rebalance)
    log_path = None
    if args.runner == "spark" and not args.verbose:
        log_path = str(route_spark_output(name))
        print(f"squall: Spark's own output (JVM, Py4J, Python workers) goes to {log_path}",
              file=sys.stderr, flush=True)
    elif args.runner == "spark":
        print("squall: --verbose: Spark's own output (JVM, Py4J, Python workers) comes here",
              file=sys.stderr, flush=True)
    if args.verbose:
        logging.getLogger(TRACEBACK_LOGGER).setLevel(logging.DEBUG)  # full tracebacks here too
    entry = RunEntry(name=name, pid=os.getpid(), port=server.port, token=server.token,
                     runner=args.runner, started=time.time(),
                     checkpoint=os.path.abspath(args.checkpoint) if args.checkpoint else None,
                     target=args.target, log=log_path)
    ui = None
    try:
        ui = UiServer(lambda: holder[0] if holder else None, lambda: current[0], name=name,
                      runner_name=args.runner, host=args.ui_host, port=args.ui_port,
                      spark_ui_of=_spark_ui) if args.ui else None
        register(entry)
    except (RunDirError, OSError) as exc:
        server.close()
        if ui is not None:
            ui.close()
        print(f"squall run: {exc}", file=sys.stderr)
        return 2
    server.start()
    if ui is not None:
        print(f"squall: web UI at {ui.start().url}", file=sys.stderr, flush=True)
    final: list[MetricsSnapshot] = []  # the last snapshot: every runner hands one over at its end

    def keep(snapshot: MetricsSnapshot) -> None:
        final[:] = [snapshot]

    callbacks: list[Progress] = [keep]
    if metrics_file is not None:
        callbacks.append(metrics_file)
    if metrics_server is not None:
        metrics_server.start()
        callbacks.append(metrics_server.update)
        print(f"squall: Prometheus metrics at {metrics_server.url}", file=sys.stderr,
              flush=True)
    display = None
    if args.progress_every > 0:
        # With --verbose on Spark the JVM writes to the terminal too, behind squall's back:
        # lines in place would be overwritten, so they are appended instead.
        display = ProgressDisplay(sys.stderr,
                                  live=False if args.verbose and args.runner == "spark" else None)
        callbacks.append(display)
    terminal = _Terminal(display) if display is not None else None
    ui_shown = False
    ran_ms = 0
    try:
        while True:
            runner = make_runner(current[0], conf, runner=args.runner,
                                 **({"master": args.master} if args.runner == "spark" else {}),
                                 checkpoint_location=args.checkpoint)
            if final:  # started again by a rebalance: the run's figures go on
                runner.carry(final[0])
            holder[:] = [runner]
            signals.attach(runner)
            spark_ui = _spark_ui(runner)
            if spark_ui is not None and not ui_shown:
                print(f"squall: Spark UI at {spark_ui}", file=sys.stderr, flush=True)
                ui_shown = True
            duration_ms = None
            if args.duration is not None:  # the time run so far counts, across rebalances
                duration_ms = max(0, int(args.duration * 1000) - ran_ms)
            began = time.monotonic()
            runner.run(
                duration_ms=duration_ms,
                until_complete=True,
                on_progress=_fan_out(callbacks),
                progress_every_ms=int(args.progress_every * 1000) or 1000,
            )
            ran_ms += int((time.monotonic() - began) * 1000)
            if not rebalance or signals.signum is not None or runner.stopped() is None:
                break
            holder.clear()  # requests wait for the next start ("starting")
            if display is not None:
                display.close()
            print(summary(final[0] if final else runner.metrics()), file=sys.stderr)
            before = current[0]
            current[0] = before.with_parallelism(rebalance)
            moves = ", ".join(f"{cid} {len(before.component_tasks(cid))} -> {n}"
                              for cid, n in sorted(rebalance.items()))
            rebalance.clear()
            print(f"squall: rebalancing {name!r} ({moves} tasks): starting again on "
                  f"checkpoint {args.checkpoint}", file=sys.stderr, flush=True)
    except SquallError as exc:
        print(f"squall run: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # PySpark's SIGINT handler, in place from the SparkContext's start until the runner
        # exists (SignalStop.attach installs ours again).
        print("squall: interrupted while Spark was starting", file=sys.stderr)
        return 130
    finally:
        if display is not None:
            display.close()
        if terminal is not None:
            terminal.restore()
        unregister(entry)
        with contextlib.suppress(Exception):
            server.close()
        if ui is not None:
            with contextlib.suppress(Exception):
                ui.finish()
            ui.close()
        signals.restore()
    print("squall: summary", file=sys.stderr)
    # The runner's last snapshot, the one the JSON file and Prometheus end with.
    print(summary(final[0] if final else runner.metrics()), file=sys.stderr)
    return _stop_status(runner.stopped(), signals.signum)


def _rebalance(topology: Topology, conf: dict[str, Any], checkpoint: str | None,
               changes: dict[str, int], pending: dict[str, int],
               stop: Callable[[], None]) -> str:
    """Check a rebalance request against the running topology, then stop the run for its
    restart; the answer for `squall rebalance`. Refusals raise `SquallError` (the run goes on)."""
    if checkpoint is None:
        raise SquallError("rebalance starts the topology again on its checkpoint, and this run "
                          "has none: its state and source positions would be lost. Start it "
                          "with --checkpoint DIR to rebalance it")
    if pending:
        raise SquallError("a rebalance is already under way")
    new = topology.with_parallelism(changes)
    reshape = compare(shape(topology), new)
    if not reshape.resized:
        raise SquallError("nothing to change: " + ", ".join(
            f"{cid!r} has {n} tasks already" for cid, n in sorted(changes.items())))
    reshape.check(checkpoint, conf, DURABLE)  # RescaleError: refused, the run goes on
    pending.update(changes)
    stop()
    return ("stopping to start again with " + ", ".join(
        f"{cid} {old} -> {n}" for cid, (old, n) in sorted(reshape.resized.items())) + " tasks")


def _stop_status(stopped: str | None, signum: int | None) -> int:
    """Print how a requested stop ended; the exit status (see the module doc)."""
    if stopped is None:
        return 0
    asked = "squall kill" if signum is None else signal.Signals(signum).name
    if stopped == "drained":
        print(f"squall: stopped on request ({asked}): every tuple tree in flight finished",
              file=sys.stderr)
        return 0
    if stopped == ABANDONED:
        print(f"squall: stopped on request ({asked}): a transaction that failed during the stop "
              "was not tried again; a restart with the same checkpoint replays it",
              file=sys.stderr)
        return 0
    print(f"squall: stopped on request ({asked}) with work still in flight after the stop "
          "timeout; a restart with the same checkpoint replays it", file=sys.stderr)
    return 128 + signum if signum is not None else 1
