"""The benchmark workloads' data, generated as docs/benchmarks.md specifies.

>>> sentences = w1_sentences(3)
>>> len(sentences), len(sentences[0].split())
(3, 10)
"""

from __future__ import annotations

import random

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def vocabulary(size: int = 10_000) -> list[str]:
    return [f"w{i}{LETTERS[i % 26] * (1 + i % 5)}" for i in range(size)]


def w1_sentences(n: int = 200_000, words: int = 10) -> list[str]:
    """`n` sentences of `words` words drawn with random.Random(42) from the vocabulary."""
    vocab = vocabulary()
    rnd = random.Random(42)
    return [" ".join(vocab[rnd.randrange(10_000)] for _ in range(words)) for _ in range(n)]


def reference_counts(sentences: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in sentences:
        for w in line.split():
            counts[w] = counts.get(w, 0) + 1
    return counts
