"""Guaranteed message processing: Storm's XOR tuple-tree ledger and the spout's pending map."""

from squall.reliability.acker import AckerLedger, Outcome
from squall.reliability.pending import PendingMap

__all__ = ["AckerLedger", "Outcome", "PendingMap"]
