"""A micro-batch's ack messages folded per tuple tree on the driver, a batch at a time.

Every host of a Spark batch sends the driver its ack messages as columns
(`row_schema.messages_row`): the spout reader an INIT per tree it emitted, each stage an ACK per
tree its tasks acked in (their acks XORed per root), and the rarer FAIL, RESET and SIZE. W1 with
acking on brings four to five messages per tree. The driver XORs them per root, then settles
each tree with its ledger (`squall.reliability.acker`). A dict updated once per message cost
about 15 us per tree here (100,000 trees: 1.4 s of a 15 s batch); sorting the batch's roots
and XOR-reducing each run of equal roots does the same in a few numpy calls, and a tree whose
init and every ack came in this batch (XOR 0, nothing failed, nothing pending from an earlier
batch) completes here, without a call per tree into the ledger.

>>> import numpy as np
>>> from squall.runtime.spark.row_schema import ACK, INIT
>>> col = lambda *xs: np.array(xs, np.uint64)
>>> f = fold([(100, (np.array([INIT, INIT], np.uint8), np.array([0, 0]), col(7, 8), col(5, 6))),
...           (105, (np.array([ACK, ACK], np.uint8), np.array([-1, -1]), col(7, 8), col(5, 3)))],
...          pending=())
>>> f.done_roots.tolist(), f.done_tasks.tolist(), f.done_starts.tolist()
([7], [0], [100])
>>> f.rest   # tree 8: XOR 6 ^ 3 = 5, an ack still to come
{8: [5, 0, False, 100, [], None]}
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from squall.reliability.acker import RECORD_FLAG, base_root, record_index
from squall.runtime.spark import row_schema

_FAST_KINDS = (row_schema.ACK, row_schema.INIT)
_NO_IDS = np.zeros(0, np.uint64)
_NO_INTS = np.zeros(0, np.int64)


@dataclass
class Folded:
    """A batch's messages per tree.

    `done_*`: trees that completed within the batch (an init, XOR 0, nothing failed, no entry
    in the ledger), by root: their spout task and their start (the init's time). `rest`: every
    other tree, root -> `[xor, spout task or None, failed, start, failed records, size]`, for
    the ledger. `forget`: roots the spout timed out; `resets`: roots whose timeout restarts.
    """

    done_roots: np.ndarray = field(default_factory=lambda: _NO_IDS)
    done_tasks: np.ndarray = field(default_factory=lambda: _NO_INTS)
    done_starts: np.ndarray = field(default_factory=lambda: _NO_INTS)
    rest: dict[int, list] = field(default_factory=dict)
    forget: list[int] = field(default_factory=list)
    resets: list[int] = field(default_factory=list)

    def done_outcomes(self, now_ms: int) -> list[tuple]:
        """The trees done in the batch as `Outcome` tuples: each the ack `AckerLedger.apply`
        would give it (no entry), as `Settlement.settle` delivers it to the spout."""
        n = len(self.done_roots)
        return list(zip(
            itertools.repeat("ack", n), self.done_roots.tolist(), self.done_tasks.tolist(),
            (now_ms - self.done_starts).tolist(), itertools.repeat(None, n),
            itertools.repeat(None, n), itertools.repeat(1, n), itertools.repeat(False, n),
            strict=True))


def fold(messages: Sequence[tuple[int, row_schema.MessageColumns]],
         pending: Collection[int]) -> Folded:
    """`messages`' (ts, columns) rows folded per root; `pending`: the roots the ledger holds
    from earlier batches (those trees go to `rest`, the ledger adds to them)."""
    if not messages:
        return Folded()
    kinds = np.concatenate([m[1][0] for m in messages])
    tasks = np.concatenate([m[1][1] for m in messages])
    roots = np.concatenate([m[1][2] for m in messages])
    values = np.concatenate([m[1][3] for m in messages])
    ts = np.repeat(np.array([m[0] for m in messages], np.int64),
                   [len(m[1][0]) for m in messages])
    if not len(kinds):
        return Folded()
    if np.isin(kinds, _FAST_KINDS).all() and not (roots & np.uint64(RECORD_FLAG)).any():
        return _fold_columns(kinds, tasks, roots, values, ts, pending)
    return Folded(**_fold_items(kinds.tolist(), tasks.tolist(), roots.tolist(), values.tolist(),
                                ts.tolist()))


def _fold_columns(kinds: np.ndarray, tasks: np.ndarray, roots: np.ndarray, values: np.ndarray,
                  ts: np.ndarray, pending: Collection[int]) -> Folded:
    """Only ACKs and INITs of plain roots: the runs of equal roots of the stably sorted batch
    are its trees, in the order the messages came (so the last init of a root wins, as in
    `_fold_items`)."""
    order = np.argsort(roots, kind="stable")
    roots, values, kinds, tasks, ts = (
        roots[order], values[order], kinds[order], tasks[order], ts[order])
    starts = np.flatnonzero(np.concatenate(([True], roots[1:] != roots[:-1])))
    tree_roots = roots[starts]
    xor = np.bitwise_xor.reduceat(values, starts)
    # The last INIT of each tree (-1: none), by its position in the sorted batch.
    position = np.where(kinds == row_schema.INIT, np.arange(len(kinds)), -1)
    last_init = np.maximum.reduceat(position, starts)
    has_init = last_init >= 0
    spout_task = np.where(has_init, tasks[last_init], -1)
    start = np.where(has_init, ts[last_init], ts[starts])  # else the first message's time
    done = has_init & (xor == 0)
    if len(pending):
        done &= ~np.isin(tree_roots, np.fromiter(pending, np.uint64, len(pending)))
    rest = {
        root: [x, task if task >= 0 else None, False, s, [], None]
        for root, x, task, s in zip(tree_roots[~done].tolist(), xor[~done].tolist(),
                                    spout_task[~done].tolist(), start[~done].tolist(),
                                    strict=True)
    }
    return Folded(tree_roots[done], spout_task[done], start[done], rest)


def _fold_items(kinds: list[int], tasks: list[int], roots: list[int], values: list[int],
                ts: list[int]) -> dict:
    """Any messages, one at a time: fails, resets, timeouts, range trees' sizes and record
    roots (a record root names one record of a range tree, squall.reliability.acker)."""
    agg: dict[int, list] = {}
    forget: list[int] = []
    resets: list[int] = []
    for mkind, mtask, root, value, t in zip(kinds, tasks, roots, values, ts, strict=True):
        if mkind == row_schema.RESET:
            resets.append(root)
            continue
        if mkind == row_schema.FAIL and mtask == row_schema.TIMED_OUT:
            forget.append(root)
            continue
        if root & RECORD_FLAG:
            index = record_index(root)
            root = base_root(root)
        else:
            index = None
        entry = agg.get(root)
        if entry is None:
            entry = agg[root] = [0, None, False, t, [], None]
        if mkind == row_schema.SIZE:
            entry[5] = mtask
        elif mkind == row_schema.FAIL:
            if index is None:
                entry[2] = True
            else:
                entry[4].append(index)
        else:
            entry[0] ^= value
            if mkind == row_schema.INIT:
                entry[1] = mtask
                entry[3] = t
    return {"rest": agg, "forget": forget, "resets": resets}
