"""`RetryPolicy` and `Retries`: how often a failed tuple tree is replayed, and when.

Storm hands every failure to the spout's `fail`, and a spout that replays (Storm's KafkaSpout,
squall's sources) replays for ever unless it limits itself. The framework does that here, once
for every spout, after KafkaSpout's `KafkaSpoutRetryExponentialBackoff`: a message id that failed
`n` times is handed back to its spout's `fail` (which replays it) after a delay of
`initial * multiplier ** (n - 1)` ms, at most `max_delay` ms; once it has failed
`max_retries + 1` times it is *dead*: not replayed again, but sent to the dead-letter stream and
acked, so the source moves on.

>>> policy = RetryPolicy(max_retries=2, initial_delay_ms=100, multiplier=2.0, max_delay_ms=250)
>>> [policy.delay_ms(n) for n in (1, 2, 3, 4)]
[100, 200, 250, 250]
>>> r = Retries(policy)
>>> r.failed("m1", now_ms=0)           # first failure: replay at 100
100
>>> r.due(now_ms=99), r.due(now_ms=100)
([], ['m1'])
>>> r.failed("m1", now_ms=150), r.attempts("m1")
(350, 2)
>>> r.failed("m1", now_ms=400) is None, r.last_dead_attempts, r.attempts("m1")  # dead
(True, 3, 0)
>>> r.failed("m2", now_ms=0); r.forget("m2"); r.attempts("m2")   # acked: forgotten
100
0

Time is whatever the caller's clock says (the local runner's `Clock`, the Spark reader's planning
time), so backoff runs on simulated time in tests. The default policy replays for ever, as Storm
does, after KafkaSpout's default backoff (`squall.topology.config.RETRY_INITIAL_DELAY_MS`
and the two after it): 100 ms, doubling, at most 10 s, so a message that always fails is
replayed about once per 10 s, not in a loop. An initial delay of 0 replays at once.

>>> [RetryPolicy().delay_ms(n) for n in (1, 2, 3, 7, 8, 50)]
[100, 200, 400, 6400, 10000, 10000]
>>> at_once = RetryPolicy(initial_delay_ms=0)
>>> Retries(RetryPolicy()).failed("m", now_ms=5), Retries(at_once).failed("m", now_ms=5)
(105, 5)
"""

from __future__ import annotations

import contextlib
import heapq
from dataclasses import dataclass
from typing import Any

from squall.topology.config import RETRY_INITIAL_DELAY_MS, RETRY_MAX_DELAY_MS, RETRY_MULTIPLIER
from squall.topology.fields import Fields


@dataclass(frozen=True)
class RetryPolicy:
    """How a spout's failed trees are replayed: None `max_retries` replays for ever."""

    max_retries: int | None = None
    initial_delay_ms: int = RETRY_INITIAL_DELAY_MS
    multiplier: float = RETRY_MULTIPLIER
    max_delay_ms: int = RETRY_MAX_DELAY_MS

    @property
    def limited(self) -> bool:
        return self.max_retries is not None

    @property
    def delays(self) -> bool:
        return self.initial_delay_ms > 0

    def delay_ms(self, failures: int) -> int:
        """The wait before replaying a message that has failed `failures` (>= 1) times."""
        if self.initial_delay_ms <= 0:
            return 0
        # Capped before raising to a power that might overflow a float.
        delay = float(self.initial_delay_ms)
        for _ in range(failures - 1):
            delay *= self.multiplier
            if delay >= self.max_delay_ms:
                break
        return int(min(delay, self.max_delay_ms))

    def dead(self, failures: int) -> bool:
        """Whether a message that failed `failures` times is past the limit."""
        return self.max_retries is not None and failures > self.max_retries


class Retries:
    """Per message id: how often it failed, and the replays waiting for their backoff.

    Message ids that cannot be hashed cannot be counted; they are replayed at once, for ever,
    as before (`failed` returns `now_ms`).
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._failures: dict[Any, int] = {}
        # A heap of (due, order, msg id): the order breaks ties, so ids are never compared.
        self._waiting: list[tuple[int, int, Any]] = []
        self._order = 0
        self.last_dead_attempts = 0  # the attempts of the message `failed` last declared dead

    @property
    def counted(self) -> int:
        """How many message ids have failures counted (0: nothing to forget on an ack)."""
        return len(self._failures)

    def attempts(self, msg_id: Any) -> int:
        """How many times `msg_id` failed so far (0 once acked or dead)."""
        try:
            return self._failures.get(msg_id, 0)
        except TypeError:
            return 0

    def failed(self, msg_id: Any, now_ms: int) -> int | None:
        """Count a failure; returns when to replay it, or None when it is dead (forgotten).

        A replay due later than `now_ms` waits here until `due` returns it."""
        try:
            failures = self._failures.get(msg_id, 0) + 1
        except TypeError:
            return now_ms
        if self.policy.dead(failures):
            self._failures.pop(msg_id, None)
            self.last_dead_attempts = failures
            return None
        return self.schedule(msg_id, failures, now_ms)

    def schedule(self, msg_id: Any, failures: int, now_ms: int) -> int:
        """Replay `msg_id`, which has failed `failures` times, after its backoff (a split
        range's parts continue the range's count this way); returns when."""
        self._failures[msg_id] = failures
        due = now_ms + self.policy.delay_ms(failures)
        if due > now_ms:
            self._order += 1
            heapq.heappush(self._waiting, (due, self._order, msg_id))
        return due

    def carry(self, msg_id: Any, failures: int) -> None:
        """`msg_id` has failed `failures` times already (a split range's record continues its
        range's count), without scheduling a replay."""
        if failures:
            self._failures[msg_id] = failures

    def forget(self, msg_id: Any) -> None:
        """`msg_id` completed: its count starts again should it be emitted anew."""
        with contextlib.suppress(TypeError):
            self._failures.pop(msg_id, None)

    def due(self, now_ms: int) -> list[Any]:
        """The waiting replays whose backoff has passed, in due order (removed)."""
        out = []
        waiting = self._waiting
        while waiting and waiting[0][0] <= now_ms:
            out.append(heapq.heappop(waiting)[2])
        return out

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def next_due(self) -> int | None:
        return self._waiting[0][0] if self._waiting else None


DEAD_LETTER = "dead_letter"
"""The stream a spout's dead tuples go out on, one tuple per dead message (`DEAD_LETTER_FIELDS`).

A spout declares it to route them (the built-in sources always do); a spout that does not has
each dead message reported as an error instead, so nothing is dropped unseen."""

DEAD_LETTER_FIELDS = Fields(
    "values", "component", "stream", "partition", "offset", "message_id", "error_kind", "error",
    "attempts", "ts",
)
"""`values`: the dead tuple's values (a list; a malformed record's text for one that could not be
read); `component`, `stream`: where it was emitted; `partition`, `offset`: its place in a
built-in source (None for other spouts); `message_id`: the spout's message id (None for a
source's); `error_kind`, `error`: the exception's class name and text that failed it last
("timeout" and a sentence for a tree that timed out, "failed" for an explicit fail); `attempts`:
how often it was tried; `ts`: when it was declared dead (ms, the runner's clock)."""
