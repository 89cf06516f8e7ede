"""`TupleWindow`: what a windowed bolt's `execute` receives.

>>> w = TupleWindow(["b", "c"], new=["c"], expired=["a"], start_timestamp=0, end_timestamp=20)
>>> w.get(), w.get_new(), w.get_expired(), len(w), w.end_timestamp
(['b', 'c'], ['c'], ['a'], 2, 20)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
"""Type of the windowed items (tuples, in a windowed bolt)."""


class TupleWindow(Generic[T]):
    """One activation of a window: its items, oldest first, and how it changed.

    `get_new()` is what was not in the previous activation; `get_expired()` is everything that
    left the window since the previous activation (also what left while windows were empty, so
    incremental computations over new and expired items stay exact). `end_timestamp` is the
    window's end (inclusive); `start_timestamp` is its start (exclusive) for windows whose length
    is a duration, and None for count windows.
    """

    __slots__ = ("_expired", "_items", "_new", "end_timestamp", "start_timestamp")

    def __init__(
        self,
        items: Sequence[T],
        new: Sequence[T],
        expired: Sequence[T],
        start_timestamp: int | None,
        end_timestamp: int,
    ) -> None:
        self._items = list(items)
        self._new = list(new)
        self._expired = list(expired)
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp

    def get(self) -> list[T]:
        return self._items

    def get_new(self) -> list[T]:
        return self._new

    def get_expired(self) -> list[T]:
        return self._expired

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (f"TupleWindow(({self.start_timestamp}, {self.end_timestamp}], "
                f"{len(self._items)} items, {len(self._new)} new, {len(self._expired)} expired)")
