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

from squall.protocols import Runner
from squall.results import ComponentStats, ErrorRecord, RunResult
from squall.runners import check_runner, make_runner
from squall.runtime.clock import SimulatedClock
from squall.runtime.local.engine import LocalEngine
from squall.runtime.local.trident import BATCH_INTERVAL, LocalTridentRunner
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

    A Trident topology runs until its spouts are exhausted (on simulated time on the local
    runner: each batch takes Storm's batch emit interval); `tuples(operation)` lists the
    operation's output rows in batch order, `extra` has the committed transactions. A batch that
    keeps failing fails the run after ten attempts (`squall.trident.max.attempts` when set)
    instead of being replayed for ever.
    """
    check_runner(runner)
    if is_trident(topology):
        if mocked_sources is not None:
            topology = with_mocked_trident_sources(topology, mocked_sources)
        return _complete_trident(topology, conf, runner, max_time_ms)
    if mocked_sources is not None:
        topology = with_mocked_sources(topology, mocked_sources)
    if runner == "spark":
        return _complete_on_spark(topology, conf, max_time_ms)
    config = resolve(topology, conf, runner="local")
    if max_time_ms is None:
        max_time_ms = 10 * configured_message_timeout_ms(config.effective) + 60_000
    clock = current_clock() or SimulatedClock()
    engine = make_runner(topology, config.user, runner="local", clock=clock, capture=True)
    # The local runner of a topology of spouts and bolts, transactional or not: its spout
    # instances and its stop condition on the simulated clock are what a test inspects.
    assert isinstance(engine, LocalEngine)
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
        captures=engine.captured(),
        stats=result.stats,
        errors=result.errors,
        spout_instances={t.task_id: t.instance for t in engine.spouts},
        settled_ids=engine.settled_ids(),
        elapsed_ms=result.elapsed_ms,
    )


def _complete_on_spark(
    topology: Topology, conf: Mapping[str, Any] | None, max_time_ms: int | None
) -> CompleteTopologyResult:
    """`complete_topology` on the Spark runner (a transactional topology on its transactional
    runner): real time, one run in a fresh checkpoint."""
    runner = make_runner(topology, conf, runner="spark", capture=True)
    wait = max_time_ms if max_time_ms is not None else 300_000
    result = runner.run(until_complete=True, duration_ms=wait)
    if not runner.complete():  # SparkRunner: stays true once a run ended by completing
        ledger = getattr(runner, "ledger", None)  # the tuple trees still tracked, if any
        raise CompleteTopologyTimeout(
            f"topology did not complete on Spark within {wait} ms; errors: "
            f"{[str(e) for e in result.errors[:3]]}; trees in the ledger: "
            f"{None if ledger is None else len(ledger)}")
    return CompleteTopologyResult(
        topology=topology, captures=runner.captured(), stats=result.stats, errors=result.errors,
        spout_instances={}, settled_ids=runner.settled_ids(), elapsed_ms=result.elapsed_ms,
    )


TRIDENT_MAX_ATTEMPTS = "squall.trident.max.attempts"
TRIDENT_TEST_ATTEMPTS = 10


def _complete_trident(topology: Topology, conf: Mapping[str, Any] | None, runner: str,
                      max_time_ms: int | None) -> CompleteTopologyResult:
    """`complete_topology` of a Trident topology: every operation's output captured.

    A failed batch is replayed, but not for ever as in a real run: after
    `TRIDENT_TEST_ATTEMPTS` attempts (unless the configuration sets
    `squall.trident.max.attempts`) the run fails with the batch's error."""
    conf = dict(conf or {})
    conf.setdefault(TRIDENT_MAX_ATTEMPTS, TRIDENT_TEST_ATTEMPTS)
    if runner == "spark":
        # No session given: the runner takes the active one (a test module's).
        chosen = make_runner(topology, conf, runner="spark", capture=True)
        wait = max_time_ms if max_time_ms is not None else 300_000
        result = chosen.run(until_complete=True, duration_ms=wait)
        if not chosen.complete():
            raise CompleteTopologyTimeout(
                f"Trident topology did not complete on Spark within {wait} ms "
                f"({len(result.extra['committed'])} batches committed)")
    else:
        chosen, result = _complete_trident_locally(topology, conf, max_time_ms)
    return CompleteTopologyResult(
        topology=topology, captures=chosen.captured(), stats=result.stats, errors=result.errors,
        spout_instances={}, settled_ids={}, elapsed_ms=result.elapsed_ms,
        extra=dict(result.extra))


def _complete_trident_locally(topology: Topology, conf: Mapping[str, Any] | None,
                              max_time_ms: int | None) -> tuple[Runner, RunResult]:
    config = resolve(topology, conf, runner="local")
    if max_time_ms is None:
        max_time_ms = 10 * configured_message_timeout_ms(config.effective) + 60_000
    clock = current_clock() or SimulatedClock()
    chosen = make_runner(topology, config.user, runner="local", clock=clock, capture=True)
    assert isinstance(chosen, LocalTridentRunner)
    interval = int(config.effective.get(BATCH_INTERVAL) or 500)
    step = chosen.step

    def timed_step() -> bool:
        # A batch takes Storm's emit interval of simulated time (an empty one already sleeps
        # it), so a spout that never ends runs into max_time_ms instead of looping for ever.
        emitted = step()
        if emitted:
            clock.sleep_ms(interval)
        return emitted

    chosen.step = timed_step  # type: ignore[method-assign]
    result = chosen.run(until_complete=True, duration_ms=max_time_ms)
    coordinator = chosen.coordinator
    last = coordinator.next_txid - 1
    stuck = sorted(cid for cid, e in coordinator.emitters.items() if not e.exhausted_after(last))
    if stuck:
        raise CompleteTopologyTimeout(
            f"Trident topology did not complete within {max_time_ms} ms of simulated time "
            f"({len(chosen.committed)} batches): spouts not exhausted: {stuck}. A BatchSpout "
            "must say when it is done (is_exhausted; FixedBatchSpout: cycle=False) or be "
            "replaced with MockedSources")
    return chosen, result
