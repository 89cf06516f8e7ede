"""Figures that must mean what docs/metrics.md says, on both runners: checkpoint tuples are not
executed tuples, Trident operations ack their batch tuples, a Spark batch reports the tuples it
executed, a Spark run's start-up is reported apart from its complete latency, and a resumed
run's summary gives its rates.
"""

from __future__ import annotations

import pytest
from support.bolts import RunningCount

from squall import Bolt, Fields, TopologyBuilder, run
from squall.cli.progress import ProgressDisplay, summary
from squall.connectors import MemorySource
from squall.metrics import MetricsSnapshot
from squall.testing import FixedTupleSpout
from squall.trident import Count, FixedBatchSpout, Function, TridentTopology

WORDS = 300


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def stateful_topology(source: bool = False):
    """words -> count (stateful) -> sink; `source`: the words from a built-in source, whose
    read positions a checkpoint keeps (a restart reads on from them)."""
    words = [[i, f"w{i % 7}"] for i in range(WORDS)]
    b = TopologyBuilder()
    b.set_spout("words", MemorySource({"p": words}, Fields("id", "key")) if source
                else FixedTupleSpout(words, Fields("id", "key")))
    b.set_bolt("count", RunningCount(), 2).fields_grouping("words", Fields("key"))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("count")
    return b.create_topology()


@pytest.mark.runners("local", "spark")
def test_checkpoint_tuples_are_not_counted_as_executed(runner):
    # Checkpoints every 10 ms: on the local runner Storm's checkpoint tuples reach every task
    # of both bolts many times over; they are system tuples, counted in no bolt's figures.
    snapshots: list[MetricsSnapshot] = []
    run(stateful_topology(), {"topology.state.checkpoint.interval.ms": 10,
                              "squall.spark.batch.max.tuples": 100},
        runner=runner, on_progress=snapshots.append, progress_every_ms=100)
    last = snapshots[-1].components
    for cid in ("count", "sink"):
        c = last[cid]
        assert (c.executed, c.acked, c.failed) == (WORDS, WORDS, 0), cid
        assert sum(t.executed for t in c.per_task.values()) == WORDS, cid
    assert last["count"].emitted == WORDS and last["words"].acked == WORDS


class Upper(Function):
    def execute(self, tup, collector):
        collector.emit((tup[0].upper(),))


def trident_topology():
    t = TridentTopology()
    batches = [[f"w{(b * 5 + i) % 3}"] for b in range(4) for i in range(5)]
    (t.new_stream("words", FixedBatchSpout(["word"], 5, *batches))
     .each(["word"], Upper(), ["up"]).name("upper")
     .group_by(["up"]).aggregate(Count(), ["n"]).name("counts"))
    return t.build()


@pytest.mark.runners("local", "spark")
def test_trident_operations_ack_their_batch_tuples(runner):
    snapshots: list[MetricsSnapshot] = []
    run(trident_topology(), runner=runner, on_progress=snapshots.append, progress_every_ms=100)
    last = snapshots[-1]
    words = last.components["words"]
    assert (words.emitted, words.acked, words.failed) == (20, 20, 0)
    for cid in ("upper", "counts"):
        c = last.components[cid]
        # Storm's Trident bolts ack every batch tuple they execute once its batch commits.
        assert c.executed > 0 and (c.acked, c.failed) == (c.executed, 0), cid
    if runner == "spark":
        # A Trident batch's Spark rows only trigger it (0 rows): the batch reports the tuples
        # its operations executed instead, and the progress line shows those.
        done = [b for b in last.batches if b.executed]
        assert sum(b.executed for b in done) == sum(
            last.components[c].executed for c in ("upper", "counts"))
        display_out: list[str] = []

        class Out:
            def write(self, text: str) -> None:
                display_out.append(text)

            def flush(self) -> None:
                pass

            def isatty(self) -> bool:
                return False

        ProgressDisplay(Out(), live=False)(last)  # type: ignore[arg-type]
        header = "".join(display_out).splitlines()[0]
        assert "rows" not in header and "tuples executed" in header, header


def known_topology():
    data = {p: [[i] for i in range(100)] for p in ("a", "b")}
    b = TopologyBuilder()
    b.set_spout("numbers", MemorySource(data, Fields("i"), records_per_range=25))
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("numbers")
    return b.create_topology()


@pytest.mark.runners("local", "spark")
def test_start_up_is_reported_apart_from_complete_latency(runner):
    snapshots: list[MetricsSnapshot] = []
    run(known_topology(), {"squall.spark.batch.max.tuples": 50}, runner=runner,
        on_progress=snapshots.append, progress_every_ms=100)
    last = snapshots[-1]
    numbers = last.components["numbers"]
    assert (numbers.emitted, numbers.acked) == (200, 200)
    if runner == "local":
        assert last.startup == {} and numbers.complete_latency is not None
        assert numbers.complete_latency.count == 200
        return
    # The first micro-batch starts the Python workers: its trees are acked, counted in
    # `startup["tuples"]`, and left out of the complete latency, which counts the others.
    waited = last.startup["tuples"]
    assert 0 < waited < 200
    lat = numbers.complete_latency
    assert lat is not None and lat.count == 200 - waited
    assert f"{waited} tuples waited for it" in summary(last)
    # Every batch reports the tuples its bolts executed, summing to the bolts' executed.
    assert sum(b.executed or 0 for b in last.batches) == last.components["sink"].executed


@pytest.mark.runners("local", "spark")
def test_a_resumed_run_counts_from_zero_and_gives_rates(runner, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    conf = {"squall.spark.batch.max.tuples": 100, "topology.state.provider": "durable",
            "topology.state.provider.config": {"dir": str(tmp_path / "state")}}
    first: list[MetricsSnapshot] = []
    run(stateful_topology(source=True), conf, runner=runner, checkpoint_location=ckpt,
        on_progress=first.append)
    assert first[-1].components["count"].executed == WORDS and not first[-1].restarted
    again: list[MetricsSnapshot] = []
    run(stateful_topology(source=True), conf, runner=runner, checkpoint_location=ckpt,
        on_progress=again.append)
    last = again[-1]
    # Nothing left to read: this run's counters start from zero, as documented, so its rates
    # are its own and the summary gives them.
    assert last.restarted
    assert last.components["count"].executed == 0 and last.components["words"].emitted == 0
    text = summary(last)
    assert "no rates" not in text and "resumed from a checkpoint" in text
    assert "executed=0 (0.0/s)" in text, text
