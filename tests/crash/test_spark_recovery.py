"""Fault tolerance on Spark, for real: SIGKILL the driver mid-batch, restart on the same checkpoint.

The driver runs in a subprocess (its own process group, with its JVM). It is killed while a batch
is half done (a bolt task has written its snapshot for the batch, the driver has not committed
it), then started again with the same checkpoint location. The restarted run must replay that
batch from the last committed state: every item counted exactly once, every spout tuple acked.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from support.crash import Restarts, half_done_batch

pytestmark = pytest.mark.spark

DRIVER = textwrap.dedent(
    '''
    import json, os, sys, time
    from squall import Bolt, Config, Fields, Spout, TopologyBuilder, Values, run

    ITEMS = int(sys.argv[2])

    class Items(Spout):
        """Emits 0..ITEMS-1 once each (tracked), replaying failures; resumes from its snapshot.
        Task i of n emits the items i, i + n, ..."""
        def open(self, conf, context, collector):
            super().open(conf, context, collector)
            self.next = context.this_task_index
            self.step = len(context.get_component_tasks(context.this_component_id))
            self.replay = []
            self.acked = []
        def next_tuple(self):
            if self.replay:
                item = self.replay.pop()
            elif self.next < ITEMS:
                item = self.next
                self.next += self.step
            else:
                return
            self.collector.emit(Values(item, item % 7), msg_id=item)
        def ack(self, msg_id):
            self.acked.append(msg_id)
        def fail(self, msg_id):
            self.replay.append(msg_id)
        def is_exhausted(self):
            return self.next >= ITEMS and not self.replay
        def declare_output_fields(self, d):
            d.declare(Fields("item", "key"))

    class Count(Bolt):
        """Counts items per key and remembers every item seen; writes them at cleanup."""
        def prepare(self, conf, context, collector):
            super().prepare(conf, context, collector)
            self.counts = {}
            self.seen = []
        def execute(self, tup):
            time.sleep(0.004)  # slow enough that a kill lands inside a batch
            self.counts[tup["key"]] = self.counts.get(tup["key"], 0) + 1
            self.seen.append(tup["item"])
            self.collector.ack(tup)
        def cleanup(self):
            out = os.path.join(sys.argv[1], "result-%d.json" % self.context.this_task_id)
            with open(out, "w") as f:
                json.dump({"counts": self.counts, "seen": self.seen}, f)

    class Tag(Bolt):
        """Passes each item on, anchored to it."""
        def execute(self, tup):
            self.collector.emit(Values(tup["item"], tup["key"]), anchors=tup)
            self.collector.ack(tup)
        def declare_output_fields(self, d):
            d.declare(Fields("item", "key"))

    b = TopologyBuilder()
    if sys.argv[4] == "pulled":  # count runs where items' task i is pulled (a shuffle, 2 to 2)
        b.set_spout("items", Items(), 2)
        b.set_bolt("count", Count(), 2).shuffle_grouping("items")
    elif sys.argv[4] == "fused":
        b.set_spout("items", Items())  # count runs in tag's Spark stage (squall.spark.fusion)
        b.set_bolt("tag", Tag(), 2).fields_grouping("items", Fields("key"))
        b.set_bolt("count", Count(), 2).local_or_shuffle_grouping("tag")
    else:
        b.set_spout("items", Items())
        b.set_bolt("count", Count(), 2).fields_grouping("items", Fields("key"))
    conf = Config({"squall.spark.batch.max.tuples": 40, "spark.sql.shuffle.partitions": 2,
                   "squall.spark.spouts": sys.argv[3],
                   "squall.spark.plan.ahead": sys.argv[5] == "planned-ahead"})
    result = run(b.create_topology(), conf, runner="spark", master="local[2]",
                 checkpoint_location=os.path.join(sys.argv[1], "ckpt"))
    # The outcome goes to a file: stdout is shared with the JVM's and the workers' stderr, whose
    # partial lines can interleave with ours.
    with open(os.path.join(sys.argv[1], "done.json.tmp"), "w") as f:
        json.dump({"acked": result.stats["items"].acked, "errors": len(result.errors)}, f)
    os.replace(os.path.join(sys.argv[1], "done.json.tmp"), os.path.join(sys.argv[1], "done.json"))
    print("DONE", flush=True)
    '''
)


def planned_ahead(ckpt: Path) -> bool:
    """Whether the spouts' reader has written a segment past the newest offset Spark logged:
    the next batch planned while the current one runs (spouts.SpoutReader._plans_ahead)."""
    offsets = ckpt / "query" / "offsets"
    logged = max((int(p.name) for p in offsets.iterdir() if p.name.isdigit()),
                 default=None) if offsets.is_dir() else None
    if logged is None:
        return False
    end = json.loads((offsets / str(logged)).read_text().splitlines()[-1])
    segments = [int(p.name[4:-6]) for p in (ckpt / "segments").glob("seg=*.arrow")]
    return max(segments, default=-1) > int(end["seg"])


# The pulled spout's kill and the kill once the next batch is planned ahead run in CI's second
# run (`-m extended`): the suite's budget. So does the plain shape's kill: the fused case kills
# the same spout in the source's reader behind the same fields grouping, with a fused stage
# besides.
@pytest.mark.parametrize(("spouts", "shape", "moment"), [
    pytest.param("reader", "plain", "mid-batch", marks=pytest.mark.extended),
    pytest.param("executors", "plain", "mid-batch", marks=pytest.mark.extended),
    pytest.param("executors", "pulled", "mid-batch", marks=pytest.mark.extended),
    ("reader", "fused", "mid-batch"),
    pytest.param("reader", "plain", "planned-ahead", marks=pytest.mark.extended)],
    ids=["reader", "executors", "pulled", "fused", "planned-ahead"])
def test_sigkill_mid_batch_then_restart_loses_nothing_and_counts_once(tmp_path, spouts, shape,
                                                                      moment):
    """With the spout in the source's reader (the default) or pulled on an executor; `fused`:
    items -fields-> tag(2) -local_or_shuffle-> count(2), count running in tag's Spark stage,
    killed once a task of that stage wrote its snapshot for a batch not committed;
    `planned-ahead`: killed mid-batch once the reader has also written the next batch's
    segment (each batch is full, so the reader plans the next while one runs); `pulled`: items(2)
    pulled on the executors -shuffle-> count(2), count's task i run in the Spark task that pulls
    items' task i."""
    items = 400
    (tmp_path / "driver.py").write_text(DRIVER)
    ckpt = tmp_path / "ckpt"
    with Restarts(tmp_path, [sys.executable, str(tmp_path / "driver.py"), str(tmp_path),
                             str(items), spouts, shape, moment],
                  env=dict(os.environ, PYSPARK_PYTHON=sys.executable)) as crash:
        first = crash.start()
        if moment == "planned-ahead":
            killed = crash.kill_when(first, lambda: half_done_batch(ckpt) and planned_ahead(ckpt),
                                     timeout_s=240)
        else:
            killed = crash.kill_mid_batch(first, ckpt)
        assert killed, \
            f"never caught a half-done batch: {crash.output()}"
        assert first.returncode == -signal.SIGKILL
        assert not list(tmp_path.glob("result-*.json")), "the killed run must not have finished"
        assert not (tmp_path / "done.json").exists()

        second = crash.start()
        assert crash.finish(second, 300) == 0, crash.output(tail=4000)
    done = json.loads((tmp_path / "done.json").read_text())

    seen: list[int] = []
    counts: dict[str, int] = {}
    for path in tmp_path.glob("result-*.json"):
        data = json.loads(path.read_text())
        seen += data["seen"]
        for key, n in data["counts"].items():
            counts[key] = counts.get(key, 0) + n
    assert sorted(seen) == list(range(items)), "every item exactly once across the crash"
    assert counts == {str(k): sum(1 for i in range(items) if i % 7 == k) for k in range(7)}
    assert done["errors"] == 0, crash.output(tail=4000)
    if spouts == "executors":
        assert list(ckpt.rglob("spout-tasks/task=*/seg=*.pkl")), "the pulled task's snapshots"
