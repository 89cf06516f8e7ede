"""The topology the stop and lifecycle tests run through `squall run` (a file TARGET).

`src` (JSON lines under `$STOP_TEST_DIR/in`, two tasks) -> `slow` (sleeps `stop.test.sleep.ms`
per tuple, so a run lasts long enough to be signalled, until a file `$STOP_TEST_DIR/fast` exists:
a test creates it once the moment it needed has passed; with `stop.test.hold` it never acks the
record with id 0, so a graceful stop has work in flight) -> `count` (a running count per key in
durable state) -> `out` (JSON lines under `$STOP_TEST_DIR/out`). Every record therefore shows in
the output with its key's running count: a record lost or applied twice after a stop and a
restart shows as a missing id or a wrong count.
"""

from __future__ import annotations

import os
import time

from squall import Bolt, Config, Fields, StatefulBolt, TopologyBuilder, Values
from squall.connectors import JsonLinesSink, JsonLinesSource


class Source(JsonLinesSource):
    """Records each call of Storm's activate/deactivate hooks in `hooks-TASK.txt`."""

    def _hook(self, name: str) -> None:
        path = os.path.join(os.environ["STOP_TEST_DIR"], f"hooks-{self.context.this_task_id}.txt")
        with open(path, "a") as f:
            f.write(name + "\n")

    def activate(self) -> None:
        self._hook("activate")

    def deactivate(self) -> None:
        self._hook("deactivate")


class Slow(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sleep_s = float(conf.get("stop.test.sleep.ms", 2)) / 1000
        self.hold = bool(conf.get("stop.test.hold", False))
        self.fast = os.path.join(os.environ["STOP_TEST_DIR"], "fast")

    def execute(self, tup):
        if self.sleep_s and not os.path.exists(self.fast):
            time.sleep(self.sleep_s)
        if self.hold and tup["id"] == 0:
            return  # never acked: its tree stays in flight
        self.collector.emit(Values(tup["id"], tup["key"]), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "key"))


class RunningCount(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        key = tup["key"]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        self.collector.emit(Values(tup["id"], key, n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "key", "n"))


def build():
    base = os.environ["STOP_TEST_DIR"]
    b = TopologyBuilder()
    b.set_spout("src", Source(os.path.join(base, "in"), ["id", "key"],
                                       bounded=os.environ.get("STOP_TEST_BOUNDED", "1") == "1"),
                2)
    b.set_bolt("slow", Slow(), 2).shuffle_grouping("src")
    b.set_bolt("count", RunningCount(), 2).fields_grouping("slow", Fields("key"))
    b.set_bolt("out", JsonLinesSink(os.path.join(base, "out")), 2).shuffle_grouping("count")
    conf = Config({
        "topology.state.provider": "durable",
        "topology.state.provider.config": {"dir": os.path.join(base, "state")},
        "topology.message.timeout.secs": 600,  # a held tree stays in flight, not timed out
        "topology.max.spout.pending": 20,
        "squall.local.batch.ms": 50,
        "squall.spark.batch.max.tuples": 300,
    })
    return b.create_topology(), conf
