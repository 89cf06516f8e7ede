"""The component graph (`squall.topology.graph`) and the typed config accessors.

Every runner orders its bolts and reads its timeouts through these, so they are checked here once:
the order the Spark runner's stages follow, cycles, and that a bad value names its key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from squall import BasicBolt, ConfigError, Fields, SquallError, TopologyBuilder
from squall.cli.main import main as squall_main
from squall.runtime.local.engine import LocalEngine
from squall.testing import FixedTupleSpout, complete_topology
from squall.topology.config import (
    checkpoint_interval_ms,
    configured_message_timeout_ms,
    max_spout_pending,
    message_timeout_ms,
    random_seed,
    tick_period_ms,
)
from squall.topology.graph import bolt_order, downstream, is_acyclic, upstream

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = "topology.message.timeout.secs"


class Pass(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(tup.values)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("x"))


def _topology(edges: dict[str, list[str]]):
    """One spout `s` and a bolt per key, subscribed to the listed components."""
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[1], [2]], Fields("x")))
    for cid, sources in edges.items():
        declarer = b.set_bolt(cid, Pass())
        for src in sources:
            declarer.shuffle_grouping(src)
    return b.create_topology()


# ---- graph ----------------------------------------------------------------------------------


def test_bolt_order_is_level_by_level_with_ids_sorted_in_each_level():
    t = _topology({"sink": ["join", "b"], "join": ["b", "a"], "b": ["s"], "a": ["s"],
                   "audit": ["s"]})
    assert bolt_order(t) == ["a", "audit", "b", "join", "sink"]
    assert is_acyclic(t)


def test_bolt_order_places_every_bolt_after_its_sources():
    t = _topology({"d": ["c"], "c": ["b"], "b": ["a"], "a": ["s"], "x": ["a", "d"]})
    order = bolt_order(t)
    assert order == ["a", "b", "c", "d", "x"]
    for cid in order:
        assert all(order.index(src) < order.index(cid) for src in upstream(t, cid) if src != "s")


def test_a_cycle_is_reported_and_ordered_by_the_smallest_remaining_id():
    t = _topology({"a": ["s"], "y": ["a", "x"], "x": ["y"]})
    assert not is_acyclic(t)
    assert bolt_order(t) == ["a", "x", "y"]
    assert not is_acyclic(_topology({"self": ["s", "self"]}))


def test_upstream_and_downstream():
    t = _topology({"a": ["s"], "b": ["s", "a"]})
    assert upstream(t, "b") == {"s", "a"} and upstream(t, "s") == set()
    assert downstream(t, "s") == {"a", "b"} and downstream(t, "b") == set()


# ---- config accessors -----------------------------------------------------------------------


def test_message_timeout_reads_seconds_as_ms_and_honours_the_enable_flag():
    assert message_timeout_ms({"topology.message.timeout.secs": 0.2}) == 200
    assert message_timeout_ms({}) == 30_000
    off = {"topology.message.timeout.secs": 5, "topology.enable.message.timeouts": False}
    assert message_timeout_ms(off) is None
    assert configured_message_timeout_ms(off) == 5000


def test_other_accessors_keep_the_runners_defaults():
    assert tick_period_ms({}) is None
    assert tick_period_ms({"topology.tick.tuple.freq.secs": 0}) is None
    assert tick_period_ms({"topology.tick.tuple.freq.secs": 1}) == 1000
    assert max_spout_pending({}) is None
    assert max_spout_pending({"topology.max.spout.pending": 0}) is None
    assert max_spout_pending({"topology.max.spout.pending": 40}) == 40
    assert checkpoint_interval_ms({}) == 1000
    assert checkpoint_interval_ms({"topology.state.checkpoint.interval.ms": 100}) == 100
    assert random_seed({}) == 0 and random_seed({"squall.random.seed": 12}) == 12


@pytest.mark.parametrize(
    ("accessor", "key", "value", "allowed"),
    [
        (message_timeout_ms, TIMEOUT, "ten", "a positive number of seconds"),
        (message_timeout_ms, TIMEOUT, -3, "a positive number of seconds"),
        (configured_message_timeout_ms, TIMEOUT, 0, "a positive number"),
        (message_timeout_ms, TIMEOUT, float("inf"), "a positive number"),
        (message_timeout_ms, TIMEOUT, True, "a positive number"),
        (tick_period_ms, "topology.tick.tuple.freq.secs", "often", "a positive number of seconds"),
        (tick_period_ms, "topology.tick.tuple.freq.secs", -1, "0 or unset: no ticks"),
        (max_spout_pending, "topology.max.spout.pending", "many", "a positive integer"),
        (max_spout_pending, "topology.max.spout.pending", -5, "0 or unset: no bound"),
        (checkpoint_interval_ms, "topology.state.checkpoint.interval.ms", "1s", "milliseconds"),
        (random_seed, "squall.random.seed", "x", "an integer"),
    ],
)
def test_a_bad_value_names_the_key_the_value_and_what_is_allowed(accessor, key, value, allowed):
    with pytest.raises(ConfigError) as info:
        accessor({key: value})
    message = str(info.value)
    assert message.startswith(f"{key} must be ") and allowed in message
    assert message.endswith(f"got {value!r}")
    # Callers that caught ValueError (or squall's errors) still do.
    assert isinstance(info.value, ValueError) and isinstance(info.value, SquallError)


def test_a_bad_timeout_fails_when_the_run_is_created():
    t = _topology({"a": ["s"]})
    with pytest.raises(ConfigError, match=r"topology\.message\.timeout\.secs .*got 'ten'"):
        LocalEngine(t, {"topology.message.timeout.secs": "ten"})
    with pytest.raises(ConfigError, match=r"topology\.message\.timeout\.secs .*got 'ten'"):
        complete_topology(t, conf={"topology.message.timeout.secs": "ten"}, runner="local")


def test_squall_run_reports_a_bad_override_by_its_key(capsys):
    code = squall_main(["run", str(ROOT / "examples" / "wordcount.py") + ":topology",
                        "--runner", "local", "-c", "topology.message.timeout.secs=ten"])
    err = capsys.readouterr().err
    assert code == 2  # refused with the other -c mistakes, before the run starts
    assert ("squall run: -c: topology.message.timeout.secs must be a positive number of seconds, "
            "got 'ten'") in err
