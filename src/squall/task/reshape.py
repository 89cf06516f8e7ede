"""Restarting from a checkpoint with a changed topology: what may change, and how state moves.

A checkpoint records the *shape* of the topology that wrote it (`shape`): per component its
kind, role, class, streams, inputs with their groupings, and number of tasks. A restart compares
it with the new topology (`compare`):

- a *structural* change (a component added or removed, its kind, role or class, its streams'
  fields, its inputs or their groupings) cannot be carried: the restart is refused with one
  line per change (`Reshape.refusal`);
- a change of parallelism is a *rescale*. Which rescales can be carried is `Reshape.check`: a
  spout keeps its number of tasks (its tasks own source positions), a windowed bolt too (its
  windows are not redistributed), and a stateful bolt's key-value state is moved key by key to
  the task its fields grouping now routes the key to (`redistribute`), so it needs a fields
  grouping on every input and a store-backed state provider (`durable`, `redis`);
- task ids are numbered across the topology (Storm's rule), so a rescale of one component moves
  the ids of others: `Reshape.task_map` maps a component's old task ids to its new ones by
  index, which the runners apply to everything they keep per task.

>>> from squall import TopologyBuilder, Fields, StatefulBolt
>>> from squall.testing import FixedTupleSpout
>>> def build(split_grouping, n):
...     b = TopologyBuilder()
...     _ = b.set_spout("words", FixedTupleSpout([["a"]], Fields("word")))
...     _ = split_grouping(b.set_bolt("count", StatefulBolt(), n))
...     return b.create_topology()
>>> old = shape(build(lambda d: d.fields_grouping("words", Fields("word")), 2))
>>> compare(old, build(lambda d: d.fields_grouping("words", Fields("word")), 3)).resized
{'count': (2, 3)}
>>> compare(old, build(lambda d: d.shuffle_grouping("words"), 2)).structural
['grouping of words->count changed from fields(word) to shuffle']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.errors import SquallError
from squall.state.backends import DELETED, StoreKeyValueState
from squall.state.providers import DURABLE, MEMORY, REDIS, provider_name
from squall.task.checkpointing import namespace
from squall.topology.config import Config
from squall.topology.description import Topology
from squall.topology.fields import Fields
from squall.topology.groupings import FieldsGrouping, grouping_text, make_chooser
from squall.topology.roles import BASIC, RICH, STATEFUL, STATEFUL_WINDOWED, is_stateful_role

SHAPE_VERSION = 1

Shape = dict[str, Any]


class RescaleError(SquallError):
    """A checkpoint cannot be resumed by this topology: a structural change, or a change of
    parallelism that cannot be carried."""


def shape(topology: Topology) -> Shape:
    """What a checkpoint records of the topology that wrote it (JSON-serialisable)."""
    return {
        "version": SHAPE_VERSION,
        "components": {
            cid: {
                "kind": spec.kind,
                "role": spec.role,
                "class": spec.class_name,
                "tasks": spec.num_tasks,
                "streams": {s: list(st.fields) for s, st in sorted(spec.streams.items())},
                "inputs": sorted([sub.component, sub.stream, grouping_text(sub.grouping)]
                                 for sub in spec.inputs),
            }
            for cid, spec in sorted(topology.components.items())
        },
    }


def task_ids_of(components: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Task ids as `Topology` numbers them (sorted component ids, consecutive from 1), from a
    shape's components."""
    ids: dict[str, tuple[int, ...]] = {}
    next_id = 1
    for cid in sorted(components):
        n = int(components[cid]["tasks"])
        ids[cid] = tuple(range(next_id, next_id + n))
        next_id += n
    return ids


@dataclass
class Reshape:
    """The difference between a checkpoint's shape and a new topology."""

    topology: Topology
    structural: list[str] = field(default_factory=list)
    resized: dict[str, tuple[int, int]] = field(default_factory=dict)
    old_tasks: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def new_tasks(self) -> dict[str, tuple[int, ...]]:
        return {cid: self.topology.component_tasks(cid) for cid in self.topology.components}

    @property
    def moved(self) -> list[str]:
        """Components whose task ids changed (resized, or renumbered by another's resize)."""
        new = self.new_tasks
        return sorted(cid for cid in new if self.old_tasks.get(cid) != new[cid])

    @property
    def changed(self) -> bool:
        return bool(self.structural or self.moved)

    def task_map(self) -> dict[int, int]:
        """Old task id -> new task id, by index, for every component whose number of tasks is
        unchanged (a resized component's tasks have no counterpart)."""
        new = self.new_tasks
        return {old: nid for cid, olds in self.old_tasks.items()
                if cid not in self.resized for old, nid in zip(olds, new[cid], strict=True)}

    def summary(self, location: str, redistributed: list[str]) -> str:
        """One line for the log: what a restart carried over."""
        sizes = ", ".join(f"'{cid}' {old} -> {new} tasks"
                          for cid, (old, new) in sorted(self.resized.items()))
        return (f"rescaled checkpoint {location}: {sizes or 'task ids renumbered'}"
                + (f"; state redistributed by key for {', '.join(redistributed)}"
                   if redistributed else ""))

    def refusal(self, location: str) -> str:
        return (f"checkpoint location {location} was written by a different topology: "
                + "; ".join(self.structural)
                + ". Only parallelism may change between restarts on one checkpoint; use a new "
                  "checkpoint location, or restart the topology that wrote it")

    def check(self, location: str, conf: Mapping[str, Any], default_provider: str) -> None:
        """Raise `RescaleError` unless the topology can resume this checkpoint: no structural
        change, and every parallelism change carriable (see the module docstring)."""
        if self.structural:
            raise RescaleError(self.refusal(location))
        problems = []
        for cid, (old, new) in sorted(self.resized.items()):
            spec = self.topology.components[cid]
            what = f"parallelism of '{cid}' changed from {old} to {new}"
            if spec.kind == "spout":
                problems.append(f"{what}, but a spout's tasks own its source positions and "
                                "pending tuples, which a rescale does not move")
            elif is_stateful_role(spec.role) and spec.role != STATEFUL:
                problems.append(f"{what}, but it holds windows (role {spec.role}), which a "
                                "rescale does not redistribute")
            elif spec.role == STATEFUL:
                problem = _state_problem(self.topology, cid, conf, default_provider)
                if problem:
                    problems.append(f"{what}, but {problem}")
            elif spec.role not in (BASIC, RICH):
                problems.append(f"{what}, but a {spec.role} bolt keeps per-task state that a "
                                "rescale does not redistribute")
        moved = set(self.moved)
        for cid, spec in sorted(self.topology.components.items()):
            inputs = sorted({sub.component for sub in spec.inputs} & moved)
            if spec.role == STATEFUL_WINDOWED and cid not in self.resized and inputs:
                problems.append(
                    f"the task ids of {', '.join(repr(i) for i in inputs)} changed, and "
                    f"stateful windowed bolt '{cid}' records its inputs' task ids in its window "
                    "state")
        for cid in self.moved:
            spec = self.topology.components[cid]
            if cid in self.resized or not is_stateful_role(spec.role):
                continue
            name = provider_name(Config.effective_of(conf, spec.conf), default_provider)
            if name not in (MEMORY, DURABLE, REDIS):
                problems.append(
                    f"the task ids of '{cid}' changed (another component was rescaled), but its "
                    f"state provider {name!r} keeps state under the task ids")
        if problems:
            raise RescaleError(
                f"checkpoint location {location} cannot be resumed with this parallelism: "
                + "; ".join(problems)
                + ". Restart with the parallelism it was written with, or use a new checkpoint "
                  "location")

    def redistributed(self, conf: Mapping[str, Any], default_provider: str) -> list[str]:
        """The stateful bolts whose stores are rewritten (`redistribute`): resized, or
        store-backed with moved task ids (a store's namespace is named by the task id). Other
        moved components keep their snapshots, mapped by `task_map`."""
        return [cid for cid in self.moved
                if self.topology.components[cid].role == STATEFUL
                and _store_backed(conf, self.topology.components[cid].conf, default_provider)]


def _store_backed(conf: Mapping[str, Any], component_conf: Mapping[str, Any],
                  default_provider: str) -> bool:
    name = provider_name(Config.effective_of(conf, component_conf), default_provider)
    return name in (DURABLE, REDIS)


def _state_problem(topology: Topology, cid: str, conf: Mapping[str, Any],
                   default_provider: str) -> str | None:
    """Why the state of stateful bolt `cid` cannot be redistributed by key, or None."""
    spec = topology.components[cid]
    if not _store_backed(conf, spec.conf, default_provider):
        name = provider_name(Config.effective_of(conf, spec.conf), default_provider)
        return (f"its state provider is {name!r}; a rescale redistributes the state of the "
                "'durable' or 'redis' provider")
    keys = {sub.grouping.fields if isinstance(sub.grouping, FieldsGrouping) else None
            for sub in spec.inputs}
    if None in keys or len(keys) != 1:
        bad = [f"{sub.component}:{sub.stream} is {grouping_text(sub.grouping)}-grouped"
               for sub in spec.inputs if not isinstance(sub.grouping, FieldsGrouping)]
        return ("its state can only be redistributed by the key of a fields grouping on the "
                "same fields for every input, and "
                + (", ".join(bad) if bad else "its inputs are grouped on different fields"))
    return None


def key_fields(topology: Topology, cid: str) -> tuple[str, ...]:
    """The fields a stateful bolt's inputs are grouped on (checked by `Reshape.check`)."""
    grouping = topology.components[cid].inputs[0].grouping
    assert isinstance(grouping, FieldsGrouping)
    return grouping.fields


def compare(old: Shape, topology: Topology) -> Reshape:
    """How `topology` differs from the checkpoint's shape `old`."""
    mine = shape(topology)["components"]
    theirs = old["components"]
    out = Reshape(topology, old_tasks=task_ids_of(theirs))
    for cid in sorted(set(theirs) | set(mine)):
        if cid not in mine:
            out.structural.append(f"component '{cid}' was removed")
            continue
        if cid not in theirs:
            out.structural.append(f"component '{cid}' was added")
            continue
        a, b = theirs[cid], mine[cid]
        for key, what in (("kind", "kind"), ("role", "role"), ("class", "class")):
            if a[key] != b[key]:
                out.structural.append(f"{what} of '{cid}' changed from {a[key]} to {b[key]}")
        for stream in sorted(set(a["streams"]) | set(b["streams"])):
            before, after = a["streams"].get(stream), b["streams"].get(stream)
            if before is None:
                out.structural.append(f"stream '{stream}' of '{cid}' was added")
            elif after is None:
                out.structural.append(f"stream '{stream}' of '{cid}' was removed")
            elif list(before) != list(after):
                out.structural.append(
                    f"fields of stream '{stream}' of '{cid}' changed from ({', '.join(before)}) "
                    f"to ({', '.join(after)})")
        olds = {(c, s): g for c, s, g in a["inputs"]}
        news = {(c, s): g for c, s, g in b["inputs"]}
        for (c, s) in sorted(set(olds) | set(news)):
            arrow = f"{c}->{cid}" if s == "default" else f"{c}:{s}->{cid}"
            if (c, s) not in news:
                out.structural.append(f"input {arrow} was removed")
            elif (c, s) not in olds:
                out.structural.append(f"input {arrow} was added")
            elif olds[(c, s)] != news[(c, s)]:
                out.structural.append(
                    f"grouping of {arrow} changed from {olds[(c, s)]} to {news[(c, s)]}")
        if a["tasks"] != b["tasks"]:
            out.resized[cid] = (int(a["tasks"]), int(b["tasks"]))
    return out


# ---- moving key-value state -----------------------------------------------------------------
def owner(fields: tuple[str, ...], n: int) -> Callable[[Any], int]:
    """The task index (0..n-1) that a fields grouping on `fields` over `n` tasks routes a state
    key to. A state key is the grouping field's value, or the tuple of the values for several
    fields (the convention `redistribute` relies on).

    >>> route = owner(("word",), 3)
    >>> route("cow") == route("cow"), 0 <= route("cow") < 3
    (True, True)
    """
    choose = make_chooser(FieldsGrouping(fields), Fields(*fields), list(range(n)), 0)
    if len(fields) == 1:
        return lambda key: choose([key])[0]
    return lambda key: choose(list(key))[0]


def redistribute(cid: str, fields: tuple[str, ...], old_ids: Iterable[int],
                 new_ids: tuple[int, ...], extra: Iterable[str], committed: int,
                 open_state: Callable[[str], Any]) -> list[str]:
    """Move the committed key-value state of component `cid` from the stores of its old tasks
    to those of its new tasks, each key to the task its fields grouping routes it to.

    Every store is first rolled to transaction `committed` (versions up to it promoted, later
    ones discarded). The union of the old stores, the new ones and `extra` (namespaces an
    interrupted redistribution may have written) is read; then every key is written to its new
    owner before it is deleted anywhere else, so an interruption at any point leaves each key's
    committed value in at least one of those stores and running this again completes the move.
    Returns the namespaces read (what a retry must read too).

    >>> import os, tempfile
    >>> from squall.state.backends import SqliteStore
    >>> where = tempfile.mkdtemp()
    >>> def open_state(name):
    ...     return StoreKeyValueState(SqliteStore(os.path.join(where, name + ".sqlite")))
    >>> open_state("count-1").store.write_committed({"a": 1, "b": 2, "d": 3})
    >>> _ = redistribute("count", ("word",), [1], (1, 2), [], 0, open_state)
    >>> one, two = dict(open_state("count-1")), dict(open_state("count-2"))
    >>> sorted({**one, **two}.items()), len(one) + len(two)
    ([('a', 1), ('b', 2), ('d', 3)], 3)
    >>> route = owner(("word",), 2)
    >>> {route(k) for k in one}, {route(k) for k in two}
    ({0}, {1})
    """
    names_new = [namespace(cid, t) for t in new_ids]
    names = list(dict.fromkeys([*(namespace(cid, t) for t in old_ids), *names_new, *extra]))
    states = {name: open_state(name) for name in names}
    merged: dict[Any, Any] = {}
    held: dict[str, set[Any]] = {}
    for name, state in states.items():
        _roll_to(state, committed)
        held[name] = set()
        for key, value in state.store.items():
            merged.setdefault(key, value)
            held[name].add(key)
    route = owner(fields, len(new_ids))
    placed: dict[str, dict[Any, Any]] = {name: {} for name in names_new}
    for key, value in merged.items():
        placed[names_new[route(key)]][key] = value
    for name, puts in placed.items():
        states[name].store.write_committed(puts)
    for name, state in states.items():
        mine = placed.get(name, {})
        gone = {key: DELETED for key in held[name] if key not in mine}
        if gone:
            state.store.write_committed(gone)
    return names


def _roll_to(state: Any, committed: int) -> None:
    if not isinstance(state, StoreKeyValueState):
        raise RescaleError(f"cannot redistribute a {type(state).__name__}: not store-backed")
    state.sync(committed)


__all__ = [
    "SHAPE_VERSION",
    "RescaleError",
    "Reshape",
    "Shape",
    "compare",
    "key_fields",
    "owner",
    "redistribute",
    "shape",
    "task_ids_of",
]
