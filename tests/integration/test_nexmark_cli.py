"""`squall run squall.nexmark.queries:qN` as a user runs it: the `-c nexmark.*` keys shape the
topology (its source and sink), and what the query writes equals its reference."""

from __future__ import annotations

import json

import pytest
from support.cli import squall

from squall.cli.target import TargetError, load_target
from squall.nexmark import (
    GeneratorConfig,
    NexmarkJsonLinesSource,
    NexmarkParquetSource,
    NexmarkSource,
)
from squall.nexmark.generator import events
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import EventTime, q7

pytestmark = pytest.mark.spread


def test_run_q7_writes_what_the_reference_gives(tmp_path):
    out = tmp_path / "out"
    proc = squall("run", "squall.nexmark.queries:q7", "--runner", "local",
                  "-c", "nexmark.events=3000", "-c", "nexmark.partitions=3",
                  "-c", "nexmark.watermark.delay.ms=0", "-c", "nexmark.allowed.lateness.ms=0",
                  "-c", f"nexmark.output={out}", "--progress-every", "0")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for path in sorted((out / "q7").iterdir())
            for line in path.read_text().splitlines()]
    expected = q7(events(GeneratorConfig(max_events=3000)), EventTime(partitions=3))
    assert len(expected) > 1
    assert canonical("q7", [list(r.values()) for r in rows]) == expected


def test_configuration_keys_choose_the_source_and_bad_ones_are_named(tmp_path):
    topology, _ = load_target("squall.nexmark.queries:q11",
                              {"nexmark.events": 500, "nexmark.partitions": 3})
    source = topology.spouts["events"].new_instance()
    assert isinstance(source, NexmarkSource)
    assert (source.config.max_events, source.partitions) == (500, 3)
    topology, _ = load_target("squall.nexmark.queries:q3",
                              {"nexmark.source": "json", "nexmark.path": str(tmp_path)})
    assert isinstance(topology.spouts["events"].new_instance(), NexmarkJsonLinesSource)
    topology, _ = load_target("squall.nexmark.queries:q3",
                              {"nexmark.source": "parquet", "nexmark.path": str(tmp_path)})
    assert isinstance(topology.spouts["events"].new_instance(), NexmarkParquetSource)
    with pytest.raises(TargetError, match=r"nexmark.path"):
        load_target("squall.nexmark.queries:q3", {"nexmark.source": "json"})
    with pytest.raises(TargetError, match=r"nexmark.events must be a positive int"):
        load_target("squall.nexmark.queries:q0", {"nexmark.events": 0})
