"""Collectors: how components emit, ack and fail. One collector per task.

Every emit is checked against the declaration (stream declared, arity, direct or not) and fails
with an `EmitError` naming component, stream and fields. Reliability follows Storm exactly: a
tracked spout emit creates a random 64-bit root id and one edge id per destination; an anchored
bolt emit creates one edge id per destination and anchor, XORed into the anchor's ack value.

How a tuple reaches its target tasks depends on the host, and is chosen once, when a collector is
bound to it (`bind`), not in every emit: into the packets of a host that buffers tuples (the
Spark runner's stages), executed at once by the collector (the local runner on an acyclic
topology), or through the host's `send` (a queue). Every tuple an emit sends goes through the
bound `_Delivery`, the one place that knows the host's path, unanchored or anchored (the XOR
bookkeeping of tuple trees), except a `BasicBolt`'s emits on the two hosts that carry most
tuples: `_InlineBasicCollector` does their delivery inline (see there why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from squall.errors import EmitError, ReliabilityError
from squall.protocols import Host, OutputCollectorLike, SpoutHost
from squall.task.routing import StreamRoute
from squall.task.snapshot import current_collector
from squall.task.surfaces import EmittingTask, TrackingTask
from squall.topology.declarer import DEFAULT_STREAM as DEFAULT
from squall.topology.tuple import ACKED, FAILED, PENDING, Tuple, _RuntimeTuple
from squall.transaction_kernel.reports import BatchReport


def host_channels(host: SpoutHost) -> tuple[Mapping[Any, list[Any]] | None, Any]:
    """`(open, channel)` of a host that buffers tuples in packets, else `(None, None)`.

    Such a host (`squall.runtime.spark.row_schema.Packets`) keeps, for each (origin, target task)
    pair it can append to as things stand, the list that an unanchored tuple's values go into:
    `open.get((origin, target))`, or `channel(origin, target)` when there is none yet. That is
    the hot path of every unanchored emit, inlined in the collectors.
    """
    packets = host.packets
    if packets is None:
        return None, None
    return packets.open, packets.channel


class _Delivery:
    """How tuples reach their target tasks on one host: through its `send`, which queues or
    executes them (the host's choice). The collectors bind one per host (`_Emitter.bind`) and
    call it without asking which host they are on; the subclasses take a host's faster path
    where it has one. `rand` gives the edge ids of anchored tuples."""

    __slots__ = ("rand", "send")

    def __init__(self, send: Callable[[int, Tuple], None], rand: Callable[[], int]) -> None:
        self.send = send
        self.rand = rand

    def unanchored(self, values: Sequence[Any], origin: Any, targets: list[int]) -> None:
        """Deliver an unanchored tuple to `targets`."""
        send = self.send
        for t in targets:
            send(t, _RuntimeTuple(values, origin, None, t))

    def anchored(self, values: Sequence[Any], origin: Any, targets: list[int],
                 anchors: Tuple | Sequence[Tuple]) -> None:
        """Deliver a tuple anchored to `anchors` to `targets`: one edge id per target and
        anchor, XORed into the anchor's ack value and into the tuple's tree."""
        if isinstance(anchors, Tuple):
            roots = anchors._anchors
            if roots is None:
                # An untracked input (a spout emit without a message id): nothing to anchor to,
                # so this is an unanchored emit.
                self.unanchored(values, origin, targets)
                return
            if len(roots) == 1:
                # One anchor in one tree: what every BasicBolt emit is. Same XOR bookkeeping as
                # the general loop below, without its per-target dict merging.
                (root,) = roots
                rand, send = self.rand, self.send
                for t in targets:
                    edge = rand()
                    anchors._ack_val ^= edge
                    send(t, _RuntimeTuple(values, origin, {root: edge}, t))
                return
            anchors = (anchors,)
        rand, send = self.rand, self.send
        for t in targets:
            tree: dict[int, int] | None = None
            for anchor in anchors:
                roots = anchor._anchors
                if not roots:
                    continue
                edge = rand()
                anchor._ack_val ^= edge
                if tree is None:
                    tree = {}
                for root in roots:
                    tree[root] = tree.get(root, 0) ^ edge
            send(t, _RuntimeTuple(values, origin, tree, t))

    def rows(self, rows: Sequence[Sequence[Any]], choose: Callable[[Sequence[Any]], list[int]],
             origin: Any) -> int:
        """Deliver unanchored rows, each to the targets `choose` gives it, in order; returns how
        many tuples went out."""
        send = self.send
        transferred = 0
        for row in rows:
            targets = choose(row)
            transferred += len(targets)
            for t in targets:
                send(t, _RuntimeTuple(row, origin, None, t))
        return transferred


class _Executed(_Delivery):
    """A host that executes a tuple as soon as it is sent (the local runner on an acyclic
    topology) and says how (`direct_delivery`: `(executors, received, on_error)`): the collector
    does what its `send` does, inline: count the tuple as received by its task, call the task's
    executor, and hand an exception to `on_error(task, tuple, exc)`."""

    __slots__ = ("direct", "executors", "on_error", "received")

    def __init__(self, send: Callable[[int, Tuple], None], rand: Callable[[], int],
                 direct: Any) -> None:
        super().__init__(send, rand)
        self.direct = direct
        self.executors, self.received, self.on_error = direct

    def unanchored(self, values: Sequence[Any], origin: Any, targets: list[int]) -> None:
        executors, received = self.executors, self.received
        for t in targets:
            tup = _RuntimeTuple(values, origin, None, t)
            received[t] += 1
            try:
                executors[t](tup)
            except Exception as exc:
                self.on_error(t, tup, exc)


class _Packets(_Delivery):
    """A host that buffers tuples in packets (`host_channels`): a tuple's values go straight
    into the list of each (origin, target) pair, with its tree if anchored (what the host's
    `send` does), without a Tuple or a call per tuple."""

    __slots__ = ("channel", "open")

    def __init__(self, send: Callable[[int, Tuple], None], rand: Callable[[], int],
                 opened: Mapping[Any, list[Any]], channel: Any) -> None:
        super().__init__(send, rand)
        self.open, self.channel = opened, channel

    def unanchored(self, values: Sequence[Any], origin: Any, targets: list[int]) -> None:
        if values.__class__ is not list:
            values = list(values)
        opened = self.open
        for t in targets:
            items = opened.get((origin, t))
            if items is None:
                items = self.channel(origin, t)
            items.append(values)

    def anchored(self, values: Sequence[Any], origin: Any, targets: list[int],
                 anchors: Tuple | Sequence[Tuple]) -> None:
        roots = anchors._anchors if isinstance(anchors, Tuple) else None
        if not roots or len(roots) > 1:
            super().anchored(values, origin, targets, anchors)
            return
        # One anchor in one tree (every BasicBolt emit in a stage): `_Delivery.anchored`'s
        # case, straight into the packets.
        if values.__class__ is not list:
            values = list(values)
        (root,) = roots
        rand, opened, channel = self.rand, self.open, self.channel
        for t in targets:
            edge = rand()
            anchors._ack_val ^= edge  # type: ignore[union-attr]
            items = opened.get((origin, t))
            if items is None:
                items = channel(origin, t)
            items.append((values, {root: edge}))

    def rows(self, rows: Sequence[Sequence[Any]], choose: Callable[[Sequence[Any]], list[int]],
             origin: Any) -> int:
        opened, channel = self.open, self.channel
        transferred = 0
        for row in rows:
            targets = choose(row)
            transferred += len(targets)
            if row.__class__ is not list:
                row = list(row)
            for t in targets:
                items = opened.get((origin, t))
                if items is None:
                    items = channel(origin, t)
                items.append(row)
        return transferred


def _delivery(host: SpoutHost, rand: Callable[[], int]) -> _Delivery:
    """The delivery of tuples on `host`, with edge ids from `rand` (see `_Delivery` and its
    subclasses)."""
    opened, channel = host_channels(host)
    if opened is not None:
        return _Packets(host.send, rand, opened, channel)
    direct = getattr(host, "direct_delivery", None)
    if direct is not None:
        return _Executed(host.send, rand, direct)
    return _Delivery(host.send, rand)


# The host a collector is bound to: a spout's collector needs a `SpoutHost`, a bolt's a `Host`.
H = TypeVar("H", bound=SpoutHost)


class _Emitter(Generic[H]):
    """Emit checks shared by spout and bolt collectors."""

    def __init__(self, task: EmittingTask[H]) -> None:
        self._component = task.component_id
        self._task_id = task.task_id
        self._capture = task.capture
        self._stats = task.stats
        self.bind(task.host, task.routes, task.rand64)

    def bind(self, host: H, routes: dict[str, StreamRoute], rand: Callable[[], int]) -> None:
        """Emit through `host` with `routes` and tuple ids from `rand`: the one place that
        derives the shortcuts the emit paths use (called again when a task moves to another
        host, or a snapshot replaced its routes and id generator)."""
        self._host = host
        self._routes = routes
        self._rand = rand
        self._send = host.send
        # How tuples go out on this host, chosen here once (called as
        # `self._delivery.unanchored(...)`: as cheap as a method of the collector's own).
        self._delivery = _delivery(host, rand)

    _host: H
    _routes: dict[str, StreamRoute]
    _rand: Callable[[], int]
    _delivery: _Delivery

    def _route(self, stream: str, values: Sequence[Any], direct: bool) -> StreamRoute:
        route = self._routes.get(stream)
        if route is None:
            raise EmitError(
                f"emit to undeclared stream {stream!r}; declared streams: {sorted(self._routes)}",
                component=self._component,
                stream=stream,
            )
        if len(values) != route.arity:
            raise EmitError(
                f"emitted {len(values)} values {list(values)!r} but stream {stream!r} declares "
                f"{route.arity} fields {route.fields.to_list()}",
                component=self._component,
                stream=stream,
            )
        if route.direct != direct:
            if direct:
                raise EmitError(
                    f"emit_direct to stream {stream!r}, which is not declared direct",
                    component=self._component,
                    stream=stream,
                )
            raise EmitError(
                f"stream {stream!r} is declared direct: use emit_direct(task_id, ...)",
                component=self._component,
                stream=stream,
            )
        return route

    def _direct_targets(self, route: StreamRoute, task_id: int) -> list[int]:
        if task_id in route.direct_targets:
            return [task_id]
        if not route.direct_targets:
            return []  # nobody subscribes to this direct stream: the emit goes nowhere
        raise EmitError(
            f"emit_direct to task {task_id}, which does not subscribe to direct stream "
            f"{route.stream!r} (subscribing tasks: {sorted(route.direct_targets)})",
            component=self._component,
            stream=route.stream,
        )

    def source_at(self) -> int | None:
        """The event-time position in force on this task's host: the largest event time the
        source partition had delivered before the record that what executes now derives from
        (None: not known). Operators judge lateness by it (squall.partition_watermarks)."""
        return getattr(self._host, "at", None)

    def set_source_at(self, at: int | None) -> None:
        """A partitioned source's: the position of the record it emits next (`source_at`);
        None after it, so that what else executes carries none."""
        set_at = getattr(self._host, "set_at", None)
        if set_at is not None:
            set_at(at)

    def report_error(self, error: BaseException) -> None:
        if not isinstance(error, BatchReport):  # a transactional task's report, not an error
            self._stats.errors += 1  # every reported error counts (squall.metrics)
        self._host.report_error(self._component, self._task_id, error)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # A snapshot of a component stores a reference, resolved to the restoring task's own
        # collector (see squall.task.snapshot).
        return (current_collector, ("output",))


class SpoutOutputCollector(_Emitter[SpoutHost]):
    """The collector a spout emits with. `msg_id` makes the emit tracked (reliable)."""

    def __init__(self, task: TrackingTask) -> None:
        super().__init__(task)
        self._spout_task = task

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT) -> list[int]:
        route = self._routes.get(stream)
        if route is None or len(values) != route.emit_arity:
            route = self._route(stream, values, direct=False)
        targets = route.choose(values)
        self._deliver(route, values, targets, msg_id)
        return targets

    def emit_direct(
        self, task_id: int, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT
    ) -> list[int]:
        route = self._route(stream, values, direct=True)
        targets = self._direct_targets(route, task_id)
        self._deliver(route, values, targets, msg_id)
        return targets

    def emit_control(self, values: Sequence[Any], stream: str) -> None:
        """The framework's control tuple (a source's partition events): unanchored, not counted
        as emitted and not captured, since it is not the component's output."""
        route = self._route(stream, values, direct=False)
        targets = route.choose(values)
        if targets:
            self._delivery.unanchored(values, route.origin, targets)

    def _deliver(
        self, route: StreamRoute, values: Sequence[Any], targets: list[int], msg_id: Any
    ) -> None:
        route.emitted += 1
        stats = self._stats
        stats.emitted += 1
        stats.transferred += len(targets)
        if self._capture is not None:
            self._capture.append((route.stream, list(values)))
        send, origin = self._send, route.origin
        task = self._spout_task
        if msg_id is None or not task.tracking:
            self._delivery.unanchored(values, origin, targets)
            if msg_id is not None:
                task.ack_untracked(msg_id)  # ackers = 0: acked at once, as in Storm
            return
        rand = self._rand
        root = rand() >> 1  # a plain root: top bit clear (squall.reliability.acker.RECORD_FLAG)
        if len(targets) == 1:  # the common case, without the lists
            (t,) = targets
            edge = rand()
            # The tree is registered before any tuple leaves: a runner may execute (and ack) a
            # tuple inside send, and an ack must never reach the acker before its tree's init.
            task.track(root, msg_id, route.stream, edge, values)
            send(t, _RuntimeTuple(values, origin, {root: edge}, t))
            return
        edges = [rand() for _ in targets]
        xor = 0
        for edge in edges:
            xor ^= edge
        task.track(root, msg_id, route.stream, xor, values)  # before any tuple leaves
        for t, edge in zip(targets, edges, strict=True):
            send(t, _RuntimeTuple(values, origin, {root: edge}, t))


class OutputCollector(_Emitter[Host]):
    """The collector a bolt emits, acks and fails with."""

    def __init__(self, task: EmittingTask[Host]) -> None:
        self._tracking = task.tracking
        super().__init__(task)

    def bind(self, host: Host, routes: dict[str, StreamRoute], rand: Callable[[], int]) -> None:
        super().bind(host, routes, rand)
        self._host_ack = host.ack
        # A host whose `ack` only XORs the value into `xor[root]` (the Spark stage's) exposes
        # that dict as `ack_xor`; acks then update it inline.
        self._xor: dict[int, int] | None = host.ack_xor
        # A host that executes tuples as they are sent may fold acks (`_Emitter.bind`):
        # `[child, parent, recent errors]`, see `ack` and `_Executed.executing`.
        self._fold: list[Any] | None = getattr(host, "ack_folding", None)
        self._host_fail = host.fail
        self._host_reset = host.reset

    def emit(
        self, values: Sequence[Any], anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = DEFAULT,
    ) -> list[int]:
        # The hot path of every topology: checks and routing inline.
        route = self._routes.get(stream)
        if route is None or len(values) != route.emit_arity:
            route = self._route(stream, values, direct=False)
        memo = route.memo  # `route.choose` with its memo inline (StreamRoute.memo)
        key = None if memo is None else values[route.key]
        t = memo.get(key) if key.__class__ is str else None  # type: ignore[union-attr]
        targets = route.choose(values) if t is None else [t]
        # `_deliver` inline: a call more would cost about a twentieth of an emit.
        route.emitted += 1
        stats = self._stats
        stats.emitted += 1
        stats.transferred += len(targets)
        if self._capture is not None:
            self._capture.append((stream, list(values)))
        if anchors is None or not self._tracking:
            self._delivery.unanchored(values, route.origin, targets)
        else:
            self._delivery.anchored(values, route.origin, targets, anchors)
        return targets

    def emit_many(self, rows: Sequence[Sequence[Any]], stream: str = DEFAULT) -> None:
        """`emit(row, stream=stream)` for every row, unanchored, in order.

        For framework bolts that emit many rows at once (a window's panes): the route, the
        statistics and the host's delivery are looked up once per call instead of once per row.
        """
        if not rows:
            return
        route = self._routes.get(stream)
        arity = len(rows[0])
        if route is None or route.direct or arity != route.arity or any(
                len(row) != arity for row in rows):
            for row in rows:  # the checks and errors of emit, row by row
                self.emit(row, None, stream)
            return
        choose, origin = route.choose, route.origin
        stats = self._stats
        stats.emitted += len(rows)
        if self._capture is not None:
            self._capture.extend((stream, list(row)) for row in rows)
        stats.transferred += self._delivery.rows(rows, choose, origin)

    def emit_direct(
        self, task_id: int, values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None, stream: str = DEFAULT,
    ) -> list[int]:
        route = self._route(stream, values, direct=True)
        targets = self._direct_targets(route, task_id)
        self._deliver(route, values, targets, anchors)
        return targets

    def _deliver(self, route: StreamRoute, values: Sequence[Any], targets: list[int],
                 anchors: Tuple | Sequence[Tuple] | None) -> None:
        """An emit to `targets`, checked and routed: counted, captured, delivered (inline in
        `emit`)."""
        route.emitted += 1
        stats = self._stats
        stats.emitted += 1
        stats.transferred += len(targets)
        if self._capture is not None:
            self._capture.append((route.stream, list(values)))
        if anchors is None or not self._tracking:
            self._delivery.unanchored(values, route.origin, targets)
        else:
            self._delivery.anchored(values, route.origin, targets, anchors)

    def _send_anchored(self, values: Sequence[Any], origin: Any, targets: list[int],
                       anchors: Tuple | Sequence[Tuple], send: Callable[[int, Tuple], None]
                       ) -> None:
        """An anchored tuple through `send` instead of the host's delivery: a system tuple's
        (checkpoints), which the host does not count."""
        _Delivery(send, self._rand).anchored(values, origin, targets, anchors)

    def _settle(self, tup: Tuple, verb: str, new_state: int) -> bool:
        """Check `tup` may be acked/failed here; report and refuse if not."""
        if not isinstance(tup, Tuple) or tup._task != self._task_id:
            self._stats.reliability_errors += 1
            self.report_error(ReliabilityError(
                f"{verb} of a tuple this task did not receive ({tup!r})",
                component=self._component,
                stream=getattr(tup, "source_stream_id", None),
            ))
            return False
        if tup._state != PENDING:
            before = "acked" if tup._state == ACKED else "failed"
            self._stats.reliability_errors += 1
            self.report_error(ReliabilityError(
                f"{verb} of a tuple already {before} (from {tup.source_component}:"
                f"{tup.source_task}); the second {verb} is ignored",
                component=self._component,
                stream=tup.source_stream_id,
            ))
            return False
        tup._state = new_state
        return True

    def ack(self, tup: Tuple) -> None:
        if (tup.__class__ is not _RuntimeTuple or tup._state != PENDING
                or tup._task != self._task_id) and not self._settle(tup, "ack", ACKED):
            return
        tup._state = ACKED
        self._stats.acked += 1
        roots = tup._anchors
        if roots:
            val = tup._ack_val
            fold = self._fold
            if fold is not None and tup is fold[0]:
                # Acked while its emitter executes it, which made its edge 0 and did not XOR
                # it into its anchor (`_Executed.executing`): what this ack would send, the
                # anchor's own ack sends instead. The ledger's sum is the same.
                fold[0] = None
                if val:
                    fold[1]._ack_val ^= val
                if fold[2]:  # as the host's ack: the component went on after its last error
                    fold[2].pop(self._component, None)
                return
            xor = self._xor
            if xor is not None:  # the host XORs acks per root itself: no call per ack
                if val:
                    for root, edge in roots.items():
                        xor[root] = xor.get(root, 0) ^ edge ^ val
                else:  # a leaf (nothing anchored to it): one 64-bit XOR less per root
                    for root, edge in roots.items():
                        xor[root] = xor.get(root, 0) ^ edge
                return
            ack = self._host_ack
            for root, edge in roots.items():
                ack(root, edge ^ val, self._component)

    def ack_unanchored(self, n: int) -> None:
        """`ack` of `n` unanchored tuples of this task that a host executed as columns, without
        a tuple object each (an operator's column path on Spark): counted as acked; they belong
        to no tree, so there is nothing to XOR."""
        self._stats.acked += n

    def ack_system(self, tup: Tuple) -> None:
        """Ack a system tuple (a checkpoint tuple): settled as `ack` does, not counted in the
        task's acked (docs/metrics.md)."""
        acked = self._stats.acked
        self.ack(tup)
        self._stats.acked = acked

    def fail_system(self, tup: Tuple) -> None:
        """Fail a system tuple: settled as `fail` does, not counted in the task's failed."""
        failed = self._stats.failed
        self.fail(tup)
        self._stats.failed = failed

    def fail(self, tup: Tuple) -> None:
        if not self._settle(tup, "fail", FAILED):
            return
        self._stats.failed += 1
        roots = tup._anchors
        if roots:
            xor = self._xor
            if xor is not None:
                # A host that XORs acks per batch also gets a failed tuple's edges, so a range
                # tree whose records are told apart completes once the rest of it is acked
                # (squall.reliability.acker.record_root); any other failed tree fails at once.
                val = tup._ack_val
                for root, edge in roots.items():
                    xor[root] = xor.get(root, 0) ^ edge ^ val
            for root in roots:
                self._host_fail(root, self._component)

    def reset_timeout(self, tup: Tuple) -> None:
        if tup._anchors:
            for root in tup._anchors:
                self._host_reset(root, self._component)


class BasicOutputCollector:
    """What a `BasicBolt` emits with: every emit is anchored to the input being executed.

    `emit` here goes through the task's `OutputCollector`, which does everything (what tests
    that capture emits take, and hosts that queue tuples). `bind` makes the collector an
    `_InlineBasicCollector` when its host executes tuples as they are sent or buffers them in
    packets, since BasicBolt emits are the bulk of most topologies' tuples.
    """

    __slots__ = ("_captured", "_channel", "_direct", "_executing", "_fold", "_open", "_out",
                 "_rand", "_routes", "_stats", "_untracked", "input")
    # The shortcuts of the inline emit path, set by `bind` for the host it has.
    _open: Mapping[Any, list[Any]]
    _channel: Callable[[Any, int], list[Any]]
    _direct: tuple[dict[int, Callable[[Tuple], None]], list[int],
                   Callable[[int, Tuple, Exception], None]]

    def __init__(self, out: OutputCollector) -> None:
        self._out = out
        self._untracked = not out._tracking
        self._captured = out._capture is not None  # tests: every emit through OutputCollector
        self._take_shortcuts()

    def bind(self, host: Host, routes: dict[str, StreamRoute], rand: Callable[[], int]) -> None:
        """Bind the `OutputCollector` this one emits through (`OutputCollector.bind`), and take
        its shortcuts, which depend on the host."""
        self._out.bind(host, routes, rand)
        self._take_shortcuts()

    def _take_shortcuts(self) -> None:
        out = self._out
        self._routes = out._routes
        self._stats = out._stats
        self._rand = out._rand
        self._fold = out._fold
        self.input: Tuple | None = None  # no input is being executed
        # The emit path of the host's delivery, chosen once: the class changes, the object
        # stays (a snapshot of the bolt refers to it).
        delivery = out._delivery
        self.__class__ = BasicOutputCollector
        if self._captured:
            return
        if isinstance(delivery, _Packets):
            self._open, self._channel = delivery.open, delivery.channel
            self._executing = False
            self.__class__ = _InlineBasicCollector
        elif isinstance(delivery, _Executed):
            self._direct = delivery.direct
            self._executing = True
            self.__class__ = _InlineBasicCollector

    def emit(self, values: Sequence[Any], stream: str = DEFAULT) -> list[int]:
        return self._out.emit(values, self.input, stream)

    def emit_direct(self, task_id: int, values: Sequence[Any], stream: str = DEFAULT) -> list[int]:
        return self._out.emit_direct(task_id, values, self.input, stream)

    def reset_timeout(self, tup: Tuple) -> None:
        self._out.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        self._out.report_error(error)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (current_collector, ("basic",))


class _InlineBasicCollector(BasicOutputCollector):
    """A BasicBolt's collector on a host that executes tuples as they are sent (`_Executed`:
    the local runner on an acyclic topology) or buffers them in packets (`_Packets`: a Spark
    stage).

    `emit` is `OutputCollector.emit` with the host's delivery inline, for an input in no tuple
    tree or in one (the common cases): `_Executed.unanchored`, `_Packets.unanchored` and
    `_Packets.anchored`'s case of one tree, repeated here on purpose. A call to the delivery
    instead is one Python call more per emit, 16 to 17 calls per word of W1 on the local
    runner, which cost W1 about 6 % there. The rest goes through the delivery. On the local
    runner a child executed inside the emit also has its ack folded into its anchor's (see
    the comment below and `OutputCollector.ack`).
    """

    __slots__ = ()

    def emit(self, values: Sequence[Any], stream: str = DEFAULT) -> list[int]:
        inp = self.input
        roots = None if self._untracked or inp is None else inp._anchors
        route = self._routes.get(stream)
        if route is None or len(values) != route.emit_arity:
            route = self._out._route(stream, values, direct=False)
        memo = route.memo  # `route.choose` with its memo inline (StreamRoute.memo)
        key = None if memo is None else values[route.key]
        t = memo.get(key) if key.__class__ is str else None  # type: ignore[union-attr]
        targets = route.choose(values) if t is None else [t]
        route.emitted += 1
        stats = self._stats
        stats.emitted += 1
        stats.transferred += len(targets)
        origin = route.origin
        if self._executing:
            executors, received, on_error = self._direct
            if not roots:
                for t in targets:
                    tup = _RuntimeTuple(values, origin, None, t)
                    received[t] += 1
                    try:
                        executors[t](tup)
                    except Exception as exc:
                        on_error(t, tup, exc)
                return targets
            fold = self._fold
            # Through the delivery: more than one tree, or an anchor already acked or failed (a
            # misuse: its child's ack must reach the ledger, which reports it).
            if len(roots) > 1 or fold is None or inp._state != PENDING:  # type: ignore[union-attr]
                self._out._delivery.anchored(values, origin, targets, inp)  # type: ignore[arg-type]
                return targets
            (root,) = roots
            rand = self._rand
            # An edge that is created and acked before the anchor is acked cancels out of the
            # ledger's XOR: the child goes with edge 0, and its ack, if it comes while it
            # executes, is folded into the anchor's (OutputCollector.ack). A child still pending
            # afterwards (held by its bolt) gets its random edge then, XORed into the anchor as
            # usual; a failed one fails its tree whatever its edge.
            for t in targets:
                tree = {root: 0}
                tup = _RuntimeTuple(values, origin, tree, t)
                received[t] += 1
                outer, outer_anchor = fold[0], fold[1]
                fold[0] = tup
                fold[1] = inp
                try:
                    executors[t](tup)
                except Exception as exc:
                    on_error(t, tup, exc)
                finally:
                    fold[0] = outer
                    fold[1] = outer_anchor
                if tup._state == PENDING:
                    edge = tree[root] = rand()
                    inp._ack_val ^= edge  # type: ignore[union-attr]
            return targets
        if values.__class__ is not list:
            values = list(values)
        opened, channel = self._open, self._channel
        if not roots:
            if t is not None:  # the memo's one target (`targets` is `[t]`): no loop
                items = opened.get((origin, t))
                if items is None:
                    items = channel(origin, t)
                items.append(values)
                return targets
            for t in targets:
                items = opened.get((origin, t))
                if items is None:
                    items = channel(origin, t)
                items.append(values)
            return targets
        if len(roots) > 1:
            self._out._delivery.anchored(values, origin, targets, inp)  # type: ignore[arg-type]
            return targets
        (root,) = roots
        rand = self._rand
        for t in targets:
            edge = rand()
            inp._ack_val ^= edge  # type: ignore[union-attr]
            items = opened.get((origin, t))
            if items is None:
                items = channel(origin, t)
            items.append((values, {root: edge}))
        return targets


class _Wrapping:
    """A collector in front of another (`_out`): what it does not change, it passes on."""

    _out: OutputCollectorLike

    def ack(self, tup: Tuple) -> None:
        self._out.ack(tup)

    def fail(self, tup: Tuple) -> None:
        self._out.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        self._out.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        self._out.report_error(error)


class StatefulOutputCollector(_Wrapping):
    """What bolts of a stateful topology emit with (Storm's `AnchoringOutputCollector` and
    `AckTrackingOutputCollector`): unanchored emits are refused, and with a `held` list acks
    are queued there until the checkpoint commits (local runner)."""

    _out: OutputCollector

    def __init__(self, out: OutputCollector, held: list[Tuple] | None,
                 anchored: bool = True) -> None:
        self._out = out  # the task's OutputCollector: pickles as a reference to it
        self._held = held
        self._anchored = anchored

    def _check(self, anchors: Tuple | Sequence[Tuple] | None, stream: str) -> None:
        if self._anchored and (anchors is None or (not isinstance(anchors, Tuple)
                                                   and len(anchors) == 0)):
            raise EmitError("Bolts in a stateful topology must emit anchored tuples",
                            component=self._out._component, stream=stream)

    def emit(self, values: Sequence[Any], anchors: Tuple | Sequence[Tuple] | None = None,
             stream: str = DEFAULT) -> list[int]:
        self._check(anchors, stream)
        return self._out.emit(values, anchors, stream)

    def emit_direct(self, task_id: int, values: Sequence[Any],
                    anchors: Tuple | Sequence[Tuple] | None = None,
                    stream: str = DEFAULT) -> list[int]:
        self._check(anchors, stream)
        return self._out.emit_direct(task_id, values, anchors, stream)

    def ack(self, tup: Tuple) -> None:
        if self._held is None:
            self._out.ack(tup)
        else:
            self._held.append(tup)


class WindowedOutputCollector(_Wrapping):
    """The collector a windowed bolt gets: inside `execute(window)`, an emit without anchors is
    anchored to every tuple of the window (as Storm's `WindowedOutputCollector`); the window's
    role adapter (squall.task.roles.windowed) sets `anchors` around each `execute`."""

    def __init__(self, out: OutputCollectorLike) -> None:
        self._out = out  # the task's (or stateful) collector; pickles as a reference to the task's
        self.anchors: list[Tuple] | None = None

    def emit(self, values: Sequence[Any], anchors: Tuple | Sequence[Tuple] | None = None,
             stream: str = DEFAULT) -> list[int]:
        return self._out.emit(values, self.anchors if anchors is None else anchors, stream)

    def emit_direct(self, task_id: int, values: Sequence[Any],
                    anchors: Tuple | Sequence[Tuple] | None = None,
                    stream: str = DEFAULT) -> list[int]:
        return self._out.emit_direct(task_id, values,
                                     self.anchors if anchors is None else anchors, stream)
