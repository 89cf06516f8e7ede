"""The windowed-operator examples do what their docstrings say, checked against direct
computations from the same generated input."""

from __future__ import annotations

import pytest
from support.examples import load_example

from squall.testing import complete_topology


def final_panes(result, component):
    last = {}
    for key, start, end, value, _timing, _index, retraction in result.tuples(component):
        if not retraction:
            last[(key, start, end)] = value
    return last


def test_user_spend_totals_per_sliding_window(capsys):
    ex = load_example("user_spend")
    topology, conf = ex.topology()
    conf["spend.events"] = 1500
    result = complete_topology(topology, conf)
    rows = ex.generate(1500)
    dropped = [late[:3] for late in result.tuples("spend", "late")]  # user, amount, ts
    assert 0 < len(dropped) < 75
    kept = [r for r in rows if r not in dropped]
    expected: dict = {}
    for user, amount, ts in kept:
        last = ts - ts % 120_000
        for start in range(last - 480_000, last + 1, 120_000):
            key = (user, start, start + 600_000)
            expected[key] = expected.get(key, 0) + amount
    assert final_panes(result, "spend") == expected
    timings = {t for *_, t, _i, _r in result.tuples("spend")}
    assert {"ON_TIME", "LATE"} <= timings
    assert result.stats["purchases"].acked == 1500 and result.errors == []
    assert "dropped late purchases" in capsys.readouterr().out


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_user_sessions_retractions_leave_exactly_the_sessions(request, runner, capsys):
    if runner == "spark":
        request.getfixturevalue("spark_session")
    ex = load_example("user_sessions")
    topology, conf = ex.topology()
    n = 1500 if runner == "local" else 300
    conf["sessions.events"] = n
    result = complete_topology(topology, conf, runner=runner)
    table: dict = {}
    retractions = 0
    for key, start, end, value, _timing, _index, retraction in result.tuples("sessions"):
        if retraction:
            retractions += 1
            assert table.pop((key, start, end)) == -value  # takes back exactly the last pane
        else:
            table[(key, start, end)] = value
    assert table == ex.sessionize(ex.generate(n))
    assert retractions > 0
    assert result.errors == []
    if runner == "local":
        assert capsys.readouterr().out.startswith(f"{len(table)} sessions, {n} views")


def test_orders_payments_join_in_windows():
    ex = load_example("orders_payments")
    topology, conf = ex.topology()
    result = complete_topology(topology, conf)
    orders, payments = ex.generate(300)
    w = ex.WINDOW_MS
    paid = {(o, ts - ts % w): amount for o, amount, ts in payments}
    expected = {}
    for order, user, total, ts in orders:
        start = ts - ts % w
        amount = paid.get((order, start))
        expected[order] = [] if amount is None else [[[user, total], amount]]
    got = {k: v for (k, _s, _e), v in final_panes(result, "join").items() if k in expected}
    assert got == expected
    assert sum(1 for v in expected.values() if v) > 200
    assert sum(1 for v in expected.values() if not v) > 20
