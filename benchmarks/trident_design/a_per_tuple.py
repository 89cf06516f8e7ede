"""A: a per-tuple Python `Split` function run inside `mapInArrow` (a Python loop per Arrow batch in
the worker, one `execute(tuple, collector)` call per sentence and one `emit` per word), then
Trident's built-in `Count` as a JVM aggregation (`groupBy(word).count()`, partial aggregation
before the shuffle), against the hand-written job; W1, whole input as one batch and 100,000
sentences per micro-batch.

    .venv/bin/python benchmarks/trident_design/a_per_tuple.py [--sentences 200000]
"""

import common


def per_tuple_split_jvm_count(df):
    split = common.each_per_tuple(common.Split(), 0, ["word"], [common.pa.string()])
    return common.jvm_count(df.mapInArrow(split, "word string"))


if __name__ == "__main__":
    common.compare("A: per-tuple Split in mapInArrow + JVM count",
                   {"A per-tuple Split + JVM count": per_tuple_split_jvm_count})
