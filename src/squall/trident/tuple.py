"""`TridentTuple`: the values a Trident function sees, readable by index or by field name.

A stage makes one tuple class per field list (`tuple_type`), so a tuple is a plain Python tuple
with the field index on its class: creating one per row costs what a tuple costs.

>>> Row = tuple_type(("word", "count"))
>>> t = Row(("cow", 3))
>>> t[0], t["count"], t.get_value_by_field("word"), t.get_integer(1), t.fields
('cow', 3, 'cow', 3, ('word', 'count'))
>>> t["missing"]
Traceback (most recent call last):
...
KeyError: "no field 'missing' in this tuple (fields: ['word', 'count'])"
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar


class TridentTuple(tuple):
    """A tuple of values with named fields (Storm's `TridentTuple`)."""

    __slots__ = ()
    fields: ClassVar[tuple[str, ...]] = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if key.__class__ is str:
            try:
                key = self._index[key]
            except KeyError:
                raise KeyError(f"no field {key!r} in this tuple "
                               f"(fields: {list(self.fields)})") from None
        return tuple.__getitem__(self, key)

    def get_value_by_field(self, name: str) -> Any:
        return self[name]

    def get_value(self, i: int) -> Any:
        return tuple.__getitem__(self, i)

    def get_string(self, i: int) -> str:
        return tuple.__getitem__(self, i)

    def get_integer(self, i: int) -> int:
        return tuple.__getitem__(self, i)

    def get_string_by_field(self, name: str) -> str:
        return self[name]

    def get_integer_by_field(self, name: str) -> int:
        return self[name]

    def contains(self, name: str) -> bool:
        return name in self._index

    @property
    def values(self) -> list[Any]:
        return list(self)

    def __repr__(self) -> str:
        return "TridentTuple(" + ", ".join(f"{f}={v!r}" for f, v in
                                           zip(self.fields, self, strict=False)) + ")"


@lru_cache(maxsize=1024)
def tuple_type(fields: tuple[str, ...]) -> type[TridentTuple]:
    """The tuple class of `fields` (one per field list, cached)."""
    return type("TridentTuple", (TridentTuple,), {
        "__slots__": (), "fields": fields, "_index": {f: i for i, f in enumerate(fields)}})
