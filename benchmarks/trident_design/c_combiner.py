"""C: combiner partial aggregation before the shuffle: the words are counted inside the
`mapInArrow` worker (per partition), so only (word, partial count) rows reach the JVM, which sums
them per word after the shuffle. Two forms: vectorised split + Arrow `group_by` count (built-in
`Count` over a batch function), and per-tuple `Split` + a Python dict combiner (Storm's
CombinerAggregator run per tuple before the shuffle). Against the hand-written job; W1, whole
input as one batch and 100,000 sentences per micro-batch.

    .venv/bin/python benchmarks/trident_design/c_combiner.py [--sentences 200000]
"""

import common


def arrow_combiner_jvm_sum(df):
    return common.jvm_sum(df.mapInArrow(common.split_and_combine_arrow,
                                        "word string, count long"))


def python_combiner_jvm_sum(df):
    return common.jvm_sum(df.mapInArrow(common.split_and_combine_python,
                                        "word string, count long"))


if __name__ == "__main__":
    common.compare("C: partial aggregation in the worker before the shuffle + JVM sum", {
        "C vectorised split + Arrow combiner + JVM sum": arrow_combiner_jvm_sum,
        "C' per-tuple Split + Python combiner + JVM sum": python_combiner_jvm_sum,
    })
