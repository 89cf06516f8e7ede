"""Trident's FileBatchSpout: files as transactions, read by Spark itself on the Spark runner,
with the same results as the local runner and exactly once across a restart."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall import run
from squall.runtime.spark.trident.planner import persist_in_tasks, spark_segments, unread_fields
from squall.runtime.spark.trident.runner import _log_driver_persists
from squall.testing import complete_topology
from squall.transaction_kernel.progress_store import meta_key, open_store
from squall.trident import (
    Count,
    FileBatchSpout,
    Filter,
    Function,
    MapPut,
    StateUpdater,
    Sum,
    TridentTopology,
)
from squall.trident.plan import trident_plan
from squall.trident.spouts import SpoutEmitter
from squall.trident.state import DurableMapState, StateType


class Split(Function):
    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


SENTENCES = [f"w{i % 7} w{i % 3} common" for i in range(60)]


def write_parquet(root, per_file=20):
    root.mkdir(exist_ok=True)
    for i in range(0, len(SENTENCES), per_file):
        table = pa.table({"sentence": SENTENCES[i:i + per_file], "n": list(range(per_file))})
        pq.write_table(table,
                       str(root / f"part-{i // per_file:03d}.parquet"), row_group_size=7)


def word_counts(spout):
    t = TridentTopology()
    (t.new_stream("files", spout).each(["sentence"], Split(), ["word"]).name("split")
     .group_by(["word"])
     .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(), ["count"])
     .name("counts"))
    return t.build()


def read_counts(location):
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state("counts", str(location))
    try:
        return {k[0]: v for k, v in state.items()}
    finally:
        state.close()


def expected(sentences):
    return dict(Counter(w for s in sentences for w in s.split()))


def test_parquet_word_count(runner, tmp_path):
    write_parquet(tmp_path / "in")
    ckpt = tmp_path / "ckpt"
    result = run(word_counts(FileBatchSpout(str(tmp_path / "in"), ["sentence"])),
                 runner=runner, checkpoint_location=str(ckpt))
    assert result.extra["committed"] == [1, 2, 3]  # one file per transaction
    assert result.stats["files"].emitted == len(SENTENCES)
    # Counters agree on both runners, also for the operations that ran inside Spark.
    n_words = sum(len(s.split()) for s in SENTENCES)
    split, counts = result.stats["split"], result.stats["counts"]
    assert (split.executed, split.emitted) == (len(SENTENCES), n_words)
    assert (counts.executed, counts.emitted) == (n_words, 3 * len(set(
        w for s in SENTENCES[:20] for w in s.split())))  # every word in every batch here
    assert read_counts(ckpt) == expected(SENTENCES)
    if runner == "spark":  # the files were read by Spark, not through the driver
        assert "files" in result.extra["spark_operations"]


def test_new_files_continue_after_a_restart_exactly_once(runner, tmp_path):
    write_parquet(tmp_path / "in")
    ckpt = tmp_path / "ckpt"
    topology = word_counts(FileBatchSpout(str(tmp_path / "in"), ["sentence"]))
    run(topology, runner=runner, checkpoint_location=str(ckpt))
    pq.write_table(pa.table({"sentence": ["late arrival common"], "n": [0]}),
                   str(tmp_path / "in" / "part-999.parquet"))
    again = run(topology, runner=runner, checkpoint_location=str(ckpt))
    assert again.extra["committed"] == [4]
    assert read_counts(ckpt) == expected([*SENTENCES, "late arrival common"])


def test_jsonl_and_a_sum_over_a_global_state(runner, tmp_path):
    (tmp_path / "in").mkdir()
    rows = [{"user": f"u{i % 4}", "amount": i} for i in range(30)]
    for part in range(3):
        with open(tmp_path / "in" / f"{part}.jsonl", "w") as f:
            for r in rows[part * 10:(part + 1) * 10]:
                f.write(json.dumps(r) + "\n")
    t = TridentTopology()
    s = t.new_stream("events", FileBatchSpout(str(tmp_path / "in"), ["user", "amount"],
                                              format="jsonl"))
    (s.group_by(["user"]).persistent_aggregate(
        DurableMapState.factory(StateType.OPAQUE), ["amount"], Sum(), ["total"]).name("totals"))
    ckpt = tmp_path / "ckpt"
    run(t.build(), runner=runner, checkpoint_location=str(ckpt))
    state = DurableMapState.factory(StateType.OPAQUE).make_state("totals", str(ckpt))
    got = {k[0]: v for k, v in state.items()}
    state.close()
    want: dict = {}
    for r in rows:
        want[r["user"]] = want.get(r["user"], 0) + r["amount"]
    assert got == want and all(type(v) is int for v in got.values())


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_malformed_lines_are_skipped_counted_and_reported_and_the_run_goes_on(runner, tmp_path,
                                                                            fmt):
    # One bad line per file kills nothing: the others are summed, each bad one is an error of
    # the stream with its file, line and reason; a restart on the same checkpoint reads
    # nothing again (and dies on nothing).
    (tmp_path / "in").mkdir()
    rows = [{"user": f"u{i % 4}", "amount": i} for i in range(30)]
    bad = {"jsonl": ['{"user": "u1", "amount": ', "[1, 2]"], "csv": ["u1,5,extra", "u2"]}[fmt]
    for part in range(3):
        lines = ([json.dumps(r) for r in rows[part * 10:(part + 1) * 10]] if fmt == "jsonl"
                 else ["user,amount"] + [f"{r['user']},{r['amount']}"
                                         for r in rows[part * 10:(part + 1) * 10]])
        lines.insert(3, bad[part % 2])  # line 4 of every file
        (tmp_path / "in" / f"{part}.{fmt}").write_text("\n".join(lines) + "\n")
    t = TridentTopology()
    s = t.new_stream("events", FileBatchSpout(str(tmp_path / "in"), ["user", "amount"],
                                              format=fmt))
    (s.group_by(["user"]).persistent_aggregate(
        DurableMapState.factory(StateType.OPAQUE), Count(), ["n"]).name("totals"))
    ckpt = tmp_path / "ckpt"
    result = run(t.build(), runner=runner, checkpoint_location=str(ckpt))
    reported = [e.error for e in result.errors]
    assert [(e.component, e.stream) for e in result.errors] == [("events", "malformed")] * 3
    assert sorted((r.file.rsplit("/", 1)[1], r.line) for r in reported) == [
        (f"{p}.{fmt}", 4) for p in range(3)]
    assert all(r.text == bad[i % 2] for i, r in
               enumerate(sorted(reported, key=lambda r: r.file))), reported
    assert result.stats["events"].errors == 3
    again = run(t.build(), runner=runner, checkpoint_location=str(ckpt))
    assert again.errors == []
    state = DurableMapState.factory(StateType.OPAQUE).make_state("totals", str(ckpt))
    got = {k[0]: v for k, v in state.items()}
    state.close()
    assert got == dict(Counter(r["user"] for r in rows))  # every good line, once


def test_complete_topology_says_which_rows_spark_does_not_collect(runner, tmp_path):
    write_parquet(tmp_path / "in")
    result = complete_topology(word_counts(FileBatchSpout(str(tmp_path / "in"), ["sentence"])),
                               runner=runner)
    assert len(result.tuples("counts")) == result.stats["counts"].emitted
    if runner == "spark":
        with pytest.raises(ValueError, match="ran inside Spark"):
            result.tuples("split")
    else:
        assert len(result.tuples("split")) == sum(len(s.split()) for s in SENTENCES)


def test_bad_format_is_refused():
    with pytest.raises(ValueError, match="format must be"):
        FileBatchSpout("/nowhere", ["x"], format="xml")


def test_parquet_columns_of_narrower_types_and_of_types_spark_does_not_type(runner, tmp_path):
    """int32 and float32 columns are read as squall's int and float fields (on Spark with the
    schema taken from the file's footer); a bool column has no typed column on Spark, so the
    driver reads those files: the same rows and values on both runners."""
    (tmp_path / "in").mkdir()
    for part in range(2):
        i = range(part * 10, part * 10 + 10)
        pq.write_table(pa.table({
            "user": [f"u{j % 3}" for j in i],
            "n": pa.array(list(i), pa.int32()),
            "x": pa.array([j * 0.25 for j in i], pa.float32()),
            "flag": [j % 2 == 0 for j in i]}), str(tmp_path / "in" / f"{part}.parquet"))
    t = TridentTopology()
    s = t.new_stream("typed", FileBatchSpout(str(tmp_path / "in"), ["user", "n", "x"]))
    s.group_by(["user"]).aggregate(["n"], Sum(), ["total"]).name("n-totals")
    s.group_by(["user"]).aggregate(["x"], Sum(), ["total"]).name("x-totals")
    flags = t.new_stream("flags", FileBatchSpout(str(tmp_path / "in"), ["flag", "n"]))
    flags.group_by(["flag"]).aggregate(["n"], Sum(), ["total"]).name("by-flag")
    result = complete_topology(t.build(), runner=runner)
    want_n, want_x, want_flag = Counter(), Counter(), Counter()
    for part in range(2):
        for j in range(part * 10, part * 10 + 10):
            want_n[(part, f"u{j % 3}")] += j
            want_x[(part, f"u{j % 3}")] += j * 0.25
            want_flag[(part, j % 2 == 0)] += j

    def per_batch(component):  # (user or flag, total) rows of the two transactions
        rows = [tuple(r) for r in result.tuples(component)]
        return sorted(rows, key=repr)

    assert per_batch("n-totals") == sorted(((k, v) for (_, k), v in want_n.items()), key=repr)
    assert per_batch("x-totals") == sorted(((k, v) for (_, k), v in want_x.items()), key=repr)
    assert per_batch("by-flag") == sorted(((k, v) for (_, k), v in want_flag.items()), key=repr)
    assert {type(v) for _, v in result.tuples("n-totals")} == {int}
    assert {type(v) for _, v in result.tuples("x-totals")} == {float}
    if runner == "spark":
        assert "typed" in result.extra["spark_operations"]


# ---- which files a transaction takes: by name, whatever the directory does --------------------


class DeleteWhenSeen(Function):
    """Deletes `path` when it sees a record of file `trigger`: a file listed by the plan of the
    transaction being processed, deleted before the next transaction could take it."""

    def __init__(self, trigger, path):
        self.trigger, self.path = trigger, path

    def execute(self, tup, collector):
        if tup["file"] == self.trigger:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        collector.emit([])


def write_lines(root, stem, n=3):
    with open(root / f"{stem}.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"file": stem, "i": i}) + "\n")


def per_file_counts(root):
    t = TridentTopology()
    (t.new_stream("files", FileBatchSpout(str(root), ["file", "i"], format="jsonl"))
     .each(["file"], DeleteWhenSeen("b0", str(root / "b2.jsonl")), []).name("clean-up")
     .group_by(["file"])
     .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(), ["count"])
     .name("counts"))
    return t.build()


def reports(result):
    return sorted((e.error.file.rsplit("/", 1)[1], e.error.reason)
                  for e in result.errors if e.stream == "files")


def test_deleted_and_out_of_order_files_are_each_read_once_and_reported(runner, tmp_path):
    # Run 1 takes b0; while it is processed b2 (listed, not yet taken) is deleted: reported as
    # gone, b1 is still read. Then b0 (read) is deleted, b3 and b4 are added and a0, which
    # sorts before the files read: run 2 on the same checkpoint reads b3, b4 and a0 once each
    # (a0 reported out of name order) and nothing twice.
    root = tmp_path / "in"
    root.mkdir()
    for stem in ("b0", "b1", "b2"):
        write_lines(root, stem)
    ckpt = tmp_path / "ckpt"
    first = run(per_file_counts(root), runner=runner, checkpoint_location=str(ckpt))
    assert reports(first) == [("b2.jsonl", "gone before it was read")]
    assert all(e.component == "files" for e in first.errors)
    assert read_counts(ckpt) == {"b0": 3, "b1": 3}
    (root / "b0.jsonl").unlink()
    for stem in ("b3", "b4", "a0"):
        write_lines(root, stem)
    again = run(per_file_counts(root), runner=runner, checkpoint_location=str(ckpt))
    assert reports(again) == [("a0.jsonl", "out of name order")]
    assert again.stats["files"].errors == 1
    assert read_counts(ckpt) == {"b0": 3, "b1": 3, "b3": 3, "b4": 3, "a0": 3}
    assert again.stats["files"].emitted == 9


def emitter_on(root, store_dir, files_per_batch=1):
    store = open_store({"squall.transactional.progress_store": {"dir": str(store_dir)}}, "t")
    spout = FileBatchSpout(str(root), ["file", "i"], format="jsonl",
                           files_per_batch=files_per_batch)
    return SpoutEmitter("files", spout, store), store


def names(batch):
    return [f.rsplit("/", 1)[1] for f in batch.files]


def test_a_replayed_transaction_takes_the_files_it_took_whatever_the_listing_does(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for stem in ("b0", "b1", "b2"):
        write_lines(root, stem)
    emitter, _ = emitter_on(root, tmp_path / "store", files_per_batch=2)
    assert names(emitter.files(1)) == ["b0.jsonl", "b1.jsonl"]
    (root / "b2.jsonl").unlink()
    write_lines(root, "a0")  # sorts first: a replay still takes b0, b1
    assert names(emitter.files(1)) == ["b0.jsonl", "b1.jsonl"]
    (root / "b0.jsonl").unlink()
    with pytest.raises(Exception, match=r"b0\.jsonl was taken by a transaction of Trident "
                                        r"stream 'files' and is gone.*Restore the file"):
        emitter.files(1)
    assert names(emitter.files(2)) == ["a0.jsonl"]
    assert [(r.file.rsplit("/", 1)[1], r.reason) for r in emitter.reports] == [
        ("a0.jsonl", "out of name order"), ("b2.jsonl", "gone before it was read")]


def test_a_checkpoint_of_positions_resumes_after_the_last_file_it_took(tmp_path):
    # An earlier version recorded (start, files) per txid: txid 1 took b0, b1; txid 2 nothing.
    root = tmp_path / "in"
    root.mkdir()
    for stem in ("b0", "b1", "b2", "b3"):
        write_lines(root, stem)
    emitter, store = emitter_on(root, tmp_path / "store")
    store.put(meta_key(0, 1), (0, [str(root / "b0.jsonl"), str(root / "b1.jsonl")]))
    store.put(meta_key(0, 2), (2, []))
    (root / "b0.jsonl").unlink()
    assert names(emitter.files(3)) == ["b2.jsonl"]
    assert names(emitter.files(4)) == ["b3.jsonl"]
    assert emitter.exhausted_after(4) and not emitter.exhausted_after(3)


class Length(Function):
    def execute(self, tup, collector):
        collector.emit([len(tup["a"])])


class EvenC(Filter):
    def is_keep(self, tup):
        return tup["c"] % 2 == 0


def test_a_driver_read_leaves_out_the_columns_nothing_reads(runner, tmp_path):
    """The operations below run on the driver (a `partition_persist` ends them), which reads
    the Parquet batch with `d` left out: nothing reads it. `c` is read by the filter though
    the projection drops it; `b` only passes through the `each` and the filter."""
    (tmp_path / "in").mkdir()
    rows = [(f"{'x' * (i % 5)}", f"k{i}", i, f"unread-{i}") for i in range(40)]
    for part in range(2):
        chunk = rows[part * 20:(part + 1) * 20]
        pq.write_table(pa.table({name: [r[j] for r in chunk]
                                 for j, name in enumerate(("a", "b", "c", "d"))}),
                       str(tmp_path / "in" / f"part-{part}.parquet"))
    t = TridentTopology()
    (t.new_stream("rows", FileBatchSpout(str(tmp_path / "in"), ["a", "b", "c", "d"]))
     .each(["a"], Length(), ["length"]).each(["c"], EvenC()).project(["b", "length"])
     .partition_persist(DurableMapState.factory(StateType.TRANSACTIONAL), ["b", "length"],
                        MapPut(), ["b", "length"]).name("lengths"))
    topology = t.build()
    plan = trident_plan(topology)
    assert unread_fields(plan, plan.nodes[0].cid) == {"d"}
    ckpt = tmp_path / "ckpt"
    run(topology, runner=runner, checkpoint_location=str(ckpt))
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state("lengths", str(ckpt))
    got = {k[0]: v for k, v in state.items()}
    state.close()
    assert got == {b: len(a) for a, b, c, _ in rows if c % 2 == 0}


# ---- partition_persist updated in the tasks ----------------------------------------------------

class PartitionFiles:
    """A `TaskStateFactory`: each partition's state is a file per transaction, made where the
    partition is updated, recording where (the process) and with which partition."""

    def __init__(self, directory):
        self.directory = directory

    def make_state(self, name, location=None):
        raise AssertionError("a partition's state is made with its index")

    def make_task_state(self, name, location, partition_index, num_partitions):
        return PartitionFile(self.directory, partition_index, num_partitions)


class PartitionFile:
    """Writes a transaction's tuples of its partition to `t<txid>-p<index>.json`, replacing an
    earlier attempt's: exactly once per transaction and partition."""

    def __init__(self, directory, index, partitions):
        self.directory, self.index, self.partitions = directory, index, partitions
        self.txid = None

    def begin_commit(self, txid):
        self.txid = txid

    def write(self, tuples):
        record = {"index": self.index, "partitions": self.partitions, "pid": os.getpid(),
                  "rows": [list(t) for t in tuples]}
        path = os.path.join(self.directory, f"t{self.txid}-p{self.index}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)

    def commit(self, txid):
        assert txid == self.txid

    def close(self):
        pass


class NotCommon(Filter):
    def is_keep(self, tup):
        return tup[0] != "common"


class WriteAndShout(StateUpdater):
    """Writes the partition's words to its state and emits each in capitals; fails once after
    writing when `marker` does not exist yet (so the transaction runs again)."""

    def __init__(self, marker=None):
        self.marker = marker

    def update_state(self, state, tuples, collector):
        state.write(tuples)
        if self.marker is not None and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("the first attempt fails after writing")
        for t in tuples:
            collector.emit([t[0].upper()])


@pytest.mark.parametrize("fails", [False, True], ids=["once", "a-failed-attempt"])
def test_a_partition_persist_into_a_task_state_runs_in_the_tasks(runner, tmp_path, fails):
    """A stream ending in a `partition_persist` whose state opens per partition runs, on
    Spark, in the Python workers: each partition's state made there with its index and the
    number of partitions, its tuples written once per transaction (a failed attempt's update
    replaced by the replay's), the updater's new values back on the driver, as on the local
    runner (one state per partition, made in the run's process)."""
    write_parquet(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    marker = str(tmp_path / "failed") if fails else None
    t = TridentTopology()
    (t.new_stream("files", FileBatchSpout(str(tmp_path / "in"), ["sentence", "n"]))
     .each(["sentence"], Split(), ["word"]).filter(["word"], NotCommon())
     .partition_persist(PartitionFiles(str(out)), ["word"], WriteAndShout(marker), ["shout"])
     .name("persist"))
    result = complete_topology(t.build(), runner=runner)
    assert not [e for e in result.errors if "first attempt" not in str(e.error)]
    words = [w for s in SENTENCES for w in s.split() if w != "common"]
    assert Counter(tuple(r) for r in result.tuples("persist")) \
        == Counter((w.upper(),) for w in words)
    records = [json.loads(p.read_text()) for p in sorted(out.iterdir())]
    assert Counter(r[0] for rec in records for r in rec["rows"]) == Counter(words)
    assert all(0 <= rec["index"] < rec["partitions"] and rec["rows"] for rec in records)
    if runner == "spark":
        jobs = [(j["kind"], j["route"]) for j in result.extra["spark_jobs"]]
        assert jobs == [("persist", "tasks")] * 3
        assert {rec["pid"] for rec in records}.isdisjoint({os.getpid()})  # in the workers
    else:
        assert {rec["pid"] for rec in records} == {os.getpid()}


def test_a_partition_persist_left_on_the_driver_is_said_once_with_its_reason(caplog):
    """The Spark runner's log names each `partition_persist` that runs on the driver, once:
    one into a map state (no `make_task_state`), and one into a task state fed by a merge
    (an operation the driver runs); not the one that runs in the tasks."""
    t = TridentTopology()
    a, b, c = (t.new_stream(name, FileBatchSpout("in", ["sentence"])) for name in "abc")
    a.partition_persist(PartitionFiles("out"), ["sentence"], WriteAndShout(),
                        ["shout"]).name("tasks")
    b.partition_persist(DurableMapState.factory(StateType.TRANSACTIONAL), ["sentence"],
                        WriteAndShout(), ["shout"]).name("map")
    t.merge(b, c).partition_persist(PartitionFiles("out"), ["sentence"], WriteAndShout(),
                                    ["shout"]).name("merged")
    plan = trident_plan(t.build())
    paths, _ = spark_segments(plan, persists=persist_in_tasks)
    assert sorted(paths) == ["tasks"]
    with caplog.at_level(logging.INFO, logger="squall"):
        _log_driver_persists(plan, paths)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "'map'" in said[0] and "has no make_task_state" in said[0]
    assert "'merged'" in said[1] and "an operation before it runs on the driver" in said[1]
