"""`RunConfig`: a run's configuration, resolved and checked once, when its runner is made.

`squall.run` and `make_runner` call `resolve` at the door: it checks every key and value
(`check_config`, whose warnings are logged here, once), the topology's prepare-time limits
(`check_window_limits`) and, on Spark, that a plain topology has no cycle; then it overlays the
user's keys on Storm's defaults. The runner receives the `RunConfig` and reads from it instead of
deriving the effective configuration again. A runner built directly from a mapping (tests,
`LocalCluster`) resolves it itself, through the same function, so both ways check the same.

Two views travel together: `user`, the keys as the user gave them (what is shipped to Spark's
tasks and given to a spout's `open`, as Storm gives a component the topology's configuration),
and `effective`, with Storm's defaults under them (what a runner reads). A runner adding its own
keys (a Trident runner's store under its checkpoint location) does it with `with_defaults`, which
keeps both views in step.

>>> from squall import TopologyBuilder, Fields
>>> from squall.testing import FixedTupleSpout
>>> b = TopologyBuilder()
>>> _ = b.set_spout("numbers", FixedTupleSpout([[1]], Fields("n")))
>>> config = resolve(b.create_topology(), {"topology.message.timeout.secs": 10}, runner="local")
>>> config.effective["topology.message.timeout.secs"], config.effective["topology.workers"]
(10, 1)
>>> dict(config.user)
{'topology.message.timeout.secs': 10}
>>> resolve(b.create_topology(), config, runner="local") is config  # resolved once
True
>>> config.with_defaults({"topology.workers": 2}).effective["topology.workers"]
2
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.components.windowed import check_window_limits
from squall.errors import InvalidTopologyError
from squall.topology.config import Config
from squall.topology.config_keys import check_config
from squall.topology.description import Topology
from squall.topology.graph import is_acyclic
from squall.transactional.builder import is_transactional
from squall.trident.plan import is_trident

_log = logging.getLogger("squall.config")


@dataclass(frozen=True)
class RunConfig:
    """The user's keys (`user`) and the effective configuration (`effective`: Storm's defaults
    overlaid with them) of one run; read, never changed (`with_defaults` makes another)."""

    user: Mapping[str, Any]
    effective: Mapping[str, Any]

    @classmethod
    def of(cls, conf: Mapping[str, Any] | None) -> RunConfig:
        """`conf` resolved without checks (see `resolve` for the checked way in)."""
        user = dict(conf or {})
        return cls(user, Config.effective_of(user))

    def with_defaults(self, defaults: Mapping[str, Any],
                      forced: Mapping[str, Any] | None = None) -> RunConfig:
        """This configuration with `defaults` where the user set no value and `forced` over
        any: a runner's own keys, in both views."""
        user = {**defaults, **self.user, **(forced or {})}
        effective = {**self.effective, **{k: user[k] for k in (*defaults, *(forced or {}))}}
        return RunConfig(user, effective)


def resolve(topology: Topology, conf: Mapping[str, Any] | RunConfig | None, *,
            runner: str) -> RunConfig:
    """`conf` checked and resolved for running `topology` on `runner` ("spark" or "local").

    A `RunConfig` is returned as it is: it was checked where it was made. Raises `ConfigError`
    for a bad key or value and `InvalidTopologyError` for a topology the runner cannot run.
    """
    if isinstance(conf, RunConfig):
        return conf
    for warning in check_config(conf):
        _log.warning("%s", warning)
    check_window_limits(topology, conf)
    if runner == "spark" and not is_trident(topology) and not is_transactional(topology) \
            and not is_acyclic(topology):
        raise InvalidTopologyError(
            "the spark runner executes bolts as stages in topological order, so a topology "
            "with a cycle cannot run on it; use the local runner")
    return RunConfig.of(conf)
