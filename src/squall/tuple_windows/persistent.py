"""Window contents kept in a `KeyValueState`, with a bounded number of events in memory.

Storm's persistent windowing (`WindowState`, `PersistentWindowedBoltExecutor`): the queue of a
window is split into partitions of at most `partition_size` events, each stored under its own key
of a state; an LRU cache holds at most `max_events` events in memory and writes a changed partition
back when it is evicted and at every checkpoint (`flush`). `PersistentWindowManager` is the
`WindowManager` over such a queue: the same windows, triggers and eviction, but activations are
handed to a listener while the queue is as the window saw it (a window is read lazily, so it may
be larger than memory), and expiry acks nothing (a persistent window acks each tuple as soon as it
is queued; the checkpoint that holds it is what makes it safe).

>>> from squall.duration import Duration
>>> from squall.state.base import MemoryKeyValueState
>>> from squall.tuple_windows.spec import Count, WindowSpec
>>> state = MemoryKeyValueState()
>>> queue = PartitionedQueue(max_events=4, partition_size=2)
>>> queue.attach(state)
>>> m = PersistentWindowManager(WindowSpec(Count(5), Count(5)), queue=queue)
>>> seen = []
>>> m.listener = lambda w: seen.append(list(w))
>>> for n in range(12):
...     _ = m.add(n, now_ms=n)
>>> seen, queue.events_in_memory() <= 4, len(queue)
([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], True, 5)
>>> queue.flush()  # the last five events, in partitions of at most two
>>> [(key, [event for _, event in entries]) for key, entries in sorted(state)]
[(('part', 3), [7]), (('part', 4), [8, 9]), (('part', 5), [10, 11])]
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from squall.errors import SquallError
from squall.tuple_windows.manager import WindowManager
from squall.tuple_windows.spec import WindowSpec
from squall.tuple_windows.window import TupleWindow

PARTITION_EVENTS = 1000  # Storm's MAX_PARTITION_EVENTS
DEFAULT_MAX_EVENTS_IN_MEMORY = 1_000_000  # Storm's default


def partition_size_for(max_events: int) -> int:
    """Storm's partitions hold 1000 events and at least 10 fit in memory; smaller limits get
    smaller partitions, so that at least ten still fit.

    >>> partition_size_for(1_000_000), partition_size_for(10_000), partition_size_for(50)
    (1000, 1000, 5)
    """
    return max(1, min(PARTITION_EVENTS, max_events // 10))


class Codec:
    """Turns an event into what a partition stores, and back (identity by default)."""

    def encode(self, event: Any) -> Any:
        return event

    def decode(self, stored: Any) -> Any:
        return stored


class PartitionedQueue:
    """A sorted sequence of `(key, event)` entries stored in partitions of a `KeyValueState`.

    In memory: each partition's id, size and first key, and a cache of whole partitions holding at
    most `max_events` events (least recently used first out; a changed partition is written to the
    state when it leaves the cache or at `flush`). Partition `p` is the state key `("part", p)`.
    Pickling keeps the index and drops the cache and the state: `attach` rebinds it to the state
    (which must hold what the last `flush` wrote).
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS_IN_MEMORY,
                 partition_size: int | None = None, codec: Codec | None = None) -> None:
        if max_events < 1:
            raise ValueError(f"max events in memory must be at least 1, got {max_events}")
        self.max_events = max_events
        self.partition_size = partition_size or partition_size_for(max_events)
        self.codec = codec or Codec()
        self.pids: list[int] = []  # partition ids, in key order
        self.sizes: list[int] = []  # events per partition
        self.firsts: list[Any] = []  # first key of each partition
        self.next_pid = 0
        self.size = 0
        self.state: Any = None
        self._starts: list[int] | None = None  # index of each partition's first event
        self._cache: OrderedDict[int, list[tuple[Any, Any]]] = OrderedDict()
        self._cached = 0
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()

    def __getstate__(self) -> dict[str, Any]:
        if self._dirty or self._deleted:
            raise SquallError("a partitioned window queue must be flushed before it is pickled")
        state = self.__dict__.copy()
        state.update(state=None, _starts=None, _cache=OrderedDict(), _cached=0, _dirty=set(),
                     _deleted=set())
        return state

    def attach(self, state: Any) -> None:
        """Read and write partitions through `state` (a `KeyValueState`)."""
        self.state = state

    def reset_cache(self) -> None:
        """Forget cached partitions (the state was rolled back or replaced)."""
        self._cache.clear()
        self._cached = 0
        self._dirty.clear()
        self._deleted.clear()

    def events_in_memory(self) -> int:
        return self._cached

    def __len__(self) -> int:
        return self.size

    # ---- partitions ------------------------------------------------------------------------
    def _load(self, p: int) -> list[tuple[Any, Any]]:
        pid = self.pids[p]
        cache = self._cache
        entries = cache.get(pid)
        if entries is not None:
            cache.move_to_end(pid)
            return entries
        stored = self.state.get(("part", pid))
        if stored is None:
            raise SquallError(f"window partition {pid} is missing from the state (was the "
                              "state rolled back without restoring the window?)")
        decode = self.codec.decode
        entries = [(key, decode(value)) for key, value in stored]
        cache[pid] = entries
        self._cached += len(entries)
        self._evict(keep=pid)
        return entries

    def _evict(self, keep: int) -> None:
        cache = self._cache
        while self._cached > self.max_events and len(cache) > 1:
            pid, entries = next(iter(cache.items()))
            if pid == keep:
                cache.move_to_end(pid)
                continue
            del cache[pid]
            self._cached -= len(entries)
            if pid in self._dirty:
                self._write(pid, entries)

    def _write(self, pid: int, entries: list[tuple[Any, Any]]) -> None:
        encode = self.codec.encode
        self.state.put(("part", pid), [(key, encode(event)) for key, event in entries])
        self._dirty.discard(pid)

    def _new_partition(self, at: int, entries: list[tuple[Any, Any]]) -> None:
        pid = self.next_pid
        self.next_pid += 1
        self.pids.insert(at, pid)
        self.sizes.insert(at, len(entries))
        self.firsts.insert(at, entries[0][0])
        self._cache[pid] = entries
        self._cached += len(entries)
        self._dirty.add(pid)
        self._starts = None
        self._evict(keep=pid)

    def _drop_partition(self, p: int) -> None:
        pid = self.pids.pop(p)
        self.sizes.pop(p)
        self.firsts.pop(p)
        entries = self._cache.pop(pid, None)
        if entries is not None:
            self._cached -= len(entries)
        self._dirty.discard(pid)
        self._deleted.add(pid)
        self._starts = None

    def _locate(self, i: int) -> tuple[int, int]:
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError("window queue index out of range")
        starts = self._starts
        if starts is None:
            starts, total = [], 0
            for n in self.sizes:
                starts.append(total)
                total += n
            self._starts = starts
        p = bisect_right(starts, i) - 1
        return p, i - starts[p]

    # ---- the sequence ----------------------------------------------------------------------
    def entry(self, i: int) -> tuple[Any, Any]:
        p, j = self._locate(i)
        return self._load(p)[j]

    def entries(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[Any, Any]]:
        """The entries `lo <= i < hi`, streamed a partition at a time."""
        hi = self.size if hi is None else min(hi, self.size)
        if lo >= hi:
            return
        p, j = self._locate(lo)
        left = hi - lo
        while left > 0:
            part = self._load(p)
            chunk = part[j:j + left]
            yield from chunk
            left -= len(chunk)
            p, j = p + 1, 0

    def insert(self, key: Any, event: Any) -> None:
        """Insert in key order (after equal keys); appending is the common case."""
        size = self.partition_size
        if not self.pids:
            self._new_partition(0, [(key, event)])
        else:
            p = max(0, bisect_right(self.firsts, key) - 1)
            entries = self._load(p)
            if p == len(self.pids) - 1 and len(entries) >= size and key >= entries[-1][0]:
                self._new_partition(p + 1, [(key, event)])  # the last one is full: start one
            else:
                j = bisect_right(entries, key, key=lambda e: e[0])
                entries.insert(j, (key, event))
                self.sizes[p] += 1
                self._cached += 1
                self._dirty.add(self.pids[p])
                if j == 0:
                    self.firsts[p] = key
                if len(entries) > size:  # split a partition that grew in the middle
                    half = len(entries) // 2
                    tail = entries[half:]
                    del entries[half:]
                    self.sizes[p] = len(entries)
                    self._cached -= len(tail)
                    self._new_partition(p + 1, tail)
                self._starts = None
                self._evict(keep=self.pids[p] if p < len(self.pids) else -1)
        self.size += 1

    def pop_front(self, k: int) -> None:
        """Remove the first `k` entries (they expired)."""
        k = min(k, self.size)
        self.size -= k
        while k > 0:
            n = self.sizes[0]
            if n <= k:
                self._drop_partition(0)
                k -= n
                continue
            entries = self._load(0)
            del entries[:k]
            self._cached -= k
            self.sizes[0] -= k
            self.firsts[0] = entries[0][0]
            self._dirty.add(self.pids[0])
            self._starts = None
            k = 0

    def flush(self) -> None:
        """Write every changed cached partition to the state and delete dropped ones."""
        for pid in list(self._dirty):
            self._write(pid, self._cache[pid])
        for pid in self._deleted:
            self.state.delete(("part", pid))
        self._deleted.clear()


class _View:
    """A read-only sequence over one part of each queue entry (what `WindowManager` indexes)."""

    __slots__ = ("part", "queue")

    def __init__(self, queue: PartitionedQueue, part: Callable[[tuple[Any, Any]], Any]) -> None:
        self.queue = queue
        self.part = part

    def __len__(self) -> int:
        return self.queue.size

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self.queue.size)
            if step != 1:
                raise ValueError("window queue slices have step 1")
            return [self.part(e) for e in self.queue.entries(lo, hi)]
        return self.part(self.queue.entry(i))

    def __iter__(self) -> Iterator[Any]:
        return (self.part(e) for e in self.queue.entries())


def _key(entry: tuple[Any, Any]) -> Any:
    return entry[0]


def _ts(entry: tuple[Any, Any]) -> Any:
    return entry[0][0]


def _event(entry: tuple[Any, Any]) -> Any:
    return entry[1]


class PersistentTupleWindow(TupleWindow):
    """A window read from the partitioned queue while `execute` runs (Storm's `getIter()`).

    Iterating streams the partitions, so a window may be larger than memory; `get()` builds the
    whole list. The window is only valid during `execute`. `get_new()` and `get_expired()` are not
    supported with persistence (as in Storm).
    """

    __slots__ = ("_hi", "_queue")

    def __init__(self, queue: PartitionedQueue, hi: int, start_timestamp: int | None,
                 end_timestamp: int) -> None:
        super().__init__((), (), (), start_timestamp, end_timestamp)
        self._queue = queue
        self._hi = hi

    def get(self) -> list[Any]:
        return list(self)

    def get_new(self) -> list[Any]:
        raise UnsupportedWindowOperation(
            "get_new() is not supported by persistent windows (with_persistence): iterate the "
            "window or use get()")

    def get_expired(self) -> list[Any]:
        raise UnsupportedWindowOperation(
            "get_expired() is not supported by persistent windows (with_persistence): iterate "
            "the window or use get()")

    def __iter__(self) -> Iterator[Any]:
        return (event for _, event in self._queue.entries(0, self._hi))

    def __len__(self) -> int:
        return self._hi

    def __repr__(self) -> str:
        return f"PersistentTupleWindow(({self.start_timestamp}, {self.end_timestamp}], " \
               f"{self._hi} items)"


class UnsupportedWindowOperation(SquallError, NotImplementedError):
    """A window method that persistent windowing does not offer."""


class PersistentWindowManager(WindowManager):
    """A `WindowManager` whose queue is a `PartitionedQueue`.

    Differences: every activation calls `listener(window)` at once (the window reads the queue
    lazily, so it must be consumed before the manager moves on), and expired events produce no
    `Expired` action and no `get_expired()` list. The previous window, which decides what is new
    for count windows sliding by time and at end of input, is remembered as its last key and the
    arrival counter at the time (O(1) memory): an event was in it if it is not after that key and
    arrived before, since a window is always a prefix of the queue and nothing that is not late
    can be inserted before a closed window's end.
    """

    def __init__(self, spec: WindowSpec, streams: Iterable[Hashable] = (), *,
                 queue: PartitionedQueue, partition_tasks: dict[int, str] | None = None,
                 carried: bool = False) -> None:
        super().__init__(spec, streams, partition_tasks, carried)
        self.queue = queue
        self.events = _View(queue, _event)  # type: ignore[assignment]
        self.keys = _View(queue, _key)  # type: ignore[assignment]
        self.ts = _View(queue, _ts)  # type: ignore[assignment]
        self.prev_last: Any = None
        self.prev_seq = 0
        self.listener: Callable[[TupleWindow], None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["listener"] = None
        return state

    def _insert(self, event: Any, ts: int, source: Hashable) -> None:
        self.seq += 1
        self.queue.insert((ts, source, self.seq), event)

    def _expire(self, k: int) -> None:
        self.queue.pop_front(k)

    def _has_new(self, hi: int) -> bool:
        last, seq = self.prev_last, self.prev_seq
        if last is None:
            return hi > 0
        return any(not (k <= last and k[2] <= seq) for k in self.keys[:hi])

    def _window(self, hi: int, end: int, missing: int = 0) -> int:
        lo = self.eviction.first_kept(self.ts, hi, end)
        n = self.spec.length_count
        if missing and n is not None:
            lo = max(lo, hi - max(0, n - missing))
        if lo:
            self._expire(lo)
        hi -= lo
        if hi > 0:
            self.prev_last = self.queue.entry(hi - 1)[0]
            self.prev_seq = self.seq
            if self.listener is None:
                raise SquallError("a persistent window manager needs a listener")
            self.listener(PersistentTupleWindow(self.queue, hi, self.eviction.start(end), end))
        return lo

    def end_of_input(self, now_ms: int) -> list[Any]:
        out = super().end_of_input(now_ms)
        self.prev_last, self.prev_seq = None, 0
        return out
