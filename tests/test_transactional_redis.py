"""Redis Streams transactional spouts (both kinds) and a transactional map in real Redis, on both
runners, with random failures; the opaque spout's stream grows between attempts."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest
from conftest import start_redis
from test_transactional import FaultyBuckets, FaultyKeyedCount, _run

from squall import Fields
from squall.transactional import (
    RedisStreamOpaqueSpout,
    RedisStreamTransactionalSpout,
    TransactionalTopologyBuilder,
)

RUNNERS = ["local", pytest.param("spark", marks=pytest.mark.spark)]


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
@pytest.mark.parametrize("runner", RUNNERS)
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
                "squall.transactional.store": {"redis": {"host": r.host, "port": r.port}}}
        _run(runner, b.create_topology(), conf, tmp_path / "r", session_for(runner))
        final = Counter(body["word"] for p in range(2)
                        for _, body in r.client.xrange(f"words:{p}"))
        if opaque:
            assert any(w.startswith("grown") for w in final), "the stream never changed"
        tt._check_words(conf, final)
        # Progress is in Redis too: the coordinator's next transaction id.
        assert r.client.hexists("squall:tx:redis-words", "coordinator/curr")
