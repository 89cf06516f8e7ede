"""A real redis-server on a free loopback port, stopped by its pid."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path

from support.ports import free_port
from support.processes import stop


@contextlib.contextmanager
def start_redis(workdir: Path, password: str | None = None,
                port: int | None = None) -> Iterator[types.SimpleNamespace]:
    """redis-server without persistence on `port` (a free one by default).

    Yields host, port, password, a client (`decode_responses=True`) and `proc`; the server is
    stopped (SIGTERM, then SIGKILL) when the block ends, however it ends.
    """
    import redis

    port = port or free_port()
    log = open(workdir / "redis.log", "a")  # noqa: SIM115 - closed below
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"]
    if password:
        args += ["--requirepass", password]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port, password=password, decode_responses=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server did not start: {(workdir / 'redis.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield types.SimpleNamespace(host="127.0.0.1", port=port, password=password,
                                    client=client, proc=proc)
    finally:
        client.close()
        if stop(proc, signal.SIGTERM, wait_s=10) is None:
            stop(proc)
        log.close()
