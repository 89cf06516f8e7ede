"""A Spark job's failure told as the squall error its Python worker raised, in one line.

An operation that fails in a Spark task (a user's function, a batch function's result of the
wrong shape, a state partition's update) raises a `SquallError` naming its component; Spark
fails the job with a `PythonException` whose text ends with the worker's traceback, and the
exception object itself is gone. `worker_error` reads the last line back into the error it was,
so the failed attempt is counted against the operation that failed (not the plan's last), and
the run's error says what went wrong in one line. A user's error is raised in the worker as the
`TridentOperationError` naming its operation and the place in the user's file
(`squall.trident.execution.operation_failed`); any other error of the worker is told by its last
line and the innermost frame of the user's code the text names. The worker's whole text, which
holds the full traceback with the user's real files (`squall.tracebacks.noted`), goes to
the `squall.traceback` logger at DEBUG: the run's log file, not the terminal.

>>> class Failure(Exception):
...     pass
>>> text = '''An exception was thrown from the Python worker:
... Traceback (most recent call last):
...   File "chain.py", line 318, in _batch_each
... squall.trident.execution.TridentOperationError: Shorter failed [component 'lengths']'''
>>> error = worker_error(Failure(text))
>>> type(error).__name__, error.component, error.message
('TridentOperationError', 'lengths', 'Shorter failed')
>>> worker_error(ValueError("not from a worker")) is None
True
>>> text = '''An exception was thrown from the Python worker:
... Traceback (most recent call last):
...   File "/home/me/jobs/prices.py", line 12, in aggregate
... ValueError: could not convert string to float: "12,50"'''
>>> print(worker_error(Failure(text)).message)
ValueError: could not convert string to float: "12,50" (at /home/me/jobs/prices.py:12, in aggregate)
"""

from __future__ import annotations

import logging
import re

from squall.errors import SquallError
from squall.results import TRACEBACK_LOGGER
from squall.tracebacks import TRACE_NOTE, Frame
from squall.trident.execution import TridentOperationError

_LAST_LINE = re.compile(r"^(?P<cls>squall(?:\.\w+)+)\.(?P<name>\w+): (?P<message>.*?)"
                        r"(?: \[(?P<where>(?:component|stream|field) '.*)\])?$")
_PLACE = re.compile(r"(component|stream|field) '([^']*)'")
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$')
_ERROR_LINE = re.compile(r"^[\w.]+(?:Error|Exception|Exit|Interrupt|Warning)\b.*")
_trace_log = logging.getLogger(TRACEBACK_LOGGER)


def worker_error(exc: BaseException) -> SquallError | None:
    """The `SquallError` a Python worker raised, rebuilt from `exc`'s text (another error of
    the worker: a `TridentOperationError` of its last line and place), or None when `exc` is
    not a Python worker's error."""
    text = str(exc).rstrip()
    # The note with the full traceback follows the error's line (`tracebacks.noted`).
    lines = text.partition(f"\n{TRACE_NOTE}")[0].rstrip().splitlines()
    if len(lines) < 2 or "Python worker" not in lines[0]:
        return None
    found = _LAST_LINE.match(lines[-1])
    if found is None:
        if not _ERROR_LINE.match(lines[-1]):
            return None
        told: SquallError = TridentOperationError(lines[-1] + _user_place(lines))
    else:
        told = _rebuilt(found)
    _trace_log.debug("%s\n%s", told, text)
    return told


def _user_place(lines: list[str]) -> str:
    """`tracebacks.where`'s suffix for the innermost frame of the user's code in a worker's
    traceback text, or empty."""
    for line in reversed(lines):
        frame = _FRAME.match(line)
        if frame is not None:
            place = Frame(frame["file"], int(frame["line"]), frame["name"])
            if place.is_user():
                return place.place()
    return ""


def _rebuilt(found: re.Match[str]) -> SquallError:
    """The squall error a worker's last line names."""
    cls = _error_classes().get(f"{found['cls']}.{found['name']}", TridentOperationError)
    where = dict(_PLACE.findall(found["where"] or ""))
    try:
        return cls(found["message"], component=where.get("component"),
                   stream=where.get("stream"), field=where.get("field"))
    except TypeError:  # a subclass that takes other arguments
        return TridentOperationError(found["message"], component=where.get("component"),
                                     stream=where.get("stream"), field=where.get("field"))


def _error_classes() -> dict[str, type[SquallError]]:
    """squall's error classes loaded in this process, by their full name (the worker's module
    is loaded on the driver too: the driver built the operations that raise them)."""
    out: dict[str, type[SquallError]] = {}
    todo: list[type[SquallError]] = [SquallError]
    while todo:
        cls = todo.pop()
        out[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return out
