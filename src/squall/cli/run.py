"""`squall run TARGET`: run a topology, showing live progress per component and a summary."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from squall.cli.target import TargetError, load_target, merge_conf, parse_overrides
from squall.errors import SquallError
from squall.runners import DEFAULT_RUNNER, RUNNERS, run


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
    p.set_defaults(func=main)


class _Progress:
    """Prints every component's counters; elapsed time is wall time, for display only."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, runner: Any) -> None:
        stats = runner.component_stats()
        seconds = time.monotonic() - self.started
        lines = [f"[{seconds:7.1f}s]"] + ["  " + s.line() for s in stats.values()]
        print("\n".join(lines), file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    try:
        topology, conf = load_target(args.target)
        conf = merge_conf(conf, parse_overrides(args.conf))
    except TargetError as exc:
        print(f"squall run: {exc}", file=sys.stderr)
        return 2
    print(f"squall: running {args.target} on the {args.runner} runner: {topology}",
          file=sys.stderr)
    if args.runner != "spark" and args.master:
        print("squall run: --master applies to the spark runner", file=sys.stderr)
        return 2
    spark_args = {"master": args.master, "checkpoint_location": args.checkpoint}
    try:
        result = run(
            topology,
            conf,
            runner=args.runner,
            duration=args.duration,
            on_progress=_Progress() if args.progress_every > 0 else None,
            progress_every_ms=int(args.progress_every * 1000) or 1000,
            **(spark_args if args.runner == "spark"
               else {"checkpoint_location": args.checkpoint}),
        )
    except KeyboardInterrupt:
        print("squall: interrupted", file=sys.stderr)
        return 130
    except SquallError as exc:
        print(f"squall run: {exc}", file=sys.stderr)
        return 1
    print("squall: summary", file=sys.stderr)
    print(result.summary(), file=sys.stderr)
    return 0
