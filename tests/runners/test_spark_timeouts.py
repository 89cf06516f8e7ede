"""Message timeouts on Spark never replay work that has committed.

A tree's timeout starts when the micro-batch that started it commits: the time a batch takes,
however slow, and the time a killed batch waits to be replayed never count. The end-to-end case
reproduces the state a SIGKILL leaves when it lands after the spout reader planned a segment and
before Spark logged the batch's offsets: the restarted query plans that segment again, and with
the old rule its ranges had timed out meanwhile, were planned a second time and read twice in the
same committed batch (duplicates in the sink, double counts in the state).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from support.bolts import RunningCount

from squall import Config, Fields, TopologyBuilder
from squall.components.partitioned_source import Range
from squall.connectors.sinks import JsonLinesSink, read_jsonl
from squall.connectors.sources import JsonLinesSource
from squall.runtime.spark import spouts
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.ranges import RangePartition
from squall.runtime.spark.spouts import SpoutReader

pytestmark = pytest.mark.spark

FILES, PER_FILE, KEYS = 4, 50, 3


def write_input(directory: Path) -> None:
    directory.mkdir()
    i = 0
    for f in range(FILES):
        with open(directory / f"f{f}.jsonl", "w") as out:
            for _ in range(PER_FILE):
                out.write(json.dumps({"id": i, "key": i % KEYS}) + "\n")
                i += 1


def pipeline(tmp_path: Path, timeout_s: float):
    write_input(tmp_path / "in")
    b = TopologyBuilder()
    b.set_spout("src", JsonLinesSource(str(tmp_path / "in"), ["id", "key"], bounded=True), 2)
    b.set_bolt("count", RunningCount(), 2).fields_grouping("src", Fields("key"))
    b.set_bolt("sink", JsonLinesSink(str(tmp_path / "out")), 2).shuffle_grouping("count")
    conf = Config()
    conf["topology.state.provider"] = "durable"
    conf["topology.message.timeout.secs"] = timeout_s
    return b.create_topology(), conf


def planned_ranges(reader: SpoutReader, start: int, end: dict) -> list[Range]:
    return [p.range for p in reader.partitions({"seg": start}, end)
            if isinstance(p, RangePartition)]


def test_a_segment_planned_before_a_kill_is_not_timed_out_by_the_restart(
        tmp_path, spark_session, caplog):
    topology, conf = pipeline(tmp_path, timeout_s=1)
    ckpt = tmp_path / "ckpt"
    SparkRunner(topology, conf, checkpoint_location=str(ckpt), session=spark_session)
    # The reader plans segment 0 and snapshots the spouts; the process dies before Spark logs
    # the batch's offsets (nothing of the query's own checkpoint exists yet).
    first = SpoutReader({"dir": str(ckpt)})
    end = first.latestOffset({"seg": -1})
    assert end == {"seg": 0}
    planned = planned_ranges(first, -1, end)
    assert planned != []
    time.sleep(1.5)  # the restart takes longer than the message timeout

    with caplog.at_level("INFO", logger="squall"):
        runner = SparkRunner(topology, conf, checkpoint_location=str(ckpt),
                             session=spark_session)
    # The restart says, in one line, what it resumes from.
    notes = [r.getMessage() for r in caplog.records if "resuming from" in r.getMessage()]
    assert notes == [f"resuming from {ckpt}: no batch committed; {len(planned)} tuple trees "
                     "pending"]
    result = runner.run(duration_ms=240_000)

    ids = Counter(r["id"] for r in read_jsonl(tmp_path / "out"))
    assert [i for i, n in ids.items() if n > 1] == []
    assert sorted(ids) == list(range(FILES * PER_FILE))
    assert result.stats["src"].timed_out == 0
    true = Counter(i % KEYS for i in range(FILES * PER_FILE))
    # The count each record carries is its key's running count: the last one is the total.
    last = {}
    for r in read_jsonl(tmp_path / "out"):
        last[r["key"]] = max(last.get(r["key"], 0), r["n"])
    assert last == dict(true)


def test_timeouts_start_when_the_batch_commits(tmp_path, spark_session, monkeypatch):
    topology, conf = pipeline(tmp_path, timeout_s=5)
    ckpt = tmp_path / "ckpt"
    SparkRunner(topology, conf, checkpoint_location=str(ckpt), session=spark_session)
    now = [1_000]
    monkeypatch.setattr(spouts, "wall_ms", lambda: now[0])
    reader = SpoutReader({"dir": str(ckpt)})
    end = reader.latestOffset({"seg": -1})
    planned = planned_ranges(reader, -1, end)
    pending = sum(len(t.pending) for t in reader.tasks.values())
    assert pending == len(planned) > 0

    # The batch took a minute; it committed, but no outcome came for its trees (a bolt holds
    # their tuples): their clocks start now.
    now[0] = 61_000
    end = reader.latestOffset(end)
    assert sum(t.stats.timed_out for t in reader.tasks.values()) == 0
    assert sum(len(t.pending) for t in reader.tasks.values()) == pending
    # Storm's timeout still holds for trees pending after their batch committed.
    now[0] = 61_000 + 5_000
    reader.latestOffset(end)
    assert sum(t.stats.timed_out for t in reader.tasks.values()) == pending

