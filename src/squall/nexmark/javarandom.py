"""`JavaRandom`: the linear congruential generator `java.util.Random` specifies, so that the
NEXMark generator draws the same numbers as Beam's, which seeds one `java.util.Random` with
each event's id.

The algorithm is the one `java.util.Random`'s documentation states: a 48-bit seed,
`seed = seed * 0x5DEECE66D + 0xB mod 2**48`, and the methods built on `next(bits)`.

>>> r = JavaRandom(42)
>>> r.next_int(), r.next_int_below(10), r.next_int_below(1000), r.next_int_below(64)
(-1170105035, 3, 248, 3)
>>> r.next_long(), r.next_double()
(5694868678511409995, 0.27707849007413665)
"""

from __future__ import annotations

_MULTIPLIER = 0x5DEECE66D
_ADDEND = 0xB
_MASK = (1 << 48) - 1
_INT_RANGE, _LONG_RANGE = 1 << 32, 1 << 64


class JavaRandom:
    """`java.util.Random` seeded with `seed` (a Java `long`)."""

    __slots__ = ("_seed",)

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ _MULTIPLIER) & _MASK

    def next_bits(self, bits: int) -> int:
        """Java's `next(bits)`: the top `bits` of the new seed, as a signed 32-bit int."""
        self._seed = (self._seed * _MULTIPLIER + _ADDEND) & _MASK
        value = self._seed >> (48 - bits)
        return value - _INT_RANGE if value >= 1 << 31 else value

    def next_int(self) -> int:
        """`nextInt()`: a uniform signed 32-bit int."""
        return self.next_bits(32)

    def next_int_below(self, bound: int) -> int:
        """`nextInt(bound)`: uniform in `[0, bound)`."""
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        r = self.next_bits(31)
        m = bound - 1
        if bound & m == 0:  # a power of two: the high bits
            return (bound * r) >> 31
        u = r
        r = u % bound
        while u - r + m >= 1 << 31:  # Java's int overflow: reject and draw again
            u = self.next_bits(31)
            r = u % bound
        return r

    def next_long(self) -> int:
        """`nextLong()`: a signed 64-bit int made of two 32-bit draws."""
        value = ((self.next_bits(32) << 32) + self.next_bits(32)) & (_LONG_RANGE - 1)
        return value - _LONG_RANGE if value >= 1 << 63 else value

    def next_double(self) -> float:
        """`nextDouble()`: uniform in `[0, 1)` with 53 random bits."""
        return ((self.next_bits(26) << 27) + self.next_bits(27)) * (1.0 / (1 << 53))
