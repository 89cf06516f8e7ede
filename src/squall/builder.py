"""`TopologyBuilder`: declares spouts and bolts and their subscriptions, then validates.

>>> from squall.components.base import Spout, BasicBolt
>>> from squall.topology.fields import Fields
>>> class Src(Spout):
...     def declare_output_fields(self, d): d.declare(Fields("word"))
>>> class Sink(BasicBolt):
...     def execute(self, tup, collector): pass
>>> b = TopologyBuilder()
>>> _ = b.set_spout("src", Src(), parallelism=2)
>>> _ = b.set_bolt("sink", Sink(), 3).fields_grouping("src", Fields("wrod"))
>>> b.create_topology()  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
squall.errors.InvalidTopologyError: bolt 'sink' groups by field 'wrod', which stream ... [...]
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

import cloudpickle

from squall.components.base import BasicBolt, Bolt, Component, Spout
from squall.components.operators import WindowedOperatorBase
from squall.components.partitioned_source import PartitionedSource
from squall.components.windowed import TIMESTAMP_FIELD
from squall.errors import InvalidTopologyError, NotPicklableError
from squall.partition_watermarks import PARTITIONS_STREAM
from squall.topology import roles
from squall.topology.config import SQUALL_SOURCE_EVENT_TIME_FIELD
from squall.topology.config_keys import check_config
from squall.topology.declarer import DEFAULT_STREAM, StreamSpec
from squall.topology.description import ComponentSpec, Subscription, Topology
from squall.topology.fields import Fields
from squall.topology.groupings import (
    AllGrouping,
    CustomGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)

_log = logging.getLogger("squall.config")


class _ComponentDeclarer:
    def __init__(self, builder: TopologyBuilder, cid: str) -> None:
        self._builder = builder
        self._id = cid

    @property
    def _record(self) -> dict[str, Any]:
        return self._builder._records[self._id]

    def set_num_tasks(self, n: int) -> _ComponentDeclarer:
        if not isinstance(n, int) or n < 1:
            raise InvalidTopologyError(f"num_tasks must be a positive int, got {n!r}",
                                       component=self._id)
        self._record["num_tasks"] = n
        return self

    def add_configuration(self, key: str, value: Any) -> _ComponentDeclarer:
        self._record["conf"][key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> _ComponentDeclarer:
        self._record["conf"].update(conf)
        return self

    def set_debug(self, debug: bool) -> _ComponentDeclarer:
        return self.add_configuration("topology.debug", debug)

    def set_max_task_parallelism(self, n: int) -> _ComponentDeclarer:
        return self.add_configuration("topology.max.task.parallelism", n)


class SpoutDeclarer(_ComponentDeclarer):
    def set_max_spout_pending(self, n: int | None) -> SpoutDeclarer:
        self.add_configuration("topology.max.spout.pending", n)
        return self


class BoltDeclarer(_ComponentDeclarer):
    """Returned by `set_bolt`; each grouping method subscribes the bolt and returns `self`."""

    def grouping(
        self, component_id: str, stream_id: str, grouping: Grouping
    ) -> BoltDeclarer:
        self._record["inputs"].append(Subscription(component_id, stream_id, grouping))
        return self

    def shuffle_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, ShuffleGrouping())

    def local_or_shuffle_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, LocalOrShuffleGrouping())

    def none_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, NoneGrouping())

    def fields_grouping(
        self,
        component_id: str,
        fields: Fields | Iterable[str] | str,
        stream_id: str = DEFAULT_STREAM,
    ):
        if isinstance(fields, str):
            fields = [fields]
        names = tuple(fields)
        if not names:
            raise InvalidTopologyError(
                "fields grouping needs at least one field", component=self._id, stream=stream_id
            )
        return self.grouping(component_id, stream_id, FieldsGrouping(names))

    def all_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, AllGrouping())

    def global_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, GlobalGrouping())

    def direct_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM):
        return self.grouping(component_id, stream_id, DirectGrouping())

    def custom_grouping(self, component_id: str, grouping: Any, stream_id: str = DEFAULT_STREAM):
        for method in ("prepare", "choose_tasks"):
            if not callable(getattr(grouping, method, None)):
                raise InvalidTopologyError(
                    f"custom grouping {type(grouping).__name__} has no {method}() method",
                    component=self._id,
                    stream=stream_id,
                )
        return self.grouping(component_id, stream_id, CustomGrouping(grouping))


class TopologyBuilder:
    """Collects components and subscriptions; `create_topology` validates and freezes them."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, Any]] = {}

    def _add(self, cid: str, kind: str, component: Any, parallelism: int) -> None:
        if not isinstance(cid, str) or not cid:
            raise InvalidTopologyError(f"component ids must be non-empty strings, got {cid!r}")
        if cid.startswith("__"):
            raise InvalidTopologyError(
                "component ids starting with '__' are reserved for system components",
                component=cid,
            )
        if cid in self._records:
            raise InvalidTopologyError(
                f"duplicate component id: {cid!r} is already a {self._records[cid]['kind']}",
                component=cid,
            )
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise InvalidTopologyError(
                f"parallelism must be a positive int, got {parallelism!r}", component=cid
            )
        self._records[cid] = {
            "kind": kind,
            "component": component,
            "parallelism": parallelism,
            "num_tasks": None,
            "conf": {},
            "inputs": [],
        }

    def set_spout(self, component_id: str, spout: Spout, parallelism: int = 1) -> SpoutDeclarer:
        if not isinstance(spout, Spout):
            raise InvalidTopologyError(
                f"set_spout needs a Spout, got {type(spout).__name__}", component=component_id
            )
        self._add(component_id, "spout", spout, parallelism)
        return SpoutDeclarer(self, component_id)

    def set_bolt(
        self, component_id: str, bolt: Bolt | BasicBolt, parallelism: int = 1
    ) -> BoltDeclarer:
        if not isinstance(bolt, (Bolt, BasicBolt)):
            raise InvalidTopologyError(
                f"set_bolt needs a Bolt or BasicBolt, got {type(bolt).__name__}",
                component=component_id,
            )
        self._add(component_id, "bolt", bolt, parallelism)
        return BoltDeclarer(self, component_id)

    def create_topology(self) -> Topology:
        """Validate everything and return the immutable `Topology`."""
        if not any(r["kind"] == "spout" for r in self._records.values()):
            raise InvalidTopologyError("a topology needs at least one spout")
        streams = {cid: _declared_streams(cid, r["component"]) for cid, r in self._records.items()}
        for cid, record in self._records.items():
            # Subscriptions a component adds for itself (a windowed operator: the watermark
            # stream of each upstream operator, see squall.components.operators).
            component = record["component"]
            record["inputs"] = list(record["inputs"]) + component.implicit_inputs(
                record["inputs"], streams)
            component.check_inputs(cid, record["inputs"])
        _carry_positions(self._records, streams)
        # Each component's configuration: its own, then what the topology added; checked once.
        confs: dict[str, dict[str, Any]] = {}
        for cid, record in self._records.items():
            component = record["component"]
            conf = confs[cid] = {**(component.get_component_configuration() or {}),
                                 **record["conf"]}
            for warning in check_config(conf, where=f"component {cid!r}"):
                _log.warning("%s", warning)
            streams[cid].update(component.derived_streams(cid, record["inputs"], streams, conf))
        for cid, record in self._records.items():
            for sub in record["inputs"]:
                _check_subscription(cid, sub, streams)
        specs: dict[str, ComponentSpec] = {}
        for cid, record in self._records.items():
            component = record["component"]
            component.check_component(cid)
            role = component.role
            if role not in (roles.SPOUT if record["kind"] == "spout" else roles.BOLT_ROLES):
                raise InvalidTopologyError(
                    f"{type(component).__name__}.role is {role!r}, not a {record['kind']} role "
                    f"of squall.topology.roles", component=cid)
            conf = confs[cid]
            num_tasks = record["num_tasks"] or record["parallelism"]
            cap = conf.get("topology.max.task.parallelism")
            if cap:
                num_tasks = min(num_tasks, int(cap))
            specs[cid] = ComponentSpec(
                id=cid,
                kind=record["kind"],
                role=role,
                class_name=type(component).__qualname__,
                payload=_pickle_component(cid, component),
                parallelism=min(record["parallelism"], num_tasks),
                num_tasks=num_tasks,
                conf=conf,
                streams=streams[cid],
                inputs=tuple(record["inputs"]),
            )
        topology = Topology(specs)
        for cid, spec in specs.items():
            for sub in spec.inputs:
                if isinstance(sub.grouping, CustomGrouping):
                    what = f"custom grouping on {sub.stream!r}"
                    _check_picklable(cid, sub.grouping.grouping, what)
        return topology


def _carry_positions(records: Mapping[str, dict[str, Any]],
                     streams: Mapping[str, Mapping[str, StreamSpec]]) -> None:
    """Watermarks carried with the data (squall.partition_watermarks): for every operator that
    generates its watermark from source partitions, and every windowed bolt in event time, its
    partitioned sources get an event-time field (`squall.source.event.time.field`: the
    component's timestamp field, where the source's stream has it and the user did not name
    another), so that their records carry positions; and a component that reads them through
    plain bolts subscribes to their partition events. An input that reads anything else (a
    plain spout, another windowed component) keeps the watermark of its own input."""
    for cid, record in records.items():
        op = record["component"]
        data = [sub for sub in record["inputs"] if not sub.stream.startswith("_")]
        if isinstance(op, WindowedOperatorBase):
            if op.watermark_delay_ms is None or not getattr(op, "source_watermarks", True):
                continue
            # Per input (two for the merge operator): its subscriptions and timestamp field.
            inputs = [([sub for sub in data if op.input_of(sub.component) == i],
                       op.timestamp_fields[i]) for i in range(op.n_inputs)]
        elif getattr(op, "event_time", False) and (op.role == roles.WINDOWED or (
                op.role == roles.STATEFUL_WINDOWED and getattr(op, "persistent", False))):
            # Storm's windowed bolt in event time (a stateful one in persistent mode): its
            # timestamp field, if it names one.
            inputs = [(data, (op.get_component_configuration() or {}).get(TIMESTAMP_FIELD))]
        else:
            continue
        for subs, field in inputs:
            _carry_input(cid, record, records, streams, subs, field,
                         isinstance(op, WindowedOperatorBase))


def _carry_input(cid: str, record: dict[str, Any], records: Mapping[str, dict[str, Any]],
                 streams: Mapping[str, Mapping[str, StreamSpec]], subs: list[Subscription],
                 field: str | None, operator: bool) -> None:
    """`_carry_positions` for one input of component `cid`: the data subscriptions `subs`,
    read with timestamp field `field`."""
    found = _partitioned_sources(records, streams, subs)
    if found is None:
        return
    sources, through_bolts = found
    unnamed = []
    for src in sources:
        spec = records[src]
        conf = spec["conf"]
        own = spec["component"].get_component_configuration() or {}
        if conf.get(SQUALL_SOURCE_EVENT_TIME_FIELD, own.get(SQUALL_SOURCE_EVENT_TIME_FIELD)):
            continue
        stream = streams[src].get(spec["component"].stream)
        if field is not None and stream is not None and field in stream.fields:
            conf[SQUALL_SOURCE_EVENT_TIME_FIELD] = field
        else:
            unnamed.append(src)
    if unnamed:
        if through_bolts:
            _log.warning(
                "%r reads the partitioned sources %s through bolts, but their records have "
                "no event-time field (its timestamp field is %r): it takes the watermark "
                "from the largest timestamp its task has seen, which depends on the order "
                "rows reach it; set %s on the sources to the field that holds the event "
                "time", cid, unnamed, field, SQUALL_SOURCE_EVENT_TIME_FIELD)
        return
    if through_bolts or not operator:
        have = {(sub.component, sub.stream) for sub in record["inputs"]}
        record["inputs"] = list(record["inputs"]) + [
            Subscription(src, PARTITIONS_STREAM, AllGrouping())
            for src in sources if (src, PARTITIONS_STREAM) not in have]


def _partitioned_sources(records: Mapping[str, dict[str, Any]],
                         streams: Mapping[str, Mapping[str, StreamSpec]],
                         inputs: Iterable[Subscription]) -> tuple[list[str], bool] | None:
    """The partitioned sources the data `inputs` come from, through plain bolts only, and
    whether any bolt is in between; None if anything else feeds them."""
    sources: list[str] = []
    through = False
    seen: set[str] = set()
    todo = [sub for sub in inputs if not sub.stream.startswith("_")
            and sub.stream != "dead_letter"]
    while todo:
        sub = todo.pop()
        c = sub.component
        if c in seen:
            continue
        seen.add(c)
        spec = records.get(c)
        if spec is None:
            return None  # an unknown component: the builder reports it
        component = spec["component"]
        if spec["kind"] == "spout":
            if not isinstance(component, PartitionedSource):
                return None
            sources.append(c)
            continue
        if isinstance(component, WindowedOperatorBase) or roles.is_windowed_role(component.role):
            return None
        through = True
        todo += [s for s in spec["inputs"] if not s.stream.startswith("_")]
    return sorted(sources), through


def _declared_streams(cid: str, component: Component) -> dict[str, StreamSpec]:
    try:
        declared = component.declared_streams()
    except Exception as exc:
        raise InvalidTopologyError(
            f"declare_output_fields of {type(component).__name__} failed: {exc}", component=cid
        ) from exc
    for stream in declared:
        if stream.startswith("__"):
            raise InvalidTopologyError(
                "stream ids starting with '__' are reserved", component=cid, stream=stream
            )
    return declared


def _check_subscription(
    cid: str, sub: Subscription, streams: dict[str, dict[str, StreamSpec]]
) -> None:
    if sub.component not in streams:
        known = sorted(streams)
        raise InvalidTopologyError(
            f"bolt {cid!r} subscribes to unknown component {sub.component!r} (known: {known})",
            component=cid,
            stream=sub.stream,
        )
    declared = streams[sub.component]
    if sub.stream not in declared:
        raise InvalidTopologyError(
            f"bolt {cid!r} subscribes to stream {sub.stream!r} of {sub.component!r}, which "
            f"declares only {sorted(declared) or 'no streams'}",
            component=cid,
            stream=sub.stream,
        )
    spec = declared[sub.stream]
    grouping = sub.grouping
    if isinstance(grouping, FieldsGrouping):
        for name in grouping.fields:
            if name not in spec.fields:
                raise InvalidTopologyError(
                    f"bolt {cid!r} groups by field {name!r}, which stream {sub.stream!r} of "
                    f"{sub.component!r} does not declare (its fields: {spec.fields.to_list()})",
                    component=cid,
                    stream=sub.stream,
                    field=name,
                )
    if isinstance(grouping, DirectGrouping) and not spec.direct:
        raise InvalidTopologyError(
            f"bolt {cid!r} uses direct grouping on stream {sub.stream!r} of {sub.component!r}, "
            "which is not declared direct (declare it with direct=True)",
            component=cid,
            stream=sub.stream,
        )
    if spec.direct and not isinstance(grouping, DirectGrouping):
        raise InvalidTopologyError(
            f"stream {sub.stream!r} of {sub.component!r} is direct: bolt {cid!r} must subscribe "
            f"with direct_grouping, not {grouping.name} grouping",
            component=cid,
            stream=sub.stream,
        )


def _pickle_component(cid: str, component: Any) -> bytes:
    try:
        return cloudpickle.dumps(component)
    except Exception as exc:
        raise NotPicklableError(
            f"{type(component).__name__} cannot be pickled ({type(exc).__name__}: {exc}). "
            "Components travel to other processes (Spark executors), so they must pickle: "
            "create connections, locks, files and threads in open()/prepare(), not __init__()",
            component=cid,
        ) from exc


def _check_picklable(cid: str, obj: Any, what: str) -> None:
    try:
        pickle.loads(cloudpickle.dumps(obj))
    except Exception as exc:
        raise NotPicklableError(
            f"the {what} cannot be pickled ({type(exc).__name__}: {exc})", component=cid
        ) from exc
