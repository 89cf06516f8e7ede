"""W1 (word count) with the counts in checkpointed state, per provider, on both runners.

    .venv/bin/python benchmarks/state_w1.py [--sentences 200000] [--runs 3] [--runner both]
        [--batch-sentences N]

The topology is benchmarks/w1_local.py's (list spout, split x2, count x2 by word), acking on. The
stateless figure counts in a dict; the stateful ones count in the bolt's `KeyValueState` from
each provider: memory, durable (SQLite), redis (a redis-server this script starts on a free port
and stops). Printed: words/s (median of the runs after a warm-up on the local runner; on Spark the
micro-batches' `triggerExecution` time of the last run, steady state) and the ratio to the
stateless topology measured in the same process. Counts are checked against the reference every
run (read back from each provider's committed state).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from w1_local import Count, ListSpout, Split
from workloads import reference_counts, w1_sentences

from squall import Config, Fields, StatefulBolt, TopologyBuilder
from squall.state.providers import new_state


class StatefulCount(StatefulBolt):
    """W1's count, with the counts in the bolt's state."""

    def init_state(self, state: Any) -> None:
        self.counts = state

    def execute(self, tup) -> None:
        w = tup.values[0]
        counts = self.counts
        counts.put(w, counts.get(w, 0) + 1)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("word", "count"))


def topology(sentences: list[str], stateful: bool):
    builder = TopologyBuilder()
    builder.set_spout("sentences", ListSpout(sentences, reliable=True))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulCount() if stateful else Count(), 2) \
        .fields_grouping("split", Fields("word"))
    return builder.create_topology()


def provider_conf(provider: str | None, workdir: str, redis_port: int) -> dict[str, Any]:
    if provider is None:
        return {}
    conf: dict[str, Any] = {"topology.state.provider": provider,
                            "topology.state.checkpoint.interval.ms": 1000}
    if provider == "durable":
        conf["topology.state.provider.config"] = {"dir": tempfile.mkdtemp(dir=workdir)}
    if provider == "redis":
        conf["topology.state.provider.config"] = {
            "port": redis_port, "prefix": f"bench{time.monotonic_ns()}:"}
    return conf


def state_counts(topo, conf: dict[str, Any], base_dir: str | None = None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in topo.component_tasks("count"):
        counts.update(new_state(conf, f"count-{task}", default="durable", base_dir=base_dir))
    return counts


def local_run(sentences, provider, workdir, redis_port) -> tuple[float, dict[str, int]]:
    from squall.runtime.local.engine import LocalEngine

    topo = topology(sentences, stateful=provider is not None)
    conf = Config(provider_conf(provider, workdir, redis_port))
    conf.set_num_ackers(1)
    # No max spout pending: stateful trees complete only at a commit, so a bound would cap
    # throughput at (bound / checkpoint interval); both topologies run unbounded alike.
    engine = LocalEngine(topo, conf)
    t0 = time.perf_counter()
    result = engine.run(until_complete=True)
    elapsed = time.perf_counter() - t0
    if result.errors:
        raise AssertionError(result.errors[:3])
    if provider in (None, "memory"):
        counts: dict[str, int] = {}
        for task in engine.bolts:
            if task.component_id == "count":
                inst = task.instance
                counts.update(inst.counts if provider is None else dict(inst.counts))
        return elapsed, counts
    return elapsed, state_counts(topo, conf)


def spark_run(spark, sentences, provider, workdir, redis_port, batch: int
              ) -> tuple[float, dict[str, int]]:
    from squall.runtime.spark.driver import SparkRunner

    topo = topology(sentences, stateful=provider is not None)
    ckpt = tempfile.mkdtemp(dir=workdir)
    conf = Config({**provider_conf(provider, workdir, redis_port),
                   "squall.spark.batch.max.tuples": batch})
    conf.set_num_ackers(1)
    runner = SparkRunner(topo, conf, session=spark, checkpoint_location=ckpt)
    result = runner.run(until_complete=True)
    if result.errors:
        raise AssertionError(result.errors[:3])
    batches = [p for p in runner.query.recentProgress if p["numInputRows"] > 0]
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    if provider in (None, "memory"):
        counts: dict[str, int] = {}
        for task in runner.restored_bolts():
            if task.component_id == "count":
                inst = task.instance
                counts.update(inst.counts if provider is None else dict(inst.counts))
        return batch_s, counts
    return batch_s, state_counts(topo, conf, base_dir=os.path.join(ckpt, "state"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir: str) -> tuple[subprocess.Popen, int]:
    import redis

    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(300):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


PROVIDERS = (None, "memory", "durable", "redis")


def label(provider: str | None) -> str:
    return "stateless" if provider is None else provider


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runner", choices=("local", "spark", "both"), default="both")
    parser.add_argument("--batch-sentences", type=int, default=0,
                        help="Spark micro-batch size in sentences (0: the whole input)")
    args = parser.parse_args()
    sentences = w1_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    expected = reference_counts(sentences)
    workdir = tempfile.mkdtemp(prefix="state-w1-")
    redis_proc, redis_port = start_redis(workdir)
    print(f"W1 with state, {words:,} words; load {Path('/proc/loadavg').read_text().strip()}",
          flush=True)
    try:
        if args.runner in ("local", "both"):
            figures: dict[str | None, list[float]] = {p: [] for p in PROVIDERS}
            for run in range(args.runs + 1):  # run 0 is the warm-up
                for provider in PROVIDERS:
                    elapsed, counts = local_run(sentences, provider, workdir, redis_port)
                    if counts != expected:
                        raise AssertionError(f"local {label(provider)}: counts differ")
                    if run:
                        figures[provider].append(words / elapsed)
            base = statistics.median(figures[None])
            print(f"local runner, acking on, median of {args.runs} runs after a warm-up")
            for provider in PROVIDERS:
                med = statistics.median(figures[provider])
                print(f"  {label(provider):<10} {med / 1e6:6.3f} M words/s   ratio to stateless "
                      f"{med / base:6.1%}", flush=True)
        if args.runner in ("spark", "both"):
            from squall.runtime.spark.session import get_session

            spark = get_session("local[2]", {"spark.ui.enabled": "false"})
            batch = (args.batch_sentences or len(sentences)) + 1
            last: dict[str | None, float] = {}
            for _ in range(args.runs):
                for provider in PROVIDERS:
                    batch_s, counts = spark_run(spark, sentences, provider, workdir,
                                                redis_port, batch)
                    if counts != expected:
                        raise AssertionError(f"spark {label(provider)}: counts differ")
                    last[provider] = batch_s
            print(f"Spark runner (local[2]), acking on, micro-batches of {batch - 1} sentences, "
                  f"run {args.runs} of {args.runs} (steady state)")
            for provider in PROVIDERS:
                print(f"  {label(provider):<10} {words / last[provider] / 1e6:6.3f} M words/s   "
                      f"ratio to stateless {last[None] / last[provider]:6.1%}", flush=True)
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
