"""The primary resource `squall submit` hands to spark-submit: runs `squall ARGS` in the driver.

spark-submit starts this file as a script (`python submit_entry.py run TARGET --runner spark ...`),
so Python puts this directory first on `sys.path`, where the CLI's own modules (`main`, `run`,
`target`, ...) would shadow a user's top-level modules of the same names. It is removed first.

spark-submit also merges the driver's stderr into its stdout; when `squall submit` passes a FIFO
in `SQUALL_SUBMIT_STDERR`, stderr (progress, summary) goes there and `squall submit` relays it
to its own stderr, so stdout carries what the topology prints, as with `squall run`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time


def redirect_stderr(fifo: str, wait_s: float = 10.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:  # non-blocking, so a reader that is gone cannot hang the driver
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                return  # no reader: keep the merged stderr
            time.sleep(0.05)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    fifo = os.environ.pop("SQUALL_SUBMIT_STDERR", None)
    if fifo:
        redirect_stderr(fifo)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]

    from squall.cli.main import main

    sys.exit(main(sys.argv[1:]))
