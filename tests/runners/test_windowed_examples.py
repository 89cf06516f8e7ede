"""The windowing examples do what their docstrings say, checked against direct computations."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from support.examples import load_example

from squall.testing import complete_topology


def test_sliding_window_sums_and_averages(capsys):
    ex = load_example("sliding_window")
    topology, conf = ex.topology()
    conf["sliding.count"] = 300
    result = complete_topology(topology, conf)
    rnd = random.Random(0)
    values = [rnd.randrange(1000) for _ in range(300)]
    sums = [sum(values[max(0, k - 30):k]) for k in range(10, 301, 10)]
    avgs = [sum(sums[i:i + 3]) / 3 for i in range(0, len(sums), 3)]
    assert result.tuples("slidingsum") == [[s] for s in sums]
    assert result.tuples("tumblingavg") == [[a] for a in avgs]
    assert result.stats["integers"].acked == 300 and result.stats["integers"].failed == 0
    assert result.errors == []
    out = capsys.readouterr().out
    assert out.splitlines() == [f"avg of sums: {a:.2f}" for a in avgs]


def expected_rankings(n: int, top: int = 3) -> list[list]:
    ex = load_example("trending_words")
    rows = ex.generate(n)
    first = -(-min(ts for _w, ts in rows) // 10_000) * 10_000
    last = -(-max(ts for _w, ts in rows) // 10_000) * 10_000
    out = []
    for end in range(first, last + 30_000, 10_000):
        counts = Counter(w for w, ts in rows if end - 30_000 < ts <= end)
        if counts:
            ranking = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
            out.append([end, [list(kv) for kv in ranking]])
    return out


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_trending_words_ranks_each_event_time_window(request, runner, capsys):
    if runner == "spark":
        request.getfixturevalue("spark_session")
    ex = load_example("trending_words")
    topology, conf = ex.topology()
    conf["trending.words"] = 600 if runner == "local" else 200
    result = complete_topology(topology, conf, runner=runner)
    expected = expected_rankings(conf["trending.words"])
    assert len(expected) >= 5
    assert result.tuples("rolling") == expected
    assert result.stats["words"].acked == conf["trending.words"]
    assert result.errors == []
    if runner == "local":
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == len(expected) and lines[0].startswith("window ending +")
