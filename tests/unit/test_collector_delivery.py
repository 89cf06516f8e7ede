"""Collectors choose their host's delivery once, when bound (`squall.task.collectors`).

A host buffers tuples in packets (the Spark runner's stages), executes them as they are sent
(the local runner on an acyclic topology), or takes them through its `send` (a queue). Whichever
the collector binds to, an emit reaches the same targets with the same values, the same tuple
trees and the same counts; rebinding (a task moved to another host) switches the delivery.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import cloudpickle
import pytest

from squall.errors import EmitError
from squall.task.collectors import BasicOutputCollector, OutputCollector
from squall.task.routing import StreamRoute
from squall.task.stats import TaskStats
from squall.topology.fields import Fields
from squall.topology.groupings import FieldsGrouping, make_chooser
from squall.topology.tuple import PENDING, Origin, Tuple, _RuntimeTuple

SPLIT = Origin(Fields("sentence"), "spout", "default", 0)
WORDS = Origin(Fields("word"), "split", "default", 1)
TARGETS = [7, 8]


class QueuedHost:
    """Tuples through `send`, which records them (as a queue would hold them)."""

    packets = None
    ack_xor = None
    transactional_batches = False

    def __init__(self) -> None:
        self.delivered: list[Tuple] = []
        self.errors: list[Any] = []

    def send(self, task_id: int, tup: Tuple) -> None:
        self.delivered.append(tup)

    def ack(self, root: int, value: int, component: str) -> None: ...

    def fail(self, root: int, component: str) -> None: ...

    def reset(self, root: int, component: str) -> None: ...

    def report_error(self, component: str, task: int, error: BaseException,
                     stream: str | None = None) -> None:
        self.errors.append(error)


class ExecutingHost(QueuedHost):
    """Executes each tuple as it is sent and says how (`direct_delivery`), as the local runner
    does on an acyclic topology; its executors record the tuples."""

    def __init__(self) -> None:
        super().__init__()
        self.received = [0] * 10
        executors = {t: self.delivered.append for t in TARGETS}
        self.direct_delivery = (executors, self.received, self._error)
        self.ack_folding: list[Any] = [None, None, {}]

    def send(self, task_id: int, tup: Tuple) -> None:
        self.received[task_id] += 1
        self.delivered.append(tup)

    def _error(self, task: int, tup: Tuple, exc: Exception) -> None:
        self.errors.append(exc)


class Packets:
    """A packet buffer (the shape of `squall.runtime.spark.row_schema.Packets`): per target, the
    values of unanchored tuples, `(values, anchors)` for anchored ones."""

    def __init__(self) -> None:
        self.per_target: dict[int, list[Any]] = {t: [] for t in TARGETS}
        self.open: dict[tuple[Any, int], list[Any]] = {}

    def channel(self, origin: Any, target: int) -> list[Any]:
        items = self.open[(origin, target)] = self.per_target[target]
        return items

    def send(self, task_id: int, tup: Tuple) -> None:
        values = list(tup.values)
        self.channel(tup._origin, task_id).append(
            (values, tup._anchors) if tup._anchors else values)


class PacketsHost(QueuedHost):
    def __init__(self) -> None:
        super().__init__()
        self.packets = Packets()  # type: ignore[assignment]
        self.send = self.packets.send  # type: ignore[method-assign]


class Task:
    """What a collector reads of its task (squall.task.surfaces.EmittingTask)."""

    component_id = "split"
    task_id = 1
    capture: list[Any] | None = None
    tracking = True

    def __init__(self, host: Any) -> None:
        self.host = host
        self.stats = TaskStats()
        self.routes = {"default": StreamRoute("default", Fields("word"), False,
                                              [lambda values: TARGETS], frozenset(), WORDS)}
        self.rand64 = iter(range(101, 10_000)).__next__


def delivered(host: Any) -> list[tuple[int, list[Any], dict[int, int] | None]]:
    """(target, values, anchors) of every tuple the host got, in order per target."""
    if isinstance(host, PacketsHost):
        return [(t, *(item if isinstance(item, tuple) else (item, None)))
                for t, items in host.packets.per_target.items() for item in items]
    return sorted(((t._task, list(t.values), t._anchors) for t in host.delivered),
                  key=lambda d: d[0])


def emit_all(host: Any) -> tuple[Any, list[Tuple]]:
    task = Task(host)
    out = OutputCollector(task)  # type: ignore[arg-type]
    basic = BasicOutputCollector(out)
    inputs = [_RuntimeTuple(["a b"], SPLIT, None, 1), _RuntimeTuple(["c"], SPLIT, {5: 6}, 1),
              _RuntimeTuple(["d"], SPLIT, {5: 6, 9: 10}, 1)]
    for inp in inputs:  # no tree, one tree, two trees
        basic.input = inp
        for word in inp.values[0].split():
            basic.emit([word])
    out.emit(("e",))  # unanchored, values as a tuple
    out.emit(["f"], inputs[1])
    out.emit(["f2"], inputs[1:])  # anchored to two inputs, three trees
    out.emit_many([["g"], ("h",)])
    return task, inputs


@pytest.mark.parametrize("host_type", [QueuedHost, ExecutingHost, PacketsHost])
def test_every_delivery_gives_the_same_tuples_trees_and_counts(host_type):
    reference = QueuedHost()
    _, ref_inputs = emit_all(reference)
    host = host_type()
    task, inputs = emit_all(host)
    assert not host.errors
    assert delivered(host) == delivered(reference)
    assert [i._ack_val for i in inputs] == [i._ack_val for i in ref_inputs]
    assert all(i._state == PENDING for i in inputs)
    assert (task.stats.emitted, task.stats.transferred) == (9, 18)
    if host_type is ExecutingHost:
        assert host.received[7] == host.received[8] == 9


def test_bind_chooses_the_basic_collectors_delivery_and_rebinding_switches_it():
    task = Task(ExecutingHost())
    out = OutputCollector(task)  # type: ignore[arg-type]
    basic = BasicOutputCollector(out)
    assert type(basic) is not BasicOutputCollector and isinstance(basic, BasicOutputCollector)
    tree = _RuntimeTuple(["c"], SPLIT, {5: 6}, 1)
    for host in (PacketsHost(), QueuedHost(), ExecutingHost()):
        basic.bind(host, task.routes, task.rand64)  # type: ignore[arg-type]
        for basic.input in (None, tree):
            basic.emit(["x"])
        got = delivered(host)
        assert [(t, values) for t, values, _ in got] == [(7, ["x"]), (7, ["x"]), (8, ["x"]),
                                                         (8, ["x"])], host
        assert [anchors is None for _, _, anchors in got] == [True, False, True, False], host


def test_a_capturing_collector_emits_through_the_output_collector_on_any_host():
    task = Task(ExecutingHost())
    task.capture = []
    basic = BasicOutputCollector(OutputCollector(task))  # type: ignore[arg-type]
    assert type(basic) is BasicOutputCollector
    basic.emit(["x"])
    assert task.capture == [("default", ["x"])]


class Word(str):
    """A str subclass: the fields grouping hashes it as a value, not through its memo."""


def fields_task(host: Any) -> Task:
    """A task whose stream goes to TARGETS by a fields grouping on "word" (in second place)."""
    task = Task(host)
    choose = make_chooser(FieldsGrouping(("word",)), Fields("n", "word"), TARGETS, seed=0)
    task.routes = {"default": StreamRoute("default", Fields("n", "word"), False, [choose],
                                          frozenset(), WORDS)}
    return task


KEYS = ["cow", "moo", "cow", Word("cow"), 1, 1.0, True, ("cow",), "moo", "", "cow"]


@pytest.mark.parametrize("host_type", [QueuedHost, ExecutingHost, PacketsHost])
def test_a_fields_grouping_sends_a_key_where_its_chooser_does_memo_or_not(host_type):
    # The reference: a fresh chooser per key, so no key is ever answered from a memo.
    expected = [make_chooser(FieldsGrouping(("word",)), Fields("n", "word"), TARGETS, seed=0)(
        [0, key]) for key in KEYS]
    assert set(map(tuple, expected)) == {(7,), (8,)}  # the keys reach both tasks
    task = fields_task(host_type())
    route = task.routes["default"]
    assert route.memo is not None and route.key == 1
    out = OutputCollector(task)  # type: ignore[arg-type]
    basic = BasicOutputCollector(out)
    tree = _RuntimeTuple(["c"], SPLIT, {5: 6}, 1)
    for basic.input in (None, tree):
        assert [basic.emit([0, key]) for key in KEYS] == expected
    assert [out.emit([0, key]) for key in KEYS] == expected
    assert [out.emit([0, key], tree) for key in KEYS] == expected
    assert set(route.memo) == {"cow", "moo", ""}  # only exact strings are memoized
    got = delivered(task.host)
    assert Counter((t, type(values[1]), repr(values[1])) for t, values, _ in got) == Counter(
        (t, type(key), repr(key)) for _ in range(4) for (t,), key in zip(expected, KEYS,
                                                                          strict=True))
    assert (task.stats.emitted, task.stats.transferred) == (4 * len(KEYS), 4 * len(KEYS))
    # The list an emit returns is the caller's: changing it changes no later routing.
    basic.input = None
    basic.emit([0, "cow"]).append(99)
    assert basic.emit([0, "cow"]) == expected[0]


def test_a_route_restored_from_a_snapshot_without_the_memo_routes_as_before():
    task = fields_task(QueuedHost())
    route = task.routes["default"]
    out = OutputCollector(task)  # type: ignore[arg-type]
    before = [out.emit([0, key]) for key in KEYS]
    # What a snapshot of a version without the memo restores: the slots unset.
    state = route.__reduce_ex__(2)[2][1]
    del state["memo"], state["key"]
    restored = object.__new__(StreamRoute)
    for name, value in cloudpickle.loads(cloudpickle.dumps(state)).items():
        setattr(restored, name, value)
    restored.restored()
    assert restored.memo is not None and restored.emitted == 0
    task.routes = {"default": restored}
    out.bind(task.host, task.routes, task.rand64)
    assert [out.emit([0, key]) for key in KEYS] == before


class XorHost(PacketsHost):
    """A host that XORs acks per root itself (`ack_xor`), as a Spark stage does."""

    def __init__(self) -> None:
        super().__init__()
        self.ack_xor: dict[int, int] = {}  # type: ignore[assignment]


def test_acks_on_a_host_that_xors_per_root_fold_leaves_and_anchors_alike():
    task = Task(XorHost())
    out = OutputCollector(task)  # type: ignore[arg-type]
    leaf = _RuntimeTuple(["a"], SPLIT, {5: 6}, 1)
    two_trees = _RuntimeTuple(["b"], SPLIT, {5: 12, 9: 10}, 1)
    anchor = _RuntimeTuple(["c"], SPLIT, {9: 3}, 1)
    out.emit(["x"], anchor)  # anchor._ack_val gets the edge of each child
    assert anchor._ack_val
    for tup in (leaf, two_trees, anchor):
        out.ack(tup)
    assert task.host.ack_xor == {5: 6 ^ 12, 9: 10 ^ 3 ^ anchor._ack_val}
    assert task.stats.acked == 3


def checked_task(host: Any) -> Task:
    """A task with a plain stream of one field and a direct stream (to TARGETS)."""
    task = Task(host)
    task.routes["direct"] = StreamRoute("direct", Fields("word"), True, [],
                                        frozenset(TARGETS), WORDS)
    return task


def without_emit_arity(route: StreamRoute) -> StreamRoute:
    """`route` as a snapshot of a version without `emit_arity` restores it."""
    state = route.__reduce_ex__(2)[2][1]
    del state["emit_arity"]
    restored = object.__new__(StreamRoute)
    for name, value in cloudpickle.loads(cloudpickle.dumps(state)).items():
        setattr(restored, name, value)
    restored.restored()
    return restored


@pytest.mark.parametrize("restored", [False, True])
@pytest.mark.parametrize("host_type", [QueuedHost, ExecutingHost, PacketsHost])
def test_every_emit_path_refuses_a_wrong_arity_and_a_plain_emit_on_a_direct_stream(
        host_type, restored):
    task = checked_task(host_type())
    if restored:
        task.routes = {s: without_emit_arity(r) for s, r in task.routes.items()}
    out = OutputCollector(task)  # type: ignore[arg-type]
    basic = BasicOutputCollector(out)
    tree = _RuntimeTuple(["c"], SPLIT, {5: 6}, 1)
    emits = [lambda v, s: out.emit(v, None, s), lambda v, s: out.emit(v, tree, s)]
    for basic.input in (None, tree):
        emits.append(lambda v, s: basic.emit(v, s))
    for emit in emits:
        for values, stream, text in [(["a", "b"], "default", "emitted 2 values"),
                                     ([], "default", "emitted 0 values"),
                                     (["a"], "direct", "use emit_direct"),
                                     (["a", "b"], "direct", "emitted 2 values")]:
            with pytest.raises(EmitError, match=text) as info:
                emit(values, stream)
            assert (info.value.component, info.value.stream) == ("split", stream)
    assert delivered(task.host) == [] and task.stats.emitted == 0
    assert out.emit_direct(8, ["a"], None, "direct") == [8]
    assert basic.emit(["a"]) == TARGETS
    assert [t for t, _, _ in delivered(task.host)] == [7, 8, 8]
