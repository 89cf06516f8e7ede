"""Checks the word count against a plain-Python count of the same sentences.

    python examples/check_wordcount.py            # the local runner, a second or two
    python examples/check_wordcount.py spark      # Spark in local mode

It runs `wordcount.py`'s topology to completion with `squall.testing.complete_topology`, takes
the last count `count` emitted for each word, and compares them with `collections.Counter` over
the sentences the spout emits (the same seed). It also checks that every sentence's tuple tree
completed (acked, none failed) and that no task reported an error.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from wordcount import SENTENCES, topology

from squall.testing import complete_topology

N = 2000


def main(runner: str = "local") -> None:
    topo, conf = topology()
    conf["wordcount.sentences"] = N
    result = complete_topology(topo, conf, runner=runner)

    rnd = random.Random(0)  # the spout's seed (squall.random.seed, default 0)
    expected = Counter(w for _ in range(N) for w in rnd.choice(SENTENCES).split())
    final: dict[str, int] = {}
    for word, count in result.tuples("count"):
        final[word] = max(final.get(word, 0), count)

    assert final == dict(expected), "the counts differ from a plain count"
    assert result.stats["sentences"].acked == N and result.stats["sentences"].failed == 0
    assert result.errors == []
    print(f"OK: {sum(final.values())} words, {len(final)} distinct, "
          f"{result.stats['sentences'].acked} sentences acked, on the {runner} runner")


if __name__ == "__main__":
    main(*sys.argv[1:])
