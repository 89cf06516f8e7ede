"""W4 (latency): W1's sentences emitted at a fixed rate, split and counted with acking on.

    .venv/bin/python benchmarks/latency_w4.py --runner local --rates 1000,10000,100000
    .venv/bin/python benchmarks/latency_w4.py --runner spark --rates 1000,10000 --seconds 20
    .venv/bin/python benchmarks/latency_w4.py --runner spark --rates 1000,10000 --pyspark
        [--spouts reader,executors] [--batches] [-c KEY=VALUE]

For each rate (tuples/s; 0 = as fast as the runner goes) prints the rate reached and two
latencies as p50, p99 and max (docs/benchmarks.md, W4):

- complete: from the spout's emit of a sentence to its `ack` (the tree's completion as the
  spout is told of it, Storm's complete latency);
- end-to-end: from the emit to the count's update of the sentence's last word.

Both are wall-clock differences (every process of a run is on this machine and shares the
clock), kept in histograms of 1 %-wide logarithmic buckets by the spout and the counting tasks,
which write them to a scratch directory (on Spark they run in other processes). The settings
used and the load average are printed with the figures. The counts are checked against the
reference, so a run that loses or repeats words fails.

`--pyspark` measures, beside each squall run and in the same session, a plain PySpark query of the
same shape: a Python streaming data source that makes sentence i available once `i / rate`
seconds have passed, split in `mapInArrow`, `repartition` by word, counted in a dict per worker
in `mapInArrow`, results collected in `foreachBatch`, Spark's default trigger. Its end-to-end
latency runs from the planning of the micro-batch that first holds a sentence (what squall's
spout reader does when it calls `next_tuple`) to the count of its last word, and on a second
line from its source's `read` on the executor (where a spout pulled on the executors,
`squall.spark.spouts=executors`, calls `next_tuple`); its "complete" column is the end of the
`foreachBatch` that collected it (it has no acking). The word total is checked.
`--spouts reader,executors` runs squall with each `squall.spark.spouts` in turn, in one session.

On Spark a warm-up run comes first (`--warmup`, 2 s at the first rate by default), unmeasured:
the measured runs then find the session's JVM and Python workers started, as the plain query
does, and measure steady batches rather than the catch-up after the process's start-up.

`--batches` (spark) also prints, per run, Spark's progress reports of its micro-batches with
input (the first, start-up, left out): their count, the median time between trigger starts,
the median of each `durationMs` part (latestOffset, getBatch, queryPlanning, walCommit,
addBatch, commitOffsets, triggerExecution), the median of squall's driver work after the job
(`SparkRunner._apply`: the ledger fold, the outcome file, the commit record), and how many
trigger starts fell between a sampled sentence's emit and its ack (1: the ack was delivered
when the next batch was planned).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import LETTERS, reference_counts, w1_sentences

from squall import BasicBolt, Bolt, Fields, Spout, TopologyBuilder, Values, run

BUCKET = math.log(1.01)  # 1 %-wide buckets


class Histogram:
    """Latencies in ms, bucketed on a log scale; plain data, so it pickles into snapshots."""

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.max_ms = 0.0
        self.n = 0
        self.emitting: tuple[float | None, float] = (None, 0.0)  # the spout's first, last emit

    def add(self, ms: float) -> None:
        b = int(math.log(max(ms, 0.001) * 1000) / BUCKET)  # of microseconds
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.n += 1
        if ms > self.max_ms:
            self.max_ms = ms

    def merge(self, other: dict[str, Any]) -> None:
        for b, c in other["buckets"].items():
            self.buckets[int(b)] = self.buckets.get(int(b), 0) + c
        self.n += other["n"]
        self.max_ms = max(self.max_ms, other["max_ms"])
        self.emitting = tuple(other.get("emitting", self.emitting))  # type: ignore[assignment]

    def quantile(self, q: float) -> float:
        target, seen = q * self.n, 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= target:
                return math.exp((b + 0.5) * BUCKET) / 1000
        return self.max_ms

    def dump(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"buckets": self.buckets, "n": self.n, "max_ms": self.max_ms,
                       "emitting": self.emitting}, f)
        os.replace(tmp, path)


class RateSpout(Spout):
    """Emits sentence i once `i / rate` seconds have passed since its first call (all of them
    at once when `rate` is 0), with its emit time; records each tree's complete latency.

    The sentences are `workloads.w1_sentences(n)`, which the spout generates when it is opened
    or restored and leaves out of its pickled state: like a spout reading a real source, whose
    snapshot keeps an offset into it, not its data, its snapshot stays a few KB whatever `n`
    (the run's counts are checked against `w1_sentences(n)`, which the generation must match)."""

    def __init__(self, n: int, rate: int, out_dir: str) -> None:
        self.n = n
        self.rate = rate
        self.out_dir = out_dir
        self.sentences: list[str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "sentences": None}

    @staticmethod
    def generate(n: int) -> list[str]:
        """`w1_sentences(n)`: its generator, its vocabulary's word k computed, not looked up."""
        rnd = random.Random(42)
        return [" ".join(f"w{k}{LETTERS[k % 26] * (1 + k % 5)}"
                         for k in (rnd.randrange(10_000) for _ in range(10)))
                for _ in range(n)]

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.i = 0
        self.t0: float | None = None
        self.hist = Histogram()
        self.path = os.path.join(self.out_dir, f"spout-{context.this_task_id}.json")
        self.dumped = 0.0
        self.last = 0.0
        self.pairs: list[tuple[float, float]] = []  # (emit, ack) of every 10th sentence
        self.sentences = self.generate(self.n)

    def next_tuple(self) -> None:
        if self.sentences is None:  # restored from a snapshot
            self.sentences = self.generate(self.n)
        now = time.time()
        if self.t0 is None:
            self.t0 = now
        total = self.n
        due = total if not self.rate else min(total, int((now - self.t0) * self.rate) + 1)
        emit, sentences = self.collector.emit, self.sentences
        for i in range(self.i, min(due, self.i + 1000)):
            t = time.time()
            emit(Values(sentences[i], t), msg_id=(i, t))
            self.i = i + 1
            self.last = t

    def ack(self, msg_id: Any) -> None:
        now = time.time()
        self.hist.add((now - msg_id[1]) * 1000)
        if msg_id[0] % 10 == 0:
            self.pairs.append((msg_id[1], now))
        done = self.hist.n == self.n
        if now - self.dumped > 0.5 or done:
            self.hist.emitting = (self.t0, self.last)
            self.hist.dump(self.path)
            self.dumped = now
        if done:  # written once: dumped every half second they took the reader up to 36 ms
            with open(f"{self.path}.pairs", "w") as f:
                json.dump(self.pairs, f)

    def fail(self, msg_id: Any) -> None:
        raise AssertionError(f"sentence {msg_id[0]} failed")

    def is_exhausted(self) -> bool:
        return self.i >= self.n

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence", "emitted"))


class Split(BasicBolt):
    def execute(self, tup, collector) -> None:
        sentence, emitted = tup.values
        words = sentence.split()
        last = len(words) - 1
        for i, w in enumerate(words):
            collector.emit(Values(w, emitted if i == last else None))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "emitted"))


class Count(Bolt):
    """Counts words; for a sentence's last word records the latency from its emit."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}
        self.hist = Histogram()
        self.path = os.path.join(self.out_dir, f"count-{context.this_task_id}.json")
        self.dumped = 0.0

    def execute(self, tup) -> None:
        w, emitted = tup.values
        self.counts[w] = self.counts.get(w, 0) + 1
        if emitted is not None:
            now = time.time()
            self.hist.add((now - emitted) * 1000)
            if now - self.dumped > 0.5:
                self.hist.dump(self.path)
                self.dumped = now
        self.collector.ack(tup)

    def cleanup(self) -> None:
        self.hist.dump(self.path)
        with open(os.path.join(self.out_dir, f"counts-{id(self)}.json"), "w") as f:
            json.dump(self.counts, f)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


def measure(runner: str, sentences: list[str], rate: int, conf: dict[str, Any]
            ) -> dict[str, Any]:
    out_dir = tempfile.mkdtemp(prefix="w4-")
    b = TopologyBuilder()
    b.set_spout("sentences", RateSpout(len(sentences), rate, out_dir))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(out_dir), 2).fields_grouping("split", Fields("word"))
    t0 = time.perf_counter()
    result = run(b.create_topology(), conf, runner=runner,
                 checkpoint_location=os.path.join(out_dir, "ckpt") if runner == "spark" else None)
    elapsed = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(f"errors: {result.errors[:3]}")
    complete, e2e = Histogram(), Histogram()
    counts: dict[str, int] = {}
    pairs: list[tuple[float, float]] = []
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name.startswith("spout-") and name.endswith(".pairs"):
            pairs += json.loads(Path(path).read_text())
        elif name.startswith("spout-") and name.endswith(".json"):
            complete.merge(json.loads(Path(path).read_text()))
        elif name.startswith("count-") and name.endswith(".json"):
            e2e.merge(json.loads(Path(path).read_text()))
        elif name.startswith("counts-"):
            for w, c in json.loads(Path(path).read_text()).items():
                counts[w] = counts.get(w, 0) + c
    if counts != reference_counts(sentences):
        raise AssertionError("the counts differ from the reference")
    if complete.n != len(sentences) or e2e.n != len(sentences):
        raise AssertionError(f"latencies of {complete.n} trees and {e2e.n} sentences, "
                             f"not {len(sentences)}")
    first, last = complete.emitting
    reached = len(sentences) / (last - first) if first is not None and last > first else 0.0
    return {"rate": reached, "complete": complete, "e2e": e2e, "elapsed": elapsed,
            "pairs": pairs}


PARTS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
         "triggerExecution")


class BatchLog:
    """Spark's progress reports (a StreamingQueryListener) and the driver's time in
    `SparkRunner._apply`, for --batches."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        from squall.runtime.spark.driver import SparkRunner

        self.progress: list[dict[str, Any]] = []
        self.apply_ms: list[float] = []
        log = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                log.progress.append(json.loads(event.progress.json))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        spark.streams.addListener(Listener())
        apply = SparkRunner._apply

        def timed(runner: Any, rows: Any, batch_id: int) -> None:
            t = time.perf_counter()
            apply(runner, rows, batch_id)
            log.apply_ms.append((time.perf_counter() - t) * 1000)

        setattr(SparkRunner, "_apply", timed)  # noqa: B010 (timed in place, for --batches)

    def mark(self) -> tuple[int, int]:
        return len(self.progress), len(self.apply_ms)

    def report(self, since: tuple[int, int], pairs: list[tuple[float, float]]) -> str:
        from datetime import datetime

        time.sleep(1.0)  # the listener's last reports arrive after the query stopped
        batches = [p for p in self.progress[since[0]:] if p.get("numInputRows")][1:]
        if not batches:
            return "    no batches with input"
        starts = sorted(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
                        for p in batches)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        parts = " ".join(
            f"{k} {statistics.median(p['durationMs'].get(k, 0) for p in batches):.0f}"
            for k in PARTS)
        line = (f"    {len(batches)} batches, rows p50 "
                f"{statistics.median(p['numInputRows'] for p in batches):.0f}, between trigger "
                f"starts p50 {statistics.median(gaps) * 1000 if gaps else 0:.0f} ms; "
                f"durationMs p50: {parts}")
        applied = self.apply_ms[since[1]:][1:]
        if applied:
            line += f"; driver _apply p50 {statistics.median(applied):.1f} ms"
        if pairs:
            rounds = [sum(1 for s in starts if e < s <= a) for e, a in pairs
                      if starts[0] <= e <= starts[-1]]
            if rounds:
                line += ("; trigger starts between emit and ack: "
                         + ", ".join(f"{n}: {rounds.count(n)}" for n in sorted(set(rounds))))
        return line


class RateSource:
    """A plain PySpark streaming source of `sentences` at `rate` per second (see --pyspark).

    Defined as a factory so that the classes are made where PySpark is imported and pickled by
    value with this script."""

    @staticmethod
    def make(sentences: list[str], rate: int) -> Any:
        from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

        class Range(InputPartition):
            def __init__(self, start: int, end: int, planned: float) -> None:
                self.start, self.end, self.planned = start, end, planned

        class Reader(DataSourceStreamReader):
            def __init__(self) -> None:
                self.t0: float | None = None
                self.planned: dict[int, float] = {}  # an offset's planning time

            def initialOffset(self) -> dict:
                return {"i": 0}

            def latestOffset(self) -> dict:
                now = time.time()
                if self.t0 is None:
                    self.t0 = now
                due = min(len(sentences), int((now - self.t0) * rate) + 1)
                self.planned.setdefault(due, now)
                return {"i": due}

            def partitions(self, start: dict, end: dict) -> list:
                planned = self.planned.get(end["i"], time.time())
                a, b = start["i"], end["i"]
                mid = (a + b) // 2
                return [Range(a, mid, planned), Range(mid, b, planned)]

            def read(self, partition: Any) -> Any:
                read = time.time()  # where squall's spouts pulled on the executors emit
                for i in range(partition.start, partition.end):
                    yield (sentences[i], partition.planned, read)

            def commit(self, end: dict) -> None:
                pass

        class Source(DataSource):
            @classmethod
            def name(cls) -> str:
                return "w4_rate"

            def schema(self) -> str:
                return "sentence string, emitted double, read double"

            def streamReader(self, schema: Any) -> Any:
                return Reader()

        return Source


def _split(batches: Any) -> Any:
    import pyarrow as pa

    for batch in batches:
        words: list[str] = []
        marks: list[float | None] = []
        reads: list[float | None] = []
        for sentence, emitted, read in zip(*(c.to_pylist() for c in batch.columns),
                                           strict=True):
            ws = sentence.split()
            words.extend(ws)
            marks.extend([None] * (len(ws) - 1))
            marks.append(emitted)
            reads.extend([None] * (len(ws) - 1))
            reads.append(read)
        yield pa.RecordBatch.from_arrays(
            [pa.array(words, pa.string()), pa.array(marks, pa.float64()),
             pa.array(reads, pa.float64())], ["word", "emitted", "read"])


_COUNTS: dict[str, int] = {}  # the worker's counts, kept across batches as a stateful bolt's


def _count(batches: Any) -> Any:
    import pyarrow as pa

    counts = _COUNTS
    for batch in batches:
        lat: list[float] = []
        from_read: list[float] = []
        sent: list[float] = []
        for w, emitted, read in zip(*(c.to_pylist() for c in batch.columns), strict=True):
            counts[w] = counts.get(w, 0) + 1
            if emitted is not None:
                now = time.time()
                lat.append((now - emitted) * 1000)
                from_read.append((now - read) * 1000)
                sent.append(emitted)
        # One row per sentence counted, then one with the batch's word count.
        yield pa.RecordBatch.from_arrays(
            [pa.array([*lat, None], pa.float64()), pa.array([*from_read, None], pa.float64()),
             pa.array([*sent, None], pa.float64()),
             pa.array([0] * len(lat) + [batch.num_rows], pa.int64())],
            ["ms", "ms_read", "emitted", "words"])


def measure_pyspark(sentences: list[str], rate: int) -> dict[str, Any]:
    """The plain PySpark query of W4's shape (see --pyspark), in the active session."""
    from squall.runtime.spark.session import get_session

    spark = get_session()
    source = RateSource.make(sentences, rate)
    spark.dataSource.register(source)
    complete, e2e, e2e_read = Histogram(), Histogram(), Histogram()
    words = [0]

    def sink(df: Any, _batch_id: int) -> None:
        table = df.toArrow()
        done = time.time()
        for ms in table.column("ms").drop_null().to_pylist():
            e2e.add(ms)
        for ms in table.column("ms_read").drop_null().to_pylist():
            e2e_read.add(ms)
        words[0] += sum(table.column("words").to_pylist())
        for emitted in table.column("emitted").drop_null().to_pylist():
            complete.add((done - emitted) * 1000)

    df = (spark.readStream.format("w4_rate").load()
          .mapInArrow(_split, "word string, emitted double, read double")
          .repartition(2, "word")
          .mapInArrow(_count, "ms double, ms_read double, emitted double, words long"))
    t0 = time.perf_counter()
    query = (df.writeStream.foreachBatch(sink)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="w4-pyspark-")).start())
    try:
        while e2e.n < len(sentences):
            if query.exception() is not None:
                raise AssertionError(f"the PySpark query failed: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()
    elapsed = time.perf_counter() - t0
    expected = sum(reference_counts(sentences).values())
    if words[0] != expected or e2e.n != len(sentences):
        raise AssertionError(f"the PySpark query counted {words[0]} words of {expected}, "
                             f"{e2e.n} sentences of {len(sentences)}")
    return {"rate": rate, "complete": complete, "e2e": e2e, "e2e_read": e2e_read,
            "elapsed": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner", choices=("local", "spark"), default="local")
    parser.add_argument("--rates", default="1000,10000,100000",
                        help="tuples/s, comma-separated; 0: as fast as the runner goes")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long each rate emits (sentences = rate x seconds)")
    parser.add_argument("--pyspark", action="store_true",
                        help="also measure a plain PySpark query of the same shape (spark only)")
    parser.add_argument("--batches", action="store_true",
                        help="also print the per-batch breakdown of each run (spark only)")
    parser.add_argument("--warmup", type=float, default=None, metavar="SECONDS",
                        help="spark: an unmeasured squall run first, of SECONDS at the first "
                             "rate, so that the measured runs find Spark's JVM and Python "
                             "workers started (default 2; 0: none)")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--spouts", default=None, metavar="HOSTS",
                        help="spark: squall runs with each of these squall.spark.spouts values "
                             "in turn, e.g. reader,executors (default: the configuration's)")
    args = parser.parse_args()
    conf: dict[str, Any] = {"topology.acker.executors": 1}
    for pair in args.conf:
        key, _, raw = pair.partition("=")
        try:
            conf[key] = json.loads(raw)
        except json.JSONDecodeError:
            conf[key] = raw
    print(f"W4 on the {args.runner} runner, {time.strftime('%Y-%m-%d %H:%M')}, settings {conf} "
          "(anything unset: the runner's default)")
    batch_log = None
    if args.batches and args.runner == "spark":
        from squall.runtime.spark.session import get_session

        batch_log = BatchLog(get_session(None, conf))
    warmup = args.warmup if args.warmup is not None else 2.0 if args.runner == "spark" else 0
    if warmup and args.runner == "spark":
        rate = int(args.rates.split(",")[0]) or 1000
        measure(args.runner, w1_sentences(max(1, int(rate * warmup))), rate, conf)
        print(f"(after a warm-up run of {warmup:g} s at {rate}/s, not measured)")
    print(f"{'rate asked':>10} {'reached':>9}  complete p50 / p99 / max ms"
          "        end-to-end p50 / p99 / max ms    load")
    for rate in (int(r) for r in args.rates.split(",")):
        n = int(rate * args.seconds) if rate else 200_000
        sentences = w1_sentences(n)
        hosts = args.spouts.split(",") if args.spouts else [None]
        labels = [("squall" if host is None else f"squall, spouts {host}", host)
                  for host in hosts]
        if args.pyspark and args.runner == "spark" and rate:
            labels.append(("pyspark", None))
        for label, host in labels:
            since = batch_log.mark() if batch_log is not None else (0, 0)
            run_conf = conf if host is None else {**conf, "squall.spark.spouts": host}
            m = (measure(args.runner, sentences, rate, run_conf) if label != "pyspark"
                 else measure_pyspark(sentences, rate))
            c, e = m["complete"], m["e2e"]
            load = os.getloadavg()[0]
            print(f"{rate or 'max':>10} {m['rate']:>9.0f}  "
                  f"{c.quantile(0.5):9.2f} {c.quantile(0.99):9.2f} {c.max_ms:9.1f}    "
                  f"{e.quantile(0.5):9.2f} {e.quantile(0.99):9.2f} {e.max_ms:9.1f}    {load:4.1f}"
                  f"  {label}", flush=True)
            if "e2e_read" in m:  # the plain query's latency from its source's read
                r = m["e2e_read"]
                print(f"{'':>10} {'':>9}  {'':>9} {'':>9} {'':>9}    "
                      f"{r.quantile(0.5):9.2f} {r.quantile(0.99):9.2f} {r.max_ms:9.1f}    "
                      f"{'':>4}  pyspark, end-to-end from its read", flush=True)
            if batch_log is not None:
                print(batch_log.report(since, m.get("pairs", [])), flush=True)


if __name__ == "__main__":
    main()
