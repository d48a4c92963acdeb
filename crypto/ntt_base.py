"""Negacyclic NTT foundations: tables, basis conversions, the backend interface and radix-2 backends.

The output-order contract every backend meets is stated in ``crypto.ntt`` (which adds the ``auto``
backend and ``get_backend``); CROSS backends (``crypto.cross``) build on this module.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from .errors import ParameterError
from .modarith import inv_mod, is_ntt_prime, primitive_2n_root, shoup_precompute

#: Smallest piece of work handed to a thread of ``hezk.threads`` (below it a call stays in the calling thread, where
#: the pool's hand-off, tens of microseconds, would cost more than it saves): coefficients of an NTT ...
PARALLEL_MIN_WORK = 1 << 15
#: ... and modular products of a basis conversion or key-switching inner product.
PARALLEL_MIN_PRODUCTS = 1 << 20


def bit_reverse_indices(n: int) -> np.ndarray:
    """brv(i) for i < n, n a power of two."""
    bits = n.bit_length() - 1
    idx = np.arange(n, dtype=np.int64)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev


class NTTTables:
    """Constants of the negacyclic NTT of size n for each modulus (rows follow ``moduli``).

    ``psi_rev[l, i] = ψ_l^brv(i)``, ``psi_inv_rev[l, i] = ψ_l^-brv(i)``, with Shoup companions.
    Immutable after construction; ``subset`` gives the tables of a sub-basis (cached).
    """

    def __init__(self, n: int, moduli):
        if n < 2 or n & (n - 1):
            raise ParameterError(f"ring degree n={n} is not a power of two >= 2")
        moduli = tuple(int(q) for q in moduli)
        for q in moduli:
            if not is_ntt_prime(q, n):
                raise ParameterError(f"modulus {q} is not a prime < 2^31 with q ≡ 1 mod 2N={2 * n}")
        self.n = n
        self.moduli = moduli
        self.psi = tuple(primitive_2n_root(q, n) for q in moduli)
        self.q = np.array(moduli, dtype=np.uint64)
        self.n_inv = np.array([inv_mod(n, q) for q in moduli], dtype=np.uint64)
        self.n_inv_shoup = shoup_precompute(self.n_inv, self.q)
        for arr in (self.q, self.n_inv, self.n_inv_shoup):
            arr.setflags(write=False)
        self._subsets: dict[tuple[int, ...], NTTTables] = {}

    def _build_root_tables(self) -> None:
        """The (k, n) power tables, made on first access: a backend with its own tables (fourstep) never
        reads them, and they cost 4·k·n words (140 MB at N = 2^16 with 67 primes)."""
        n, k = self.n, len(self.moduli)
        rev = bit_reverse_indices(n)
        psi_rev = np.empty((k, n), dtype=np.uint64)
        psi_inv_rev = np.empty((k, n), dtype=np.uint64)
        for l, (q, psi) in enumerate(zip(self.moduli, self.psi)):
            psi_rev[l] = _powers(psi, n, q)[rev]
            psi_inv_rev[l] = _powers(inv_mod(psi, q), n, q)[rev]
        tables = {"psi_rev": psi_rev, "psi_inv_rev": psi_inv_rev,
                  "psi_rev_shoup": shoup_precompute(psi_rev, self.q[:, None]),
                  "psi_inv_rev_shoup": shoup_precompute(psi_inv_rev, self.q[:, None])}
        for name, arr in tables.items():
            arr.setflags(write=False)
            self.__dict__.setdefault(name, arr)     # a concurrent first access keeps one copy

    def subset(self, idx) -> "NTTTables":
        """Tables for the moduli at positions ``idx`` (no recomputation).  The arrays of a subset are made on
        first use (a backend with its own tables, e.g. fourstep, reads only ``moduli`` and ``psi``), as views
        when ``idx`` is a contiguous range: key switching touches hundreds of sub-bases, and copied rows of
        every one of them cost gigabytes at N = 2^16."""
        key = tuple(int(i) for i in idx)
        if key == tuple(range(len(self.moduli))):
            return self
        if key not in self._subsets:
            sub = object.__new__(NTTTables)
            sub.n = self.n
            sub.moduli = tuple(self.moduli[i] for i in key)
            sub.psi = tuple(self.psi[i] for i in key)
            sub._parent, sub._rows = self, key
            sub._subsets = {}
            self._subsets[key] = sub
        return self._subsets[key]

    def __getattr__(self, name):
        """A power table (``_build_root_tables``) or a subset's table ``name`` (see ``subset``), made on
        first access."""
        if name not in _TABLE_ARRAYS:
            raise AttributeError(name)
        parent = self.__dict__.get("_parent")
        if parent is None:
            if "moduli" not in self.__dict__:      # not constructed (e.g. during unpickling)
                raise AttributeError(name)
            self._build_root_tables()
            return self.__dict__[name]
        rows = self.__dict__["_rows"]
        start = rows[0] if rows else 0
        if rows == tuple(range(start, start + len(rows))):
            arr = getattr(parent, name)[start: start + len(rows)]        # a view: no copy
        else:
            arr = np.ascontiguousarray(getattr(parent, name)[np.array(rows, dtype=np.int64)])
            arr.setflags(write=False)
        self.__dict__[name] = arr
        return arr


_TABLE_ARRAYS = ("q", "psi_rev", "psi_inv_rev", "psi_rev_shoup", "psi_inv_rev_shoup", "n_inv", "n_inv_shoup")


def _powers(base: int, count: int, q: int) -> np.ndarray:
    """[base^0, ..., base^(count-1)] mod q, by doubling: block [k, 2k) = block [0, k) · base^k."""
    out = np.empty(count, dtype=np.uint64)
    out[0] = 1
    filled, step = 1, base % q
    while filled < count:
        take = min(filled, count - filled)
        out[filled:filled + take] = out[:take] * np.uint64(step) % np.uint64(q)
        filled += take
        step = step * step % q
    return out


@dataclass(frozen=True, eq=False)
class BasisConversion:
    """Constants of the fast RNS basis conversion from ``from_moduli`` (product Q) to ``to_moduli``.

    y_j = Σ_i [x_i · (Q/q_i)^-1]_{q_i} · (Q/q_i) mod p_j  (Bajard et al. 2016; Halevi–Polyakov–Shoup 2019):
    exact up to adding u·Q with 0 <= u < len(from_moduli).
    """

    from_moduli: tuple[int, ...]
    to_moduli: tuple[int, ...]
    q_from: np.ndarray = field(init=False, repr=False)
    q_to: np.ndarray = field(init=False, repr=False)
    qhat_inv: np.ndarray = field(init=False, repr=False)        # (k,)   [(Q/q_i)^-1]_{q_i}
    qhat_inv_shoup: np.ndarray = field(init=False, repr=False)
    qhat_mod_p: np.ndarray = field(init=False, repr=False)      # (k, k') (Q/q_i) mod p_j
    qhat_mod_p_shoup: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        big_q = 1
        for q in self.from_moduli:
            big_q *= q
        qhat = [big_q // q for q in self.from_moduli]
        q_from = np.array(self.from_moduli, dtype=np.uint64)
        q_to = np.array(self.to_moduli, dtype=np.uint64)
        qhat_inv = np.array([inv_mod(h % q, q) for h, q in zip(qhat, self.from_moduli)], dtype=np.uint64)
        qhat_mod_p = np.array([[h % p for p in self.to_moduli] for h in qhat], dtype=np.uint64)
        qhat_mod_p = qhat_mod_p.reshape(len(self.from_moduli), len(self.to_moduli))
        values = dict(q_from=q_from, q_to=q_to, qhat_inv=qhat_inv,
                      qhat_inv_shoup=shoup_precompute(qhat_inv, q_from),
                      qhat_mod_p=qhat_mod_p,
                      qhat_mod_p_shoup=shoup_precompute(qhat_mod_p, q_to[None, :]))
        for name, arr in values.items():
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)


class NTTBackend(ABC):
    """Interface of an NTT backend: all methods take and return uint64 arrays of shape (k, n)."""

    name: str = "abstract"

    @abstractmethod
    def forward(self, a: np.ndarray, tables: NTTTables) -> np.ndarray:
        """Negacyclic NTT of each row (row l mod tables.moduli[l]); bit-reversed output order."""

    @abstractmethod
    def inverse(self, a: np.ndarray, tables: NTTTables) -> np.ndarray:
        """Exact inverse of ``forward``."""

    def forward_into(self, a: np.ndarray, tables: NTTTables, out: np.ndarray) -> np.ndarray:
        """``forward(a)`` written into ``out`` (a writable array of a's shape; ``a`` itself allowed);
        backends with an in-place kernel override this to skip the temporary."""
        out[...] = self.forward(a, tables)
        return out

    def inverse_into(self, a: np.ndarray, tables: NTTTables, out: np.ndarray) -> np.ndarray:
        """``inverse(a)`` written into ``out`` (see ``forward_into``)."""
        out[...] = self.inverse(a, tables)
        return out

    @abstractmethod
    def convert_basis(self, x: np.ndarray, conv: BasisConversion) -> np.ndarray:
        """Fast basis conversion of coefficient-form residues (len(conv.from_moduli), n) -> (len(conv.to_moduli), n)."""

    def __repr__(self):
        return f"{type(self).__name__}()"


class NumpyRadix2(NTTBackend):
    """Radix-2 Cooley–Tukey / Gentleman–Sande, each stage one vectorized numpy expression over all limbs."""

    name = "numpy"

    def forward(self, a, tables):
        a = np.array(a, dtype=np.uint64, copy=True)
        k, n = a.shape
        q = tables.q[:, None, None]
        m, t = 1, n
        while m < n:
            t //= 2
            blocks = a.reshape(k, m, 2, t)
            w = tables.psi_rev[:, m:2 * m, None]
            ws = tables.psi_rev_shoup[:, m:2 * m, None]
            u = blocks[:, :, 0, :]
            v = _mul_shoup(blocks[:, :, 1, :], w, ws, q)
            hi = u + q - v
            lo = u + v
            blocks[:, :, 0, :] = np.where(lo >= q, lo - q, lo)
            blocks[:, :, 1, :] = np.where(hi >= q, hi - q, hi)
            m *= 2
        return a

    def inverse(self, a, tables):
        a = np.array(a, dtype=np.uint64, copy=True)
        k, n = a.shape
        q = tables.q[:, None, None]
        m, t = n, 1
        while m > 1:
            h = m // 2
            blocks = a.reshape(k, h, 2, t)
            w = tables.psi_inv_rev[:, h:m, None]
            ws = tables.psi_inv_rev_shoup[:, h:m, None]
            u = blocks[:, :, 0, :].copy()
            v = blocks[:, :, 1, :]
            s = u + v
            blocks[:, :, 0, :] = np.where(s >= q, s - q, s)
            blocks[:, :, 1, :] = _mul_shoup(u + q - v, w, ws, q)
            t *= 2
            m = h
        return _mul_shoup(a, tables.n_inv[:, None], tables.n_inv_shoup[:, None], tables.q[:, None])

    def convert_basis(self, x, conv):
        x = np.asarray(x, dtype=np.uint64)
        xi = _mul_shoup(x, conv.qhat_inv[:, None], conv.qhat_inv_shoup[:, None], conv.q_from[:, None])
        out = np.zeros((len(conv.to_moduli), x.shape[1]), dtype=np.uint64)
        p = conv.q_to[:, None]
        for i in range(len(conv.from_moduli)):
            out += _mul_shoup(xi[i][None, :], conv.qhat_mod_p[i][:, None], conv.qhat_mod_p_shoup[i][:, None], p)
        return out % p


def _mul_shoup(x, w, w_shoup, q):
    """x·w mod q for x < 2^32 (broadcasting), result in [0, q)."""
    t = (x * w_shoup) >> np.uint64(32)
    r = x * w - t * q
    return np.where(r >= q, r - q, r)


class NumbaRadix2(NTTBackend):
    """The same butterflies as ``NumpyRadix2``, compiled with numba (Shoup products, one pass per limb)."""

    name = "numba"

    def forward(self, a, tables):
        from ._ntt_kernels import ntt_forward_inplace
        out = np.array(a, dtype=np.uint64, copy=True, order="C")
        ntt_forward_inplace(out, tables.psi_rev, tables.psi_rev_shoup, tables.q)
        return out

    def inverse(self, a, tables):
        from ._ntt_kernels import ntt_inverse_inplace
        out = np.array(a, dtype=np.uint64, copy=True, order="C")
        ntt_inverse_inplace(out, tables.psi_inv_rev, tables.psi_inv_rev_shoup, tables.q,
                            tables.n_inv, tables.n_inv_shoup)
        return out

    def convert_basis(self, x, conv):
        from ._ntt_kernels import fast_basis_convert
        x = np.ascontiguousarray(x, dtype=np.uint64)
        return fast_basis_convert(x, conv.q_from, conv.qhat_inv, conv.qhat_inv_shoup,
                                  conv.q_to, conv.qhat_mod_p, conv.qhat_mod_p_shoup)
