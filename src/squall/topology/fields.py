"""`Fields` (the names of a stream's values) and `Values` (the values of one emit).

>>> f = Fields("word", "count")
>>> len(f), f.field_index("count"), "word" in f
(2, 1, True)
>>> f.select(Fields("count"), Values("cow", 3))
[3]
>>> Fields(["a", "b"]) == Fields("a", "b")
True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any


class Fields:
    """An ordered, immutable list of unique field names."""

    __slots__ = ("_index", "_names")

    def __init__(self, *names: str | Iterable[str]) -> None:
        if len(names) == 1 and not isinstance(names[0], str):
            flat = tuple(names[0])
        else:
            flat = tuple(names)  # type: ignore[arg-type]
        for name in flat:
            if not isinstance(name, str) or not name:
                raise ValueError(f"field names must be non-empty strings, got {name!r}")
        index = {name: i for i, name in enumerate(flat)}
        if len(index) != len(flat):
            dupes = sorted({n for n in flat if flat.count(n) > 1})
            raise ValueError(f"duplicate field names {dupes} in Fields{flat}")
        self._names: tuple[str, ...] = flat
        self._index: dict[str, int] = index

    def field_index(self, name: str) -> int:
        """Position of `name`; KeyError naming the known fields if absent."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"field {name!r} is not among {list(self._names)}") from None

    def contains(self, name: str) -> bool:
        return name in self._index

    def select(self, selector: Fields, values: Sequence[Any]) -> list[Any]:
        """The values of the fields named by `selector`, in the selector's order."""
        return [values[self._index[name]] for name in selector._names]

    def to_list(self) -> list[str]:
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, i: int) -> str:
        return self._names[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other._names == self._names

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields{self._names!r}"

    def __getstate__(self) -> tuple[str, ...]:
        return self._names

    def __setstate__(self, state: tuple[str, ...]) -> None:
        self._names = state
        self._index = {name: i for i, name in enumerate(state)}


class Values(list):
    """The values of one emit, positionally matching the stream's `Fields`.

    `Values(...)` builds a plain `list`: an emit needs nothing more, a plain list is what the
    Spark runner's wire format marshals without a copy, and it is built faster than an instance
    of a subclass (this runs once per emit).

    >>> Values("the cow", 2)
    ['the cow', 2]
    >>> type(Values("x")) is list
    True
    """

    __slots__ = ()

    def __new__(cls, *values: Any) -> list[Any]:  # type: ignore[misc]
        return list(values)
