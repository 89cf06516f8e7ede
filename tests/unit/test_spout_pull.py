"""`SpoutTask.pull`, the spout reader's loop over a lone spout task, against the loop it replaces
(`can_emit` then `next_tuple`, a turn per call, until the budget is spent or a call emits
nothing): the same calls to the spout, the same tuples, turns, errors and backoff."""

from __future__ import annotations

from typing import Any

import pytest

from squall import BasicBolt, Config, Fields, Spout, TopologyBuilder, Values
from squall.runtime.spark.spouts import ReaderHost
from squall.task.tasks import SpoutTask

# One action per `next_tuple` call: emit that many tuples, raise (after emitting `n`), or nothing.
SCRIPT: list[tuple[str, int]] = [
    ("emit", 1), ("emit", 2), ("emit", 1), ("raise", 0), ("emit", 1), ("raise", 1), ("emit", 3),
    ("none", 0), ("emit", 1), ("emit", 1), ("emit", 1), ("emit", 1), ("emit", 2), ("emit", 1),
]


class Scripted(Spout):
    """Follows `SCRIPT`, logging each call and each ack; msg ids when `ids` (acked at once by a
    topology without ackers, tracked with them)."""

    def __init__(self, ids: bool) -> None:
        self.ids = ids

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.step, self.n, self.log = 0, 0, []

    def next_tuple(self) -> None:
        action, count = SCRIPT[self.step % len(SCRIPT)]
        self.step += 1
        self.log.append(("next", self.step))
        for _ in range(count):
            self.n += 1
            self.collector.emit(Values(self.n), msg_id=self.n if self.ids else None)
        if action == "raise":
            raise ValueError(f"call {self.step}")

    def ack(self, msg_id: Any) -> None:
        self.log.append(("ack", msg_id))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("n"))


def _task(ids: bool, ackers: int, max_pending: int | None) -> tuple[SpoutTask, ReaderHost]:
    builder = TopologyBuilder()
    builder.set_spout("s", Scripted(ids))
    builder.set_bolt("b", _Sink(), 2).shuffle_grouping("s")
    topology = builder.create_topology()
    conf = Config()
    conf.set_num_ackers(ackers)
    conf.set_max_spout_pending(max_pending)
    host = ReaderHost(dict.fromkeys(topology.task_ids, 0), capture=False)
    (task_id,) = topology.component_tasks("s")
    task = SpoutTask(topology, task_id, dict(conf), host, seed=0, tracking=ackers > 0)
    task.open()
    return task, host


def _loop(task: SpoutTask, budget: int) -> tuple[int, int]:
    """The reader's loop for one task before `pull`: (tuples emitted, turns taken)."""
    emitted = turns = idle = 0
    while emitted < budget and idle < 1:
        turns += 1
        n = task.next_tuple() if task.can_emit() else 0
        emitted += n
        idle = 0 if n else idle + 1
    return emitted, turns


def _state(task: SpoutTask, host: ReaderHost) -> tuple:
    rows = host.packets.rows()
    return (task.spout.log, task.stats.as_dict(), task._raised, task._pull_at, len(task.pending),
            [row[5] for row in rows], [m[:3] for m in host.messages])


@pytest.mark.parametrize(("ids", "ackers", "max_pending"), [
    (False, 0, None),  # unreliable
    (True, 0, None),  # msg ids without ackers: acked right after each call
    (True, 1, 4),  # tracked, held back by max spout pending
])
def test_pull_makes_the_calls_the_turns_loop_makes(ids: bool, ackers: int,
                                                   max_pending: int | None) -> None:
    looped, looped_host = _task(ids, ackers, max_pending)
    pulled, pulled_host = _task(ids, ackers, max_pending)
    now = 1_000
    for budget in (3, 5, 100, 2, 100, 100, 100, 7):  # batches; time moves on between them
        looped_host.set_now(now)
        pulled_host.set_now(now)
        assert pulled.pull(budget) == _loop(looped, budget)
        assert _state(pulled, pulled_host) == _state(looped, looped_host)
        now += 10_000  # past any backoff
    calls = [step for kind, step in pulled.spout.log if kind == "next"]
    raised = sum(SCRIPT[(step - 1) % len(SCRIPT)][0] == "raise" for step in calls)
    assert pulled.stats.errors == raised
    if max_pending is None:  # the script ran through its errors and emits
        assert raised >= 2 and pulled.stats.emitted > 20
    else:  # nothing acks: held at max spout pending, the turn taken without a call
        assert len(pulled.pending) == max_pending


def test_pull_waits_out_a_backoff_and_stops_at_zero_budget() -> None:
    task, host = _task(False, 0, None)
    host.set_now(1_000)
    assert task.pull(0) == (0, 0)
    assert task.pull(100) == (4, 4)  # emits 1, 2, 1, then the fourth call raises, emitting none
    assert task._pull_at > 1_000
    assert task.pull(100) == (0, 1)  # backing off: the turn is taken, the spout not called
    assert [e for e in task.spout.log if e[0] == "next"] == [("next", i) for i in (1, 2, 3, 4)]


class _Sink(BasicBolt):
    def execute(self, tup, collector) -> None:
        pass
