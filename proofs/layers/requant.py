"""Requantization by a shift, as a bit decomposition the proofs can check (zkDL, section 4.2).

An accumulator value z (integer) is requantized to z' = round(z / 2^R) = floor((z + h) / 2^R) with
h = 2^(R-1) (h = 0 when R = 0), leaving the remainder rem = z + h - 2^R z' in [0, 2^R). The prover
commits to the bits of both: R remainder bits and Q two's-complement bits of z', so that

    z  = sum_{j<R} 2^j b_j + sum_{t<Q-1} 2^(R+t) b_(R+t) - 2^(R+Q-1) b_(R+Q-1) - h     (rebuild)
    z' = sum_{t<Q-1} 2^t b_(R+t) - 2^(Q-1) b_(R+Q-1)                                   (output)

and the sign bit s = b_(R+Q-1) says z' < 0 (zkReLU uses it: relu(z') = (1 - s) z'). Since every
b_j is a bit, the remainder's range [0, 2^R) and z' in [-2^(Q-1), 2^(Q-1)) follow; with
R + Q <= FIELD_BITS the rebuild is injective mod p, so z is the true integer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..errors import ModelError
from ..quantize import round_shift
from .common import padded


@dataclass(frozen=True)
class Decomposition:
    """The public shape of a decomposition: shift R, signed width Q of z', whether ReLU selects, and
    whether the bit planes may be split into two committed groups (worth it for large tables only)."""

    shift: int
    q_bits: int
    relu: bool
    split: bool = True

    @property
    def width(self) -> int:
        """R + Q bits per element."""
        return self.shift + self.q_bits

    @property
    def groups(self) -> tuple:
        """Bit planes split into committed groups (start, count) of power-of-two counts covering the width.

        One group of padded(width) planes, unless two groups (the largest power of two <= width, then
        the rest padded) cover fewer planes: 17 bits become 16 + 1 planes instead of 32. Planes beyond
        the width hold zeros and have zero coefficients.
        """
        whole = padded(self.width, 1)
        first = 1 << (self.width.bit_length() - 1)
        rest = padded(self.width - first, 1)
        if not self.split or first == self.width or first + rest >= whole:
            return ((0, whole),)
        return ((0, first), (first, rest))

    @property
    def padded_width(self) -> int:
        """The number of committed bit planes (the groups' total)."""
        return sum(count for _, count in self.groups)

    @property
    def sign_index(self) -> int:
        return self.width - 1

    @property
    def offset(self) -> int:
        """h = 2^(R-1), or 0 when R = 0."""
        return 1 << (self.shift - 1) if self.shift else 0

    def _coefficients(self, base: int) -> np.ndarray:
        coefficients = np.zeros(self.padded_width, dtype=np.int64)
        coefficients[self.shift:self.width] = [1 << (base + t) for t in range(self.q_bits)]
        coefficients[self.sign_index] = -coefficients[self.sign_index]
        return coefficients

    def rebuild_coefficients(self) -> np.ndarray:
        """c with z = sum_j c_j b_j - h (one per committed plane, int64)."""
        coefficients = self._coefficients(self.shift)
        coefficients[:self.shift] = [1 << j for j in range(self.shift)]
        return coefficients

    def output_coefficients(self) -> np.ndarray:
        """c' with z' = sum_j c'_j b_j (one per committed plane, int64)."""
        return self._coefficients(0)


@dataclass(frozen=True, eq=False)
class DecompositionWitness:
    """The committed bits of one layer: ``bits`` is (planes, E) field elements (0/1 when honest), row j =
    bit j of every element; plus the integer tables they describe (kept for later proofs, e.g. a backward
    pass)."""

    spec: Decomposition
    bits: np.ndarray
    acc: np.ndarray
    shifted: np.ndarray
    out: np.ndarray

    @property
    def sign(self) -> np.ndarray:
        """The sign bits s (1 where z' < 0), the ReLU mask is 1 - s."""
        return self.bits[self.spec.sign_index]

    @property
    def remainder(self) -> np.ndarray:
        """rem = z + h - 2^R z' in [0, 2^R)."""
        return self.acc + self.spec.offset - (self.shifted << self.spec.shift)

    def table(self, group: int) -> np.ndarray:
        """The committed table of bit group ``group``: index e + E j (element low), length count E."""
        start, count = self.spec.groups[group]
        return self.bits[start:start + count].reshape(-1)


def decompose(acc, spec: Decomposition) -> DecompositionWitness:
    """Bits of the remainder and of z' = round(acc / 2^R) for every element of ``acc`` (int64 vector)."""
    acc = np.asarray(acc, dtype=np.int64)
    shifted = round_shift(acc, spec.shift)
    limit = 1 << (spec.q_bits - 1)
    if acc.size and (shifted.min() < -limit or shifted.max() >= limit):
        raise ModelError(f"requantized value out of its declared range [-{limit}, {limit}) "
                         f"(q_bits={spec.q_bits}): got [{shifted.min()}, {shifted.max()}]")
    remainder = acc + spec.offset - (shifted << spec.shift)
    two_complement = shifted & ((1 << spec.q_bits) - 1)
    bits = np.zeros((spec.padded_width, acc.size), dtype=np.uint64)
    for j in range(spec.shift):
        bits[j] = (remainder >> j) & 1
    for t in range(spec.q_bits):
        bits[spec.shift + t] = (two_complement >> t) & 1
    out = np.maximum(shifted, 0) if spec.relu else shifted
    return DecompositionWitness(spec, bits, acc, shifted, out)


def rebuild(bits, spec: Decomposition) -> tuple:
    """(z, layer output) as field elements from a (planes, E) bits table, by the module's two formulas."""
    acc = F.to_field(np.full(bits.shape[1], -spec.offset, dtype=np.int64))
    shifted = np.zeros(bits.shape[1], dtype=np.uint64)
    for j, (c, c_out) in enumerate(zip(F.to_field(spec.rebuild_coefficients()),
                                       F.to_field(spec.output_coefficients()))):
        acc = F.add(acc, F.mul(bits[j], c))
        shifted = F.add(shifted, F.mul(bits[j], c_out))
    if spec.relu:
        shifted = F.mul(shifted, F.sub(np.uint64(1), bits[spec.sign_index]))
    return acc, shifted
