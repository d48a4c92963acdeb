"""Public integers entering a proof: checked once, here, before they become field elements.

A verifier reads a public value (an input, a claimed output, a declared bound) as an integer ``v`` and the
relations read ``v mod p``. Two different integers with one residue (``y`` and ``y + p``) would then both be
accepted, so every public integer must lie in a declared interval narrower than the field: ``low <= v <= high``
with ``high - low < p``. The comparison is made on Python integers (``int(array.min())``), so no int64 edge case
(``abs(-2**63) == -2**63``) slips through, and only integer dtypes are read (a float or object array is refused:
``1e300`` or a Python big int would otherwise be cast silently).
"""
from __future__ import annotations

import numpy as np

from .errors import ProofRejected
from .field import P


def integer_array(values, name: str, where: str, shape=None) -> np.ndarray:
    """``values`` as an integer numpy array (of ``shape`` when given); ProofRejected naming ``name`` otherwise."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as error:
        raise ProofRejected(f"{name} is not an integer array ({error})", where) from None
    if array.dtype.kind not in "iu":
        raise ProofRejected(f"{name} has dtype {array.dtype}, expected integers", where)
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise ProofRejected(f"{name} of shape {tuple(array.shape)}, expected {tuple(shape)}", where)
    return array


def require_within(values, low: int, high: int, name: str, where: str, shape=None) -> np.ndarray:
    """Return ``values`` as an integer array after checking ``low <= v <= high`` for every entry, compared as
    Python integers; ProofRejected naming ``name`` and the interval otherwise. The interval must be narrower than
    the field (``high - low < p``), so an accepted value has exactly one preimage of its residue."""
    low, high = int(low), int(high)
    if high - low >= P:
        raise ValueError(f"interval [{low}, {high}] for {name} is not narrower than the field (p = {P})")
    array = integer_array(values, name, where, shape)
    if array.size:
        smallest, largest = int(array.min()), int(array.max())
        if smallest < low or largest > high:
            bad = smallest if smallest < low else largest
            raise ProofRejected(f"{name} holds {bad}, outside [{low}, {high}]", where)
    return array


def require_bounded(values, bound: int, name: str, where: str, shape=None) -> np.ndarray:
    """``require_within(values, -bound, bound, ...)``: the symmetric case, ``|v| <= bound``."""
    return require_within(values, -int(bound), int(bound), name, where, shape)
