"""The user pipeline the chaos suite runs through
`squall run tests/crash/chaos/pipeline.py:topology`.

input (`JsonLinesSource`, a directory of JSON-lines files, records `{"id", "key"}`)
  -> count (`StatefulBolt`, parallelism 2, fields grouping on `key`: counts records per key in
     its `KeyValueState` and emits `(id, key, count)`, the key's running count)
  -> out (`JsonLinesSink` or `ParquetSink`, parallelism 2)
  -> redis-out (optional `RedisSink`: hash `chaos:out`, id -> running count)

Everything that makes it a chaos subject lives in this file, in user code, not in squall:

- `CHAOS_*` environment variables choose directories and sinks when the topology is built.
- Kill hooks are armed at run time by the harness, by creating a file `arm-<run>-<point>` in the
  control directory `CHAOS_CTL` (`CHAOS_RUN` names the run). The next time the pipeline passes
  that point (`execute`: a record is being counted; `after-write`: a sink has just written, or
  staged, a batch, before the runner commits it; `pre-commit`: the state's commit hook, which the
  local runner calls after writing its commit record and before publishing the sinks' staged
  batches) it renames the file to `fired-...` and SIGKILLs its whole
  process session: the driver, its JVM and the Python workers, as a crashed machine would.
  The hooks read the environment on every call instead of keeping anything in the instance,
  because on Spark instances are restored from the snapshots of an earlier run.
- `CHAOS_SLEEP_MS` makes every record slow (the "slow batches" scenario).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from squall import Fields, StatefulBolt, TopologyBuilder, Values
from squall.connectors import JsonLinesSink, JsonLinesSource, ParquetSink, RedisSink
from squall.topology.description import Topology

COUNT = "count"
OUT = "out"
REDIS_OUT = "redis-out"
REDIS_HASH = "chaos:out"


def kill_session() -> None:
    """SIGKILL every process of this session (the harness starts the CLI with a new session).

    The driver and its JVM share the session's process group; PySpark's worker daemon makes its
    own group, so that one is killed separately (it holds this process when we are a worker).
    """
    os.killpg(os.getsid(0), signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def chaos_point(point: str) -> None:
    """Die here if the harness armed `point` for this run (at most once: the rename is atomic,
    so of several workers passing the point together exactly one fires)."""
    ctl = os.environ.get("CHAOS_CTL")
    if not ctl:
        return
    run = os.environ.get("CHAOS_RUN", "0")
    armed = os.path.join(ctl, f"arm-{run}-{point}")
    if not os.path.exists(armed):
        return
    try:
        os.rename(armed, os.path.join(ctl, f"fired-{run}-{point}"))
    except FileNotFoundError:
        return  # another worker fired it
    kill_session()


class CountPerKey(StatefulBolt):
    """Counts records per key in its state and passes each record on with the key's count."""

    def init_state(self, state: Any) -> None:
        self.counts = state

    def execute(self, tup: Any) -> None:
        chaos_point("execute")
        sleep_ms = float(os.environ.get("CHAOS_SLEEP_MS") or 0)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        key = tup["key"]
        n = self.counts.get(key, 0) + 1
        self.counts.put(key, n)
        self.collector.emit(Values(tup["id"], key, n), anchors=tup)
        self.collector.ack(tup)

    def pre_commit(self, txid: int) -> None:
        chaos_point("pre-commit")

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "key", "count"))


class KillAfterWrite:
    """Mixin for a sink: the `after-write` kill point right after the sink wrote a batch and
    before the runner commits it: `write_batch` (Spark) or `stage_batch` (the local runner with
    a checkpoint location stages a batch, and publishes it after its commit)."""

    def write_batch(self, batch_id: int, tuples: list[Any]) -> None:
        super().write_batch(batch_id, tuples)  # type: ignore[misc]
        chaos_point("after-write")

    def stage_batch(self, batch_id: int, tuples: list[Any]) -> None:
        super().stage_batch(batch_id, tuples)  # type: ignore[misc]
        chaos_point("after-write")


class ChaosJsonLinesSink(KillAfterWrite, JsonLinesSink):
    """`JsonLinesSink` with the `after-write` kill point."""


class ChaosParquetSink(KillAfterWrite, ParquetSink):
    """`ParquetSink` with the `after-write` kill point."""


class ChaosRedisSink(KillAfterWrite, RedisSink):
    """`RedisSink` with the `after-write` kill point."""


def build(input_dir: str, output_dir: str, sink: str = "jsonl",
          redis_sink: str | None = None) -> Topology:
    """The topology; `redis_sink` is `host:port` for the optional `RedisSink`."""
    b = TopologyBuilder()
    b.set_spout("input", JsonLinesSource(input_dir, ["id", "key"], bounded=True))
    b.set_bolt(COUNT, CountPerKey(), parallelism=2).fields_grouping("input", Fields("key"))
    sink_class = {"jsonl": ChaosJsonLinesSink, "parquet": ChaosParquetSink}[sink]
    b.set_bolt(OUT, sink_class(output_dir), parallelism=2).shuffle_grouping(COUNT)
    if redis_sink:
        host, _, port = redis_sink.rpartition(":")
        b.set_bolt(REDIS_OUT, ChaosRedisSink(host, int(port), key_field="id",
                                             value_field="count", hash_name=REDIS_HASH)
                   ).shuffle_grouping(COUNT)
    return b.create_topology()


def topology() -> Topology:
    """The `squall run` target: the topology the `CHAOS_*` variables describe."""
    return build(os.environ["CHAOS_INPUT"], os.environ["CHAOS_OUTPUT"],
                 os.environ.get("CHAOS_SINK", "jsonl"), os.environ.get("CHAOS_REDIS_SINK") or None)
