"""Outcome settlement: what a runner does with an acker ledger's decision, written once.

Every runner keeps ledgers (`squall.reliability.acker`) and settles their outcomes the same way:
an acked, failed or reset tree goes to its spout task (`deliver`, which differs per runner: a
direct hand-over locally, a file the Spark reader reads), a late ack is counted, and an ack of a
tree the ledger does not know is reported as a `ReliabilityError`.

>>> from squall.reliability.acker import Outcome
>>> delivered, reported = [], []
>>> s = Settlement(delivered.append, lambda component, error: reported.append(error))
>>> s.settle(Outcome("ack", 7, 1, 5)); s.settle(Outcome("late", 8, -1, 0))
>>> s.settle(Outcome("unknown", 9, -1, 0), "count")
>>> [o.kind for o in delivered], s.late_acks, str(reported[0]).split(":")[0]
(['ack'], 1, 'ack of an unknown tuple tree (root 0x9)')
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from squall.errors import ReliabilityError
from squall.reliability.acker import Outcome

DELIVERED = frozenset({"ack", "fail", "reset"})  # outcomes that go to the tree's spout task


class OutcomeReceiver(Protocol):
    """A spout task's side of settlement: completions it delivers to its spout, and resets."""

    completions: deque[Outcome]

    def reset(self, root: int) -> None: ...


def deliver_to_spout(spout: OutcomeReceiver, outcome: Outcome) -> None:
    """Hand a delivered outcome to its spout task: a reset restarts the tree's timeout at once,
    an ack or fail waits in `completions` for the spout's next turn (as Storm's executor)."""
    if outcome.kind == "reset":
        spout.reset(outcome.root)
    else:
        spout.completions.append(outcome)


def unknown_tree_error(root: int, component: str | None) -> ReliabilityError:
    return ReliabilityError(
        f"ack of an unknown tuple tree (root {root:#x}): it already completed, or the tuple "
        "did not come from this topology",
        component=component,
    )


class Settlement:
    """Settles a runner's ledger outcomes: delivered ones go to `deliver`, late acks are counted
    in `late_acks`, unknown trees go to `report(component, error)`."""

    __slots__ = ("deliver", "late_acks", "report")

    def __init__(self, deliver: Callable[[Outcome], None],
                 report: Callable[[str | None, ReliabilityError], None]) -> None:
        self.deliver = deliver
        self.report = report
        self.late_acks = 0

    def settle(self, outcome: Outcome, component: str | None = None) -> None:
        kind = outcome.kind
        if kind in DELIVERED:
            self.deliver(outcome)
        elif kind == "late":
            self.late_acks += 1
        else:
            self.report(component, unknown_tree_error(outcome.root, component))
