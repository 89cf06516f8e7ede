"""Restarting on one checkpoint with other parallelism or changed code, on both
runners.

- A stateful word count runs with `count` at parallelism 2, then 3, then 1 on the same
  checkpoint, each run reading new files: every word's running counts across the three runs are
  exactly 1..n (state moved key by key, nothing counted twice or lost).
- A structural change (a component added, a grouping changed) is refused with the exact change.
- A restart with changed constructor arguments takes the new ones, restores the state, and warns;
  a restart of the same script's topology, whose classes are new on every load, does not.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest
from support.redis_server import start_redis
from support.run_until import run_until

from squall import BasicBolt, Bolt, Fields, StatefulBolt, TopologyBuilder, Values, run
from squall.connectors import JsonLinesSink, JsonLinesSource, read_jsonl
from squall.task.reshape import RescaleError

WORDS = [f"w{i}" for i in range(40)]


class Split(BasicBolt):
    def execute(self, tup, collector):
        for word in tup["line"].split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class WordCount(StatefulBolt):
    """Counts words in its key-value state; emits each word's running count."""

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup["word"]
        n = (self.counts.get(word) or 0) + 1
        self.counts.put(word, n)
        self.collector.emit(Values(word, n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "n"))


def word_count(tmp: Path, count_tasks: int, *, count_grouping: str = "fields",
               extra_bolt: bool = False, split_tasks: int = 2, lines_tasks: int = 1):
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSource(str(tmp / "in"), ["line"], bounded=True), lines_tasks)
    b.set_bolt("split", Split(), split_tasks).shuffle_grouping("lines")
    declarer = b.set_bolt("count", WordCount(), count_tasks)
    if count_grouping == "fields":
        declarer.fields_grouping("split", Fields("word"))
    else:
        declarer.shuffle_grouping("split")
    b.set_bolt("out", JsonLinesSink(str(tmp / "out")), 2).shuffle_grouping("count")
    # A second counter that keeps its parallelism: its task ids move with every resize above.
    b.set_bolt("tally", WordCount(), 2).fields_grouping("split", Fields("word"))
    b.set_bolt("tallied", JsonLinesSink(str(tmp / "tallied"))).shuffle_grouping("tally")
    if extra_bolt:
        b.set_bolt("extra", Split(), 1).shuffle_grouping("lines")
    return b.create_topology()


def write_lines(directory: Path, name: str, lines: int, rng: random.Random) -> Counter:
    directory.mkdir(parents=True, exist_ok=True)
    counts: Counter = Counter()
    with open(directory / f"{name}.jsonl", "w") as f:
        for _ in range(lines):
            words = rng.choices(WORDS, k=rng.randint(1, 6))
            counts.update(words)
            f.write(json.dumps({"line": " ".join(words)}) + "\n")
    return counts


def conf_for(runner: str) -> dict:
    conf: dict = {"topology.workers": 1}
    if runner == "local":
        conf["squall.local.batch.ms"] = 50
    return conf


def rescale_three_times(runner: str, tmp_path: Path, conf: dict) -> None:
    """Count at parallelism 2, then 3, then 1, each run reading one new file: every word's
    running counts across the runs must be exactly 1..n."""
    rng = random.Random(7)
    ckpt = str(tmp_path / "ckpt")
    true: Counter = Counter()
    # `split` (a plain bolt) is resized too; every resize renumbers the other components' tasks.
    for step, (tasks, split_tasks) in enumerate(((2, 2), (3, 1), (1, 3))):
        true += write_lines(tmp_path / "in", f"part-{step}", 300, rng)
        result = run(word_count(tmp_path, tasks, split_tasks=split_tasks), conf,
                     runner=runner, checkpoint_location=ckpt)
        assert result.errors == []
        assert result.stats["lines"].emitted == 300  # only the new file is read
    for sink in ("out", "tallied"):
        by_word: dict[str, list[int]] = {}
        for r in read_jsonl(tmp_path / sink):
            by_word.setdefault(r["word"], []).append(r["n"])
        assert set(by_word) == set(true), sink
        for word, n in true.items():
            assert sorted(by_word[word]) == list(range(1, n + 1)), (sink, word)


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)],
                         indirect=True)
def test_stateful_word_count_rescaled_2_3_1_counts_exactly(runner, tmp_path):
    rescale_three_times(runner, tmp_path, conf_for(runner))


def test_redis_state_rescaled_2_3_1_counts_exactly(tmp_path):
    """The same with the redis provider (local runner): each key ends in the hash of the one
    task the grouping routes it to."""
    with start_redis(tmp_path) as r:
        conf = {**conf_for("local"), "topology.state.provider": "redis",
                "topology.state.provider.config": {"port": r.port}}
        rescale_three_times("local", tmp_path, conf)
        hashes = sorted(k for k in r.client.keys("squall:state:count-*") if ":" not in k[13:])
        assert hashes == ["squall:state:count-1"]  # one task now; the others were emptied


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)],
                         indirect=True)
def test_structural_changes_are_refused_with_what_changed(runner, tmp_path):
    write_lines(tmp_path / "in", "part-0", 20, random.Random(1))
    ckpt = str(tmp_path / "ckpt")
    run(word_count(tmp_path, 2), conf_for(runner), runner=runner, checkpoint_location=ckpt)
    with pytest.raises(RescaleError, match=r"written by a different topology: grouping of "
                       r"split->count changed from fields\(word\) to shuffle\. "):
        run(word_count(tmp_path, 2, count_grouping="shuffle"), conf_for(runner), runner=runner,
            checkpoint_location=ckpt)
    with pytest.raises(RescaleError, match=r"different topology: component 'extra' was added\."):
        run(word_count(tmp_path, 3, extra_bolt=True), conf_for(runner), runner=runner,
            checkpoint_location=ckpt)
    # A rescale that cannot be carried says which and why.
    with pytest.raises(RescaleError, match=r"cannot be resumed with this parallelism: "
                       r"parallelism of 'lines' changed from 1 to 2, but a spout's tasks own"):
        run(word_count(tmp_path, 2, lines_tasks=2), conf_for(runner), runner=runner,
            checkpoint_location=ckpt)
    # State kept in task snapshots (the memory provider) is not redistributed: refused.
    memory = {**conf_for(runner), "topology.state.provider": "memory"}
    run(word_count(tmp_path, 2), memory, runner=runner, checkpoint_location=ckpt + "-memory")
    with pytest.raises(RescaleError, match=r"parallelism of 'count' changed from 2 to 3, but its "
                       r"state provider is 'memory'; a rescale redistributes the state of the "
                       r"'durable' or 'redis' provider"):
        run(word_count(tmp_path, 3), memory, runner=runner, checkpoint_location=ckpt + "-memory")
    # The refusals left the checkpoint as it was: the original topology still resumes.
    again = run(word_count(tmp_path, 2), conf_for(runner), runner=runner,
                checkpoint_location=ckpt)
    assert again.errors == [] and again.stats["lines"].emitted == 0


class Tag(Bolt):
    """Tags each word with its constructor argument and the number of words it has seen."""

    def __init__(self, label):
        self.label = label

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        self.collector.emit(Values(tup["line"], self.label, self.seen), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("line", "label", "seen"))


def tagged(tmp: Path, label: str, bounded: bool):
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSource(str(tmp / "in"), ["line"], bounded=bounded))
    b.set_bolt("tag", Tag(label)).shuffle_grouping("lines")
    b.set_bolt("out", JsonLinesSink(str(tmp / "out"))).shuffle_grouping("tag")
    return b.create_topology()


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)],
                         indirect=True)
def test_restart_with_changed_arguments_takes_the_new_ones_and_warns(runner, tmp_path, caplog):
    ckpt = str(tmp_path / "ckpt")
    write_lines(tmp_path / "in", "part-0", 10, random.Random(3))
    # The first run's source is unbounded: it runs until its ten lines are out.
    first = run_until(tagged(tmp_path, "v1", bounded=False),
                      lambda: len(read_jsonl(tmp_path / "out")) >= 10, conf_for(runner),
                      runner=runner, checkpoint_location=ckpt)
    assert first.stats["lines"].emitted == 10
    write_lines(tmp_path / "in", "part-1", 5, random.Random(4))
    caplog.set_level(logging.WARNING, logger="squall")
    # Restarted bounded with another label: it completes (no duration) and tags with v2, and
    # the bolt's own state (what it has seen) continues.
    second = run(tagged(tmp_path, "v2", bounded=True), conf_for(runner), runner=runner,
                 checkpoint_location=ckpt, duration=90)
    assert second.elapsed_ms < 60_000  # it completed: no waiting for the duration
    records = read_jsonl(tmp_path / "out")
    new = sorted((r["seen"], r["label"]) for r in records if r["label"] == "v2")
    assert new == [(n, "v2") for n in range(11, 16)]
    assert sorted(r["seen"] for r in records) == list(range(1, 16))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("component 'tag' restarts with a changed configuration (label: 'v1' -> 'v2')"
               in w for w in warnings), warnings
    assert any("component 'lines' restarts with a changed configuration (bounded: False -> True)"
               in w for w in warnings), warnings


# A topology file as `squall run FILE.py:...` loads it: its classes are new classes on every
# load (in every process), pickled by value, so its objects are equal to no earlier load's.
SCRIPT = """
from pathlib import Path
from squall import Bolt, Fields, TopologyBuilder, Values
from squall.connectors import JsonLinesSink, JsonLinesSource

HERE = Path(__file__).parent


class Query:
    def __init__(self, limit):
        self.limit = limit


class Select(Bolt):
    def __init__(self, op):
        self.op = op

    def execute(self, tup):
        if len(tup["line"]) <= self.op.limit:
            self.collector.emit(Values(tup["line"]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("line"))


def topology(limit):
    b = TopologyBuilder()
    b.set_spout("lines", JsonLinesSource(str(HERE / "in"), ["line"], bounded=True))
    b.set_bolt("select", Select(Query(limit))).shuffle_grouping("lines")
    b.set_bolt("out", JsonLinesSink(str(HERE / "out"))).shuffle_grouping("select")
    return b.create_topology()


def short():
    return topology(5)


def long():
    return topology(9)
"""


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)],
                         indirect=True)
def test_restart_of_a_script_warns_only_when_an_argument_changed(runner, tmp_path, caplog):
    """A component holding a user object of a script's class restarts without a warning when
    nothing changed, and with one naming the changed attribute when the object's argument
    did."""
    from squall.cli.target import load_target

    (tmp_path / "pipeline.py").write_text(SCRIPT)
    ckpt = str(tmp_path / "ckpt")
    caplog.set_level(logging.WARNING, logger="squall")

    def restart(target: str, lines: list[str]) -> list[str]:
        (tmp_path / "in").mkdir(exist_ok=True)
        name = f"part-{len(os.listdir(tmp_path / 'in'))}.jsonl"
        (tmp_path / "in" / name).write_text("".join(json.dumps({"line": x}) + "\n"
                                                    for x in lines))
        caplog.clear()
        topology, _ = load_target(f"{tmp_path / 'pipeline.py'}:{target}")
        result = run(topology, conf_for(runner), runner=runner, checkpoint_location=ckpt)
        assert result.errors == []
        return [r.getMessage() for r in caplog.records
                if "restarts with a changed configuration" in r.getMessage()]

    assert restart("short", ["a", "abcdefg"]) == []
    assert restart("short", ["bb", "bbbbbbb"]) == []  # the same script, loaded anew
    warnings = restart("long", ["ccc", "ccccccc"])
    assert len(warnings) == 1 and "component 'select' restarts with a changed configuration " \
        "(op.limit: 5 -> 9)" in warnings[0], warnings
    assert sorted(r["line"] for r in read_jsonl(tmp_path / "out")) == \
        ["a", "bb", "ccc", "ccccccc"]


def test_a_redistribution_interrupted_anywhere_completes_on_the_next_start(tmp_path):
    """Kill the move after each store write: the next start, reading the same namespaces (the
    marker's), ends with every key once, at its owner, with its committed value."""
    from squall.state.backends import SqliteStore, StoreKeyValueState
    from squall.task.reshape import owner, redistribute

    keys = {f"k{i}": i for i in range(200)}

    def fresh_stores(where: Path):
        def open_state(name):
            return StoreKeyValueState(SqliteStore(str(where / f"{name}.sqlite")))
        route = owner(("word",), 2)
        for i, name in enumerate(("count-1", "count-2")):
            state = open_state(name)
            state.store.write_committed({k: v for k, v in keys.items() if route(k) == i})
            state.put("k0" if i == route("k0") else "k1", -1)  # prepared above: discarded
            state.prepare_commit(5)
        return open_state

    class Killed(Exception):
        pass

    writes = 0
    for kill_at in range(1, 8):
        where = tmp_path / f"kill-{kill_at}"
        where.mkdir()
        open_state = fresh_stores(where)
        seen = [0]

        def dying(name, seen=seen, kill_at=kill_at, open_state=open_state):
            state = open_state(name)
            real = state.store.write_committed

            def write(changes):
                seen[0] += 1
                if seen[0] == kill_at:
                    raise Killed
                real(changes)
            state.store.write_committed = write
            return state

        names = ["count-1", "count-2", "count-3", "count-4"]
        try:
            redistribute("count", ("word",), [1, 2], (2, 3, 4), names, 4, dying)
        except Killed:
            writes += 1
        redistribute("count", ("word",), [1, 2], (2, 3, 4), names, 4, open_state)
        route = owner(("word",), 3)
        found: dict = {}
        for i, name in enumerate(("count-2", "count-3", "count-4")):
            for key, value in open_state(name):
                assert route(key) == i and key not in found
                found[key] = value
        assert found == keys
        assert list(open_state("count-1")) == []
    assert writes >= 5  # the kill points were inside the move


@pytest.mark.spark
def test_spark_refuses_to_rescale_a_batch_planned_with_the_old_parallelism(tmp_path,
                                                                           spark_session):
    """What a kill between Spark's offset log and the driver's commit leaves: a planned batch
    whose rows are routed to the old tasks. A rescale is refused, saying what to do; the
    checkpoint is left as it was."""
    write_lines(tmp_path / "in", "part-0", 20, random.Random(5))
    ckpt = tmp_path / "ckpt"
    run(word_count(tmp_path, 2), conf_for("spark"), runner="spark", checkpoint_location=str(ckpt))
    offsets = ckpt / "query" / "offsets"
    last = max(int(n) for n in os.listdir(offsets) if n.isdigit())
    shutil.copy(offsets / str(last), offsets / str(last + 1))
    before = (ckpt / "topology.json").read_text()
    with pytest.raises(RescaleError, match=rf"batch {last + 1} was planned with the old "
                       r"parallelism and is not committed .*run once more with the parallelism "
                       r"the checkpoint was written with"):
        run(word_count(tmp_path, 3), conf_for("spark"), runner="spark",
            checkpoint_location=str(ckpt))
    assert (ckpt / "topology.json").read_text() == before
