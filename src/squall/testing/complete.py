"""`complete_topology`: run a topology until all its input is processed, and return its output."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle

from squall.results import ComponentStats, ErrorRecord
from squall.runners import check_runner
from squall.runtime.clock import SimulatedClock
from squall.runtime.local.engine import LocalEngine
from squall.task.tasks import SpoutTask
from squall.testing.fixed import FixedTupleSpout
from squall.testing.time import current_clock
from squall.topology.config import Config, configured_message_timeout_ms
from squall.topology.description import Topology


class MockedSources:
    """Data that replaces spouts in `complete_topology`.

    `MockedSources({"spout": [[v1, v2], ...]})` feeds the default stream;
    `MockedSources({"spout": {"stream": [...]}})` feeds named streams.
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.data: dict[str, dict[str, list[list[Any]]]] = {}
        for spout_id, rows in (data or {}).items():
            if isinstance(rows, Mapping):
                for stream, values in rows.items():
                    self.add_mock_data(spout_id, *values, stream=stream)
            else:
                self.add_mock_data(spout_id, *rows)

    def add_mock_data(self, spout_id: str, *values: Sequence[Any], stream: str = "default") -> None:
        self.data.setdefault(spout_id, {}).setdefault(stream, []).extend(
            list(v) for v in values
        )


class CompleteTopologyTimeout(RuntimeError):
    """The topology did not complete within the simulated time allowed."""


@dataclasses.dataclass
class CompleteTopologyResult:
    topology: Topology
    captures: dict[int, list[tuple[str, list[Any]]]]
    stats: dict[str, ComponentStats]
    errors: list[ErrorRecord]
    spout_instances: dict[int, Any]  # local runner: the spout tasks' instances after the run
    # Per spout task, the message ids the framework acked and failed on the spout, in order.
    settled_ids: dict[int, dict[str, list[Any]]]
    elapsed_ms: int

    def tuples_by_task(self, component: str, stream: str = "default") -> dict[int, list[list]]:
        return {
            t: [v for s, v in self.captures.get(t, []) if s == stream]
            for t in self.topology.component_tasks(component)
        }

    def tuples(self, component: str, stream: str = "default") -> list[list[Any]]:
        """Values `component` emitted on `stream`: task by task in task-id order, each in order."""
        if component not in self.topology.components:
            raise KeyError(f"no component {component!r}; components: "
                           f"{sorted(self.topology.components)}")
        return [v for vs in self.tuples_by_task(component, stream).values() for v in vs]

    def _settled(self, spout: str, kind: str) -> list[Any]:
        if spout not in self.topology.spouts:
            raise KeyError(f"no spout {spout!r}; spouts: {sorted(self.topology.spouts)}")
        return [msg_id for t in self.topology.component_tasks(spout)
                for msg_id in self.settled_ids.get(t, {}).get(kind, [])]

    def acked(self, spout: str) -> list[Any]:
        """Message ids whose trees completed, as the spout's `ack` received them: task by task
        in task-id order, each in order."""
        return self._settled(spout, "ack")

    def failed(self, spout: str) -> list[Any]:
        """Message ids whose trees failed or timed out, as the spout's `fail` received them."""
        return self._settled(spout, "fail")


def with_mocked_sources(topology: Topology, mocked: MockedSources) -> Topology:
    """A copy of `topology` whose mocked spouts are `FixedTupleSpout`s with the same streams."""
    specs = dict(topology.components)
    for spout_id, streams in mocked.data.items():
        spec = specs.get(spout_id)
        if spec is None or spec.kind != "spout":
            raise KeyError(f"mocked source {spout_id!r} is not a spout of the topology "
                           f"(spouts: {sorted(topology.spouts)})")
        for stream in streams:
            if stream not in spec.streams:
                raise KeyError(f"spout {spout_id!r} declares no stream {stream!r}")
        fixed = FixedTupleSpout(
            {s: streams.get(s, []) for s in spec.streams},
            {s: st.fields for s, st in spec.streams.items()},
        )
        specs[spout_id] = dataclasses.replace(
            spec, payload=cloudpickle.dumps(fixed), class_name="FixedTupleSpout"
        )
    return Topology(specs)


def complete_topology(
    topology: Topology,
    conf: Mapping[str, Any] | None = None,
    *,
    runner: str = "local",
    mocked_sources: MockedSources | None = None,
    max_time_ms: int | None = None,
) -> CompleteTopologyResult:
    """Run until every spout is exhausted and every tracked tuple is acked or failed.

    Time is simulated: the active `simulated_time()` clock if there is one, otherwise a fresh
    clock from 0, so timeouts take no real time and runs repeat exactly. Gives up with
    `CompleteTopologyTimeout` after `max_time_ms` of simulated time (default: ten message
    timeouts), naming the spouts that are not exhausted.
    """
    check_runner(runner)
    if mocked_sources is not None:
        topology = with_mocked_sources(topology, mocked_sources)
    if runner == "spark":
        return _complete_on_spark(topology, conf, max_time_ms)
    effective = Config.effective_of(conf)
    if max_time_ms is None:
        max_time_ms = 10 * configured_message_timeout_ms(effective) + 60_000
    clock = current_clock() or SimulatedClock()
    engine = LocalEngine(topology, conf, clock=clock, capture=True)
    start = clock.now_ms()
    result = engine.run(
        until_complete=True, should_stop=lambda: clock.now_ms() - start > max_time_ms
    )
    if not engine.complete():
        stuck = [s.component_id for s in engine.spouts if not s.exhausted()]
        raise CompleteTopologyTimeout(
            f"topology did not complete within {max_time_ms} ms of simulated time: "
            f"spouts not exhausted: {sorted(set(stuck))}; tracked tuples pending: "
            f"{engine.pending()}. Spouts must say when they are done (Spout.is_exhausted) "
            "or be replaced with MockedSources"
        )
    return CompleteTopologyResult(
        topology=topology,
        captures=engine.captures,
        stats=result.stats,
        errors=result.errors,
        spout_instances={
            t.task_id: t.instance for t in engine.tasks.values() if isinstance(t, SpoutTask)
        },
        settled_ids={t.task_id: t.settled_ids or {} for t in engine.tasks.values()
                     if isinstance(t, SpoutTask)},
        elapsed_ms=result.elapsed_ms,
    )


def _complete_on_spark(
    topology: Topology, conf: Mapping[str, Any] | None, max_time_ms: int | None
) -> CompleteTopologyResult:
    """`complete_topology` on the Spark runner: real time, one run in a fresh checkpoint."""
    # Loaded here so that `squall.testing` does not load pyspark for local-runner tests.
    from squall.runtime.spark.driver import SparkRunner  # noqa: PLC0415
    from squall.runtime.spark.spouts import read_status  # noqa: PLC0415

    runner = SparkRunner(topology, conf, capture=True)
    wait = max_time_ms if max_time_ms is not None else 300_000
    result = runner.run(until_complete=True, max_wait_ms=wait)
    if not runner.completed:
        raise CompleteTopologyTimeout(
            f"topology did not complete on Spark within {wait} ms; spout status: "
            f"{read_status(runner.dir)}; trees in the ledger: {len(runner.ledger)} "
            f"{runner.ledger.snapshot() if len(runner.ledger) <= 10 else ''}"
        )
    status = read_status(runner.dir) or {"spouts": {}}
    settled = {task: s["settled_ids"] or {} for task, s in status["spouts"].items()}
    captures = {
        task: [(stream, values) for _seq, stream, values in sorted(rows, key=lambda r: r[0])]
        for task, rows in runner.captures.items()
    }
    return CompleteTopologyResult(
        topology=topology, captures=captures, stats=result.stats, errors=result.errors,
        spout_instances={}, settled_ids=settled, elapsed_ms=result.elapsed_ms,
    )
