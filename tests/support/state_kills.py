"""A durable map state factory whose Python worker dies right after a partition's write."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from squall.trident.state.durable import DurableMapStateFactory


@dataclass(frozen=True)
class KillsAWorker(DurableMapStateFactory):
    """A durable factory whose partition `index` kills its Python worker (SIGKILL of its own
    process) once, right after its write for transaction `txid` is durable, before the task
    can report it."""

    marker: str = ""
    index: int = 0
    txid: int = 3

    def make_partition(self, name, location, index):
        state = super().make_partition(name, location, index)
        if index != self.index or os.path.exists(self.marker):
            return state
        return _KillAfterWrite(state, self.marker, self.txid)


class _KillAfterWrite:
    def __init__(self, state, marker, txid):
        self.state, self.marker, self.txid = state, marker, txid

    def _then_kill(self, txid, done):
        if txid == self.txid:
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    def multi_add(self, txid, keys, values):
        return self._then_kill(txid, self.state.multi_add(txid, keys, values))

    def multi_update(self, txid, keys, updaters):
        return self._then_kill(txid, self.state.multi_update(txid, keys, updaters))

    def close(self):
        self.state.close()
