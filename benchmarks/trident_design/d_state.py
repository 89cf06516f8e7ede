"""D: the exactly-once state step alone: applying one batch's partial aggregates (word -> count)
to a durable map state on the driver, keyed by txid, with Storm's transactional / opaque rules;
measured apart from the dataflow, against the hand-written W1 job's time in the same session.

    .venv/bin/python benchmarks/trident_design/d_state.py [--keys 10000,100000] [--no-spark]

For each store (see common.STATES) and key count: txid 1 (every key new), txid 2 (every key
updated), txid 2 again (a replay: skipped), and for the opaque map a re-attempt of txid 2 with
different values (applied on the previous values). 10,000 keys are W1's 2M words' distinct
words with their counts; larger key counts use synthetic keys. The state files are in a
temporary directory on the local disk (as a checkpoint location would be).
"""

import argparse
import shutil
import tempfile
import time

import common


def one_store(kind, keys, values, root, reps):
    rows = []
    for _ in range(reps):
        st = common.new_state(root, kind)
        t = []
        for txid, vals in ((1, values), (2, values), (2, values)):
            t0 = time.perf_counter()
            st.apply(txid, keys, vals)
            t.append(time.perf_counter() - t0)
        want = {k: 2 * v for k, v in zip(keys, values, strict=True)}
        if st.counts() != want:
            raise AssertionError(f"{kind}: wrong state after txid 1, 2, 2")
        if kind == "sql-opaque":
            changed = [v + 1 for v in values]
            t0 = time.perf_counter()
            st.apply_attempt(2, keys, changed)
            t.append(time.perf_counter() - t0)
            want = {k: v + c for k, v, c in zip(keys, values, changed, strict=True)}
            if st.counts() != want:
                raise AssertionError("opaque re-attempt: wrong state")
        if kind == "file":
            t0 = time.perf_counter()
            if st.recover() != st.counts():
                raise AssertionError("file state: recovery differs")
            t.append(time.perf_counter() - t0)
        rows.append(t)
    return [common.median(col) for col in zip(*rows, strict=True)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true", help="skip the hand-written job")
    ap.add_argument("--sentences", type=int, default=200_000)
    args = ap.parse_args()
    common.header("D: exactly-once map-state step on the driver")
    sentences = common.w1_sentences(args.sentences)
    ref = common.reference_counts(sentences)
    base = None
    if not args.no_spark:
        spark = common.session()
        df = spark.createDataFrame(common.pa.table({"sentence": sentences})).repartition(2)
        df = df.cache()
        df.count()
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            counts = common.table_counts(common.baseline_plan(df).toArrow())
            times.append(time.perf_counter() - t0)
            common.check("hand-written job", counts, ref)
        base = common.median(times[1:])
        print(f"hand-written job (whole input): rounds {' '.join(f'{x:.2f}' for x in times)} s, "
              f"median of rounds 2-4 {base:.2f} s", flush=True)
        spark.stop()
    root = tempfile.mkdtemp(prefix="trident-state-")
    for kind in common.STATES:  # warm-up (imports, first file and SQLite use), not reported
        one_store(kind, [f"w{i}" for i in range(100)], [1] * 100, root, 1)
    for n in [int(x) for x in args.keys.split(",")]:
        if n == len(ref):
            keys, values = list(ref), list(ref.values())
            what = "W1's distinct words"
        else:
            keys = [f"k{i}" for i in range(n)]
            values = [1 + i % 400 for i in range(n)]
            what = "synthetic keys"
        print(f"\n# {n:,} keys ({what}); median of {args.reps} fresh states; seconds", flush=True)
        for kind, cls in common.STATES.items():
            if kind == "kv" and n > 100_000:
                print(f"{kind:<11} skipped above 100,000 keys (see 100,000)", flush=True)
                continue
            t = one_store(kind, keys, values, root, args.reps)
            extra = ""
            if kind == "sql-opaque":
                extra = f", opaque re-attempt of txid 2 {t[3]:.3f}"
            if kind == "file":
                extra = f", recovery (read 2 files) {t[3]:.3f}"
            rel = f" = {t[1] / base:.0%} of the hand-written job" if base else ""
            print(f"{kind:<11} txid 1 (insert) {t[0]:.3f}, txid 2 (update) {t[1]:.3f}{rel}, "
                  f"replay of txid 2 {t[2]:.4f}{extra}  [{cls.name}]", flush=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
