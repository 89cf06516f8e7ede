"""`TridentStats`: a Trident run's counters per operation, with Storm's names (shared by both
Trident runners).

>>> from squall.trident import TridentTopology, FixedBatchSpout, Count
>>> from squall.trident.plan import trident_plan
>>> t = TridentTopology()
>>> _ = t.new_stream("s", FixedBatchSpout(["x"], 2, [1], [2])).aggregate(Count(), ["n"]).name("n")
>>> stats = TridentStats(trident_plan(t.build()))
>>> stats.add_batch({"s": 2, "n": 1}, ok=True)
>>> stats.component_stats()["n"].line()
'n                bolt  x1  emitted=1  executed=2  acked=2  failed=0'
>>> stats.batch_executed
{0: 2}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from squall.results import ComponentStats, ErrorRecord
from squall.trident.plan import Plan, SpoutNode
from squall.trident.spouts import FileReport, MalformedLine

log = logging.getLogger("squall")


class TridentStats:
    """Per operation: tuples in and out; per spout and operation: tuples acked (in committed
    batches) and failed (in failed attempts), as Storm's Trident bolts ack every batch tuple they
    execute once its batch commits. `batch_executed`: per Spark batch id, the tuples the
    committed batch's operations executed. Shared by both Trident runners."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.counts: dict[str, dict[str, int]] = {
            n.cid: dict.fromkeys(("emitted", "executed", "acked", "failed", "errors"), 0)
            for n in plan.nodes}
        self.batch_executed: dict[int, int] = {}
        self.batch_input: dict[int, int] = {}  # per Spark batch id, the tuples its spouts emitted

    def add_batch(self, sizes: Mapping[str, int], ok: bool, batch_id: int = 0) -> None:
        """Count an attempt of a batch: `sizes` are the tuples each node put out, `ok` whether
        the attempt committed; `batch_id` is the Spark batch that ran it (0 on the local
        runner, which has no Spark batches)."""
        executed = 0
        outcome = "acked" if ok else "failed"
        for node in self.plan.nodes:
            c = self.counts[node.cid]
            out = sizes.get(node.cid, 0)
            c["emitted"] += out
            if isinstance(node, SpoutNode):
                c[outcome] += out
            else:
                n = sum(sizes.get(p, 0) for p in node.parents)
                c["executed"] += n
                c[outcome] += n
                executed += n
        if ok:
            self.batch_executed[batch_id] = self.batch_executed.get(batch_id, 0) + executed
            self.batch_input[batch_id] = self.batch_input.get(batch_id, 0) + sum(
                sizes.get(n.cid, 0) for n in self.plan.spouts)

    def error(self, component: str) -> None:
        if component in self.counts:
            self.counts[component]["errors"] += 1

    def malformed(self, lines: Sequence[MalformedLine | FileReport], errors: list[ErrorRecord],
                  time_ms: int = 0) -> None:
        """File spouts' lines that are not records (skipped from their batch) and their file
        reports: each counted as an error of its stream and kept in `errors` under its own
        stream (`malformed`, `files`); one log line per stream, kind and batch."""
        by_stream: dict[tuple[str, str], list[MalformedLine | FileReport]] = {}
        for line in lines:
            stream = line.component or "?"  # always set: the spout's stream name
            kind = line.stream or "malformed"
            errors.append(ErrorRecord(stream, 0, line, kind, time_ms))
            self.error(stream)
            by_stream.setdefault((stream, kind), []).append(line)
        for (stream, kind), bad in by_stream.items():
            what = "malformed line%s skipped" if kind == "malformed" else "file report%s"
            log.warning("Trident stream %r: %d %s, the first %s", stream, len(bad),
                        what % ("" if len(bad) == 1 else "s"), bad[0])

    def component_stats(self, late: Mapping[str, int] | None = None
                        ) -> dict[str, ComponentStats]:
        """Each operation's counters; `late`: the tuples each window operation dropped behind
        its watermark (`BatchExecutor.late`), counted in its stats' and metrics' `late`."""
        late = late or {}
        return {n.cid: ComponentStats(n.cid, "spout" if isinstance(n, SpoutNode) else "bolt",
                                      n.parallelism, transferred=self.counts[n.cid]["emitted"],
                                      late=late.get(n.cid, 0), **self.counts[n.cid])
                for n in self.plan.nodes}
