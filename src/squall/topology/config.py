"""`Config`: Storm's configuration keys, their defaults, and typed setters.

A `Config` is a plain dict of the keys the user set; `effective()` overlays them on the defaults.

>>> conf = Config({"topology.message.timeout.secs": 10})
>>> conf.set_num_ackers(2)
>>> conf.set_max_spout_pending(100)
>>> conf.effective()["topology.acker.executors"], conf.effective()["topology.debug"]
(2, False)
>>> Config.effective_of(None)["topology.message.timeout.secs"]
30

The runners read values through the typed accessors at the end of this module, so each key is
parsed (and a bad value reported, naming the key) in one place:

>>> message_timeout_ms(conf), tick_period_ms(conf), max_spout_pending(conf)
(10000, None, 100)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from squall.errors import ConfigError

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
TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS = "topology.trident.batch.emit.interval.millis"
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


# Typed accessors. Each takes an effective config (a raw one works too: a missing key reads as
# its default) and keeps the exact reading the runners have always used, so moving a caller onto
# one changes nothing for valid values; a value that cannot be used raises `ConfigError` naming
# the key, the value and what is allowed.


def message_timeout_ms(conf: Mapping[str, Any]) -> int | None:
    """The message timeout in ms, or None when `topology.enable.message.timeouts` is off.

    What a spout times its pending tuples out by, and what windows and checkpoint intervals
    must fit in.

    >>> message_timeout_ms({"topology.message.timeout.secs": 2.5})
    2500
    >>> message_timeout_ms({}), message_timeout_ms({"topology.enable.message.timeouts": False})
    (30000, None)
    >>> message_timeout_ms({"topology.message.timeout.secs": "ten"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: topology.message.timeout.secs must be a positive ..., got 'ten'
    """
    if not conf.get(TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, True):
        return None
    return configured_message_timeout_ms(conf)


def configured_message_timeout_ms(conf: Mapping[str, Any]) -> int:
    """The message timeout in ms, whether or not timeouts are enabled.

    The acker ledger remembers a failed root this long either way (so acks from its other
    branches are recognised as late), and `complete_topology` bounds a run by it.

    >>> configured_message_timeout_ms({"topology.message.timeout.secs": 10,
    ...                                "topology.enable.message.timeouts": False})
    10000
    >>> configured_message_timeout_ms({TOPOLOGY_MESSAGE_TIMEOUT_SECS: 0})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: topology.message.timeout.secs must be a positive number ..., got 0
    """
    key = TOPOLOGY_MESSAGE_TIMEOUT_SECS
    value = conf.get(key, DEFAULTS[key])
    allowed = "a positive number of seconds"
    secs = _number(key, value, allowed)
    if secs <= 0:
        raise _bad(key, value, allowed)
    return _ms_of_secs(key, value, secs, allowed)


def tick_period_ms(conf: Mapping[str, Any]) -> int | None:
    """The tick tuple period in ms (`topology.tick.tuple.freq.secs`), or None for no ticks.

    Unset and 0 both mean no ticks, as in Storm.

    >>> tick_period_ms({"topology.tick.tuple.freq.secs": 0.5}), tick_period_ms({})
    (500, None)
    >>> tick_period_ms({"topology.tick.tuple.freq.secs": -1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: topology.tick.tuple.freq.secs must be a positive number ..., got -1
    """
    key = TOPOLOGY_TICK_TUPLE_FREQ_SECS
    value = conf.get(key)
    if not value:
        return None
    allowed = "a positive number of seconds (0 or unset: no ticks)"
    secs = _number(key, value, allowed)
    if secs < 0:
        raise _bad(key, value, allowed)
    return _ms_of_secs(key, value, secs, allowed)


def batch_emit_interval_ms(conf: Mapping[str, Any]) -> int:
    """Storm's throttle of batches (`topology.trident.batch.emit.interval.millis`) in ms;
    unset: 500, Storm's default. The local runners pace their transactions by it.

    >>> batch_emit_interval_ms({}), batch_emit_interval_ms({
    ...     "topology.trident.batch.emit.interval.millis": 0})
    (500, 0)
    """
    key = TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS
    value = conf.get(key)
    if value is None:
        return 500
    return _non_negative(key, value, "an integer number of milliseconds >= 0")


def max_spout_pending(conf: Mapping[str, Any]) -> int | None:
    """The bound on pending tuples per spout task, or None for no bound (unset or 0).

    >>> max_spout_pending({"topology.max.spout.pending": 100}), max_spout_pending({})
    (100, None)
    >>> max_spout_pending({"topology.max.spout.pending": "many"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: topology.max.spout.pending must be a positive integer ..., got 'many'
    """
    key = TOPOLOGY_MAX_SPOUT_PENDING
    value = conf.get(key)
    if not value:
        return None
    return _non_negative(key, value, "a positive integer (0 or unset: no bound)")


def checkpoint_interval_ms(conf: Mapping[str, Any]) -> int:
    """The state checkpoint interval in ms (`topology.state.checkpoint.interval.ms`).

    Unset or 0 reads as the default, 1000.

    >>> checkpoint_interval_ms({"topology.state.checkpoint.interval.ms": 100})
    100
    >>> checkpoint_interval_ms({}), checkpoint_interval_ms({TOPOLOGY_STATE_CHECKPOINT_INTERVAL: 0})
    (1000, 1000)
    """
    key = TOPOLOGY_STATE_CHECKPOINT_INTERVAL
    value = conf.get(key)
    if not value:
        return 1000
    return _non_negative(key, value, "a positive number of milliseconds")


def random_seed(conf: Mapping[str, Any]) -> int:
    """The seed of every random choice of a run (`squall.random.seed`, default 0).

    >>> random_seed({"squall.random.seed": 7}), random_seed({})
    (7, 0)
    >>> random_seed({"squall.random.seed": "x"})
    Traceback (most recent call last):
    squall.errors.ConfigError: squall.random.seed must be an integer, got 'x'
    """
    value = conf.get(SQUALL_RANDOM_SEED)
    return _integer(SQUALL_RANDOM_SEED, value, "an integer") if value else 0


def _bad(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{key} must be {allowed}, got {value!r}")


def _number(key: str, value: Any, allowed: str) -> float:
    # A bool is an int to Python, but `true` for a duration is a mistake worth reporting.
    if isinstance(value, bool):
        raise _bad(key, value, allowed)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _bad(key, value, allowed) from None
    if not math.isfinite(number):
        raise _bad(key, value, allowed)
    return number


def _ms_of_secs(key: str, value: Any, secs: float, allowed: str) -> int:
    # int(float(secs) * 1000), as the runners have always converted; a finite number too large
    # for milliseconds overflows to infinity, which int() refuses.
    ms = secs * 1000
    if not math.isfinite(ms):
        raise _bad(key, value, allowed)
    return int(ms)


def _non_negative(key: str, value: Any, allowed: str) -> int:
    n = _integer(key, value, allowed)
    if n < 0:
        raise _bad(key, value, allowed)
    return n


def _integer(key: str, value: Any, allowed: str) -> int:
    # int() as the runners always read these keys: it truncates floats and accepts digit strings.
    if isinstance(value, bool):
        raise _bad(key, value, allowed)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise _bad(key, value, allowed) from None


# ---- Retries of failed tuple trees and the dead-letter stream (docs/design/poison-tuples.md) --
# Per topology, or per spout in its component config. Unset: replayed for ever, as Storm does,
# each replay after an exponential backoff, as Storm's KafkaSpout does by default
# (KafkaSpoutRetryExponentialBackoff): 100 ms, doubling, at most 10 s. An initial delay of 0
# replays at once.
SQUALL_RETRY_MAX = "squall.retry.max.retries"
SQUALL_RETRY_INITIAL_DELAY_MS = "squall.retry.initial.delay.ms"
SQUALL_RETRY_MULTIPLIER = "squall.retry.multiplier"
SQUALL_RETRY_MAX_DELAY_MS = "squall.retry.max.delay.ms"
RETRY_INITIAL_DELAY_MS = 100  # the defaults of the three keys above
RETRY_MULTIPLIER = 2.0
RETRY_MAX_DELAY_MS = 10_000


def retry_settings(conf: Mapping[str, Any]) -> tuple[int | None, int, float, int]:
    """`(max retries or None, initial delay ms, multiplier, max delay ms)` of a spout's failed
    trees (`squall.retry.*`; `squall.reliability.retries.RetryPolicy` takes them in this order).

    >>> retry_settings({"squall.retry.max.retries": 3, "squall.retry.initial.delay.ms": 50})
    (3, 50, 2.0, 10000)
    >>> retry_settings({})
    (None, 100, 2.0, 10000)
    >>> retry_settings({"squall.retry.initial.delay.ms": 0})  # replayed at once
    (None, 0, 2.0, 10000)
    >>> retry_settings({"squall.retry.max.retries": -1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: squall.retry.max.retries must be an integer >= 0 ..., got -1
    """
    key = SQUALL_RETRY_MAX
    value = conf.get(key)
    max_retries = None
    if value is not None:
        allowed = "an integer >= 0 (unset: replay for ever)"
        max_retries = _integer(key, value, allowed)
        if max_retries < 0:
            raise _bad(key, value, allowed)
    delays = []
    for key, default in ((SQUALL_RETRY_INITIAL_DELAY_MS, RETRY_INITIAL_DELAY_MS),
                         (SQUALL_RETRY_MAX_DELAY_MS, RETRY_MAX_DELAY_MS)):
        value = conf.get(key)
        ms = default if value is None else _integer(key, value, "an integer >= 0 of ms")
        if ms < 0:
            raise _bad(key, value, "an integer >= 0 of ms")
        delays.append(ms)
    key = SQUALL_RETRY_MULTIPLIER
    value = conf.get(key)
    multiplier = RETRY_MULTIPLIER if value is None else _number(key, value, "a number >= 1")
    if multiplier < 1:
        raise _bad(key, value, "a number >= 1")
    return max_retries, delays[0], multiplier, delays[1]


SQUALL_WATERMARK_IDLE_TIMEOUT_MS = "squall.watermark.idle.timeout.ms"
SQUALL_SOURCE_EVENT_TIME_FIELD = "squall.source.event.time.field"


def idle_timeout_ms(conf: Mapping[str, Any]) -> int | None:
    """How long a source partition may deliver nothing before it stops holding the operators'
    watermark back (`squall.watermark.idle.timeout.ms`), or None: never.

    >>> idle_timeout_ms({"squall.watermark.idle.timeout.ms": 30000}), idle_timeout_ms({})
    (30000, None)
    >>> idle_timeout_ms({"squall.watermark.idle.timeout.ms": -1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: squall.watermark.idle.timeout.ms must be an integer ..., got -1
    """
    key = SQUALL_WATERMARK_IDLE_TIMEOUT_MS
    value = conf.get(key)
    if value is None:
        return None
    allowed = "an integer number of milliseconds >= 0 (unset: a partition never counts as idle)"
    ms = _number(key, value, allowed)
    if ms < 0 or ms != int(ms):
        raise _bad(key, value, allowed)
    return int(ms)
