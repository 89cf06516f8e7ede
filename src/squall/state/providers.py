"""State providers, chosen by `topology.state.provider`.

- `memory`: `MemoryKeyValueState`, in the bolt instance (tests; on Spark it travels in the task's
  snapshot, so it is exactly-once too, but it must fit in memory).
- `durable`: a SQLite file per namespace. On Spark it is the default, under the checkpoint
  location (`<checkpoint>/state`); on the local runner under `dir` of
  `topology.state.provider.config`.
- `redis`: a Redis server (`topology.state.provider.config`: host, port, timeout, database,
  password, key_serializer, value_serializer, prefix, retry_timeout).
- a dotted path to a class whose instances have `new_state(namespace, conf, context)`.

>>> import tempfile
>>> conf = {"topology.state.provider": "durable",
...         "topology.state.provider.config": {"dir": tempfile.mkdtemp()}}
>>> type(new_state(conf, "count-1")).__name__
'StoreKeyValueState'
>>> type(new_state({}, "count-1")).__name__
'MemoryKeyValueState'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from squall.state.backends import RedisStore, SqliteStore, StoreKeyValueState, _import
from squall.state.base import MemoryKeyValueState, State, StateError
from squall.topology.config import TOPOLOGY_STATE_PROVIDER, TOPOLOGY_STATE_PROVIDER_CONFIG

MEMORY, DURABLE, REDIS = "memory", "durable", "redis"


def provider_name(conf: Mapping[str, Any], default: str = MEMORY) -> str:
    return str(conf.get(TOPOLOGY_STATE_PROVIDER) or default)


def provider_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    raw = conf.get(TOPOLOGY_STATE_PROVIDER_CONFIG) or {}
    if not isinstance(raw, Mapping):
        raise StateError(f"{TOPOLOGY_STATE_PROVIDER_CONFIG} must be a mapping, got {raw!r}")
    return dict(raw)


def new_state(conf: Mapping[str, Any], namespace: str, *, default: str = MEMORY,
              base_dir: str | None = None, context: Any = None) -> State:
    """The state of `namespace` from the configured provider.

    `base_dir` is where `durable` keeps its files when the configuration names no `dir` (the
    Spark runner passes `<checkpoint>/state`).
    """
    name = provider_name(conf, default)
    config = provider_config(conf)
    if name == MEMORY:
        return MemoryKeyValueState()
    if name == DURABLE:
        directory = config.get("dir") or base_dir
        if not directory:
            raise StateError(
                "the durable state provider needs a directory on the local runner: set "
                f"{TOPOLOGY_STATE_PROVIDER_CONFIG} = {{'dir': '/path'}} (on Spark it defaults "
                "to the checkpoint location)")
        path = os.path.join(os.path.abspath(directory), _file_name(namespace) + ".sqlite")
        return StoreKeyValueState(SqliteStore(
            path, config.get("key_serializer", "pickle"),
            config.get("value_serializer", "pickle")))
    if name == REDIS:
        store = RedisStore(namespace, config)
        store.ping()  # wrong host or credentials fail here, when the task starts
        return StoreKeyValueState(store)
    try:
        provider = _import(name)()
    except (ImportError, AttributeError, StateError) as exc:
        raise StateError(f"{TOPOLOGY_STATE_PROVIDER} {name!r} is neither memory, durable, redis "
                         f"nor an importable provider class: {exc}") from None
    state = provider.new_state(namespace, dict(conf), context)
    if not isinstance(state, State):
        raise StateError(f"state provider {name!r} returned {state!r}, which is not a State")
    return state


def _file_name(namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", lambda m: f"%{ord(m.group()):02x}", namespace)
