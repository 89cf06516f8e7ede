"""The stateful-windowed role: the framework's side of one `StatefulWindowedBolt` in one task.

The bolt (squall.components.stateful_windowed) holds the user's configuration and state hooks.
`StatefulWindowedRole` holds, on top of what `WindowedRole` holds, the bolt's window state
(namespace `<component>-<task>-window`, created by the checkpointing) and what the chosen mode
needs: in message-id mode the ids received per source, the recovery plan after a restart and
the tuples buffered while recovering; in persistent mode the window manager whose queue lives
in the window state. The checkpointing (squall.task.checkpointing) drives it through explicit
calls: the checkpoint hooks (`init_state`, `pre_prepare`, `pre_commit`, `pre_rollback`, which
call the bolt's) and the window state's own steps (`attach_window_state`, `init_window`,
`prepare_window_state`, `commit_window_state`, `rollback_window_state`, `reattach`). The design
is in docs/design/state.md.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from typing import Any

from squall.components.context import TopologyContext
from squall.components.stateful_windowed import (
    MANAGER_KEY,
    MAX_EVENTS_IN_MEMORY,
    MESSAGE_ID_FIELD,
    TRIGGER_KEY,
    MessageIdError,
    MessageIdWindowManager,
    StatefulWindowedBolt,
    TupleCodec,
)
from squall.components.windowed import PERSISTENT, SOURCE_WATERMARKS, detached
from squall.partition_watermarks import PARTITIONS_STREAM, PartitionWatermarks
from squall.protocols import OutputCollectorLike
from squall.state.base import State
from squall.task.collectors import WindowedOutputCollector
from squall.task.roles.base import carried_inputs, source_partition_tasks
from squall.task.roles.windowed import WindowedRole
from squall.topology.tuple import Tuple, is_tick_tuple
from squall.tuple_windows.manager import Activation, Late, WindowManager
from squall.tuple_windows.persistent import (
    DEFAULT_MAX_EVENTS_IN_MEMORY,
    PartitionedQueue,
    PersistentWindowManager,
)
from squall.tuple_windows.spec import WindowSpec
from squall.tuple_windows.window import TupleWindow

log = logging.getLogger("squall")

Source = tuple[str, str, int]  # (component, stream, task) a tuple came from

# What a task snapshot carries on top of `WindowedRole`'s (see `WindowedRole.saved`).
_SAVED = ("component", "persistent", "id_field", "sources", "window_state", "ready",
          "end_pending", "received", "recovery", "buffer", "recovered", "dropped")


class StatefulWindowedRole(WindowedRole):
    """The role adapter of the `stateful-windowed` role (see the module doc)."""

    instance: StatefulWindowedBolt

    def __init__(self, instance: StatefulWindowedBolt) -> None:
        super().__init__(instance)
        # The window state, from the checkpointing (before INITSTATE on the local runner: a
        # roll-forward COMMIT or a ROLLBACK can come first); `ready` once `init_window` ran.
        self.window_state: State | None = None
        self.ready = False

    @property
    def emits_unanchored(self) -> bool:
        """Persistent mode acks each tuple when it is queued: emits are unanchored."""
        return self.instance.persistent

    # ---- set up, snapshots ---------------------------------------------------------------
    def setup(self, conf: Mapping[str, Any], context: TopologyContext,
              out: OutputCollectorLike) -> WindowedOutputCollector:
        self.persistent = bool(conf.get(PERSISTENT))
        collector = super().setup(conf, context, out)
        streams = list(context.this_sources)
        self.component = context.this_component_id
        self.id_field: str | None = None if self.persistent else conf.get(MESSAGE_ID_FIELD)
        self.sources: list[Source] = [(cid, stream, task) for cid, stream in streams
                                      for task in context.component_tasks(cid)]
        self.ready = False
        self.end_pending: int | None = None
        self.received: dict[Source, Any] = {}
        self.recovery: dict[Source, tuple[Any, Any]] | None = None
        self.buffer: list[Tuple] = []
        self.recovered = 0  # message-id mode: tuples queued again after a restart
        self.dropped = 0  # message-id mode: replayed tuples that had already expired
        return collector

    def new_manager(self, spec: WindowSpec, conf: Mapping[str, Any],
                    context: TopologyContext) -> WindowManager:
        """Persistent mode: a manager whose queue lives in the window state (at most
        `with_max_events_in_memory` events in memory); message-id mode: one that keeps the
        ids of what it holds."""
        streams = [s for s in context.this_sources if s[1] != PARTITIONS_STREAM]
        if not self.persistent:
            return MessageIdWindowManager(spec, streams)
        # Positions carried from the sources, as the plain windowed bolt's (WindowedRole).
        carried = bool(spec.event_time and carried_inputs(context)[0])
        partitions = source_partition_tasks(context, carried=[carried])[0] if (
            carried or conf.get(SOURCE_WATERMARKS)) else None
        max_events = int(conf.get(MAX_EVENTS_IN_MEMORY) or DEFAULT_MAX_EVENTS_IN_MEMORY)
        fields = {(cid, stream): context.get_component_output_fields(cid, stream)
                  for cid, stream in streams}
        queue = PartitionedQueue(max_events, codec=TupleCodec(fields))
        return PersistentWindowManager(spec, streams, queue=queue, partition_tasks=partitions,
                                       carried=carried and bool(partitions))

    def saved(self) -> dict[str, Any]:
        saved = super().saved()
        saved.update((name, getattr(self, name)) for name in _SAVED if name in self.__dict__)
        return saved

    def events_in_memory(self) -> int:
        manager = self.__dict__.get("manager")
        if isinstance(manager, PersistentWindowManager):
            return manager.queue.events_in_memory()
        return super().events_in_memory()

    # The checkpoint protocol's hooks (init_state, pre_*) are the bolt's own: WindowRole's.

    # ---- the window state: driven by the checkpointing ------------------------------------
    def attach_window_state(self, window_state: State) -> None:
        """The window state the checkpointing created (`<component>-<task>-window`)."""
        self.window_state = window_state

    def init_window(self, now_ms: int) -> None:
        """After the bolt's `init_state`: restore the window from its state, or start
        recovery from replayed tuples."""
        window_state = self._window_state()
        if self.persistent:
            manager = self.manager
            blob = window_state.get(MANAGER_KEY)
            if blob is not None:
                self.manager = manager = pickle.loads(blob)
            assert isinstance(manager, PersistentWindowManager)
            manager.queue.attach(window_state)
        else:
            found = {}
            for cid, stream, task in self.sources:
                saved = window_state.get(("ids", cid, stream, task))
                if saved is not None:
                    found[(cid, stream, task)] = tuple(saved)
            if found:
                self.recovery = found
                trigger = window_state.get(TRIGGER_KEY)
                if trigger is not None:
                    self._ids_manager().restore_trigger(trigger)
        self.ready = True
        if self.end_pending is not None:
            self.end_of_input(self.end_pending)

    def reattach(self) -> None:
        """Spark: after the task came from a snapshot, rebind the queue to the window state
        (a queue does not pickle its state)."""
        if self.persistent and self.window_state is not None:
            manager = self.manager
            assert isinstance(manager, PersistentWindowManager)
            manager.queue.attach(self.window_state)

    def prepare_window_state(self, txid: int) -> None:
        state = self._window_state()
        if self.persistent:
            manager = self.manager
            assert isinstance(manager, PersistentWindowManager)
            manager.queue.flush()
            state.put(MANAGER_KEY, pickle.dumps(manager, protocol=pickle.HIGHEST_PROTOCOL))
        state.prepare_commit(txid)

    def commit_window_state(self, txid: int) -> None:
        self._window_state().commit(txid)

    def rollback_window_state(self) -> None:
        state = self._window_state()
        state.rollback()
        if self.persistent:
            # Back to the committed window: what came after it is replayed (its acks failed).
            blob = state.get(MANAGER_KEY)
            if blob is not None:
                self.manager = pickle.loads(blob)
            else:
                old = self.manager
                assert isinstance(old, PersistentWindowManager)
                old.queue.reset_cache()
                self.manager = PersistentWindowManager(
                    old.spec, old.tracker.streams if old.tracker else (),
                    queue=PartitionedQueue(old.queue.max_events, codec=old.queue.codec))
                if old.partitions is not None:  # with source watermarks: none seen yet
                    p = old.partitions
                    self.manager.partitions = PartitionWatermarks(p.tasks, p.delay,
                                                                  p.component_of)
            manager = self.manager
            assert isinstance(manager, PersistentWindowManager)
            manager.queue.attach(state)

    def _window_state(self) -> Any:
        state = self.window_state
        if state is None:
            raise RuntimeError(f"stateful windowed bolt {self.component!r}: the checkpointing "
                               "has not attached its window state")
        return state

    def _ids_manager(self) -> MessageIdWindowManager:
        manager = self.manager
        assert isinstance(manager, MessageIdWindowManager)
        return manager

    # ---- tuples --------------------------------------------------------------------------
    def execute(self, tup: Tuple, now_ms: int) -> None:
        if tup._origin.stream == PARTITIONS_STREAM:
            self._partition_event(tup, now_ms)
            return
        if self.persistent:
            self._persistent_execute(tup, now_ms)
            return
        manager = self._ids_manager()
        if is_tick_tuple(tup):
            if self.recovery is None:  # the trigger is not running while recovering
                self._record(manager.tick(now_ms))
            return
        origin = tup._origin
        source = (origin.component, origin.stream, origin.task)
        msgid = self._message_id(tup)
        recovery = self.recovery
        if recovery is not None and self._recover(tup, source, msgid, now_ms, recovery):
            return
        manager.ident = (source, msgid)
        seen = self.received.get(source)
        if seen is None or msgid > seen:
            self.received[source] = msgid
        if not manager.spec.event_time:
            self._record(manager.add(tup, now_ms, source=source))
            return
        try:
            ts = self.timestamp(tup)
        except Exception as exc:
            self.invalid(tup, exc)
            return
        self._record(manager.add(tup, now_ms, ts, (origin.component, origin.stream),
                                 origin.task))

    def _recover(self, tup: Tuple, source: Source, msgid: Any, now_ms: int,
                 recovery: dict[Source, tuple[Any, Any]]) -> bool:
        """While recovering: True if the tuple was handled (dropped, queued or buffered)."""
        saved = recovery.get(source)
        if saved is None:
            self.buffer.append(tup)  # a source without saved ids: after recovery
            return True
        first_queued, last = saved
        if msgid > last:
            self.buffer.append(tup)
            del recovery[source]
            if not recovery:
                self._finish_recovery(now_ms)
            return True
        if first_queued is None or msgid < first_queued:
            self.dropped += 1
            self.out.ack(tup)  # expired before the crash: its window is done
            return True
        # In the window when it was last evaluated: queue it again, firing nothing.
        manager = self._ids_manager()
        manager.ident = (source, msgid)
        seen = self.received.get(source)
        if seen is None or msgid > seen:
            self.received[source] = msgid
        origin = tup._origin
        if manager.spec.event_time:
            try:
                ts = self.timestamp(tup)
            except Exception as exc:
                self.invalid(tup, exc)
                return True
            stream = (origin.component, origin.stream)
            manager.requeue(tup, ts, stream, origin.task)
        else:
            manager.requeue(tup, now_ms, source, 0)
        self.recovered += 1
        return True

    def _finish_recovery(self, now_ms: int) -> None:
        self.recovery = None
        buffered, self.buffer = self.buffer, []
        for tup in buffered:
            try:
                self.execute(tup, now_ms)
            except Exception as exc:  # as BoltTask does for a failing execute
                self.out.report_error(exc)
                if tup._state == 0:
                    self.out.fail(tup)

    def _message_id(self, tup: Tuple) -> Any:
        field = self.id_field
        try:
            value = tup[field]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            origin = tup._origin
            raise MessageIdError(
                f"stateful windowed bolt {self.component!r}: tuple from component "
                f"{origin.component!r} stream {origin.stream!r} has no message id field "
                f"{field!r}; its fields are {tup.fields.to_list()}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            origin = tup._origin
            raise MessageIdError(
                f"stateful windowed bolt {self.component!r}: message id field {field!r} of a "
                f"tuple from component {origin.component!r} stream {origin.stream!r} must be "
                f"an int, got {value!r}")
        return value

    def _record(self, actions: list) -> None:
        """Apply the actions; after a window, record where the window and trigger stand."""
        self.apply(actions)
        if not self.ready or not any(isinstance(a, Activation) for a in actions):
            return
        manager = self._ids_manager()
        first: dict[Source, Any] = {}
        for key in manager.keys:
            source, msgid = key[2]
            seen = first.get(source)
            if seen is None or msgid < seen:
                first[source] = msgid
        put = self._window_state().put
        for source, last in self.received.items():
            put(("ids", *source), (first.get(source), last))
        put(TRIGGER_KEY, manager.trigger_position())

    def end_of_input(self, now_ms: int) -> None:
        if not self.ready:
            self.end_pending = now_ms  # on the local runner, before INITSTATE
            return
        self.end_pending = None
        if self.persistent:
            manager = self.manager
            manager.listener = self.activate  # type: ignore[attr-defined]
            if manager.carried:
                self.apply(manager.apply_positions())
            self.apply(manager.end_of_input(now_ms))
            return
        if self.recovery is not None:
            self._finish_recovery(now_ms)  # no source will send past its recorded id
        self._record(self.manager.end_of_input(now_ms))

    # ---- persistent mode -----------------------------------------------------------------
    def end_batch(self, batch_id: int, now_ms: int) -> None:
        """With positions, the watermark moves at batch ends (persistent mode, once the window
        state is attached)."""
        manager = self.manager
        if manager.carried and self.ready:
            assert isinstance(manager, PersistentWindowManager)
            manager.listener = self.activate
            self.apply(manager.apply_positions())

    def _partition_event(self, tup: Tuple, now_ms: int) -> None:
        """A source's partition event (source watermarks): it moves the watermark, and windows
        are evaluated as on a tuple."""
        event, partitions = tup.values
        manager = self.manager
        # Only persistent mode takes source watermarks (StatefulWindowedBolt.check_window).
        assert isinstance(manager, PersistentWindowManager)
        manager.listener = self.activate
        self.apply(manager.partition_event(tup._origin.task, event, partitions, now_ms))

    def _persistent_execute(self, tup: Tuple, now_ms: int) -> None:
        manager = self.manager
        assert isinstance(manager, PersistentWindowManager)
        manager.listener = self.activate
        if is_tick_tuple(tup):
            self.apply(manager.tick(now_ms))
            return
        if not manager.spec.event_time:
            actions = manager.add(detached(tup), now_ms)
        else:
            try:
                ts = self.timestamp(tup)
            except Exception as exc:
                self.invalid(tup, exc)
                return
            origin = tup._origin
            if manager.carried:
                actions = manager.add_at(detached(tup), now_ms, ts,
                                         ((origin.component, origin.stream), origin.task),
                                         self._source_at())
            else:
                actions = manager.add(detached(tup), now_ms, ts,
                                      (origin.component, origin.stream), origin.task)
        late = any(isinstance(a, Late) for a in actions)
        self.apply([a if not isinstance(a, Late) else Late(tup, a.ts, a.watermark)
                    for a in actions])
        if not late:
            self.out.ack(tup)  # queued in state: safe once the checkpoint commits

    def activate(self, window: TupleWindow) -> None:
        if not self.persistent:
            super().activate(window)
            return
        # The window's tuples are acked already: results are emitted unanchored (as Storm).
        self.collector.anchors = None
        try:
            self.instance.execute(window)
        except Exception as exc:
            self.out.report_error(exc)
