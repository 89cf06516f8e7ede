"""Tutorial: a Trident pipeline with exactly-once counts, a restart and a state query
(docs/tutorials/trident.md).

    python examples/tutorial_trident.py /tmp/trident-tutorial            # Spark, local mode
    python examples/tutorial_trident.py /tmp/trident-tutorial local      # the local runner

Orders arrive as JSON-lines files in `<dir>/orders`, one transaction per file. The pipeline
counts orders and sums their amounts per product into a durable, transactional map state
(exactly once per transaction, even when a batch is replayed), and a `lookups` stream queries
that state. `main` runs it on the files there, adds a file, runs it again on the same checkpoint
(a restart: only the new file is read, and the counts continue), then reads the state and checks
it against a plain count of every order.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from squall import run
from squall.trident import (
    Consumer,
    Count,
    FileBatchSpout,
    FilterNull,
    FixedBatchSpout,
    MapGet,
    Sum,
    TridentTopology,
)
from squall.trident.state import DurableMapState, StateType

PRODUCTS = ["apple", "pear", "plum"]
STATE_COUNTS, STATE_SUMS = "orders-per-product", "amount-per-product"


def orders(file_no: int) -> list[dict]:
    """The orders of file `file_no`: 50 orders, deterministic."""
    return [{"product": PRODUCTS[(file_no + i) % 3], "amount": 1 + (file_no * 7 + i) % 10}
            for i in range(50)]


def write_file(directory: Path, file_no: int) -> None:
    """Write file `file_no` atomically: under a name starting with '.', then renamed."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".orders-{file_no:04d}.jsonl"
    tmp.write_text("".join(json.dumps(o) + "\n" for o in orders(file_no)))
    tmp.rename(directory / f"orders-{file_no:04d}.jsonl")


class PrintLookup(Consumer):
    def accept(self, tup):
        print(f"lookup: {tup['product']} has {tup['count']} orders", flush=True)


def build(directory: str) -> TridentTopology:
    t = TridentTopology()
    grouped = (t.new_stream("orders", FileBatchSpout(f"{directory}/orders",
                                                     ["product", "amount"], format="jsonl"))
               .group_by(["product"]))
    counts = grouped.persistent_aggregate(
        DurableMapState.factory(StateType.TRANSACTIONAL), Count(), ["count"]).name(STATE_COUNTS)
    grouped.persistent_aggregate(
        DurableMapState.factory(StateType.TRANSACTIONAL), ["amount"], Sum(),
        ["total"]).name(STATE_SUMS)
    # A query stream: each batch of product names reads the counts as of the previous batch.
    (t.new_stream("lookups", FixedBatchSpout(["product"], 1, ["apple"], ["plum"]))
     .partition_by(["product"])
     .state_query(counts, ["product"], MapGet(), ["count"])
     .each(["count"], FilterNull())
     .peek(PrintLookup()))
    return t


def read_state(name: str, checkpoint: str) -> dict[str, int]:
    """A map state's values after a run: {product: value}."""
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state(name, checkpoint)
    try:
        return {key[0]: value for key, value in state.items()}
    finally:
        state.close()


def main(directory: str, runner: str = "spark") -> None:
    base = Path(directory)
    checkpoint = str(base / "checkpoint")
    for n in (1, 2):
        write_file(base / "orders", n)
    run(build(directory).build(), runner=runner, checkpoint_location=checkpoint)
    print("after the first run:", read_state(STATE_COUNTS, checkpoint))

    write_file(base / "orders", 3)  # new input, then a restart on the same checkpoint
    run(build(directory).build(), runner=runner, checkpoint_location=checkpoint)

    every = [o for n in (1, 2, 3) for o in orders(n)]
    counts, sums = Counter(), Counter()
    for o in every:
        counts[o["product"]] += 1
        sums[o["product"]] += o["amount"]
    assert read_state(STATE_COUNTS, checkpoint) == dict(counts)
    assert read_state(STATE_SUMS, checkpoint) == dict(sums)
    print(f"OK: {len(every)} orders counted once each: {dict(counts)}; amounts {dict(sums)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
