"""`LocalCluster`: Storm's in-process cluster. Each submitted topology runs in its own thread.

It hosts whatever runner `squall.runners.make_runner` gives for the `local` runner: a topology
of spouts and bolts, a transactional topology or a Trident topology, as Storm's own
`LocalCluster` runs each of them.

>>> from squall import TopologyBuilder, Fields, BasicBolt
>>> from squall.testing import FixedTupleSpout
>>> class Sink(BasicBolt):
...     def execute(self, tup, collector): pass
>>> b = TopologyBuilder()
>>> _ = b.set_spout("words", FixedTupleSpout([["a"], ["b"], ["c"]], Fields("word")))
>>> _ = b.set_bolt("sink", Sink(), 2).shuffle_grouping("words")
>>> cluster = LocalCluster()
>>> cluster.submit_topology("tiny", {}, b.create_topology())
>>> cluster.wait_until_complete("tiny", timeout_s=10)
True
>>> cluster.get_stats("tiny")["sink"].executed
3
>>> cluster.shutdown()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from squall.protocols import Runner
from squall.results import ComponentStats, RunResult
from squall.runners import make_runner
from squall.runtime.clock import Clock, current_clock
from squall.topology.description import Topology


class _Running:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.done = threading.Event()
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            # Runs until killed: Storm topologies do not end when their spouts go quiet.
            self.result = self.runner.run(until_complete=False)
        except BaseException as exc:  # handed to the thread that kills it
            self.error = exc
        finally:
            self.done.set()


class LocalCluster:
    """Runs topologies in this process until they are killed."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock
        self._topologies: dict[str, _Running] = {}

    def submit_topology(
        self, name: str, conf: Mapping[str, Any] | None, topology: Topology, *,
        checkpoint_location: str | None = None,
    ) -> None:
        """Start `topology`; with `checkpoint_location` it resumes from that checkpoint and
        commits a transaction per batch there (docs/design/local-checkpoint.md), the last one
        when it is killed."""
        if name in self._topologies:
            raise ValueError(f"a topology named {name!r} is already running")
        # An enclosing simulated_time() block drives the cluster's clock, as in Storm's
        # simulated-time local cluster; otherwise wall time.
        clock = self._clock or current_clock()
        runner = make_runner(topology, conf, runner="local", clock=clock,
                             checkpoint_location=checkpoint_location)
        running = _Running(runner)
        self._topologies[name] = running
        running.thread.start()

    def kill_topology(self, name: str, wait_secs: float = 0.0) -> RunResult:
        """Stop `name` and return its result: its spouts stop at once, and what is in flight
        has `wait_secs` to complete (Storm's `killTopologyWithOpts`; a restart from a
        checkpoint replays the rest)."""
        running = self._topologies.pop(name)
        running.runner.request_stop(wait_secs)
        running.done.wait()
        running.thread.join()
        if running.error is not None:
            raise running.error
        assert running.result is not None
        return running.result

    def wait_until_complete(self, name: str, timeout_s: float = 60.0) -> bool:
        """Wait until every spout is exhausted and everything it emitted is settled (Trident
        and transactional topologies: every batch committed)."""
        running = self._topologies[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # Read-only look at the runner from another thread; a stale answer only delays.
            if running.runner.complete():
                return True
            if running.done.is_set():  # it failed: there is nothing more to wait for
                return False
            time.sleep(0.01)
        return False

    def get_stats(self, name: str) -> dict[str, ComponentStats]:
        return self._topologies[name].runner.component_stats()

    def shutdown(self) -> None:
        for name in list(self._topologies):
            self.kill_topology(name)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
