"""`LocalCluster`: Storm's in-process cluster. Each submitted topology runs in its own thread.

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

from squall.results import ComponentStats, RunResult
from squall.runtime.clock import Clock, current_clock
from squall.runtime.local.engine import LocalEngine
from squall.topology.description import Topology


class _Running:
    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.stop = threading.Event()
        self.done = threading.Event()
        self.result: RunResult | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            # Runs until killed: Storm topologies do not end when their spouts go quiet.
            self.result = self.engine.run(until_complete=False, should_stop=self.stop.is_set)
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
        running = _Running(LocalEngine(topology, conf, clock=clock,
                                       checkpoint_location=checkpoint_location))
        self._topologies[name] = running
        running.thread.start()

    def kill_topology(self, name: str) -> RunResult:
        running = self._topologies.pop(name)
        running.stop.set()
        running.done.wait()
        running.thread.join()
        assert running.result is not None
        return running.result

    def wait_until_complete(self, name: str, timeout_s: float = 60.0) -> bool:
        """Wait until every spout is exhausted and every tracked tree settled."""
        engine = self._topologies[name].engine
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # Read-only look at the engine from another thread; a stale answer only delays.
            if engine.started and engine.complete():
                return True
            time.sleep(0.01)
        return False

    def get_stats(self, name: str) -> dict[str, ComponentStats]:
        return self._topologies[name].engine.component_stats()

    def shutdown(self) -> None:
        for name in list(self._topologies):
            self.kill_topology(name)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
