"""NEXMark's events: `Person`, `Auction` and `Bid`, their flat row form and Beam's JSON form.

Times are milliseconds since the epoch (UTC); prices are in cents. The fields are Beam's
(`org.apache.beam.sdk.nexmark.model`), and a bid also has Flink's nexmark `channel` and `url`.

The flat row (`ROW_FIELDS`) is one list per event, whatever its kind, as Flink's nexmark table
is: `event_type` (`PERSON` 0, `AUCTION` 1, `BID` 2, Beam's and Flink's codes), `date_time`, and
every kind's fields, None where the kind has none; a person's and an auction's `id` share a
column, as do every kind's `date_time` and `extra`.

>>> b = Bid(auction=1000, bidder=1001, price=250, channel="Apple", url="https://a",
...         date_time=1436918400010, extra="")
>>> row = to_row(b)
>>> row[:3], row[ROW_FIELDS.index("price")]
([2, 1436918400010, None], 250)
>>> from_row(row) == b
True
>>> to_json(b)
'{"newPerson":null,"newAuction":null,"bid":{"auction":1000,"bidder":1001,"price":250,\
"channel":"Apple","url":"https://a","dateTime":1436918400010,"extra":""}}'
>>> from_json(to_json(b)) == b
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PERSON, AUCTION, BID = 0, 1, 2
"""The `event_type` codes (Beam's `Event.Type` and Flink's nexmark `event_type`)."""
KINDS = ("person", "auction", "bid")


@dataclass(frozen=True, slots=True)
class Person:
    """A new person: may sell (`Auction.seller`) and bid (`Bid.bidder`)."""

    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: int
    extra: str

    event_type = PERSON


@dataclass(frozen=True, slots=True)
class Auction:
    """A new auction of `seller`: bids count from `date_time` until `expires`."""

    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: int
    expires: int
    seller: int
    category: int
    extra: str

    event_type = AUCTION


@dataclass(frozen=True, slots=True)
class Bid:
    """A bid of `bidder` on `auction`, at `price` cents."""

    auction: int
    bidder: int
    price: int
    channel: str
    url: str
    date_time: int
    extra: str

    event_type = BID


Event = Person | Auction | Bid

ROW_FIELDS: tuple[str, ...] = (
    "event_type", "date_time",
    "id", "name", "email_address", "credit_card", "city", "state",
    "item_name", "description", "initial_bid", "reserve", "expires", "seller", "category",
    "auction", "bidder", "price", "channel", "url",
    "extra",
)
"""The flat row's fields, in order."""

_INDEX = {name: i for i, name in enumerate(ROW_FIELDS)}
_CLASSES: tuple[type[Person], type[Auction], type[Bid]] = (Person, Auction, Bid)
_FIELDS = tuple(tuple(c.__dataclass_fields__) for c in _CLASSES)
_SLOTS = tuple(tuple(_INDEX[f] for f in names) for names in _FIELDS)


def to_row(event: Event) -> list[Any]:
    """The event as a flat row (`ROW_FIELDS`)."""
    row: list[Any] = [None] * len(ROW_FIELDS)
    kind = event.event_type
    row[0] = kind
    for name, i in zip(_FIELDS[kind], _SLOTS[kind], strict=True):
        row[i] = getattr(event, name)
    return row


def from_row(row: Any) -> Event:
    """The event a flat row holds (a list, a tuple, or anything indexable in that order)."""
    kind = row[0]
    if kind not in (PERSON, AUCTION, BID):
        raise ValueError(f"NEXMark row: event_type must be 0, 1 or 2, got {kind!r}")
    cls = _CLASSES[kind]
    return cls(*(row[i] for i in _SLOTS[kind]))


# ---- Beam's JSON form --------------------------------------------------------------------

_JSON_KEYS = ("newPerson", "newAuction", "bid")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_CAMEL = tuple(tuple(_camel(f) for f in names) for names in _FIELDS)


def to_json(event: Event) -> str:
    """One line of Beam's event JSON: `{"newPerson": ..., "newAuction": ..., "bid": ...}`, the
    kinds the event is not null, fields in camel case, times as milliseconds."""
    kind = event.event_type
    body = {key: getattr(event, name) for key, name in zip(_CAMEL[kind], _FIELDS[kind],
                                                            strict=True)}
    obj = {key: (body if i == kind else None) for i, key in enumerate(_JSON_KEYS)}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def from_json(text: str | dict[str, Any]) -> Event:
    """The event of one line of Beam's event JSON (or its parsed object). A bid without
    `channel` or `url` (written by Beam itself) gets empty strings."""
    obj = json.loads(text) if isinstance(text, str) else text
    if not isinstance(obj, dict):
        raise ValueError(f"NEXMark JSON: an event is an object, got {type(obj).__name__}")
    kinds = [i for i, key in enumerate(_JSON_KEYS) if obj.get(key) is not None]
    if len(kinds) != 1:
        raise ValueError("NEXMark JSON: an event has exactly one of newPerson, newAuction and "
                         f"bid not null, got {[_JSON_KEYS[i] for i in kinds]}")
    kind = kinds[0]
    body = obj[_JSON_KEYS[kind]]
    values = []
    for key, name in zip(_CAMEL[kind], _FIELDS[kind], strict=True):
        if key in body:
            values.append(body[key])
        elif kind == BID and name in ("channel", "url"):
            values.append("")
        else:
            raise ValueError(f"NEXMark JSON: {_JSON_KEYS[kind]} has no field {key!r}")
    return _CLASSES[kind](*values)
