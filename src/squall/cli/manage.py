"""`squall list`, `kill`, `deactivate`, `activate`, `rebalance`: Storm's lifecycle verbs, for
`squall run`.

They find a running topology by name in the run directory (`squall.cli.rundir`) and talk to its
control endpoint (`squall.cli.control`).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any
from urllib.parse import urlencode

from squall.cli.control import ControlError, request
from squall.cli.rundir import RunEntry, alive, lookup, running
from squall.cli.target import TargetError, parse_parallelism

TRANSITION_WAIT_S = 60.0  # a Spark batch being planned finishes first


def add_parsers(verbs: Any) -> None:
    p = verbs.add_parser("list", help="list the topologies running under `squall run`")
    p.set_defaults(func=list_main)
    p = verbs.add_parser("kill", help="stop a running topology: deactivate its spouts, let "
                                      "work in flight finish (up to --wait), then stop")
    p.add_argument("name")
    p.add_argument("--wait", type=float, default=None, metavar="SECS",
                   help="how long work in flight may take (default: the run's --stop-timeout)")
    p.set_defaults(func=kill_main)
    p = verbs.add_parser("rebalance", help="change a running topology's parallelism: stop it "
                                           "as kill does, then start it again on its checkpoint")
    p.add_argument("name")
    p.add_argument("-n", "-e", dest="parallelism", action="append", default=[],
                   metavar="COMPONENT=N", help="the component's new number of tasks (repeatable)")
    p.add_argument("--wait", "-w", type=float, default=None, metavar="SECS",
                   help="how long work in flight may take to finish before the restart "
                        "(default: the run's --stop-timeout)")
    p.set_defaults(func=rebalance_main)
    p = verbs.add_parser("deactivate", help="stop pulling a running topology's spouts")
    p.add_argument("name")
    p.set_defaults(func=lambda a: _simple(a, "deactivate"))
    p = verbs.add_parser("activate", help="pull a deactivated topology's spouts again")
    p.add_argument("name")
    p.set_defaults(func=lambda a: _simple(a, "activate"))


def _find(verb: str, name: str) -> RunEntry | None:
    entry = lookup(name)
    if entry is None:
        names = ", ".join(e.name for e in running()) or "none"
        print(f"squall {verb}: no running topology named {name!r} (running: {names})",
              file=sys.stderr)
    return entry


def _uptime(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s")


def list_main(args: argparse.Namespace) -> int:
    rows = [("NAME", "RUNNER", "UPTIME", "STATUS", "PID", "CHECKPOINT")]
    for entry in running():
        try:
            status = request(entry, "GET", "/status", timeout_s=5.0)["status"]
        except ControlError:
            status = "not answering"
        rows.append((entry.name, entry.runner, _uptime(time.time() - entry.started), status,
                     str(entry.pid), entry.checkpoint or "-"))
    if len(rows) == 1:
        print("no topology is running")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return 0


def _simple(args: argparse.Namespace, verb: str) -> int:
    entry = _find(verb, args.name)
    if entry is None:
        return 1
    try:
        status = request(entry, "POST", f"/{verb}")["status"]
        # On Spark the spouts' reader, a process of its own, carries the request out at its
        # next plan: wait for that, so that "inactive" means no new tuple is emitted.
        deadline = time.monotonic() + TRANSITION_WAIT_S
        while status in ("deactivating", "activating") and time.monotonic() < deadline:
            time.sleep(0.1)
            status = request(entry, "GET", "/status")["status"]
    except ControlError as exc:
        print(f"squall {verb}: {exc}", file=sys.stderr)
        return 1
    print(f"squall {verb}: {entry.name} is {status}")
    return 0


def kill_main(args: argparse.Namespace) -> int:
    entry = _find("kill", args.name)
    if entry is None:
        return 1
    path = "/kill" if args.wait is None else f"/kill?wait={args.wait}"
    try:
        request(entry, "POST", path)
    except ControlError as exc:
        print(f"squall kill: {exc}", file=sys.stderr)
        return 1
    print(f"squall kill: {entry.name} (pid {entry.pid}) is stopping", flush=True)
    # Storm's kill returns once the topology is told; waiting for the process to end as well
    # lets a script restart it right after. The run bounds the wait with its own deadline;
    # the margin covers writing the last commit and Spark's shutdown.
    deadline = time.monotonic() + (args.wait if args.wait is not None else 600.0) + 120.0
    while alive(entry.pid):
        if time.monotonic() > deadline:
            print(f"squall kill: {entry.name} (pid {entry.pid}) has not ended yet",
                  file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"squall kill: {entry.name} stopped")
    return 0


def rebalance_main(args: argparse.Namespace) -> int:
    try:
        changes = parse_parallelism(args.parallelism, "-n")
    except TargetError as exc:
        print(f"squall rebalance: {exc}", file=sys.stderr)
        return 2
    if not changes:
        print("squall rebalance: give at least one -n COMPONENT=N", file=sys.stderr)
        return 2
    entry = _find("rebalance", args.name)
    if entry is None:
        return 1
    query = [("set", f"{cid}={n}") for cid, n in changes.items()]
    if args.wait is not None:
        query.append(("wait", str(args.wait)))
    try:
        answer = request(entry, "POST", f"/rebalance?{urlencode(query)}")
    except ControlError as exc:
        print(f"squall rebalance: {exc}", file=sys.stderr)
        return 1
    # Storm's rebalance returns once the topology is told; the run restarts itself.
    print(f"squall rebalance: {entry.name}: {answer['message']}")
    return 0
