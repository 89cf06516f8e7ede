"""`TransactionalTopologyBuilder`: Storm's transactional topology API, compiled to a topology.

>>> from squall import Fields
>>> from squall.transactional import BatchBolt, Committer, MemoryTransactionalSpout
>>> class Partial(BatchBolt):
...     def prepare(self, conf, context, collector, attempt):
...         self.collector, self.attempt, self.n = collector, attempt, 0
...     def execute(self, tup): self.n += 1
...     def finish_batch(self): self.collector.emit([self.attempt, self.n])
...     def declare_output_fields(self, d): d.declare(Fields("id", "count"))
>>> class Sum(BatchBolt, Committer):
...     def prepare(self, conf, context, collector, attempt): self.n = 0
...     def execute(self, tup): self.n += tup["count"]
>>> spout = MemoryTransactionalSpout({0: [["a"], ["b"]], 1: [["c"]]}, Fields("word"), 1)
>>> b = TransactionalTopologyBuilder("global-count", "spout", spout, 2)
>>> _ = b.set_bolt("partial", Partial(), 2).shuffle_grouping("spout")
>>> _ = b.set_bolt("sum", Sum()).global_grouping("partial")
>>> sorted(b.create_topology().components)
['$coord-global-count', 'partial', 'spout', 'sum']
"""

from __future__ import annotations

from typing import Any

from squall.builder import TopologyBuilder
from squall.components.base import Spout
from squall.errors import InvalidTopologyError
from squall.topology.description import Topology
from squall.transaction_kernel.spouts import TransactionalSpout
from squall.transactional.bolts import BatchBolt, Committer
from squall.transactional.wrappers import (
    BATCH,
    COMMIT,
    COORD,
    DONE,
    CoordinatedBolt,
    CoordinatorSpout,
    EmitterBolt,
)

GROUPINGS = ("shuffle_grouping", "local_or_shuffle_grouping", "none_grouping", "fields_grouping",
             "all_grouping", "global_grouping", "direct_grouping", "custom_grouping")


def coordinator_id(tx_id: str) -> str:
    return f"$coord-{tx_id}"


class TransactionalBoltDeclarer:
    """Records a batch bolt's groupings (the same methods as `BoltDeclarer`)."""

    def __init__(self, cid: str) -> None:
        self.cid = cid
        self.calls: list[tuple[str, tuple, dict]] = []
        self.configuration: dict[str, Any] = {}
        self.num_tasks: int | None = None

    def __getattr__(self, name: str) -> Any:
        if name not in GROUPINGS:
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> TransactionalBoltDeclarer:
            if not args:
                raise InvalidTopologyError(f"{name} needs a component id", component=self.cid)
            self.calls.append((name, args, kwargs))
            return self

        return record

    def add_configuration(self, key: str, value: Any) -> TransactionalBoltDeclarer:
        self.configuration[key] = value
        return self

    def set_num_tasks(self, n: int) -> TransactionalBoltDeclarer:
        self.num_tasks = n
        return self

    def sources(self) -> list[str]:
        return [args[0] for _, args, _ in self.calls]


class TransactionalTopologyBuilder:
    """`TransactionalTopologyBuilder(id, spout_id, spout, parallelism)`; then `set_bolt`,
    `set_committer_bolt` and `create_topology()`. The id names the transactional state (the
    coordinator's progress and the batch metadata), so a topology restarted with the same id and
    store continues where it stopped."""

    def __init__(self, tx_id: str, spout_id: str, spout: TransactionalSpout,
                 parallelism: int = 1) -> None:
        if not isinstance(spout, TransactionalSpout):
            raise InvalidTopologyError(
                f"a transactional topology needs a TransactionalSpout, got "
                f"{type(spout).__name__}", component=spout_id)
        if isinstance(spout, Spout):
            raise InvalidTopologyError("use a TransactionalSpout, not a Spout", component=spout_id)
        self.tx_id = tx_id
        self.spout_id = spout_id
        self.spout = spout
        self.parallelism = parallelism
        self.bolts: dict[str, tuple[BatchBolt, int, bool, TransactionalBoltDeclarer]] = {}

    def set_bolt(self, cid: str, bolt: BatchBolt, parallelism: int = 1,
                 committer: bool = False) -> TransactionalBoltDeclarer:
        if not isinstance(bolt, BatchBolt):
            raise InvalidTopologyError(
                f"set_bolt of a transactional topology needs a BatchBolt, got "
                f"{type(bolt).__name__}", component=cid)
        if cid in self.bolts or cid == self.spout_id:
            raise InvalidTopologyError("duplicate component id", component=cid)
        declarer = TransactionalBoltDeclarer(cid)
        self.bolts[cid] = (bolt, parallelism, committer or isinstance(bolt, Committer), declarer)
        return declarer

    def set_committer_bolt(self, cid: str, bolt: BatchBolt,
                           parallelism: int = 1) -> TransactionalBoltDeclarer:
        return self.set_bolt(cid, bolt, parallelism, committer=True)

    def phases(self) -> dict[str, bool]:
        """Component -> whether it finishes its batches in the commit phase (a committer, or
        downstream of one)."""
        out: dict[str, bool] = {self.spout_id: False}
        pending = dict(self.bolts)
        while pending:
            progressed = False
            for cid, (_, _, committer, declarer) in list(pending.items()):
                srcs = declarer.sources()
                unknown = [s for s in srcs if s not in out and s not in self.bolts]
                if unknown:
                    raise InvalidTopologyError(
                        f"subscribes to unknown component {unknown[0]!r}", component=cid)
                if all(s in out for s in srcs):
                    out[cid] = committer or any(out[s] for s in srcs)
                    del pending[cid]
                    progressed = True
            if not progressed:
                raise InvalidTopologyError(
                    "transactional topologies must be acyclic", component=sorted(pending)[0])
        return out

    def create_topology(self) -> Topology:
        phases = self.phases()
        for cid, (_, _, _, declarer) in self.bolts.items():
            if not declarer.calls:
                raise InvalidTopologyError("a batch bolt needs at least one input", component=cid)
        committers = tuple(sorted(c for c, (_, _, com, _) in self.bolts.items() if com))
        processing = tuple(sorted(c for c, ph in phases.items() if not ph))
        coord = coordinator_id(self.tx_id)
        tb = TopologyBuilder()
        tb.set_spout(coord, CoordinatorSpout(self.tx_id, self.spout), 1)
        tb.set_bolt(self.spout_id, EmitterBolt(self.tx_id, self.spout, committers),
                    self.parallelism).all_grouping(coord, BATCH)
        for cid, (bolt, parallelism, committer, declarer) in self.bolts.items():
            upstream_commit = frozenset(s for s in declarer.sources() if phases[s])
            wrapped = CoordinatedBolt(
                bolt, committer=committer, commit_phase=phases[cid],
                upstream_commit_phase=upstream_commit,
                processing=processing if committer else (),
                done_targets=() if phases[cid] else committers)
            d = tb.set_bolt(cid, wrapped, parallelism)
            if declarer.num_tasks is not None:
                d.set_num_tasks(declarer.num_tasks)
            for key, value in declarer.configuration.items():
                d.add_configuration(key, value)
            for name, args, kwargs in declarer.calls:
                getattr(d, name)(*args, **kwargs)
            for src in dict.fromkeys(declarer.sources()):
                d.direct_grouping(src, COORD)
            if committer:
                d.all_grouping(coord, COMMIT)
                for src in processing:
                    d.direct_grouping(src, DONE)
        return tb.create_topology()


def is_transactional(topology: Topology) -> bool:
    """True for topologies built by `TransactionalTopologyBuilder`."""
    return any(cid.startswith("$coord-") and spec.class_name == "CoordinatorSpout"
               for cid, spec in topology.spouts.items())
