"""B: a vectorised batch split (pyarrow.compute `split_pattern` + `list_flatten` on the whole
column per Arrow batch inside `mapInArrow`: the user's batch function) + JVM count, and for
reference Spark SQL's `explode(split(sentence, ' '))` + JVM count (no Python at all: not a user
function), against the hand-written job; W1, whole input as one batch and 100,000 sentences per
micro-batch.

    .venv/bin/python benchmarks/trident_design/b_vectorised.py [--sentences 200000]
"""

import common


def vectorised_split_jvm_count(df):
    return common.jvm_count(df.mapInArrow(common.split_vectorised, "word string"))


def sql_split_jvm_count(df):
    from pyspark.sql import functions as F

    return common.jvm_count(df.select(F.explode(F.split("sentence", " ")).alias("word")))


if __name__ == "__main__":
    common.compare("B: vectorised split + JVM count", {
        "B pyarrow split in mapInArrow + JVM count": vectorised_split_jvm_count,
        "B' Spark SQL explode(split) + JVM count": sql_split_jvm_count,
    })
