"""The Spark driver's fold of a batch's ack messages (squall.runtime.spark.ack_fold): by numpy
for plain ACKs and INITs, one message at a time otherwise; both settle every tree as the ledger
applying the messages one by one does."""

from __future__ import annotations

import random

import pytest

from squall.reliability.acker import AckerLedger, range_root, record_root
from squall.runtime.spark import row_schema
from squall.runtime.spark.ack_fold import Folded, _fold_items, fold
from squall.runtime.spark.row_schema import ACK, FAIL, INIT, RESET, SIZE

NOW = 10_000


def _rows(items_by_row: list[tuple[int, list[tuple[int, int, int, int]]]]):
    """(ts, columns) rows as the driver decodes them, from `messages_row`."""
    return [(ts, row_schema.decode_messages(row_schema.messages_row(items, ts)[5]))
            for ts, items in items_by_row]


def _settle(ledger: AckerLedger, f: Folded) -> tuple[set[tuple], dict]:
    """What the driver settles from a fold: the trees done in the batch plus the ledger's
    outcomes for the rest, and the ledger's entries afterwards."""
    out = set(f.done_outcomes(NOW))
    for root in f.forget:
        ledger.forget(root, NOW)
    for root in f.resets:
        o = ledger.reset(root, NOW)
        if o is not None:
            out.add(tuple(o))
    for root, (xor, task, failed, start, records, size) in f.rest.items():
        o = ledger.apply(root, xor, NOW, spout_task=task, failed=failed, start_ms=start,
                         failed_records=records, tuples=size)
        if o is not None:
            out.add(tuple(o))
    return out, ledger.snapshot()


def _one_by_one(rows) -> Folded:
    """The message-by-message fold of the same rows (the path fails and ranges take)."""
    kinds, tasks, roots, values, ts = [], [], [], [], []
    for t, (k, tk, r, v) in rows:
        kinds += k.tolist()
        tasks += tk.tolist()
        roots += r.tolist()
        values += v.tolist()
        ts += [t] * len(k)
    return Folded(**_fold_items(kinds, tasks, roots, values, ts))


def _ledgers(earlier: list[tuple[int, int, int | None]]) -> tuple[AckerLedger, AckerLedger]:
    """Two ledgers holding the same trees from an earlier batch: (root, xor, task), task None
    for a tree one of whose tuples failed before its init arrived."""
    pair = AckerLedger(), AckerLedger()
    for ledger in pair:
        for root, xor, task in earlier:
            if task is None:
                ledger.apply(root, xor, 50, failed=True)
            else:
                ledger.init(root, xor, task, 50)
    return pair


@pytest.mark.parametrize("seed", range(25))
def test_the_column_fold_settles_as_the_message_by_message_fold(seed):
    rng = random.Random(seed)
    items: list[tuple[int, int, int, int]] = []
    earlier = []
    shapes = set()
    for _ in range(rng.randrange(1, 80)):
        root = rng.getrandbits(63)  # a plain root: top bit clear
        task = rng.randrange(3)
        edges = [rng.getrandbits(64) for _ in range(rng.randrange(1, 4))]
        init = 0
        for e in edges:
            init ^= e
        shape = rng.choice(["whole", "missing ack", "init earlier", "acks only", "two inits",
                            "failed earlier"])
        shapes.add(shape)
        if shape == "init earlier":  # the ledger holds the tree from an earlier batch
            earlier.append((root, init, task))
        elif shape == "failed earlier":  # a tuple failed before the tree's init came
            earlier.append((root, 0, None))
            items.append((INIT, task, root, init))
        elif shape != "acks only":  # "acks only": the init comes in a later batch
            items.append((INIT, task, root, init))
        if shape == "two inits":  # both count; the last one names the task and the time
            items.append((INIT, (task + 1) % 3, root, 0))
        acked = edges[:-1] if shape == "missing ack" else edges
        items += [(ACK, -1, root, e) for e in acked]
    rng.shuffle(items)
    by_row = [(100 + n, items[i:i + 7]) for n, i in enumerate(range(0, len(items), 7))]
    rows = _rows(by_row)
    fast, slow = _ledgers(earlier)
    f = fold(rows, fast.entries)
    assert f.rest.keys() <= {r for _, _, r, _ in items}
    assert _settle(fast, f) == _settle(slow, _one_by_one(rows))
    if "whole" in shapes:
        assert len(f.done_roots)  # the fast path was taken, and completed trees


def test_fails_resets_timeouts_and_ranges_take_the_message_by_message_fold():
    r = range_root(0xfeed_beef_1234_5678)
    rows = _rows([(100, [
        (INIT, 0, 5, 3), (ACK, -1, 5, 3),  # complete
        (INIT, 0, 6, 1), (FAIL, -1, 6, 0),  # failed
        (RESET, -1, 7, 0),
        (FAIL, -2, 8, 0),  # the spout timed it out
        (INIT, 1, r, 9), (SIZE, 4, r, 0), (ACK, -1, r, 9), (FAIL, -1, record_root(r, 2), 0),
    ])])
    f = fold(rows, ())
    assert len(f.done_roots) == 0
    assert f.rest[5] == [0, 0, False, 100, [], None]
    assert f.rest[6][2] is True
    assert f.resets == [7] and f.forget == [8]
    assert f.rest[r] == [0, 1, False, 100, [2], 4]


def test_an_empty_batch_folds_to_nothing():
    assert len(fold([], ()).done_roots) == 0
    f = fold(_rows([(5, [])]), ())
    assert len(f.done_roots) == 0 and f.rest == {}


def test_ids_keep_all_64_bits_through_the_columns():
    root, edge = 2 ** 63 - 1, 2 ** 64 - 1  # the largest plain root, the largest edge
    f = fold(_rows([(1, [(INIT, 2, root, edge)]), (2, [(ACK, -1, root, edge)])]), ())
    assert f.done_roots.tolist() == [root] and f.done_tasks.tolist() == [2]
    assert f.done_starts.tolist() == [1]
    f = fold(_rows([(1, [(INIT, 2, root, edge)]), (2, [(ACK, -1, root, edge - 1)])]), ())
    assert f.rest == {root: [1, 2, False, 1, [], None]}
