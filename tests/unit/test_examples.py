"""The examples do what their docstrings say, checked against independent computations."""

from __future__ import annotations

import random
from collections import Counter

from support.examples import load_example

from squall import Bolt, Fields, TopologyBuilder, Values
from squall.testing import complete_topology


def _expected_sentences(n: int, seed: int = 0) -> list[str]:
    wc = load_example("wordcount")
    rnd = random.Random(seed)
    return [rnd.choice(wc.SENTENCES) for _ in range(n)]


def test_wordcount_counts_every_word_exactly_once(capsys):
    wc = load_example("wordcount")
    topology, conf = wc.topology()
    conf["wordcount.sentences"] = 400
    result = complete_topology(topology, conf)

    expected = Counter(w for s in _expected_sentences(400) for w in s.split())
    # The last count emitted for each word is its total: every word counted exactly once.
    final: dict[str, int] = {}
    for word, count in result.tuples("count"):
        final[word] = max(final.get(word, 0), count)
    assert final == dict(expected)
    assert len(result.tuples("count")) == sum(expected.values())
    assert result.stats["sentences"].acked == 400
    assert result.stats["sentences"].failed == 0
    assert result.errors == []
    out = capsys.readouterr().out
    assert f"word count: {sum(expected.values())} words, {len(expected)} distinct" in out
    top_word, top_count = expected.most_common(1)[0]
    assert f"{top_count:>10}  {top_word}" in out


class FailFirstFive(Bolt):
    """Fails the first five tuples it receives and acks the rest."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.seen = 0

    def execute(self, tup) -> None:
        self.seen += 1
        if self.seen <= 5:
            self.collector.fail(tup)
        else:
            self.collector.emit(Values(tup["sentence"]), anchors=tup)
            self.collector.ack(tup)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("sentence"))


def test_wordcount_spout_replays_failed_sentences():
    wc = load_example("wordcount")
    builder = TopologyBuilder()
    builder.set_spout("sentences", wc.SentenceSpout())
    builder.set_bolt("gate", FailFirstFive()).shuffle_grouping("sentences")
    result = complete_topology(builder.create_topology(), {"wordcount.sentences": 40})

    spout = next(iter(result.spout_instances.values()))
    assert result.stats["sentences"].failed == 5
    assert result.stats["sentences"].acked == 40
    assert spout.replayed == 5 and spout.pending == {}
    passed = [s for (s,) in result.tuples("gate")]
    assert sorted(passed) == sorted(_expected_sentences(40))


def test_reliable_failures_processes_every_item_at_least_once(capsys):
    rf = load_example("reliable_failures")
    topology, conf = rf.topology()
    conf["failures.items"] = 300
    result = complete_topology(topology, conf)

    spout = next(iter(result.spout_instances.values()))
    assert spout.acked == set(range(300))
    # Failures were really injected, both explicit fails and timeouts, and all were replayed.
    assert result.stats["flaky"].failed > 0
    assert result.stats["items"].timed_out > 0
    assert spout.fails == result.stats["items"].failed
    assert result.stats["items"].emitted == 300 + spout.fails
    seen = {item for item, _times in result.tuples("ledger")}
    assert seen == set(range(300))
    assert "items fully processed: 300/300" in capsys.readouterr().out


def test_same_seed_same_run():
    rf = load_example("reliable_failures")
    runs = []
    for _ in range(2):
        topology, conf = rf.topology()
        conf["failures.items"] = 100
        result = complete_topology(topology, conf)
        runs.append((result.tuples("ledger"), result.stats["items"].failed, result.elapsed_ms))
    assert runs[0] == runs[1]
