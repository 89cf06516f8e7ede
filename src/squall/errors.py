"""Exceptions raised by squall, each naming the component, stream and field involved.

>>> err = InvalidTopologyError("unknown field", component="count", stream="default", field="wrod")
>>> str(err)
"unknown field [component 'count', stream 'default', field 'wrod']"
>>> err.component, err.stream, err.field
('count', 'default', 'wrod')
"""

from __future__ import annotations


class SquallError(Exception):
    """Base class of squall's errors; carries where the problem is.

    The location (component, stream, field) is appended to the message so a log line alone says
    where to look, and kept as attributes so tests and tools can check it.
    """

    def __init__(
        self,
        message: str,
        *,
        component: str | None = None,
        stream: str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.component = component
        self.stream = stream
        self.field = field
        where = [
            f"{label} {value!r}"
            for label, value in (("component", component), ("stream", stream), ("field", field))
            if value is not None
        ]
        super().__init__(f"{message} [{', '.join(where)}]" if where else message)

    def __reduce__(self):  # keep the location when errors cross process boundaries
        return (
            _rebuild,
            (type(self), self.message, self.component, self.stream, self.field),
        )


def _rebuild(cls, message, component, stream, field):
    return cls(message, component=component, stream=stream, field=field)


class InvalidTopologyError(SquallError, ValueError):
    """The topology description is wrong; raised while it is built."""


class ConfigError(SquallError, ValueError):
    """A configuration value cannot be used; the message names the key, the value and what is
    allowed, so `-c key=value` mistakes are reported as such rather than as a bare ValueError."""


class NotPicklableError(InvalidTopologyError):
    """A user's component cannot be pickled, so it cannot travel to other processes."""


class EmitError(SquallError, ValueError):
    """An emit does not match what the component declared (stream, arity, direct-ness)."""


class ReliabilityError(SquallError):
    """A misuse of the acking API, such as acking a tuple twice; reported, not raised."""


class DeadLetterError(SquallError):
    """A tuple failed more often than its spout's retry limit (`squall.retry.max.retries`) and
    its spout declares no dead-letter stream to send it on; reported, not raised."""


class BatchRetryError(SquallError):
    """A batch's effects could not be made durable (a sink's store is down, say).

    Raised from `on_batch_end`. On a runner whose batches are transactions (Spark; the local
    runner with a checkpoint location) the batch is not committed: Spark runs it again from the
    last committed state after a pause, and the local runner stops (a restart resumes from its
    last commit). Elsewhere the bolt has failed the batch's tuples, so their spouts replay them.
    """


class TransactionFailedError(SquallError):
    """A Trident transaction failed its last attempt (`squall.trident.max.attempts`); the run
    ends with it, and a restart replays the transaction."""


class FailedException(Exception):
    """Raise from `BasicBolt.execute` to fail the input tuple (and so replay its spout tuple)."""
