"""Trident's event-time windows on both runners against plain-Python references: tumbling and
sliding, grouped and global, the watermark's lag, late tuples, and a replayed batch."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import pyarrow.compute as pc
import pytest

from squall.errors import InvalidTopologyError
from squall.testing import complete_topology
from squall.trident import (
    ROW,
    BatchFunction,
    Count,
    FixedBatchSpout,
    Function,
    Max,
    Min,
    Sum,
    TridentTopology,
)
from squall.trident.execution import BatchExecutor
from squall.trident.plan import trident_plan
from squall.trident.state import DurableMapState, MemoryMapState, StateType
from squall.trident.windows import assign


class Split(Function):
    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


# Sentences with event times 0, 700, 1400, ... ms (in order), three per batch.
ROWS = [(f"w{i % 4} w{i % 3}", i * 700) for i in range(45)]


def reference(rows, size, slide, value=lambda words: Counter(words)):
    out: Counter = Counter()
    for sentence, ts in rows:
        for start, end in assign(ts, size, slide):
            for word in sentence.split():
                out[(word, start, end)] += 1
    return sorted((w, s, e, n) for (w, s, e), n in out.items())


def word_windows(size, slide, lag=0, rows=ROWS, batch=3):
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence", "ts"], batch, *rows))
     .each(["sentence"], Split(), ["word"]).group_by(["word"])
     .sliding_window(size, slide, [], Count(), ["count"], timestamp_field="ts", lag=lag)
     .name("windows"))
    return t.build()


def test_tumbling_counts_per_word(runner):
    result = complete_topology(word_windows(5_000, 5_000), runner=runner)
    assert sorted(map(tuple, result.tuples("windows"))) == reference(ROWS, 5_000, 5_000)


def test_sliding_counts_per_word_with_a_lag(runner):
    result = complete_topology(word_windows(6_000, 2_000, lag=1_500), runner=runner)
    assert sorted(map(tuple, result.tuples("windows"))) == reference(ROWS, 6_000, 2_000)


def test_windows_fire_as_the_watermark_passes_them_not_at_the_end(runner):
    # Batches of three tuples 700 ms apart: a 2.1 s window fires in the next batch or two,
    # so the rows of early windows come before the last batch's.
    result = complete_topology(word_windows(2_100, 2_100), runner=runner)
    rows = [tuple(r) for r in result.tuples("windows")]
    starts = [r[1] for r in rows]
    assert starts == sorted(starts)  # emitted window by window, in event-time order
    assert rows and result.extra["batches"] == 15


class SplitColumns(BatchFunction):
    """The vectorised split, its word declared a str: on Spark the windows' partials are
    computed by Arrow in the worker."""

    output_types: ClassVar = {"word": str}

    def execute_batch(self, table):
        words = pc.split_pattern(table["sentence"], " ")
        return {"word": pc.list_flatten(words), ROW: pc.list_parent_indices(words)}


def test_sliding_windows_over_columns(runner):
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence", "ts"], 7, *ROWS))
     .each(["sentence"], SplitColumns(), ["word"]).group_by(["word"])
     .sliding_window(6_000, 2_000, [], Count(), ["count"], timestamp_field="ts", lag=1_500)
     .name("windows"))
    result = complete_topology(t.build(), runner=runner)
    assert sorted(map(tuple, result.tuples("windows"))) == reference(ROWS, 6_000, 2_000)


def test_windows_over_values_of_several_types(runner):
    """Timestamps as ints and floats (whole milliseconds count), keys of several types, and
    min / max over strings: the same windows on both runners."""
    rows = [(k, f"v{i % 7}", float(i * 900) if i % 2 else i * 900)
            for i, k in enumerate([1, "1", 2.5, None, 1] * 6)]
    t = TridentTopology()
    s = t.new_stream("s", FixedBatchSpout(["key", "value", "ts"], 4, *rows))
    s.group_by(["key"]).tumbling_window(5_000, ["value"], Min(), ["min"],
                                        timestamp_field="ts").name("min")
    s.tumbling_window(5_000, ["value"], Max(), ["max"], timestamp_field="ts").name("max")
    result = complete_topology(t.build(), runner=runner)
    lo: dict = {}
    hi: dict = {}
    for k, v, ts in rows:
        start = int(ts) - int(ts) % 5_000
        lo[(k, start)] = min(lo.get((k, start), v), v)
        hi[start] = max(hi.get(start, v), v)
    got = [tuple(r) for r in result.tuples("min")]
    assert sorted(got, key=repr) == sorted(
        [(k, s, s + 5_000, v) for (k, s), v in lo.items()], key=repr)
    assert sorted(map(tuple, result.tuples("max"))) == sorted(
        (s, s + 5_000, v) for s, v in hi.items())


def test_global_sum_in_tumbling_windows(runner):
    rows = [(i % 5, i * 1_000) for i in range(30)]
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["amount", "ts"], 4, *rows))
     .tumbling_window(10_000, ["amount"], Sum(), ["total"], timestamp_field="ts").name("sums"))
    result = complete_topology(t.build(), runner=runner)
    want: Counter = Counter()
    for amount, ts in rows:
        want[ts - ts % 10_000] += amount
    assert sorted(map(tuple, result.tuples("sums"))) == [
        (s, s + 10_000, v) for s, v in sorted(want.items())]


def test_late_tuples_are_dropped_counted_and_the_rest_exact(runner):
    # The fourth batch brings a tuple from t=0 after the watermark passed its window.
    rows = [*ROWS[:9], ("late late", 0), *ROWS[9:]]
    result = complete_topology(word_windows(2_100, 2_100, rows=rows), runner=runner)
    assert result.extra["late"] == {"windows": 2}  # two words, one window each
    # ... and in the run's late counts (its stats, and the metrics progress and exporters read).
    assert {c: s.late for c, s in result.stats.items() if s.late} == {"windows": 2}
    assert result.stats["windows"].to_metrics().late == 2
    assert sorted(map(tuple, result.tuples("windows"))) == reference(ROWS, 2_100, 2_100)


def test_a_replayed_batch_fires_its_windows_once_from_the_state_before_it(tmp_path):
    plan = trident_plan(word_windows(2_100, 2_100))
    batches = [ROWS[i:i + 3] for i in range(0, 12, 3)]
    ex = BatchExecutor(plan, {}, location=str(tmp_path))
    fired = []
    for txid, rows in enumerate(batches, start=1):
        out = ex.run(txid, {"s": [rows]})
        if txid == 3:  # crashed after the state was written: the same txid runs again
            out = ex.run(txid, {"s": [rows]})
        fired.extend(r for p in out["windows"] for r in p)
    ex.close()
    assert sorted(fired) == [r for r in reference(ROWS[:12], 2_100, 2_100)
                             if r[2] <= ROWS[11][1]]  # every window the watermark passed, once


def test_a_window_state_must_not_be_transactional():
    t = TridentTopology()
    s = t.new_stream("s", FixedBatchSpout(["x", "ts"], 1, [1, 0]))
    with pytest.raises(InvalidTopologyError, match="must be OPAQUE"):
        s.tumbling_window(10, ["x"], Sum(), ["sum"], timestamp_field="ts",
                          state=MemoryMapState.factory(StateType.TRANSACTIONAL))
    with pytest.raises(InvalidTopologyError, match="slide <= size"):
        s.sliding_window(10, 20, ["x"], Sum(), ["sum"], timestamp_field="ts")
    with pytest.raises(InvalidTopologyError, match="no field 'time'"):
        s.tumbling_window(10, ["x"], Sum(), ["sum"], timestamp_field="time")
    assert DurableMapState.factory(StateType.OPAQUE)  # the default window state


# ---- count windows and processing-time windows -------------------------------------------------

def count_reference(words, size, slide):
    """Per word, windows of `size` of its occurrences starting every `slide`, in stream order."""
    seen: Counter = Counter()
    out = []
    for w in words:
        seen[w] += 1
        n = seen[w]
        if n >= size and (n - size) % slide == 0:
            out.append((w, n - size, n, size))
    return sorted(out)


@pytest.mark.parametrize(("size", "slide"), [(3, 3), (4, 2)])
def test_count_windows_per_word(runner, size, slide):
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence", "ts"], 4, *ROWS))
     .each(["sentence"], Split(), ["word"]).group_by(["word"])
     .sliding_count_window(size, slide, [], Count(), ["count"]).name("windows"))
    result = complete_topology(t.build(), runner=runner)
    words = [w for s, _ in ROWS for w in s.split()]
    assert sorted(map(tuple, result.tuples("windows"))) == count_reference(words, size, slide)


def test_a_global_tumbling_count_window_sums_in_stream_order(runner):
    rows = [(i, i * 10) for i in range(20)]
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["amount", "ts"], 3, *rows))
     .tumbling_count_window(4, ["amount"], Sum(), ["total"]).name("sums"))
    result = complete_topology(t.build(), runner=runner)
    assert [tuple(r) for r in result.tuples("sums")] == [
        (k, k + 4, sum(range(k, k + 4))) for k in range(0, 20, 4)]


def test_a_replayed_batch_fires_its_count_windows_once(tmp_path):
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence", "ts"], 3, *ROWS))
     .each(["sentence"], Split(), ["word"]).group_by(["word"])
     .tumbling_count_window(2, [], Count(), ["count"]).name("windows"))
    plan = trident_plan(t.build())
    ex = BatchExecutor(plan, {}, location=str(tmp_path))
    fired = []
    batches = [ROWS[i:i + 3] for i in range(0, 12, 3)]
    for txid, rows in enumerate(batches, start=1):
        out = ex.run(txid, {"s": [rows]})
        if txid == 2:  # the state was written, the commit was not: the txid runs again
            out = ex.run(txid, {"s": [rows]})
        fired.extend(r for p in out["windows"] for r in p)
    ex.close()
    words = [w for s, _ in ROWS[:12] for w in s.split()]
    assert sorted(fired) == count_reference(words, 2, 2)


def test_processing_time_windows_take_the_transactions_time(runner):
    """Without a timestamp field a window is in processing time: each transaction's tuples
    have its time, windows fire once a later transaction's time passes their end (or when
    the input ends). Every tuple lands in exactly one tumbling window, once."""
    t = TridentTopology()
    (t.new_stream("s", FixedBatchSpout(["sentence", "ts"], 3, *ROWS))
     .each(["sentence"], Split(), ["word"]).group_by(["word"])
     .tumbling_window(60_000, [], Count(), ["count"]).name("windows"))
    result = complete_topology(t.build(), runner=runner)
    rows = [tuple(r) for r in result.tuples("windows")]
    totals: Counter = Counter()
    for w, start, end, n in rows:
        assert end - start == 60_000 and start % 60_000 == 0
        totals[w] += n
    assert totals == Counter(w for s, _ in ROWS for w in s.split())
    assert len(set((w, s) for w, s, _, _ in rows)) == len(rows)  # each window fired once


def test_processing_time_is_kept_for_a_replay(tmp_path):
    from squall.trident.coordinator import BatchCoordinator

    t = TridentTopology()
    t.new_stream("s", FixedBatchSpout(["x"], 1, [1], [2]))
    conf = {"squall.transactional.progress_store": {"dir": str(tmp_path)}}
    first = BatchCoordinator(trident_plan(t.build()), conf, "doc")
    assert first.batch_time(1, 5_000) == 5_000
    again = BatchCoordinator(trident_plan(t.build()), conf, "doc")  # after a restart
    assert again.batch_time(1, 9_000) == 5_000
    again.commit(1)
    assert again.batch_time(2, 9_000) == 9_000


def test_window_arguments_are_checked():
    t = TridentTopology()
    s = t.new_stream("s", FixedBatchSpout(["x", "ts"], 1, [1, 0]))
    with pytest.raises(InvalidTopologyError, match="has no lag"):
        s.tumbling_window(10, ["x"], Sum(), ["sum"], lag=5)
    with pytest.raises(InvalidTopologyError, match="whole numbers 0 < slide <= count"):
        s.sliding_count_window(3, 4, ["x"], Sum(), ["sum"])
    with pytest.raises(InvalidTopologyError, match="whole numbers"):
        s.tumbling_count_window(2.5, ["x"], Sum(), ["sum"])


@pytest.mark.parametrize("space", ["bins", "sorted"])
def test_counts_by_codes_equal_arrows_group_by(space):
    """The Spark worker's window counts by dictionary codes (`count_by_codes`) against Arrow's
    hash `group_by`: two keys with nulls and floats, several windows, partial rows recombined
    with their counts as weights; `sorted` makes the code space far larger than the rows, so
    the sort replaces `np.bincount`."""
    import random

    import pyarrow as pa

    from squall.runtime.spark.trident.windows import count_by_codes

    rnd = random.Random(7)
    n = 5_000
    spread = 10 if space == "bins" else 4_000  # distinct values per key
    ws = [rnd.randrange(0, 50) * 100 for _ in range(n)]
    t = pa.table({
        "ws": pa.array(ws, pa.int64()),
        "k0": [None if rnd.random() < 0.05 else f"w{rnd.randrange(spread)}" for _ in range(n)],
        "k1": [None if rnd.random() < 0.05 else float(rnd.randrange(spread)) / 2
               for _ in range(n)],
        "ts": pa.array([w + rnd.randrange(100) for w in ws], pa.int64())})

    def groups(table, counts):  # sorted with None first
        return sorted((((r["ws"], r["k0"] is not None, r["k0"] or "", r["k1"] is not None,
                         r["k1"] or 0.0)), r[counts]) for r in table.to_pylist())

    want = t.group_by(["ws", "k0", "k1"]).aggregate([([], "count_all")])
    got = count_by_codes(t, ["k0", "k1"], 100, t.column("ts"), None)
    assert groups(got, "n") == groups(want, "count_all")
    assert got.column("v").to_pylist() == got.column("n").to_pylist()
    assert pa.compute.max(got.column("max")).as_py() == pa.compute.max(t.column("ts")).as_py()
    halves = pa.concat_tables([
        count_by_codes(t.slice(0, n // 2), ["k0", "k1"], 100, t.column("ts").slice(0, n // 2),
                       None),
        count_by_codes(t.slice(n // 2), ["k0", "k1"], 100, t.column("ts").slice(n // 2), None)])
    again = count_by_codes(halves, ["k0", "k1"], 100, halves.column("max"), halves.column("n"))
    assert groups(again, "n") == groups(want, "count_all")
