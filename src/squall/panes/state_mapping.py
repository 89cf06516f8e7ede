"""Windows, accumulators and sessions of an operator task in a state provider's `KeyValueState`.

The engine keeps its panes in any `MutableMapping[window, dict[key, PaneState]]`; for an operator
built with `stateful=True` that mapping is a `StateWindowStore` over the task's state (namespace
`<component>-<task>` of `topology.state.provider`: memory, durable or redis). Layout of the state:

- `("p", window, key)`: the pickled `PaneState` of one (key, window);
- `("i", window, n)`: the keys that entered `window` during its n-th flush (the window's index, so
  a window's keys can be listed without scanning the whole store);
- `("s", key)`: a key's session list (session windows);
- `("m",)`: everything else, which is small: watermarks, the engine's heaps (one entry per
  window, not per key), counters, the number of index chunks per live window.

Only what a batch touches is loaded: a (key, window) is read the first time the batch needs it, a
window's whole index only when the engine visits every key of it (its on-time pane, its purge, a
time trigger). `flush()` (the operator's `pre_prepare`) writes back the entries whose bytes changed
plus the new index chunks, deletes purged ones, and drops everything loaded, so memory holds what
one checkpoint interval (one micro-batch on Spark) touched, and the state's own `prepare_commit` /
`commit` / `rollback` make it transactional. Values are stored pickled, never as live objects:
the engine mutates its `PaneState`s in place, which must not reach a committed in-memory map.

>>> from squall.state import MemoryKeyValueState
>>> from squall.panes.engine import PaneState
>>> state = MemoryKeyValueState()
>>> store = StateWindowStore(state)
>>> keys = store[(0, 1000)] = {}        # a new window, as the engine creates one
>>> keys["cow"] = PaneState(3, now=0, late=False)
>>> store.flush(); sorted(k for k, _ in state)
[('i', (0, 1000), 0), ('p', (0, 1000), 'cow')]
>>> store.get((0, 1000)).get("cow").acc     # read back from the state
3
>>> for key, st in store.pop((0, 1000)).items(): print(key, st.acc)
cow 3
>>> store.flush(); list(state), list(store)
([], [])
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, MutableMapping
from typing import Any

from squall.panes.engine import PaneState
from squall.panes.windows import Window

META_KEY = ("m",)
_MISSING = object()


def _dump_pane(st: PaneState) -> bytes:
    return pickle.dumps(st.__getstate__(), protocol=pickle.HIGHEST_PROTOCOL)


def _load_pane(raw: bytes) -> PaneState:
    st = PaneState.__new__(PaneState)
    st.__setstate__(pickle.loads(raw))
    return st


class _Keys(dict):
    """The keys of one stored window: a dict that fills itself from the state on demand.

    `get` reads a missing key from the state (the engine's per-tuple lookup); anything that needs
    every key (`items`, `len`, iteration) first reads the window's index. Plain `[key] = st`
    stays a dict store: a key not in `stored` is new and goes into the next index chunk.
    """

    __slots__ = ("chunks", "complete", "popped", "raw", "state", "stored", "window")

    def __init__(self, state: Any, window: Window, chunks: int) -> None:
        super().__init__()
        self.state = state
        self.window = window
        self.chunks = chunks  # index chunks in the state
        self.stored: set[Any] = set()  # keys that have an entry in the state
        self.raw: dict[Any, bytes] = {}  # the bytes read, to write back only what changed
        self.popped: set[Any] = set()  # stored keys removed (merged sessions)
        self.complete = chunks == 0

    def __reduce__(self) -> Any:  # a snapshot between flushes keeps what was loaded
        return (_rebuild_keys, (self.state, self.window, self.chunks, dict(dict.items(self)),
                                self.stored, self.raw, self.popped, self.complete))

    def get(self, key: Any, default: Any = None) -> Any:
        st = dict.get(self, key, _MISSING)
        if st is not _MISSING:
            return st
        if self.complete or key in self.popped:
            return default
        return self._read(key, default)

    def _read(self, key: Any, default: Any) -> Any:
        raw = self.state.get(("p", self.window, key))
        if raw is None:
            return default
        st = _load_pane(raw)
        dict.__setitem__(self, key, st)
        self.stored.add(key)
        self.raw[key] = raw
        return st

    def load_all(self) -> None:
        """Read every key of the window, in the order an in-memory dict would hold them (the
        order in which they entered the window), so panes fire in the same order either way."""
        if self.complete:
            return
        state, w = self.state, self.window
        order: dict[Any, None] = {}
        for n in range(self.chunks):
            for key in pickle.loads(state.get(("i", w, n))):
                order.pop(key, None)  # a key that left and came back counts from its return
                order[key] = None
        current = dict(dict.items(self))
        dict.clear(self)
        for key in order:
            if key in self.popped:
                continue  # removed since the last flush (it may be back: then it is new)
            if key in current:
                if key in self.stored:
                    dict.__setitem__(self, key, current.pop(key))
            else:
                self._read(key, None)
        dict.update(self, current)  # keys new since the last flush come last
        self.complete = True

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        st = self.get(key, _MISSING)
        if st is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        dict.__delitem__(self, key)
        if key in self.stored:
            self.popped.add(key)
        return st

    def __getitem__(self, key: Any) -> Any:
        st = self.get(key, _MISSING)
        if st is _MISSING:
            raise KeyError(key)
        return st

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def __iter__(self) -> Iterator[Any]:
        self.load_all()
        return dict.__iter__(self)

    def items(self) -> Any:
        self.load_all()
        return dict.items(self)

    def keys(self) -> Any:
        self.load_all()
        return dict.keys(self)

    def values(self) -> Any:
        self.load_all()
        return dict.values(self)


def _rebuild_keys(state: Any, window: Window, chunks: int, entries: dict, stored: set,
                  raw: dict, popped: set, complete: bool) -> _Keys:
    keys = _Keys(state, window, chunks)
    dict.update(keys, entries)
    keys.stored, keys.raw, keys.popped, keys.complete = stored, raw, popped, complete
    return keys


class StateWindowStore(MutableMapping):
    """window -> key -> `PaneState`, kept in a `KeyValueState` (see the module doc).

    The live windows and their index sizes are in memory (one entry per window): the engine
    already keeps a heap entry per window, and windows are few next to (key, window) pairs.
    """

    def __init__(self, state: Any, chunks: dict[Window, int] | None = None) -> None:
        self.state = state
        self.chunks: dict[Window, int] = {} if chunks is None else chunks  # live windows
        self.loaded: dict[Window, dict[Any, PaneState]] = {}  # touched since the last flush
        self.deleted: dict[Window, tuple[set[Any], int]] = {}  # stored keys, index chunks

    def get(self, w: Window, default: Any = None) -> Any:
        keys = self.loaded.get(w)
        if keys is not None:
            return keys
        chunks = self.chunks.get(w)
        if chunks is None:
            return default
        keys = self.loaded[w] = _Keys(self.state, w, chunks)
        return keys

    def __getitem__(self, w: Window) -> dict[Any, PaneState]:
        keys = self.get(w)
        if keys is None:
            raise KeyError(w)
        return keys

    def __setitem__(self, w: Window, keys: dict[Any, PaneState]) -> None:
        """The engine creates a window with a plain dict it goes on using: kept as it is (all its
        keys are new; nothing of it is stored yet)."""
        if w in self.chunks:
            del self[w]
        self.chunks[w] = 0
        self.loaded[w] = keys

    def __delitem__(self, w: Window) -> None:
        keys = self.get(w)
        if keys is None:
            raise KeyError(w)
        if isinstance(keys, _Keys):
            keys.load_all()
            stored, chunks = keys.stored | keys.popped, keys.chunks
            old = self.deleted.get(w)
            if old is not None:  # deleted, re-created and deleted again before a flush
                stored, chunks = stored | old[0], max(chunks, old[1])
            self.deleted[w] = (stored, chunks)
        del self.loaded[w]
        del self.chunks[w]

    def pop(self, w: Window, default: Any = _MISSING) -> Any:
        keys = self.get(w)
        if keys is None:
            if default is _MISSING:
                raise KeyError(w)
            return default
        if isinstance(keys, _Keys):
            keys.load_all()
        del self[w]
        return keys

    def __iter__(self) -> Iterator[Window]:
        return iter(list(self.chunks))

    def __len__(self) -> int:
        return len(self.chunks)

    def __contains__(self, w: object) -> bool:
        return w in self.chunks

    def flush(self) -> None:
        """Write what changed since the last flush into the state and forget what was loaded."""
        state = self.state
        for w, (stored, chunks) in self.deleted.items():
            for key in stored:
                state.delete(("p", w, key))
            for n in range(chunks):
                state.delete(("i", w, n))
        self.deleted = {}
        for w, keys in self.loaded.items():
            if isinstance(keys, _Keys):
                stored, raw, n = keys.stored, keys.raw, keys.chunks
                for key in keys.popped:
                    if not dict.__contains__(keys, key):
                        state.delete(("p", w, key))
            else:
                stored, raw, n = set(), {}, 0
            new = []
            for key, st in dict.items(keys):
                blob = _dump_pane(st)
                if raw.get(key) != blob:
                    state.put(("p", w, key), blob)
                if key not in stored:
                    new.append(key)
            if new:
                state.put(("i", w, n), pickle.dumps(new, protocol=pickle.HIGHEST_PROTOCOL))
                self.chunks[w] = n + 1
        self.loaded = {}


class StateSessions(MutableMapping):
    """key -> its session list, kept in the state under `("s", key)`; read on demand, written
    back (if changed) by `flush`."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.loaded: dict[Any, list[Window]] = {}
        self.raw: dict[Any, bytes | None] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        sessions = self.loaded.get(key)
        if sessions is not None:
            return sessions
        if key in self.raw:  # read before and found absent (or deleted)
            return default
        raw = self.state.get(("s", key))
        self.raw[key] = raw
        if raw is None:
            return default
        sessions = self.loaded[key] = pickle.loads(raw)
        return sessions

    def __getitem__(self, key: Any) -> list[Window]:
        sessions = self.get(key)
        if sessions is None:
            raise KeyError(key)
        return sessions

    def __setitem__(self, key: Any, sessions: list[Window]) -> None:
        self.get(key)  # remember what is stored, to delete or overwrite it
        self.loaded[key] = sessions

    def __delitem__(self, key: Any) -> None:
        self[key]  # KeyError if absent
        del self.loaded[key]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("stored sessions are read per key, not listed")

    def __len__(self) -> int:
        raise TypeError("stored sessions are read per key, not counted")

    def flush(self) -> None:
        state = self.state
        for key, raw in self.raw.items():
            sessions = self.loaded.get(key)
            if sessions is None:
                if raw is not None:
                    state.delete(("s", key))
                continue
            blob = pickle.dumps(sessions, protocol=pickle.HIGHEST_PROTOCOL)
            if blob != raw:
                state.put(("s", key), blob)
        self.loaded, self.raw = {}, {}
