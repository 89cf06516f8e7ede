"""Guaranteed message processing: the XOR ledger, the pending map, and end-to-end guarantees.

End-to-end tests run on the local engine through `complete_topology`. Spouts record every emit,
ack and fail with the simulated time at which it happened, so the tests can check not only that
a tree completed but when.
"""

from __future__ import annotations

import pickle

import pytest

from squall import (
    BasicBolt,
    Bolt,
    Config,
    FailedException,
    Fields,
    ReliabilityError,
    Spout,
    TopologyBuilder,
    Values,
)
from squall.reliability import AckerLedger, Outcome, PendingMap
from squall.reliability.acker import (
    MAX_INDEXED,
    base_root,
    plain_root,
    range_root,
    record_index,
    record_root,
)
from squall.testing import FixedTupleSpout, complete_topology, current_clock, simulated_time
from squall.topology.tuple import Tuple

# Storm's timing: a failed or timed-out tree's `fail` reaches its spout at once (squall's default
# holds it for the replay backoff, docs/design/poison-tuples.md); the tests of when fails happen
# ask for Storm's.
AT_ONCE = {"squall.retry.initial.delay.ms": 0}

# ---- AckerLedger ---------------------------------------------------------------------------


def test_ledger_completes_when_every_edge_is_acked():
    ledger = AckerLedger()
    e1, e2, e3, e4 = 0x1111, 0x2222, 0x4444, 0x8888
    assert ledger.init(root=5, xor=e1 ^ e2, spout_task=3, now_ms=100) is None
    assert 5 in ledger and len(ledger) == 1
    assert ledger.ack(5, e1 ^ e3 ^ e4, now_ms=110) is None  # e1 acked, anchored e3, e4
    assert ledger.ack(5, e3, now_ms=120) is None
    assert ledger.ack(5, e2, now_ms=130) is None  # e4 still outstanding
    assert ledger.ack(5, e4, now_ms=175) == Outcome("ack", 5, 3, 75)
    assert 5 not in ledger and len(ledger) == 0


def test_ledger_init_with_zero_xor_completes_at_once():
    ledger = AckerLedger()
    assert ledger.init(root=9, xor=0, spout_task=1, now_ms=40) == Outcome("ack", 9, 1, 0)
    assert len(ledger) == 0


def test_ledger_ack_order_does_not_matter():
    edges = [3, 5, 9, 17, 33]
    for order in (edges, edges[::-1], [9, 3, 33, 5, 17]):
        ledger = AckerLedger()
        xor = 0
        for e in edges:
            xor ^= e
        ledger.init(1, xor, 2, now_ms=0)
        outcomes = [ledger.ack(1, e, now_ms=i + 1) for i, e in enumerate(order)]
        assert outcomes[:-1] == [None] * 4
        assert outcomes[-1] == Outcome("ack", 1, 2, 5)


def test_ledger_double_ack_never_completes():
    ledger = AckerLedger()
    ledger.init(1, 0b11, 2, now_ms=0)
    assert ledger.ack(1, 0b01, now_ms=1) is None
    assert ledger.ack(1, 0b01, now_ms=2) is None  # re-XORs the same edge
    assert ledger.ack(1, 0b10, now_ms=3) is None
    assert 1 in ledger


def test_ledger_fail_then_late_ack_then_unknown_after_memory():
    ledger = AckerLedger(memory_ms=1_000)
    ledger.init(7, 0b11, 4, now_ms=100)
    assert ledger.fail(7, now_ms=300) == Outcome("fail", 7, 4, 200)
    assert 7 not in ledger
    assert ledger.ack(7, 0b01, now_ms=1_299) == Outcome("late", 7, -1, 0)
    assert ledger.ack(7, 0b10, now_ms=1_300) == Outcome("unknown", 7, -1, 0)


def test_ledger_unknown_root():
    ledger = AckerLedger()
    assert ledger.ack(42, 1, now_ms=0) == Outcome("unknown", 42, -1, 0)
    assert ledger.fail(42, now_ms=0) == Outcome("unknown", 42, -1, 0)
    assert ledger.reset(42, now_ms=0) == Outcome("unknown", 42, -1, 0)
    assert len(ledger) == 0  # no orphan entries


def test_ledger_completed_root_is_unknown_afterwards():
    ledger = AckerLedger()
    ledger.init(8, 6, 1, now_ms=0)
    assert ledger.ack(8, 6, now_ms=5).kind == "ack"
    assert ledger.ack(8, 6, now_ms=6) == Outcome("unknown", 8, -1, 0)


def test_ledger_reset_reports_and_keeps_the_entry():
    ledger = AckerLedger()
    ledger.init(3, 0b1, 6, now_ms=0)
    assert ledger.reset(3, now_ms=50) == Outcome("reset", 3, 6, 0)
    assert 3 in ledger
    assert ledger.ack(3, 0b1, now_ms=80) == Outcome("ack", 3, 6, 80)


def test_ledger_forget_makes_later_acks_late():
    ledger = AckerLedger(memory_ms=500)
    ledger.init(11, 0b1, 1, now_ms=0)
    ledger.forget(11, now_ms=1_000)
    assert len(ledger) == 0 and ledger.pending_roots() == []
    assert ledger.ack(11, 0b1, now_ms=1_499).kind == "late"
    assert ledger.ack(11, 0b1, now_ms=1_500).kind == "unknown"


def test_ledger_apply_aggregated_messages_equals_one_by_one():
    # acks before the init (possible across micro-batches) are kept until the init arrives
    ledger = AckerLedger()
    assert ledger.apply(21, 0b0110, now_ms=10) is None
    assert ledger.pending_roots() == [21]
    # latency counts from the first message seen for the root
    assert ledger.apply(21, 0b0110, now_ms=20, spout_task=2) == Outcome("ack", 21, 2, 10)
    # a fail in the batch wins
    assert ledger.apply(22, 0b1, now_ms=30, spout_task=2, failed=True) == Outcome(
        "fail", 22, 2, 0
    )
    assert ledger.apply(22, 0b1, now_ms=31) == Outcome("late", 22, -1, 0)


def test_ledger_snapshot_restore_round_trip():
    ledger = AckerLedger(memory_ms=123)
    ledger.init(1, 0b101, 3, now_ms=10)
    ledger.init(2, 0b11, 4, now_ms=20)
    ledger.ack(2, 0b01, now_ms=25)
    snap = ledger.snapshot()
    assert snap == {1: (0b101, 3, False, 10, None, 1), 2: (0b10, 4, False, 20, None, 1)}
    again = AckerLedger.restore(snap, memory_ms=123)
    assert again.memory_ms == 123 and sorted(again.pending_roots()) == [1, 2]
    assert again.ack(2, 0b10, now_ms=60) == Outcome("ack", 2, 4, 40)
    assert again.ack(1, 0b101, now_ms=70) == Outcome("ack", 1, 3, 60)


def test_ledger_restores_snapshots_written_before_record_roots():
    again = AckerLedger.restore({1: (0b1, 3, False, 10)}, memory_ms=100)
    assert again.ack(1, 0b1, now_ms=20) == Outcome("ack", 1, 3, 10)


def test_a_range_tree_fails_naming_its_records_once_the_rest_completes():
    # A range of three records, edges 1, 2, 4; records 0 and 2 fail, record 1 is acked.
    root = range_root(0x1234_5678_9ABC_DEF0)
    assert record_index(root) is None and base_root(root) == root
    ledger = AckerLedger(memory_ms=1_000)
    assert ledger.apply(root, 0b111, now_ms=0, spout_task=5) is None
    assert ledger.apply(root, 0b001, now_ms=1, failed_records=[0]) is None
    # The failed records' state survives a snapshot, as the rest of the entry.
    ledger = AckerLedger.restore(ledger.snapshot(), memory_ms=1_000)
    assert ledger.apply(root, 0b100, now_ms=2, failed_records=[2]) is None
    done = ledger.apply(root, 0b010, now_ms=3)
    assert done == Outcome("fail", root, 5, 3, records=(0, 2))
    assert ledger.ack(root, 0b1, now_ms=4).kind == "late"
    # A failure that names no record fails the whole tree at once, as in Storm.
    other = range_root(0x0FED_CBA9_8765_4321)
    ledger.apply(other, 0b11, now_ms=0, spout_task=5)
    assert ledger.apply(other, 0, now_ms=1, failed=True).records is None


def test_record_roots_past_the_index_space_are_the_range_itself():
    root = range_root(2**64 - 1)
    assert record_index(record_root(root, MAX_INDEXED)) == MAX_INDEXED
    assert record_root(root, MAX_INDEXED + 1) == root
    assert plain_root(2**64 - 1) < 2**63 and record_index(plain_root(2**64 - 1)) is None


# ---- PendingMap ----------------------------------------------------------------------------


def test_pending_map_expires_at_exactly_start_plus_timeout():
    p = PendingMap(timeout_ms=1_000)
    p.add(1, "a", "default", now_ms=0)
    p.add(2, "b", "s", now_ms=300)
    assert len(p) == 2 and 1 in p and 2 in p
    assert p.next_deadline() == 1_000
    assert p.expire(now_ms=999) == []
    expired = p.expire(now_ms=1_000)
    assert [(root, e.msg_id, e.stream, e.start_ms) for root, e in expired] == [
        (1, "a", "default", 0)
    ]
    assert p.next_deadline() == 1_300
    assert p.expire(now_ms=1_299) == []
    assert [root for root, _ in p.expire(now_ms=5_000)] == [2]
    assert len(p) == 0 and p.next_deadline() is None


def test_pending_map_reset_postpones_and_keeps_start():
    p = PendingMap(timeout_ms=1_000)
    p.add(1, "a", "default", now_ms=0)
    p.add(2, "b", "default", now_ms=100)
    p.reset(1, now_ms=600)
    assert p.next_deadline() == 1_100
    assert [root for root, _ in p.expire(now_ms=1_100)] == [2]
    assert p.expire(now_ms=1_599) == []
    (root, entry), = p.expire(now_ms=1_600)
    assert (root, entry.start_ms, entry.touched_ms) == (1, 0, 600)


def test_pending_map_reset_and_pop_of_absent_roots():
    p = PendingMap(timeout_ms=10)
    p.reset(99, now_ms=5)  # no effect, no error
    assert p.pop(99) is None
    p.add(1, "a", "default", now_ms=0)
    assert p.pop(1).msg_id == "a"
    assert len(p) == 0


def test_pending_map_without_timeout_never_expires():
    p = PendingMap(timeout_ms=None)
    p.add(1, "a", "default", now_ms=0)
    assert p.next_deadline() is None
    assert p.expire(now_ms=10**12) == []
    assert len(p) == 1
    assert [(r, e.msg_id) for r, e in p.items()] == [(1, "a")]


def _pending_contents(p: PendingMap) -> list:
    return [(root, e.msg_id, e.stream, e.start_ms, e.touched_ms, e.values, root in p._held)
            for root, e in p.items()]


def test_pending_map_pickles_as_columns_and_restores_order_clocks_and_holds():
    p = PendingMap(timeout_ms=1_000)
    p.add(2**64 - 5, "m1", "default", now_ms=10)
    p.add(3, ("m", 3), "s", now_ms=12, values=[3])
    p.reset(2**64 - 5, now_ms=400)  # armed order is deadline order: 3 first now
    p.hold(epoch=4)
    p.add(7, "m7", "default", now_ms=20)
    p.hold(epoch=5)
    p.add(8, "m8", "default", now_ms=21)
    q = pickle.loads(pickle.dumps(p))
    assert _pending_contents(q) == _pending_contents(p)
    assert q.next_deadline() == p.next_deadline() == 1_012
    assert [root for root, _ in q.expire(now_ms=1_012)] == [3]
    q.arm(through=4, now_ms=2_000)  # held under 4: armed; under 5: still held
    assert (7 in q._entries, 8 in q._held) == (True, True)
    q.add(9, "m9", "default", now_ms=30)  # held under the epoch the snapshot was taken in
    assert 9 in q._held and q._held_epoch[9] == 5
    empty = pickle.loads(pickle.dumps(PendingMap(timeout_ms=None)))
    assert (len(empty), empty.next_deadline()) == (0, None)


# A PendingMap pickled before its snapshot held columns (entry objects): a checkpoint written
# then must restore.
_PENDING_BEFORE_COLUMNS = (
    b"\x80\x05\x95;\x01\x00\x00\x00\x00\x00\x00\x8c\x1asquall.reliability.pending\x94"
    b"\x8c\nPendingMap\x94\x93\x94)\x81\x94}\x94(\x8c\ntimeout_ms\x94M\xe8\x03\x8c\x08_entries"
    b"\x94\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8a\t\xfb\xff\xff\xff"
    b"\xff\xff\xff\xff\x00h\x00\x8c\x0cPendingEntry\x94\x93\x94)\x81\x94N}\x94(\x8c\x06msg_id"
    b"\x94\x8c\x02m1\x94\x8c\x08start_ms\x94K\n\x8c\x06stream\x94\x8c\x07default\x94\x8c\n"
    b"touched_ms\x94K\n\x8c\x06values\x94Nu\x86\x94bs\x8c\x05_held\x94}\x94K\x07h\x0c)\x81\x94N}"
    b"\x94(h\x0f\x8c\x01m\x94K\x02\x86\x94h\x11K\x14h\x12\x8c\x01s\x94h\x14K\x14h\x15]\x94K\x01"
    b"au\x86\x94bs\x8c\x0b_held_epoch\x94}\x94K\x07K\x03s\x8c\x06_epoch\x94K\x03ub."
)


def test_pending_map_restores_a_snapshot_of_entry_objects():
    p = pickle.loads(_PENDING_BEFORE_COLUMNS)
    assert _pending_contents(p) == [(2**64 - 5, "m1", "default", 10, 10, None, False),
                                    (7, ("m", 2), "s", 20, 20, [1], True)]
    assert p.next_deadline() == 1_010
    p.arm(through=3, now_ms=50)
    assert [root for root, _ in p.expire(now_ms=1_050)] == [2**64 - 5, 7]
    assert _pending_contents(pickle.loads(pickle.dumps(p))) == []


# ---- end-to-end helpers --------------------------------------------------------------------


def now():
    clock = current_clock()
    return clock.now_ms() if clock is not None else None


class RecordingSpout(Spout):
    """Emits `rows` (msg id = first value), recording (event, msg id, simulated time).

    `advance` maps a row index to milliseconds the simulated clock moves before that row is
    emitted; `replay` re-emits failed message ids before new rows.
    """

    def __init__(self, rows, advance=None, replay=False):
        self.rows = [list(r) for r in rows]
        self.advance = dict(advance or {})
        self.replay = replay

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.events = []
        self.to_replay = []
        self.in_flight = 0
        self.in_flight_at_calls = []
        self.returned = []

    def next_tuple(self):
        self.in_flight_at_calls.append(self.in_flight)
        if self.to_replay:
            row = self.to_replay.pop(0)
        elif self.i < len(self.rows):
            if self.i in self.advance:
                current_clock().advance(self.advance[self.i])
            row = self.rows[self.i]
            self.i += 1
        else:
            return
        self.events.append(("emit", row[0], now()))
        self.in_flight += 1
        self.returned.append(self.collector.emit(row, msg_id=row[0]))

    def ack(self, msg_id):
        self.in_flight -= 1
        self.events.append(("ack", msg_id, now()))

    def fail(self, msg_id):
        self.in_flight -= 1
        self.events.append(("fail", msg_id, now()))
        if self.replay:
            self.to_replay.append(next(r for r in self.rows if r[0] == msg_id))

    def is_exhausted(self):
        return self.i >= len(self.rows) and not self.to_replay

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "text"))


def spout_of(result, component="spout"):
    (task,) = result.topology.component_tasks(component)
    return result.spout_instances[task]


def events(result, component="spout", with_time=False):
    evs = spout_of(result, component).events
    return evs if with_time else [(kind, msg) for kind, msg, _ in evs]


class Split(Bolt):
    """Emits every word of `text`, anchored; acks its input at once."""

    def execute(self, tup):
        for word in tup["text"].split():
            self.collector.emit(Values(word), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class HoldUntilRelease(Bolt):
    """Acks words at once, except "hold" words, which it keeps until a "release" word arrives.

    With `verb="fail"` the held tuples are failed on release instead of acked.
    """

    def __init__(self, verb="ack"):
        self.verb = verb

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        word = tup.values[-1]  # a word tuple, or a spout row (id, text)
        self.collector.emit(Values(word))
        if word.startswith("hold"):
            self.held.append(tup)
            return
        if word == "release":
            for held in self.held:
                getattr(self.collector, self.verb)(held)
            self.held = []
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def split_hold_topology(rows, verb="ack", spout=None):
    b = TopologyBuilder()
    b.set_spout("spout", spout or RecordingSpout(rows))
    b.set_bolt("split", Split(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", HoldUntilRelease(verb)).shuffle_grouping("split")
    return b.create_topology()


# ---- tuple trees ---------------------------------------------------------------------------


def test_tree_completes_only_when_every_node_is_acked():
    rows = [[0, "a b"], [1, "c hold"], [2, "d"], [3, "release"]]
    result = complete_topology(split_hold_topology(rows))
    assert result.errors == []
    assert events(result) == [
        ("emit", 0), ("ack", 0),
        ("emit", 1),  # "hold" is held: tree 1 stays pending ...
        ("emit", 2), ("ack", 2),
        ("emit", 3),
        ("ack", 1),  # ... until "release" arrives and the held tuple is acked
        ("ack", 3),
    ]
    assert sorted(w for (w,) in result.tuples("sink")) == ["a", "b", "c", "d", "hold", "release"]
    assert result.stats["spout"].acked == 4 and result.stats["spout"].failed == 0
    assert result.stats["split"].acked == 4 and result.stats["sink"].acked == 6


class WordsOfRow(BasicBolt):
    def execute(self, tup, collector):
        for word in tup.values[-1].split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class BasicRelay(BasicBolt):
    """Emits its word twice ("x" and "x!"), anchored; a BasicBolt acks its input after."""

    def execute(self, tup, collector):
        collector.emit(Values(tup.values[0]))
        collector.emit(Values(tup.values[0] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


@pytest.mark.parametrize("verb", ["ack", "fail"])
def test_trees_of_basic_bolts_with_children_acked_at_once_held_or_failed(verb):
    # On the local runner a BasicBolt's child that is acked while it executes has its ack folded
    # into its anchor's (squall.task.collectors): trees through two BasicBolts whose leaves are
    # acked at once, held and acked or failed later, or acked by another tuple's execute.
    rows = [[0, "a b"], [1, "hold1 c"], [2, "d"], [3, "hold2 release"], [4, "e"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("split", WordsOfRow(), 2).shuffle_grouping("spout")
    b.set_bolt("relay", BasicRelay(), 2).shuffle_grouping("split")
    b.set_bolt("sink", HoldUntilRelease(verb)).shuffle_grouping("relay")
    result = complete_topology(b.create_topology(), AT_ONCE)
    assert result.errors == []
    settled = "ack" if verb == "ack" else "fail"
    assert events(result) == [
        ("emit", 0), ("ack", 0),
        ("emit", 1),  # "hold1" and "hold1!" are held
        ("emit", 2), ("ack", 2),
        ("emit", 3),  # "hold2" ... then "release" settles the held tuples, its own tree's too
        (settled, 1), ("ack", 3) if verb == "ack" else ("fail", 3),
        ("emit", 4), ("ack", 4),
    ]
    held = 4  # hold1, hold1!, hold2, hold2!
    sink = result.stats["sink"]
    assert (sink.executed, sink.acked, sink.failed) == (
        (16, 16, 0) if verb == "ack" else (16, 16 - held, held))
    assert result.stats["spout"].pending == 0


def test_failing_one_leaf_fails_the_whole_tree():
    rows = [[0, "a hold b"], [1, "c"], [2, "release"]]
    result = complete_topology(split_hold_topology(rows, verb="fail"), AT_ONCE)
    assert events(result) == [
        ("emit", 0), ("emit", 1), ("ack", 1), ("emit", 2), ("fail", 0), ("ack", 2),
    ]
    assert result.stats["sink"].failed == 1
    assert result.stats["spout"].failed == 1 and result.stats["spout"].timed_out == 0


class Joiner(Bolt):
    """Pairs "L" and "R" tuples of one key: emits one tuple anchored to both, acks both.

    Other tuples pass through, anchored.
    """

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.waiting = {}

    def execute(self, tup):
        side, key = tup["text"].split(":")
        if side not in ("L", "R"):
            self.collector.emit(Values(side), anchors=tup)
            self.collector.ack(tup)
            return
        other = self.waiting.pop(key, None)
        if other is None:
            self.waiting[key] = tup
            return
        self.collector.emit(Values(f"hold-{key}"), anchors=[other, tup])
        self.collector.ack(other)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


@pytest.mark.parametrize("verb", ["ack", "fail"])
def test_multi_anchored_tuple_holds_both_roots(verb):
    rows = [["left", "L:k"], ["right", "R:k"], ["other", "x:0"], ["rel", "release:0"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("join", Joiner()).global_grouping("spout")
    b.set_bolt("sink", HoldUntilRelease(verb)).shuffle_grouping("join")
    result = complete_topology(b.create_topology(), AT_ONCE)
    assert result.errors == []
    assert result.tuples("sink") == [["hold-k"], ["x"], ["release"]]
    assert events(result) == [
        ("emit", "left"),
        ("emit", "right"),  # both inputs acked by the joiner, but the joined tuple is held
        ("emit", "other"), ("ack", "other"),
        ("emit", "rel"),
        (verb, "left"), (verb, "right"),  # the joined tuple settles both roots
        ("ack", "rel"),
    ]


class Diamond(Bolt):
    """Emits two children of each input, "<text>-1" and "<text>-2", both anchored to it."""

    def execute(self, tup):
        self.collector.emit(Values(f"{tup['text']}-1"), anchors=tup)
        self.collector.emit(Values(f"{tup['text']}-2"), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Rejoin(Bolt):
    """Holds "-1" tuples; on the "-2" tuple emits "<text>" anchored to both, acks both."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.first = None

    def execute(self, tup):
        if tup[0].endswith("-1"):
            self.first = tup
            return
        self.collector.emit(Values(tup[0][:-2]), anchors=[self.first, tup])
        self.collector.ack(self.first)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def test_dag_with_two_paths_to_one_tuple():
    """spout -> diamond -> (two children) -> rejoin -> one tuple anchored to both -> sink."""
    rows = [[0, "hold"], [1, "x"], [2, "release"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("diamond", Diamond()).shuffle_grouping("spout")
    b.set_bolt("rejoin", Rejoin()).global_grouping("diamond")
    b.set_bolt("sink", HoldUntilRelease()).global_grouping("rejoin")
    result = complete_topology(b.create_topology())
    assert result.errors == []
    assert result.tuples("sink") == [["hold"], ["x"], ["release"]]
    # tree 0 waits for its rejoined tuple, which the sink holds until "release" arrives
    assert events(result) == [
        ("emit", 0), ("emit", 1), ("ack", 1), ("emit", 2), ("ack", 0), ("ack", 2),
    ]
    assert result.stats["rejoin"].acked == 6 and result.stats["sink"].acked == 3


# ---- fail and replay -----------------------------------------------------------------------


class FailFirstAttempt(Bolt):
    """Fails the first attempt of every value in `bad`, acks everything else.

    Emits (value, attempt number) for every tuple it executes.
    """

    def __init__(self, bad):
        self.bad = set(bad)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.attempts = {}

    def execute(self, tup):
        v = tup[0]
        n = self.attempts[v] = self.attempts.get(v, 0) + 1
        self.collector.emit(Values(v, n), anchors=tup)
        if v in self.bad and n == 1:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("value", "attempt"))


@pytest.mark.parametrize("replay", [False, True])
def test_fixed_tuple_spout_fail_and_replay(replay):
    b = TopologyBuilder()
    b.set_spout(
        "spout", FixedTupleSpout([["a"], ["b"], ["c"]], Fields("v"), replay_failed=replay)
    )
    b.set_bolt("bolt", FailFirstAttempt({"b"})).shuffle_grouping("spout")
    result = complete_topology(b.create_topology())
    assert result.errors == []
    assert result.failed("spout") == [1]
    if replay:
        assert result.acked("spout") == [0, 2, 1]
        assert result.tuples("bolt") == [["a", 1], ["b", 1], ["c", 1], ["b", 2]]
        assert result.stats["spout"].acked == 3
    else:
        assert result.acked("spout") == [0, 2]
        assert result.tuples("bolt") == [["a", 1], ["b", 1], ["c", 1]]
        assert result.stats["spout"].acked == 2
    assert result.stats["spout"].failed == 1 and result.stats["spout"].timed_out == 0
    assert result.stats["bolt"].failed == 1


def test_custom_replaying_spout():
    rows = [[0, "x"], [1, "y"], [2, "z"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows, replay=True))
    b.set_bolt("bolt", FailFirstAttempt({0, 2})).shuffle_grouping("spout")
    result = complete_topology(b.create_topology(), AT_ONCE)
    assert events(result) == [
        ("emit", 0), ("fail", 0), ("emit", 0), ("ack", 0),
        ("emit", 1), ("ack", 1),
        ("emit", 2), ("fail", 2), ("emit", 2), ("ack", 2),
    ]
    assert result.tuples("bolt") == [[0, 1], [0, 2], [1, 1], [2, 1], [2, 2]]


# ---- timeouts ------------------------------------------------------------------------------


class Drop(Bolt):
    """Never acks "drop" tuples (the tree must time out); acks everything else."""

    def execute(self, tup):
        if tup["text"] != "drop":
            self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.parametrize(("timeout_secs", "timeout_ms"), [(10, 10_000), (0.5, 500)])
def test_timeout_fires_at_emit_time_plus_timeout(timeout_secs, timeout_ms):
    rows = [[0, "drop"], [1, "keep"], [2, "drop"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows, advance={1: 100, 2: 250}))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": timeout_secs})
    with simulated_time(start_ms=1_000) as clock:
        result = complete_topology(b.create_topology(), {**conf, **AT_ONCE})
        assert clock.now_ms() == 1_350 + timeout_ms
    assert events(result, with_time=True) == [
        ("emit", 0, 1_000),
        ("emit", 1, 1_100), ("ack", 1, 1_100),
        ("emit", 2, 1_350),
        ("fail", 0, 1_000 + timeout_ms),
        ("fail", 2, 1_350 + timeout_ms),
    ]
    stats = result.stats["spout"]
    assert (stats.acked, stats.failed, stats.timed_out, stats.pending) == (1, 2, 2, 0)
    assert result.elapsed_ms == 350 + timeout_ms


def test_default_timeout_is_thirty_seconds():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "drop"]]))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    with simulated_time() as clock:
        result = complete_topology(b.create_topology(), AT_ONCE)
        assert clock.now_ms() == 30_000
    assert events(result, with_time=True) == [("emit", 0, 0), ("fail", 0, 30_000)]


def test_disabled_timeouts_never_fail():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "drop"]]))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    conf = Config({"topology.enable.message.timeouts": False})
    with simulated_time():
        from squall.testing import CompleteTopologyTimeout

        with pytest.raises(CompleteTopologyTimeout, match="tracked tuples pending: 1"):
            complete_topology(b.create_topology(), conf, max_time_ms=5_000)


class ResetOnPing(Bolt):
    """Holds "hold" tuples; every "ping" resets their timeouts. Acks pings."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        if tup["text"] == "hold":
            self.held.append(tup)
            return
        for held in self.held:
            self.collector.reset_timeout(held)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def test_reset_timeout_postpones_the_timeout():
    rows = [[0, "hold"], [1, "ping"], [2, "ping"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows, advance={1: 6_000, 2: 5_000}))
    b.set_bolt("bolt", ResetOnPing()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": 10})
    with simulated_time(start_ms=1_000):
        result = complete_topology(b.create_topology(), {**conf, **AT_ONCE})
    assert events(result, with_time=True) == [
        ("emit", 0, 1_000),
        ("emit", 1, 7_000), ("ack", 1, 7_000),
        ("emit", 2, 12_000), ("ack", 2, 12_000),  # without resets 0 would fail at 11 000
        ("fail", 0, 22_000),  # 10 s after the last reset
    ]
    assert result.errors == []


class AckStaleAttempt(Bolt):
    """Holds the first attempt of each value; on the replay acks the stale one, then the new."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.first = {}

    def execute(self, tup):
        v = tup[0]
        if v not in self.first:
            self.first[v] = tup
            return
        self.collector.ack(self.first[v])  # its tree timed out: a late ack, not an error
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def test_late_ack_after_timeout_is_not_an_error():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "x"]], replay=True))
    b.set_bolt("bolt", AckStaleAttempt()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": 5})
    with simulated_time():
        result = complete_topology(b.create_topology(), {**conf, **AT_ONCE})
    assert result.errors == []
    assert events(result, with_time=True) == [
        ("emit", 0, 0), ("fail", 0, 5_000), ("emit", 0, 5_000), ("ack", 0, 5_000),
    ]
    assert result.stats["bolt"].acked == 2


# ---- no ackers, unanchored emits, max spout pending ----------------------------------------


class NeverAck(Bolt):
    """Emits what it got, then neither acks nor fails, except "fail" tuples, which it fails."""

    def execute(self, tup):
        self.collector.emit(Values(tup["text"]), anchors=tup)
        if tup["text"] == "fail":
            self.collector.fail(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("text"))


def test_no_ackers_acks_right_after_next_tuple_and_tracks_nothing():
    rows = [[0, "a"], [1, "fail"], [2, "b"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("bolt", NeverAck()).shuffle_grouping("spout")
    b.set_bolt("after", NeverAck()).shuffle_grouping("bolt")
    conf = Config()
    conf.set_num_ackers(0)
    conf.set_max_spout_pending(1)  # no effect without acking
    with simulated_time() as clock:
        result = complete_topology(b.create_topology(), conf)
        assert clock.now_ms() == 0  # nothing waited for a timeout
    assert events(result, with_time=True) == [
        ("emit", 0, 0), ("ack", 0, 0),
        ("emit", 1, 0), ("ack", 1, 0),  # failing an untracked tuple reaches no spout
        ("emit", 2, 0), ("ack", 2, 0),
    ]
    assert result.errors == []
    assert result.tuples("after") == [["a"], ["fail"], ["b"]]
    assert result.stats["spout"].pending == 0 and result.stats["spout"].failed == 0


def test_no_ackers_counts_spout_acks():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "a"], [1, "b"]]))
    b.set_bolt("bolt", NeverAck()).shuffle_grouping("spout")
    conf = Config()
    conf.set_num_ackers(0)
    result = complete_topology(b.create_topology(), conf)
    assert [k for k, _ in events(result)] == ["emit", "ack", "emit", "ack"]
    assert result.stats["spout"].acked == 2


class AnchoredAndNot(Bolt):
    """Emits one anchored child and one unanchored child ("loose-..."); acks the input."""

    def execute(self, tup):
        self.collector.emit(Values(f"tied-{tup['text']}"), anchors=tup)
        self.collector.emit(Values(f"hold-loose-{tup['text']}"))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def test_unanchored_emits_are_not_tracked():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "a"], [1, "b"]]))
    b.set_bolt("bolt", AnchoredAndNot()).shuffle_grouping("spout")
    b.set_bolt("sink", HoldUntilRelease()).shuffle_grouping("bolt")  # never sees "release"
    with simulated_time() as clock:
        result = complete_topology(b.create_topology())
        assert clock.now_ms() == 0
    assert events(result) == [("emit", 0), ("ack", 0), ("emit", 1), ("ack", 1)]
    assert result.tuples("sink") == [
        ["tied-a"], ["hold-loose-a"], ["tied-b"], ["hold-loose-b"]
    ]
    assert result.stats["spout"].timed_out == 0 and result.errors == []


@pytest.mark.parametrize("where", ["config", "declarer"])
def test_max_spout_pending_bound_holds(where):
    rows = [[i, "drop"] for i in range(6)]
    b = TopologyBuilder()
    declarer = b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": 10})
    if where == "config":
        conf.set_max_spout_pending(2)
    else:
        declarer.set_max_spout_pending(2)
    with simulated_time():
        result = complete_topology(b.create_topology(), {**conf, **AT_ONCE})
    spout = spout_of(result)
    # at most 2 in flight: the spout is asked for more only after a timeout frees room
    assert [t for kind, _, t in spout.events if kind == "emit"] == [
        0, 0, 10_000, 10_000, 20_000, 20_000,
    ]
    assert max(spout.in_flight_at_calls) == 1  # next_tuple is never called at the bound
    assert spout.in_flight_at_calls[:2] == [0, 1]
    assert result.stats["spout"].timed_out == 6


def test_without_max_spout_pending_everything_is_emitted_at_once():
    rows = [[i, "drop"] for i in range(6)]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": 10})
    with simulated_time():
        result = complete_topology(b.create_topology(), conf)
    spout = spout_of(result)
    assert [t for kind, _, t in spout.events if kind == "emit"] == [0] * 6
    assert spout.in_flight_at_calls[:6] == [0, 1, 2, 3, 4, 5]


# ---- BasicBolt -----------------------------------------------------------------------------


class BasicSplit(BasicBolt):
    """Emits every word (auto-anchored); raises FailedException for "boom" after emitting."""

    def execute(self, tup, collector):
        for word in tup["text"].split():
            collector.emit(Values(word))
        if "boom" in tup["text"]:
            raise FailedException("boom")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class FailBad(Bolt):
    def execute(self, tup):
        self.collector.emit(Values(tup[0]))
        if tup[0] == "bad":
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def test_basic_bolt_auto_anchors_and_auto_acks():
    rows = [[0, "a b"], [1, "c bad"], [2, "d"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("split", BasicSplit(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", FailBad()).shuffle_grouping("split")
    result = complete_topology(b.create_topology(), AT_ONCE)
    assert result.errors == []
    # tree 1 fails only because the child "bad" is anchored to its input
    assert events(result) == [
        ("emit", 0), ("ack", 0), ("emit", 1), ("fail", 1), ("emit", 2), ("ack", 2),
    ]
    assert result.stats["split"].acked == 3 and result.stats["split"].failed == 0
    assert result.stats["sink"].acked == 4 and result.stats["sink"].failed == 1


def test_basic_bolt_failed_exception_fails_the_input():
    rows = [[0, "a"], [1, "x boom"], [2, "b"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows))
    b.set_bolt("split", BasicSplit()).shuffle_grouping("spout")
    b.set_bolt("sink", FailBad()).shuffle_grouping("split")
    result = complete_topology(b.create_topology(), AT_ONCE)
    assert result.errors == []  # FailedException is a decision, not an error
    assert events(result) == [
        ("emit", 0), ("ack", 0), ("emit", 1), ("fail", 1), ("emit", 2), ("ack", 2),
    ]
    assert result.tuples("sink") == [["a"], ["x"], ["boom"], ["b"]]  # emitted before raising
    assert result.stats["split"].failed == 1 and result.stats["split"].acked == 2
    assert result.stats["split"].errors == 0


class BasicResetter(BasicBolt):
    """BasicBolt version of reset: resets nothing but the current input and passes it on."""

    def execute(self, tup, collector):
        collector.reset_timeout(tup)
        collector.emit(Values(tup["text"]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("text"))


def test_basic_bolt_emit_direct_and_reset_timeout():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "a"], [1, "b"]]))
    b.set_bolt("basic", BasicResetter()).shuffle_grouping("spout")
    b.set_bolt("sink", FailBad(), 2).shuffle_grouping("basic")
    result = complete_topology(b.create_topology())
    assert result.errors == []
    assert events(result) == [("emit", 0), ("ack", 0), ("emit", 1), ("ack", 1)]
    assert result.tuples("basic") == [["a"], ["b"]]


# ---- misuse of the acking API --------------------------------------------------------------


class TwoVerbs(Bolt):
    def __init__(self, first, second):
        self.first, self.second = first, second

    def execute(self, tup):
        getattr(self.collector, self.first)(tup)
        getattr(self.collector, self.second)(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.parametrize(
    ("first", "second", "text"),
    [
        ("ack", "ack", "ack of a tuple already acked"),
        ("fail", "fail", "fail of a tuple already failed"),
        ("fail", "ack", "ack of a tuple already failed"),
        ("ack", "fail", "fail of a tuple already acked"),
    ],
)
def test_second_ack_or_fail_is_reported_and_ignored(first, second, text):
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"], ["b"], ["c"]], Fields("v")))
    b.set_bolt("bolt", TwoVerbs(first, second), 2).shuffle_grouping("spout")
    topology = b.create_topology()
    with simulated_time() as clock:
        result = complete_topology(topology, AT_ONCE)
        assert clock.now_ms() == 0  # settled at once: nothing timed out
    assert len(result.errors) == 3
    for record in result.errors:
        assert record.component == "bolt"
        assert record.task in topology.component_tasks("bolt")
        assert isinstance(record.error, ReliabilityError)
        assert (record.error.component, record.error.stream) == ("bolt", "default")
        assert text in str(record.error)
    if first == "ack":
        assert result.acked("spout") == [0, 1, 2] and result.failed("spout") == []
    else:
        assert result.failed("spout") == [0, 1, 2] and result.acked("spout") == []
    stats = result.stats["bolt"]
    assert (stats.acked, stats.failed) == ((3, 0) if first == "ack" else (0, 3))
    assert result.stats["spout"].timed_out == 0


class AckForeign(Bolt):
    """Acks something it never received, then its own input."""

    def __init__(self, what):
        self.what = what

    def execute(self, tup):
        if self.what == "fabricated":
            foreign = Tuple(list(tup.values), tup.fields, "spout", "default", tup.source_task)
        else:
            foreign = "not a tuple"
        self.collector.ack(foreign)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.parametrize("what", ["fabricated", "string"])
def test_ack_of_a_tuple_not_received_is_reported(what):
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"], ["b"]], Fields("v")))
    b.set_bolt("bolt", AckForeign(what)).shuffle_grouping("spout")
    topology = b.create_topology()
    result = complete_topology(topology)
    assert [(r.component, r.task) for r in result.errors] == [("bolt", 1), ("bolt", 1)]
    for record in result.errors:
        assert isinstance(record.error, ReliabilityError)
        assert record.error.component == "bolt"
        assert "did not receive" in str(record.error)
    assert result.acked("spout") == [0, 1]
    assert result.stats["bolt"].acked == 2


_STASH: dict[str, Tuple] = {}


@pytest.fixture
def stash():
    _STASH.clear()
    yield _STASH
    _STASH.clear()


class CrossTaskAck(Bolt):
    """All-grouped: the lowest task keeps its tuple in a module-level stash; the other acks it."""

    def execute(self, tup):
        if self.context.this_task_index == 0:
            _STASH["t"] = tup
            return
        self.collector.ack(_STASH["t"])  # delivered to another task: refused and reported
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def test_ack_of_a_tuple_delivered_to_another_task_is_reported(stash):
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"]], Fields("v")))
    b.set_bolt("bolt", CrossTaskAck(), 2).all_grouping("spout")
    topology = b.create_topology()
    assert topology.component_tasks("bolt") == (1, 2)
    with simulated_time() as clock:
        result = complete_topology(topology, AT_ONCE)
        assert clock.now_ms() == 30_000
    assert [(r.component, r.task) for r in result.errors] == [("bolt", 2)]
    assert isinstance(result.errors[0].error, ReliabilityError)
    assert "did not receive" in str(result.errors[0].error)
    # the refused ack did not count: task 1's copy stayed un-acked and the tree timed out
    assert result.failed("spout") == [0] and result.acked("spout") == []
    assert result.stats["spout"].timed_out == 1


class Explode(Bolt):
    def execute(self, tup):
        if tup[0] == "boom":
            raise ValueError("exploded")
        self.collector.emit(Values(tup[0]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("v"))


class BasicExplode(BasicBolt):
    def execute(self, tup, collector):
        if tup[0] == "boom":
            raise ValueError("exploded")
        collector.emit(Values(tup[0]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("v"))


@pytest.mark.parametrize("bolt", [Explode, BasicExplode])
def test_exception_in_execute_is_reported_and_fails_the_tuple(bolt):
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"], ["boom"], ["c"]], Fields("v")))
    b.set_bolt("bolt", bolt(), 3).shuffle_grouping("spout")
    topology = b.create_topology()
    with simulated_time() as clock:
        result = complete_topology(topology, AT_ONCE)
        assert clock.now_ms() == 0  # failed at once, not by timeout
    assert len(result.errors) == 1
    record = result.errors[0]
    assert record.component == "bolt" and record.task in (1, 2, 3)
    assert record.stream == "default"
    assert isinstance(record.error, ValueError) and str(record.error) == "exploded"
    assert result.failed("spout") == [1]
    assert result.acked("spout") == [0, 2]
    assert sorted(result.tuples("bolt")) == [["a"], ["c"]]
    stats = result.stats["bolt"]
    assert (stats.executed, stats.acked, stats.failed, stats.errors) == (3, 2, 1, 1)


class ExplodeAfterAck(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)
        raise RuntimeError("after ack")

    def declare_output_fields(self, declarer):
        pass


def test_exception_after_ack_does_not_fail_the_tuple():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"]], Fields("v")))
    b.set_bolt("bolt", ExplodeAfterAck()).shuffle_grouping("spout")
    result = complete_topology(b.create_topology())
    assert [type(r.error) for r in result.errors] == [RuntimeError]
    assert result.acked("spout") == [0] and result.failed("spout") == []


# ---- several ackers, latency ---------------------------------------------------------------


@pytest.mark.parametrize("ackers", [1, 3])
def test_trees_complete_with_several_ackers(ackers):
    rows = [[i, f"w{i} x{i} hold{i}"] for i in range(10)] + [[10, "release"]]
    conf = Config()
    conf.set_num_ackers(ackers)
    result = complete_topology(split_hold_topology(rows), conf)
    assert result.errors == []
    acked = [m for kind, m in events(result) if kind == "ack"]
    assert sorted(acked) == list(range(11))
    # all ten held trees complete only after the release was emitted
    evs = events(result)
    assert evs.index(("emit", 10)) < min(evs.index(("ack", i)) for i in range(10))


def test_complete_latency_is_measured_on_simulated_time():
    rows = [[0, "hold"], [1, "release"], [2, "x"]]
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout(rows, advance={1: 250, 2: 1_000}))
    b.set_bolt("bolt", HoldUntilRelease()).shuffle_grouping("spout")
    with simulated_time(start_ms=5_000):
        result = complete_topology(b.create_topology())
    assert events(result, with_time=True) == [
        ("emit", 0, 5_000),
        ("emit", 1, 5_250), ("ack", 0, 5_250), ("ack", 1, 5_250),
        ("emit", 2, 6_250), ("ack", 2, 6_250),
    ]
    stats = result.stats["spout"]
    assert stats.latency_count == 3 and stats.latency_total_ms == 250
    assert stats.complete_latency_ms == pytest.approx(250 / 3)


def test_complete_latency_is_none_without_completed_trees():
    b = TopologyBuilder()
    b.set_spout("spout", RecordingSpout([[0, "drop"]]))
    b.set_bolt("bolt", Drop()).shuffle_grouping("spout")
    result = complete_topology(b.create_topology())
    assert result.stats["spout"].complete_latency_ms is None
    assert result.stats["spout"].timed_out == 1


class AckThenEmit(Bolt):
    """Acks its input and only then emits anchored to it: a misuse."""

    def execute(self, tup):
        self.collector.ack(tup)
        self.collector.emit(Values(tup[0]), anchors=tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("v"))


class AckAll(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass


def test_ack_of_a_child_of_a_completed_tree_is_reported():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([["a"], ["b"]], Fields("v")))
    b.set_bolt("first", AckThenEmit()).shuffle_grouping("spout")
    b.set_bolt("second", AckAll()).shuffle_grouping("first")
    result = complete_topology(b.create_topology())
    # the trees completed when "first" acked; the children's acks hit unknown trees
    assert result.acked("spout") == [0, 1]
    assert [r.component for r in result.errors] == ["second", "second"]
    for record in result.errors:
        assert isinstance(record.error, ReliabilityError)
        assert record.error.component == "second"
        assert "unknown tuple tree" in str(record.error)


def test_per_spout_message_timeout():
    b = TopologyBuilder()
    b.set_spout("a", RecordingSpout([[0, "drop"]])).add_configuration(
        "topology.message.timeout.secs", 3
    )
    b.set_spout("b", RecordingSpout([[0, "drop"]]))
    b.set_bolt("bolt", Drop()).shuffle_grouping("a").shuffle_grouping("b")
    conf = Config({"topology.message.timeout.secs": 7})
    with simulated_time():
        result = complete_topology(b.create_topology(), {**conf, **AT_ONCE})
    assert events(result, "a", with_time=True) == [("emit", 0, 0), ("fail", 0, 3_000)]
    assert events(result, "b", with_time=True) == [("emit", 0, 0), ("fail", 0, 7_000)]


class HoldUntilBatchEnd(Bolt):
    """Acks its inputs only when the runner ends a batch (as a buffering sink does)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []
        self.batches = []

    def execute(self, tup):
        self.held.append(tup)

    def on_batch_end(self, batch_id):
        self.batches.append((batch_id, [t[0] for t in self.held]))
        for tup in self.held:
            self.collector.emit(Values(batch_id, tup[0]), anchors=tup)
            self.collector.ack(tup)
        self.held = []

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("batch", "n"))


def test_batch_end_flushes_held_tuples_before_they_time_out():
    b = TopologyBuilder()
    b.set_spout("spout", FixedTupleSpout([[n] for n in range(5)], Fields("n")))
    b.set_bolt("hold", HoldUntilBatchEnd()).shuffle_grouping("spout")
    conf = Config({"topology.message.timeout.secs": 30, "squall.local.batch.ms": 250})
    with simulated_time() as clock:
        result = complete_topology(b.create_topology(), conf)
        # the first batch end, at 250 ms of simulated time, flushed everything
        assert clock.now_ms() == 250
    assert result.tuples("hold") == [[0, n] for n in range(5)]
    assert sorted(result.acked("spout")) == list(range(5))
    assert result.stats["spout"].timed_out == 0
