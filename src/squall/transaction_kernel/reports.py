"""What transactional tasks tell the Spark driver about a batch: `BatchReport`.

On Spark a transaction is one micro-batch run as one Spark action, with no tuple trees: each task
says whether it finished its part of the batch or failed it. These are reports, not errors. A task
hands its report to its collector's `report_error` (a collector's one channel to its host); the
Spark stage host sends it in a row kind of its own (`row_schema.REPORT`), so reports never reach
the run's errors. `INBAND` is set only by the Spark driver, so other runners never see one.
"""

from __future__ import annotations

from squall.errors import SquallError
from squall.transaction_kernel.attempt import TransactionAttempt

INBAND = "squall.transactional.inband"  # set by the Spark driver: commit gated by done markers


class BatchReport(SquallError):
    """A task's outcome for one attempt: `finished` True or False (then `cause` says why)."""

    def __init__(self, attempt: TransactionAttempt, task: int, finished: bool,
                 cause: str = "") -> None:
        super().__init__(f"task {task} {'finished' if finished else 'failed'} {attempt!r}"
                         + (f": {cause}" if cause else ""))
        self.attempt = attempt
        self.task = task
        self.finished = finished
        self.cause = cause

    def __reduce__(self):
        return (BatchReport, (self.attempt, self.task, self.finished, self.cause))
