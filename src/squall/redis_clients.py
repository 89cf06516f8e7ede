"""Redis clients built from a `{"host", "port", "database", "password", "timeout"}` mapping, the
configuration shape squall's Redis state provider and transactional store share.

>>> client = client_from_config({"port": 6390, "timeout": 2})
>>> kwargs = client.connection_pool.connection_kwargs
>>> kwargs["host"], kwargs["port"], kwargs["db"], kwargs["socket_timeout"]
('127.0.0.1', 6390, 0, 2.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis


def client_from_config(config: Mapping[str, Any]) -> redis.Redis:
    """A client for `config` (defaults: 127.0.0.1:6379, database 0, no password, 5 s timeouts).
    Connecting is lazy: nothing is sent until the first command."""
    timeout = float(config.get("timeout", 5))
    return redis.Redis(
        host=config.get("host", "127.0.0.1"), port=int(config.get("port", 6379)),
        db=int(config.get("database", 0)), password=config.get("password"),
        socket_timeout=timeout, socket_connect_timeout=timeout)
