"""What the spouts' reader process logs, carried to the driver's log.

On Spark the spouts run in the streaming source's reader, a Python process of its own (see
`spouts`): a source's log lines there (a bounded read's summary, a warning) would reach no log
the user reads. The reader keeps the last lines of the `squall` logger, INFO and up, in its
status file; the driver logs each one once (`Relay`), under its own `squall` logger.

>>> import logging
>>> kept = ReaderLog()
>>> logger = logging.getLogger("squall.example")
>>> logger.addHandler(kept); logger.setLevel(logging.INFO); logger.propagate = False
>>> logger.info("read %d", 3)
>>> relay = Relay()
>>> [msg for _level, msg in relay.new(kept.lines())]
['read 3']
>>> relay.new(kept.lines())
[]
"""

from __future__ import annotations

import logging
import uuid

KEEP = 200  # lines kept in the status: a run writes a few per batch at most


class ReaderLog(logging.Handler):
    """Keeps the last `KEEP` records as `(reader id, seq, level, message)`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.reader = uuid.uuid4().hex  # a new reader process numbers its lines from 1 again
        self.seq = 0
        self._lines: list[tuple[str, int, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seq += 1
        self._lines.append((self.reader, self.seq, record.levelno, record.getMessage()))
        del self._lines[:-KEEP]

    def lines(self) -> list[tuple[str, int, int, str]]:
        return list(self._lines)


def keep_reader_log() -> ReaderLog:
    """In the reader process: the `squall` logger's INFO lines go to the returned handler only
    (the driver logs them; the process's own stderr would show warnings twice)."""
    logger = logging.getLogger("squall")
    for handler in logger.handlers:
        if isinstance(handler, ReaderLog):
            return handler
    kept = ReaderLog()
    logger.addHandler(kept)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.propagate = False
    return kept


class Relay:
    """On the driver: which of the reader's lines are new."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def new(self, lines: list[tuple[str, int, int, str]]) -> list[tuple[int, str]]:
        out = []
        for reader, seq, level, message in lines:
            if seq > self._seen.get(reader, 0):
                self._seen[reader] = seq
                out.append((level, message))
        return out
