"""Polynomials of Z_Q[X]/(X^N + 1) in RNS form: one row (limb) per prime, coefficient or NTT form.

``RingContext`` holds the NTT tables and basis-conversion constants of a modulus chain (the Q primes
then the P primes of a CKKS parameter set); ``RNSPoly`` is an immutable value over a subset of those
moduli (``idx``: positions in ``ring.moduli``). The exact reference for every operation is Python
big-int arithmetic on the CRT-composed coefficients (``to_ints``).
"""
from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

from hezk.threads import parallel

from .errors import ContextMismatchError, ParameterError
from .modarith import crt_compose, centered, inv_mod, shoup_precompute
from ._ntt_kernels import (addmod_rows, divide_round_correction, muladd_permute_rows, muladd_rows,
                           muladd_scalar_rows, mulmod_rows, mulmod_scalar_rows, negmod_rows, permute_rows, submod_rows,
                           tensor_add_rows, tensor_rows, wide_residues_rows)
from .ntt import AutoBackend, BasisConversion, NTTTables, bit_reverse_indices, get_backend
from .ntt_base import PARALLEL_MIN_WORK


class _ScratchBuffers(threading.local):
    def __init__(self):
        self.buffers: dict = {}
        self.busy: set = set()


_scratch = _ScratchBuffers()


@contextlib.contextmanager
def scratch_rows(name: str, rows: int, n: int):
    """This thread's reusable uint64 (rows, n) buffer ``name`` for an array consumed before the ``with`` block
    ends (a ModDown's correction, a product's tensor): the same pages every call instead of a fresh array whose
    25-60 MB glibc maps and the kernel zeroes anew (a page fault per 4 KiB).  Contents are not initialised.  A
    nested use of the same name in this thread gets a fresh array; the buffer grows to the largest request and
    is kept for the thread's lifetime."""
    if name in _scratch.busy:
        yield np.empty((rows, n), dtype=np.uint64)
        return
    buf = _scratch.buffers.get(name)
    if buf is None or buf.shape[1] != n or buf.shape[0] < rows:
        buf = np.empty((max(rows, 0 if buf is None or buf.shape[1] != n else buf.shape[0]), n), dtype=np.uint64)
        _scratch.buffers[name] = buf
    _scratch.busy.add(name)
    try:
        yield buf[:rows]
    finally:
        _scratch.busy.discard(name)


class RingContext:
    """The ring Z[X]/(X^n + 1) with a modulus chain and an NTT backend (constants cached per instance)."""

    def __init__(self, n: int, moduli, backend="auto"):
        self.n = int(n)
        self.moduli = tuple(int(q) for q in moduli)
        self.backend = get_backend(backend)
        self.tables = NTTTables(self.n, self.moduli)
        self._q_all = np.array(self.moduli, dtype=np.uint64)
        self._cache: dict = {}

    def __repr__(self):
        return f"RingContext(n={self.n}, limbs={len(self.moduli)}, backend={self.backend.name})"

    def with_backend(self, backend) -> "RingContext":
        """The same ring with another NTT backend (tables are rebuilt; results are bit-identical)."""
        return RingContext(self.n, self.moduli, backend)

    # --- cached constants -------------------------------------------------------------------
    def q_column(self, idx) -> np.ndarray:
        """The moduli at ``idx`` as a (k, 1) uint64 column, for broadcasting against (k, n) data."""
        return self._q_all[list(idx)][:, None]

    def _pick(self, backend):
        return self.backend if backend is None else get_backend(backend)

    def ntt(self, data: np.ndarray, idx, backend=None, out=None) -> np.ndarray:
        """Forward NTT of the limbs ``idx``; ``backend`` overrides the ring's backend for this call.
        ``out``: a writable C-contiguous uint64 array of data's shape to write into (``data`` allowed)."""
        be = self._pick(backend)
        if out is None:
            return self._by_runs(be, "forward", data, idx)
        return self._into(be, "forward_into", data, idx, out)

    def intt(self, data: np.ndarray, idx, backend=None, out=None) -> np.ndarray:
        """Inverse NTT of the limbs ``idx`` (``out`` as in ``ntt``)."""
        be = self._pick(backend)
        if out is None:
            return self._by_runs(be, "inverse", data, idx)
        return self._into(be, "inverse_into", data, idx, out)

    def _into(self, be, method, data, idx, out):
        """``be.method(data, tables, out)`` over each run of consecutive moduli in ``idx`` (``_split_runs``)."""
        idx = tuple(idx)
        if out.shape != (len(idx), self.n) or out.dtype != np.uint64 or not out.flags.c_contiguous:
            raise ParameterError(f"out must be C-contiguous uint64 of shape ({len(idx)}, {self.n})")
        self._split_runs(be, method, data, idx, out)
        return out

    def _split_runs(self, be, method, data, idx, out):
        """``be.method(data[a:b], tables of idx[a:b], out[a:b])`` over the runs [a, b) of consecutive moduli of
        ``idx``.  Several runs (a scattered basis: a key-switching digit's extension is Q_ℓ less the digit, then P)
        are split over the threads of ``hezk.threads`` as ONE range of limbs, each piece doing its share of every
        run it meets (limbs are independent: any split gives the same bits), instead of each run split on its own
        (a run of 1 limb stayed on one thread, a run of 9 was cut 4 + 5).  Each run's backend is chosen here, in
        the calling thread (``auto`` decides per run, as before; a device backend, ``jax``, keeps one call a run)."""
        runs = self._runs(idx)
        chosen = []
        for a, b in runs:
            tables = self.tables.subset(idx[a:b])
            one = be.choose(tables) if isinstance(be, AutoBackend) else be
            chosen.append((a, b, one, tables))
        if len(runs) == 1 or any(one.name == "jax" for _, _, one, _ in chosen):
            for a, b, one, tables in chosen:
                getattr(one, method)(data[a:b], tables, out[a:b])
            return

        def piece(start, stop):
            for a, b, one, tables in chosen:
                lo, hi = max(a, start), min(b, stop)
                if lo < hi:
                    sub = tables if (lo, hi) == (a, b) else self.tables.subset(idx[lo:hi])
                    getattr(one, method)(data[lo:hi], sub, out[lo:hi])

        parallel(piece, len(idx), min_work=PARALLEL_MIN_WORK, work_per_item=self.n)

    def _runs(self, idx: tuple) -> tuple:
        key = ("runs", idx)
        if key not in self._cache:
            cuts = [0] + [k for k in range(1, len(idx)) if idx[k] != idx[k - 1] + 1] + [len(idx)]
            self._cache[key] = tuple(zip(cuts[:-1], cuts[1:]))
        return self._cache[key]

    def _by_runs(self, be, method, data, idx):
        """``be.method`` (forward or inverse) over each run of consecutive moduli in ``idx`` (one call when
        ``idx`` is a range): the tables of a range are views of the ring's (``NTTTables.subset``), those of a
        scattered basis copies, and key switching meets hundreds of scattered bases (gigabytes of copies at
        N = 2^16).  Several runs go through ``_split_runs`` (the transform into a new array)."""
        idx = tuple(idx)
        runs = self._runs(idx)
        if len(runs) <= 1:
            return getattr(be, method)(data, self.tables.subset(idx))
        data = np.ascontiguousarray(data, dtype=np.uint64)
        out = np.empty((len(idx), self.n), dtype=np.uint64)
        self._split_runs(be, method + "_into", data, idx, out)
        return out

    def conversion(self, from_idx, to_idx) -> BasisConversion:
        key = ("conv", tuple(from_idx), tuple(to_idx))
        if key not in self._cache:
            self._cache[key] = BasisConversion(tuple(self.moduli[i] for i in from_idx),
                                               tuple(self.moduli[i] for i in to_idx))
        return self._cache[key]

    def convert(self, x: np.ndarray, from_idx, to_idx, backend=None) -> np.ndarray:
        """Fast basis conversion of coefficient-form residues (exact up to + u·Q_from, u < len(from_idx))."""
        return self._pick(backend).convert_basis(x, self.conversion(from_idx, to_idx))

    def automorphism_indices(self, g: int, is_ntt: bool):
        """Index maps of X -> X^g: NTT form a permutation; coefficient form target indices and sign flips."""
        key = ("auto", g % (2 * self.n), is_ntt)
        if key not in self._cache:
            n = self.n
            g = g % (2 * n)
            if is_ntt:
                rev = bit_reverse_indices(n)
                exps = (2 * rev + 1) * g % (2 * n)  # evaluation point of slot i, raised to g
                pos = np.empty(n, dtype=np.int64)
                pos[rev] = np.arange(n)               # brv is an involution
                self._cache[key] = pos[(exps - 1) // 2]
            else:
                j = np.arange(n, dtype=np.int64) * g % (2 * n)
                self._cache[key] = (j % n, j >= n)
        return self._cache[key]

    def subring_ntt(self, small: np.ndarray, idx) -> np.ndarray:
        """The NTT form over the limbs ``idx`` of m(X) = m'(X^(n/n')), from m' in coefficient form (residues
        ``small``, (len(idx), n'), n' a power of two dividing n). NTT slot i holds m at ψ^(2 brv(i) + 1), and
        ψ^(n/n') is the root of the degree-n' ring (both g^((q - 1)/2·), ``primitive_2n_root``), so m there is
        m' at that ring's slot i >> log2(n/n'): its NTT repeated, n' log n' work per limb instead of n log n
        (what a slot vector of period n'/2 encodes to; twin: ``ntt`` of the spread coefficients)."""
        idx, n_small = tuple(idx), int(np.shape(small)[-1])
        if n_small < 2 or n_small & (n_small - 1) or self.n % n_small or np.shape(small) != (len(idx), n_small):
            raise ParameterError(f"subring_ntt: residues of shape {np.shape(small)}; expected ({len(idx)}, n') "
                                 f"with n' a power of two in [2, {self.n}]")
        key = ("subring", n_small, idx)
        if key not in self._cache:
            self._cache[key] = RingContext(n_small, [self.moduli[i] for i in idx])
        sub = self._cache[key]
        return np.repeat(sub.ntt(np.ascontiguousarray(small, dtype=np.uint64), range(len(idx))), self.n // n_small,
                         axis=1)

    def _barrett(self, idx):
        key = ("barrett", tuple(idx))
        if key not in self._cache:
            qs = [self.moduli[i] for i in idx]
            bk = np.array([(q - 1).bit_length() for q in qs], dtype=np.int64)
            bm = np.array([(1 << (2 * k)) // q for k, q in zip(bk.tolist(), qs)], dtype=np.uint64)
            self._cache[key] = (np.array(qs, dtype=np.uint64), bk, bm)
        return self._cache[key]

    def add(self, a, b, idx) -> np.ndarray:
        """(a + b) mod q row by row (b may broadcast along coefficients)."""
        return addmod_rows(np.ascontiguousarray(a), _full(b, a.shape), self._barrett(idx)[0])

    def sub(self, a, b, idx) -> np.ndarray:
        """(a − b) mod q row by row."""
        return submod_rows(np.ascontiguousarray(a), _full(b, a.shape), self._barrett(idx)[0])

    def mul(self, a, b, idx) -> np.ndarray:
        """a·b mod q row by row (Barrett reduction, CROSS form).  A (k, 1) column b (one constant a row: an integer
        product, ``RNSPoly.mul_scalars``) is a Shoup product by the row's constant (``mulmod_scalar_rows``, split over
        the threads), not a product by a (k, n) copy of the column made on one thread first: the same residues."""
        q, bk, bm = self._barrett(idx)
        if np.ndim(b) == 2 and np.shape(b)[1] == 1 and np.ndim(a) == 2 and np.shape(b)[0] == np.shape(a)[0]:
            w = np.asarray(b, dtype=np.uint64)[:, 0] % q
            return mulmod_scalar_rows(np.ascontiguousarray(a), w, shoup_precompute(w, q), q)
        return mulmod_rows(np.ascontiguousarray(a), _full(b, a.shape), q, bk, bm)

    def tensor(self, a0, a1, b0, b1, idx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a0·b0, a0·b1 + a1·b0, a1·b1) mod q row by row in one pass (NTT form): the residues of ``mul`` and
        ``add``."""
        q, bk, bm = self._barrett(idx)
        a0, a1, b0, b1 = (np.ascontiguousarray(x) for x in (a0, a1, b0, b1))
        return tensor_rows(a0, a1, b0, b1, q, bk, bm)

    def tensor_into(self, a0, a1, b0, b1, idx, out, factor: int = 1, add=None, add_factor: int = 1) -> tuple:
        """``tensor`` of (factor·a0, factor·a1) and (b0, b1), plus add_factor·add[t] on part t (``add``: None or a
        pair of (k, n) arrays, either None), written into ``out`` (three writable C-contiguous uint64 (k, n)
        arrays) in one pass: the residues of ``mulmod_scalar_rows``, ``tensor`` and the additions in sequence."""
        q, bk, bm = self._barrett(idx)
        k = len(idx)
        shape = (k, self.n)
        for name, x in zip(("out[0]", "out[1]", "out[2]"), out):
            if x.dtype != np.uint64 or x.shape != shape or not x.flags.c_contiguous or not x.flags.writeable:
                raise ParameterError(f"{name} must be a writable C-contiguous uint64 array of shape {shape}")
        moduli = [self.moduli[i] for i in idx]
        f = np.array([int(factor) % p for p in moduli], dtype=np.uint64)
        g = np.array([int(add_factor) % p for p in moduli], dtype=np.uint64)
        none = np.zeros((0, self.n), dtype=np.uint64)
        x0, x1 = (none, none) if add is None else \
            (none if x is None else np.ascontiguousarray(_full(x, shape)) for x in add)
        a0, a1, b0, b1 = (np.ascontiguousarray(x) for x in (a0, a1, b0, b1))
        return tensor_add_rows(a0, a1, b0, b1, q, bk, bm, f, shoup_precompute(f, q), x0, x1, g,
                               shoup_precompute(g, q), *out)

    def muladd_into(self, acc: np.ndarray, a, b, idx) -> np.ndarray:
        """acc ← (acc + a·b) mod q row by row, in place (``acc`` a writable C-contiguous uint64 array that
        no polynomial owns yet); the same residues as add(acc, mul(a, b))."""
        if acc.dtype != np.uint64 or not acc.flags.c_contiguous or not acc.flags.writeable or acc.shape != np.shape(a):
            raise ParameterError(f"acc must be writable C-contiguous uint64 of shape {np.shape(a)}")
        q, bk, bm = self._barrett(idx)
        muladd_rows(acc, np.ascontiguousarray(a), _full(b, acc.shape), q, bk, bm)
        return acc

    def divider(self, head_idx, tail_idx) -> "DivideRound":
        """The exact x -> round(x / T) from head ∪ tail to head, T the product of the tail moduli (cached)."""
        key = ("divround", tuple(head_idx), tuple(tail_idx))
        if key not in self._cache:
            self._cache[key] = DivideRound(self, tuple(head_idx), tuple(tail_idx))
        return self._cache[key]


class DivideRound:
    """round(x / T) exactly, from the moduli head ∪ tail to head (T = Π tail, odd, so no ties).

    With t = (x + ⌊T/2⌋) mod T ∈ [0, T) computed exactly in mixed radix (Garner) from the tail
    residues, r = t − ⌊T/2⌋ is the centred residue of x mod T and (x − r)/T = round(x/T) is an
    integer, taken on each head limb as x·T^-1 + (⌊T/2⌋ − t)·T^-1.  No floating point, so the result
    equals big-integer rounding of the centred coefficient for every input (the divide-and-round of
    Cheon, Han, Kim, Kim, Song, "A full RNS variant of approximate homomorphic encryption", SAC 2018,
    made exact for a product of primes; mixed radix: Garner, IRE Trans. Electronic Computers, 1959).
    """

    def __init__(self, ring: RingContext, head_idx: tuple[int, ...], tail_idx: tuple[int, ...]):
        head = [ring.moduli[i] for i in head_idx]
        tail = [ring.moduli[i] for i in tail_idx]
        self.ring, self.head_idx, self.tail_idx = ring, head_idx, tail_idx
        big_t = math.prod(tail)
        half = big_t // 2
        radix = [math.prod(tail[:j]) for j in range(len(tail))]        # M_j = t_0 ... t_(j-1)
        k = len(tail)
        self.q_tail = np.array(tail, dtype=np.uint64)
        self.q_head = np.array(head, dtype=np.uint64)
        self.half_tail = np.array([half % t for t in tail], dtype=np.uint64)
        self.garner = np.array([[-radix[j] % t for j in range(k)] for t in tail], dtype=np.uint64).reshape(k, k)
        self.garner_shoup = shoup_precompute(self.garner, self.q_tail[:, None])
        self.radix_inv = np.array([inv_mod(m % t, t) for m, t in zip(radix, tail)], dtype=np.uint64)
        self.radix_inv_shoup = shoup_precompute(self.radix_inv, self.q_tail)
        t_inv = [inv_mod(big_t % p, p) for p in head]
        self.t_inv = np.array(t_inv, dtype=np.uint64)
        self.t_inv_shoup = shoup_precompute(self.t_inv, self.q_head)
        self.weight = np.array([[-m * ti % p for m in radix] for p, ti in zip(head, t_inv)],
                               dtype=np.uint64).reshape(len(head), k)
        self.weight_shoup = shoup_precompute(self.weight, self.q_head[:, None])
        self.half_head = np.array([half * ti % p for p, ti in zip(head, t_inv)], dtype=np.uint64)

    def __call__(self, head_data: np.ndarray, tail_data: np.ndarray, is_ntt: bool) -> np.ndarray:
        """The head limbs of round(x / T), in the form of the input (``tail_data`` in the same form)."""
        with self._correction(tail_data, is_ntt) as correction:
            return muladd_scalar_rows(np.ascontiguousarray(head_data), self.t_inv, self.t_inv_shoup, correction,
                                      self.q_head)

    def permuted(self, head_data: np.ndarray, tail_data: np.ndarray, perm: np.ndarray,
                 add: np.ndarray) -> np.ndarray:
        """σ(round(x / T) + add) for NTT-form input: out[l, i] = (round(x/T) + add)[l, perm[i]] (σ an
        automorphism as ``permute_rows`` applies it; ``add`` (head limbs, reduced) may have no rows)."""
        with self._correction(tail_data, True) as correction:
            return muladd_permute_rows(np.ascontiguousarray(head_data), self.t_inv, self.t_inv_shoup, correction,
                                       add, self.q_head, perm)

    @contextlib.contextmanager
    def _correction(self, tail_data: np.ndarray, is_ntt: bool):
        """(⌊T/2⌋ − t)·T^-1 on the head limbs (see the class docstring), in the form of the input: in this
        thread's scratch (``scratch_rows``; the tail's INTT too), valid inside the ``with`` block."""
        ring = self.ring
        n = np.shape(tail_data)[1]
        with scratch_rows("divide_tail", len(self.tail_idx), n) as tail, \
                scratch_rows("divide_correction", len(self.head_idx), n) as correction:
            if is_ntt:
                tail_data = ring.intt(tail_data, self.tail_idx, out=tail)
            divide_round_correction(
                np.ascontiguousarray(tail_data), self.q_tail, self.half_tail, self.garner, self.garner_shoup,
                self.radix_inv, self.radix_inv_shoup, self.q_head, self.weight, self.weight_shoup, self.half_head,
                out=correction)
            yield ring.ntt(correction, self.head_idx, out=correction) if is_ntt else correction


def small_residues(c: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """c mod q row by row for int64 c with |c| < every q (a (k, 1) uint64 column): c, plus q where c < 0
    (no int64 division; written into ``out``, a (k, n) uint64 array, else one array allocated)."""
    data = np.empty((q.shape[0], c.shape[-1]), dtype=np.uint64) if out is None else out
    wrapped, negative = c.astype(np.uint64), (c < 0).astype(np.uint64)  # a negative c wraps to 2^64 + c ...
    for r in range(q.shape[0]):                 # row by row: two passes, no (k, n) temporary
        np.multiply(negative, q[r, 0], out=data[r])
        np.add(data[r], wrapped, out=data[r])    # ... and + q wraps back to q + c
    return data


def int_residues(ring: RingContext, coeffs: np.ndarray, idx) -> np.ndarray:
    """(len(idx), len(coeffs)) uint64: integer coefficients (int64, or Python ints of any size as an object
    array) reduced modulo each limb of ``idx``."""
    if coeffs.dtype == object:
        return np.array([[int(c) % ring.moduli[i] for c in coeffs] for i in idx], dtype=np.uint64).reshape(
            len(idx), coeffs.shape[-1])
    c = coeffs.astype(np.int64)
    q = ring.q_column(idx)
    if c.size and int(np.abs(c).max()) < int(q.min()):
        return small_residues(c, q)
    # residues in [0, q) have the same bits as int64 and uint64
    return wide_residues_rows(c, q[:, 0], np.empty((len(idx), c.shape[-1]), dtype=np.uint64))


def _full(b, shape):
    return np.ascontiguousarray(np.broadcast_to(b, shape))


class RNSPoly:
    """An element of Z_{Q_idx}[X]/(X^n+1): ``data[l]`` holds the residues mod ``ring.moduli[idx[l]]``."""

    __slots__ = ("ring", "data", "idx", "is_ntt")

    def __init__(self, ring: RingContext, data: np.ndarray, idx, is_ntt: bool):
        idx = tuple(int(i) for i in idx)
        data = np.asarray(data)
        if data.dtype != np.uint64 or data.shape != (len(idx), ring.n):
            raise ParameterError(f"RNSPoly data must be uint64 of shape ({len(idx)}, {ring.n}), "
                                 f"got {data.dtype} {data.shape}")
        if data.flags.writeable:
            data.setflags(write=False)  # the polynomial takes ownership: its data is frozen in place
        self.ring, self.data, self.idx, self.is_ntt = ring, data, idx, bool(is_ntt)

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def from_ints(cls, ring: RingContext, coeffs, idx, is_ntt: bool = False) -> "RNSPoly":
        """Reduce integer coefficients (int64 array or Python ints of any size) modulo each limb."""
        idx = tuple(idx)
        coeffs = np.asarray(coeffs)
        if coeffs.shape != (ring.n,):
            raise ParameterError(f"coefficient vector must have shape ({ring.n},), got {coeffs.shape}")
        data = int_residues(ring, coeffs, idx)
        if is_ntt and coeffs.dtype != object:     # in place: no temporary per encoded or sampled polynomial
            return cls(ring, ring.ntt(data, idx, out=data), idx, True)
        poly = cls(ring, data, idx, False)
        return poly.to_ntt() if is_ntt else poly

    @classmethod
    def from_subring_ints(cls, ring: RingContext, coeffs, idx) -> "RNSPoly":
        """NTT form of m(X) = m'(X^(n/n')) from the n' integer coefficients of m' (``RingContext.subring_ntt``;
        equal to ``from_ints`` of the spread coefficients, in O(n' log n') per limb plus a copy)."""
        idx = tuple(idx)
        return cls(ring, ring.subring_ntt(int_residues(ring, np.asarray(coeffs), idx), idx), idx, True)

    @classmethod
    def zeros(cls, ring: RingContext, idx, is_ntt: bool = True) -> "RNSPoly":
        return cls(ring, np.zeros((len(idx), ring.n), dtype=np.uint64), idx, is_ntt)

    # --- views ------------------------------------------------------------------------------
    @property
    def moduli(self) -> tuple[int, ...]:
        return tuple(self.ring.moduli[i] for i in self.idx)

    @property
    def q(self) -> np.ndarray:
        return self.ring.q_column(self.idx)

    def _like(self, data, idx=None, is_ntt=None) -> "RNSPoly":
        return RNSPoly(self.ring, data, self.idx if idx is None else idx,
                       self.is_ntt if is_ntt is None else is_ntt)

    def _check_compatible(self, other: "RNSPoly"):
        if other.ring is not self.ring and other.ring.moduli != self.ring.moduli:
            raise ContextMismatchError("polynomials belong to different rings")
        if other.idx != self.idx:
            raise ContextMismatchError(f"polynomials have different bases: limbs {self.idx} vs {other.idx}")
        if other.is_ntt != self.is_ntt:
            raise ContextMismatchError("one polynomial is in NTT form and the other in coefficient form")

    # --- arithmetic -------------------------------------------------------------------------
    def __add__(self, other: "RNSPoly") -> "RNSPoly":
        self._check_compatible(other)
        return self._like(self.ring.add(self.data, other.data, self.idx))

    def __sub__(self, other: "RNSPoly") -> "RNSPoly":
        self._check_compatible(other)
        return self._like(self.ring.sub(self.data, other.data, self.idx))

    def __neg__(self) -> "RNSPoly":
        return self._like(negmod_rows(self.data, self.ring._barrett(self.idx)[0]))

    def __mul__(self, other) -> "RNSPoly":
        """Pointwise product of two NTT-form polynomials (= negacyclic product), or a product by an int."""
        if isinstance(other, (int, np.integer)):
            return self.mul_scalars([int(other) % q for q in self.moduli])
        if not isinstance(other, RNSPoly):
            return NotImplemented
        self._check_compatible(other)
        if not self.is_ntt:
            raise ParameterError("polynomial products need NTT form (call to_ntt() first)")
        return self._like(self.ring.mul(self.data, other.data, self.idx))

    __rmul__ = __mul__

    def mul_scalars(self, values) -> "RNSPoly":
        """Multiply limb l by values[l] (an integer already meaningful mod that limb's prime)."""
        v = np.array([int(x) % q for x, q in zip(values, self.moduli)], dtype=np.uint64)[:, None]
        return self._like(self.ring.mul(self.data, v, self.idx))

    # --- forms --------------------------------------------------------------------------------
    def to_ntt(self) -> "RNSPoly":
        return self if self.is_ntt else self._like(self.ring.ntt(self.data, self.idx), is_ntt=True)

    def to_coeff(self) -> "RNSPoly":
        return self._like(self.ring.intt(self.data, self.idx), is_ntt=False) if self.is_ntt else self

    def automorphism(self, g: int) -> "RNSPoly":
        """σ_g: a(X) -> a(X^g) for odd g (a permutation in NTT form; signed permutation otherwise)."""
        if g % 2 == 0:
            raise ParameterError(f"Galois element g={g} must be odd")
        if self.is_ntt:
            return self._like(permute_rows(self.data, self.ring.automorphism_indices(g, True)))
        target, flip = self.ring.automorphism_indices(g, False)
        q = self.q
        signed = np.where(flip[None, :], np.minimum(q - self.data, (q - self.data) - q), self.data)
        out = np.empty_like(self.data)
        out[:, target] = signed
        return self._like(out)

    # --- bases --------------------------------------------------------------------------------
    def keep(self, idx) -> "RNSPoly":
        """Restrict to the moduli ``idx`` (a subset of this polynomial's): x mod Q' for Q' | Q."""
        idx = tuple(int(i) for i in idx)
        pos = {m: p for p, m in enumerate(self.idx)}
        missing = [i for i in idx if i not in pos]
        if missing:
            raise ParameterError(f"limbs {missing} are not in this polynomial's basis {self.idx}")
        rows = [pos[i] for i in idx]
        if rows == list(range(rows[0], rows[0] + len(rows))) if rows else False:
            return self._like(self.data[rows[0]: rows[0] + len(rows)], idx=idx)   # a run: a view, no copy
        return self._like(np.ascontiguousarray(self.data[rows]), idx=idx)

    def extend(self, to_idx) -> "RNSPoly":
        """Fast basis extension into the extra moduli ``to_idx``: the result lives over idx + to_idx and
        equals x + u·Q (0 <= u < len(idx)) there; the form (NTT or coefficient) is preserved."""
        to_idx = tuple(int(i) for i in to_idx)
        if set(to_idx) & set(self.idx):
            raise ParameterError(f"extension limbs {to_idx} overlap the basis {self.idx}")
        coeff = self.to_coeff().data
        new = self.ring.convert(coeff, self.idx, to_idx)
        if self.is_ntt:
            new = self.ring.ntt(new, to_idx)
        return RNSPoly(self.ring, np.concatenate([self.data, new]), self.idx + to_idx, self.is_ntt)

    def rescale(self, count: int = 1) -> "RNSPoly":
        """round(x / T) over the remaining limbs, T the product of the last ``count`` moduli.

        Exact: equal to big-integer rounding of the centred coefficient, whatever ``count`` (see
        ``DivideRound``).  Any form in, the same form out.
        """
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count < len(self.idx):
            raise ParameterError(f"rescale count={count!r} not in [1, {len(self.idx) - 1}] for {len(self.idx)} limbs")
        count = int(count)
        head, tail = self.idx[:-count], self.idx[-count:]
        data = self.ring.divider(head, tail)(self.data[:-count], self.data[-count:], self.is_ntt)
        return RNSPoly(self.ring, data, head, self.is_ntt)

    def mod_down(self, p_idx) -> "RNSPoly":
        """For x over Q ∪ P (P the trailing limbs ``p_idx``): round(x / P) over Q (hybrid key switching)."""
        p_idx = tuple(int(i) for i in p_idx)
        if self.idx[-len(p_idx):] != p_idx:
            raise ParameterError(f"special limbs {p_idx} must be the trailing limbs of {self.idx}")
        return self.rescale(len(p_idx))

    # --- reference view -----------------------------------------------------------------------
    def to_ints(self) -> np.ndarray:
        """The centered integer coefficients (CRT over all limbs), as an object array of Python ints."""
        big = math.prod(self.moduli)
        return centered(crt_compose(self.to_coeff().data, self.moduli), big)

    def __repr__(self):
        form = "ntt" if self.is_ntt else "coeff"
        return f"RNSPoly(n={self.ring.n}, limbs={len(self.idx)}, {form})"
