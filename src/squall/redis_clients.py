"""Redis clients built from a `{"host", "port", "database", "password", "timeout"}` mapping, the
configuration shape squall's Redis state provider and transactional store share, and the wait
for a Redis that is down when a run starts (`wait_until_reachable`).

>>> client = client_from_config({"port": 6390, "timeout": 2})
>>> kwargs = client.connection_pool.connection_kwargs
>>> kwargs["host"], kwargs["port"], kwargs["db"], kwargs["socket_timeout"]
('127.0.0.1', 6390, 0, 2.0)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import redis

T = TypeVar("T")


def client_from_config(config: Mapping[str, Any]) -> redis.Redis:
    """A client for `config` (defaults: 127.0.0.1:6379, database 0, no password, 5 s timeouts).
    Connecting is lazy: nothing is sent until the first command."""
    timeout = float(config.get("timeout", 5))
    return redis.Redis(
        host=config.get("host", "127.0.0.1"), port=int(config.get("port", 6379)),
        db=int(config.get("database", 0)), password=config.get("password"),
        socket_timeout=timeout, socket_connect_timeout=timeout)


class RedisUnreachable(Exception):
    """Mixed into an error that means a Redis server could not be reached (refused, timed out):
    the server may come back, so what raised it may be tried again (`wait_until_reachable`)."""


WAIT_MAX_PAUSE_MS = 5_000
"""The longest pause between two tries of a Redis that cannot be reached."""

WAIT_LOG_EVERY_MS = 30_000
"""How often, at most, the wait for a Redis that cannot be reached is logged again."""


def wait_until_reachable(open_: Callable[[], T], *, what: str,
                         pause_ms: Callable[[int], None],
                         stopping: Callable[[], bool] = lambda: False,
                         log: logging.Logger | None = None) -> T | None:
    """`open_()`, tried again while it raises a `RedisUnreachable` error, until it returns (its
    value) or `stopping()` is true (None): what a run does when its Redis is down when it starts,
    as it does when Redis goes down mid-run. The pauses (through `pause_ms`, the runner's
    clock) start at 100 ms and double up to `WAIT_MAX_PAUSE_MS`, in slices of at most 100 ms so
    that a stop ends one early; the wait is logged (a warning naming `what` and the error,
    which names the server and who uses it) when it starts and then at most once per
    `WAIT_LOG_EVERY_MS` of waiting. Any other error is raised at once.

    >>> calls = []
    >>> def open_():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise type("Down", (RedisUnreachable,), {})("127.0.0.1:6390 refused")
    ...     return "open"
    >>> paused = []
    >>> wait_until_reachable(open_, what="state", pause_ms=paused.append)
    'open'
    >>> paused
    [100, 100, 100]
    >>> wait_until_reachable(lambda: 1 / 0, what="x", pause_ms=paused.append)
    Traceback (most recent call last):
    ZeroDivisionError: division by zero
    """
    log = log or logging.getLogger("squall")
    delay, waited, logged_at = 100, 0, None
    while True:
        try:
            return open_()
        except RedisUnreachable as exc:
            if logged_at is None or waited - logged_at >= WAIT_LOG_EVERY_MS:
                logged_at = waited
                log.warning("%s: %s; waiting for Redis (tried again every %.1f s at most, a "
                            "stop ends the wait)", what, exc, WAIT_MAX_PAUSE_MS / 1000)
        left = delay
        while left > 0:
            if stopping():
                return None
            step = min(left, 100)
            pause_ms(step)
            left -= step
            waited += step
        if stopping():
            return None
        delay = min(delay * 2, WAIT_MAX_PAUSE_MS)
