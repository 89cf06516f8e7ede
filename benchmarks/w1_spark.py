"""W1 (word count) on the Spark runner, against a hand-written PySpark job in the same session.

    .venv/bin/python benchmarks/w1_spark.py [--sentences 200000] [--runs 2] [--tasks 2]
        [--sources spout,source] [--parts]
    .venv/bin/python benchmarks/w1_spark.py --user-seen [--rounds 3] [--sentences 200000]
        [--small 20000] [--input files|list]

Baseline (docs/benchmarks.md): sentences split in Python inside `mapInArrow`, `repartition` by word,
counted in a Python dict per partition inside `mapInArrow`. squall: the same topology as
benchmarks/w1_local.py (list spout, split x2, count x2 with fields grouping), the whole input as
one micro-batch, acking off and on; then the same with the built-in `MemorySource` (two partitions,
read on the executors) in place of the user's spout. Reported: the data batch's time
(`triggerExecution` of the query's progress) of the last run, i.e. steady state with warm Python
workers, and the idle micro-batch cost next to an empty `foreachBatch` query's. Counts are checked
every run. `--parts` prints each data batch's `durationMs` parts (`latestOffset` holds the spout
reader's planning, `addBatch` the stages' job and the driver's commit).

`--user-seen` measures W1 as a user sees it instead (docs/benchmarks.md, "W1 as a user sees
it"): both sides read the same sentences from the same place, text files by default (two a
input) or, with `--input list`, a Python list on the driver. squall: the topology built around a
user spout over them (`LinesSpout`, or `ListSpout`) and run with `squall.run`'s defaults (acking
off, the default batch cap) until it returns; the hand-written job: the batch job a user writes
for a bounded input (`spark.read.text`, or `spark.createDataFrame` from the list, then the same
`mapInArrow` split, `repartition` and count), until its counts are a dict on the driver. Whole
runs of `--sentences` and of `--small` sentences, alternated in this process for `--rounds`
rounds after a warm-up; the steady state is (large run's time - small run's time) / (large
run's words - small run's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import Count, ListSpout, Split
from workloads import reference_counts, w1_sentences

from squall import Config, Fields, Spout, TopologyBuilder
from squall.connectors import MemorySource
from squall.runners import make_runner
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.session import get_session


def split_words(batches):
    import pyarrow as pa

    for batch in batches:
        words = [w for s in batch.column(0).to_pylist() for w in s.split()]
        yield pa.RecordBatch.from_pydict({"word": pa.array(words, pa.string())})


def count_words(batches):
    import pyarrow as pa

    counts: dict[str, int] = {}
    for batch in batches:
        for w in batch.column(0).to_pylist():
            counts[w] = counts.get(w, 0) + 1
    yield pa.RecordBatch.from_pydict({
        "word": pa.array(list(counts), pa.string()),
        "count": pa.array(list(counts.values()), pa.int64()),
    })


def baseline(spark, df) -> tuple[float, dict[str, int]]:
    t0 = time.perf_counter()
    table = (df.mapInArrow(split_words, "word string").repartition(2, "word")
             .mapInArrow(count_words, "word string, count long").toArrow())
    elapsed = time.perf_counter() - t0
    return elapsed, dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(),
                             strict=True))


def squall_run(spark, sentences, acking: bool, source: str = "spout", tasks: int = 2, **run: Any
               ) -> tuple[float, float, dict[str, int]]:
    """W1 on Spark: (micro-batches' seconds, run's seconds, counts); `tasks` of each bolt;
    `run` goes to `run`."""
    builder = TopologyBuilder()
    if source == "spout":  # a user's Spout, hosted in the reader on the driver
        builder.set_spout("sentences", ListSpout(sentences, reliable=acking))
    else:  # the built-in source: two partitions, read on the executors
        half = len(sentences) // 2
        parts = {"0": [[s] for s in sentences[:half]], "1": [[s] for s in sentences[half:]]}
        builder.set_spout("sentences", MemorySource(parts, Fields("sentence")), 2)
    builder.set_bolt("split", Split(), tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), tasks).fields_grouping("split", Fields("word"))
    conf = Config({"squall.spark.batch.max.tuples": len(sentences) + 1,
                   "squall.spark.spouts": SPOUTS["host"]})
    conf.set_num_ackers(1 if acking else 0)
    runner = SparkRunner(builder.create_topology(), conf, session=spark,
                         checkpoint_location=tempfile.mkdtemp(prefix="w1-spark-"))
    t0 = time.perf_counter()
    result = runner.run(until_complete=True, **run)
    total = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    if PARTS:
        for p in batches:
            print(f"    {source} acking {'on' if acking else 'off'}, batch {p['batchId']}: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(p["durationMs"].items())) + " ms")
    counts: dict[str, int] = {}
    for task in runner.restored_bolts():
        if task.component_id == "count":
            counts.update(task.instance.counts)
    return batch_s, total, counts


PARTS = False  # --parts: print each data batch's durationMs parts


class LinesSpout(Spout):
    """A user's spout over text files: one sentence a line, emitted unanchored. Its state is
    the file and the byte offset it reached (the open file is reopened and sought after a
    restore), as a spout over files or a log keeps an offset rather than its data."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        # Task i of n reads the files at positions i, i + n, ... (all of them with one task).
        n = len(context.get_component_tasks(context.this_component_id))
        self.paths = self.paths[context.this_task_index::n]
        self.index, self.offset, self.file = 0, 0, None

    def next_tuple(self) -> None:
        while self.index < len(self.paths):
            if self.file is None:
                self.file = open(self.paths[self.index], "rb")  # noqa: SIM115
                self.file.seek(self.offset)
            line = self.file.readline()
            if line:
                self.offset += len(line)
                self.collector.emit([line.decode().rstrip("\n")])
                return
            self.file.close()
            self.file, self.index, self.offset = None, self.index + 1, 0

    def is_exhausted(self) -> bool:
        return self.index >= len(self.paths)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "file": None}

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence"))


def user_job(spark, source: Any) -> tuple[float, dict[str, int]]:
    """The hand-written batch job, timed from reading its input (the files with
    `spark.read.text`, or a DataFrame of the driver's list) until its counts are back."""
    import pyarrow as pa

    t0 = time.perf_counter()
    if isinstance(source, list):
        df = spark.createDataFrame(pa.table({"sentence": source}))
    else:
        df = spark.read.text(source)
    table = (df.mapInArrow(split_words, "word string").repartition(2, "word")
             .mapInArrow(count_words, "word string, count long").toArrow())
    counts = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
    return time.perf_counter() - t0, counts


SPOUTS = {"host": "reader", "tasks": 1}  # --spouts, --spout-tasks


def user_squall(source: Any) -> tuple[float, dict[str, int]]:
    """W1 through the public API with its defaults (acking off: no ackers), timed from the
    topology's build to the run's return; the counts are read from the bolts afterwards. The
    spout reads `source`'s files, or emits the driver's list (`ListSpout`)."""
    root = tempfile.mkdtemp(prefix="w1-user-")
    t0 = time.perf_counter()
    builder = TopologyBuilder()
    if isinstance(source, list):
        builder.set_spout("sentences", ListSpout(source, reliable=False))
    else:
        builder.set_spout("sentences", LinesSpout(sorted(str(p) for p in Path(source).iterdir())),
                          SPOUTS["tasks"])
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    conf = Config({"squall.spark.spouts": SPOUTS["host"]})
    conf.set_num_ackers(0)
    # What `squall.run` does (make_runner, then run until complete), keeping the runner so that
    # the counts can be checked once the clock has stopped.
    runner = make_runner(builder.create_topology(), conf, runner="spark",
                         checkpoint_location=root)
    result = runner.run(until_complete=True)
    elapsed = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(result.errors[:3])
    counts: dict[str, int] = {}
    for task in runner.restored_bolts():  # type: ignore[attr-defined]
        if task.component_id == "count":
            counts.update(task.instance.counts)
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, counts


def user_seen(spark, large: int, small: int, rounds: int, place: str) -> None:
    """W1 as a user sees it: steady state of whole runs, alternated (see the module's doc)."""
    inputs = {n: w1_sentences(n) for n in (small, large)}
    words = {n: sum(len(s.split()) for s in v) for n, v in inputs.items()}
    expected = {n: reference_counts(v) for n, v in inputs.items()}
    sources: dict[int, Any] = dict(inputs)
    data = tempfile.mkdtemp(prefix="w1-user-input-")
    if place == "files":  # two files per input, as Spark reads them in two partitions
        for n, sentences in inputs.items():
            folder = os.path.join(data, str(n))
            os.makedirs(folder)
            half = len(sentences) // 2
            for i, part in enumerate((sentences[:half], sentences[half:])):
                Path(folder, f"part-{i}.txt").write_text("".join(s + "\n" for s in part))
            sources[n] = folder
    sides = {"job": lambda n: user_job(spark, sources[n]),
             "squall": lambda n: user_squall(sources[n])}
    for side in sides.values():  # warm-up: Python workers, the first query's planning
        side(small)
    rates: dict[str, list[float]] = {"job": [], "squall": []}
    ratios = []
    for r in range(rounds):
        order = ["job", "squall"] if r % 2 == 0 else ["squall", "job"]
        times: dict[tuple[str, int], float] = {}
        for n in (small, large):
            for name in order:
                t, counts = sides[name](n)
                if counts != expected[n]:
                    raise AssertionError(f"{name}, {n} sentences: counts differ from the reference")
                times[name, n] = t
        rate = {name: (words[large] - words[small]) / (times[name, large] - times[name, small])
                for name in sides}
        for name in sides:
            rates[name].append(rate[name])
        ratios.append(rate["squall"] / rate["job"])
        print(f"round {r + 1}: " + ", ".join(
            f"{name} {times[name, small]:.2f}s / {times[name, large]:.2f}s "
            f"({rate[name] / 1e6:.3f} M words/s)" for name in order)
            + f", ratio {ratios[-1]:.1%}", flush=True)
    shutil.rmtree(data, ignore_errors=True)
    print(f"W1 as a user sees it (local[2]), input from {place}, whole runs of {large:,} and "
          f"{small:,} sentences ({words[large]:,} and {words[small]:,} words), steady state, "
          f"{rounds} rounds (medians and ranges)")
    for name, label in (("job", "hand-written PySpark job"),
                        ("squall", "squall, user spout, acking off")):
        v = rates[name]
        print(f"  {label:<32} {statistics.median(v) / 1e6:6.3f} M words/s "
              f"({min(v) / 1e6:.3f}-{max(v) / 1e6:.3f})")
    print(f"  ratio to the hand-written job {statistics.median(ratios):6.1%} "
          f"({min(ratios):.1%}-{max(ratios):.1%})")


def idle_batches(spark, squall_idle: bool) -> float:
    """Median duration of empty micro-batches of a foreachBatch query (the reference)."""
    root = tempfile.mkdtemp(prefix="w1-idle-")
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
          .where("value < 0"))
    q = (df.writeStream.foreachBatch(lambda d, i: None)
         .option("checkpointLocation", os.path.join(root, "q")).trigger(processingTime="0 seconds")
         .start())
    time.sleep(8)
    q.stop()
    durations = [p["durationMs"]["triggerExecution"] for p in q.recentProgress][3:]
    return statistics.median(durations) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2,
                        help="tasks of each bolt (the application has 2 cores)")
    parser.add_argument("--parts", action="store_true",
                        help="print each data batch's durationMs parts (Spark's progress report)")
    parser.add_argument("--sources", default="spout,source",
                        help="which squall sources to run: spout, source or both")
    parser.add_argument("--user-seen", action="store_true",
                        help="W1 as a user sees it: whole runs from the driver's list, steady "
                        "state of a large run less a small one, alternated with the job")
    parser.add_argument("--small", type=int, default=20_000,
                        help="--user-seen: the small run's sentences")
    parser.add_argument("--rounds", type=int, default=3, help="--user-seen: rounds")
    parser.add_argument("--input", choices=("files", "list"), default="files",
                        help="--user-seen: where both sides read the sentences from")
    parser.add_argument("--spouts", choices=("reader", "executors"), default="reader",
                        help="where the user spout runs (squall.spark.spouts)")
    parser.add_argument("--spout-tasks", type=int, default=1,
                        help="--user-seen: the user spout's tasks (each reads its share of the "
                        "files)")
    args = parser.parse_args()
    SPOUTS.update(host=args.spouts, tasks=args.spout_tasks)
    if args.user_seen:
        user_seen(get_session("local[2]", {"spark.ui.enabled": "false"}), args.sentences,
                  args.small, args.rounds, args.input)
        return
    global PARTS
    PARTS = args.parts
    sources = args.sources.split(",")
    spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    import pyarrow as pa

    df = spark.createDataFrame(pa.table({"sentence": sentences})).cache()
    df.count()
    rows = []
    for run in range(args.runs):
        base_s, base_counts = baseline(spark, df)
        assert base_counts == expected
        row = {"baseline": base_s}
        for source in sources:
            for acking in (False, True):
                batch_s, total_s, counts = squall_run(spark, sentences, acking, source,
                                                      args.tasks)
                if counts != expected:
                    raise AssertionError(f"acking={acking}: counts differ from the reference")
                name = f"{source} acking {'on' if acking else 'off'}"
                row[f"squall {name}"] = batch_s
                row[f"total {name}"] = total_s
        rows.append(row)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()),
              flush=True)
    last = rows[-1]
    print(f"W1 Spark runner (local[2]), {words:,} words, whole input as one micro-batch, "
          f"{args.tasks} tasks a bolt, run {args.runs} of {args.runs} (steady state)")
    base = last["baseline"]
    print(f"  hand-written PySpark job  {words / base / 1e6:6.3f} M words/s")
    for source, label in (("spout", "user Spout on the driver"),
                          ("source", "MemorySource on executors")):
        if source not in sources:
            continue
        for mode in ("off", "on"):
            t = last[f"squall {source} acking {mode}"]
            print(f"  squall, {label}, acking {mode:<3}  {words / t / 1e6:6.3f} M words/s   "
                  f"ratio to the hand-written job {base / t:6.1%}   (query start to finish "
                  f"{last[f'total {source} acking {mode}']:.1f}s)")
    idle = idle_batches(spark, False)
    print(f"  empty foreachBatch micro-batch: {idle * 1000:.0f} ms median; a squall topology with "
          "no new input runs no micro-batch at all (its reader returns the same offset)")


if __name__ == "__main__":
    main()
