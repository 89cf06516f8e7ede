"""Redis down when a run starts: the run waits for it, as for an outage mid-run, on both runners.

Each test takes a free port with nothing listening, starts the run in a thread, waits until the
run says (in its log) that it waits for that server, then starts `redis-server` on the port and
checks the run's exact results; or asks the waiting run to stop and checks that it does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.bolts import WordCount
from support.redis_server import free_port, start_redis

from squall import BasicBolt, Fields, TopologyBuilder, Values
from squall.connectors import RedisStreamSource
from squall.runners import make_runner
from squall.testing import FixedTupleSpout, complete_topology
from squall.trident import Count, FixedBatchSpout, TridentTopology
from squall.trident.state import RedisMapState, StateType

WORDS = ["a", "b", "a", "c", "a", "b"]
CAP_S = 60  # only a run that never gets there waits this long


class Waits(logging.Handler):
    """Sets `seen` when the `squall` logger says it waits for the Redis server at `port`."""

    def __init__(self, port: int, says: str = "waiting for Redis") -> None:
        super().__init__(logging.WARNING)
        self.needle = f"127.0.0.1:{port}"
        self.says = says
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.says in text and self.needle in text:
            self.lines.append(text)
            self.seen.set()


@pytest.fixture
def waits() -> Iterator[Callable[[int], Waits]]:
    logger = logging.getLogger("squall")
    handlers: list[Waits] = []

    def make(port: int, says: str = "waiting for Redis") -> Waits:
        handler = Waits(port, says)
        logger.addHandler(handler)
        handlers.append(handler)
        return handler

    yield make
    for handler in handlers:
        logger.removeHandler(handler)


def waited(seen: Waits, thread: threading.Thread) -> bool:
    """True once the run said it waits; False if it ended (or never said so) first."""
    for _ in range(CAP_S * 10):
        if seen.seen.wait(0.1):
            return True
        if not thread.is_alive():
            return seen.seen.is_set()
    return False


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # reported by the test's assertions
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


@contextlib.contextmanager
def redis_once_waited_for(tmp_path: Path, port: int, seen: Waits, thread: threading.Thread,
                          out: dict[str, Any], first_line: str) -> Iterator[None]:
    """Once the run in `thread` said it waits (its first such line naming `first_line`), Redis
    starts on `port`; the block runs once the run has ended without an error, Redis still up."""
    assert waited(seen, thread), out
    assert first_line in seen.lines[0], seen.lines
    with start_redis(tmp_path, port=port):
        thread.join(CAP_S)
        assert not thread.is_alive(), "the run did not end once Redis was up"
        assert "error" not in out, out.get("error")
        yield


def trident_counts(port: int):
    t = TridentTopology()
    (t.new_stream("words", FixedBatchSpout(["word"], 2, *[[w] for w in WORDS]))
     .group_by(["word"])
     .persistent_aggregate(RedisMapState.factory(StateType.TRANSACTIONAL, port=port, timeout=1),
                           Count(), ["count"]))
    return t.build()


def stored_counts(port: int) -> dict[str, int]:
    state = RedisMapState.factory(StateType.TRANSACTIONAL, port=port).make_state("state-1")
    keys = [(w,) for w in sorted(set(WORDS))]
    return {k[0]: v for k, v in zip(keys, state.multi_get(keys), strict=True)}


def test_trident_redis_map_state_down_at_start_is_waited_for(runner, tmp_path: Path,
                                                               waits) -> None:
    port = free_port()  # nothing listens there yet
    seen = waits(port)
    thread, out = in_thread(lambda: complete_topology(trident_counts(port), runner=runner))
    try:
        with redis_once_waited_for(tmp_path, port, seen, thread, out,
                                   "redis map state 'state-1'"):
            assert stored_counts(port) == {"a": 3, "b": 2, "c": 1}
        assert len(seen.lines) == 1, "the wait is logged once, not on every try"
    finally:
        thread.join(CAP_S)


def test_a_stop_ends_the_wait_for_a_trident_state(runner, waits) -> None:
    port = free_port()
    seen = waits(port)
    chosen = make_runner(trident_counts(port), {}, runner=runner)
    thread, out = in_thread(lambda: chosen.run(duration_ms=CAP_S * 1000, until_complete=True))
    try:
        assert waited(seen, thread), out
        chosen.request_stop(timeout_s=10)
        thread.join(15)
        assert not thread.is_alive(), "the stop did not end the wait"
        assert "error" not in out, out.get("error")
    finally:
        thread.join(CAP_S)


class Collect(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(*tup.values))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("user", "amount"))


def test_redis_stream_source_down_at_start_reads_everything_once_it_is_up(
        runner, tmp_path: Path, waits) -> None:
    port = free_port()
    seen = waits(port, says="cannot reach Redis")
    b = TopologyBuilder()
    b.set_spout("events", RedisStreamSource(["events:0", "events:1"], ["user", "amount"],
                                            port=port, timeout=1, bounded=True))
    b.set_bolt("collect", Collect()).shuffle_grouping("events")
    thread, out = in_thread(lambda: complete_topology(b.create_topology(), runner=runner))
    try:
        assert waited(seen, thread), out
        assert "source 'events'" in seen.lines[0], seen.lines
        # The server comes up with its entries (a bounded source takes its bounds at the first
        # plan that reaches it): written to a snapshot by a seed server, loaded at its start.
        with start_redis(tmp_path) as seed:
            for i in range(6):
                seed.client.xadd(f"events:{i % 2}", {"user": f"u{i}", "amount": str(i)})
            seed.client.save()
        with start_redis(tmp_path, port=port) as up:
            assert up.client.xlen("events:0") == 3
            thread.join(CAP_S)
            assert not thread.is_alive(), "the run did not end once Redis was up"
        assert "error" not in out, out.get("error")
        result = out["result"]
        assert sorted(map(tuple, result.tuples("collect"))) == [(f"u{i}", str(i)) for i in range(6)]
        assert len(seen.lines) == 1, "the outage is reported once, not on every plan"
    finally:
        thread.join(CAP_S)


def test_a_redis_state_provider_down_at_start_is_waited_for(runner, tmp_path: Path,
                                                            waits) -> None:
    """A stateful bolt whose Redis state store is down when the run starts: the local runner
    waits for it (a warning naming the bolt and host:port), Spark runs the first batch again
    (an error naming the store); both count every word once when Redis is up."""
    port = free_port()
    b = TopologyBuilder()
    b.set_spout("words", FixedTupleSpout([[w] for w in WORDS], Fields("word")))
    b.set_bolt("count", WordCount()).shuffle_grouping("words")
    conf = {"topology.state.provider": "redis",
            "topology.state.provider.config": {"port": port, "retry_timeout": 0.5}}
    seen = waits(port, "waiting for Redis" if runner == "local" else "running it again")
    thread, out = in_thread(lambda: complete_topology(b.create_topology(), conf, runner=runner))
    try:
        with redis_once_waited_for(tmp_path, port, seen, thread, out, "redis state store"):
            counts: dict[str, int] = {}
            for word, n in out["result"].tuples("count"):
                counts[word] = max(counts.get(word, 0), n)
            assert counts == {w: WORDS.count(w) for w in set(WORDS)}
            assert all("unreachable" in str(e.error) for e in out["result"].errors)
    finally:
        thread.join(CAP_S)
