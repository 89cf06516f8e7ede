"""Runner conformance: the same topologies on the local and the Spark runner, same results.

Every behaviour is checked on both runners against exact expected values. Where Storm gives no
order guarantee across sources, per-task outputs are compared as sorted lists; where it does (one
source task to one target task), the order is checked exactly. Routing runs the same Python
choosers on both runners, so the task that receives each fields-grouped (or custom, direct,
global, all) tuple must be the same.

Spark is expensive: one session for the module, few rich topologies, small inputs, and runs that
several tests share (`_cached`). Components are module-level classes (pickled by value to the
Spark workers).
"""

from __future__ import annotations

import json
import os
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest
from support.runs import ONE_TUPLE

from squall import (
    BasicBolt,
    Bolt,
    FailedException,
    Fields,
    Spout,
    TopologyBuilder,
    Values,
)
from squall.testing import FixedTupleSpout, MockedSources, complete_topology
from squall.topology.groupings import stable_hash
from squall.trident import (
    BatchFunction as TridentBatchFunction,
)
from squall.trident import (
    BatchSpout,
    Count,
    MapGet,
    Max,
    Min,
    TridentTopology,
)
from squall.trident import (
    Filter as TridentFilter,
)
from squall.trident import (
    Function as TridentFunction,
)
from squall.trident import (
    MapFunction as TridentMapFunction,
)
from squall.trident.state import MemoryMapState

# ---- the Spark session: one for the module ---------------------------------------------------




_RESULTS: dict[tuple, object] = {}


def _cached(request, key: tuple, runner: str, build, conf=None, **kwargs):
    """Run `build()` with complete_topology on `runner`, once per key for the whole module."""
    full_key = (key, runner)
    if full_key not in _RESULTS:
        _RESULTS[full_key] = complete_topology(build(), conf, runner=runner, **kwargs)
    return _RESULTS[full_key]


def _local(build, conf=None, **kwargs):
    return complete_topology(build(), conf, runner="local", **kwargs)


def sorted_by_task(result, component: str, stream: str = "default") -> dict[int, list]:
    return {t: sorted(rows) for t, rows in result.tuples_by_task(component, stream).items()}


def error_summary(result) -> list[tuple]:
    return sorted(
        (e.component, e.task, type(e.error).__name__, str(e.error), e.stream)
        for e in result.errors
    )


# ---- word count --------------------------------------------------------------------------------

SENTENCES = [
    ["the cow jumped over the moon"],
    ["an apple a day keeps the doctor away"],
    ["four score and seven years ago"],
    ["snow white and the seven dwarfs"],
    ["i am at two with nature"],
    ["the moon and the cow"],
]
WORDS = Counter(w for (s,) in SENTENCES for w in s.split())


class SentenceSpout(Spout):
    """Replaced by MockedSources in every run."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("sentence"))


class SplitSentence(BasicBolt):
    def execute(self, tup, collector):
        for word in tup.get_string(0).split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class WordCount(Bolt):
    """Counts in a dict (in-memory state); emits running counts; dumps the dict at cleanup."""

    def __init__(self, out_dir: str | None = None) -> None:
        self.out_dir = out_dir

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}
        self.pids: set[int] = set()

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.pids.add(os.getpid())
        self.collector.emit(Values(word, self.counts[word]), anchors=tup)
        self.collector.ack(tup)

    def cleanup(self):
        if self.out_dir:
            path = Path(self.out_dir) / f"task-{self.context.this_task_id}.json"
            path.write_text(json.dumps({"counts": self.counts, "pids": sorted(self.pids)}))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


def word_count_topology(out_dir: str | None = None):
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout())
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(out_dir), parallelism=3).fields_grouping(
        "split", Fields("word")
    )
    return builder.create_topology()


# On Spark with as many tuples per micro-batch as are ready, and with one tuple per micro-batch.
word_count_runners = pytest.mark.runners("local", "spark-1batch", "spark-1tuple")


@pytest.fixture(scope="module")
def word_count_dirs():
    return {}


def _word_count(request, runner, conf, dirs):
    key = ("word_count", json.dumps(conf))
    if key not in dirs:
        dirs[key] = str(request.getfixturevalue("tmp_path_factory").mktemp("wc"))
    out_dir = dirs[key]
    result = _cached(request, key, runner, lambda: word_count_topology(out_dir), conf,
                     mocked_sources=MockedSources({"sentences": SENTENCES}))
    return result, Path(out_dir)


@word_count_runners
def test_word_count(request, runner, runner_conf, word_count_dirs):
    result, _ = _word_count(request, runner, runner_conf, word_count_dirs)
    # Task ids follow the sorted component ids: count 1-3, sentences 4, split 5-6.
    assert result.topology.component_tasks("count") == (1, 2, 3)
    by_task = sorted_by_task(result, "count")
    expected: dict[int, list] = {t: [] for t in (1, 2, 3)}
    for word, n in WORDS.items():
        expected[word_task_of(word)].extend([word, k] for k in range(1, n + 1))
    assert by_task == {t: sorted(rows) for t, rows in expected.items()}
    finals: dict[str, int] = {}
    for word, count in result.tuples("count"):
        finals[word] = max(finals.get(word, 0), count)
    assert finals == dict(WORDS)
    assert sorted(result.acked("sentences")) == list(range(len(SENTENCES)))
    assert result.failed("sentences") == []
    assert result.errors == []
    stats = result.stats
    assert (stats["split"].executed, stats["split"].emitted) == (6, sum(WORDS.values()))
    assert (stats["count"].executed, stats["count"].acked) == (sum(WORDS.values()),) * 2
    local = _local(word_count_topology, mocked_sources=MockedSources({"sentences": SENTENCES}))
    assert by_task == sorted_by_task(local, "count")
    assert sorted_by_task(result, "split") == sorted_by_task(local, "split")




@word_count_runners
def test_word_count_per_task_order(request, runner, runner_conf, word_count_dirs):
    """A count task emits each word's running counts in order: 1, 2, ..., n (its own order)."""
    result, _ = _word_count(request, runner, runner_conf, word_count_dirs)
    for task, rows in result.tuples_by_task("count").items():
        seen: dict[str, list[int]] = {}
        for word, count in rows:
            seen.setdefault(word, []).append(count)
        assert seen == {w: list(range(1, WORDS[w] + 1)) for w in seen}, f"task {task}"


@word_count_runners
def test_bolt_state_persists_across_micro_batches(request, runner, runner_conf, word_count_dirs):
    """The count dicts, dumped by cleanup at the end of the run, hold the exact totals."""
    _, out_dir = _word_count(request, runner, runner_conf, word_count_dirs)
    totals: dict[str, int] = {}
    for task in (1, 2, 3):
        dumped = json.loads((out_dir / f"task-{task}.json").read_text())
        for word, n in dumped["counts"].items():
            assert word_task_of(word) == task
            assert word not in totals
            totals[word] = n
    assert totals == dict(WORDS)


def word_task_of(word: str) -> int:
    """The count task of a word: fields grouping is crc32 of the word over tasks 1, 2, 3."""
    return [1, 2, 3][zlib.crc32(word.encode()) % 3]


# ---- every grouping ------------------------------------------------------------------------------

N = 12
SRC_ROWS = [[n, f"k{n % 4}"] for n in range(N)]
SIDE_ROWS = [[100 + i] for i in range(4)]


class Recorder(BasicBolt):
    """Emits (this task id, source component, source stream, source task, first value)."""

    def execute(self, tup, collector):
        collector.emit(Values(self.context.this_task_id, tup.source_component,
                              tup.source_stream_id, tup.source_task, tup[0]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("task", "component", "stream", "source", "n"))


class Router(Bolt):
    """Re-emits from a bolt: direct to a chosen task, on default, and evens on a named stream."""

    def execute(self, tup):
        n = tup["n"]
        targets = self.context.component_tasks("direct")
        self.collector.emit_direct(targets[n % len(targets)], Values(n), anchors=tup,
                                   stream="direct")
        self.collector.emit(Values(n), anchors=tup)
        if n % 2 == 0:
            self.collector.emit(Values(n), anchors=tup, stream="evens")
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))
        declarer.declare_stream("direct", Fields("n"), direct=True)
        declarer.declare_stream("evens", Fields("n"))


class ModGrouping:
    """Value v goes to target_tasks[v % n]."""

    def prepare(self, context, stream, target_tasks):
        self.targets = sorted(target_tasks)

    def choose_tasks(self, task_id, values):
        return [self.targets[values[0] % len(self.targets)]]


class RoundRobinGrouping:
    """Stateful: each emitting task walks the targets in order (its own copy of the state)."""

    def prepare(self, context, stream, target_tasks):
        self.targets = sorted(target_tasks)
        self.i = 0

    def choose_tasks(self, task_id, values):
        task = self.targets[self.i % len(self.targets)]
        self.i += 1
        return [task]


def groupings_topology():
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout({"default": SRC_ROWS, "side": SIDE_ROWS},
                                       {"default": Fields("n", "key"), "side": Fields("n")}),
                parallelism=2)
    b.set_bolt("shuffle", Recorder(), 3).shuffle_grouping("src")
    b.set_bolt("fields", Recorder(), 3).fields_grouping("src", Fields("key"))
    b.set_bolt("all", Recorder(), 2).all_grouping("src")
    b.set_bolt("global", Recorder(), 3).global_grouping("src")
    b.set_bolt("none", Recorder(), 2).none_grouping("src")
    b.set_bolt("local", Recorder(), 2).local_or_shuffle_grouping("src")
    b.set_bolt("side", Recorder(), 2).shuffle_grouping("src", "side")
    b.set_bolt("router", Router(), 2).shuffle_grouping("src")
    b.set_bolt("direct", Recorder(), 3).direct_grouping("router", "direct")
    b.set_bolt("evens", Recorder(), 2).fields_grouping("router", Fields("n"), "evens")
    b.set_bolt("bshuffle", Recorder(), 3).shuffle_grouping("router")
    return b.create_topology()


def test_every_grouping(request, runner):
    result = _cached(request, ("groupings",), runner, groupings_topology)
    topo = result.topology
    tasks = {cid: list(topo.component_tasks(cid)) for cid in topo.components}
    src_tasks = tasks["src"]
    # FixedTupleSpout with 2 tasks: task i emits the positions p with p % 2 == i
    # (default rows at positions 0-11, side rows at 12-15).
    src_of = {n: src_tasks[n % 2] for n in range(N)}
    src_of.update({100 + i: src_tasks[(N + i) % 2] for i in range(4)})

    def rows(cid):
        return result.tuples_by_task(cid)

    # Every recorder task reports its own task id, and the source as Storm names it.
    for cid in topo.components:
        if cid in ("src", "router"):
            continue
        for task, out in rows(cid).items():
            for t, component, _stream, source, n in out:
                assert t == task, (cid, task, t)
                assert source == (src_of[n] if component == "src" else source)

    def ns(cid):
        return {task: sorted(r[4] for r in out) for task, out in rows(cid).items()}

    def streams(cid):
        return {(r[1], r[2]) for out in rows(cid).values() for r in out}

    everything = list(range(N))
    assert [len(v) for v in ns("shuffle").values()] == [4, 4, 4]
    assert sorted(n for v in ns("shuffle").values() for n in v) == everything
    expected_fields = {t: [] for t in tasks["fields"]}
    for n in everything:
        expected_fields[tasks["fields"][zlib.crc32(f"k{n % 4}".encode()) % 3]].append(n)
    assert ns("fields") == expected_fields
    assert ns("all") == {t: everything for t in tasks["all"]}
    assert ns("global") == {t: (everything if t == min(tasks["global"]) else [])
                            for t in tasks["global"]}
    assert sorted(n for v in ns("none").values() for n in v) == everything
    # local_or_shuffle between components with as many tasks: task i sends to task i only.
    assert ns("local") == {t: [n for n in everything if src_of[n] == src_tasks[i]]
                           for i, t in enumerate(tasks["local"])}
    assert [len(v) for v in ns("side").values()] == [2, 2]
    assert sorted(n for v in ns("side").values() for n in v) == [100, 101, 102, 103]
    assert streams("side") == {("src", "side")}
    assert streams("shuffle") == {("src", "default")}
    assert [len(v) for v in result.tuples_by_task("router").values()] == [6, 6]
    assert ns("direct") == {t: [n for n in everything if n % 3 == i]
                            for i, t in enumerate(tasks["direct"])}
    assert streams("direct") == {("router", "direct")}
    assert ns("evens") == {t: [n for n in everything if n % 2 == 0
                               and stable_hash((n,)) % 2 == i]
                           for i, t in enumerate(tasks["evens"])}
    assert streams("evens") == {("router", "evens")}
    assert [len(v) for v in ns("bshuffle").values()] == [4, 4, 4]
    assert sorted(result.acked("src"), key=repr) == sorted(
        everything + [("side", i) for i in range(4)], key=repr)
    assert result.failed("src") == [] and result.errors == []

    # Exact per-(source task, target task) order: a spout task emits n in increasing order.
    for cid in ("shuffle", "fields", "all", "global", "none", "local", "side"):
        for task, out in rows(cid).items():
            for source in src_tasks:
                seq = [r[4] for r in out if r[3] == source]
                assert seq == sorted(seq), (cid, task, source)

    # Same routing as the local runner. The spout-fed groupings and every value-determined
    # choice must agree task by task; a bolt's shuffle depends on the order its task received
    # tuples from two spout tasks, which Storm leaves open, so only the spread is compared.
    local = _local(groupings_topology)
    for cid in topo.components:
        if cid in ("bshuffle", "router"):
            assert [len(v) for v in rows(cid).values()] == [
                len(v) for v in local.tuples_by_task(cid).values()]
        else:
            assert sorted_by_task(result, cid) == sorted_by_task(local, cid), cid


class Relay(Bolt):
    """One task: re-emits its input, anchored, in the order received."""

    def execute(self, tup):
        self.collector.emit(Values(tup[0]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


ROUTED = 16


def bolt_routing_topology():
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([[n] for n in range(ROUTED)], Fields("n")))
    b.set_bolt("relay", Relay()).global_grouping("src")
    b.set_bolt("shuffle", Recorder(), 3).shuffle_grouping("relay")
    b.set_bolt("none", Recorder(), 3).none_grouping("relay")
    return b.create_topology()




def test_bolt_routing_state_across_micro_batches(request, runner):
    """A bolt's shuffle and none groupings keep their state (position, random stream) from
    batch to batch.

    One relay task receives 0..15 in order (one source task), so its routing choices are fully
    determined by the seed: on one-tuple batches Spark must route exactly as the local runner.
    """
    result = _cached(request, ("bolt_routing",), runner, bolt_routing_topology, ONE_TUPLE)
    ns = {cid: {t: sorted(r[4] for r in out) for t, out in result.tuples_by_task(cid).items()}
          for cid in ("shuffle", "none")}
    assert sorted(result.tuples("relay")) == [[n] for n in range(ROUTED)]
    # Storm's shuffle: round robin over a reshuffled order, 5 or 6 tuples per task.
    assert sorted(len(v) for v in ns["shuffle"].values()) == [5, 5, 6]
    assert sorted(n for v in ns["none"].values() for n in v) == list(range(ROUTED))
    local = _local(bolt_routing_topology, ONE_TUPLE)
    for cid in ("shuffle", "none"):
        assert sorted_by_task(result, cid) == sorted_by_task(local, cid), cid
    assert sorted(result.acked("src")) == list(range(ROUTED))


def custom_grouping_topology():
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([[n] for n in range(9)], Fields("n")), parallelism=2)
    b.set_bolt("mod", Recorder(), 3).custom_grouping("src", ModGrouping())
    b.set_bolt("relay", Relay()).global_grouping("src")
    b.set_bolt("rr", Recorder(), 2).custom_grouping("relay", RoundRobinGrouping())
    return b.create_topology()




def test_custom_groupings(request, runner):
    """A custom grouping from a spout, and a stateful one from a bolt across one-tuple batches:
    each emitting task has its own prepared copy whose state carries on from batch to batch."""
    result = _cached(request, ("custom",), runner, custom_grouping_topology, ONE_TUPLE)
    topo = result.topology
    mod_tasks, rr_tasks = topo.component_tasks("mod"), topo.component_tasks("rr")
    assert {t: sorted(r[4] for r in out) for t, out in result.tuples_by_task("mod").items()} == {
        t: [n for n in range(9) if n % 3 == i] for i, t in enumerate(mod_tasks)}
    assert sorted(result.tuples("relay")) == [[n] for n in range(9)]
    # The relay receives 0..8 in order (alternately from the two spout tasks) and its k-th
    # emit goes to rr task k % 2.
    assert {t: [r[4] for r in out] for t, out in result.tuples_by_task("rr").items()} == {
        rr_tasks[0]: [0, 2, 4, 6, 8], rr_tasks[1]: [1, 3, 5, 7]}
    for cid in ("mod", "rr"):
        for task, out in result.tuples_by_task(cid).items():
            assert {r[0] for r in out} <= {task}
    assert sorted(result.acked("src")) == list(range(9))
    assert result.errors == []
    local = _local(custom_grouping_topology, ONE_TUPLE)
    assert sorted_by_task(result, "mod") == sorted_by_task(local, "mod")


# ---- reliability -----------------------------------------------------------------------------


class FailOdd(BasicBolt):
    """Auto-ack; FailedException for odd values. Emits evens (auto-anchored) downstream."""

    def execute(self, tup, collector):
        if tup[0] % 2:
            raise FailedException(f"odd {tup[0]}")
        collector.emit(Values(tup[0]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class AckAll(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


class FailOnce(Bolt):
    """Fails 1 and 3 the first time it sees them (the set persists between batches)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.failed_once: set[int] = set()

    def execute(self, tup):
        n = tup[0]
        if n in (1, 3) and n not in self.failed_once:
            self.failed_once.add(n)
            self.collector.fail(tup)
            return
        self.collector.emit(Values(n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class EmitUnanchored(Bolt):
    def execute(self, tup):
        self.collector.emit(Values(tup[0]))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class FailAll(Bolt):
    def execute(self, tup):
        self.collector.fail(tup)


class Explode(Bolt):
    def execute(self, tup):
        if tup[0] == 2:
            raise ValueError("boom on 2")
        self.collector.ack(tup)


def fixed(n: int, *, replay: bool = False) -> FixedTupleSpout:
    return FixedTupleSpout([[i] for i in range(n)], Fields("n"), replay_failed=replay)


def reliability_topology():
    b = TopologyBuilder()
    b.set_spout("basic_src", fixed(6))
    b.set_bolt("failodd", FailOdd(), 2).shuffle_grouping("basic_src")
    b.set_bolt("failodd_sink", AckAll()).shuffle_grouping("failodd")
    b.set_spout("replay_src", fixed(5, replay=True))
    b.set_bolt("failonce", FailOnce(), 2).fields_grouping("replay_src", Fields("n"))
    b.set_spout("unanchored_src", fixed(4))
    b.set_bolt("unanchored", EmitUnanchored()).shuffle_grouping("unanchored_src")
    b.set_bolt("failall", FailAll()).shuffle_grouping("unanchored")
    b.set_spout("boom_src", fixed(4))
    b.set_bolt("explode", Explode()).shuffle_grouping("boom_src")
    return b.create_topology()


# One tuple a batch fills every batch: the reader plans each next batch while one runs.
planned_ahead = pytest.mark.runners("local", "spark", "spark-1tuple")


@planned_ahead
def test_reliability(request, runner, runner_conf):
    result = _cached(request, ("reliability", json.dumps(runner_conf)), runner,
                     reliability_topology, runner_conf)
    # BasicBolt: auto-ack; FailedException fails the tree (odd values), no error reported.
    assert sorted(result.acked("basic_src")) == [0, 2, 4]
    assert sorted(result.failed("basic_src")) == [1, 3, 5]
    assert sorted(result.tuples("failodd")) == [[0], [2], [4]]
    assert result.stats["failodd"].failed == 3 and result.stats["failodd"].acked == 3
    # Explicit fail, replayed by the spout, then processed once.
    assert sorted(result.failed("replay_src")) == [1, 3]
    assert sorted(result.acked("replay_src")) == [0, 1, 2, 3, 4]
    assert sorted(result.tuples("failonce")) == [[0], [1], [2], [3], [4]]
    assert result.stats["replay_src"].emitted == 7
    # Unanchored emits are not part of the tree: failing them downstream changes nothing.
    assert sorted(result.acked("unanchored_src")) == [0, 1, 2, 3]
    assert result.failed("unanchored_src") == []
    assert result.stats["failall"].failed == 4
    # An exception in execute is reported and fails the input tuple.
    assert sorted(result.acked("boom_src")) == [0, 1, 3]
    assert result.failed("boom_src") == [2]
    explode_task = result.topology.component_tasks("explode")[0]
    assert error_summary(result) == [
        ("explode", explode_task, "ValueError", "boom on 2", "default")
    ]
    assert result.stats["explode"].errors == 1


def no_acker_topology():
    b = TopologyBuilder()
    b.set_spout("src", fixed(5))
    b.set_bolt("failall", FailAll(), 2).shuffle_grouping("src")
    b.set_bolt("hold", Hold()).shuffle_grouping("src")
    return b.create_topology()


class Hold(Bolt):
    """Never acks anything."""

    def execute(self, tup):
        pass


@planned_ahead
def test_no_ackers_acks_at_once(request, runner, runner_conf):
    conf = {"topology.acker.executors": 0, "topology.message.timeout.secs": 1, **runner_conf}
    result = _cached(request, ("no_ackers", json.dumps(runner_conf)), runner, no_acker_topology,
                     conf)
    assert sorted(result.acked("src")) == [0, 1, 2, 3, 4]
    assert result.failed("src") == []
    assert result.stats["src"].timed_out == 0
    assert result.stats["failall"].failed == 5
    assert result.errors == []


class InFlightSpout(Spout):
    """Emits 0..7, each with the number of its own tuples in flight when it was emitted."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.next = 0
        self.in_flight: set[int] = set()
        self.acked: list[int] = []
        self.failed: list[int] = []

    def next_tuple(self):
        if self.next < 8:
            n = self.next
            self.next += 1
            self.collector.emit(Values(n, len(self.in_flight)), msg_id=n)
            self.in_flight.add(n)

    def ack(self, msg_id):
        self.in_flight.discard(msg_id)
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.in_flight.discard(msg_id)
        self.failed.append(msg_id)

    def is_exhausted(self):
        return self.next >= 8

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "in_flight"))


class AckPairs(Bolt):
    """Holds tuples and acks them two at a time."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) == 2:
            for held in self.held:
                self.collector.ack(held)
            self.held = []


def max_pending_topology():
    b = TopologyBuilder()
    b.set_spout("src", InFlightSpout())
    b.set_bolt("pairs", AckPairs()).global_grouping("src")
    return b.create_topology()


@planned_ahead
def test_max_spout_pending(request, runner, runner_conf):
    conf = {"topology.max.spout.pending": 2, **runner_conf}
    result = _cached(request, ("max_pending", json.dumps(runner_conf)), runner,
                     max_pending_topology, conf)
    emitted = result.tuples("src")
    assert [n for n, _ in emitted] == list(range(8))
    # At most 2 in flight: the third waits for the pair to be acked.
    assert [k for _, k in emitted] == [0, 1] * 4
    assert sorted(result.acked("src")) == list(range(8))
    assert result.failed("src") == [] and result.errors == []


class DropOnce(Bolt):
    """Neither acks nor fails 1 the first time (it times out); acks everything else."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.dropped = False

    def execute(self, tup):
        if tup[0] == 1 and not self.dropped:
            self.dropped = True
            return
        self.collector.emit(Values(tup[0]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def timeout_topology():
    b = TopologyBuilder()
    b.set_spout("src", fixed(4, replay=True))
    b.set_bolt("drop", DropOnce()).global_grouping("src")
    return b.create_topology()


@planned_ahead
def test_timeout_fails_and_replays(request, runner, runner_conf):
    conf = {"topology.message.timeout.secs": 2, **runner_conf}
    result = _cached(request, ("timeout", json.dumps(runner_conf)), runner, timeout_topology,
                     conf)
    assert result.failed("src") == [1]
    assert sorted(result.acked("src")) == [0, 1, 2, 3]
    assert sorted(result.tuples("drop")) == [[0], [1], [2], [3]]
    assert result.stats["src"].timed_out == 1
    assert result.stats["src"].emitted == 5
    assert result.errors == []


# ---- multi-anchoring -------------------------------------------------------------------------


class Join(Bolt):
    """Joins left and right by key; the joined tuple is anchored to both inputs."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.waiting: dict[str, object] = {}

    def execute(self, tup):
        key = tup["key"]
        other = self.waiting.pop(key, None)
        if other is None:
            self.waiting[key] = tup
            return
        left, right = (tup, other) if tup.source_component == "left" else (other, tup)
        self.collector.emit(Values(key, left["lv"], right["rv"]), anchors=[left, right])
        self.collector.ack(left)
        self.collector.ack(right)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("key", "lv", "rv"))


class FailKeyB(Bolt):
    def execute(self, tup):
        if tup["key"] == "b":
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def multi_anchor_topology():
    b = TopologyBuilder()
    b.set_spout("left", FixedTupleSpout([["a", 1], ["b", 2], ["c", 3]], Fields("key", "lv")))
    b.set_spout("right", FixedTupleSpout([["c", 30], ["b", 20], ["a", 10]], Fields("key", "rv")))
    b.set_bolt("join", Join(), 2).fields_grouping("left", Fields("key")).fields_grouping(
        "right", Fields("key"))
    b.set_bolt("check", FailKeyB()).shuffle_grouping("join")
    return b.create_topology()


@pytest.mark.runners("local", "spark-1tuple")
def test_multi_anchoring_completes_both_trees(request, runner, runner_conf):
    result = _cached(request, ("multi_anchor", json.dumps(runner_conf)), runner,
                     multi_anchor_topology, runner_conf)
    assert sorted(result.tuples("join")) == [["a", 1, 10], ["b", 2, 20], ["c", 3, 30]]
    # a and c: both roots complete only when the joined tuple is acked; b fails both roots.
    assert sorted(result.acked("left")) == [0, 2]
    assert result.failed("left") == [1]
    assert sorted(result.acked("right")) == [0, 2]
    assert result.failed("right") == [1]
    assert result.errors == []
    local = _local(multi_anchor_topology)
    assert sorted_by_task(result, "join") == sorted_by_task(local, "join")


# ---- local_or_shuffle chains (one Spark stage when fused) -------------------------------------


class Stamp(Bolt):
    """Emits its input with this task's id appended, anchored, then acks it."""

    def execute(self, tup):
        self.collector.emit(Values(*tup.values, self.context.this_task_id), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "a"))


class StampOrFailOnce(Bolt):
    """`Stamp`, but fails 1 and 4 the first time it sees them (kept in the instance)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.failed_once: set[int] = set()

    def execute(self, tup):
        if tup[0] in (1, 4) and tup[0] not in self.failed_once:
            self.failed_once.add(tup[0])
            self.collector.fail(tup)
            return
        self.collector.emit(Values(*tup.values, self.context.this_task_id), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "a", "b"))


class StampLast(BasicBolt):
    """Emits the path its input took (anchored by BasicBolt), ending with this task."""

    def execute(self, tup, collector):
        collector.emit(Values(*tup.values, self.context.this_task_id))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "a", "b", "c"))


def local_chain_topology(grouping: str = "local_or_shuffle"):
    b = TopologyBuilder()
    b.set_spout("src", fixed(10, replay=True), parallelism=2)
    b.set_bolt("a", Stamp(), 2).fields_grouping("src", Fields("n"))
    getattr(b.set_bolt("b", StampOrFailOnce(), 2), f"{grouping}_grouping")("a")
    getattr(b.set_bolt("c", StampLast(), 2), f"{grouping}_grouping")("b")
    return b.create_topology()


@pytest.mark.parametrize("grouping", ["local_or_shuffle", "shuffle"])
@pytest.mark.parametrize("fusion", [True, False], ids=["fusion", "no-fusion"])
def test_local_or_shuffle_chain_forwards_task_i_to_task_i(request, runner, fusion, grouping):
    """src(2) -fields-> a(2) -local_or_shuffle-> b(2) -local_or_shuffle-> c(2), acking on, b
    failing two tuples once (replayed): a's task i sends to b's task i, b's to c's task i, on
    both runners; on Spark b and c run in a's stage unless squall.spark.fusion is false, with
    the same outputs, tasks and counts. A shuffle grouping between as many tasks means the same
    (Storm's locality-aware shuffle, `topology.disable.loadaware.messaging` unset)."""
    conf = {"squall.spark.fusion": fusion}
    result = _cached(request, ("local_chain", grouping, fusion), runner,
                     lambda: local_chain_topology(grouping), conf)
    tasks = {cid: list(result.topology.component_tasks(cid)) for cid in ("a", "b", "c")}
    a_of = {n: tasks["a"][stable_hash([n]) % 2] for n in range(10)}

    def forward(t: int, to: str, frm: str) -> int:
        return tasks[to][tasks[frm].index(t)]

    expected = {t: [] for t in tasks["c"]}
    for n in range(10):
        a = a_of[n]
        b = forward(a, "b", "a")
        expected[forward(b, "c", "b")].append([n, a, b, forward(b, "c", "b")])
    assert sorted_by_task(result, "c") == expected
    assert sorted(result.tuples("a")) == sorted(
        [[n, a_of[n]] for n in range(10)] + [[n, a_of[n]] for n in (1, 4)])  # replays
    assert sorted(result.failed("src")) == [1, 4]
    assert sorted(result.acked("src")) == list(range(10))
    assert (result.stats["a"].acked, result.stats["b"].acked, result.stats["b"].failed,
            result.stats["c"].acked) == (12, 10, 2, 10)
    assert result.stats["src"].emitted == 12
    assert result.errors == []
    local = _cached(request, ("local_chain", grouping, True), "local",
                    lambda: local_chain_topology(grouping), conf)
    for cid in ("a", "b", "c"):
        assert sorted_by_task(result, cid) == sorted_by_task(local, cid), cid


def test_a_plain_shuffle_between_as_many_tasks_spreads_over_every_task(request, runner):
    """The same chain with shuffle groupings and `topology.disable.loadaware.messaging` true
    (Storm's plain ShuffleGrouping): each of a's tasks sends to both of b's tasks, and each of
    b's to both of c's, on both runners (on Spark b and c then get a stage each)."""
    conf = {"topology.disable.loadaware.messaging": True}
    result = _cached(request, ("plain_shuffle",), runner,
                     lambda: local_chain_topology("shuffle"), conf)
    tasks = {cid: list(result.topology.component_tasks(cid)) for cid in ("a", "b", "c")}
    a_of = {n: tasks["a"][stable_hash([n]) % 2] for n in range(10)}
    out = sorted(result.tuples("c"))
    assert [(n, a) for n, a, _, _ in out] == sorted((n, a_of[n]) for n in range(10))
    sent: dict[tuple[str, int], set[int]] = {}
    for _, a, b, c in out:
        sent.setdefault(("a", a), set()).add(b)
        sent.setdefault(("b", b), set()).add(c)
    assert sent == {("a", t): set(tasks["b"]) for t in tasks["a"]} | {
        ("b", t): set(tasks["c"]) for t in tasks["b"]}
    assert sorted(result.acked("src")) == list(range(10))
    assert result.errors == []


class Fan(Bolt):
    """Emits each input's number three times with `emit_many`, and once more with a wrong arity
    (which must be refused like `emit`)."""

    def execute(self, tup):
        n = tup["n"]
        self.collector.emit_many([[n, k] for k in range(3)])
        self.collector.emit_many([[n, 9], [n, 9, 9]])
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n", "k"))


class Keep(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def emit_many_topology():
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([[n] for n in range(6)], Fields("n")))
    b.set_bolt("fan", Fan(), 2).shuffle_grouping("src")
    b.set_bolt("keep", Keep(), 2).fields_grouping("fan", Fields("k"))
    return b.create_topology()


def test_emit_many_is_emit_per_row(request, runner):
    result = _cached(request, ("emit_many",), runner, emit_many_topology)
    # Per input: three rows, then one row of the second call before its wrong-arity row stops it.
    assert sorted(map(tuple, result.tuples("fan"))) == sorted(
        [(n, k) for n in range(6) for k in range(3)] + [(n, 9) for n in range(6)])
    stats = result.stats["fan"]
    assert stats.emitted == 24 and stats.transferred == 24
    assert result.stats["keep"].executed == 24
    assert [e for e in result.errors if "3 values" in str(e.error) and e.component == "fan"]
    assert len(result.errors) == 6


# ---- Trident: one rich topology, every operation's output identical on both runners ----------

class TridentSplit(TridentFunction):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


class TridentLength(TridentBatchFunction):
    output_types = {"length": int}  # noqa: RUF012 -- a Trident declaration, read not mutated

    def execute_batch(self, table):
        return {"length": pc.utf8_length(table["word"])}


class LongWord(TridentFilter):
    def is_keep(self, tup):
        return len(tup[0]) > 2


class Shout(TridentMapFunction):
    def execute(self, tup):
        return [tup[0].upper()]


class TridentFixedBatches(BatchSpout):
    """Batch `b` is `batches[b - 1]`; the same rows on a replay."""

    transactional = True

    def __init__(self, fields, batches):
        self.fields, self.batches = tuple(fields), batches

    def get_output_fields(self):
        return self.fields

    def emit_batch(self, batch_id, collector):
        for row in self.batches[batch_id - 1] if batch_id <= len(self.batches) else []:
            collector.emit(row)

    def is_exhausted(self, batch_id):
        return batch_id > len(self.batches)


def _trident_everything():
    batches = [[(f"the cow {w} over", i * 700) for i, w in enumerate(["jumped", "ran", "sat"])],
               [], [("the moon and the cow", 2_800), ("a moon", 3_500)],
               [("cow moon cow", 9_000)]]
    t = TridentTopology()
    words = (t.new_stream("s", TridentFixedBatches(["sentence", "ts"], batches))
             .each(["sentence"], TridentSplit(), ["word"]).name("words"))
    counts = (words.group_by(["word"])
              .persistent_aggregate(MemoryMapState.factory(), Count(), ["count"])
              .name("counts"))
    words.each(["word"], TridentLength(), ["length"]).name("lengths") \
        .group_by(["length"]).aggregate(["word"], Min(), ["first"]).name("by-length")
    words.each(["word"], LongWord()).map(Shout(), ["shout"]).name("shouts")
    words.project(["word"]).aggregate(Count(), ["n"]).name("batch-sizes")
    words.group_by(["word"]).tumbling_window(2_000, [], Count(), ["count"],
                                             timestamp_field="ts").name("windows")
    words.state_query(counts, ["word"], MapGet(), ["so-far"]).name("query")
    t.join(words.project(["word", "ts"]), ["word"],
           words.group_by(["word"]).aggregate(["ts"], Max(), ["last"]).name("last"), ["word"],
           ["word", "ts", "last"]).name("joined")
    t.merge(words.project(["word"]), counts.new_values_stream().project(["word"])).name("merged")
    return t.build()


@pytest.mark.spark
def test_trident_topology_is_identical_on_both_runners(request):
    """Every Trident operation's output (as a multiset: Trident fixes no order across
    partitions) is the same on the Spark runner as on the local runner; the operations Spark
    runs inside a job show through the aggregations they feed."""
    request.getfixturevalue("spark_session")
    local = complete_topology(_trident_everything(), runner="local")
    spark = complete_topology(_trident_everything(), runner="spark")
    components = [c for c in local.topology.components if not c.startswith("$")]
    assert {"counts", "windows", "query", "joined", "merged", "by-length"} <= set(components)
    uncollected = set(spark.extra["uncollected"])  # inside Spark: seen through what they feed
    assert uncollected and uncollected < set(components)
    for c in components:
        if c in uncollected:
            continue
        assert sorted(map(repr, local.tuples(c))) == sorted(map(repr, spark.tuples(c))), c
    assert local.extra["committed"] == spark.extra["committed"] == [1, 2, 3, 4]
    for c in ("counts", "windows", "query", "joined", "merged", "by-length", "shouts"):
        assert c not in uncollected and local.tuples(c), c  # compared, and not empty


@pytest.mark.spark
def test_routing_keys_land_where_sparks_own_hash_puts_them(spark_session):
    """The Spark runner routes each task's rows by a key computed in Python (Spark's Murmur3
    hash of a long, seed 42): it must agree with Spark's `hash` and `repartition` exactly."""
    from pyspark.sql import functions as F

    from squall.murmur3 import hash_long as spark_hash_long
    from squall.runtime.spark.query import routing_keys

    values = [*range(-300, 300), 2**31, 2**31 - 1, -(2**31), 2**32, 2**62, -(2**63),
              2**63 - 1, 123456789012345]
    rows = spark_session.createDataFrame([(v,) for v in values], "id long").select(
        "id", F.expr("hash(id)").alias("h")).collect()
    assert [(r.id, spark_hash_long(r.id)) for r in rows] == [(r.id, r.h) for r in rows]
    for n in (1, 2, 3, 5, 8):
        keys = routing_keys(n)
        placed = spark_session.createDataFrame([(k,) for k in keys], "id long").repartition(
            n, "id").select("id", F.spark_partition_id().alias("p")).collect()
        assert sorted((r.p, r.id) for r in placed) == list(enumerate(keys))
