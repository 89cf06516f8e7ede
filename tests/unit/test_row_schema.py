"""The Spark runner's packets: emission order, streams and times survive the wire exactly.

A packet holds a header `(stream, ts, None)` per run of tuples and bare values lists (or
`(values, anchors)`) per tuple; these tests drive `row_schema.Packets` the way the collectors
and hosts do and decode the rows the way a stage does, including packets split at `PACKET_MAX`.
"""

from __future__ import annotations

import pytest

from squall import TopologyBuilder
from squall.runtime.spark import row_schema
from squall.runtime.spark.batch_rows import decode_batch
from squall.runtime.spark.stage import StageHost, StagePlan
from squall.testing import FixedTupleSpout
from squall.topology.fields import Fields
from squall.topology.tuple import Origin, _RuntimeTuple
from squall.transaction_kernel.attempt import TransactionAttempt
from squall.transaction_kernel.reports import BatchReport


def origin(task: int, stream: str) -> Origin:
    return Origin(Fields("x"), "c", stream, task)


def decoded(rows: list[tuple]) -> dict[tuple[int, int], list[tuple]]:
    """Per (source, target): the (stream, ts, values, anchors) of every tuple, in row order."""
    out: dict[tuple[int, int], list[tuple]] = {}
    for row in sorted(rows, key=lambda r: (r[1], r[4], r[10])):  # a stage's (task, src, seq)
        assert row[0] == row_schema.PACKET
        items = row_schema.decode_values(row[5])
        assert len(items[0]) == 3, "every packet starts with a header"
        assert row[9] == items[0][1], "the row's ts is its first header's"
        stream = ts = None
        for item in items:
            if item.__class__ is list:
                out.setdefault((row[4], row[1]), []).append((stream, ts, item, None))
            elif len(item) == 2:
                out.setdefault((row[4], row[1]), []).append((stream, ts, item[0], item[1]))
            else:
                stream, ts = item[0], item[1]
    return out


def emit(packets: row_schema.Packets, o: Origin, target: int, values: list) -> None:
    """What the collectors' unanchored path does (collectors.host_channels)."""
    items = packets.open.get((o, target))
    if items is None:
        items = packets.channel(o, target)
    items.append(values)


@pytest.mark.parametrize("packet_max", [row_schema.PACKET_MAX, 1, 2, 3])
def test_interleaved_streams_times_and_anchors_keep_their_order(monkeypatch, packet_max):
    monkeypatch.setattr(row_schema, "PACKET_MAX", packet_max)
    seq = iter(range(1, 1000))
    packets = row_schema.Packets({7: 70, 8: 80}, seq.__next__)
    a, b, other = origin(1, "a"), origin(1, "b"), origin(2, "a")
    packets.set_now(100)
    expected: dict[tuple[int, int], list[tuple]] = {}

    def sent(o: Origin, target: int, values: list, anchors=None) -> None:
        ts = packets.now
        if anchors is None:
            emit(packets, o, target, values)
        else:
            packets.send(target, _RuntimeTuple(values, o, anchors, target))
        expected.setdefault((o.task, target), []).append((o.stream, ts, values, anchors))

    sent(a, 7, [1])
    sent(a, 7, [2])
    sent(b, 7, [3])  # another stream of the same task to the same target: a new header
    sent(a, 7, [4])  # and back
    sent(a, 8, [5])
    sent(other, 7, [6])
    sent(a, 7, [7], {11: 12})
    packets.set_now(200)  # a new processing time: every pair gets a new header
    sent(a, 7, [8])
    sent(b, 8, [9], {13: 14})
    sent(a, 8, [10])
    packets.set_now(200)  # the same time again: nothing changes
    sent(a, 7, [11])
    rows = packets.rows()
    assert decoded(rows) == expected
    assert {r[2] for r in rows if r[1] == 7} == {70} and {r[2] for r in rows if r[1] == 8} == {80}
    assert not packets.pairs and not packets.open, "rows() empties the buffer"


def test_a_second_round_after_rows_starts_with_new_headers():
    seq = iter(range(1, 1000))
    packets = row_schema.Packets({7: 70}, seq.__next__)
    a = origin(1, "a")
    packets.set_now(5)
    emit(packets, a, 7, ["x"])
    first = packets.rows()
    emit(packets, a, 7, ["y"])
    second = packets.rows()
    assert decoded(first) == {(1, 7): [("a", 5, ["x"], None)]}
    assert decoded(second) == {(1, 7): [("a", 5, ["y"], None)]}
    assert second[0][10] > first[0][10], "later packets of a pair sort after earlier ones"


@pytest.mark.parametrize("packet_max", [row_schema.PACKET_MAX, 4])
def test_a_packet_encodes_its_items_as_objects_it_alone_holds(monkeypatch, packet_max):
    # marshal enters an object referenced more than once in its table of shared objects (and
    # flags it, the type byte | 0x80): an item held by the pair's list and by a copy of a slice
    # of it cost 1.5-3 times as much to encode. A packet's rows are the same either way.
    monkeypatch.setattr(row_schema, "PACKET_MAX", packet_max)
    packets = row_schema.Packets({7: 70}, iter(range(1, 99)).__next__)
    a = origin(1, "a")
    for n in range(10):
        emit(packets, a, 7, [str(n) * 3])  # a list and a string made here, held by the packet
    rows = packets.rows()
    assert len(rows) == (1 if packet_max > 10 else 3)
    assert decoded(rows) == {(1, 7): [("a", 0, [str(n) * 3], None) for n in range(10)]}
    for row in rows:
        assert row[5][:1] == b"M"
        shared_lists = row[5].count(bytes([ord("[") | 0x80, 1, 0, 0, 0]))
        assert shared_lists == 0, "an item list was encoded as a shared object"


def test_tuple_values_travel_as_lists():
    packets = row_schema.Packets({7: 70}, iter(range(1, 9)).__next__)
    a = origin(1, "a")
    packets.send(7, _RuntimeTuple(("t", 1), a, None, 7))
    assert decoded(packets.rows()) == {(1, 7): [("a", 0, ["t", 1], None)]}


def test_batch_reports_travel_in_their_own_row_kind_not_as_errors():
    b = TopologyBuilder()
    b.set_spout("s", FixedTupleSpout([[1]], Fields("n")))
    topology = b.create_topology()
    plan = StagePlan(run_id="r", topology=topology, conf={}, component="", batch_id=1,
                     committed=0, state_dir="", keys={}, seed=0, tracking=False, capture=False,
                     checkpoint_id="c")
    out = row_schema.RowBuffer()
    host = StageHost(plan, out)
    attempt = TransactionAttempt(1, 2)
    host.report_error("s", 1, BatchReport(attempt, 1, False, "store down"))
    host.report_error("s", 1, ValueError("a real error"))
    assert [row[0] for row in out.rows] == [row_schema.REPORT, row_schema.ERROR]
    rows = decode_batch(out.to_batch().to_pydict(), topology)
    assert [(r.attempt, r.task, r.finished, r.cause) for r in rows.reports] == [
        (attempt, 1, False, "store down")]
    assert [str(e.error) for e in rows.errors] == ["a real error"]
