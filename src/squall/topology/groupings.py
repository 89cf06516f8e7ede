"""Stream groupings: how a subscribing component's tasks share a stream.

A grouping here is a description (picklable, comparable); `make_chooser` turns it into the
function a running task calls on every emit. Fields grouping uses `stable_hash`, which gives the
same task in every process (Python's own `hash` of a string differs between processes).

>>> choose = make_chooser(FieldsGrouping(("word",)), Fields("word", "n"), [4, 5, 6], seed=0)
>>> choose(["cow", 1]) == choose(["cow", 7])
True
>>> make_chooser(GlobalGrouping(), Fields("x"), [9, 7, 8], seed=0)(["a"])
[7]
>>> make_chooser(AllGrouping(), Fields("x"), [3, 1, 2], seed=0)(["a"])
[1, 2, 3]
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import cloudpickle

from squall.topology.fields import Fields

Chooser = Callable[[Sequence[Any]], list[int]]


@runtime_checkable
class CustomStreamGrouping(Protocol):
    """A user-defined grouping (Storm's `CustomStreamGrouping`)."""

    def prepare(self, context: Any, stream: Any, target_tasks: list[int]) -> None: ...

    def choose_tasks(self, task_id: int, values: Sequence[Any]) -> list[int]: ...


@dataclass(frozen=True)
class Grouping:
    """Base of the grouping descriptions."""

    name = "grouping"


@dataclass(frozen=True)
class ShuffleGrouping(Grouping):
    name = "shuffle"


@dataclass(frozen=True)
class LocalOrShuffleGrouping(Grouping):
    name = "local_or_shuffle"


@dataclass(frozen=True)
class NoneGrouping(Grouping):
    name = "none"


@dataclass(frozen=True)
class FieldsGrouping(Grouping):
    fields: tuple[str, ...] = ()
    name = "fields"


@dataclass(frozen=True)
class AllGrouping(Grouping):
    name = "all"


@dataclass(frozen=True)
class GlobalGrouping(Grouping):
    name = "global"


@dataclass(frozen=True)
class DirectGrouping(Grouping):
    name = "direct"


@dataclass(frozen=True)
class CustomGrouping(Grouping):
    grouping: Any = field(default=None, compare=False)
    name = "custom"


def grouping_text(grouping: Grouping) -> str:
    """How a grouping is shown in messages and pictures: `fields(word)`, `shuffle`, ...

    >>> grouping_text(FieldsGrouping(("word", "lang")))
    'fields(word, lang)'
    >>> grouping_text(ShuffleGrouping())
    'shuffle'
    """
    if isinstance(grouping, FieldsGrouping):
        return f"fields({', '.join(grouping.fields)})"
    if isinstance(grouping, CustomGrouping):
        return f"custom({type(grouping.grouping).__qualname__})"
    return grouping.name


def _hash_bytes(value: Any, out: list[bytes]) -> None:
    # Type tags keep 1 and "1" and True apart; the encoding is identical in every process.
    cls = value.__class__
    if cls is str:
        out.append(b"s")
        out.append(value.encode("utf-8", "surrogatepass"))
    elif cls is int:
        out.append(b"i")
        out.append(str(value).encode())
    elif cls is bool or value is None:
        out.append(b"b" + repr(value).encode())
    elif cls is float:
        out.append(b"f")
        out.append(struct.pack("<d", value))
    elif cls is bytes:
        out.append(b"y")
        out.append(value)
    elif isinstance(value, (tuple, list)):
        out.append(b"(")
        for item in value:
            _hash_bytes(item, out)
            out.append(b",")
        out.append(b")")
    elif isinstance(value, str):
        _hash_bytes(str(value), out)
    elif isinstance(value, int):
        _hash_bytes(int(value), out)
    else:
        raise TypeError(
            f"a value of type {cls.__name__} cannot be used for fields grouping; use str, int, "
            "float, bool, None, bytes, or tuples and lists of those"
        )


def stable_hash(values: Sequence[Any]) -> int:
    """A hash of `values` that is the same in every process and run.

    >>> stable_hash(["cow"]) == stable_hash(("cow",))
    True
    """
    if len(values) == 1 and values[0].__class__ is str:
        return zlib.crc32(values[0].encode("utf-8", "surrogatepass"))
    out: list[bytes] = []
    for value in values:
        _hash_bytes(value, out)
        out.append(b"\x00")
    return zlib.crc32(b"".join(out))


_MEMO = "field_memo"


def field_memo(chooser: Chooser) -> tuple[int, dict[str, int]] | None:
    """`(index, memo)` of a one-field fields grouping's chooser, else None: the target task of
    the string key `values[index]` is `memo[key]` when present (the chooser's own answer, which
    it fills on a miss). Other keys, and keys not yet seen, go through the chooser.

    >>> choose = make_chooser(FieldsGrouping(("word",)), Fields("n", "word"), [4, 5, 6], seed=0)
    >>> index, memo = field_memo(choose)
    >>> index, memo
    (1, {})
    >>> choose([1, "cow"]) == [memo["cow"]]
    True
    >>> field_memo(make_chooser(GlobalGrouping(), Fields("x"), [9], seed=0)) is None
    True
    """
    return getattr(chooser, _MEMO, None)


# Storm's key that turns its load- and locality-aware shuffle into a plain one (here: a shuffle
# between equal task counts spread over all the target's tasks again, not task i -> task i).
DISABLE_LOAD_AWARE = "topology.disable.loadaware.messaging"


def forwards(grouping: Grouping, sources: int, targets: int, *, load_aware: bool = True) -> bool:
    """Whether `grouping` from a component with `sources` tasks to one with `targets` sends
    everything task i emits (tasks in id order) to the target's task i.

    `local_or_shuffle` does between equal task counts, as if each task index were a worker of
    its own. So does `shuffle` unless `load_aware` is false (Storm's `DISABLE_LOAD_AWARE`):
    Storm 2's shuffle is `LoadAwareShuffleGrouping`, which sends to the tasks in the emitter's
    own worker while their load is low: which task gets a tuple is not something a Storm
    topology can rely on, and forwarding keeps each upstream task's share. With other counts
    both are a shuffle.

    >>> forwards(ShuffleGrouping(), 2, 2), forwards(ShuffleGrouping(), 2, 3)
    (True, False)
    >>> forwards(ShuffleGrouping(), 2, 2, load_aware=False)
    False
    >>> forwards(LocalOrShuffleGrouping(), 2, 2, load_aware=False)
    True
    """
    if sources != targets:
        return False
    if isinstance(grouping, LocalOrShuffleGrouping):
        return True
    return load_aware and isinstance(grouping, ShuffleGrouping)


def make_chooser(
    grouping: Grouping,
    fields: Fields,
    target_tasks: Sequence[int],
    seed: int,
    *,
    source_task: int = 0,
    source_tasks: Sequence[int] = (),
    context: Any = None,
    stream: Any = None,
    load_aware: bool = True,
) -> Chooser:
    """The function that picks destination tasks for one emit under `grouping`.

    `seed` makes shuffle and none groupings repeatable; it should differ per emitting task.
    `source_tasks` are the emitting component's tasks (`source_task` among them): a
    `local_or_shuffle` grouping, and a `shuffle` one while `load_aware`, from a component with
    as many tasks as the target sends from its task i (in task order) to the target's task i,
    a worker per task index, as Flink's forward partitioning (`forwards`); with other task
    counts it is a shuffle.

    >>> forward = make_chooser(ShuffleGrouping(), Fields("x"), [7, 8], seed=0,
    ...                        source_task=4, source_tasks=[3, 4])
    >>> forward(["a"]), forward(["b"])
    ([8], [8])
    >>> spread = make_chooser(ShuffleGrouping(), Fields("x"), [7, 8], seed=0,
    ...                       source_task=4, source_tasks=[3, 4], load_aware=False)
    >>> sorted(spread(["a"]) + spread(["b"]))
    [7, 8]
    """
    tasks = sorted(target_tasks)
    n = len(tasks)
    if (source_task in source_tasks
            and forwards(grouping, len(source_tasks), n, load_aware=load_aware)):
        peer = [tasks[sorted(source_tasks).index(source_task)]]
        return lambda values: list(peer)
    if isinstance(grouping, FieldsGrouping):
        if len(grouping.fields) == 1:
            i = fields.field_index(grouping.fields[0])

            # String keys repeat (words, user ids), so their task is memoized; only strings,
            # because 1, 1.0 and True are equal dict keys that stable_hash keeps apart. The cache
            # is dropped past 2^16 keys to bound memory on high-cardinality keys.
            cache: dict[str, int] = {}

            def choose_one_field(values: Sequence[Any]) -> list[int]:
                v = values[i]
                if v.__class__ is not str:
                    return [tasks[stable_hash((v,)) % n]]
                chosen = cache.get(v)
                if chosen is None:
                    chosen = tasks[zlib.crc32(v.encode("utf-8", "surrogatepass")) % n]
                    if len(cache) >= 65_536:
                        cache.clear()
                    cache[v] = chosen
                return [chosen]

            # The memo is exposed (`field_memo`) so that a collector can look a known key up
            # without calling the chooser; a miss still goes through it.
            setattr(choose_one_field, _MEMO, (i, cache))
            return choose_one_field
        idx = [fields.field_index(f) for f in grouping.fields]

        def choose_fields(values: Sequence[Any]) -> list[int]:
            return [tasks[stable_hash([values[j] for j in idx]) % n]]

        return choose_fields
    if isinstance(grouping, (ShuffleGrouping, LocalOrShuffleGrouping)):
        # Storm's ShuffleGrouping: walk a shuffled list of the tasks round robin, reshuffling
        # after each pass, so every task gets an even share.
        rng = random.Random(seed)
        order = list(tasks)
        rng.shuffle(order)
        state = [0]

        getrandbits = rng.getrandbits

        def choose_shuffle(values: Sequence[Any]) -> list[int]:
            k = state[0]
            if k == n:
                if n == 2:
                    # Two tasks reshuffle every other tuple: one random bit picks the order
                    # (uniform, as random.shuffle, at a seventh of its 440 ns).
                    if getrandbits(1):
                        order.reverse()
                else:
                    rng.shuffle(order)
                k = 0
            state[0] = k + 1
            return [order[k]]

        return choose_shuffle
    if isinstance(grouping, NoneGrouping):
        rng = random.Random(seed)
        return lambda values: [tasks[rng.randrange(n)]]
    if isinstance(grouping, AllGrouping):
        return lambda values: list(tasks)
    if isinstance(grouping, GlobalGrouping):
        lowest = [tasks[0]]
        return lambda values: list(lowest)
    if isinstance(grouping, CustomGrouping):
        # Each emitting task gets its own copy, prepared once, as Storm deserializes one per
        # task: a stateful grouping (round robin, say) must not share state across tasks or runs.
        custom = cloudpickle.loads(cloudpickle.dumps(grouping.grouping))
        custom.prepare(context, stream, list(tasks))
        valid = set(tasks)

        def choose_custom(values: Sequence[Any]) -> list[int]:
            chosen = list(custom.choose_tasks(source_task, values))
            for t in chosen:
                if t not in valid:
                    raise ValueError(
                        f"custom grouping {type(custom).__name__} chose task {t}, "
                        f"which is not one of the target tasks {tasks}"
                    )
            return chosen

        return choose_custom
    if isinstance(grouping, DirectGrouping):
        return lambda values: []  # direct streams are routed by emit_direct alone
    raise TypeError(f"unknown grouping {grouping!r}")
