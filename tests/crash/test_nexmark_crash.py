"""Two stateful NEXMark queries on Spark through `squall run --checkpoint`, SIGKILLed and restarted:
q8 (monitor new users: people and auctions joined per 10 s fixed window) and q11 (user sessions:
the bids per bidder in session windows).

Each query reads two Parquet partition files of the query tests' stream (out-of-order groups of
20 and 5 % delayed events, `support.nexmark`) in micro-batches of 400 events, and writes its
panes with `nexmark.output` (a `JsonLinesSink`, one file per batch). The run is started as a user
starts it, in a process group of its own, and SIGKILLed with its JVM and Python workers twice:

1. once batch 2 has committed and a later batch is half done (a task has written its snapshot
   of a batch the driver has not committed), so the restart runs that batch again;
2. once three more batches have committed since the first kill and a committed batch has
   written panes (the first windows closed), between or in batches.

The third start runs to the end on the same checkpoint. Each kill must land mid-stream (the
finished run commits later batches than the kill had seen), and the panes written must be
exactly the reference's (`squall.nexmark.reference`) in its canonical form, late events counted
and expired ones dropped as the query's event time states, with no pane written twice.

In the default run the windowed operators' SIGKILL on Spark is `test_windows_crash.py` and the
queries' exactness on Spark is `tests/runners/test_nexmark_queries.py`; these end-to-end kills of
the queries (about a minute each on 2 cores) run in `-m extended`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.crash import Restarts, half_done_batch
from support.examples import ROOT
from support.nexmark import PARTITIONS, config

from squall.connectors.sinks import read_jsonl
from squall.nexmark import GeneratorConfig, write_parquet
from squall.nexmark.generator import events
from squall.nexmark.queries.results import canonical
from squall.nexmark.reference import LATE, QUERIES, EventTime, judge
from squall.nexmark.reference.lateness import fixed

pytestmark = [pytest.mark.spark, pytest.mark.extended]

EVENTS = 4_000
BATCH = 400  # squall.spark.batch.max.tuples: 10 micro-batches of input
WATERMARK_DELAY_MS = 100


def _committed(ckpt: Path) -> int:
    """The last batch the run at `ckpt` committed (-1 before its first)."""
    commit = ckpt / "commit.pkl"
    return pickle.loads(commit.read_bytes())["batch_id"] if commit.exists() else -1


def _written(out: Path, ckpt: Path) -> int:
    """How many of the sink's batch files (`part-b<batch>-t<task>.jsonl`) belong to batches the
    run at `ckpt` has committed."""
    committed = _committed(ckpt)
    return sum(int(p.name[6:18]) <= committed for p in out.glob("part-b*-t*.jsonl"))


def _command(query: str, tmp: Path, lateness_ms: int) -> list[str]:
    return [sys.executable, "-m", "squall.cli.main", "run", f"squall.nexmark.queries:{query}",
            "--master", "local[2]", "--checkpoint", str(tmp / "ckpt"), "--progress-every", "0",
            "-c", "nexmark.source=parquet", "-c", f"nexmark.path={tmp / 'events'}",
            "-c", f"nexmark.output={tmp / 'out'}",
            "-c", f"nexmark.watermark.delay.ms={WATERMARK_DELAY_MS}",
            "-c", f"nexmark.allowed.lateness.ms={lateness_ms}",
            "-c", f"squall.spark.batch.max.tuples={BATCH}",
            "-c", "spark.sql.shuffle.partitions=2"]


def _kill_twice_then_finish(query: str, tmp: Path, generator: GeneratorConfig,
                            lateness_ms: int) -> list[list]:
    """Run `query` over `generator`'s stream, SIGKILLed twice (module doc), to the end; the rows
    its sink wrote, in batch order."""
    write_parquet(generator, str(tmp / "events"), partitions=PARTITIONS)
    ckpt, out = tmp / "ckpt", tmp / "out" / query
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    with Restarts(tmp, _command(query, tmp, lateness_ms), env=env, cwd=ROOT) as crash:
        first = crash.start()
        assert crash.kill_when(first, lambda: _committed(ckpt) >= 2 and half_done_batch(ckpt),
                               timeout_s=180), crash.output()
        first_kill = _committed(ckpt)
        second = crash.start()
        assert crash.kill_when(second, lambda: (_committed(ckpt) >= first_kill + 3
                                                and _written(out, ckpt) > 0),
                               timeout_s=180), crash.output()
        second_kill = _committed(ckpt)
        third = crash.start()
        assert crash.finish(third, 240) == 0, crash.output(tail=4000)
        assert "errors reported: 0" in crash.stderr(), crash.output()
    last = _committed(ckpt)
    # Both kills landed mid-stream: the run went on past what each had seen committed.
    assert first_kill < second_kill < last, (first_kill, second_kill, last)
    rows = [list(r.values()) for r in read_jsonl(out)]
    panes = Counter(tuple(r[:3]) + tuple(r[5:]) for r in rows)  # key, window, index, retraction
    assert [p for p, n in panes.items() if n > 1] == []
    return rows


def _reference(query: str, generator: GeneratorConfig, lateness_ms: int) -> list:
    stream = list(events(generator))
    expected = QUERIES[query](stream, EventTime(partitions=PARTITIONS,
                                                watermark_delay_ms=WATERMARK_DELAY_MS,
                                                allowed_lateness_ms=lateness_ms))
    assert len(expected) > 10
    return expected


def test_q8_windowed_join_killed_twice_gives_exactly_the_reference(tmp_path):
    """People and auctions joined per window: late auctions counted in late panes, expired ones
    dropped (2 s of allowed lateness)."""
    generator = config(EVENTS)
    time = EventTime(partitions=PARTITIONS, watermark_delay_ms=WATERMARK_DELAY_MS,
                     allowed_lateness_ms=2_000)
    statuses = Counter(s for *_, s in judge(list(events(generator)), time, fixed(10_000)))
    assert statuses[LATE] >= 10  # the stream has late events for the query to count
    rows = _kill_twice_then_finish("q8", tmp_path, generator, 2_000)
    assert any(timing == "LATE" for *_, timing, _, _ in rows)  # a late pane was written
    assert canonical("q8", rows) == _reference("q8", generator, 2_000)


def test_q11_sessions_killed_twice_give_exactly_the_reference(tmp_path):
    """Bids per bidder in sessions of a 10 s gap, one event every 50 ms so that sessions close
    (and are written) all through the stream; the allowed lateness is above the stream's
    out-of-orderness, as q11's definition asks (a bid that reaches an expired session is
    refused)."""
    generator = dataclasses.replace(config(EVENTS), first_event_rate=2_000)
    lateness = generator.out_of_orderness_ms + 1
    rows = _kill_twice_then_finish("q11", tmp_path, generator, lateness)
    assert canonical("q11", rows) == _reference("q11", generator, lateness)
