"""A Spark job's failure told as the squall error its Python worker raised.

An operation that fails in a Spark task (a user's function, a batch function's result of the
wrong shape, a state partition's update) raises a `SquallError` naming its component; Spark
fails the job with a `PythonException` whose text ends with the worker's traceback, and the
exception object itself is gone. `worker_error` reads the last line back into the error it was,
so the failed attempt is counted against the operation that failed (not the plan's last), and
the run's error says what went wrong in one line.

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
"""

from __future__ import annotations

import re

from squall.errors import SquallError
from squall.trident.execution import TridentOperationError

_LAST_LINE = re.compile(r"^(?P<cls>squall(?:\.\w+)+)\.(?P<name>\w+): (?P<message>.*?)"
                        r"(?: \[(?P<where>(?:component|stream|field) '.*)\])?$")
_PLACE = re.compile(r"(component|stream|field) '([^']*)'")


def worker_error(exc: BaseException) -> SquallError | None:
    """The `SquallError` a Python worker raised, rebuilt from `exc`'s text, or None when `exc`
    is not a worker's squall error."""
    lines = str(exc).rstrip().splitlines()
    if len(lines) < 2 or "Python worker" not in lines[0]:
        return None
    found = _LAST_LINE.match(lines[-1])
    if found is None:
        return None
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
