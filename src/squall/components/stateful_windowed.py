"""`StatefulWindowedBolt`: a windowed bolt with checkpointed state (Storm's stateful windowing).

The user implements `init_state(state)` (a `KeyValueState`, as for `StatefulBolt`) and
`execute(window)`, and chooses how windows survive a restart:

* `with_message_id_field(name)` (Storm's `StatefulWindowedBoltExecutor`): each input tuple carries
  a message id, increasing per source task and stream and the same when replayed. After every
  window the bolt records, in its window state (namespace `<component>-<task>-window`), per
  source task and stream, the first id still queued and the last id received, and where its
  trigger stands. After a restart, replayed tuples already expired are acked and dropped, those
  that were in the window when it was last evaluated are queued again without firing anything,
  and the trigger resumes once every source has sent a tuple past its recorded id: no window is
  evaluated twice and none is skipped. Input tuples are acked when they leave the window; emits
  are anchored to the window's tuples.
* `with_persistence()` (Storm's `PersistentWindowedBoltExecutor`): the window's contents are kept
  in the window state, in partitions, with at most `with_max_events_in_memory(n)` events in memory
  (default 1,000,000); the trigger's position is saved with them at every checkpoint. Each input
  tuple is acked as soon as it is queued (the ack is held until the checkpoint commits); emits
  are unanchored. A window is read lazily while `execute` runs: iterate it or call `get()`;
  `get_new()`/`get_expired()` are not available. On the local runner this is at-least-once, as
  Storm: a crash after a commit but before its acks reach the spout replays tuples the window
  already holds, and they are queued again (a window may then be evaluated twice).

The bolt holds the configuration and the state hooks; the window, its state and the recovery are
the framework's, held by the task's role adapter (squall.task.roles.stateful_windowed).
Both run on the local runner (Storm's checkpoint protocol) and on Spark (each micro-batch commits
the state under its batch id). The state and the window contents go through the configured
provider (`topology.state.provider`: memory, durable, redis).

A sliding sum whose running total is state (Storm's StatefulWindowingTopology):

>>> from squall import Count, Fields, TopologyBuilder, Values
>>> from squall.testing import FixedTupleSpout, complete_topology
>>> class SlidingSum(StatefulWindowedBolt):
...     def init_state(self, state): self.state = state
...     def execute(self, window):
...         total = self.state.get("total", 0) + sum(t["n"] for t in window.get())
...         self.state.put("total", total)
...         self.collector.emit(Values(total))
...     def declare_output_fields(self, d): d.declare(Fields("total"))
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[i, i] for i in range(1, 7)], Fields("id", "n")))
>>> bolt = SlidingSum().with_tumbling_window(Count(3)).with_message_id_field("id")
>>> _ = b.set_bolt("sum", bolt).shuffle_grouping("numbers")
>>> complete_topology(b.create_topology()).tuples("sum")
[[6], [21]]
>>> bolt = SlidingSum().with_tumbling_window(Count(3)).with_persistence()
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[i, i] for i in range(1, 7)], Fields("id", "n")))
>>> _ = b.set_bolt("sum", bolt.with_max_events_in_memory(100)).shuffle_grouping("numbers")
>>> complete_topology(b.create_topology()).tuples("sum")
[[6], [21]]
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from squall.components.windowed import (
    LATE_TUPLE_STREAM,
    PERSISTENT,
    SOURCE_WATERMARKS,
    TIMESTAMP_FIELD,
    WindowedBolt,
)
from squall.errors import InvalidTopologyError, SquallError
from squall.topology import roles
from squall.topology.fields import Fields
from squall.topology.tuple import Origin, Tuple
from squall.tuple_windows.manager import WindowManager
from squall.tuple_windows.persistent import Codec, PersistentTupleWindow

MESSAGE_ID_FIELD = "topology.bolts.message.id.field.name"  # Storm's key
MAX_EVENTS_IN_MEMORY = "squall.window.max.events.in.memory"

MANAGER_KEY = "manager"  # persistent mode: the manager (trigger, eviction, partition index)
TRIGGER_KEY = "trigger"  # message-id mode: where the trigger stood at the last window


class MessageIdError(SquallError, ValueError):
    """A tuple of a stateful windowed bolt has no valid message id."""


class StatefulWindowedBolt(WindowedBolt):
    """A windowed bolt with state: implement `init_state(state)` and `execute(window)`.

    Configure the window as for `WindowedBolt`, then either `with_message_id_field(name)` or
    `with_persistence()` (optionally `with_max_events_in_memory(n)`). The hooks `pre_prepare`,
    `pre_commit` and `pre_rollback` are those of `StatefulBolt`.
    """

    role = roles.STATEFUL_WINDOWED

    def init_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement init_state(state)")

    def pre_prepare(self, txid: int) -> None:
        """Called before the state is prepared for transaction `txid`."""

    def pre_commit(self, txid: int) -> None:
        """Called before transaction `txid` of the state is committed."""

    def pre_rollback(self) -> None:
        """Called before the state is rolled back to its last commit."""

    # ---- configuration -----------------------------------------------------------------------
    def with_message_id_field(self, name: str):
        """Recover windows from replays: `name` is a field holding an id that increases per
        source task and stream and is the same when the tuple is replayed."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"message id field must be a non-empty string, got {name!r}")
        self._window_conf()[MESSAGE_ID_FIELD] = name
        return self

    def with_persistence(self):
        """Keep the window's contents in state (bounded memory; no message ids needed)."""
        self._window_conf()[PERSISTENT] = True
        return self

    def with_max_events_in_memory(self, n: int):
        """With persistence: at most `n` window events in memory (default 1,000,000)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"max events in memory must be a positive int, got {n!r}")
        self._window_conf()[MAX_EVENTS_IN_MEMORY] = n
        return self

    @property
    def persistent(self) -> bool:
        return bool(self._window_conf().get(PERSISTENT))

    def check_window(self, component_id: str) -> None:
        super().check_window(component_id)
        conf = self._window_conf()
        if not self.persistent and MESSAGE_ID_FIELD not in conf:
            raise InvalidTopologyError(
                f"stateful windowed bolt {type(self).__name__} needs with_message_id_field(name) "
                "(recovery from replayed tuples) or with_persistence() (window kept in state)",
                component=component_id)
        if conf.get(SOURCE_WATERMARKS) and not self.persistent:
            raise InvalidTopologyError(
                "source watermarks (with_source_watermarks) need with_persistence() in a stateful "
                "windowed bolt: message-id mode rebuilds its windows from replayed tuples, whose "
                "partitions it does not track", component=component_id)
        if MAX_EVENTS_IN_MEMORY in conf and not self.persistent:
            raise InvalidTopologyError(
                "with_max_events_in_memory(n) needs with_persistence()", component=component_id)

    def events_in_memory(self) -> int:
        """Persistent mode: how many window events are in memory now (for monitoring)."""
        side = self._task_side
        return 0 if side is None else side.events_in_memory()


class MessageIdWindowManager(WindowManager):
    """The window manager of message-id mode: an event's identity is `(source, message id)`,
    the same when the tuple is replayed, so the trigger's position can be saved and restored.

    `ident` is set by the bolt before each `add`/`requeue`. Keys are (ts, source, ident): within
    a timestamp, events are ordered by source and message id, so a replay rebuilds the same order.
    """

    ident: Any = None

    def add(self, event: Any, now_ms: int, ts: int | None = None, stream: Any = None,
            source_task: int = 0, source: Any = ()) -> list:
        self._source = source
        return super().add(event, now_ms, ts, stream, source_task)

    def _insert(self, event: Any, ts: int, source: Any) -> None:
        self.seq += 1
        key = (ts, source or getattr(self, "_source", ()), self.ident)
        keys = self.keys
        i = len(keys) if not keys or key >= keys[-1] else bisect_right(keys, key)
        keys.insert(i, key)
        self.ts.insert(i, ts)
        self.events.insert(i, event)

    def requeue(self, event: Any, ts: int, stream: Any, source_task: int) -> None:
        """Queue an event again during recovery: no trigger, no lateness; feeds the watermark
        (it was below the one at the crash, so no later tuple becomes late because of it)."""
        if self.spec.event_time:
            self._insert(event, ts, (stream, source_task))
            assert self.tracker is not None
            self.tracker.track(stream, ts)
        else:
            self._insert(event, ts, stream)

    def trigger_position(self) -> dict[str, Any]:
        """What the trigger needs to resume after a restart, in replay-stable terms."""
        return {"count_since": self.count_since, "cursor": self.cursor,
                "next_end": self.next_end if self.spec.event_time else None,
                "prev_window": set(self.prev_window)}

    def restore_trigger(self, position: Mapping[str, Any]) -> None:
        self.count_since = int(position.get("count_since") or 0)
        self.cursor = position.get("cursor")
        self.next_end = position.get("next_end")
        self.prev_window = set(position.get("prev_window") or ())


class TupleCodec(Codec):
    """What a persistent window stores per tuple: its values and where it came from."""

    def __init__(self, fields: Mapping[tuple[str, str], Fields]) -> None:
        self.fields = dict(fields)
        self._origins: dict[tuple[str, str, int], Origin] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"fields": self.fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fields"])  # type: ignore[misc]

    def encode(self, event: Tuple) -> Any:
        origin = event._origin
        return (list(event.values), origin.component, origin.stream, origin.task)

    def decode(self, stored: Any) -> Tuple:
        values, component, stream, task = stored
        key = (component, stream, task)
        origin = self._origins.get(key)
        if origin is None:
            fields = self.fields.get((component, stream)) or Fields(
                *[f"field{i}" for i in range(len(values))])
            origin = self._origins[key] = Origin(fields, component, stream, task)
        return Tuple(values, origin)


__all__ = ["LATE_TUPLE_STREAM", "MESSAGE_ID_FIELD", "TIMESTAMP_FIELD", "MessageIdError",
           "PersistentTupleWindow", "StatefulWindowedBolt"]
