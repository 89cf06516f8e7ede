"""Stream groupings on the local runner, checked through what each receiving task emits.

Receiving bolts emit `(task_id, value)` so `result.tuples_by_task` shows where every tuple went.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from squall import BasicBolt, Bolt, Config, Fields, Spout, TopologyBuilder, Values
from squall.testing import FixedTupleSpout, MockedSources, complete_topology

# ---- helpers -------------------------------------------------------------------------------


class Where(BasicBolt):
    """Emits (this task id, first input value)."""

    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, tup[0]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "value"))


class WhereAll(BasicBolt):
    """Emits (this task id, all input values as a list)."""

    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, list(tup.values)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "values"))


def values(n):
    return [[i] for i in range(n)]


def routing(result, component, stream="default"):
    """value -> sorted list of the tasks that received it, checking each task emits its own id."""
    seen = defaultdict(list)
    for task, rows in result.tuples_by_task(component, stream).items():
        for emitted_task, value in rows:
            assert emitted_task == task
            key = tuple(value) if isinstance(value, list) else value
            seen[key].append(task)
    return {k: sorted(v) for k, v in seen.items()}


def single_spout_topology(grouping, n_tasks=4, fields=("value",), data=None):
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout(data or [], Fields(*fields)))
    grouping(b.set_bolt("bolt", Where(), n_tasks))
    return b.create_topology()


# ---- task ids ------------------------------------------------------------------------------


def test_task_ids_follow_sorted_component_ids():
    b = TopologyBuilder()
    b.set_spout("zeta", FixedTupleSpout([], Fields("value")), 2)
    b.set_bolt("alpha", Where(), 3).shuffle_grouping("zeta")
    b.set_bolt("mid", Where()).shuffle_grouping("zeta").set_num_tasks(2)
    topology = b.create_topology()
    assert topology.component_tasks("alpha") == (1, 2, 3)
    assert topology.component_tasks("mid") == (4, 5)
    assert topology.component_tasks("zeta") == (6, 7)


# ---- shuffle / local-or-shuffle / none ---------------------------------------------------


@pytest.mark.parametrize("method", ["shuffle_grouping", "local_or_shuffle_grouping"])
@pytest.mark.parametrize(("n", "expected"), [(20, [5, 5, 5, 5]), (22, [5, 5, 6, 6])])
def test_shuffle_spreads_evenly(method, n, expected):
    topology = single_spout_topology(lambda d: getattr(d, method)("spout"))
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(n)}))
    where = routing(result, "bolt")
    assert sorted(where) == list(range(n))  # every tuple delivered ...
    assert all(len(tasks) == 1 for tasks in where.values())  # ... to exactly one task
    counts = Counter(tasks[0] for tasks in where.values())
    assert set(counts) == {1, 2, 3, 4}
    assert sorted(counts.values()) == expected
    assert result.acked("spout") == list(range(n))


def test_shuffle_is_even_within_every_pass():
    """Storm's shuffle walks a shuffled task list: each run of 4 emits hits all 4 tasks."""
    topology = single_spout_topology(lambda d: d.shuffle_grouping("spout"))
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(12)}))
    where = routing(result, "bolt")
    for start in range(0, 12, 4):
        assert sorted(where[v][0] for v in range(start, start + 4)) == [1, 2, 3, 4]


def test_shuffle_over_two_tasks_reshuffles_each_pass():
    """Two tasks take their own reshuffle (one random bit): every pass of 2 emits hits both
    tasks, and both orders occur (a reshuffle that never swapped would always start with the
    same task)."""
    topology = single_spout_topology(lambda d: d.shuffle_grouping("spout"), n_tasks=2)
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(200)}))
    where = routing(result, "bolt")
    passes = [tuple(where[v][0] for v in range(start, start + 2)) for start in range(0, 200, 2)]
    assert set(passes) == {(1, 2), (2, 1)}
    assert 25 <= passes.count((1, 2)) <= 75


def test_none_grouping_sends_each_tuple_to_one_task():
    topology = single_spout_topology(lambda d: d.none_grouping("spout"))
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(40)}))
    where = routing(result, "bolt")
    assert sorted(where) == list(range(40))
    assert all(len(tasks) == 1 and tasks[0] in (1, 2, 3, 4) for tasks in where.values())
    # random, not all in one place
    assert len({tasks[0] for tasks in where.values()}) > 1


# ---- fields --------------------------------------------------------------------------------

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "honeydew"]


def test_fields_grouping_same_value_same_task():
    data = [[w, i] for i in range(5) for w in WORDS]
    topology = single_spout_topology(
        lambda d: d.fields_grouping("spout", Fields("word")), fields=("word", "n"), data=data
    )
    result = complete_topology(topology)
    by_word = defaultdict(set)
    total = 0
    for task, rows in result.tuples_by_task("bolt").items():
        for _, word in rows:
            by_word[word].add(task)
            total += 1
    assert total == len(data)
    assert sorted(by_word) == sorted(WORDS)
    assert all(len(tasks) == 1 for tasks in by_word.values())
    assert len(set().union(*by_word.values())) > 1  # the keys are spread over several tasks


@pytest.mark.parametrize(
    "keys",
    [
        [1, 2, 3, 4, 5, 6, 7, 8],
        [1.5, -2.0, None, True, b"x", (1, "a"), "1", 1],
    ],
    ids=["ints", "mixed"],
)
def test_fields_grouping_non_string_values(keys):
    data = [[k, i] for i in range(3) for k in keys]
    topology = single_spout_topology(
        lambda d: d.fields_grouping("spout", ["key"]), fields=("key", "n"), data=data
    )
    result = complete_topology(topology)
    by_key = defaultdict(set)
    for task, rows in result.tuples_by_task("bolt").items():
        for _, key in rows:
            by_key[repr(key)].add(task)
    assert sorted(by_key) == sorted(repr(k) for k in keys)
    assert all(len(tasks) == 1 for tasks in by_key.values())


class Pair(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, tup["a"], tup["b"], tup["n"]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "a", "b", "n"))


def test_fields_grouping_on_several_fields():
    data = [[a, b, n] for n in range(3) for a in ("x", "y", "z") for b in range(4)]
    bld = TopologyBuilder()
    bld.set_spout("spout", FixedTupleSpout(data, Fields("n", "b", "a")))  # field order differs
    bld.set_bolt("bolt", Pair(), 5).fields_grouping("spout", Fields("a", "b"))
    result = complete_topology(bld.create_topology())
    by_pair = defaultdict(set)
    by_a = defaultdict(set)
    rows = result.tuples("bolt")
    assert len(rows) == len(data)
    for task, a, b, _ in rows:
        by_pair[(a, b)].add(task)
        by_a[a].add(task)
    assert len(by_pair) == 12
    assert all(len(tasks) == 1 for tasks in by_pair.values())
    # the grouping uses both fields: one value of "a" alone is spread over several tasks
    assert any(len(tasks) > 1 for tasks in by_a.values())


def test_fields_grouping_is_the_same_in_every_process():
    """Python's str hash differs between processes; the grouping must not."""
    script = (
        "import json\n"
        "from squall import TopologyBuilder, Fields\n"
        "from squall.task.routing import build_routes\n"
        "from squall.components.context import TopologyContext\n"
        "from squall.testing import FixedTupleSpout\n"
        "from squall import BasicBolt\n"
        "class S(BasicBolt):\n"
        "    def execute(self, tup, collector): pass\n"
        "b = TopologyBuilder()\n"
        "b.set_spout('s', FixedTupleSpout([], Fields('w', 'n')))\n"
        "b.set_bolt('t', S(), 7).fields_grouping('s', Fields('w'))\n"
        "b.set_bolt('u', S(), 5).fields_grouping('s', Fields('w', 'n'))\n"
        "top = b.create_topology()\n"
        "task = top.component_tasks('s')[0]\n"
        "route = build_routes(top, task, 0, TopologyContext(top, {}, task))['default']\n"
        f"words = {WORDS!r}\n"
        "print(json.dumps([route.choose([w, i]) for i in range(3) for w in words]))\n"
    )
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 3 * len(WORDS)
    assert all(len(targets) == 2 for targets in outputs[0])  # one task of each subscriber


# ---- all / global --------------------------------------------------------------------------


def test_all_grouping_sends_every_tuple_to_every_task():
    topology = single_spout_topology(lambda d: d.all_grouping("spout"), n_tasks=3)
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(5)}))
    assert result.tuples_by_task("bolt") == {
        t: [[t, i] for i in range(5)] for t in (1, 2, 3)
    }
    assert result.stats["bolt"].executed == 15
    assert result.acked("spout") == [0, 1, 2, 3, 4]


def test_global_grouping_sends_everything_to_the_lowest_task():
    b = TopologyBuilder()
    b.set_spout("a_spout", FixedTupleSpout(values(6), Fields("value")), 2)
    b.set_bolt("z_bolt", Where(), 3).global_grouping("a_spout")
    topology = b.create_topology()
    assert topology.component_tasks("z_bolt") == (3, 4, 5)
    result = complete_topology(topology)
    by_task = result.tuples_by_task("z_bolt")
    assert by_task[4] == [] and by_task[5] == []
    assert sorted(by_task[3]) == [[3, i] for i in range(6)]


# ---- direct --------------------------------------------------------------------------------


class DirectSpout(Spout):
    """Sends value v to task component_tasks("bolt")[v % n] of the bolt, by emit_direct."""

    def __init__(self, n):
        self.n = n

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.returned = []

    def next_tuple(self):
        if self.i < self.n:
            targets = self.context.component_tasks("bolt")
            target = targets[self.i % len(targets)]
            self.returned.append(self.collector.emit_direct(target, Values(self.i), msg_id=self.i))
            self.i += 1

    def is_exhausted(self):
        return self.i >= self.n

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("value"), direct=True)


def test_direct_grouping_delivers_to_the_chosen_task():
    b = TopologyBuilder()
    b.set_spout("spout", DirectSpout(7))
    b.set_bolt("bolt", Where(), 3).direct_grouping("spout")
    topology = b.create_topology()
    assert topology.component_tasks("bolt") == (1, 2, 3)
    result = complete_topology(topology)
    assert result.tuples_by_task("bolt") == {
        1: [[1, 0], [1, 3], [1, 6]],
        2: [[2, 1], [2, 4]],
        3: [[3, 2], [3, 5]],
    }
    spout = result.spout_instances[topology.component_tasks("spout")[0]]
    assert spout.returned == [[1], [2], [3], [1], [2], [3], [1]]
    assert result.errors == []


class DirectRelay(Bolt):
    """Forwards each input, by emit_direct, to the relay-sink task picked by value parity."""

    def execute(self, tup):
        targets = self.context.component_tasks("sink")
        self.collector.emit_direct(
            targets[tup[0] % 2], Values(tup[0]), anchors=tup, stream="to_sink"
        )
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare_stream("to_sink", Fields("value"), direct=True)


def test_bolt_emit_direct_on_named_stream():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout(values(6), Fields("value")))
    b.set_bolt("relay", DirectRelay(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", Where(), 2).direct_grouping("relay", "to_sink")
    topology = b.create_topology()
    result = complete_topology(topology)
    t0, t1 = topology.component_tasks("sink")
    assert result.tuples_by_task("sink") == {
        t0: [[t0, 0], [t0, 2], [t0, 4]],
        t1: [[t1, 1], [t1, 3], [t1, 5]],
    }
    assert result.acked("spout") == list(range(6))


# ---- custom --------------------------------------------------------------------------------


class ModGrouping:
    """Sends value v to target_tasks[v % n]; values above 100 go to every target."""

    def prepare(self, context, stream, target_tasks):
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        v = values[0]
        if v > 100:
            return list(self.targets)
        return [self.targets[v % len(self.targets)]]


def test_custom_grouping():
    topology = single_spout_topology(
        lambda d: d.custom_grouping("spout", ModGrouping()), n_tasks=3
    )
    data = [[0], [1], [2], [3], [4], [101]]
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": data}))
    assert result.tuples_by_task("bolt") == {
        1: [[1, 0], [1, 3], [1, 101]],
        2: [[2, 1], [2, 4], [2, 101]],
        3: [[3, 2], [3, 101]],
    }
    assert result.acked("spout") == list(range(6))


class PrepareRecorder:
    """Routes every tuple to the first target; emits what prepare saw as the routing key."""

    def prepare(self, context, stream, target_tasks):
        self.seen = (context.this_task_id, stream, list(target_tasks))

    def choose_tasks(self, task_id, values):
        assert task_id == self.seen[0]
        return [self.seen[2][0]]


class ReportPrepare(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.done = False

    def next_tuple(self):
        if not self.done:
            self.done = True
            self.collector.emit(Values(1), msg_id=1)

    def is_exhausted(self):
        return self.done

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("value"))


def test_custom_grouping_prepare_gets_context_stream_and_sorted_targets():
    grouping = PrepareRecorder()
    b = TopologyBuilder()
    b.set_spout("spout", ReportPrepare())
    b.set_bolt("bolt", Where(), 3).custom_grouping("spout", grouping)
    topology = b.create_topology()
    result = complete_topology(topology)
    assert result.errors == []
    assert result.tuples_by_task("bolt") == {1: [[1, 1]], 2: [], 3: []}


class BadGrouping(ModGrouping):
    def choose_tasks(self, task_id, values):
        return [99]


def test_custom_grouping_choosing_a_foreign_task_is_an_error():
    topology = single_spout_topology(lambda d: d.custom_grouping("spout", BadGrouping()), 2)
    result = complete_topology(topology, mocked_sources=MockedSources({"spout": values(2)}))
    assert [(e.component, type(e.error)) for e in result.errors] == [
        ("spout", ValueError),
        ("spout", ValueError),
    ]
    assert "chose task 99" in str(result.errors[0].error)
    assert result.tuples("bolt") == []


class RoundRobin:
    """A stateful custom grouping, as users write them: a counter set up in __init__."""

    def __init__(self):
        self.i = 0

    def prepare(self, context, stream, target_tasks):
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        target = self.targets[self.i % len(self.targets)]
        self.i += 1
        return [target]


class Origin(BasicBolt):
    """Emits (this task, source task, value)."""

    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, tup.source_task, tup[0]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "source", "value"))


def round_robin_topology():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout(values(7), Fields("value")), 2)
    b.set_bolt("bolt", Origin(), 2).custom_grouping("spout", RoundRobin())
    return b.create_topology()


def test_custom_grouping_instance_is_per_emitting_task():
    topology = round_robin_topology()
    result = complete_topology(topology)
    routed = {value: (source, task) for task, source, value in result.tuples("bolt")}
    # Spout task 3 emits values 0, 2, 4, 6 and task 4 emits 1, 3, 5; each spout task walks
    # its own round robin over the two bolt tasks.
    assert routed == {
        0: (3, 1), 2: (3, 2), 4: (3, 1), 6: (3, 2),
        1: (4, 1), 3: (4, 2), 5: (4, 1),
    }


def test_custom_grouping_state_does_not_leak_between_runs():
    topology = round_robin_topology()
    first = complete_topology(topology).tuples("bolt")
    second = complete_topology(topology).tuples("bolt")
    assert first == second


# ---- instances and contexts ----------------------------------------------------------------


class Introspect(Bolt):
    """Counts prepare calls on its own instance and reports them with its context."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.prepares = getattr(self, "prepares", 0) + 1
        self.executed = 0

    def execute(self, tup):
        self.executed += 1
        ctx = self.context
        self.collector.emit(
            Values(ctx.this_task_id, ctx.this_task_index, ctx.this_component_id,
                   self.prepares, self.executed, id(self)),
            anchors=tup,
        )
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "index", "component", "prepares", "executed", "obj"))


class IntrospectSpout(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.opens = getattr(self, "opens", 0) + 1
        self.sent = False

    def next_tuple(self):
        if not self.sent:
            self.sent = True
            ctx = self.context
            self.collector.emit(
                Values(ctx.this_task_id, ctx.this_task_index, self.opens, id(self)),
                msg_id=ctx.this_task_id,
            )

    def is_exhausted(self):
        return self.sent

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "index", "opens", "obj"))


def test_each_task_has_its_own_instance_and_context():
    bolt = Introspect()
    spout = IntrospectSpout()
    b = TopologyBuilder()
    b.set_spout("spout", spout, 2)
    b.set_bolt("bolt", bolt, 3).all_grouping("spout")
    topology = b.create_topology()
    assert topology.component_tasks("bolt") == (1, 2, 3)
    assert topology.component_tasks("spout") == (4, 5)
    result = complete_topology(topology)
    assert result.errors == []

    spout_rows = result.tuples("spout")
    assert [row[:3] for row in spout_rows] == [[4, 0, 1], [5, 1, 1]]
    assert len({row[3] for row in spout_rows}) == 2  # two spout instances

    rows = result.tuples("bolt")
    assert sorted((r[0], r[1], r[2], r[3], r[4]) for r in rows) == [
        (1, 0, "bolt", 1, 1), (1, 0, "bolt", 1, 2),
        (2, 1, "bolt", 1, 1), (2, 1, "bolt", 1, 2),
        (3, 2, "bolt", 1, 1), (3, 2, "bolt", 1, 2),
    ]
    objs = defaultdict(set)
    for r in rows:
        objs[r[0]].add(r[5])
    assert all(len(o) == 1 for o in objs.values())  # one instance per task ...
    assert len(set().union(*objs.values())) == 3  # ... and a different one for each task
    assert id(bolt) not in set().union(*objs.values())
    # the user's own objects are never used by the tasks
    assert not hasattr(bolt, "prepares") and not hasattr(spout, "opens")
    assert result.stats["bolt"].tasks == 3 and result.stats["bolt"].executed == 6


# ---- streams and subscribers ---------------------------------------------------------------


class ParitySpout(Spout):
    """Emits 0..n-1: evens on "evens" (n, half), odds on "odds" (n)."""

    def __init__(self, n):
        self.n = n

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self):
        if self.i < self.n:
            i = self.i
            if i % 2 == 0:
                self.collector.emit(Values(i, i // 2), msg_id=i, stream="evens")
            else:
                self.collector.emit(Values(i), msg_id=i, stream="odds")
            self.i += 1

    def is_exhausted(self):
        return self.i >= self.n

    def declare_output_fields(self, declarer):
        declarer.declare_stream("evens", Fields("n", "half"))
        declarer.declare_stream("odds", Fields("n"))


class Splitter(BasicBolt):
    """Re-emits small values on "small" and big ones on "big"."""

    def execute(self, tup, collector):
        stream = "small" if tup[0] < 4 else "big"
        collector.emit(Values(self.context.this_task_id, tup[0]), stream=stream)

    def declare_output_fields(self, declarer):
        declarer.declare_stream("small", Fields("task", "value"))
        declarer.declare_stream("big", Fields("task", "value"))


def test_named_streams():
    b = TopologyBuilder()
    b.set_spout("spout", ParitySpout(8))
    b.set_bolt("even_bolt", WhereAll()).shuffle_grouping("spout", "evens")
    b.set_bolt("odd_split", Splitter()).shuffle_grouping("spout", "odds")
    b.set_bolt("big_sink", Where()).global_grouping("odd_split", "big")
    topology = b.create_topology()
    result = complete_topology(topology)
    t_even = topology.component_tasks("even_bolt")[0]
    t_odd = topology.component_tasks("odd_split")[0]
    t_big = topology.component_tasks("big_sink")[0]
    assert result.tuples("spout", stream="evens") == [[0, 0], [2, 1], [4, 2], [6, 3]]
    assert result.tuples("spout", stream="odds") == [[1], [3], [5], [7]]
    assert result.tuples("spout") == []  # nothing on the default stream
    assert result.tuples("even_bolt") == [[t_even, [0, 0]], [t_even, [2, 1]],
                                          [t_even, [4, 2]], [t_even, [6, 3]]]
    assert result.tuples("odd_split", stream="small") == [[t_odd, 1], [t_odd, 3]]
    assert result.tuples("odd_split", stream="big") == [[t_odd, 5], [t_odd, 7]]
    assert result.tuples("big_sink") == [[t_big, t_odd], [t_big, t_odd]]
    # The framework records what it acked on the spout, though ParitySpout keeps no record.
    assert sorted(result.acked("spout")) == list(range(8)) and result.failed("spout") == []
    assert result.stats["spout"].acked == 8


def test_mocked_sources_on_named_streams():
    b = TopologyBuilder()
    b.set_spout("spout", ParitySpout(0))
    b.set_bolt("even_bolt", WhereAll()).shuffle_grouping("spout", "evens")
    b.set_bolt("odd_bolt", WhereAll()).shuffle_grouping("spout", "odds")
    topology = b.create_topology()
    mocked = MockedSources({"spout": {"evens": [[10, 5]], "odds": [[3], [9]]}})
    result = complete_topology(topology, mocked_sources=mocked)
    t_even = topology.component_tasks("even_bolt")[0]
    t_odd = topology.component_tasks("odd_bolt")[0]
    assert result.tuples("even_bolt") == [[t_even, [10, 5]]]
    assert result.tuples("odd_bolt") == [[t_odd, [3]], [t_odd, [9]]]
    assert sorted(result.acked("spout")) == [("evens", 0), ("odds", 0), ("odds", 1)]


class ReturnRecorder(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.returned = []
        self.i = 0

    def next_tuple(self):
        if self.i < 3:
            self.returned.append(self.collector.emit(Values(self.i), msg_id=self.i))
            self.i += 1

    def is_exhausted(self):
        return self.i >= 3

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("value"))


def test_several_subscribers_to_one_stream_each_get_every_tuple():
    b = TopologyBuilder()
    b.set_spout("spout", ReturnRecorder())
    b.set_bolt("a", Where(), 2).all_grouping("spout")
    b.set_bolt("b", Where(), 2).global_grouping("spout")
    b.set_bolt("c", Where()).shuffle_grouping("spout")
    topology = b.create_topology()
    assert topology.component_tasks("a") == (1, 2)
    assert topology.component_tasks("b") == (3, 4)
    assert topology.component_tasks("c") == (5,)
    result = complete_topology(topology)
    spout = result.spout_instances[6]
    assert spout.returned == [[1, 2, 3, 5]] * 3
    assert result.tuples_by_task("a") == {1: [[1, 0], [1, 1], [1, 2]],
                                          2: [[2, 0], [2, 1], [2, 2]]}
    assert result.tuples_by_task("b") == {3: [[3, 0], [3, 1], [3, 2]], 4: []}
    assert result.tuples("c") == [[5, 0], [5, 1], [5, 2]]
    assert result.stats["spout"].acked == 3
    assert result.stats["spout"].transferred == 12


def test_emit_to_stream_without_subscribers_goes_nowhere_and_completes():
    b = TopologyBuilder()
    b.set_spout("spout", ReturnRecorder())
    result = complete_topology(b.create_topology())
    spout = result.spout_instances[1]
    assert spout.returned == [[], [], []]
    assert result.stats["spout"].acked == 3
    assert result.stats["spout"].emitted == 3


# ---- determinism ---------------------------------------------------------------------------


def mixed_topology():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout(values(30), Fields("value")), 2)
    b.set_bolt("shuffled", Where(), 3).shuffle_grouping("spout")
    b.set_bolt("random", Where(), 4).none_grouping("spout")
    b.set_bolt("chained", Where(), 3).shuffle_grouping("shuffled")
    return b.create_topology()


def run_mixed(seed):
    conf = Config()
    conf.set_seed(seed)
    result = complete_topology(mixed_topology(), conf)
    return {c: result.tuples_by_task(c) for c in ("shuffled", "random", "chained")}


def test_same_seed_same_output():
    first, second = run_mixed(7), run_mixed(7)
    assert first == second
    assert sum(len(v) for v in first["random"].values()) == 30


def test_different_seed_different_routing():
    assert run_mixed(7) != run_mixed(8)


# ---- chooser unit checks -------------------------------------------------------------------


def test_fields_chooser_is_stable_past_its_key_cache():
    from squall.topology.groupings import FieldsGrouping, make_chooser

    choose = make_chooser(FieldsGrouping(("w",)), Fields("w", "n"), [7, 3, 5], seed=0)
    keys = [f"k{i}" for i in range(70_000)]  # more keys than the chooser memoizes
    first = {k: choose([k, 0]) for k in keys}
    assert all(choose([k, 1]) == first[k] for k in keys[:1_000] + keys[-1_000:])
    assert all(len(t) == 1 and t[0] in (3, 5, 7) for t in first.values())
    counts = Counter(t[0] for t in first.values())
    assert set(counts) == {3, 5, 7}
    # the returned list is the caller's: changing it does not change later answers
    got = choose(["k1", 0])
    got.append(99)
    assert choose(["k1", 0]) == first["k1"]


def test_fields_chooser_keeps_equal_but_different_keys_apart_consistently():
    from squall.topology.groupings import FieldsGrouping, make_chooser

    choose = make_chooser(FieldsGrouping(("k",)), Fields("k"), list(range(1, 101)), seed=0)
    # 1, 1.0 and True are equal in Python; each must still get a stable task of its own
    for key in (1, 1.0, True, "1"):
        assert choose([key]) == choose([key])
    assert len({choose([k])[0] for k in (1, 1.0, True, "1")}) > 1
