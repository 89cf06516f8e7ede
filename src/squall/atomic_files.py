"""Files under the checkpoint location, written atomically and named by batch id.

>>> import tempfile, os
>>> root = tempfile.mkdtemp()
>>> write_atomic(os.path.join(root, "a", "b.bin"), b"x")
>>> open(os.path.join(root, "a", "b.bin"), "rb").read()
b'x'
"""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temporary name, fsync, rename: readers see the old file or the whole new one."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def snapshot_path(root: str, task_id: int, batch_id: int) -> str:
    return os.path.join(root, "tasks", f"task={task_id}", f"batch={batch_id}.pkl")


def snapshot_ids(root: str, task_id: int) -> list[int]:
    directory = os.path.join(root, "tasks", f"task={task_id}")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[6:-4]) for n in names if n.startswith("batch=") and n.endswith(".pkl"))


def latest_snapshot(root: str, task_id: int, upto: int) -> int | None:
    """The newest snapshot id of a task at or before batch `upto` (an idle task has gaps)."""
    ids = [i for i in snapshot_ids(root, task_id) if i <= upto]
    return ids[-1] if ids else None


def prune_snapshots(root: str, task_id: int, committed: int) -> None:
    """Keep the newest snapshot at or before `committed` and everything after it."""
    ids = snapshot_ids(root, task_id)
    base = [i for i in ids if i <= committed]
    for i in base[:-1]:
        os.unlink(snapshot_path(root, task_id, i))
