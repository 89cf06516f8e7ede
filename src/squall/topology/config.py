"""`Config`: Storm's configuration keys, their defaults, and typed setters.

A `Config` is a plain dict of the keys the user set; `effective()` overlays them on the defaults.

>>> conf = Config({"topology.message.timeout.secs": 10})
>>> conf.set_num_ackers(2)
>>> conf.set_max_spout_pending(100)
>>> conf.effective()["topology.acker.executors"], conf.effective()["topology.debug"]
(2, False)
>>> Config.effective_of(None)["topology.message.timeout.secs"]
30
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS = "topology.enable.message.timeouts"
TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
TOPOLOGY_WORKERS = "topology.workers"
TOPOLOGY_DEBUG = "topology.debug"
TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
TOPOLOGY_STATS_SAMPLE_RATE = "topology.stats.sample.rate"
TOPOLOGY_MAX_TASK_PARALLELISM = "topology.max.task.parallelism"
TOPOLOGY_STATE_CHECKPOINT_INTERVAL = "topology.state.checkpoint.interval.ms"
TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
TOPOLOGY_SLEEP_SPOUT_WAIT_MS = "topology.sleep.spout.wait.strategy.time.ms"
# squall's own keys: the seed of every random choice (tuple ids, shuffle order), so runs repeat.
SQUALL_RANDOM_SEED = "squall.random.seed"

DEFAULTS: Mapping[str, Any] = {
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: 30,
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS: True,
    # None means one acker per worker, as in Storm.
    TOPOLOGY_ACKER_EXECUTORS: None,
    TOPOLOGY_MAX_SPOUT_PENDING: None,
    TOPOLOGY_WORKERS: 1,
    TOPOLOGY_DEBUG: False,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: None,
    TOPOLOGY_STATS_SAMPLE_RATE: 0.05,
    TOPOLOGY_MAX_TASK_PARALLELISM: None,
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL: 1000,
    TOPOLOGY_STATE_PROVIDER: None,
    TOPOLOGY_STATE_PROVIDER_CONFIG: None,
    TOPOLOGY_SLEEP_SPOUT_WAIT_MS: 1,
    SQUALL_RANDOM_SEED: 0,
}


class Config(dict):
    """Topology configuration: Storm's keys (strings) to values."""

    TOPOLOGY_MESSAGE_TIMEOUT_SECS = TOPOLOGY_MESSAGE_TIMEOUT_SECS
    TOPOLOGY_ACKER_EXECUTORS = TOPOLOGY_ACKER_EXECUTORS
    TOPOLOGY_MAX_SPOUT_PENDING = TOPOLOGY_MAX_SPOUT_PENDING
    TOPOLOGY_WORKERS = TOPOLOGY_WORKERS
    TOPOLOGY_DEBUG = TOPOLOGY_DEBUG

    def set_num_ackers(self, n: int) -> None:
        self[TOPOLOGY_ACKER_EXECUTORS] = n

    def set_max_spout_pending(self, n: int | None) -> None:
        self[TOPOLOGY_MAX_SPOUT_PENDING] = n

    def set_message_timeout_secs(self, secs: float) -> None:
        self[TOPOLOGY_MESSAGE_TIMEOUT_SECS] = secs

    def set_num_workers(self, n: int) -> None:
        self[TOPOLOGY_WORKERS] = n

    def set_debug(self, debug: bool) -> None:
        self[TOPOLOGY_DEBUG] = debug

    def set_max_task_parallelism(self, n: int) -> None:
        self[TOPOLOGY_MAX_TASK_PARALLELISM] = n

    def set_seed(self, seed: int) -> None:
        self[SQUALL_RANDOM_SEED] = seed

    def effective(self) -> dict[str, Any]:
        """The defaults overlaid with this config's keys."""
        return Config.effective_of(self)

    @staticmethod
    def effective_of(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults, then each layer in order (later layers win)."""
        merged = dict(DEFAULTS)
        for layer in layers:
            if layer:
                merged.update(layer)
        return merged


def num_ackers(conf: Mapping[str, Any]) -> int:
    """Acker tasks for an effective config: the key, or one per worker when unset."""
    n = conf.get(TOPOLOGY_ACKER_EXECUTORS)
    if n is None:
        n = conf.get(TOPOLOGY_WORKERS) or 1
    return int(n)
