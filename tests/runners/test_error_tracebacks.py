"""A user's error shows the user's own frames (file, line, code) once per distinct error, and
the full traceback goes to the `squall.traceback` logger (the run's log file), on both runners.

The topology is loaded from a file, as `squall run FILE:ATTR` does: its classes travel by value,
which rebuilds their code under the name `<dynamic-code>`, and on Spark the error is pickled from
a Python worker to the driver, which loses its traceback.
"""

from __future__ import annotations

import logging
import textwrap

import pytest

from squall.cli.target import load_target
from squall.results import TRACEBACK_LOGGER
from squall.testing import complete_topology

TOPOLOGY = textwrap.dedent('''\
    from squall import BasicBolt, Fields, TopologyBuilder, Values
    from squall.testing import FixedTupleSpout


    def check(n):
        if n % 10 == 3:
            raise ValueError(f"I don't like {n}")
        return n


    class Fussy(BasicBolt):
        def execute(self, tup, collector):
            collector.emit(Values(check(tup.values[0])))

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("n"))


    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[n] for n in range(20)], Fields("n")))
    b.set_bolt("fussy", Fussy(), 2).shuffle_grouping("numbers")
    topology = b.create_topology()
    ''')
RAISE_LINE = 7   # raise ValueError(...)
CALL_LINE = 13   # collector.emit(Values(check(...)))


@pytest.mark.runners("local", "spark")
def test_the_users_frames_are_shown_once_per_distinct_error(runner, tmp_path, caplog):
    path = tmp_path / "fussy_job.py"
    path.write_text(TOPOLOGY)
    topology, _ = load_target(f"{path}:topology")
    with caplog.at_level(logging.DEBUG, logger="squall"):
        result = complete_topology(topology, {}, runner=runner, max_time_ms=120_000)
    assert sorted(str(e.error) for e in result.errors) == ["I don't like 13", "I don't like 3"]

    shown = [r.getMessage() for r in caplog.records
             if r.name == "squall" and "ValueError: I don't like" in r.getMessage()]
    assert len(shown) == 2
    traced = [m for m in shown if "\n" in m]
    assert len(traced) == 1, "the frames once: both errors come from the same line"
    assert traced[0].splitlines()[1:] == [
        f'  File "{path}", line {CALL_LINE}, in execute',
        "    collector.emit(Values(check(tup.values[0])))",
        f'  File "{path}", line {RAISE_LINE}, in check',
        '    raise ValueError(f"I don\'t like {n}")',
    ]
    assert "<dynamic-code>" not in traced[0]

    full = [r.getMessage() for r in caplog.records if r.name == TRACEBACK_LOGGER]
    assert len(full) == 1 and full[0].startswith("[fussy:")
    lines = full[0].splitlines()
    assert lines[1] == "Traceback (most recent call last):"
    assert any("squall" in line and "tasks.py" in line for line in lines), "squall's frames too"
    assert f'  File "{path}", line {RAISE_LINE}, in check' in lines
    assert lines[-1].startswith("ValueError: I don't like ")
