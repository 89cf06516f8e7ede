"""Applying a batch of keys to one partition of a durable (LMDB) map state: microseconds a key.

    .venv/bin/python benchmarks/state_apply.py [--keys 25000] [--held 500000] [--rounds 3]
        [--types transactional,opaque]

What a Spark task of W5 (benchmarks/trident_w5.py) does per state partition and micro-batch:
`DurableMapState.factory(...).make_partition(...)`, Count's and Sum's update of `--keys` keys
("k<id>" strings, each key and value a fresh object from an Arrow column, as `ApplyColumns` has
them), `close()`. The partition is one of 8 and already holds `--held` keys (W5 at K=4,000,000:
8 partitions of 500,000 keys, about 24,000 keys a partition and batch). Cases: `new` (keys the
partition does not hold), `existing` (held keys, a newer txid), `replay` (the last batch again,
same txid: nothing to write).

Two ways of applying, interleaved round by round on the same store: `multi_add` (the store's
bulk add, `add_transactional` / `add_opaque`: one write transaction, each key encoded once) and
`multi_update` with the updaters `old + value` (the general way: one read transaction, entries
decoded into value objects and encoded again, one write transaction). Printed: the best round's
wall time and CPU time a key (the wall includes the commit's fsync), and the ratio of the
general way's wall time to multi_add's. Every round checks both ways' returned values against a
plain dict.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import tempfile
import time
from typing import Any

import pyarrow as pa

from squall.trident.state import DurableMapState, StateType
from squall.trident.state.map_state import Adder
from squall.trident.state.partitioned import partition_indexes

PARTITIONS = 8
NAME = "counts"


def partition_keys(count: int, seed: int) -> list[str]:
    """`count` distinct "k<id>" strings of state partition 0, in random order."""
    out: list[str] = []
    start = 0
    while len(out) < count:
        cands = [f"k{i}" for i in range(start, start + 4 * count)]
        start += 4 * count
        parts = partition_indexes([(c,) for c in cands], PARTITIONS)
        out.extend(c for c, p in zip(cands, parts, strict=True) if p == 0)
    random.Random(seed).shuffle(out)
    return out[:count]


def columns(keys: list[str], values: list[int]) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """The keys and values as `ApplyColumns` has them: new objects from Arrow columns."""
    return (list(zip(pa.array(keys, pa.string()).to_pylist())),
            pa.array(values, pa.int64()).to_pylist())


class Partition:
    def __init__(self, state_type: StateType, directory: str) -> None:
        self.factory = DurableMapState.factory(state_type, partitions=PARTITIONS)
        self.directory = directory
        self.opaque = state_type is StateType.OPAQUE
        self.factory.make_state(NAME, directory).close()

    def apply(self, way: str, txid: int, keys: list[str], values: list[int]
              ) -> tuple[float, float, list[Any]]:
        """Wall and CPU seconds of applying the batch, and the returned values."""
        key_rows, value_list = columns(keys, values)
        wall, cpu = time.perf_counter(), time.process_time()
        state = self.factory.make_partition(NAME, self.directory, 0)
        try:
            if self.opaque:
                state.begin_commit(txid)
            if way == "multi_add":
                new = state.multi_add(txid, key_rows, value_list)
            else:
                new = state.multi_update(txid, key_rows, [Adder(v) for v in value_list])
            if self.opaque:
                state.commit(txid)
        finally:
            state.close()
        return time.perf_counter() - wall, time.process_time() - cpu, list(new)


def run(state_type: StateType, n: int, held: int, rounds: int) -> dict[tuple[str, str], Any]:
    directory = tempfile.mkdtemp(prefix="state-apply-")
    try:
        part = Partition(state_type, directory)
        pool = partition_keys(held + 2 * rounds * n, seed=7)
        held_keys, fresh = pool[:held], pool[held:]
        rng = random.Random(42)
        truth: dict[str, int] = {}
        t0 = time.perf_counter()
        txid = 0
        for lo in range(0, held, 50_000):  # a transaction a chunk
            chunk = held_keys[lo:lo + 50_000]
            txid += 1
            part.apply("multi_add", txid, chunk, [1] * len(chunk))
            truth.update(dict.fromkeys(chunk, 1))
        print(f"  {state_type.value}: {held:,} keys written in {time.perf_counter() - t0:.1f} s",
              flush=True)
        best: dict[tuple[str, str], tuple[float, float]] = {}
        for rnd in range(rounds):
            ways = ("multi_add", "multi_update") if rnd % 2 == 0 else ("multi_update", "multi_add")
            for way in ways:
                new_keys = fresh[:n]
                fresh = fresh[n:]
                cases = [("new", new_keys), ("existing", rng.sample(held_keys, n))]
                for case, keys in cases:
                    txid += 1
                    values = [rng.randint(1, 1000) for _ in keys]
                    want = [truth.get(k, 0) + v for k, v in zip(keys, values, strict=True)]
                    runs = [(case, txid)] + ([("replay", txid)] if case == "existing" else [])
                    for label, tx in runs:
                        wall, cpu, got = part.apply(way, tx, keys, values)
                        if got != want:
                            raise SystemExit(f"WRONG: {way} {label} returned other values")
                        old = best.get((label, way))
                        if old is None or wall < old[0]:
                            best[(label, way)] = (wall, cpu)
                    truth.update(zip(keys, want, strict=True))
        return {k: (w / n * 1e6, c / n * 1e6) for k, (w, c) in best.items()}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--keys", type=int, default=25_000, help="keys a batch (default 25,000)")
    ap.add_argument("--held", type=int, default=500_000,
                    help="keys the partition holds before (default 500,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each way (best kept)")
    ap.add_argument("--types", default="transactional,opaque",
                    help="comma-separated state types")
    args = ap.parse_args()
    print(f"# {args.keys:,} keys a batch into an LMDB partition holding {args.held:,}, "
          f"best of {args.rounds} rounds", flush=True)
    rows = []
    gc.disable()  # as ApplyColumns runs (gc_paused)
    try:
        for name in args.types.split(","):
            state_type = StateType(name.strip())
            res = run(state_type, args.keys, args.held, args.rounds)
            for case in ("new", "existing", "replay"):
                (aw, ac), (gw, gc_) = res[(case, "multi_add")], res[(case, "multi_update")]
                rows.append(f"| {state_type.value} | {case} | {aw:.2f} | {ac:.2f} | {gw:.2f} | "
                            f"{gc_:.2f} | {gw / aw:.2f}x |")
    finally:
        gc.enable()
    print("\nMicroseconds a key; ratio of multi_update's wall time to multi_add's:\n")
    print("| state | case | multi_add wall | multi_add CPU | multi_update wall | "
          "multi_update CPU | ratio |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
