"""Shared helpers for the Spark-runner design measurements (docs/design/spark-runner.md).

Not part of squall: these scripts only measure the Spark mechanisms the runner would use.
Run each script with the project virtualenv, e.g.

    /work/main/.venv/bin/python benchmarks/spark_design/q1_dag_pipeline.py
"""

import os
import random
import statistics
import sys
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import cloudpickle  # noqa: E402

# Functions defined here are shipped to Python workers by value (this directory is not on their path).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def vocabulary(n=10000):
    return ["w%d%s" % (i, LETTERS[i % 26] * (1 + i % 5)) for i in range(n)]


def w1_sentences(n_sentences=200000, words_per_sentence=10, seed=42):
    """W1 of benchmarks.md: 200,000 sentences of 10 words, random.Random(42)."""
    vocab = vocabulary()
    rnd = random.Random(seed)
    return [
        " ".join(vocab[rnd.randrange(10000)] for _ in range(words_per_sentence))
        for _ in range(n_sentences)
    ]


def reference_counts(sentences):
    d = {}
    for line in sentences:
        for w in line.split():
            d[w] = d.get(w, 0) + 1
    return d


def spark_session(app="squall-spark-design", master="local[2]", shuffle_partitions=2, extra=None):
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
    )
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    t0 = time.perf_counter()
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"# session start {time.perf_counter() - t0:.1f} s ({master}, pyspark {spark.version})")
    return spark


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    r = fn(*args, **kw)
    return time.perf_counter() - t0, r


def median(xs):
    return statistics.median(xs)


class JobCounter:
    """Counts Spark jobs started by the code inside `with` (via a job group on this thread)."""

    _n = 0

    def __init__(self, spark):
        self.sc = spark.sparkContext

    def __enter__(self):
        JobCounter._n += 1
        self.group = "squall-design-%d" % JobCounter._n
        self.sc.setJobGroup(self.group, self.group)
        return self

    def __exit__(self, *exc):
        self.jobs = len(self.sc.statusTracker().getJobIdsForGroup(self.group))
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        return False


def header(title):
    print()
    print("## " + title)
    print(
        "# date {}, load average {}".format(
            time.strftime("%Y-%m-%d %H:%M:%S"), " ".join(f"{x:.2f}" for x in os.getloadavg())
        )
    )
