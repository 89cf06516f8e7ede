"""Beam's trigger model: composable triggers over a per-(key, window) state context.

A trigger says when the pane of a (key, window) fires. Triggers are immutable descriptions that
hold no state: `WindowedEngine` compiles one into a tree of nodes (`compile_trigger`) and keeps,
per (key, window), a plain list of slots (`TriggerContext.s`) that the nodes read and write
through a `TriggerContext`: one slot per node, and a bit per node that says whether the node has
finished. This is the model of Beam's `TriggerStateMachine`s (runners-core), with their rules:

- `AfterWatermark(early=, late=)`: fires when the watermark reaches the window end; before that
  whenever `early` fires, after it whenever `late` fires (both repeat). Without `late` it
  finishes at the end of the window, and the window then closes.
- `AfterCount(n)`: once n tuples arrived (since the trigger last fired or was reset).
- `AfterProcessingTime(delay)`: once `delay` of processing time has passed since the first tuple
  of the pane (not since the last firing, and not again without new data).
- `Repeatedly(t)`: fires whenever `t` fires, restarting it each time; never finishes.
- `AfterAny(*ts)`, `AfterAll(*ts)`: once any / all of `ts` fired.
- `AfterEach(*ts)`: each of `ts` in turn, finishing after the last.
- `OrFinally(t, until)` (or `t.or_finally(until)`): as `t`, and finishes when `until` fires.
- `Never()`: never fires (panes come only when the window closes); `Always()`: on every tuple.

A finished trigger closes its (key, window): the pane it fires is the last (`is_last`), and
tuples that arrive for that window later are dropped (counted by the engine as `closed_drops`).

>>> t = AfterWatermark(early=AfterCount(2), late=AfterProcessingTime(Duration.seconds(1)))
>>> t
AfterWatermark(early=AfterCount(2), late=AfterProcessingTime(1000))
>>> Repeatedly(AfterAny(AfterCount(100), AfterProcessingTime(500))).or_finally(AfterWatermark())
OrFinally(Repeatedly(AfterAny(AfterCount(100), AfterProcessingTime(500))), AfterWatermark())
>>> root = compile_trigger(AfterCount(2))
>>> c = TriggerContext(new_state(root), (0, 1000), watermark=0, now=0)
>>> root.on_element(c); root.should_fire(c)
False
>>> root.on_element(c); root.should_fire(c)
True
>>> root.on_fire(c); c.finished(root)    # a once trigger finishes when it fires
True
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from squall.duration import Duration, to_millis
from squall.panes.windows import Window

BITS = 0
"""The slot of a (key, window)'s trigger state that holds the finished bits (bit i: node i)."""

ELEMENT, WATERMARK, BATCH_END, BEFORE_ELEMENT = "element", "watermark", "batch_end", "before"
"""Why a trigger is asked (`TriggerContext.kind`): a tuple was added; the watermark reached the
window end; a batch ended (processing time); processing time, before a tuple is added."""


class TriggerContext:
    """What a trigger node sees of one (key, window) at one moment.

    `s` is the (key, window)'s trigger state (`new_state`), `window` the window, `watermark` the
    operator's input watermark, `now` the processing time (of the tuple, or of the batch end or
    watermark step being handled), `kind` why the trigger is asked (ELEMENT, WATERMARK,
    BATCH_END, BEFORE_ELEMENT). `merging`: the window option merges windows (sessions), so
    composite triggers keep every branch's state up to date. `parts` (on a merge only): the
    trigger states of the windows being merged into this one. `pane`: the engine's record of
    the pane (`count`, `fresh`, `last_fired` read it), or None.

    Beam's triggers keep their own state in `s`; Apex's rules (`TriggerOption.as_trigger()`)
    are conditions on the engine's record of the pane: tuples and time since its last pane.
    """

    __slots__ = ("kind", "merging", "now", "pane", "parts", "s", "watermark", "window")

    def __init__(self, s: list[Any], window: Window, watermark: int, now: int,
                 merging: bool = False, parts: Sequence[list[Any]] = (),
                 kind: str = ELEMENT, pane: Any = None) -> None:
        self.s = s
        self.window = window
        self.watermark = watermark
        self.now = now
        self.merging = merging
        self.parts = parts
        self.kind = kind
        self.pane = pane

    @property
    def count(self) -> int:
        """Tuples added to the (key, window) since its last pane."""
        return int(self.pane.count)

    @property
    def fresh(self) -> bool:
        """Whether any tuple was added since the last pane (the pane would not be empty)."""
        return bool(self.pane.updated)

    @property
    def last_fired(self) -> int:
        """The processing time of the last pane of the (key, window), or of its creation."""
        return int(self.pane.fired_ms)

    @property
    def end_reached(self) -> bool:
        """The watermark has reached the end of the window (Beam: W >= end)."""
        return self.watermark >= self.window[1]

    def get(self, node: Node) -> Any:
        return self.s[node.i + 1]

    def put(self, node: Node, value: Any) -> None:
        self.s[node.i + 1] = value

    def finished(self, node: Node) -> bool:
        return bool(self.s[BITS] >> node.i & 1)

    def set_finished(self, node: Node, finished: bool = True) -> None:
        bit = 1 << node.i
        self.s[BITS] = self.s[BITS] | bit if finished else self.s[BITS] & ~bit

    def reset_tree(self, node: Node) -> None:
        """Unfinish `node` and everything below it, and clear their state (Beam's resetTree)."""
        mask = ((1 << node.end) - 1) ^ ((1 << node.i) - 1)
        self.s[BITS] &= ~mask
        node.clear(self)

    # ---- merges ----------------------------------------------------------------------------
    def part_values(self, node: Node) -> list[Any]:
        return [p[node.i + 1] for p in self.parts]

    def finished_in_any(self, node: Node) -> bool:
        return any(p[BITS] >> node.i & 1 for p in self.parts)

    def finished_in_all(self, node: Node) -> bool:
        return all(p[BITS] >> node.i & 1 for p in self.parts)


class Trigger:
    """Base of the triggers: an immutable description; its behaviour takes the node it runs as
    (`Node`, for its place in the tree) and the context holding the state."""

    def subtriggers(self) -> tuple[Trigger, ...]:
        return ()

    def or_finally(self, until: Trigger) -> OrFinally:
        """This trigger, until `until` fires (then finished)."""
        return OrFinally(self, until)

    # ---- behaviour (Beam's TriggerStateMachine) ---------------------------------------------
    def on_element(self, n: Node, c: TriggerContext) -> None:
        """A tuple arrived in the window."""
        for child in n.children:
            child.on_element(c)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        """The window is the merge of `c.parts` (sessions)."""
        for child in n.children:
            child.on_merge(c)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        raise NotImplementedError

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        """The pane fires: update the state (and the finished bits)."""
        raise NotImplementedError

    def clear(self, n: Node, c: TriggerContext) -> None:
        """Forget the state of `n` and below (the finished bits stay)."""
        c.put(n, None)
        for child in n.children:
            child.clear(c)

    @property
    def uses_processing_time(self) -> bool:
        return any(t.uses_processing_time for t in self.subtriggers())

    @property
    def has_on_time_pane(self) -> bool:
        """Whether the trigger fires when the watermark reaches the window end (Beam Python's
        `has_ontime_pane`): only then can a final pane at the window's close be ON_TIME."""
        return any(t.has_on_time_pane for t in self.subtriggers())

    fires_empty_panes = False
    """Whether a firing with nothing new since the last pane emits a pane (besides the on-time
    and final panes, which follow the operator's on-time and closing behaviours). Beam: never;
    Apex's accumulating time triggers repeat unchanged panes."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


class Node:
    """One occurrence of a trigger in a compiled tree: the trigger, its index `i` (its slot and
    finished bit), `end` (the first index after its subtree) and its children."""

    __slots__ = ("children", "end", "i", "trigger")
    children: tuple[Node, ...]
    end: int
    i: int
    trigger: Trigger

    def __init__(self, trigger: Trigger, i: int) -> None:
        self.trigger = trigger
        self.i = i
        nxt = i + 1
        children = []
        for sub in trigger.subtriggers():
            child = Node(sub, nxt)
            children.append(child)
            nxt = child.end
        self.children = tuple(children)
        self.end = nxt

    def on_element(self, c: TriggerContext) -> None:
        self.trigger.on_element(self, c)

    def on_merge(self, c: TriggerContext) -> None:
        self.trigger.on_merge(self, c)

    def should_fire(self, c: TriggerContext) -> bool:
        return self.trigger.should_fire(self, c)

    def on_fire(self, c: TriggerContext) -> None:
        self.trigger.on_fire(self, c)

    def clear(self, c: TriggerContext) -> None:
        self.trigger.clear(self, c)

    def first_unfinished(self, c: TriggerContext) -> Node | None:
        for child in self.children:
            if not c.finished(child):
                return child
        return None


def compile_trigger(trigger: Trigger) -> Node:
    """The executable tree of `trigger` (the root has index 0: its finished bit closes the
    window)."""
    if not isinstance(trigger, Trigger):
        raise TypeError(f"not a trigger: {trigger!r}")
    return Node(trigger, 0)


def new_state(root: Node) -> list[Any]:
    """A fresh trigger state for `root`'s tree: the finished bits, then one slot per node."""
    return [0] + [None] * root.end


# ---- once triggers --------------------------------------------------------------------------

class _Once(Trigger):
    """A trigger that fires at most once: firing clears its state and finishes it."""

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        n.clear(c)
        c.set_finished(n)


class AfterCount(_Once):
    """Fires once `count` tuples have arrived (Beam's `AfterCount`, `AfterPane`)."""

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"AfterCount needs a count >= 1, got {count!r}")
        self.count = count

    def on_element(self, n: Node, c: TriggerContext) -> None:
        c.put(n, (c.get(n) or 0) + 1)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        if c.finished_in_any(n):  # enough tuples in some part already: done
            c.set_finished(n)
            c.put(n, None)
        else:
            c.put(n, sum(v or 0 for v in c.part_values(n)) or None)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return (c.get(n) or 0) >= self.count

    def __repr__(self) -> str:
        return f"AfterCount({self.count})"


class AfterProcessingTime(_Once):
    """Fires once `delay` of processing time has passed since the first tuple of the pane
    (Beam's `AfterProcessingTime.pastFirstElementInPane().plusDelayOf(delay)`).

    Processing time is seen at tuples and batch ends: the trigger fires at the first tuple or
    batch end at or after the due time, before a tuple that arrives then is added.
    """

    def __init__(self, delay: Duration | datetime.timedelta | int) -> None:
        ms = to_millis(delay)
        if ms < 0:
            raise ValueError(f"AfterProcessingTime needs a delay >= 0, got {ms} ms")
        self.delay_ms = ms

    def on_element(self, n: Node, c: TriggerContext) -> None:
        if c.get(n) is None:
            c.put(n, c.now + self.delay_ms)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        due = [v for v in c.part_values(n) if v is not None]
        c.put(n, min(due) if due else None)  # the earliest due time of the parts

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        due = c.get(n)
        return due is not None and c.now >= due

    @property
    def uses_processing_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"AfterProcessingTime({self.delay_ms})"


class Never(_Once):
    """Never fires: the window's data comes out only in its final pane (purge, end of input)."""

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return False

    def __repr__(self) -> str:
        return "Never()"


# ---- repeating triggers -----------------------------------------------------------------------

class Always(Trigger):
    """Fires on every tuple, never finishes (Beam Python's `Always`, `Repeatedly(AfterCount(1))`).
    """

    def on_element(self, n: Node, c: TriggerContext) -> None:
        c.put(n, True)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        c.put(n, True if any(c.part_values(n)) else None)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return bool(c.get(n))

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        c.put(n, None)

    def __repr__(self) -> str:
        return "Always()"


class Repeatedly(Trigger):
    """Fires whenever `trigger` fires, restarting it after it finishes; never finishes."""

    def __init__(self, trigger: Trigger) -> None:
        _check(trigger)
        self.trigger = trigger

    def subtriggers(self) -> tuple[Trigger, ...]:
        return (self.trigger,)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return n.children[0].should_fire(c)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        child = n.children[0]
        child.on_fire(c)
        if c.finished(child):
            c.reset_tree(child)

    def __repr__(self) -> str:
        return f"Repeatedly({self.trigger!r})"


# ---- composites -------------------------------------------------------------------------------

class AfterWatermark(Trigger):
    """The on-time pane when the watermark reaches the window end; `early` fires panes before it
    and `late` after it, each repeated. Without `late` the trigger finishes at the on-time pane
    (the window closes: later tuples are dropped); with it, it never finishes.
    """

    has_on_time_pane = True

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None) -> None:
        self.early = _check(early) if early is not None else None
        self.late = _check(late) if late is not None else None

    def subtriggers(self) -> tuple[Trigger, ...]:
        early = self.early if self.early is not None else Never()
        return (early,) if self.late is None else (early, self.late)

    def on_element(self, n: Node, c: TriggerContext) -> None:
        if c.merging:  # a merge may revive either branch: keep both up to date
            for child in n.children:
                child.on_element(c)
        else:
            active = n.first_unfinished(c)
            if active is not None:
                active.on_element(c)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        early = n.children[0]
        late = n.children[1] if len(n.children) > 1 else None
        if not c.finished_in_all(early) or not c.end_reached:
            early.on_merge(c)
            c.set_finished(early, False)
            if late is not None:
                c.set_finished(late, False)
                late.clear(c)
        else:
            c.set_finished(early)
            if late is not None:
                late.on_merge(c)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        early = n.children[0]
        if not c.finished(early):
            return c.end_reached or early.should_fire(c)
        if len(n.children) == 1:
            return False
        return n.children[1].should_fire(c)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        early = n.children[0]
        late = n.children[1] if len(n.children) > 1 else None
        if not c.finished(early):
            if not c.end_reached:  # an early firing; early firings repeat
                early.on_fire(c)
                early.clear(c)
                c.set_finished(early, False)
                return
            # The end of the window: the early branch is done, the late one starts afresh.
            if early.should_fire(c):
                early.on_fire(c)
            c.set_finished(early)
            early.clear(c)
            if late is None:
                c.set_finished(n)
            else:
                late.clear(c)
        elif late is not None:  # a late firing; late firings repeat
            late.on_fire(c)
            late.clear(c)
            c.set_finished(late, False)
        else:
            c.set_finished(n)

    def __repr__(self) -> str:
        args = []
        if self.early is not None:
            args.append(f"early={self.early!r}")
        if self.late is not None:
            args.append(f"late={self.late!r}")
        return f"AfterWatermark({', '.join(args)})"


class _Composite(Trigger):
    def __init__(self, *triggers: Trigger) -> None:
        if len(triggers) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two triggers")
        self.triggers = tuple(_check(t) for t in triggers)

    def subtriggers(self) -> tuple[Trigger, ...]:
        return self.triggers

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(t) for t in self.triggers)})"


class AfterAny(_Composite):
    """Fires once, when any of its triggers fires (Beam's `AfterAny`, `AfterFirst`)."""

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        super().on_merge(n, c)
        c.set_finished(n, any(c.finished(child) for child in n.children))

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return any(c.finished(child) or child.should_fire(c) for child in n.children)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        for child in n.children:
            if child.should_fire(c):
                child.on_fire(c)
            else:  # whatever pane it was waiting for has fired
                child.clear(c)
        c.set_finished(n)


class AfterAll(_Composite):
    """Fires once, when every one of its triggers has fired (Beam's `AfterAll`)."""

    def on_element(self, n: Node, c: TriggerContext) -> None:
        for child in n.children:
            if not c.finished(child):
                child.on_element(c)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        super().on_merge(n, c)
        c.set_finished(n, all(c.finished(child) for child in n.children))

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        return all(c.finished(child) or child.should_fire(c) for child in n.children)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        for child in n.children:
            child.on_fire(c)
        c.set_finished(n)


class AfterEach(_Composite):
    """Its triggers in turn: fires whenever the current one fires, moves to the next when it
    finishes, finishes after the last (Beam's `AfterEach.inOrder`)."""

    def on_element(self, n: Node, c: TriggerContext) -> None:
        if c.merging:
            for child in n.children:
                child.on_element(c)
        else:
            active = n.first_unfinished(c)
            if active is not None:
                active.on_element(c)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        prior_finished = True
        for child in n.children:
            if prior_finished:
                child.on_merge(c)
                prior_finished = c.finished(child)
            else:
                child.clear(c)
        c.set_finished(n, n.first_unfinished(c) is None)

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        active = n.first_unfinished(c)
        return active is not None and active.should_fire(c)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        active = n.first_unfinished(c)
        if active is not None:
            active.on_fire(c)
        if c.merging:
            for child in n.children:
                child.clear(c)
        c.set_finished(n, n.first_unfinished(c) is None)


class OrFinally(Trigger):
    """`trigger`, until `until` fires: then it fires and finishes (Beam's `orFinally`)."""

    def __init__(self, trigger: Trigger, until: Trigger) -> None:
        self.trigger = _check(trigger)
        self.until = _check(until)

    def subtriggers(self) -> tuple[Trigger, ...]:
        return (self.trigger, self.until)

    def on_merge(self, n: Node, c: TriggerContext) -> None:
        super().on_merge(n, c)
        c.set_finished(n, any(c.finished(child) for child in n.children))

    def should_fire(self, n: Node, c: TriggerContext) -> bool:
        actual, until = n.children
        return actual.should_fire(c) or until.should_fire(c)

    def on_fire(self, n: Node, c: TriggerContext) -> None:
        actual, until = n.children
        if until.should_fire(c):
            until.on_fire(c)
            actual.clear(c)
        else:
            actual.on_fire(c)  # `until` keeps its state: it counts across firings
        c.set_finished(n, any(c.finished(child) for child in n.children))

    def __repr__(self) -> str:
        return f"OrFinally({self.trigger!r}, {self.until!r})"


def processing_delays(trigger: Trigger) -> list[int]:
    """The delays (ms) of the `AfterProcessingTime` triggers in `trigger`, in tree order."""
    out = [trigger.delay_ms] if isinstance(trigger, AfterProcessingTime) else []
    for sub in trigger.subtriggers():
        out += processing_delays(sub)
    return out


def _check(t: Any) -> Trigger:
    if not isinstance(t, Trigger):
        raise TypeError(f"not a trigger: {t!r} (an AfterWatermark, AfterCount, ... instance)")
    return t


__all__ = [
    "BATCH_END", "BEFORE_ELEMENT", "ELEMENT", "WATERMARK", "AfterAll", "AfterAny", "AfterCount",
    "AfterEach", "AfterProcessingTime", "AfterWatermark", "Always", "Never", "Node", "OrFinally",
    "Repeatedly", "Trigger", "TriggerContext", "compile_trigger", "new_state",
    "processing_delays",
]
