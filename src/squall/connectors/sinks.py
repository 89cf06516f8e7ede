"""Sinks: terminal bolts whose output is exactly-once although delivery is at-least-once.

A sink buffers the tuples of a batch and, in `on_batch_end(batch_id)`, writes them durably under
the batch id and only then acks them. If the write fails the error is reported (naming the
component and the target) and the batch's tuples are failed, so their spouts replay them. On Spark
a replay after a crash repeats the batch id with the same tuples, and the sink overwrites (files)
or skips (Redis) what it already wrote, so nothing is written twice.

- `JsonLinesSink(directory)`: `part-b{batch:012d}-t{task}.jsonl`, one JSON object per tuple.
- `ParquetSink(directory)`: `part-b{batch:012d}-t{task}.parquet`, written with pyarrow.
- `RedisSink(host, port, ...)`: one MULTI/EXEC transaction per batch (SET, or HSET into a hash)
  that also records the batch id; a batch already applied is skipped.
- `read_jsonl(directory)`, `read_parquet(directory)`: every record of every part file, in
  (batch, task) order.

Batch ids restart at 0 in a fresh run (the local runner without a checkpoint location, or Spark
with a new checkpoint location), so give every such run its own output directory: a new run in an
old directory overwrites the part files whose names it reuses.

The local runner with a checkpoint location writes in two phases instead (`begin_transactions`):
a batch is *staged* at its end (a hidden `.staged-part-...` file, or a Redis hash per batch) and
*published* (renamed into place, or applied to Redis with the batch marker) only after the
runner's commit record names it; at start, staged batches up to the committed one are published
and later ones discarded, with part files of this task above the committed batch. Readers never
see a batch that did not commit, and a batch id is never reused for other content.

>>> import tempfile
>>> from squall import Fields, TopologyBuilder
>>> from squall.testing import FixedTupleSpout, complete_topology
>>> out = tempfile.mkdtemp()
>>> b = TopologyBuilder()
>>> _ = b.set_spout("words", FixedTupleSpout([["a", 1], ["b", 2]], Fields("word", "n")))
>>> _ = b.set_bolt("sink", JsonLinesSink(out)).shuffle_grouping("words")
>>> result = complete_topology(b.create_topology())
>>> read_jsonl(out)
[{'word': 'a', 'n': 1}, {'word': 'b', 'n': 2}]
>>> sorted(result.acked("words"))
[0, 1]
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from squall.atomic_files import write_atomic
from squall.components.batch_sink import (
    _STAGED_PREFIX,
    BatchSink,
    SinkError,
    SinkWriteError,
    part_name,
)
from squall.topology.fields import Fields
from squall.topology.tuple import Tuple

log = logging.getLogger("squall")

_PART = re.compile(r"^part-b(\d+)-t(\d+)\.(\w+)$")


# ---- files ---------------------------------------------------------------------------------


class _FileSink(BatchSink):
    suffix = ""

    def __init__(
        self, directory: str | os.PathLike[str], fields: Fields | Iterable[str] | None = None
    ) -> None:
        super().__init__(fields)
        # Absolute on the driver: Spark's Python workers may run in another working directory.
        self.directory = os.path.abspath(os.fspath(directory))

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        # Made at the start, not at the first write: a sink that receives nothing leaves an
        # empty directory, which reads as no records, where a missing one is an error.
        os.makedirs(self.directory, exist_ok=True)

    def target(self) -> str:
        return self.directory

    def path_of(self, batch_id: int) -> str:
        return os.path.join(self.directory, part_name(batch_id, self.context.this_task_id,
                                                      self.suffix))

    def write_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        write_atomic(self.path_of(batch_id), self.encode([self.record(t) for t in tuples]))

    def staged_path(self, batch_id: int) -> str:
        return os.path.join(self.directory, _STAGED_PREFIX + part_name(
            batch_id, self.context.this_task_id, self.suffix))

    def stage_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        # A name readers skip (read_jsonl and the file sources ignore dot files).
        write_atomic(self.staged_path(batch_id), self.encode([self.record(t) for t in tuples]))

    def publish_batch(self, batch_id: int) -> None:
        # FileNotFoundError: published before a crash that came before its bookkeeping.
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.staged_path(batch_id), self.path_of(batch_id))  # atomic

    def recover(self, committed: int, run_id: str) -> None:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        task = self.context.this_task_id
        for name in sorted(names):
            staged = name.startswith(_STAGED_PREFIX)
            m = _PART.match(name[len(_STAGED_PREFIX):] if staged else name)
            if not m or int(m.group(2)) != task or m.group(3) != self.suffix:
                continue
            batch = int(m.group(1))
            if staged and batch <= committed:
                self.publish_batch(batch)
            elif batch > committed:
                # A staged batch that did not commit, or a part file this checkpoint never
                # committed (an older run in the same directory): its id is about to be reused.
                os.unlink(os.path.join(self.directory, name))

    def encode(self, records: list[dict[str, Any]]) -> bytes:
        raise NotImplementedError


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


class JsonLinesSink(_FileSink):
    """Writes each batch of each task to `directory/part-b{batch:012d}-t{task}.jsonl`.

    One JSON object per tuple, keys in field order: all the tuple's fields, or `fields`. Values
    JSON cannot hold are written as text (sets as lists). Each file is written atomically
    (temporary file, fsync, rename), so readers see a batch whole or not at all, and a replayed
    batch replaces its file instead of adding to it.

    >>> import tempfile
    >>> from squall import Fields, TopologyBuilder
    >>> from squall.testing import FixedTupleSpout, complete_topology
    >>> out = tempfile.mkdtemp()
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("events", FixedTupleSpout([[1, "x", 0.5]], Fields("id", "kind", "v")))
    >>> _ = b.set_bolt("sink", JsonLinesSink(out, fields=["id", "v"])).shuffle_grouping("events")
    >>> _ = complete_topology(b.create_topology())
    >>> sorted(os.listdir(out))
    ['part-b000000000000-t2.jsonl']
    >>> open(os.path.join(out, "part-b000000000000-t2.jsonl")).read()
    '{"id": 1, "v": 0.5}\\n'
    """

    suffix = "jsonl"

    def encode(self, records: list[dict[str, Any]]) -> bytes:
        return "".join(
            json.dumps(r, ensure_ascii=False, default=_json_default) + "\n" for r in records
        ).encode("utf-8")


class ParquetSink(_FileSink):
    """Writes each batch of each task to `directory/part-b{batch:012d}-t{task}.parquet`.

    One row per tuple, columns in field order (all the tuple's fields, or `fields`); column types
    are inferred by pyarrow from the batch's values, so keep each field's type consistent. Files
    are written atomically, and a replayed batch replaces its file.

    >>> import tempfile
    >>> from squall import Fields, TopologyBuilder
    >>> from squall.testing import FixedTupleSpout, complete_topology
    >>> out = tempfile.mkdtemp()
    >>> b = TopologyBuilder()
    >>> spout = FixedTupleSpout([["a", 1], ["b", 2]], Fields("word", "n"))
    >>> _ = b.set_spout("words", spout)
    >>> _ = b.set_bolt("sink", ParquetSink(out), parallelism=2).shuffle_grouping("words")
    >>> _ = complete_topology(b.create_topology())
    >>> sorted(read_parquet(out), key=lambda r: r["word"])
    [{'word': 'a', 'n': 1}, {'word': 'b', 'n': 2}]
    """

    suffix = "parquet"

    def encode(self, records: list[dict[str, Any]]) -> bytes:
        table = pa.Table.from_pylist(records)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        return sink.getvalue().to_pybytes()


def _part_files(directory: str | os.PathLike[str], suffix: str) -> list[str]:
    directory = os.fspath(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT, f"no directory {directory}: nothing was written there; a file sink "
            "creates its directory when it starts, so check the path given to the sink, and "
            "that its topology ran", directory) from None
    parts = []
    for name in names:
        m = _PART.match(name)
        if m and m.group(3) == suffix:
            parts.append((int(m.group(1)), int(m.group(2)), os.path.join(directory, name)))
    return [path for _b, _t, path in sorted(parts)]


def read_jsonl(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of every `part-*.jsonl` in `directory`, by (batch, task), in file order.

    Temporary files of interrupted writes are ignored. A sink that wrote nothing leaves its
    directory empty: no records. A directory that does not exist raises `FileNotFoundError`.

    >>> import tempfile
    >>> read_jsonl(tempfile.mkdtemp())
    []
    """
    out: list[dict[str, Any]] = []
    for path in _part_files(directory, "jsonl"):
        with open(path, encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def read_parquet(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every row of every `part-*.parquet` in `directory`, by (batch, task), as dicts (none
    for an empty directory; `FileNotFoundError` for a missing one)."""
    out: list[dict[str, Any]] = []
    for path in _part_files(directory, "parquet"):
        out.extend(pq.read_table(path).to_pylist())
    return out


# ---- Redis ---------------------------------------------------------------------------------


def _redis_value(value: Any) -> Any:
    if isinstance(value, (str, bytes, int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(value, default=_json_default)


class RedisSink(BatchSink):
    """Writes each batch to Redis in one MULTI/EXEC transaction, applied at most once.

    For every tuple, `tup[value_field]` is stored under `tup[key_field]`: with `SET` (`MSET`),
    or into the hash `hash_name` with `HSET`. Strings, bytes, ints and floats are stored as they
    are, other values as JSON; within a batch the last tuple for a key wins. The same transaction
    records the batch id in `<prefix>:batch:<task>` (and the run in `<prefix>:run:<task>`: the
    checkpoint location's identity, or the process's without one); a batch whose id that task
    already applied in this run is skipped and its tuples acked, so a replay after a crash,
    of the first batch too, does not apply it again. `prefix` defaults to
    `squall:<component id>`.

    The connection is opened in `prepare` (lazily: the first batch connects) and is not part of
    the pickled component. If Redis cannot be reached, or refuses the password, a `SinkError`
    naming the component, host and port is reported and the batch's tuples are failed (their
    spouts replay them); the next batch tries again.

    >>> from squall import Fields, TopologyBuilder
    >>> from squall.testing import FixedTupleSpout, complete_topology
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("counts", FixedTupleSpout([["apple", 3]], Fields("word", "count")))
    >>> sink = RedisSink("127.0.0.1", 6379, key_field="word", value_field="count",
    ...                  hash_name="word-counts")
    >>> _ = b.set_bolt("redis", sink, parallelism=2).fields_grouping("counts", Fields("word"))
    >>> topology = b.create_topology()   # nothing connects yet
    >>> complete_topology(topology)      # doctest: +SKIP
    >>> # redis-cli HGET word-counts apple  ->  "3"
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6379,
        db: int = 0,
        password: str | None = None,
        key_field: str = "key",
        value_field: str = "value",
        hash_name: str | None = None,
        timeout: float = 5.0,
        *,
        prefix: str | None = None,
    ) -> None:
        super().__init__(None)
        self.host = host
        self.port = int(port)
        self.db = int(db)
        self.password = password
        self.key_field = key_field
        self.value_field = value_field
        self.hash_name = hash_name
        self.timeout = float(timeout)
        self.prefix = prefix
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # connections do not pickle; snapshots reconnect on demand
        return state

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        if self.prefix is None:
            self.prefix = f"squall:{context.this_component_id}"
        # Identifies this task's run: a fresh run (batch ids from 0 again) must not skip its
        # batches because an earlier run recorded higher ids. On a checkpoint location the
        # runner replaces it with the location's (bind_checkpoint), kept across restarts.
        self.run_token = uuid.uuid4().hex
        self.batches_skipped = 0
        self._client = self._new_client()

    def required_fields(self) -> tuple[str, ...]:
        return (self.key_field, self.value_field)

    def target(self) -> str:
        return f"Redis at {self.host}:{self.port}"

    def _new_client(self) -> Any:
        return redis.Redis(
            host=self.host, port=self.port, db=self.db, password=self.password,
            socket_timeout=self.timeout, socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 0),  # a failed batch is replayed by the spouts instead
        )

    @property
    def marker_key(self) -> str:
        return f"{self.prefix}:batch:{self.context.this_task_id}"

    @property
    def run_key(self) -> str:
        return f"{self.prefix}:run:{self.context.this_task_id}"

    def write_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        if self._client is None:
            self._client = self._new_client()
        kf, vf = self.key_field, self.value_field
        mapping: dict[Any, Any] = {}
        for tup in tuples:
            mapping[_redis_value(tup[kf])] = _redis_value(tup[vf])
        marker, run_key, token = self.marker_key, self.run_key, self.run_token
        skipped = False

        def apply(pipe: Any) -> None:
            nonlocal skipped
            last, run = pipe.mget(marker, run_key)
            if run is not None and run.decode() == token and last is not None \
                    and int(last) >= batch_id:
                skipped = True
                return
            skipped = False
            pipe.multi()
            if self.hash_name is not None:
                pipe.hset(self.hash_name, mapping=mapping)
            else:
                pipe.mset(mapping)
            pipe.set(marker, batch_id)
            pipe.set(run_key, token)

        self._client.transaction(apply, marker, run_key)
        if skipped:
            self.batches_skipped += 1
            log.info("%s task %s: batch %s was already applied to Redis; skipped",
                     self.context.this_component_id, self.context.this_task_id, batch_id)

    # ---- two phases (local runner with a checkpoint location) ---------------------------------
    def _staged_key(self, batch_id: int) -> str:
        return f"{self.prefix}:staged:{self.context.this_task_id}:{batch_id}"

    @property
    def staged_index(self) -> str:
        return f"{self.prefix}:staged:{self.context.this_task_id}"

    def _mapping(self, tuples: list[Tuple]) -> dict[Any, Any]:
        kf, vf = self.key_field, self.value_field
        return {_redis_value(t[kf]): _redis_value(t[vf]) for t in tuples}

    def stage_batch(self, batch_id: int, tuples: list[Tuple]) -> None:
        if self._client is None:
            self._client = self._new_client()
        key = self._staged_key(batch_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=self._mapping(tuples))
        pipe.zadd(self.staged_index, {str(batch_id): batch_id})
        pipe.execute()

    def publish_batch(self, batch_id: int) -> None:
        if self._client is None:
            self._client = self._new_client()
        key = self._staged_key(batch_id)
        marker, run_key, token = self.marker_key, self.run_key, self.run_token
        # Gone when a crash came after the transaction below: then the marker has the batch.
        mapping = self._client.hgetall(key)

        def apply(pipe: Any) -> None:
            last, run = pipe.mget(marker, run_key)
            done = (run is not None and run.decode() == token and last is not None
                    and int(last) >= batch_id)
            pipe.multi()
            if not done:
                if mapping:
                    if self.hash_name is not None:
                        pipe.hset(self.hash_name, mapping=mapping)
                    else:
                        pipe.mset(mapping)
                pipe.set(marker, batch_id)
                pipe.set(run_key, token)
            pipe.delete(key)
            pipe.zrem(self.staged_index, str(batch_id))

        self._client.transaction(apply, marker, run_key)

    def bind_checkpoint(self, checkpoint_id: str) -> None:
        # The checkpoint's, not this process's: a restart continues the batch ids, and the
        # marker must recognise the batches its earlier processes applied.
        self.run_token = checkpoint_id

    def recover(self, committed: int, run_id: str) -> None:
        if self._client is None:
            self._client = self._new_client()
        for raw in self._client.zrange(self.staged_index, 0, -1):
            batch = int(raw)
            if batch <= committed:
                self.publish_batch(batch)
            else:
                pipe = self._client.pipeline(transaction=True)
                pipe.delete(self._staged_key(batch))
                pipe.zrem(self.staged_index, str(batch))
                pipe.execute()

    def describe_failure(self, exc: Exception, batch_id: int, n: int) -> SinkError:
        where = f"Redis at {self.host}:{self.port} (db {self.db})"
        if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and "AUTH" in str(exc).upper()
        ):
            what = f"authentication to {where} failed (wrong or missing password)"
        elif isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            what = f"cannot reach {where}"
        else:
            what = f"could not write to {where}"
        return SinkWriteError(
            f"RedisSink {what} for batch {batch_id} of task {self.context.this_task_id}: "
            f"{type(exc).__name__}: {exc}; its {n} tuples are not written",
            component=self.context.this_component_id,
        )

    def cleanup(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None


__all__ = [
    "BatchSink",
    "JsonLinesSink",
    "ParquetSink",
    "RedisSink",
    "SinkError",
    "SinkWriteError",
    "part_name",
    "read_jsonl",
    "read_parquet",
]
