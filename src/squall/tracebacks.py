"""A user error's traceback as the user wrote it: the frames of their own files, on any runner.

Two things hide a user's frames. A topology loaded from a file travels by value (its module is
not importable on Spark's executors), and cloudpickle rebuilds its functions' code with the file
name `<dynamic-code>`; the function's globals keep the module's `__file__`, so `frames_of` reads
the real file and line back from there. And an exception pickled from an executor to the driver
loses its traceback; `keep_frames` stores the frames on the exception first, as plain tuples,
so the driver formats them as if the error had been raised in its own process.

`user_trace` gives the frames of the user's code only (not squall's, the standard library's or
an installed package's): what a terminal shows. `full_trace` gives every frame: what a log file
keeps. `where` gives the innermost user frame as a suffix for a one-line message.

A Spark task's failure reaches the driver as text only (the worker's formatted traceback), where
Python would print `<dynamic-code>` for a shipped class's frames. `noted` adds the full trace
with the real files to the error the task raises, so that the text the driver receives, and
logs, names them.

>>> def check(n):
...     if n == 3:
...         raise ValueError("I don't like 3")
>>> try:
...     check(3)
... except ValueError as exc:
...     error = keep_frames(exc)
>>> [frame.name for frame in frames_of(error)]
['<module>', 'check']
>>> print(full_trace(error).splitlines()[-1])
ValueError: I don't like 3
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sysconfig
import traceback
from dataclasses import dataclass
from types import FrameType, TracebackType

# The attribute holding a shipped exception's frames (plain tuples, so it pickles anywhere).
FRAMES_ATTR = "__squall_frames__"
_DYNAMIC = "<dynamic-code>"
_SQUALL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    os.path.abspath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback: where it ran and the line of code there."""

    filename: str
    lineno: int
    name: str
    line: str = ""

    def text(self) -> str:
        """The frame as Python's own tracebacks print it.

        >>> print(Frame("job.py", 7, "execute", "return 1 / 0").text())
          File "job.py", line 7, in execute
            return 1 / 0
        """
        head = f'  File "{self.filename}", line {self.lineno}, in {self.name}'
        line = self.line or linecache.getline(self.filename, self.lineno).strip()
        return f"{head}\n    {line}" if line else head

    def place(self) -> str:
        """Where the frame ran, to end a one-line message.

        >>> Frame("job.py", 7, "execute").place()
        ' (at job.py:7, in execute)'
        """
        return f" (at {self.filename}:{self.lineno}, in {self.name})"

    def is_user(self) -> bool:
        """Whether the frame is in the user's code, not squall's, Python's or a package's.

        >>> Frame("/home/me/pipelines/job.py", 7, "execute").is_user()
        True
        >>> Frame(os.__file__, 1, "<module>").is_user()
        False
        """
        path = os.path.abspath(self.filename)
        if self.filename.startswith("<") or path.startswith(_SQUALL_DIR):
            return False
        return not path.startswith(_LIBRARY_DIRS)


def _filename(frame: FrameType) -> str:
    """The frame's file, with the real one for code rebuilt by value."""
    name = frame.f_code.co_filename
    if name == _DYNAMIC:
        return str(frame.f_globals.get("__file__") or name)
    return name


def _walk(tb: TracebackType | None) -> list[Frame]:
    frames = []
    for frame, lineno in traceback.walk_tb(tb):
        filename = _filename(frame)
        frames.append(Frame(filename, lineno, frame.f_code.co_name,
                            linecache.getline(filename, lineno, frame.f_globals).strip()))
    return frames


def frames_of(error: BaseException) -> list[Frame]:
    """The frames of `error`'s traceback, outermost first: the ones it was shipped with, else
    its own traceback's."""
    shipped = getattr(error, FRAMES_ATTR, None)
    if shipped is not None:
        return [Frame(*frame) for frame in shipped]
    return _walk(error.__traceback__)


def keep_frames(error: BaseException) -> BaseException:
    """`error`, with its frames stored on it so that they survive pickling; returns it."""
    if getattr(error, FRAMES_ATTR, None) is None and error.__traceback__ is not None:
        # An exception type with __slots__ and no __dict__ takes no attribute: it goes bare.
        with contextlib.suppress(AttributeError):
            setattr(error, FRAMES_ATTR, [(f.filename, f.lineno, f.name, f.line)
                                         for f in _walk(error.__traceback__)])
    return error


def location(error: BaseException) -> tuple[str, int] | None:
    """Where `error` was raised in the user's code (the innermost user frame), if anywhere:
    what tells one error from another of the same kind."""
    user = user_frames(error)
    return (user[-1].filename, user[-1].lineno) if user else None


def _trace(error: BaseException, keep: bool) -> str:
    frames = [f for f in frames_of(error) if keep or f.is_user()]
    last = "".join(traceback.format_exception_only(type(error), error)).rstrip()
    if not frames:
        return last
    head = "Traceback (most recent call last):" if keep else "Traceback (your code):"
    return "\n".join([head, *(f.text() for f in frames), last])


def where(error: BaseException) -> str:
    """Where `error` was raised in the user's code, as `" (at FILE:LINE, in FUNCTION)"` to end
    a one-line message; empty when no frame of its traceback is the user's.

    >>> where(ValueError("never raised"))  # no traceback, so no frame of the user's
    ''
    """
    user = user_frames(error)
    return user[-1].place() if user else ""


# The first line of the note a Spark task's error carries its full traceback in (`noted`).
TRACE_NOTE = "Its traceback in the Spark task, with the user's files:"


def noted(error: BaseException, cause: BaseException) -> BaseException:
    """`error`, raised in a Spark task for `cause`, with `cause`'s full traceback (the user's
    real files) as a note after the error's line: the worker's text, all the driver receives,
    then shows it (PySpark's worker drops the cause and the context of the error it reports,
    not its notes). Returns `error`.

    >>> try:
    ...     raise ValueError("bad row")
    ... except ValueError as exc:
    ...     error = noted(RuntimeError("the operation failed"), exc)
    >>> print(traceback.format_exception_only(error)[-1].splitlines()[-1])
    ValueError: bad row
    """
    error.add_note(f"{TRACE_NOTE}\n{full_trace(cause)}")
    return error


def user_frames(error: BaseException) -> list[Frame]:
    """The frames of `error`'s traceback in the user's code, outermost first."""
    return [f for f in frames_of(error) if f.is_user()]


def user_trace(error: BaseException) -> str:
    """`error`'s frames in the user's code, then the error; just the error without any."""
    return _trace(error, keep=False)


def full_trace(error: BaseException) -> str:
    """Every frame of `error`'s traceback, and of the errors it was raised from or during,
    then the error."""
    parts: list[str] = []
    current: BaseException | None = error
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(_trace(current, keep=True))
        if current.__cause__ is not None:
            parts.append(_CAUSE)
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            parts.append(_CONTEXT)
            current = current.__context__
        else:
            current = None
    if parts[-1] in (_CAUSE, _CONTEXT):  # a cycle of causes ends the chain
        parts.pop()
    return "".join(reversed(parts)).strip()


_CAUSE = "\n\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\n\nDuring handling of the above exception, another exception occurred:\n\n"
