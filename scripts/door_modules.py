"""How many of squall's modules a topology passes through on its way from a door to its runner's
run loop: `make_runner(...).run()` and `complete_topology(...)`, on the local runner, for a tiny
topology of each kind (Storm's API, transactional, Trident).

    .venv/bin/python scripts/door_modules.py            # the table
    .venv/bin/python scripts/door_modules.py --list     # and each path's modules

Each door is called once untraced (every module is imported then), then again under
`sys.setprofile`: every Python function called in a `squall.*` module counts its module, from the
door's call until the local runner's run loop starts (`LocalEngine._drive`, the Trident runner's
`drive`). What the path costs to read, not to run: it counts modules, not calls or time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from squall import BasicBolt, Fields, TopologyBuilder
from squall.runners import make_runner
from squall.testing import FixedTupleSpout, complete_topology
from squall.transactional import BatchBolt, MemoryTransactionalSpout, TransactionalTopologyBuilder
from squall.trident import FixedBatchSpout, Function, TridentTopology

# The functions whose call starts a local runner's run loop: (module, function name).
LOOPS = {("squall.runtime.local.engine", "_drive"), ("squall.runtime.local.trident", "drive")}


class Sink(BasicBolt):
    def execute(self, tup: Any, collector: Any) -> None:
        pass


class CountBatch(BatchBolt):
    def prepare(self, conf: Any, context: Any, collector: Any, attempt: Any) -> None:
        self.n = 0

    def execute(self, tup: Any) -> None:
        self.n += 1

    def finish_batch(self) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        pass


class Upper(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit([tup["w"].upper()])


def storm() -> Any:
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([["a"], ["b"]], Fields("w")))
    b.set_bolt("sink", Sink()).shuffle_grouping("words")
    return b.create_topology()


def transactional() -> Any:
    spout = MemoryTransactionalSpout({0: [["a"], ["b"]]}, Fields("w"), 2)
    b = TransactionalTopologyBuilder("words", "spout", spout, 1)
    b.set_bolt("count", CountBatch()).none_grouping("spout")
    return b.create_topology()


def trident() -> Any:
    t = TridentTopology()
    t.new_stream("words", FixedBatchSpout(["w"], 2, ["a"], ["b"])) \
        .each(["w"], Upper(), ["u"]).name("upper")
    return t.build()


KINDS: dict[str, Callable[[], Any]] = {
    "Storm API": storm, "transactional": transactional, "Trident": trident}
DOORS: dict[str, Callable[[Any], Any]] = {
    "make_runner": lambda topology: make_runner(topology, runner="local").run(),
    "complete_topology": complete_topology,
}


def modules_on_the_way(door: Callable[[Any], Any], topology: Any) -> list[str]:
    """The `squall.*` modules called into from `door(topology)` until the run loop starts."""
    seen: dict[str, None] = {}
    started = False

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        nonlocal started
        if started or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if (module, frame.f_code.co_name) in LOOPS:
            started = True
        elif module == "squall" or module.startswith("squall."):
            seen.setdefault(module)

    sys.setprofile(profile)
    try:
        door(topology)
    finally:
        sys.setprofile(None)
    if not started:
        raise RuntimeError("the run loop was never entered: update LOOPS")
    return list(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each path's modules")
    args = parser.parse_args()
    print(f"{'kind':<15}" + "".join(f"{door:>20}" for door in DOORS))
    listed = []
    for kind, build in KINDS.items():
        counts = []
        for name, door in DOORS.items():
            door(build())  # imports everything the path needs, untraced
            modules = modules_on_the_way(door, build())
            counts.append(len(modules))
            listed.append((f"{kind} / {name}", modules))
        print(f"{kind:<15}" + "".join(f"{n:>20}" for n in counts))
    if args.list:
        for title, modules in listed:
            print(f"\n{title} ({len(modules)}):\n  " + "\n  ".join(modules))


if __name__ == "__main__":
    main()
