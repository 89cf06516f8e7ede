"""`complete_topology`: run a topology until all its input is processed, and return its output.

A Trident topology (`squall.trident`) runs batch by batch until every spout is exhausted;
`tuples(operation)` gives each operation's output rows in batch order, and a mocked Trident
spout is one batch of the given rows:

>>> from squall.trident import TridentTopology, Count, FixedBatchSpout, Function
>>> class Split(Function):
...     def execute(self, tup, collector):
...         for w in tup["sentence"].split():
...             collector.emit([w])
>>> t = TridentTopology()
>>> words = t.new_stream("sentences", FixedBatchSpout(["sentence"], 1, ["x"]))
>>> _ = (words.each(["sentence"], Split(), ["word"]).group_by(["word"])
...      .aggregate(Count(), ["n"]).name("count"))
>>> result = complete_topology(
...     t.build(), mocked_sources=MockedSources({"sentences": [["a b"], ["b c"]]}))
>>> sorted(result.tuples("count"))
[['a', 1], ['b', 2], ['c', 1]]
>>> result.extra["committed"]
[1]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle

from squall.results import ComponentStats, ErrorRecord
from squall.runners import check_runner, make_runner
from squall.runtime.clock import SimulatedClock
from squall.runtime.run_config import resolve
from squall.testing.fixed import FixedTupleSpout
from squall.testing.time import current_clock
from squall.topology.config import configured_message_timeout_ms
from squall.topology.description import Topology
from squall.trident.plan import is_trident


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
    """The topology did not complete within `max_time_ms` of its runner's clock."""


@dataclasses.dataclass
class CompleteTopologyResult:
    topology: Topology
    captures: dict[int, list[tuple[str, list[Any]]]]
    stats: dict[str, ComponentStats]
    errors: list[ErrorRecord]
    spout_instances: dict[int, Any]  # `Runner.spout_instances` after the run
    # Per spout task, the message ids the framework acked and failed on the spout, in order.
    settled_ids: dict[int, dict[str, list[Any]]]
    elapsed_ms: int
    # The run's `RunResult.extra` (Trident: "batches", "committed", "failed_attempts", "outputs").
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

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
        if component in self.extra.get("uncollected", ()):
            raise ValueError(
                f"{component!r} ran inside Spark: its rows never reach the driver, so they are "
                "not captured (its counts are in stats). Read the aggregation it feeds, or run "
                "complete_topology with runner='local' to see them")
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


def with_mocked_trident_sources(topology: Topology, mocked: MockedSources) -> Topology:
    """A copy of Trident `topology` whose mocked spouts emit their rows as one batch (a
    `FixedBatchSpout` with the spout's fields)."""
    from squall.trident.spouts import FixedBatchSpout  # noqa: PLC0415

    specs = dict(topology.components)
    for spout_id, streams in mocked.data.items():
        spec = specs.get(spout_id)
        if spec is None or spec.kind != "spout":
            raise KeyError(f"mocked source {spout_id!r} is not a spout of the topology "
                           f"(spouts: {sorted(topology.spouts)})")
        unknown = sorted(set(streams) - {"default"})
        if unknown:
            raise KeyError(f"Trident spout {spout_id!r} has only the default stream, "
                           f"not {unknown[0]!r}")
        node = spec.new_instance()
        rows = streams.get("default", [])
        fixed = FixedBatchSpout(node.fields, len(rows) or 1, *rows)
        node = dataclasses.replace(node, spout=fixed)
        specs[spout_id] = dataclasses.replace(
            spec, payload=cloudpickle.dumps(node), class_name="FixedBatchSpout")
    return Topology(specs)


TRIDENT_MAX_ATTEMPTS = "squall.trident.max.attempts"
TRIDENT_TEST_ATTEMPTS = 10


def complete_topology(
    topology: Topology,
    conf: Mapping[str, Any] | None = None,
    *,
    runner: str = "local",
    mocked_sources: MockedSources | None = None,
    max_time_ms: int | None = None,
) -> CompleteTopologyResult:
    """Run until every spout is exhausted and every tracked tuple is acked or failed (Trident
    and transactional topologies: every batch committed), on the runner `make_runner` gives.

    On the local runner time is simulated: the active `simulated_time()` clock if there is one,
    otherwise a fresh clock from 0, so timeouts take no real time and runs repeat exactly (a
    Trident batch or a transaction takes Storm's batch emit interval of it, and a run that is
    never idle, a spout that emits on every call, moves it 10 s per 10,000 busy rounds). Gives
    up with `CompleteTopologyTimeout` after `max_time_ms` of the runner's time (simulated on the
    local runner, wall time on Spark; default: ten message timeouts and a minute), naming what
    kept the run from completing (`Runner.incomplete`).

    A Trident topology's `tuples(operation)` lists the operation's output rows in batch order,
    `extra` has the committed transactions. A batch that keeps failing fails the run after ten
    attempts (`squall.trident.max.attempts` when set) instead of being replayed for ever.
    """
    check_runner(runner)
    if is_trident(topology):
        if mocked_sources is not None:
            topology = with_mocked_trident_sources(topology, mocked_sources)
        conf = {TRIDENT_MAX_ATTEMPTS: TRIDENT_TEST_ATTEMPTS, **(conf or {})}
    elif mocked_sources is not None:
        topology = with_mocked_sources(topology, mocked_sources)
    config = resolve(topology, conf, runner=runner)
    if max_time_ms is None:
        max_time_ms = 10 * configured_message_timeout_ms(config.effective) + 60_000
    clock = (current_clock() or SimulatedClock()) if runner == "local" else None
    # No Spark session given: a Spark runner takes the active one (a test module's).
    chosen = make_runner(topology, config, runner=runner, clock=clock, capture=True)
    result = chosen.run(until_complete=True, duration_ms=max_time_ms)
    if not chosen.complete():
        time = "simulated time" if runner == "local" else "wall time on Spark"
        errors = "".join(f"; error: {e}" for e in result.errors[:3])
        raise CompleteTopologyTimeout(
            f"topology did not complete within {max_time_ms} ms of {time}: "
            f"{'; '.join(chosen.incomplete())}{errors}. Spouts must say when they are done "
            "(Spout.is_exhausted, a BatchSpout's is_exhausted, a TransactionalSpout's "
            "is_exhausted(partition, meta); FixedBatchSpout: cycle=False) "
            "or be replaced with MockedSources")
    return CompleteTopologyResult(
        topology=topology,
        captures=chosen.captured(),
        stats=result.stats,
        errors=result.errors,
        spout_instances=chosen.spout_instances(),
        settled_ids=chosen.settled_ids(),
        elapsed_ms=result.elapsed_ms,
        extra=dict(result.extra),
    )
