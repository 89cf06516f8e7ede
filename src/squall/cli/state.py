"""`squall state`: Trident's partitioned durable states under a checkpoint location, offline.

    squall state list CHECKPOINT
    squall state repartition CHECKPOINT STATE --partitions N

`list` prints each state's name (as its directory is named) and number of partitions.
`repartition` rewrites a state into N partitions, with the run that writes it stopped: every
entry keeps its value and the txid that wrote it, so the next run goes on exactly where the last
one ended (`squall.trident.state.durable.repartition`). The next run must then ask for N, or
leave `squall.trident.state.partitions` unset.

Exit status: 0 when done; 2 with one line on stderr when the checkpoint holds no such state or
N is not a positive integer.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from squall.errors import ConfigError
from squall.trident.state.durable import (
    DurableMapStateFactory,
    repartition,
    state_directories,
    stored_partitions,
)


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser("state", help="list or repartition Trident's durable states offline")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the durable states of a checkpoint location")
    listing.add_argument("checkpoint", help="the run's checkpoint location")
    listing.set_defaults(func=list_states)
    change = actions.add_parser("repartition",
                                help="rewrite a state into another number of partitions")
    change.add_argument("checkpoint", help="the run's checkpoint location")
    change.add_argument("state", help="the state's name (its TridentState name)")
    change.add_argument("--partitions", "-n", type=int, required=True, metavar="N",
                        help="the new number of partitions")
    change.set_defaults(func=repartition_state)


def _fail(message: str) -> int:
    print(f"squall state: {message}", file=sys.stderr)
    return 2


def list_states(args: argparse.Namespace) -> int:
    try:
        states = state_directories(args.checkpoint)
    except ConfigError as exc:
        return _fail(str(exc))
    for name, directory in states.items():
        print(f"{name}\t{stored_partitions(directory)} partitions")
    return 0


def repartition_state(args: argparse.Namespace) -> int:
    try:
        directory = DurableMapStateFactory().state_directory(args.state, args.checkpoint)
        if not os.path.isdir(directory):
            known = ", ".join(state_directories(args.checkpoint)) or "none"
            return _fail(f"no durable state {args.state!r} under {args.checkpoint} (states: "
                         f"{known})")
        before = repartition(directory, args.state, args.partitions)
    except ConfigError as exc:
        return _fail(str(exc))
    print(f"state {args.state!r}: {before} -> {args.partitions} partitions")
    return 0
