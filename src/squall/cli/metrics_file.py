"""`squall run --metrics-json FILE`: one JSON line per progress interval, appended.

Each line is `json.dumps(snapshot.to_dict())` (squall.metrics; `MetricsSnapshot.from_dict` reads
it back), written and flushed when the runner hands the snapshot over, so a reader tailing the
file sees every interval as it ends; the runner's last call, when the run ends, writes the final
figures. The file is created if missing and appended to otherwise (a restart continues it). A
write that fails (a full disk) is logged once and ends the file's updates; the run goes on.

>>> import json, tempfile, os
>>> from squall.metrics import MetricsSnapshot
>>> path = os.path.join(tempfile.mkdtemp(), "m.jsonl")
>>> out = MetricsFile(path)
>>> out(MetricsSnapshot("local", "active", 1000)); out(MetricsSnapshot("local", "done", 2000))
>>> out.close()
>>> [json.loads(line)["elapsed_ms"] for line in open(path)]
[1000, 2000]
>>> MetricsFile(os.path.join(path + ".d", "m.jsonl"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
squall.cli.metrics_file.MetricsFileError: --metrics-json: the directory .../m.jsonl.d does not exist
"""

from __future__ import annotations

import json
import logging
import os

from squall.metrics.snapshot import MetricsSnapshot

_log = logging.getLogger("squall.cli")


class MetricsFileError(ValueError):
    pass


class MetricsFile:
    """Appends each snapshot it is called with to `path` as a JSON line (see the module doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise MetricsFileError(f"--metrics-json: the directory {directory} does not exist")
        try:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise MetricsFileError(f"--metrics-json: cannot write {path}: "
                                   f"{exc.strerror or exc}") from None
        self._failed = False

    def __call__(self, snapshot: MetricsSnapshot) -> None:
        if self._failed:
            return
        try:
            self._file.write(json.dumps(snapshot.to_dict()) + "\n")
            self._file.flush()
        except OSError as exc:
            self._failed = True
            _log.error("--metrics-json: writing %s failed (%s); no more snapshots go there",
                       self.path, exc)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            _log.error("--metrics-json: closing %s failed (%s)", self.path, exc)
