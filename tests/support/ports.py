"""Free ports for the servers the tests start, outside the kernel's range of ephemeral ports.

A test's server port is dialled again and again by clients after the server stops (a Kafka
consumer after a broker restart, a run waiting for a Redis that is down). Had the port come from
the kernel's ephemeral range (binding port 0), a Spark JVM of the other xdist worker could be
handed it next for a socket of its own (the server a Python worker connects back to), and the
test's client would connect to that instead: Spark then fails its query with "Python worker
failed to connect back ... Authentication failed". Ports below the ephemeral range are only
ever taken on purpose.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20_000, 32_000  # below Linux's default ephemeral range (32768-60999)


def free_port() -> int:
    """A port below the ephemeral range that nothing listens on now (random, so that the two
    xdist workers seldom try the same one)."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(LOW, HIGH)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOW} and {HIGH}")
