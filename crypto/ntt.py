"""Negacyclic number-theoretic transforms over many RNS limbs, behind one backend interface.

Output-order contract, shared bit for bit by every backend::

    forward(a)[l, i] = Σ_j a[l, j] · ψ_l^((2·brv(i) + 1)·j)  mod q_l

where brv reverses log2(n) bits and ψ_l = ``primitive_2n_root(q_l, n)``: the evaluations of the
polynomial a_l(X) at the odd powers of ψ_l, in bit-reversed order (what an in-place Cooley–Tukey
transform without a final permutation produces; Longa & Naehrig, "Speeding up the NTT", 2016).
``inverse`` is its exact inverse, n^-1 included.

Backends: ``numpy`` (radix-2, vectorized over limbs and butterflies), ``numba`` (compiled radix-2
with Shoup multiplication), ``cross`` (CROSS matmul form, ``crypto.cross``), ``jax`` (the CROSS form as
int8 matmuls on XLA devices, ``crypto.jax_backend``), and ``auto``.
"""
from __future__ import annotations

import numpy as np

from .backend_select import BackendSelector, candidate_backend
from .errors import ParameterError
from .ntt_base import BasisConversion, NTTBackend, NTTTables, NumbaRadix2, NumpyRadix2, bit_reverse_indices

__all__ = ["AutoBackend", "BACKEND_NAMES", "BasisConversion", "NTTBackend", "NTTTables", "NumbaRadix2", "NumpyRadix2",
           "bit_reverse_indices", "get_backend"]


class AutoBackend(NTTBackend):
    """Picks a backend per (n, number of limbs) from a calibration measured once (``crypto.backend_select``).

    ``selector``: a ``BackendSelector`` (default: all candidates, timings cached under ~/.cache/hezk/).
    """

    name = "auto"

    def __init__(self, selector=None):
        if selector is None:
            selector = BackendSelector()
        self.selector = selector

    def __repr__(self):
        return f"AutoBackend({self.selector!r})"

    def choose(self, tables_or_n, limbs: int | None = None) -> NTTBackend:
        """The backend the calibration found fastest for NTTs over these tables, or for ``limbs``
        limbs of size n (``choose(n, limbs)`` calibrates on 31-bit NTT primes)."""
        if isinstance(tables_or_n, NTTTables):
            return self.selector.for_ntt(tables_or_n)
        return self.selector.for_size(int(tables_or_n), 1 if limbs is None else int(limbs))

    def forward(self, a, tables):
        return self.choose(tables).forward(a, tables)

    def inverse(self, a, tables):
        return self.choose(tables).inverse(a, tables)

    def forward_into(self, a, tables, out):
        return self.choose(tables).forward_into(a, tables, out)

    def inverse_into(self, a, tables, out):
        return self.choose(tables).inverse_into(a, tables, out)

    def convert_basis(self, x, conv):
        return self.selector.for_conversion(conv, np.shape(x)[-1]).convert_basis(x, conv)


BACKEND_NAMES = ("auto", "numpy", "numba", "radix2", "cross", "fourstep", "jax")


def get_backend(name: str | NTTBackend = "auto") -> NTTBackend:
    """A backend by name: 'auto', 'numpy', 'numba' (alias 'radix2'), 'cross', 'fourstep' or 'jax' (an
    NTTBackend instance passes through).

    'cross' is ``crypto.cross.CrossBackend()`` (BAT + MAT on BLAS, widest exact chunks), 'fourstep'
    ``crypto.cross.FourStepBackend()`` (the MAT layout with compiled butterflies), 'jax'
    ``crypto.jax_backend.JaxBackend()`` (MAT/BAT as int8 matmuls on XLA; needs the ``jax`` extra); 'auto' chooses
    among the others by measurement (``crypto.backend_select``).
    """
    if isinstance(name, NTTBackend):
        return name
    if name == "auto":
        return AutoBackend()
    if name in BACKEND_NAMES:
        return candidate_backend("numba" if name == "radix2" else name)
    raise ParameterError(f"backend={name!r} not one of {BACKEND_NAMES}")
