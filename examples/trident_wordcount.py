"""Storm's TridentWordCount: persistent word counts, and a query stream that reads them.

    squall run examples/trident_wordcount.py:topology --runner local
    squall run examples/trident_wordcount.py:topology --checkpoint /tmp/twc
    python examples/trident_wordcount.py [local|spark]

`spout1` emits Storm's five sentences in batches of three (`cycle=False`, so the run ends);
each batch is split into words and its counts are added to `word-counts`, a transactional
durable map state (partitioned stores under the checkpoint location), exactly once per batch even
when a batch is replayed. Storm asks its DRPC stream "cat the dog jumped" again and again; here
the `queries` stream asks it once per batch: the words' counts are read from the state
(`MapGet`, as of the batch before), unknown words dropped (`FilterNull`) and the counts summed,
and each batch's sum is printed as `trident_wordcount: 'cat the dog jumped' -> N`.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter

from squall import Config
from squall.trident import (
    Consumer,
    Count,
    FilterNull,
    FixedBatchSpout,
    Function,
    MapGet,
    Sum,
    TridentTopology,
)
from squall.trident.state import DurableMapState, StateType

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]
BATCH_SIZE = 3
QUERY = "cat the dog jumped"
QUERY_BATCHES = 3  # the last sees every sentence
STATE = "word-counts"


class Split(Function):
    """A word per space-separated token of the sentence (Storm's `Split`)."""

    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


class PrintSum(Consumer):
    def accept(self, tup):
        print(f"trident_wordcount: {QUERY!r} -> {tup['sum']}", flush=True)


def build() -> TridentTopology:
    t = TridentTopology()
    spout = FixedBatchSpout(["sentence"], BATCH_SIZE, *[[s] for s in SENTENCES], cycle=False)
    counts = (t.new_stream("spout1", spout)
              .each(["sentence"], Split(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(DurableMapState.factory(StateType.TRANSACTIONAL), Count(),
                                    ["count"])
              .name(STATE))
    (t.new_stream("queries", FixedBatchSpout(["args"], 1, *[[QUERY]] * QUERY_BATCHES))
     .each(["args"], Split(), ["word"])
     .partition_by(["word"])  # Storm's groupBy(word).stateQuery(...) partitions by the word
     .state_query(counts, ["word"], MapGet(), ["count"])
     .each(["count"], FilterNull())
     .aggregate(["count"], Sum(), ["sum"]).name("sum")
     .peek(PrintSum()).name("print"))
    return t


def topology():
    return build().build(), Config()


def expected_lines() -> list[str]:
    """What the run prints, computed without squall: batch `b`'s query sees the counts of the
    sentence batches before it."""
    lines = []
    for b in range(1, QUERY_BATCHES + 1):
        counts = Counter(w for s in SENTENCES[:(b - 1) * BATCH_SIZE] for w in s.split(" "))
        lines.append(f"trident_wordcount: {QUERY!r} -> {sum(counts[w] for w in QUERY.split())}")
    return lines


def main(runner: str = "local") -> None:
    import squall  # noqa: PLC0415

    checkpoint = tempfile.mkdtemp(prefix="squall-twc-")
    top, conf = topology()
    squall.run(top, conf, runner=runner, checkpoint_location=checkpoint)
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state(STATE, checkpoint)
    counts = {key[0]: n for key, n in state.items()}
    state.close()
    assert counts == Counter(w for s in SENTENCES for w in s.split(" ")), counts
    top_words = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print("trident_wordcount: top words " + ", ".join(f"{w}={n}" for w, n in top_words))


if __name__ == "__main__":
    main(*sys.argv[1:2])
