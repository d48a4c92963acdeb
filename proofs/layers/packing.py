"""Several multilinear tables in one committed table, so one batch opening settles all their claims.

Tables of power-of-two lengths 2^k_i are placed largest first at offsets that are multiples of their
own length; the packed table (zero-padded to a power of two 2^n) then satisfies

    packed~(z, bits(offset_i / 2^k_i)) = table_i~(z)    for every z in F^k_i,

because eq factorizes over the variables and the high n - k_i variables select the block.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..field import EXT_DEGREE
from .common import boolean_point, log2, padded


@dataclass(frozen=True)
class Packing:
    """Offsets of tables with the given power-of-two ``lengths`` inside one table of ``2^num_vars``."""

    lengths: tuple

    @functools.cached_property
    def offsets(self) -> tuple:
        """Each table's offset (computed once: the packing is immutable)."""
        order = sorted(range(len(self.lengths)), key=lambda i: (-self.lengths[i], i))
        offsets, position = [0] * len(self.lengths), 0
        for i in order:
            offsets[i] = position
            position += self.lengths[i]
        return tuple(offsets)

    @property
    def num_vars(self) -> int:
        return log2(padded(sum(self.lengths), 1))

    def pack(self, tables) -> np.ndarray:
        """The packed base-field table (uint64, length 2^num_vars)."""
        packed = np.zeros(1 << self.num_vars, dtype=np.uint64)
        for table, offset, length in zip(tables, self.offsets, self.lengths):
            packed[offset:offset + length] = table
        return packed

    def point(self, index: int, local_point) -> np.ndarray:
        """The packed point whose evaluation equals table ``index``'s MLE at ``local_point``."""
        k = log2(self.lengths[index])
        selector = boolean_point(self.offsets[index] >> k, self.num_vars - k)
        return np.concatenate([np.asarray(local_point, dtype=np.uint64).reshape(k, EXT_DEGREE), selector])
