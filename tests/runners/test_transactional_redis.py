"""Redis Streams transactional spouts (both kinds) and a transactional map in real Redis, on both
runners, with random failures; the opaque spout's stream grows between attempts."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter

import pytest
from support.redis_server import start_redis
from test_transactional import FaultyBuckets, FaultyKeyedCount, _run

from squall import Fields
from squall.runtime.local.engine import LocalEngine
from squall.transactional import (
    BatchBolt,
    Committer,
    RedisStreamOpaqueSpout,
    RedisStreamTransactionalSpout,
    TransactionalTopologyBuilder,
)


@pytest.fixture
def session_for(request):
    def get(runner: str):
        return request.getfixturevalue("spark_session") if runner == "spark" else None
    return get


class GrowingCount(FaultyKeyedCount):
    """On an injected failure, first appends an entry to stream 0 (opaque test)."""

    def finish_batch(self) -> None:
        try:
            super().finish_batch()
        except Exception:
            import redis

            c = self.conf["test.redis"]
            redis.Redis(host=c["host"], port=c["port"]).xadd(
                "words:0", {"word": f"grown{self.attempt.transaction_id}"})
            raise


@pytest.mark.parametrize("opaque", [False, True])
def test_redis_streams_spouts_count_exactly(runner, opaque, tmp_path, session_for, caplog):
    import test_transactional as tt

    caplog.set_level(logging.CRITICAL)
    with start_redis(tmp_path) as r:
        rnd = random.Random(5)
        words = [f"w{i}" for i in range(20)]
        for p in range(2):
            for _ in range(60):
                r.client.xadd(f"words:{p}", {"word": rnd.choice(words), "other": "x"})
        kind = RedisStreamOpaqueSpout if opaque else RedisStreamTransactionalSpout
        spout = kind(["words:0", "words:1"], Fields("word"),
                     max_batch=10 if runner == "local" else 25, host=r.host, port=r.port,
                     stop_when_empty=True)
        b = TransactionalTopologyBuilder("redis-words", "spout", spout, 2)
        b.set_bolt("count", (GrowingCount if opaque else FaultyKeyedCount)(), 2) \
            .fields_grouping("spout", Fields("word"))
        b.set_bolt("bucketize", tt.tw.Bucketize()).none_grouping("count")
        b.set_bolt("buckets", FaultyBuckets(), 2).fields_grouping("bucketize", Fields("bucket"))
        db = {"provider": "redis", "host": r.host, "port": r.port}
        conf = {"transactional_words.db": db, "test.seed": 3, "test.fail": 0.3,
                "test.redis": {"host": r.host, "port": r.port},
                "topology.max.spout.pending": 2,
                "squall.transactional.progress_store": {"redis": {"host": r.host, "port": r.port}}}
        _run(runner, b.create_topology(), conf, tmp_path / "r", session_for(runner))
        final = Counter(body["word"] for p in range(2)
                        for _, body in r.client.xrange(f"words:{p}"))
        if opaque:
            assert any(w.startswith("grown") for w in final), "the stream never changed"
        tt._check_words(conf, final)
        # Progress is in Redis too: the coordinator's next transaction id.
        assert r.client.hexists("squall:tx:redis-words", "coordinator/curr")


class LogBatches(BatchBolt, Committer):
    """Appends `txid words` to a file at every commit."""

    def prepare(self, conf, context, collector, attempt) -> None:
        self.path, self.attempt, self.words = conf["test.log"], attempt, 0

    def execute(self, tup) -> None:
        self.words += 1

    def finish_batch(self) -> None:
        with open(self.path, "a") as out:
            out.write(f"{self.attempt.transaction_id} {self.words}\n")

    def declare_output_fields(self, declarer) -> None:
        pass


@pytest.mark.parametrize("opaque", [False, True])
def test_an_idle_stream_starts_no_empty_transactions(runner, opaque, tmp_path, session_for):
    """An unbounded stream with nothing new: the coordinator waits instead of committing empty
    transaction after empty transaction, and starts one as soon as entries arrive."""
    log = tmp_path / "batches.txt"

    def batches() -> list[tuple[int, int]]:
        text = log.read_text() if log.exists() else ""
        return [tuple(map(int, line.split())) for line in text.splitlines()]

    with start_redis(tmp_path) as r:
        for i in range(5):
            r.client.xadd("words:0", {"word": f"a{i}"})
        kind = RedisStreamOpaqueSpout if opaque else RedisStreamTransactionalSpout
        spout = kind(["words:0"], Fields("word"), host=r.host, port=r.port)
        b = TransactionalTopologyBuilder("idle", "spout", spout, 1)
        b.set_bolt("log", LogBatches()).global_grouping("spout")
        conf = {"test.log": str(log),
                "squall.transactional.progress_store": {"dir": str(tmp_path / "store")}}

        def add_later() -> None:
            deadline = time.monotonic() + 120
            while not batches() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # idle for a while after the first transaction
            pipe = r.client.pipeline(transaction=True)  # all five at once: one batch
            for i in range(5):
                pipe.xadd("words:0", {"word": f"b{i}"})
            pipe.execute()

        adder = threading.Thread(target=add_later, daemon=True)
        adder.start()
        seen: list[float] = []

        def idle_again() -> bool:
            # Once both batches are in, stay idle for 2 s more, then stop.
            if len(batches()) >= 2:
                seen.append(time.monotonic())
                return seen[-1] - seen[0] >= 2
            return False

        if runner == "local":
            LocalEngine(b.create_topology(), conf).run(
                duration_ms=120_000, should_stop=idle_again)
        else:
            from squall.runtime.spark.transactional import TransactionalSparkRunner

            tx = TransactionalSparkRunner(b.create_topology(), conf,
                                          session=session_for(runner),
                                          checkpoint_location=str(tmp_path / "ckpt"))
            tx.run(duration_ms=180_000, should_stop=idle_again)
        adder.join(1)
    assert batches() == [(1, 5), (2, 5)]
