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

import logging
import pickle
from collections.abc import Mapping
from typing import Any

from squall.components.windowed import (
    LATE_TUPLE_STREAM,
    PERSISTENT,
    TIMESTAMP_FIELD,
    WindowedBolt,
    detached,
)
from squall.errors import InvalidTopologyError, SquallError
from squall.topology import roles
from squall.topology.fields import Fields
from squall.topology.tuple import Origin, Tuple, is_tick_tuple
from squall.tuple_windows.manager import Activation, Late, WindowManager
from squall.tuple_windows.persistent import (
    DEFAULT_MAX_EVENTS_IN_MEMORY,
    Codec,
    PartitionedQueue,
    PersistentTupleWindow,
    PersistentWindowManager,
)
from squall.tuple_windows.window import TupleWindow

log = logging.getLogger("squall")

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
    _window_persistent = False

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
        self._window_persistent = True
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
        if MAX_EVENTS_IN_MEMORY in conf and not self.persistent:
            raise InvalidTopologyError(
                "with_max_events_in_memory(n) needs with_persistence()", component=component_id)

    def events_in_memory(self) -> int:
        """Persistent mode: how many window events are in memory now (for monitoring)."""
        manager = self.__dict__.get("_window_manager")
        if isinstance(manager, PersistentWindowManager):
            return manager.queue.events_in_memory()
        return 0 if manager is None else len(manager.events)

    # ---- the framework's side ----------------------------------------------------------------
    def _window_setup(self, conf: Mapping[str, Any], context: Any, out: Any) -> Any:
        collector = super()._window_setup(conf, context, out)
        spec = self._window_manager.spec
        streams = list(context.this_sources)
        self._sw_component = context.this_component_id
        self._sw_persistent = bool(conf.get(PERSISTENT))
        self._sw_field = None if self._sw_persistent else conf.get(MESSAGE_ID_FIELD)
        if self._sw_persistent:
            max_events = int(conf.get(MAX_EVENTS_IN_MEMORY) or DEFAULT_MAX_EVENTS_IN_MEMORY)
            fields = {(cid, stream): context.get_component_output_fields(cid, stream)
                      for cid, stream in streams}
            queue = PartitionedQueue(max_events, codec=TupleCodec(fields))
            self._window_manager = PersistentWindowManager(spec, streams, queue=queue)
        else:
            self._window_manager = MessageIdWindowManager(spec, streams)
        self._sw_sources = [(cid, stream, task) for cid, stream in streams
                            for task in context.component_tasks(cid)]
        self._sw_state: Any = None
        self._sw_ready = False
        self._sw_end_pending: int | None = None
        self._sw_received: dict[tuple[str, str, int], Any] = {}
        self._sw_recovery: dict[tuple[str, str, int], tuple[Any, Any]] | None = None
        self._sw_buffer: list[Tuple] = []
        self.recovered = 0  # message-id mode: tuples queued again after a restart
        self.dropped = 0  # message-id mode: replayed tuples that had already expired
        return collector

    def _sw_init(self, window_state: Any, now_ms: int) -> None:
        """After `init_state`: attach the window state; restore or start recovery."""
        self._sw_state = window_state
        manager = self._window_manager
        if self._sw_persistent:
            blob = window_state.get(MANAGER_KEY)
            if blob is not None:
                self._window_manager = manager = pickle.loads(blob)
            manager.queue.attach(window_state)
        else:
            found = {}
            for cid, stream, task in self._sw_sources:
                saved = window_state.get(("ids", cid, stream, task))
                if saved is not None:
                    found[(cid, stream, task)] = tuple(saved)
            if found:
                self._sw_recovery = found
                trigger = window_state.get(TRIGGER_KEY)
                if trigger is not None:
                    manager.restore_trigger(trigger)
        self._sw_ready = True
        if self._sw_end_pending is not None:
            self._window_end_of_input(self._sw_end_pending)

    def _sw_attach(self) -> None:
        """Spark: after the instance came from a snapshot, rebind the queue to the state."""
        state = self.__dict__.get("_squall_window_state")
        if state is not None:
            self._sw_state = state
            if self._sw_persistent:
                self._window_manager.queue.attach(state)

    def _sw_window_state(self) -> Any:
        # Set before init: a roll-forward COMMIT or a ROLLBACK can come before INITSTATE.
        return self.__dict__["_squall_window_state"]

    def _sw_prepare(self, txid: int) -> None:
        state = self._sw_window_state()
        if self._sw_persistent:
            manager: PersistentWindowManager = self._window_manager
            manager.queue.flush()
            state.put(MANAGER_KEY, pickle.dumps(manager, protocol=pickle.HIGHEST_PROTOCOL))
        state.prepare_commit(txid)

    def _sw_commit(self, txid: int) -> None:
        self._sw_window_state().commit(txid)

    def _sw_rollback(self) -> None:
        state = self._sw_window_state()
        state.rollback()
        if self._sw_persistent:
            # Back to the committed window: what came after it is replayed (its acks failed).
            blob = state.get(MANAGER_KEY)
            if blob is not None:
                self._window_manager = pickle.loads(blob)
            else:
                old = self._window_manager
                old.queue.reset_cache()
                self._window_manager = PersistentWindowManager(
                    old.spec, old.tracker.streams if old.tracker else (),
                    queue=PartitionedQueue(old.queue.max_events, codec=old.queue.codec))
            self._window_manager.queue.attach(state)

    # ---- tuples ------------------------------------------------------------------------------
    def _window_execute(self, tup: Tuple, now_ms: int) -> None:
        if self._sw_persistent:
            self._persistent_execute(tup, now_ms)
            return
        if is_tick_tuple(tup):
            if self._sw_recovery is None:  # the trigger is not running while recovering
                self._record(self._window_manager.tick(now_ms))
            return
        origin = tup._origin
        source = (origin.component, origin.stream, origin.task)
        msgid = self._message_id(tup)
        recovery = self._sw_recovery
        if recovery is not None and self._recover(tup, source, msgid, now_ms, recovery):
            return
        manager: MessageIdWindowManager = self._window_manager
        manager.ident = (source, msgid)
        seen = self._sw_received.get(source)
        if seen is None or msgid > seen:
            self._sw_received[source] = msgid
        if not manager.spec.event_time:
            self._record(manager.add(tup, now_ms, source=source))
            return
        try:
            ts = self._window_timestamp(tup)
        except Exception as exc:
            self._window_invalid(tup, exc)
            return
        self._record(manager.add(tup, now_ms, ts, (origin.component, origin.stream),
                                 origin.task))

    def _recover(self, tup: Tuple, source: tuple[str, str, int], msgid: Any, now_ms: int,
                 recovery: dict[tuple[str, str, int], tuple[Any, Any]]) -> bool:
        """While recovering: True if the tuple was handled (dropped, queued or buffered)."""
        saved = recovery.get(source)
        if saved is None:
            self._sw_buffer.append(tup)  # a source without saved ids: after recovery
            return True
        first_queued, last = saved
        if msgid > last:
            self._sw_buffer.append(tup)
            del recovery[source]
            if not recovery:
                self._finish_recovery(now_ms)
            return True
        if first_queued is None or msgid < first_queued:
            self.dropped += 1
            self._window_out.ack(tup)  # expired before the crash: its window is done
            return True
        # In the window when it was last evaluated: queue it again, firing nothing.
        manager: MessageIdWindowManager = self._window_manager
        manager.ident = (source, msgid)
        seen = self._sw_received.get(source)
        if seen is None or msgid > seen:
            self._sw_received[source] = msgid
        origin = tup._origin
        if manager.spec.event_time:
            try:
                ts = self._window_timestamp(tup)
            except Exception as exc:
                self._window_invalid(tup, exc)
                return True
            stream = (origin.component, origin.stream)
            manager.requeue(tup, ts, stream, origin.task)
        else:
            manager.requeue(tup, now_ms, source, 0)
        self.recovered += 1
        return True

    def _finish_recovery(self, now_ms: int) -> None:
        self._sw_recovery = None
        buffered, self._sw_buffer = self._sw_buffer, []
        for tup in buffered:
            try:
                self._window_execute(tup, now_ms)
            except Exception as exc:  # as BoltTask does for a failing execute
                self._window_out.report_error(exc)
                if tup._state == 0:
                    self._window_out.fail(tup)

    def _message_id(self, tup: Tuple) -> Any:
        field = self._sw_field
        try:
            value = tup[field]
        except (KeyError, IndexError, TypeError):
            origin = tup._origin
            raise MessageIdError(
                f"stateful windowed bolt {self._sw_component!r}: tuple from component "
                f"{origin.component!r} stream {origin.stream!r} has no message id field "
                f"{field!r}; its fields are {tup.fields.to_list()}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            origin = tup._origin
            raise MessageIdError(
                f"stateful windowed bolt {self._sw_component!r}: message id field {field!r} of a "
                f"tuple from component {origin.component!r} stream {origin.stream!r} must be "
                f"an int, got {value!r}")
        return value

    def _record(self, actions: list) -> None:
        """Apply the actions; after a window, record where the window and trigger stand."""
        self._window_apply(actions)
        if self._sw_state is None or not any(isinstance(a, Activation) for a in actions):
            return
        manager: MessageIdWindowManager = self._window_manager
        first: dict[tuple[str, str, int], Any] = {}
        for key in manager.keys:
            source, msgid = key[2]
            seen = first.get(source)
            if seen is None or msgid < seen:
                first[source] = msgid
        put = self._sw_state.put
        for source, last in self._sw_received.items():
            put(("ids", *source), (first.get(source), last))
        put(TRIGGER_KEY, manager.trigger_position())

    def _window_end_of_input(self, now_ms: int) -> None:
        if not self._sw_ready:
            self._sw_end_pending = now_ms  # on the local runner, before INITSTATE
            return
        self._sw_end_pending = None
        if self._sw_persistent:
            self._window_manager.listener = self._window_activate
            self._window_apply(self._window_manager.end_of_input(now_ms))
            return
        if self._sw_recovery is not None:
            self._finish_recovery(now_ms)  # no source will send past its recorded id
        self._record(self._window_manager.end_of_input(now_ms))

    # ---- persistent mode ---------------------------------------------------------------------
    def _persistent_execute(self, tup: Tuple, now_ms: int) -> None:
        manager: PersistentWindowManager = self._window_manager
        manager.listener = self._window_activate
        if is_tick_tuple(tup):
            self._window_apply(manager.tick(now_ms))
            return
        if not manager.spec.event_time:
            actions = manager.add(detached(tup), now_ms)
        else:
            try:
                ts = self._window_timestamp(tup)
            except Exception as exc:
                self._window_invalid(tup, exc)
                return
            origin = tup._origin
            actions = manager.add(detached(tup), now_ms, ts,
                                  (origin.component, origin.stream), origin.task)
        late = any(isinstance(a, Late) for a in actions)
        self._window_apply([a if not isinstance(a, Late) else Late(tup, a.ts, a.watermark)
                            for a in actions])
        if not late:
            self._window_out.ack(tup)  # queued in state: safe once the checkpoint commits

    def _window_activate(self, window: TupleWindow) -> None:
        if not self._sw_persistent:
            super()._window_activate(window)
            return
        # The window's tuples are acked already: results are emitted unanchored (as Storm).
        self._window_collector._anchors = None
        try:
            self.execute(window)
        except Exception as exc:
            self._window_out.report_error(exc)


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
        i = len(keys) if not keys or key >= keys[-1] else _bisect(keys, key)
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


def _bisect(keys: list, key: Any) -> int:
    from bisect import bisect_right

    return bisect_right(keys, key)


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
