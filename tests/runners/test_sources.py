"""Built-in sources (squall.connectors): the same records on both runners, replay after failures.

Real files in tmp directories, a real `redis-server` on a loopback port, one Spark session for the
module. On Spark the records are read on executors, one input partition per planned range.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support.redis_server import free_port, start_redis
from support.run_until import ErrorSeen, run_until
from support.runs import MAX_TUPLES, ONE_TUPLE

from squall import BasicBolt, Bolt, Fields, TopologyBuilder, Values, run
from squall.connectors import (
    CsvSource,
    JsonLinesSink,
    JsonLinesSource,
    MemorySource,
    Range,
    RedisStreamSource,
    SourceError,
    read_jsonl,
)
from squall.testing import complete_topology

# ---- in-memory source: word count, cut anyhow ----------------------------------------------------

SENTENCES = {
    "p0": [["the cow jumped over the moon"], ["an apple a day"], ["the moon"]],
    "p1": [["four score and seven"], ["the cow"], ["apple pie"], ["over and over"]],
    "p2": [["seven apple"]],
}
EXPECTED = Counter(w for rows in SENTENCES.values() for (s,) in rows for w in s.split())


class Split(BasicBolt):
    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Count(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = Counter()

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] += 1
        self.collector.emit(Values(word, self.counts[word]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


def word_count(records_per_range=None):
    b = TopologyBuilder()
    b.set_spout("sentences", MemorySource(SENTENCES, Fields("sentence"),
                                          records_per_range=records_per_range), 2)
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    return b.create_topology()


def final_counts(result) -> Counter:
    out: Counter = Counter()
    for word, n in result.tuples("count"):
        out[word] = max(out[word], n)
    return out


@pytest.mark.parametrize("cut", ["whole", "one-record"])
def test_memory_source_word_count(runner, cut):
    one = cut == "one-record"
    conf = ONE_TUPLE if one else None
    result = complete_topology(word_count(records_per_range=1 if one else None), conf,
                               runner=runner)
    assert final_counts(result) == EXPECTED
    assert not result.errors
    assert sorted(map(tuple, result.tuples("sentences"))) == sorted(
        tuple(r) for rows in SENTENCES.values() for r in rows)
    # Every record's tree completed: per record locally, per range on Spark.
    covered = set()
    for msg_id in result.acked("sentences"):
        if isinstance(msg_id, Range):
            covered.update((msg_id.partition, i) for i in range(msg_id.start, msg_id.end))
        else:
            covered.add(msg_id)
    assert covered == {(p, i) for p, rows in SENTENCES.items() for i in range(len(rows))}
    assert result.failed("sentences") == []
    # The partitions are dealt out to both source tasks.
    per_task = result.tuples_by_task("sentences")
    assert all(per_task.values()) and len(per_task) == 2


# ---- failures are replayed from the same offsets -------------------------------------------------


class FailOnce(Bolt):
    """Fails the first delivery of every multiple of 5, acks the rest; records what it saw."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.failed_once: set[int] = set()

    def execute(self, tup):
        n = tup["n"]
        if n % 5 == 0 and n not in self.failed_once:
            self.failed_once.add(n)
            self.collector.fail(tup)
            return
        self.collector.emit(Values(n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_failed_records_are_replayed_from_their_offsets(runner):
    data = {"a": [[i] for i in range(0, 20)], "b": [[i] for i in range(20, 30)]}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("n"), records_per_range=4))
    b.set_bolt("check", FailOnce(), 2).fields_grouping("numbers", Fields("n"))
    result = complete_topology(b.create_topology(), {MAX_TUPLES: 8}, runner=runner)
    assert not result.errors
    passed = [n for (n,) in result.tuples("check")]
    assert set(passed) == set(range(30)), "every record got through"
    fails = result.failed("numbers")
    if runner == "local":
        # One tree per record: exactly the failed records are read again, nothing twice.
        assert sorted(passed) == list(range(30))
        assert sorted(fails) == sorted([("a", i) for i in range(0, 20, 5)]
                                       + [("b", i - 20) for i in range(20, 30, 5)])
    else:
        # One tree per range: a range with a failed record is read again whole.
        assert all(isinstance(r, Range) and r.end - r.start <= 4 for r in fails)
        replayed = Counter(passed) - Counter(range(30))
        assert set(replayed) <= {n for r in fails for n in _values(data, r)}
        assert {n for r in fails for n in _values(data, r) if n % 5 == 0} == set(range(0, 30, 5))


def _values(data, r):
    return [row[0] for row in data[r.partition][r.start:r.end]]


# ---- files: JSON lines and CSV, malformed records routed -----------------------------------------


class Collect(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(tup.source_component, tup.source_stream_id, list(tup.values)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("source", "stream", "values"))


def _write(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.fixture(scope="module")
def file_dirs(tmp_path_factory):
    jdir = tmp_path_factory.mktemp("jsonl")
    _write(jdir / "a.jsonl", '{"word": "cow", "n": 1}\n{"word": "moon", "n": 2}\n'
           'not json\n{"word": "fig"}\n')
    _write(jdir / "b.jsonl", "\n".join(json.dumps({"word": w, "n": i, "extra": True})
                                      for i, w in enumerate(["x", "y", "z"])))  # no final \n
    _write(jdir / ".hidden.jsonl", '{"word": "never", "n": 0}\n')
    cdir = tmp_path_factory.mktemp("csv")
    _write(cdir / "c.csv", "n,word\n7,plum\neight,pear\n9,kiwi\n")
    return jdir, cdir


def files_topology(jdir: Path, cdir: Path, bytes_per_range: int):
    b = TopologyBuilder()
    b.set_spout("json", JsonLinesSource(str(jdir), ["word", "n"], bounded=True,
                                        bytes_per_range=bytes_per_range), 2)
    b.set_spout("csv", CsvSource(str(cdir), ["word", "n"], header=True, types={"n": int},
                                 bounded=True, bytes_per_range=bytes_per_range))
    collect = b.set_bolt("collect", Collect())
    for spout in ("json", "csv"):
        collect.shuffle_grouping(spout).shuffle_grouping(spout, "malformed")
    return b.create_topology()


@pytest.mark.parametrize("bytes_per_range", [7, 1 << 20])
def test_file_sources_read_every_line_once_and_route_malformed_ones(
        runner, bytes_per_range, file_dirs):
    result = complete_topology(files_topology(*file_dirs, bytes_per_range), runner=runner)
    jdir, cdir = file_dirs
    got = sorted((s, st, json.dumps(v)) for s, st, v in result.tuples("collect"))
    # A record that cannot be read says its file and line (its byte offset is the tuple's).
    assert got == sorted((s, st, json.dumps(v)) for s, st, v in [
        ("json", "default", ["cow", 1]), ("json", "default", ["moon", 2]),
        ("json", "default", ["x", 0]), ("json", "default", ["y", 1]),
        ("json", "default", ["z", 2]),
        ("json", "malformed", ["a.jsonl", 49, "not json",
                               f"{jdir}/a.jsonl:3: not JSON (Expecting value: line 1 column 1 "
                               "(char 0)) [component 'json', stream 'default']"]),
        ("json", "malformed", ["a.jsonl", 58, '{"word": "fig"}',
                               f"{jdir}/a.jsonl:4: missing field 'n' [component 'json', "
                               "stream 'default', field 'n']"]),
        ("csv", "default", ["plum", 7]), ("csv", "default", ["kiwi", 9]),
        ("csv", "malformed", ["c.csv", 14, "eight,pear",
                              f"{cdir}/c.csv:3: field 'n': invalid literal for int() with base "
                              "10: 'eight' [component 'csv', stream 'default', field 'n']"]),
    ])
    errors = sorted((e.component, e.error.field or "") for e in result.errors)
    assert errors == [("csv", "n"), ("json", ""), ("json", "n")]


def test_directory_source_picks_up_new_files_and_whole_lines_only(tmp_path):
    source = JsonLinesSource(str(tmp_path), ["w"])
    (tmp_path / "a.jsonl").write_text('{"w": 1}\n')
    first = source.plan(100)
    assert first == [Range("a.jsonl", 0, 9)]
    assert source.plan(100) == []
    (tmp_path / "b.jsonl").write_text('{"w": 2}\n{"w": 3')  # the second line is not finished
    (tmp_path / "_b.tmp").write_text('{"w": 4}\n')  # being written: skipped
    assert source.plan(100) == [Range("b.jsonl", 0, 9)]
    with open(tmp_path / "b.jsonl", "a") as f:
        f.write('}\n')
    (r,) = source.plan(100)
    assert r == Range("b.jsonl", 9, 18)
    assert list(source.read(*r)) == [(9, [3])]
    missing = JsonLinesSource(str(tmp_path / "nope"), ["w"])
    with pytest.raises(SourceError, match="does not exist"):
        missing.plan(100)


@pytest.mark.spark
def test_spark_restart_reads_only_new_files(request, tmp_path, spark_session):
    """Offsets are part of the checkpoint: a restarted topology reads only what is new."""
    src, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()
    (src / "1.jsonl").write_text("".join(f'{{"w": "a{i}"}}\n' for i in range(5)))

    def topology():
        b = TopologyBuilder()
        b.set_spout("in", JsonLinesSource(str(src), ["w"], bounded=True))
        b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("in")
        return b.create_topology()

    first = run(topology(), runner="spark", checkpoint_location=str(ckpt))
    assert first.stats["in"].acked >= 1 and not first.errors
    assert sorted(r["w"] for r in read_jsonl(out)) == [f"a{i}" for i in range(5)]
    (src / "2.jsonl").write_text("".join(f'{{"w": "b{i}"}}\n' for i in range(3)))
    second = run(topology(), runner="spark", checkpoint_location=str(ckpt))
    assert not second.errors
    assert sorted(r["w"] for r in read_jsonl(out)) == sorted(
        [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(3)])


def test_deleted_and_out_of_order_files_are_each_read_once_after_a_restart(runner, tmp_path):
    """Files are partitions with offsets of their own, never positions in the listing: with
    read files deleted and new ones added (one sorting before every file read), a restart on
    the same checkpoint reads each new file once and nothing twice."""
    src, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()

    def write(stem):
        (src / f"{stem}.jsonl").write_text("".join(f'{{"w": "{stem}-{i}"}}\n' for i in range(3)))

    def topology():
        b = TopologyBuilder()
        b.set_spout("in", JsonLinesSource(str(src), ["w"], bounded=True), 2)
        b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("in")
        return b.create_topology()

    for stem in ("b0", "b1", "b2"):
        write(stem)
    assert not run(topology(), runner=runner, checkpoint_location=str(ckpt)).errors
    (src / "b0.jsonl").unlink()
    for stem in ("b3", "a0"):
        write(stem)
    assert not run(topology(), runner=runner, checkpoint_location=str(ckpt)).errors
    assert sorted(r["w"] for r in read_jsonl(out)) == sorted(
        f"{stem}-{i}" for stem in ("a0", "b0", "b1", "b2", "b3") for i in range(3))


@pytest.mark.spark
def test_spark_batch_cap_holds_for_files_smaller_than_a_range(tmp_path, spark_session):
    """`squall.spark.batch.max.tuples` caps what a micro-batch takes from a file source, also
    within one file (ranges are cut by lines, not only by `bytes_per_range`)."""
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(f'{{"w": "a{i}"}}\n' for i in range(5)))
    (src / "b.jsonl").write_text("".join(f'{{"w": "b{i}"}}\n' for i in range(3)))
    b = TopologyBuilder()
    b.set_spout("in", JsonLinesSource(str(src), ["w"], bounded=True))
    b.set_bolt("sink", JsonLinesSink(str(out))).shuffle_grouping("in")
    result = run(b.create_topology(), {MAX_TUPLES: 2}, runner="spark")
    assert not result.errors
    per_batch = {p.name: len(p.read_text().splitlines()) for p in out.glob("part-*.jsonl")}
    assert per_batch and max(per_batch.values()) <= 2, per_batch
    assert sorted(r["w"] for r in read_jsonl(out)) == sorted(
        [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(3)])


def test_file_ranges_are_cut_at_the_budget_in_lines(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"w": 1}\n\n{"w": 2}\n{"w": 3}')  # no final newline
    source = JsonLinesSource(str(tmp_path), ["w"], bounded=True)
    ranges = source.plan(2)
    assert ranges == [Range("a.jsonl", 0, 10)] and source.estimate(ranges[0]) == 2
    (r,) = source.plan(1)
    assert r == Range("a.jsonl", 10, 19) and source.estimate(r) == 1
    assert list(source.read(*r)) == [(10, [2])]
    (r,) = source.plan(5)
    assert r == Range("a.jsonl", 19, 27) and list(source.read(*r)) == [(19, [3])]


# ---- Redis Streams -------------------------------------------------------------------------------

PASSWORD = "s0urce"


@pytest.fixture(scope="module")
def redis_streams(tmp_path_factory):
    with start_redis(tmp_path_factory.mktemp("redis"), PASSWORD) as server:
        c = server.client
        for i in range(12):
            c.xadd(f"events:{i % 3}", {"user": f"u{i}", "amount": str(i)})
        c.xadd("events:1", {"user": "u-bad"})  # no amount
        yield server


def redis_topology(server, tasks=2):
    b = TopologyBuilder()
    b.set_spout("events", RedisStreamSource(
        ["events:0", "events:1", "events:2"], ["user", "amount"], host=server.host,
        port=server.port, password=PASSWORD, bounded=True, page=2), tasks)
    b.set_bolt("collect", Collect()).shuffle_grouping("events").shuffle_grouping(
        "events", "malformed")
    return b.create_topology()


def test_redis_streams_source(runner, redis_streams):
    result = complete_topology(redis_topology(redis_streams), runner=runner)
    good = sorted((v[0], v[1]) for s, st, v in result.tuples("collect") if st == "default")
    assert good == sorted((f"u{i}", str(i)) for i in range(12))
    (bad,) = [v for s, st, v in result.tuples("collect") if st == "malformed"]
    assert bad[0] == "events:1" and bad[2] == '{"user": "u-bad"}'
    assert "missing field 'amount'" in bad[3]
    assert [(e.component, e.error.field) for e in result.errors] == [("events", "amount")]


def test_redis_down_is_a_clear_error_and_nothing_is_lost(runner, tmp_path):
    port = free_port()  # nothing listens there yet
    server = type("S", (), {"host": "127.0.0.1", "port": port})()
    ckpt = str(tmp_path / "ckpt")
    seen = ErrorSeen(after_s=3 if runner == "spark" else 0.5)
    result = run_until(redis_topology(server, tasks=1), seen.done, runner=runner,
                       on_progress=seen, checkpoint_location=ckpt if runner == "spark" else None)
    messages = {str(e.error) for e in result.errors}
    assert messages and all(
        f"cannot reach Redis at 127.0.0.1:{port}" in m and "start redis-server" in m
        for m in messages), messages
    assert len(result.errors) == 1, "reported once while it stays down, not on every poll"
    if runner == "spark":
        # Redis comes up with data; the restarted topology reads all of it.
        with start_redis(tmp_path, PASSWORD, port=port) as up:
            for i in range(4):
                up.client.xadd(f"events:{i % 3}", {"user": f"v{i}", "amount": str(i)})
            again = run(redis_topology(up, tasks=1), runner="spark", checkpoint_location=ckpt)
        assert not again.errors
        assert again.stats["collect"].executed == 4


def test_redis_wrong_password_is_a_clear_error(redis_streams):
    source = RedisStreamSource(["events:0"], ["user"], host=redis_streams.host,
                               port=redis_streams.port, password="wrong")
    with pytest.raises(SourceError, match="refused the credentials"):
        source.plan(10)


class DeletesItsFile(BasicBolt):
    """Deletes `path` when the first record reaches it (a clean-up that comes too early)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def execute(self, tup, collector):
        Path(self.path).unlink(missing_ok=True)


def test_a_file_deleted_before_it_was_read_to_its_end_is_reported(runner, tmp_path):
    """An unbounded file source whose file disappears with lines not read: the loss is one
    error of the spout naming the file and the offsets, not silence."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(f'{{"w": "a{i}"}}\n' for i in range(10)))
    source = JsonLinesSource(str(src), ["w"])
    source.records_per_call = 2  # the local runner's plan; Spark's is the batch cap below
    b = TopologyBuilder()
    b.set_spout("in", source)
    b.set_bolt("clean", DeletesItsFile(str(src / "a.jsonl"))).shuffle_grouping("in")
    seen = ErrorSeen(after_s=1)
    result = run_until(b.create_topology(), seen.done, {MAX_TUPLES: 2}, runner=runner,
                       on_progress=seen, cap_s=120)
    gone = [str(e.error) for e in result.errors]
    assert len(gone) == 1, gone
    assert "'a.jsonl' disappeared before it was read to its end" in gone[0]
    assert result.errors[0].component == "in"
