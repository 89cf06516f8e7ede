"""`python -m tests.crash.chaos [--long] [--runner spark|local] [--scenario NAME] [--kills N]`:
run the chaos scenarios and print the table (scenario, runner, runs, kills by phase, records, lost,
duplicated, state exact, recovery times). Exits 1 if any scenario lost, duplicated or miscounted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from .harness import RUNNERS, local_kills, run_scenario, scenarios, table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.crash.chaos", description=__doc__)
    p.add_argument("--long", action="store_true", help="the long version (20+ kills each)")
    p.add_argument("--runner", action="append", choices=RUNNERS,
                   help="runner(s) to use (default: both)")
    p.add_argument("--scenario", action="append", help="scenario name(s) (default: all)")
    p.add_argument("--kills", type=int, default=None, help="kills per scenario (override)")
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--workdir", default=None, help="where runs keep their files (default: a "
                   "temporary directory; directories of failed scenarios are kept)")
    args = p.parse_args(argv)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="squall-chaos-"))
    outcomes = []
    began = time.monotonic()
    for scenario in scenarios(args.long):
        if args.scenario and scenario.name not in args.scenario:
            continue
        for runner in args.runner or RUNNERS:
            kills = args.kills
            if kills is None and runner == "local":
                kills = local_kills(scenario, args.long)
            outcome = run_scenario(
                scenario, runner, base / f"{scenario.name}-{runner}", seed=args.seed,
                kills=kills, log=lambda msg: print(msg, file=sys.stderr, flush=True))
            outcomes.append(outcome)
            print(table([outcome]).splitlines()[2], file=sys.stderr, flush=True)
    print(table(outcomes))
    if args.workdir is None and not any(base.iterdir()):
        base.rmdir()  # every scenario passed: nothing to keep
        print(f"\n{time.monotonic() - began:.0f} s")
    else:
        print(f"\n{time.monotonic() - began:.0f} s; files of failed scenarios kept under {base}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
