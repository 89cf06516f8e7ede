"""Build-time validation of topologies and emit-time checks of what components emit.

Every build-time error is raised by `TopologyBuilder` (or its declarers) and names the component,
stream and field involved; every emit-time error is an `EmitError` raised inside the user's code,
which the runtime records in `result.errors` while the topology keeps running.
"""

from __future__ import annotations

import threading

import pytest

import squall
from squall import (
    BasicBolt,
    Bolt,
    EmitError,
    Fields,
    InvalidTopologyError,
    NotPicklableError,
    Spout,
    TopologyBuilder,
    Values,
)
from squall.testing import FixedTupleSpout, complete_topology

# ---- helpers -------------------------------------------------------------------------------


class WordSpout(Spout):
    """Declares `default` (word) and `other` (a, b); emits nothing."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))
        declarer.declare_stream("other", Fields("a", "b"))


class DirectSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"), direct=True)


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


class LockedBolt(BasicBolt):
    def __init__(self):
        self.lock = threading.Lock()

    def execute(self, tup, collector):
        pass


class BrokenDeclarer(BasicBolt):
    def execute(self, tup, collector):
        pass

    def declare_output_fields(self, declarer):
        raise RuntimeError("cannot declare")


class ReservedStreamBolt(BasicBolt):
    def execute(self, tup, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare_stream("__system", Fields("x"))


class GoodGrouping:
    def prepare(self, context, stream, target_tasks):
        self.targets = target_tasks

    def choose_tasks(self, task_id, values):
        return [self.targets[0]]


class LockedGrouping(GoodGrouping):
    def __init__(self):
        self.lock = threading.Lock()


class NoChooseGrouping:
    def prepare(self, context, stream, target_tasks):
        pass


def words_builder() -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("words", WordSpout(), parallelism=2)
    return b


def where(exc: squall.SquallError) -> tuple:
    return exc.component, exc.stream, exc.field


# ---- build-time validation ----------------------------------------------------------------


def test_valid_topology_builds_and_assigns_task_ids_in_sorted_component_order():
    b = words_builder()
    b.set_bolt("count", Sink(), parallelism=3).fields_grouping("words", Fields("word"))
    b.set_bolt("audit", Sink()).shuffle_grouping("words", "other")
    topology = b.create_topology()
    assert isinstance(topology, squall.Topology)
    assert topology.component_tasks("audit") == (1,)
    assert topology.component_tasks("count") == (2, 3, 4)
    assert topology.component_tasks("words") == (5, 6)


def test_unknown_component():
    b = words_builder()
    b.set_bolt("count", Sink()).shuffle_grouping("wrods")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("count", "default", None)
    assert "wrods" in str(info.value)


def test_unknown_stream():
    b = words_builder()
    b.set_bolt("count", Sink()).shuffle_grouping("words", "nope")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("count", "nope", None)
    assert "['default', 'other']" in str(info.value)


def test_unknown_stream_of_a_component_that_declares_no_streams():
    b = words_builder()
    b.set_bolt("sink", Sink()).shuffle_grouping("words")
    b.set_bolt("after", Sink()).shuffle_grouping("sink")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("after", "default", None)
    assert "no streams" in str(info.value)


@pytest.mark.parametrize("second", ["spout", "bolt"])
def test_duplicate_component_id(second):
    b = words_builder()
    with pytest.raises(InvalidTopologyError) as info:
        if second == "spout":
            b.set_spout("words", WordSpout())
        else:
            b.set_bolt("words", Sink())
    assert where(info.value) == ("words", None, None)
    assert "already a spout" in str(info.value)


@pytest.mark.parametrize("cid", ["__acker", "__system", "__"])
@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_reserved_component_ids(cid, kind):
    b = TopologyBuilder()
    with pytest.raises(InvalidTopologyError) as info:
        if kind == "spout":
            b.set_spout(cid, WordSpout())
        else:
            b.set_bolt(cid, Sink())
    assert where(info.value) == (cid, None, None)
    assert "reserved" in str(info.value)


@pytest.mark.parametrize("cid", ["", None, 3])
def test_component_ids_must_be_non_empty_strings(cid):
    with pytest.raises(InvalidTopologyError) as info:
        TopologyBuilder().set_spout(cid, WordSpout())
    assert where(info.value) == (None, None, None)


def test_reserved_stream_ids():
    b = words_builder()
    b.set_bolt("sys", ReservedStreamBolt()).shuffle_grouping("words")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("sys", "__system", None)


def test_fields_grouping_on_undeclared_field():
    b = words_builder()
    b.set_bolt("count", Sink(), 3).fields_grouping("words", Fields("wrod"))
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("count", "default", "wrod")
    assert "['word']" in str(info.value)


def test_fields_grouping_on_undeclared_field_of_named_stream_names_the_missing_one():
    b = words_builder()
    b.set_bolt("count", Sink(), 3).fields_grouping("words", ["a", "c", "b"], "other")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("count", "other", "c")


def test_fields_grouping_needs_a_field():
    b = words_builder()
    with pytest.raises(InvalidTopologyError) as info:
        b.set_bolt("count", Sink()).fields_grouping("words", [])
    assert where(info.value) == ("count", "default", None)


def test_fields_grouping_accepts_a_single_field_name_string():
    b = words_builder()
    b.set_bolt("count", Sink(), 2).fields_grouping("words", "word")
    spec = b.create_topology().components["count"]
    assert spec.inputs[0].grouping.fields == ("word",)


def test_direct_grouping_on_non_direct_stream():
    b = words_builder()
    b.set_bolt("d", Sink()).direct_grouping("words", "other")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("d", "other", None)
    assert "not declared direct" in str(info.value)


@pytest.mark.parametrize(
    "subscribe",
    [
        lambda d: d.shuffle_grouping("src"),
        lambda d: d.fields_grouping("src", Fields("word")),
        lambda d: d.all_grouping("src"),
        lambda d: d.global_grouping("src"),
        lambda d: d.none_grouping("src"),
        lambda d: d.local_or_shuffle_grouping("src"),
        lambda d: d.custom_grouping("src", GoodGrouping()),
    ],
    ids=["shuffle", "fields", "all", "global", "none", "local_or_shuffle", "custom"],
)
def test_non_direct_grouping_on_direct_stream(subscribe):
    b = TopologyBuilder()
    b.set_spout("src", DirectSpout())
    subscribe(b.set_bolt("d", Sink(), 2))
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("d", "default", None)
    assert "is direct" in str(info.value)


def test_direct_grouping_on_direct_stream_is_valid():
    b = TopologyBuilder()
    b.set_spout("src", DirectSpout())
    b.set_bolt("d", Sink(), 2).direct_grouping("src")
    assert b.create_topology().components["d"].inputs[0].grouping.name == "direct"


def test_non_picklable_component():
    b = words_builder()
    b.set_bolt("locked", LockedBolt()).shuffle_grouping("words")
    with pytest.raises(NotPicklableError) as info:
        b.create_topology()
    assert isinstance(info.value, InvalidTopologyError)
    assert where(info.value) == ("locked", None, None)
    assert "LockedBolt" in str(info.value) and "prepare()" in str(info.value)


def test_non_picklable_custom_grouping():
    b = words_builder()
    b.set_bolt("c", Sink(), 2).custom_grouping("words", LockedGrouping())
    with pytest.raises(NotPicklableError) as info:
        b.create_topology()
    assert where(info.value) == ("c", None, None)
    assert "custom grouping on 'default'" in str(info.value)


def test_custom_grouping_without_choose_tasks():
    b = words_builder()
    with pytest.raises(InvalidTopologyError) as info:
        b.set_bolt("c", Sink(), 2).custom_grouping("words", NoChooseGrouping(), "other")
    assert where(info.value) == ("c", "other", None)
    assert "choose_tasks" in str(info.value)


def test_declare_output_fields_raising():
    b = words_builder()
    b.set_bolt("broken", BrokenDeclarer()).shuffle_grouping("words")
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == ("broken", None, None)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "cannot declare" in str(info.value)


def test_no_spouts():
    b = TopologyBuilder()
    b.set_bolt("lonely", Sink())
    with pytest.raises(InvalidTopologyError) as info:
        b.create_topology()
    assert where(info.value) == (None, None, None)
    assert "at least one spout" in str(info.value)


def test_empty_builder_has_no_spouts():
    with pytest.raises(InvalidTopologyError):
        TopologyBuilder().create_topology()


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, "2", None])
@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_bad_parallelism(parallelism, kind):
    b = TopologyBuilder()
    with pytest.raises(InvalidTopologyError) as info:
        if kind == "spout":
            b.set_spout("c", WordSpout(), parallelism=parallelism)
        else:
            b.set_bolt("c", Sink(), parallelism)
    assert where(info.value) == ("c", None, None)


@pytest.mark.parametrize("n", [0, -3, 2.0])
def test_bad_num_tasks(n):
    b = TopologyBuilder()
    with pytest.raises(InvalidTopologyError) as info:
        b.set_spout("s", WordSpout()).set_num_tasks(n)
    assert where(info.value) == ("s", None, None)


def test_num_tasks_and_max_task_parallelism():
    b = TopologyBuilder()
    b.set_spout("s", WordSpout(), 2).set_num_tasks(4)
    b.set_bolt("t", Sink(), 6).shuffle_grouping("s").set_max_task_parallelism(3)
    specs = b.create_topology().components
    assert (specs["s"].parallelism, specs["s"].num_tasks) == (2, 4)
    assert (specs["t"].parallelism, specs["t"].num_tasks) == (3, 3)


def test_set_spout_and_set_bolt_check_the_component_kind():
    b = TopologyBuilder()
    with pytest.raises(InvalidTopologyError) as info:
        b.set_spout("s", Sink())
    assert where(info.value) == ("s", None, None)
    with pytest.raises(InvalidTopologyError) as info:
        b.set_bolt("t", WordSpout())
    assert where(info.value) == ("t", None, None)


def test_errors_keep_their_location_through_pickling():
    import pickle

    err = NotPicklableError("x", component="c", stream="s", field="f")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is NotPicklableError
    assert where(again) == ("c", "s", "f")
    assert str(again) == str(err) == "x [component 'c', stream 's', field 'f']"


# ---- emit-time errors ---------------------------------------------------------------------


class Emitter(Bolt):
    """For each input `kind`, performs one (possibly wrong) emit, then acks the input."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("a", "b"))
        declarer.declare_stream("direct", Fields("x"), direct=True)

    def execute(self, tup):
        kind = tup["kind"]
        out = self.collector
        if kind == "ok":
            out.emit(Values(1, 2), anchors=tup)
        elif kind == "arity":
            out.emit(Values(1), anchors=tup)
        elif kind == "undeclared":
            out.emit(Values(1, 2), anchors=tup, stream="nope")
        elif kind == "emit_on_direct":
            out.emit(Values(1), anchors=tup, stream="direct")
        elif kind == "direct_on_plain":
            target = self.context.component_tasks("plain_sink")[0]
            out.emit_direct(target, Values(1, 2), anchors=tup)
        elif kind == "direct_unsubscribed":
            # a task of plain_sink, which does not subscribe to the direct stream
            target = self.context.component_tasks("plain_sink")[0]
            out.emit_direct(target, Values(1), anchors=tup, stream="direct")
        elif kind == "direct_ok":
            target = self.context.component_tasks("direct_sink")[-1]
            out.emit_direct(target, Values(9), anchors=tup, stream="direct")
        out.ack(tup)


class Record(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, list(tup.values)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "values"))


KINDS = ["arity", "undeclared", "emit_on_direct", "direct_on_plain", "direct_unsubscribed"]
EXPECTED_STREAM = {
    "arity": "default",
    "undeclared": "nope",
    "emit_on_direct": "direct",
    "direct_on_plain": "default",
    "direct_unsubscribed": "direct",
}
EXPECTED_TEXT = {
    "arity": "emitted 1 values",
    "undeclared": "undeclared stream 'nope'",
    "emit_on_direct": "use emit_direct",
    "direct_on_plain": "not declared direct",
    "direct_unsubscribed": "does not subscribe",
}


def emit_topology(kinds):
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([[k] for k in kinds], Fields("kind")))
    b.set_bolt("emitter", Emitter()).shuffle_grouping("src")
    b.set_bolt("plain_sink", Record(), 2).shuffle_grouping("emitter")
    b.set_bolt("direct_sink", Record(), 2).direct_grouping("emitter", "direct")
    return b.create_topology()


@pytest.mark.parametrize("kind", KINDS)
def test_emit_error_is_recorded_with_component_and_stream(kind):
    topology = emit_topology(["ok", kind, "ok"])
    result = complete_topology(topology)
    assert len(result.errors) == 1
    record = result.errors[0]
    assert record.component == "emitter"
    assert record.task == topology.component_tasks("emitter")[0]
    assert record.stream == "default"  # the input stream whose tuple was being executed
    assert isinstance(record.error, EmitError)
    assert (record.error.component, record.error.stream) == ("emitter", EXPECTED_STREAM[kind])
    assert EXPECTED_TEXT[kind] in str(record.error)
    # the topology kept running: both "ok" inputs produced output, the bad one was failed
    assert [v for _, v in result.tuples("plain_sink")] == [[1, 2], [1, 2]]
    assert result.acked("src") == [0, 2]
    assert result.failed("src") == [1]
    assert result.stats["emitter"].errors == 1


def test_correct_direct_emit_reaches_the_chosen_task():
    topology = emit_topology(["direct_ok"])
    result = complete_topology(topology)
    assert result.errors == []
    last = topology.component_tasks("direct_sink")[-1]
    assert result.tuples_by_task("direct_sink") == {
        topology.component_tasks("direct_sink")[0]: [],
        last: [[last, [9]]],
    }
    assert result.acked("src") == [0]


class BadSpout(Spout):
    """Emits with the wrong arity on its first call, then a correct tuple, then stops."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.calls = 0

    def next_tuple(self):
        self.calls += 1
        if self.calls == 1:
            self.collector.emit(Values("a", "b"), msg_id="bad")
        elif self.calls == 2:
            self.collector.emit(Values("a"), msg_id="good")

    def ack(self, msg_id):
        self.acked = [*getattr(self, "acked", []), msg_id]

    def is_exhausted(self):
        return self.calls >= 2

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def test_emit_error_in_spout_is_recorded_and_spout_keeps_running():
    b = TopologyBuilder()
    b.set_spout("src", BadSpout())
    b.set_bolt("sink", Record()).shuffle_grouping("src")
    topology = b.create_topology()
    result = complete_topology(topology)
    assert len(result.errors) == 1
    record = result.errors[0]
    assert (record.component, record.task) == ("src", topology.component_tasks("src")[0])
    assert isinstance(record.error, EmitError)
    assert (record.error.component, record.error.stream) == ("src", "default")
    assert result.tuples("sink") == [[1, ["a"]]]
    assert result.acked("src") == ["good"]
    assert result.stats["src"].errors == 1
