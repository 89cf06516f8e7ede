"""Trident's FileBatchSpout: files as transactions, read by Spark itself on the Spark runner,
with the same results as the local runner and exactly once across a restart."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall import run
from squall.testing import complete_topology
from squall.trident import Count, FileBatchSpout, Function, Sum, TridentTopology
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
