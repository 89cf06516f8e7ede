"""Decoding a batch's result rows on the driver, for both Spark runners.

A batch's single action returns every row its stages did not consume (`row_schema`): ack
messages for the ledger, errors, aborts, batch reports, captured emits and per-task counters.
`decode_batch` sorts them by kind in one pass; each runner then applies what concerns it.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from squall.results import ErrorRecord
from squall.runtime.reporting import GAUGES, merge_counters
from squall.runtime.spark import row_schema
from squall.topology.description import Topology
from squall.transaction_kernel.reports import BatchReport

Counters = dict[int, dict[str, int]]  # task id -> counter -> value


@dataclass
class BatchRows:
    """One batch's result rows, by kind, in row order."""

    messages: list[tuple[int, row_schema.MessageColumns]] = field(default_factory=list)
    """(ts, columns) of each MESSAGES row: `row_schema.decode_messages`."""
    errors: list[ErrorRecord] = field(default_factory=list)
    aborts: list[ErrorRecord] = field(default_factory=list)
    """Tasks that refused to commit the batch (`BatchRetryError`): it must run again."""
    reports: list[BatchReport] = field(default_factory=list)
    captures: list[tuple[int, int, str, list[Any]]] = field(default_factory=list)
    """(task, seq, stream, values) of each emit captured for tests."""
    stats: Counters = field(default_factory=dict)
    """Every task's counters, summed over the batch's STATS rows."""
    spouts: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Each spout task pulled on an executor: its status after its pull (SPOUT rows)."""


def component_of(topology: Topology, task: int) -> str:
    """The component of a task id, or "?" for the rows of no task (the runner's own)."""
    return topology.task_component(task) if task in topology.task_ids else "?"


def add_counters(into: Counters, counters: Counters) -> None:
    """Sum per-task `counters` into `into` (histograms merged, squall.runtime.reporting)."""
    for task, values in counters.items():
        mine = into.setdefault(task, {})
        for gauge in GAUGES:
            if gauge in values:
                mine[gauge] = values[gauge]
        merge_counters(mine, {k: v for k, v in values.items() if k not in GAUGES})


def decode_batch(cols: dict[str, list], topology: Topology) -> BatchRows:
    """Sort a batch's result columns (`Table.to_pydict()`) by row kind."""
    out = BatchRows()
    kinds, tasks, blobs, tss = cols["kind"], cols["task"], cols["values"], cols["ts"]
    for i, kind in enumerate(kinds):
        task = tasks[i]
        if kind == row_schema.MESSAGES:
            out.messages.append((tss[i], row_schema.decode_messages(blobs[i])))
        elif kind == row_schema.ERROR:
            out.errors.append(ErrorRecord(component_of(topology, task), task,
                                          pickle.loads(blobs[i]), cols["stream"][i], tss[i]))
        elif kind == row_schema.ABORT:
            out.aborts.append(ErrorRecord(component_of(topology, task), task,
                                          pickle.loads(blobs[i]), None, tss[i]))
        elif kind == row_schema.REPORT:
            out.reports.append(row_schema.decode_report(blobs[i]))
        elif kind == row_schema.CAPTURE:
            out.captures.append((task, cols["seq"][i], cols["stream"][i], pickle.loads(blobs[i])))
        elif kind == row_schema.STATS:
            add_counters(out.stats, {task: pickle.loads(blobs[i])})
        elif kind == row_schema.SPOUT:
            out.spouts[task] = pickle.loads(blobs[i])
        elif kind == row_schema.TUPLE or kind == row_schema.PACKET:
            raise RuntimeError(f"a tuple for task {task} reached no stage")
    return out

