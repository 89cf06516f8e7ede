"""From what a query's component emitted to the reference's canonical form
(`squall.nexmark.reference`): the result once the input has ended.

- Rows (q0-q3, q13, q14, q20): every row, sorted.
- Changelogs (the winning bids q9, q4, q6; Trident's new values, q15-q19): the last row
  emitted per key.
- Panes (q5, q7, q8, q11 accumulating; q10, q12 discarding): per (key, window) the last pane
  (a retraction removes its window: a session that merged into another), or the sum of the
  panes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any


def _last(rows: Iterable[Sequence[Any]], key: slice) -> list[tuple[Any, ...]]:
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        out[tuple(row[key])] = tuple(row)
    return list(out.values())


def _final_panes(rows: Iterable[Sequence[Any]], keyed: bool) -> dict[tuple[Any, ...], Any]:
    """Per (key, window_start, window_end) (or the window alone), the last pane's value; a
    retraction removes the window."""
    out: dict[tuple[Any, ...], Any] = {}
    k = 1 if keyed else 0
    for row in rows:
        window = tuple(row[:k + 2])
        if row[k + 5]:  # is_retraction
            out.pop(window, None)
        else:
            out[window] = row[k + 2]
    return out


def _summed_panes(rows: Iterable[Sequence[Any]], keyed: bool) -> dict[tuple[Any, ...], list]:
    out: dict[tuple[Any, ...], list] = defaultdict(list)
    k = 1 if keyed else 0
    for row in rows:
        out[tuple(row[:k + 2])].append(row[k + 2])
    return out


def canonical(query: str, rows: Iterable[Sequence[Any]]) -> Any:
    """`query`'s result in the reference's form, from the rows its component emitted in order."""
    rows = [list(r) for r in rows]
    if query in ("q0", "q1", "q2", "q3", "q13", "q20"):
        return sorted(tuple(r) for r in rows)
    if query == "q14":
        return sorted((a, b, Decimal(str(p)), *rest) for a, b, p, *rest in rows)
    if query == "q9":
        return sorted(_last(rows, slice(0, 1)))
    if query in ("q4", "q6", "q15"):
        return sorted(_last(rows, slice(0, 1)))
    if query in ("q16", "q17"):
        return sorted(_last(rows, slice(0, 2)))
    if query == "q18":
        return sorted(r[2:] for r in _last(rows, slice(0, 2)))
    if query == "q19":
        return sorted((*bid, rank) for r in _last(rows, slice(0, 1))
                      for rank, bid in enumerate(r[1], start=1))
    if query == "q5":
        return sorted((s, e, a, n) for (s, e), top in _final_panes(rows, False).items()
                      for a, n in top)
    if query == "q7":
        return sorted((s, e, *bid) for (s, e), bids in _final_panes(rows, False).items()
                      for bid in bids)
    if query == "q8":
        return sorted((s, e, person, name, reserve)
                      for (person, s, e), pairs in _final_panes(rows, True).items()
                      for name, reserve in pairs)
    if query == "q10":
        return {(s, shard): sorted(tuple(r) for pane in panes for r in pane)
                for (shard, s, _), panes in sorted(_summed_panes(rows, True).items())}
    if query == "q11":
        return sorted((bidder, s, e, n) for (bidder, s, e), n
                      in _final_panes(rows, True).items())
    if query == "q12":
        return dict(sorted((bidder, sum(counts)) for (bidder, _, _), counts
                           in _summed_panes(rows, True).items()))
    raise ValueError(f"nexmark results: no query {query!r} (q0 to q20)")
