"""Tansu's lost transaction completions, reproduced without squall.

`python scripts/tansu_commit_race.py [runs] [--restart] [--memory] [--sequential] [--disjoint]`

What KafkaSink(transactional=True) does per micro-batch, two sink tasks at once, with
confluent-kafka only:

Per batch, two threads (the two sink tasks) each: a new transactional producer with the id
<run>-t<task>-b<batch>, init_transactions, begin, produce records to both partitions, send the
marker offset (group <run>-t<task>, partition 0, offset batch + 1), commit. The two commits are
released together (a barrier), as two Spark tasks finishing the same micro-batch do.
Afterwards every record must be readable with read_committed; a run that finds records
missing prints the broker's transaction records for its topic (S3 storage only).

Tansu completes transactions that overlap on a partition together: the one that ends last
marks the others committed. When two end at the same moment, one of them is marked committed
by the other before its own commit marker is written; writing the marker then lists that
partition as produced again, and the transaction stays committed with a produced range. Every
later transaction on that partition overlaps it, is never completed (its commit was acknowledged;
it stays "prepared"), and read_committed readers stop at its first record. Seen: 13 of 13 runs
lose records on S3 storage (3 of 3 with --restart), 1 of 5 on memory storage; none with
--sequential (0 of 5) or --disjoint (0 of 8).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

# The tests' broker harness (tests/support/kafka_broker.py) starts and stops Tansu.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.kafka_broker import Broker, moto_s3


def run_once(broker: Broker, *, batches: int = 4, per_task: int = 10, sequential: bool = False,
             disjoint: bool = False, restart_after: int | None = None):
    """One topic, `batches` micro-batches of two tasks. Returns the topic, the keys missing for
    read_committed readers, and the read_committed ends ListOffsets gives."""
    topic = broker.create_topic(f"race-{uuid.uuid4().hex[:8]}", 2)
    run = uuid.uuid4().hex[:8]
    markers = {t: Consumer({"bootstrap.servers": broker.bootstrap,
                            "group.id": f"{run}-t{t}", "enable.auto.commit": False})
               for t in (0, 1)}
    expected = set()
    for batch in range(batches):
        if restart_after is not None and batch == restart_after:
            broker.stop()
            time.sleep(4)
            broker.start()
        barrier = threading.Barrier(2)
        lock = threading.Lock()
        errors: list[str] = []

        def task(t, batch=batch, barrier=barrier, lock=lock, errors=errors):
            try:
                p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                              "enable.idempotence": True, "transactional.id":
                              f"{run}-t{t}-b{batch}", "transaction.timeout.ms": 60000})
                p.init_transactions(10)
                p.begin_transaction()
                for i in range(per_task):
                    p.produce(topic, key=f"{batch}-{t}-{i}".encode(), value=b"v",
                              partition=t if disjoint else i % 2)
                p.flush(10)
                p.send_offsets_to_transaction(
                    [TopicPartition(topic, 0, batch + 1)],
                    markers[t].consumer_group_metadata(), 10)
                if sequential:
                    with lock:
                        p.commit_transaction(10)
                else:
                    barrier.wait(10)
                    p.commit_transaction(10)
            except Exception as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=task, args=(t,)) for t in (0, 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        expected |= {f"{batch}-{t}-{i}" for t in (0, 1) for i in range(per_task)}
    for c in markers.values():
        c.close()
    got = {m.key().decode() for m in broker.read_all(topic)}  # read_committed
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe",
                  "isolation.level": "read_committed"})
    ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    c.close()
    missing = sorted(expected - got, key=lambda k: tuple(map(int, k.split("-"))))
    return topic, missing, ends


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=int, nargs="?", default=10)
    ap.add_argument("--restart", action="store_true",
                    help="stop the broker for 4 s before the third batch")
    ap.add_argument("--memory", action="store_true", help="memory:// storage instead of S3")
    ap.add_argument("--sequential", action="store_true",
                    help="the two tasks commit one after the other (no barrier)")
    ap.add_argument("--disjoint", action="store_true",
                    help="task t writes partition t only (its transactions overlap no other's)")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp, moto_s3(Path(tmp)) as env:
        broker = (Broker(Path(tmp)) if args.memory
                  else Broker(Path(tmp), storage="s3://tansu/", env=env)).start()
        try:
            for i in range(args.runs):
                topic, missing, ends = run_once(
                    broker, sequential=args.sequential, disjoint=args.disjoint,
                    restart_after=2 if args.restart else None)
                failed += bool(missing)
                print(f"run {i}: {topic}: {len(missing)} of 80 records missing {missing[:4]}; "
                      f"ListOffsets (read_committed) {ends}", flush=True)
                if missing and not args.memory:
                    import boto3

                    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT"],
                                      region_name="us-east-1", aws_access_key_id="test",
                                      aws_secret_access_key="test")
                    meta = json.loads(s3.get_object(
                        Bucket="tansu", Key="clusters/tansu_cluster/meta.json")["Body"].read())
                    for tid, txn in meta["transactions"].items():
                        for epoch, d in txn["epochs"].items():
                            if any(topic in k for k in d["produces"]):
                                print(f"  {tid} epoch {epoch}: {d['state']}, produced "
                                      f"{d['produces'][topic]}")
        finally:
            broker.stop()
    print(f"{failed} of {args.runs} runs lost records", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
