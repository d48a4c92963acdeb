"""Precision of approximate results against numpy, in bits: -log2 |error| per slot.

``PrecisionStats`` summarises one comparison (min/mean/median bits and the max absolute error);
``STATED_BITS``, ``ROTATION_BITS`` and ``DEPTH_BITS`` are the bounds this library states and its
tests assert, per preset: worst-slot bits after one ct×ct multiply (relinearized and rescaled), after
one rotation, and after a chain of multiplies through every level, for inputs in [-1, 1].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError

# An exact match would be +inf bits; report it as this many instead (beyond float64's 53 bits).
_EXACT_BITS = 60.0

# Bounds this library states (bits, worst slot, inputs in [-1, 1], public-key encryption), per preset;
# tests/crypto/test_ckks_precision.py asserts them.  Measured values sit 2-4 bits above (see the report
# of benchmarks/ckks.py).  Rotations are limited by hybrid key-switching noise, ~N·(largest digit)/P:
# at N14 the first digit (85 bits) exceeds P (78 bits), which costs about 6 bits.  N16_BOOT (Δ = 2^60)
# measured 39.9, 39.8 and 42.8 bits.
STATED_BITS = {"TOY": 30.0, "N13": 30.0, "N14": 28.0, "N15": 28.0, "N16": 26.0, "N16_BOOT": 36.0}  # ct×ct mul
ROTATION_BITS = {"TOY": 30.0, "N13": 28.0, "N14": 22.0, "N15": 27.0, "N16": 26.0, "N16_BOOT": 36.0}  # a rotation
DEPTH_BITS = {"TOY": 28.0, "N13": 28.0, "N14": 26.0, "N15": 24.0, "N16": 22.0, "N16_BOOT": 36.0}  # mul per level


@dataclass(frozen=True)
class PrecisionStats:
    """Bits of precision of ``actual`` against ``expected``: -log2 |actual - expected| per slot."""

    min_bits: float
    mean_bits: float
    median_bits: float
    max_abs_error: float

    def __str__(self):
        return (f"precision: min {self.min_bits:.1f} bits, mean {self.mean_bits:.1f}, "
                f"median {self.median_bits:.1f} (max |error| {self.max_abs_error:.3g})")


def precision_stats(expected, actual) -> PrecisionStats:
    """Compare two equally shaped arrays (real or complex); errors are absolute."""
    exp = np.asarray(expected)
    act = np.asarray(actual)
    if exp.shape != act.shape:
        raise ShapeError(f"actual has shape {act.shape}, expected has shape {exp.shape}")
    if exp.size == 0:
        raise ShapeError("cannot measure the precision of empty arrays")
    err = np.abs(act.astype(np.complex128) - exp.astype(np.complex128)).ravel()
    with np.errstate(divide="ignore"):
        bits = np.minimum(-np.log2(err), _EXACT_BITS)
    return PrecisionStats(min_bits=float(bits.min()), mean_bits=float(bits.mean()),
                          median_bits=float(np.median(bits)), max_abs_error=float(err.max()))


def precision_bits(expected, actual) -> float:
    """Worst-slot precision in bits (the number tests assert)."""
    return precision_stats(expected, actual).min_bits
