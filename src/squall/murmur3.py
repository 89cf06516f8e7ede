"""Spark's `hash()` in Python: Murmur3 (x86, 32-bit, seed 42) as Spark's JVM computes it.

Spark places a row in partition `pmod(hash(columns), n)` (`HashPartitioning`), with
`hash(c1, c2, ...)` folding the columns in order, each column's hash seeded with the one before
and a null column leaving it as it is. A string hashes its UTF-8 bytes with Spark's
`Murmur3_x86_32.hashUnsafeBytes` (whose tail bytes, unlike the reference Murmur3, are mixed in
one by one, each a signed byte), a long with `hashLong`. `key_hash` computes the same for a key
tuple of Python values, so a key's partition is the same in Spark's JVM, in a Python worker and
on the local runner: a `str` field hashes as a Spark string, an `int` in the 64-bit range as a
Spark long, None as a null; any other value (a float, a bool, bytes, a tuple, a larger int)
hashes the bytes of its pickle, which only Python computes.

`key_hashes` does the same for many keys, vectorised column by column when every key has the
same fields and each field holds only strings (one pass per string length) or only 64-bit ints
in every key, as a Trident state's keys do: about fifty times faster than a loop.

>>> hash_long(0), hash_long(1), hash_long(-1)
(-1670924195, -1712319331, -939490007)
>>> hash_bytes(b"k1"), key_hash(("k1",)), key_hash(("k1", None)), key_hash(("k1", 7))
(2067321769, 2067321769, 2067321769, -2071457203)
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

SEED = 42
_MASK = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = ((k1 << 15) | (k1 >> 17)) & _MASK
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _MASK
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def hash_bytes(data: bytes, seed: int = SEED) -> int:
    """Spark's `Murmur3_x86_32.hashUnsafeBytes(data, seed)`, a signed 32-bit int (the hash of a
    string column holding `data` as UTF-8, and of a binary column)."""
    h1 = seed & _MASK
    aligned = len(data) - len(data) % 4
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:  # Spark mixes each tail byte alone, sign-extended
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, len(data))


def hash_long(value: int, seed: int = SEED) -> int:
    """Spark's `Murmur3_x86_32.hashLong(value, seed)`, a signed 32-bit int (the hash of a
    bigint column holding `value`)."""
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _fmix(h1, 8)


def _pickled(value: Any) -> bytes:
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, 5)
    pickler.fast = True  # no memo: the bytes depend on the value alone
    pickler.dump(value)
    return buf.getvalue()


def key_hash(key: Sequence[Any]) -> int:
    """Spark's `hash(c1, c2, ...)` of the columns holding the fields of `key` (see above)."""
    h = SEED
    for value in key:
        kind = type(value)
        if value is None:
            continue
        if kind is str:
            h = hash_bytes(value.encode("utf-8", "surrogatepass"), h)
        elif kind is int and _LONG_MIN <= value <= _LONG_MAX:
            h = hash_long(value, h)
        else:
            h = hash_bytes(_pickled(value), h)
    return h


def key_hashes(keys: Sequence[Sequence[Any]]) -> list[int]:
    """`key_hash` of each of `keys`.

    >>> keys = [("k1",), ("abcde",), ("é日本",), ("",)]
    >>> key_hashes(keys) == [key_hash(k) for k in keys]
    True
    >>> mixed = [(n, f"day-{n % 3}") for n in range(-40, 40)] + [(2**63 - 1, "x"), (-(2**63), "")]
    >>> key_hashes(mixed) == [key_hash(k) for k in mixed]
    True
    """
    if len(keys) < 64 or len({len(k) for k in keys}) != 1:
        return [key_hash(k) for k in keys]
    h = np.full(len(keys), SEED, np.uint32)
    for j in range(len(keys[0])):
        column = [k[j] for k in keys]
        kinds = set(map(type, column))
        if kinds == {str}:
            h = _hash_strings(column, h)
        elif kinds == {int} and min(column) >= _LONG_MIN and max(column) <= _LONG_MAX:
            h = _hash_longs(np.array(column, np.int64), h)
        else:  # None, other types: the loop
            return [key_hash(k) for k in keys]
    return h.view(np.int32).astype(np.int64).tolist()


def _hash_strings(values: list[str], seeds: np.ndarray) -> np.ndarray:
    """`hash_bytes` of each string's UTF-8 bytes with its seed (uint32), one pass per length."""
    data = [v.encode("utf-8", "surrogatepass") for v in values]
    out = np.empty(len(data), np.uint32)
    lengths = np.fromiter(map(len, data), np.int64, len(data))
    for length in np.unique(lengths).tolist():
        at = np.flatnonzero(lengths == length)
        out[at] = _hash_same_length([data[i] for i in at.tolist()], length, seeds[at])
    return out


def _hash_longs(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """`hash_long` of each int64 with its seed (uint32), with numpy's wrapping arithmetic."""
    unsigned = values.view(np.uint64)
    with np.errstate(over="ignore"):
        h1 = _np_mix_h1(seeds, _np_mix_k1((unsigned & np.uint64(_MASK)).astype(np.uint32)))
        h1 = _np_mix_h1(h1, _np_mix_k1((unsigned >> np.uint64(32)).astype(np.uint32)))
        return _np_fmix(h1, 8)


def _hash_same_length(data: list[bytes], length: int, seeds: np.ndarray) -> np.ndarray:
    """`hash_bytes` of byte strings all of `length` bytes, each with its seed (uint32), with
    numpy's wrapping uint32 arithmetic."""
    rows = np.frombuffer(b"".join(data), np.uint8).reshape(len(data), length)
    h1 = seeds.astype(np.uint32)
    aligned = length - length % 4
    words = np.ascontiguousarray(rows[:, :aligned]).view("<u4")
    with np.errstate(over="ignore"):
        for j in range(aligned // 4):
            h1 = _np_mix_h1(h1, _np_mix_k1(words[:, j].astype(np.uint32)))
        for j in range(aligned, length):  # tail bytes alone, sign-extended
            h1 = _np_mix_h1(h1, _np_mix_k1(rows[:, j].view(np.int8).astype(np.int32)
                                           .view(np.uint32)))
        return _np_fmix(h1, length)


def _np_fmix(h1: np.ndarray, length: int) -> np.ndarray:
    h1 = h1 ^ np.uint32(length)
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def _np_mix_k1(k1: np.ndarray) -> np.ndarray:
    k1 = k1 * np.uint32(_C1)
    k1 = (k1 << np.uint32(15)) | (k1 >> np.uint32(17))
    return k1 * np.uint32(_C2)


def _np_mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = h1 ^ k1
    h1 = (h1 << np.uint32(13)) | (h1 >> np.uint32(19))
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)
