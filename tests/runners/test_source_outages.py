"""A store that fails while a source plans or reads, on both runners: nothing is lost.

`FlakySource` is an in-memory `PartitionedSource` whose store "goes down" on a schedule: the end of
partition `p1` cannot be listed on some plans (after `p0`'s new range, and the failed ranges waiting
to be read again, were already taken by that plan), and one range fails halfway through its read.
The schedule lives in files, because on Spark the plans run in the spout reader's process and the
reads on executors. Found by the Kafka broker-restart test on Spark (a plan whose end-offset fetch
timed out lost the ranges it had taken); this shows the same without a broker, on a schedule.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from squall import BasicBolt, Fields, TopologyBuilder, Values
from squall.components.partitioned_source import PartitionedSource
from squall.connectors import Range, SourceError
from squall.testing import complete_topology

DATA = {"p0": [[f"p0-{i}"] for i in range(12)], "p1": [[f"p1-{i}"] for i in range(12)]}


def _count(directory: str, name: str) -> int:
    """How many times `name` was counted, this call included (any process)."""
    with open(os.path.join(directory, name), "ab") as f:
        f.write(b".")
        return f.tell()


def _first_time(directory: str, name: str) -> bool:
    try:
        with open(os.path.join(directory, name), "x"):
            return True
    except FileExistsError:
        return False


class FlakySource(PartitionedSource):
    """`DATA`, `per_range` records per range; `end_offset("p1")` fails on the calls numbered in
    `failing_ends`; the read of `failing_read` (partition, offset) fails the first time, after the
    records before it were read."""

    def __init__(self, directory: str, *, failing_ends: tuple[int, ...] = (),
                 failing_read: tuple[str, int] | None = None, per_range: int = 2,
                 bounded: bool = False) -> None:
        super().__init__(Fields("item"), bounded=bounded)
        self.directory = directory
        self.failing_ends = failing_ends
        self.failing_read = failing_read
        self.per_range = per_range

    def discover(self) -> list[str]:
        return sorted(DATA)

    def initial_offset(self, partition: str) -> int:
        return 0

    def end_offset(self, partition: str, start: Any) -> int:
        if partition == "p1" and _count(self.directory, "ends-p1") in self.failing_ends:
            raise SourceError(f"source {self.component!r}: cannot list the end of {partition} "
                              "(the store is down)", component=self.component)
        return len(DATA[partition])

    def cut(self, partition: str, start: Any, end: Any, budget: int) -> int:
        return min(end, start + self.per_range)

    def estimate(self, r: Range) -> int:
        return r.end - r.start

    def read(self, partition: str, start: Any, end: Any):
        for offset in range(start, end):
            if ((partition, offset) == self.failing_read
                    and _first_time(self.directory, f"read-{partition}-{offset}")):
                raise SourceError(f"source {self.component!r}: cannot read {partition} at "
                                  f"{offset} (the store is down)", component=self.component)
            yield offset, list(DATA[partition][offset])

    def is_exhausted(self) -> bool:
        # Unbounded (every plan lists the ends again), done once every record was handed out.
        if self._replay_ranges or self._replay_records or self._buffer:
            return False
        return all(self._offsets.get(p, 0) >= len(rows) for p, rows in DATA.items())


class Collect(BasicBolt):
    def execute(self, tup, collector):
        collector.emit(Values(tup["item"]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("item"))


def test_a_plan_that_fails_takes_nothing(tmp_path: Path) -> None:
    source = FlakySource(str(tmp_path), failing_ends=(2,))
    assert source.plan(100) == [Range("p0", 0, 2), Range("p1", 0, 2)]
    source.fail(Range("p1", 0, 2))  # waits to be read again
    with pytest.raises(SourceError, match="cannot list the end of p1"):
        source.plan(100)  # takes the failed range and p0's next one, then p1's end fails
    # Nothing moved: the same ranges, the failed one first.
    assert source.plan(100) == [Range("p1", 0, 2), Range("p0", 2, 4), Range("p1", 2, 4)]


def test_a_bounded_plan_that_fails_keeps_no_partial_bounds(tmp_path: Path) -> None:
    source = FlakySource(str(tmp_path), failing_ends=(1,), bounded=True, per_range=12)
    with pytest.raises(SourceError, match="cannot list the end of p1"):
        source.plan(100)
    # The bounds are taken again, for both partitions: p1 is not left out.
    assert source.plan(100) == [Range("p0", 0, 12), Range("p1", 0, 12)]
    assert source.is_read_out()


def test_store_outages_while_planning_and_reading_lose_nothing(runner, tmp_path: Path) -> None:
    # Plans 2 and 4 fail at p1's end, after taking p0's next range (and, by then on plan 4, the
    # failed range [2, 4) of p0, whose read failed at offset 3 with offset 2 already read).
    b = TopologyBuilder()
    b.set_spout("items", FlakySource(str(tmp_path), failing_ends=(2, 4), failing_read=("p0", 3)))
    b.set_bolt("collect", Collect()).shuffle_grouping("items")
    result = complete_topology(b.create_topology(), runner=runner)
    got = Counter(item for (item,) in result.tuples("collect"))
    expected = Counter(row[0] for rows in DATA.values() for row in rows)
    # Every record once: a failed plan takes nothing, and a range read halfway is dropped and
    # read again whole (on Spark the attempt's rows are dropped with the range's tree failed).
    assert got == expected
    messages = [str(e.error) for e in result.errors]
    assert all(e.component == "items" for e in result.errors), messages
    assert any("cannot list the end of p1" in m for m in messages), messages
    assert any("cannot read p0 at 3" in m for m in messages), messages
