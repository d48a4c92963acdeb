"""Precision of approximate results against numpy, in bits: -log2 |error| per slot.

``PrecisionStats`` summarises one comparison (min/mean/median bits and the max absolute error);
``STATED_BITS`` is the bound this library states and its tests assert, per preset, for one ct×ct
multiply (with relinearization and rescale) of inputs in [-1, 1]: min bits over all slots must be at
least that number.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError

# An exact match would be +inf bits; report it as this many instead (beyond float64's 53 bits).
_EXACT_BITS = 60.0

# Minimum precision (bits, worst slot) after one multiply + relinearize + rescale of inputs in [-1, 1],
# per preset.  Measured values sit several bits above these (see benchmarks/ckks.py).
STATED_BITS = {"TOY": 20.0, "N13": 20.0, "N14": 20.0, "N15": 20.0, "N16": 20.0}


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
