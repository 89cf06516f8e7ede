"""`WindowRole`: what a bolt task calls on the role adapter of a windowed component.

The task calls, in order: `setup` (the collector the component's `prepare` gets), then for each
input tuple `execute`, and once every spout is exhausted `end_of_input`. A snapshot of the task
(squall.task.snapshot) stores `saved()` next to the user's instance and gives it back to
`restore` of the restoring task's role. In a stateful topology the checkpointing
(squall.task.checkpointing) calls the checkpoint hooks (`init_state`, `pre_prepare`,
`pre_commit`, `pre_rollback`) of a stateful windowed component's role, never the instance's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from squall.components.context import TopologyContext
from squall.components.operators import WATERMARK_STREAM
from squall.partition_watermarks import PARTITIONS_STREAM
from squall.protocols import OutputCollectorLike
from squall.topology.config import SQUALL_SOURCE_EVENT_TIME_FIELD
from squall.topology.roles import is_windowed_role
from squall.topology.tuple import TICK_STREAM, Tuple


def source_partition_tasks(context: TopologyContext, n_inputs: int = 1,
                           input_of: Callable[[str], int] = lambda component: 0,
                           carried: list[bool] | None = None,
                           ) -> list[dict[int, str] | None]:
    """Per input, the upstream source tasks (and their components) whose partition events the
    component reads, when everything the input reads comes from such sources, directly or, for
    an input whose sources carry positions (`carried_inputs`), through bolts; else None (the
    input keeps its own rule)."""
    tasks: list[dict[int, str]] = [{} for _ in range(n_inputs)]
    data: list[set[str]] = [set() for _ in range(n_inputs)]
    resolve = input_resolver(context, input_of)
    for cid, stream in context.this_sources:
        i = resolve(cid)
        if i is None:
            return [None] * n_inputs
        if stream == PARTITIONS_STREAM:
            tasks[i].update((t, cid) for t in context.component_tasks(cid))
        elif stream not in (TICK_STREAM, WATERMARK_STREAM):
            data[i].add(cid)
    return [t if t and (data[i] <= set(t.values()) or (carried is not None and carried[i]))
            else None for i, t in enumerate(tasks)]


def input_resolver(context: TopologyContext,
                   input_of: Callable[[str], int]) -> Callable[[str], int | None]:
    """`input_of` extended to the partitioned sources an input reads through plain bolts (whose
    partition events the builder subscribes the component to): the input whose data passes
    through them; None for a source that feeds both inputs of a merge operator.

    Each direct data input's upstream is walked through bolts that are not windowed, as the
    builder does when it subscribes the component."""
    components = context.topology.components
    reached: dict[str, int | None] = {}
    walked: set[str] = set()
    for cid, stream in context.this_sources:
        if stream.startswith("_") or stream == "dead_letter" or cid in walked:
            continue
        walked.add(cid)
        i = input_of(cid)
        todo, seen = [cid], set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            spec = components[c]
            if spec.kind == "spout":
                reached[c] = i if reached.get(c, i) == i else None
            elif not is_windowed_role(spec.role):
                todo += [s.component for s in spec.inputs if not s.stream.startswith("_")]

    def resolve(component: str) -> int | None:
        if component in reached:
            return reached[component]
        return input_of(component)

    return resolve


def carried_inputs(context: TopologyContext, n_inputs: int = 1,
                   input_of: Callable[[str], int] = lambda component: 0) -> list[bool]:
    """Per input, whether its partitioned sources all carry positions with their records (each
    has `squall.source.event.time.field`, which the builder sets; squall.partition_watermarks).
    """
    sources: list[list[str]] = [[] for _ in range(n_inputs)]
    resolve = input_resolver(context, input_of)
    for cid, stream in context.this_sources:
        if stream == PARTITIONS_STREAM:
            i = resolve(cid)
            if i is None:
                return [False] * n_inputs  # one source feeds both inputs: none is carried
            sources[i].append(cid)
    components = context.topology.components
    return [bool(cids) and all(
        components[c].conf.get(SQUALL_SOURCE_EVENT_TIME_FIELD) is not None for c in cids)
        for cids in sources]


class CountedLog:
    """Logs what a windowed component drops or routes aside, rate-limited on processing time.

    The first `burst` are logged one line each; after that at most one line per `every_ms`
    says how many more there were since the last line (every one is still counted, and routed
    where the component routes it). Subclasses say what is logged (`FIRST`, `MORE`).
    """

    FIRST = "%s: %r"
    MORE = "%s: %d more (%d in all)"

    def __init__(self, logger: logging.Logger, component: str, *, burst: int = 5,
                 every_ms: int = 10_000) -> None:
        self.logger = logger
        self.component = component
        self.burst = burst
        self.every_ms = every_ms
        self.count = 0
        self._unlogged = 0
        self._last_ms = 0

    def _record(self, now_ms: int, *args: Any) -> None:
        self.count += 1
        if self.count <= self.burst:
            self.logger.warning(self.FIRST, self.component, *args)
            self._last_ms = now_ms
            return
        self._unlogged += 1
        if now_ms - self._last_ms >= self.every_ms:
            self.logger.warning(self.MORE, self.component, self._unlogged, self.count)
            self._last_ms, self._unlogged = now_ms, 0


class LateLog(CountedLog):
    """Logs the late tuples a windowed component drops (`CountedLog`).

    >>> import sys
    >>> logger = logging.getLogger("squall.example.late")
    >>> logger.addHandler(logging.StreamHandler(sys.stdout)); logger.propagate = False
    >>> late = LateLog(logger, "count", burst=1, every_ms=1000)
    >>> for now in range(0, 2100, 100):
    ...     late.record(("u", 5), 5, 900, now)
    count: late tuple ('u', 5) dropped (timestamp 5 < 900: the watermark less the allowed lateness)
    count: 10 more late tuples dropped (11 in all)
    count: 10 more late tuples dropped (21 in all)
    """

    FIRST = ("%s: late tuple %r dropped (timestamp %s < %s: the watermark less the allowed "
             "lateness)")
    MORE = "%s: %d more late tuples dropped (%d in all)"

    def record(self, values: Any, ts: int, limit: int | float | None, now_ms: int) -> None:
        self._record(now_ms, values, ts, limit)


class InvalidLog(CountedLog):
    """Logs the tuples a windowed component routes to `window_errors` for want of a valid
    timestamp: the first with its error, then how many more (`CountedLog`, one line first).

    >>> import sys
    >>> logger = logging.getLogger("squall.example.invalid")
    >>> logger.addHandler(logging.StreamHandler(sys.stdout)); logger.propagate = False
    >>> invalid = InvalidLog(logger, "high", every_ms=1000)
    >>> for now in (0, 500, 1000):
    ...     invalid.record(["a", "abc"], "ValueError: not a number", now)
    ... # doctest: +NORMALIZE_WHITESPACE
    high: tuple ['a', 'abc'] routed to 'window_errors': no valid timestamp (ValueError: not a
    number); give every tuple an integer timestamp in milliseconds (later ones are counted in
    the component's window_errors)
    high: 2 more tuples without a valid timestamp routed to 'window_errors' (3 in all)
    """

    FIRST = ("%s: tuple %r routed to 'window_errors': no valid timestamp (%s); give every "
             "tuple an integer timestamp in milliseconds (later ones are counted in the "
             "component's window_errors)")
    MORE = "%s: %d more tuples without a valid timestamp routed to 'window_errors' (%d in all)"

    def __init__(self, logger: logging.Logger, component: str, *,
                 every_ms: int = 10_000) -> None:
        super().__init__(logger, component, burst=1, every_ms=every_ms)

    def record(self, values: Any, error: str, now_ms: int) -> None:
        self._record(now_ms, values, error)


class WindowRole:
    """The framework's side of one windowed component in one task.

    Each windowed role has an adapter (squall.task.roles) that holds the framework's state for
    the component; this base says what the task calls, and passes the checkpoint hooks on to
    the component (a stateful windowed bolt's `init_state`, `pre_*` are the user's).
    """

    late_count = 0  # tuples found late since the runner last read it (squall.metrics)

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def held(self) -> int | None:
        """How many input tuples the windows hold now (None: not known for this role)."""
        return None

    @property
    def emits_unanchored(self) -> bool:
        """Whether the component's emits may be unanchored in a stateful topology: a window
        kept in state (a persistent stateful windowed bolt, an operator's panes) acks its input
        when it is queued, so what it emits later has no tuple tree to join."""
        return False

    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> Any:
        """Build the task's window machinery; returns the collector `prepare` gets."""
        raise NotImplementedError

    def execute(self, tup: Tuple, now_ms: int) -> None:
        """One input tuple (or tick) at processing time `now_ms`."""
        raise NotImplementedError

    def end_batch(self, batch_id: int, now_ms: int) -> None:
        """The end of a batch (a Spark micro-batch, a local runner's batch), after the
        component's own `on_batch_end`: processing-time triggers fire at `now_ms`."""

    def end_of_input(self, now_ms: int) -> None:
        """Every spout is exhausted: fire what remains and ack what is held."""
        raise NotImplementedError

    def saved(self) -> Any:
        """The framework state a snapshot of the task must carry (None: all on the instance)."""
        return None

    def restore(self, saved: Any, instance: Any) -> None:
        """Continue from a snapshot: `instance` is the restored component, `saved` what
        `saved()` returned when it was taken."""
        self.instance = instance

    def explained(self, tup: Tuple, exc: Exception) -> Exception:
        """The error `execute(tup)` raised, with what the component knows of its cause (a
        field of the wrong type: which field, which value); `exc` itself if nothing."""
        return exc

    # ---- the checkpoint protocol's hooks (stateful roles) ----------------------------------
    def init_state(self, state: Any) -> None:
        self.instance.init_state(state)

    def pre_prepare(self, txid: int) -> None:
        self.instance.pre_prepare(txid)

    def pre_commit(self, txid: int) -> None:
        self.instance.pre_commit(txid)

    def pre_rollback(self) -> None:
        self.instance.pre_rollback()
