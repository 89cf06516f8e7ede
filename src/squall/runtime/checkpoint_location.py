"""A checkpoint location on the local filesystem: created if missing, checked before a run.

Every runner keeps its checkpoint in one directory. What can be wrong with it (a file in its
place, a parent that is a file, no write permission) is found before anything starts, Spark
included, and said in one sentence naming the directory and what to do; without the check it
surfaced as a bare `NotADirectoryError` or a `PermissionError` on a temporary file.

>>> import os, tempfile
>>> base = tempfile.mkdtemp()
>>> prepare_location(os.path.join(base, "ckpt")) == os.path.join(base, "ckpt")
True
>>> open(os.path.join(base, "file"), "w").close()
>>> prepare_location(os.path.join(base, "file"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
squall.runtime.checkpoint_location.CheckpointLocationError: checkpoint location .../file is...
"""

from __future__ import annotations

import os
import tempfile

from squall.errors import SquallError


class CheckpointLocationError(SquallError):
    """The checkpoint location cannot hold a checkpoint; the message says why and what to do."""


def prepare_location(path: str) -> str:
    """The absolute path of checkpoint location `path`, created if missing and checked to be
    a writable directory; `CheckpointLocationError` otherwise."""
    location = os.path.abspath(path)
    if os.path.exists(location) and not os.path.isdir(location):
        raise CheckpointLocationError(
            f"checkpoint location {location} is a file, not a directory; give a directory "
            "(it is created if missing)")
    try:
        os.makedirs(location, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        parent = _first_existing(location)
        raise CheckpointLocationError(
            f"checkpoint location {location} cannot be created: {parent} is a file, not a "
            "directory; give a path under a directory") from None
    except PermissionError:
        parent = _first_existing(location)
        raise CheckpointLocationError(
            f"checkpoint location {location} cannot be created: no permission to write in "
            f"{parent}; give a directory you can write, or change its permissions") from None
    except OSError as exc:
        raise CheckpointLocationError(
            f"checkpoint location {location} cannot be created ({exc.strerror}); give a "
            "directory on a filesystem you can write") from None
    try:
        # A real write, as the checkpoint's own are: access() answers for root as if every
        # directory were writable, and says nothing of a read-only filesystem.
        with tempfile.NamedTemporaryFile(dir=location, prefix=".squall-probe-"):
            pass
    except OSError as exc:
        raise CheckpointLocationError(
            f"checkpoint location {location} is not writable ({exc.strerror}); give a "
            "directory you can write, or change its permissions") from None
    return location


def _first_existing(path: str) -> str:
    while not os.path.exists(path):
        up = os.path.dirname(path)
        if up == path:
            break
        path = up
    return path
