"""Hybrid key switching (special primes P, dnum digits), relinearization and Galois keys, hoisting.

A switching key from s' to s holds, for each digit D_j of the Q primes (``params.digits``), an RLWE
sample over Q·P in NTT form:  b_j = -a_j·s + e_j + P·[Q/Q_j · (Q/Q_j)^-1 mod Q_j]·s'.  In RNS the
gadget factor is P mod q_i on the primes of D_j and 0 elsewhere.  To switch c (NTT form over Q_ℓ):

1. ModUp: for each digit, the residues of c on D_j ∩ Q_ℓ are extended to the other primes of Q_ℓ·P
   by an exact conversion of the centered representative (|d_j| <= Q_j/2: about 2.5 bits less noise
   than the [0, k·Q_j) output of a fast conversion, whose u·Q_j term the gadget would annihilate);
2. inner product Σ_j d_j·(b_j, a_j) over Q_ℓ·P, in NTT form;
3. ModDown: divide by P with exact rounding (the residue mod P, found exactly in mixed radix,
   is subtracted on Q_ℓ: ``ring.DivideRound``).

(Han & Ki, "Better bootstrapping for approximate homomorphic encryption", CT-RSA 2020; Kim, Polyakov,
Zucca, "Revisiting homomorphic encryption schemes for finite fields", ASIACRYPT 2021.)  Hoisting
(Halevi & Shoup, "Faster homomorphic linear transformations in HElib", CRYPTO 2018): the ModUp digits
of c are computed once and shared by many rotations.  Since X -> X^g is a permutation σ in NTT form,
Σ_j σ(d_j)·k_j = σ(Σ_j d_j·σ^-1(k_j)): Galois keys are stored as σ^-1(k_j), so a rotation is an
inner product with unpermuted digits, ModDown, and one permutation at the end (ModDown commutes with
σ: the centered rounding is odd-symmetric and D is odd).  ModDown can also divide by P·q_top at once,
fusing the rescale of a product.

Memory: a single switch (relinearization, one rotation, conjugation) streams its digits
(``streamed_product``: each digit extended, NTT'd in place and added to running sums, so one digit is held
instead of dnum); hoisted rotations hold one decomposition.  Both keep their buffers (digits, coefficient
form, sums) in per-thread scratch of the ``KeySwitcher`` (anonymous maps, reused): no fresh pages per
switch.  Keys live in anonymous maps too (``_anonymous``).
"""
from __future__ import annotations

import math
import mmap
import threading
from dataclasses import dataclass, field

import numba
import numpy as np

from hezk.threads import parallel

from .errors import KeyMissingError, ParameterError
from ._cross_kernels import CONVERT_TILE
from ._ntt_kernels import PARALLEL_MIN_ELEMENTS, SUM_TERMS, mulshoup, read_only, reduce_small
from .ntt_base import PARALLEL_MIN_PRODUCTS
from .modarith import inv_mod, shoup_precompute
from .ring import RNSPoly, small_residues
from .sampling import SEED_BYTES, expand_uniform

_U32 = np.uint64(32)
_COLUMN_ALIGN = 64       # chunk boundaries of a conversion: whole cache lines of every row


@numba.njit(cache=True, inline="always")
def _mulmod_lazy(x, y, q, q_inv):
    """x·y mod q up to one extra q (result in [0, 2q)), for x, y < q < 2^31: float64 quotient estimate."""
    p = x * y
    r = p - np.uint64(p * q_inv) * q
    return min(r, r + q)  # the estimate was one too large: r wrapped around


@numba.njit(cache=True, inline="always")
def _barrett_constants(q):
    """(k - 1, k + 1, m) of CROSS-form Barrett for a modulus q < 2^31: k = ⌈log2 q⌉, m = ⌊2^2k / q⌋."""
    k = np.uint64(1)
    while (np.uint64(1) << k) < q:
        k += np.uint64(1)
    return k - np.uint64(1), k + np.uint64(1), (np.uint64(1) << (k + k)) // q


@numba.njit(cache=True, inline="always")
def _barrett_lazy(x, y, q, sh1, sh2, m):
    """x·y mod q up to two extra q: a value in [0, 3q), for x, y < q < 2^31 (``_barrett_constants``: the quotient
    estimate ⌊⌊xy / 2^(k-1)⌋·m / 2^(k+1)⌋ is low by at most 2; (xy >> (k-1))·m < 2^(2k+2) <= 2^64).  Integer only,
    so it vectorises (a float64 quotient estimate needs scalar uint64 <-> float conversions: ~3.5x slower)."""
    p = x * y
    return p - (((p >> sh1) * m) >> sh2) * q


def _inner_product(base, lifted, src, digit_ids, key_b, key_a, key_rows, q, add_b, add_a, add_factor, out_b, out_a):
    """out_t[r, c] = Σ_j D_j[r, c] · key_t[digit_ids[j], key_rows[r], c] + add_t[r, c]·add_factor[r] mod q[r],
    written into out_b, out_a (uint64, shape (len(key_rows), n)) and returned (``_inner_product_rows``; rows are
    independent, so chunks of them run on the threads of ``hezk.threads``)."""
    parallel(lambda start, stop: _inner_product_rows(base, lifted, src, digit_ids, key_b, key_a, key_rows, q, add_b,
                                                     add_a, add_factor, out_b, out_a, start, stop),
             src.shape[1], min_work=PARALLEL_MIN_PRODUCTS, work_per_item=2 * src.shape[0] * base.shape[1])
    return out_b, out_a


@numba.njit(cache=True, nogil=True)
def _inner_product_rows(base, lifted, src, digit_ids, key_b, key_a, key_rows, q, add_b, add_a, add_factor, out_b,
                        out_a, start, stop):
    """Rows start <= r < stop of ``_inner_product``.

    t = b, a.  Row r of digit j is base[src[j, r]] when src[j, r] < len(base), else
    lifted[src[j, r] - len(base)] (a decomposition is never copied into one array).  The optional
    add_t (rows < len(add_t)) lifts a part by P before a fused ModDown.  Keys are uint32; products are
    left in [0, 3q) and summed lazily (< 3·(dnum+1)·q < 2^40), then reduced once.  add_a may have no rows while
    add_b has them (only part b lifted).  Products are Barrett's, left in [0, 3q) (``_barrett_lazy``)."""
    n_digits = src.shape[0]
    n = base.shape[1]
    n_base = base.shape[0]
    for r in range(start, stop):
        qr = q[r]
        q_inv = 1.0 / qr
        sh1, sh2, m = _barrett_constants(qr)
        kr = key_rows[r]
        ob = out_b[r]
        oa = out_a[r]
        if r < add_b.shape[0] and r < add_a.shape[0]:
            f = add_factor[r]
            xb, xa = add_b[r], add_a[r]
            if f == 1:          # a running sum carried over (``streamed_product``): no product needed
                for c in range(n):
                    ob[c] = xb[c]
                    oa[c] = xa[c]
            else:
                for c in range(n):
                    ob[c] = _barrett_lazy(xb[c], f, qr, sh1, sh2, m)
                    oa[c] = _barrett_lazy(xa[c], f, qr, sh1, sh2, m)
        elif r < add_b.shape[0]:    # part b only (a rotation's c0 lifted by P, ``inner_product``)
            f = add_factor[r]
            xb = add_b[r]
            for c in range(n):
                ob[c] = _barrett_lazy(xb[c], f, qr, sh1, sh2, m)
            oa[:] = 0
        else:
            ob[:] = 0
            oa[:] = 0
        for j in range(n_digits):
            kj = digit_ids[j]
            t = src[j, r]
            d = base[t] if t < n_base else lifted[t - n_base]
            kb, ka = key_b[kj, kr], key_a[kj, kr]
            for c in range(n):
                x = d[c]
                ob[c] += _barrett_lazy(x, np.uint64(kb[c]), qr, sh1, sh2, m)
                oa[c] += _barrett_lazy(x, np.uint64(ka[c]), qr, sh1, sh2, m)
        for c in range(n):
            ob[c] = reduce_small(ob[c], qr, q_inv)
            oa[c] = reduce_small(oa[c], qr, q_inv)


def muladd_pair(acc_b: np.ndarray, acc_a: np.ndarray, x_b: np.ndarray, x_a: np.ndarray, pt: np.ndarray,
                q: np.ndarray, init: bool) -> None:
    """acc_t ← (acc_t + x_t·pt) mod q row by row for t = b, a in place (``init``: acc_t ← x_t·pt mod q): both parts
    of a ciphertext times one plaintext added to running sums in one pass, the plaintext read once (uint32 or
    uint64 residues, the kept diagonals' uint32 without a widening copy).  ``pt`` may be the NTT of a subring
    polynomial m'(X^(n/n')), shape (k, n'): m's NTT slot c is m''s slot c >> log2(n/n') (``RingContext.subring_ntt``
    without its repetition).  All reduced, q a (k,) uint64 array of moduli < 2^31; the accumulators writable
    C-contiguous uint64 of x's shape (k, n).  Rows run on the threads of
    ``hezk.threads`` (each row its own: any split gives the same bits).  The products of a double-hoisted linear
    transform (``Evaluator.linear_transform_hoisted``); twin: ``RingContext.mul``/``muladd_into`` per part."""
    shape = np.shape(x_b)
    for name, arr in (("acc_b", acc_b), ("acc_a", acc_a)):
        if arr.dtype != np.uint64 or not arr.flags.c_contiguous or not arr.flags.writeable or arr.shape != shape:
            raise ParameterError(f"{name} must be a writable C-contiguous uint64 array of shape {shape}")
    for name, arr in (("x_b", x_b), ("x_a", x_a)):
        if arr.dtype != np.uint64 or arr.ndim != 2 or arr.shape != shape:
            raise ParameterError(f"{name} must be a uint64 array of shape (k, n), as x_b: got {arr.shape}")
    k, n = shape
    small = pt.shape[1] if pt.ndim == 2 else 0
    if pt.dtype not in (np.uint32, np.uint64) or pt.ndim != 2 or pt.shape[0] != k or small < 1 or n % small or \
            small & (small - 1) or q.shape != (k,):
        raise ParameterError(f"pt must be uint32 or uint64 of shape ({k}, n') with n' a power of two dividing n={n}, "
                             f"and q of shape ({k},): got {pt.dtype} {pt.shape}, q {q.shape}")
    shift = (n // small).bit_length() - 1
    x_b, x_a, pt = (np.ascontiguousarray(v) for v in (x_b, x_a, pt))
    parallel(lambda start, stop: _muladd_pair_rows(acc_b, acc_a, x_b, x_a, pt, shift, q, init, start, stop), k,
             min_work=PARALLEL_MIN_PRODUCTS, work_per_item=2 * n)


@numba.njit(cache=True, nogil=True)
def _muladd_pair_rows(acc_b, acc_a, x_b, x_a, pt, shift, q, init, start, stop):
    """Rows start <= r < stop of ``muladd_pair``.  A compact plaintext is taken a run of 2^shift equal slots at a
    time (contiguous inner loops vectorise; an index c >> shift per slot does not): a lazy Barrett product in
    [0, 3q), plus the reduced sum (< 4q), brought below q by conditional subtractions."""
    n = x_b.shape[1]
    run = 1 << shift
    for r in range(start, stop):
        qr = q[r]
        sh1, sh2, m = _barrett_constants(qr)
        ob, oa, xb, xa, w = acc_b[r], acc_a[r], x_b[r], x_a[r], pt[r]
        if shift == 0:
            if init:
                for c in range(n):
                    wc = np.uint64(w[c])
                    ob[c] = _reduce_3q(_barrett_lazy(xb[c], wc, qr, sh1, sh2, m), qr)
                    oa[c] = _reduce_3q(_barrett_lazy(xa[c], wc, qr, sh1, sh2, m), qr)
            else:
                for c in range(n):
                    wc = np.uint64(w[c])
                    ob[c] = _reduce_4q(_barrett_lazy(xb[c], wc, qr, sh1, sh2, m) + ob[c], qr)
                    oa[c] = _reduce_4q(_barrett_lazy(xa[c], wc, qr, sh1, sh2, m) + oa[c], qr)
            continue
        for j in range(n >> shift):
            wc = np.uint64(w[j])
            lo = j << shift       # views from 0: indices the compiler knows non-negative (no wrap-around checks)
            rb, ra, yb, ya = ob[lo:lo + run], oa[lo:lo + run], xb[lo:lo + run], xa[lo:lo + run]
            if init:
                for c in range(run):
                    rb[c] = _reduce_3q(_barrett_lazy(yb[c], wc, qr, sh1, sh2, m), qr)
                    ra[c] = _reduce_3q(_barrett_lazy(ya[c], wc, qr, sh1, sh2, m), qr)
            else:
                for c in range(run):
                    rb[c] = _reduce_4q(_barrett_lazy(yb[c], wc, qr, sh1, sh2, m) + rb[c], qr)
                    ra[c] = _reduce_4q(_barrett_lazy(ya[c], wc, qr, sh1, sh2, m) + ra[c], qr)


#: columns of one accumulation chunk of ``muladd_pairs``: a whole row at N <= 2^16 (both parts' running sums, 2 x 512
#: kB, stay in L2 while every term's rows stream past them; chunks of 1024-16384 columns measured slower: the 2k input
#: streams restarted per chunk defeat the prefetcher)
_SUM_CHUNK = 65536


def muladd_pairs(acc_b: np.ndarray, acc_a: np.ndarray, xs_b, xs_a, pts, q: np.ndarray) -> None:
    """acc_t ← Σ_i xs_t[i]·pts[i] mod q row by row for t = b, a (written, not added to): the products of k
    ciphertexts (both parts) with k plaintexts summed in ONE pass, each input read once and the sums written once,
    where k calls of ``muladd_pair`` (its twin: the same residues) read and write both accumulators k times
    (N16_BOOT's double-hoisted transforms: their sums were 4 of every 6.5 rows a diagonal moved).  The sums stay in
    cache over a chunk of columns (one thread, 58 rows of 2^16, 8 terms: 31 ms against 40 ms); the lazy Barrett
    products (< 3q each) are added without reduction (k <= ``SUM_TERMS``) and reduced once.  ``xs_b``, ``xs_a``:
    sequences of k uint64 (rows, n) arrays; ``pts``: k uint32/uint64 residue arrays (rows, n') with n' a power of two dividing n (a compact subring NTT as ``muladd_pair`` takes);
    q: (rows,) moduli < 2^31; the accumulators writable C-contiguous uint64 (rows, n).  Rows run on the threads of
    ``hezk.threads`` (each row its own: any split gives the same bits).  (Bossuat, Mouchet, Troncoso-Pastoriza,
    Hubaux, EUROCRYPT 2021, Algorithm 3: the inner sums of a giant step.)"""
    xs_b, xs_a, pts = list(xs_b), list(xs_a), list(pts)
    k = len(pts)
    if k < 1 or len(xs_b) != k or len(xs_a) != k:
        raise ParameterError(f"muladd_pairs needs k >= 1 terms with k baby parts each: got {len(xs_b)}, "
                             f"{len(xs_a)} and {k} plaintexts")
    if k > SUM_TERMS:       # the lazy sums stay below 3·32·2^31 < 2^52 (``reduce_small``)
        raise ParameterError(f"muladd_pairs sums at most SUM_TERMS={SUM_TERMS} terms in one pass: got {k}")
    shape = np.shape(acc_b)
    for name, arr in (("acc_b", acc_b), ("acc_a", acc_a)):
        if arr.dtype != np.uint64 or arr.ndim != 2 or not arr.flags.c_contiguous or not arr.flags.writeable or \
                arr.shape != shape:
            raise ParameterError(f"{name} must be a writable C-contiguous uint64 array of shape (rows, n), as acc_b")
    rows, n = shape
    if q.shape != (rows,):
        raise ParameterError(f"q must have shape ({rows},): got {q.shape}")
    lb, la, lp = [], [], []
    shifts = np.empty(k, dtype=np.int64)
    for i in range(k):
        xb, xa, pt = xs_b[i], xs_a[i], pts[i]
        for name, arr in (("xs_b", xb), ("xs_a", xa)):
            if arr.dtype != np.uint64 or arr.shape != shape:
                raise ParameterError(f"{name}[{i}] must be a uint64 array of shape {shape}: got {arr.dtype} "
                                     f"{np.shape(arr)}")
        small = pt.shape[1] if pt.ndim == 2 else 0
        if pt.dtype not in (np.uint32, np.uint64) or pt.ndim != 2 or pt.shape[0] != rows or small < 1 or \
                n % small or small & (small - 1):
            raise ParameterError(f"pts[{i}] must be uint32 or uint64 of shape ({rows}, n') with n' a power of two "
                                 f"dividing n={n}: got {pt.dtype} {pt.shape}")
        lb.append(read_only(xb))
        la.append(read_only(xa))
        lp.append(read_only(pt if pt.dtype == np.uint32 else pt.astype(np.uint32)))   # residues < 2^31
        shifts[i] = (n // small).bit_length() - 1
    # tuples of SUM_TERMS read-only C arrays, padded with the first (not read): one compiled, disk-cached kernel;
    # numba's typed lists would compile their own methods in every process (~5 s)
    lb, la, lp = (tuple(v + v[:1] * (SUM_TERMS - k)) for v in (lb, la, lp))
    parallel(lambda start, stop: _muladd_pairs_rows(acc_b, acc_a, lb, la, lp, k, shifts, q, start, stop), rows,
             min_work=PARALLEL_MIN_PRODUCTS, work_per_item=2 * n * k)


@numba.njit(cache=True, nogil=True)
def _muladd_pairs_rows(acc_b, acc_a, xs_b, xs_a, pts, k, shifts, q, start, stop):
    """Rows start <= r < stop of ``muladd_pairs`` (its first k terms), a chunk of ``_SUM_CHUNK`` columns at a time."""
    n = acc_b.shape[1]
    chunk = min(n, _SUM_CHUNK)
    for r in range(start, stop):
        qr = q[r]
        q_inv = 1.0 / qr
        sh1, sh2, m = _barrett_constants(qr)
        ob, oa = acc_b[r], acc_a[r]
        for c0 in range(0, n, chunk):
            rb, ra = ob[c0:c0 + chunk], oa[c0:c0 + chunk]
            rb[:] = 0
            ra[:] = 0
            for i in range(k):
                shift = shifts[i]
                yb, ya, w = xs_b[i][r, c0:c0 + chunk], xs_a[i][r, c0:c0 + chunk], pts[i][r]
                if shift == 0:
                    wr = w[c0:c0 + chunk]
                    for c in range(chunk):
                        wc = np.uint64(wr[c])
                        rb[c] += _barrett_lazy(yb[c], wc, qr, sh1, sh2, m)
                        ra[c] += _barrett_lazy(ya[c], wc, qr, sh1, sh2, m)
                    continue
                run = 1 << shift
                if run >= chunk:        # one plaintext slot over the whole chunk
                    wc = np.uint64(w[c0 >> shift])
                    for c in range(chunk):
                        rb[c] += _barrett_lazy(yb[c], wc, qr, sh1, sh2, m)
                        ra[c] += _barrett_lazy(ya[c], wc, qr, sh1, sh2, m)
                    continue
                for j in range(chunk >> shift):
                    wc = np.uint64(w[(c0 >> shift) + j])
                    lo = j << shift
                    sb, sa, zb, za = rb[lo:lo + run], ra[lo:lo + run], yb[lo:lo + run], ya[lo:lo + run]
                    for c in range(run):
                        sb[c] += _barrett_lazy(zb[c], wc, qr, sh1, sh2, m)
                        sa[c] += _barrett_lazy(za[c], wc, qr, sh1, sh2, m)
            for c in range(chunk):
                rb[c] = reduce_small(rb[c], qr, q_inv)
                ra[c] = reduce_small(ra[c], qr, q_inv)


@numba.njit(cache=True, inline="always")
def _reduce_3q(t, q):
    """t mod q for t < 3q (unsigned wrap-around: min keeps the non-negative difference)."""
    t = min(t, t - q)
    return min(t, t - q)


@numba.njit(cache=True, inline="always")
def _reduce_4q(t, q):
    """t mod q for t < 4q."""
    t = min(t, t - q)
    t = min(t, t - q)
    return min(t, t - q)


def add_permuted_pair_into(acc: np.ndarray, a: np.ndarray, b: np.ndarray, perm: np.ndarray, q: np.ndarray) -> None:
    """acc[l, i] ← (acc[l, i] + a[l, perm[i]] + b[l, perm[i]]) mod q_l in place: two arrays under one automorphism
    (NTT form) added to a running sum in one pass, the permutation read once (a double-hoisted giant step's part b
    over Q·P and its key switch's part b, ``Evaluator.linear_transform_hoisted``); all (k, n) reduced, q (k,).
    Twin: ``add_permuted_into`` twice.  Rows run on the threads of ``hezk.threads``."""
    if acc.dtype != np.uint64 or not acc.flags.c_contiguous or not acc.flags.writeable or \
            a.shape != acc.shape or b.shape != acc.shape or perm.shape != (acc.shape[1],) or q.shape != (acc.shape[0],):
        raise ParameterError(f"add_permuted_pair_into: acc writable C-contiguous uint64 (k, n), a and b of its shape "
                             f"{acc.shape}, perm ({acc.shape[1]},), q ({acc.shape[0]},)")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    # memory-bound (a gather and two adds an element): pieces sized as the element-wise kernels', not by products
    # (2^20 products kept a giant step's 30 rows of N = 2^16 on one thread: 0.14 s of an N16_BOOT bootstrap)
    parallel(lambda start, stop: _add_permuted_pair_rows(acc, a, b, perm, q, start, stop), acc.shape[0],
             min_work=PARALLEL_MIN_ELEMENTS, work_per_item=acc.shape[1])


@numba.njit(cache=True, nogil=True)
def _add_permuted_pair_rows(acc, a, b, perm, q, start, stop):
    n = acc.shape[1]
    for r in range(start, stop):
        qr = q[r]
        o, x, y = acc[r], a[r], b[r]
        for i in range(n):
            j = perm[i]
            o[i] = _reduce_3q(o[i] + x[j] + y[j], qr)


@numba.njit(cache=True, nogil=True)
def _convert_centered(x, q_from, qhat_inv, qhat_inv_shoup, q_from_inv, q_to, qhat_mod_p, qhat_mod_p_shoup,
                      big_q_mod_p, big_q_mod_p_shoup, out, start, stop):
    """Exact RNS basis conversion of the centered representative of x mod Q (Q = Π q_from).

    With y_i = [x_i · (Q/q_i)^-1]_{q_i}, x ≡ Σ_i y_i·(Q/q_i) - v·Q where v = round(Σ_i y_i/q_i) gives
    the representative in (-Q/2, Q/2] (Halevi, Polyakov, Shoup, "An improved RNS variant of the BFV
    homomorphic encryption scheme", CT-RSA 2019, Sec. 2.3).  Row j of ``out`` gets that value mod q_to[j], for the
    coefficients start <= c < stop (each coefficient on its own: disjoint ranges may run in parallel), a tile of
    ``CONVERT_TILE`` columns at a time: the tile's scaled inputs (9 x 16 kB at N16_BOOT's digits) and output row stay
    in cache for every target prime instead of whole 512 kB rows re-read per target (N16_BOOT, 9 -> 49 primes, one
    thread: 7.3 ms against 8.4, the same residues)."""
    k = x.shape[0]
    kp = q_to.shape[0]
    tile = min(CONVERT_TILE, stop - start)
    y = np.empty((k, tile), dtype=np.uint64)
    v = np.empty(tile, dtype=np.uint64)
    frac = np.empty(tile, dtype=np.float64)
    for c0 in range(start, stop, tile):     # a tile of columns at a time: y and the output row stay in cache
        n = min(tile, stop - c0)
        frac[:n] = 0.0
        for i in range(k):
            qi = q_from[i]
            xi = x[i, c0:c0 + n]
            yr = y[i]
            for c in range(n):
                yi = mulshoup(xi[c], qhat_inv[i], qhat_inv_shoup[i], qi)
                yr[c] = yi
                frac[c] += yi * q_from_inv[i]
        for c in range(n):
            v[c] = np.uint64(frac[c] + 0.5)
        for j in range(kp):
            p = q_to[j]
            row = out[j, c0:c0 + n]
            row[:] = 0
            for i in range(k):
                w = qhat_mod_p[i, j]
                ws = qhat_mod_p_shoup[i, j]
                yi = y[i]
                for c in range(n):
                    row[c] += yi[c] * w - ((yi[c] * ws) >> _U32) * p
            p_inv = 1.0 / p
            for c in range(n):
                t = mulshoup(v[c], big_q_mod_p[j], big_q_mod_p_shoup[j], p)
                row[c] = reduce_small(row[c] + p - t, p, p_inv)


class CenteredConversion:
    """Constants of ``_convert_centered`` from ``from_moduli`` to ``to_moduli`` (exact, centered)."""

    def __init__(self, from_moduli, to_moduli):
        big_q = math.prod(from_moduli)
        qhat = [big_q // q for q in from_moduli]
        self.q_from = np.array(from_moduli, dtype=np.uint64)
        self.q_to = np.array(to_moduli, dtype=np.uint64)
        self.qhat_inv = np.array([inv_mod(h % q, q) for h, q in zip(qhat, from_moduli)], dtype=np.uint64)
        self.qhat_inv_shoup = shoup_precompute(self.qhat_inv, self.q_from)
        self.q_from_inv = 1.0 / np.array(from_moduli, dtype=np.float64)
        self.qhat_mod_p = np.array([[h % p for p in to_moduli] for h in qhat], dtype=np.uint64)
        self.qhat_mod_p = self.qhat_mod_p.reshape(len(from_moduli), len(to_moduli))
        self.qhat_mod_p_shoup = shoup_precompute(self.qhat_mod_p, self.q_to[None, :])
        self.big_q_mod_p = np.array([big_q % p for p in to_moduli], dtype=np.uint64)
        self.big_q_mod_p_shoup = shoup_precompute(self.big_q_mod_p, self.q_to)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The converted rows (into ``out``, shape (len(to_moduli), n), when given)."""
        if out is None:
            out = np.empty((len(self.q_to), x.shape[1]), dtype=np.uint64)
        x = np.ascontiguousarray(x)
        parallel(lambda start, stop: _convert_centered(x, self.q_from, self.qhat_inv, self.qhat_inv_shoup,
                                                       self.q_from_inv, self.q_to, self.qhat_mod_p,
                                                       self.qhat_mod_p_shoup, self.big_q_mod_p,
                                                       self.big_q_mod_p_shoup, out, start, stop),
                 x.shape[1], min_work=PARALLEL_MIN_PRODUCTS, work_per_item=len(self.q_from) * len(self.q_to),
                 align=_COLUMN_ALIGN)
        return out


class Divider:
    """x -> round(x / D) from the primes ``keep + drop`` to ``keep`` (D = product of ``drop``), NTT form.

    Exact for every input: the ring's ``DivideRound`` (mixed-radix residue mod D, integers only), the
    same rounding as ``RNSPoly.rescale``."""

    def __init__(self, ring, keep: tuple[int, ...], drop: tuple[int, ...]):
        self.ring, self.keep, self.drop = ring, tuple(keep), tuple(drop)
        self._divide = ring.divider(self.keep, self.drop)

    def __call__(self, x: RNSPoly) -> RNSPoly:
        k = len(self.keep)
        return RNSPoly(self.ring, self._divide(x.data[:k], x.data[k:], True), self.keep, True)

    def galois(self, x: RNSPoly, g: int, add: RNSPoly | None, no_rows: np.ndarray) -> RNSPoly:
        """σ_g(round(x / D) + add) in one pass (``DivideRound.permuted``)."""
        k = len(self.keep)
        perm = self.ring.automorphism_indices(g, True)
        extra = no_rows if add is None else add.data
        return RNSPoly(self.ring, self._divide.permuted(x.data[:k], x.data[k:], perm, extra), self.keep, True)


def _anonymous(shape, dtype=np.uint64) -> np.ndarray:
    """A zeroed array in its own anonymous memory map, outside the C heap, for long-lived buffers (keys,
    scratch): one on the heap would pin its top, so that the temporaries above it are trimmed and faulted
    in again on every operation (glibc malloc); a map is returned to the OS when the array dies, and its
    pages are plain 4 KiB ones, first touched at a steady cost (no huge-page compaction)."""
    count = math.prod(shape)
    size = max(1, count * np.dtype(dtype).itemsize)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=count).reshape(shape)


def _frozen(x: np.ndarray) -> np.ndarray:
    """A read-only view (kernels see one array type, so one compiled specialisation)."""
    view = x.view()
    view.setflags(write=False)
    return view


def galois_element(step: int, n: int) -> int:
    """The Galois element of a left rotation by ``step`` slots: 5^(step mod N/2) mod 2N."""
    return pow(5, step % (n // 2), 2 * n)


def conjugation_element(n: int) -> int:
    """X -> X^(2N-1) = X^-1: complex conjugation of every slot."""
    return 2 * n - 1


@dataclass(frozen=True, eq=False)
class SwitchingKey:
    """dnum RLWE samples (b_j, a_j) over Q·P in NTT form, each of shape (dnum, len(moduli), n).

    Stored as uint32 (every residue is below 2^31): half the memory of uint64.  ``a_seed``: the 32-byte
    public seed ``a`` is the expansion of (``uniform_part``), so that records store the seed instead of
    ``a`` (half the bytes); None for a key whose ``a`` has no seed (read from a record of an earlier format)."""

    b: np.ndarray = field(repr=False)
    a: np.ndarray = field(repr=False)
    moduli: tuple[int, ...] = field(repr=False)
    a_seed: bytes | None = field(default=None, repr=False)

    def __post_init__(self):
        for name in ("b", "a"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=np.uint32)
            if arr.ndim != 3 or arr.shape[1] != len(self.moduli):
                raise ParameterError(f"switching key part {name} has shape {arr.shape}; "
                                     f"expected (dnum, {len(self.moduli)}, n)")
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        if self.a_seed is not None and (not isinstance(self.a_seed, bytes) or len(self.a_seed) != SEED_BYTES):
            raise ParameterError(f"a_seed must be None or {SEED_BYTES} bytes")

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (both halves)."""
        return self.b.nbytes + self.a.nbytes


def uniform_part(params, seed: bytes, out: np.ndarray | None = None) -> np.ndarray:
    """The uniform half ``a`` of a switching key from its seed: ``expand_uniform`` over all moduli, one
    row block per digit, shape (dnum, len(moduli), n) uint32 (into ``out`` when given)."""
    return expand_uniform(seed, params.moduli, params.n, len(params.digits), out)


@numba.njit(cache=True)
def _key_rows(e, a, s, gadget, s_from, q, out):
    """out[r] = e[r] - a[r]·s[r] + gadget[r]·s_from[r] mod q[r] (all NTT form; a and out uint32, the
    others uint64 < q < 2^31; gadget[r] = 0 off the digit's primes): one pass per key digit."""
    for r in range(out.shape[0]):
        qr = q[r]
        q_inv = 1.0 / qr
        g = gadget[r]
        for c in range(out.shape[1]):
            neg = reduce_small(_mulmod_lazy(np.uint64(a[r, c]), s[r, c], qr, q_inv), qr, q_inv)
            x = e[r, c] + qr - neg
            if g:
                x += _mulmod_lazy(g, s_from[r, c], qr, q_inv)
            out[r, c] = np.uint32(reduce_small(x, qr, q_inv))


def make_switching_key(params, ring, sampler, s_ntt: np.ndarray, s_from_ntt: np.ndarray) -> SwitchingKey:
    """A key from s' to s: s (NTT over Q ∪ P) and s' (NTT over at least the Q primes).

    b_j = -a_j·s + e_j + (P mod q_i)·s' on the primes q_i of digit j (Gaussian e_j); the uniform a_j are
    expanded from a fresh 32-byte seed drawn from ``sampler`` (the key keeps the seed, see SwitchingKey).
    The Gaussian errors of all digits are drawn at once; each digit is one NTT and one fused pass."""
    all_idx = tuple(range(len(params.moduli)))
    q = ring.q_column(all_idx)
    big_p = math.prod(params.p_moduli)
    dnum, n = len(params.digits), params.n
    seed = sampler.random_bytes(SEED_BYTES)
    shape = (len(params.digits), len(all_idx), params.n)
    a = uniform_part(params, seed, _anonymous(shape, np.uint32))   # key memory: see _anonymous
    errors = sampler.gaussian(dnum * n).reshape(dnum, n)
    s_ntt = np.ascontiguousarray(s_ntt, dtype=np.uint64)
    s_from = np.zeros_like(s_ntt)
    s_from[: len(s_from_ntt)] = s_from_ntt[: len(s_ntt)]
    q_flat = q[:, 0].copy()
    b = _anonymous(shape, np.uint32)
    e_buf = np.empty((len(all_idx), n), dtype=np.uint64)
    for j, digit in enumerate(params.digits):
        e_j = ring.ntt(small_residues(errors[j], q, out=e_buf), all_idx, out=e_buf)  # one buffer for all digits
        gadget = np.zeros(len(all_idx), dtype=np.uint64)
        gadget[list(digit)] = [big_p % params.moduli[i] for i in digit]
        _key_rows(e_j, a[j], s_ntt, gadget, s_from, q_flat, b[j])
    return SwitchingKey(b, a, tuple(params.moduli), seed)


@dataclass(frozen=True, eq=False)
class Decomposition:
    """ModUp digits of one polynomial at ``level``: its own rows (``base``, NTT over Q_ℓ) plus the
    NTT'd basis extensions of every digit (``lifted``); ``_LevelPlan.src`` says which row is which."""

    base: np.ndarray
    lifted: np.ndarray
    level: int


@dataclass(frozen=True, eq=False)
class _LevelPlan:
    """Index bookkeeping and constants of key switching at one level (positions in the Q_ℓ ∪ P basis)."""

    ext_idx: tuple[int, ...]                 # ring indices of Q_ℓ (positions 0..L-1) then P
    digit_ids: np.ndarray                    # the key digits that meet Q_ℓ
    digit_idx: tuple[tuple[int, ...], ...]   # each digit's primes within Q_ℓ (ring index = position)
    target_pos: tuple[np.ndarray, ...]       # positions each digit is extended to
    conversions: tuple[CenteredConversion, ...]
    lifted_idx: tuple[int, ...]              # ring indices of all extensions, concatenated
    src: np.ndarray                          # (J, |ext|): row of digit j in [c's rows; lifted rows]
    ext_q: np.ndarray
    ext_rows: np.ndarray                     # ext_idx as an int64 array
    p_mod_q: np.ndarray                      # P mod q_i on Q_ℓ, to lift a part by P before ModDown
    block_src: tuple[np.ndarray, ...]        # (1, |ext|) per digit: its row in [c's rows; its own block]
    ones: np.ndarray                         # |ext| ones: the factor that adds a running sum back


class KeySwitcher:
    """Hybrid key switching for one parameter set on one ring; per-level constants cached on the object."""

    def __init__(self, params, ring):
        self.params, self.ring = params, ring
        self.p_idx = tuple(range(len(params.q_moduli), len(params.moduli)))
        self._plans: dict[int, _LevelPlan] = {}
        self._dividers: dict[tuple[int, int], Divider] = {}
        self._no_lift = np.zeros((0, params.n), dtype=np.uint64)
        self._no_lift.setflags(write=False)
        self._scratch = threading.local()  # the type of a lifted part's (frozen) data: one compiled kernel

    def plan(self, level: int) -> _LevelPlan:
        if level not in self._plans:
            self._plans[level] = self._make_plan(level)
        return self._plans[level]

    def _make_plan(self, level: int) -> _LevelPlan:
        limbs = self.params.limbs_at(level)
        moduli = self.ring.moduli
        ext = tuple(range(limbs)) + self.p_idx
        ids, digit_idx, targets, convs, lifted = [], [], [], [], []
        for j, digit in enumerate(self.params.digits):
            d = tuple(i for i in digit if i < limbs)
            if d:
                pos = np.array([k for k, i in enumerate(ext) if i not in d], dtype=np.int64)
                ids.append(j)
                digit_idx.append(d)
                targets.append(pos)
                convs.append(CenteredConversion([moduli[i] for i in d], [moduli[ext[k]] for k in pos]))
                lifted.extend(ext[k] for k in pos)
        src = np.empty((len(ids), len(ext)), dtype=np.int64)
        offset = limbs
        for j, (d, pos) in enumerate(zip(digit_idx, targets)):
            src[j, list(d)] = list(d)
            src[j, pos] = np.arange(offset, offset + len(pos))
            offset += len(pos)
        block_src = []
        for d, pos in zip(digit_idx, targets):
            row = np.empty((1, len(ext)), dtype=np.int64)
            row[0, list(d)] = list(d)
            row[0, pos] = np.arange(limbs, limbs + len(pos))
            block_src.append(row)
        big_p = math.prod(moduli[i] for i in self.p_idx)
        return _LevelPlan(block_src=tuple(block_src), ones=np.ones(len(ext), dtype=np.uint64),ext_idx=ext, digit_ids=np.array(ids, dtype=np.int64), digit_idx=tuple(digit_idx),
                          target_pos=tuple(targets), conversions=tuple(convs), lifted_idx=tuple(lifted),
                          src=src, ext_q=np.array([moduli[i] for i in ext], dtype=np.uint64),
                          ext_rows=np.array(ext, dtype=np.int64),
                          p_mod_q=np.array([big_p % moduli[i] for i in range(limbs)], dtype=np.uint64))

    def _scratch_rows(self, name: str, rows: int) -> np.ndarray:
        """This thread's reusable (rows, n) buffer ``name`` for a switch whose digits are consumed at once."""
        buf = getattr(self._scratch, name, None)
        if buf is None or buf.shape[0] < rows:
            buf = _anonymous((rows, self.params.n))
            setattr(self._scratch, name, buf)
        return buf[:rows]

    def decompose(self, c: RNSPoly, transient: bool = False) -> "Decomposition":
        """ModUp: the digits of c (NTT form over Q_ℓ), each in NTT form over Q_ℓ ∪ P.

        Digit j is the centered representative of c mod Q_j, so |d_j| <= Q_j/2: on its own primes it
        is c itself, elsewhere an exact basis conversion.  The conversions land in one buffer and each
        digit's block is NTT'd in place as soon as it is converted, so the peak is one buffer plus one
        digit's block (not the buffer twice: 250 MB less at N = 2^16).

        ``transient``: the digits live in this thread's scratch buffer of the switcher, overwritten by its
        next transient decomposition: for a caller that consumes them before switching again (a fresh
        buffer per switch costs a page fault per 4 KiB, 10-20% of a rotation at N = 2^14)."""
        level = self.params.level_of(len(c.idx))
        plan, ring = self.plan(level), self.ring
        rows = len(plan.lifted_idx)
        if transient and c.is_ntt:
            c_coeff = ring.intt(c.data, c.idx, out=self._scratch_rows("coeff", len(c.idx)))
            lifted = self._scratch_rows("lifted", rows)
        else:
            c_coeff = c.to_coeff().data
            lifted = np.empty((rows, ring.n), dtype=np.uint64)
        start = 0
        for d, pos, conv in zip(plan.digit_idx, plan.target_pos, plan.conversions):
            block = lifted[start: start + len(pos)]
            conv(c_coeff[d[0]: d[-1] + 1], block)
            ring.ntt(block, plan.lifted_idx[start: start + len(pos)], out=block)
            start += len(pos)
        lifted = lifted.view()
        lifted.setflags(write=False)
        return Decomposition(c.data, lifted, level)

    def inner_product(self, digits: "Decomposition", key: SwitchingKey,
                      lift: tuple[RNSPoly, RNSPoly] | None = None, transient: bool = False) -> tuple[RNSPoly, RNSPoly]:
        """Σ_j digits_j · key_j over Q_ℓ ∪ P (NTT form); with ``lift`` = (c0, c1) over Q_ℓ, P·c_t is
        added to part t, so that a later ÷P leaves c_t + (Σ_j digits_j · key_j)/P (c1 may be None: part b only,
        a rotation kept over Q_ℓ ∪ P, ``Evaluator.linear_transform_hoisted``).  ``transient``: the
        result lives in this thread's scratch buffers (see ``decompose``), overwritten by the next one."""
        plan = self.plan(digits.level)
        rows = plan.ext_rows
        if lift is None:
            add_b = add_a = self._no_lift
        else:
            add_b = lift[0].data
            add_a = self._no_lift if lift[1] is None else lift[1].data
        if transient:
            out_b, out_a = self._scratch_rows("out_b", len(rows)), self._scratch_rows("out_a", len(rows))
        else:
            out_b, out_a = (np.empty((len(rows), self.params.n), dtype=np.uint64) for _ in range(2))
        b, a = _inner_product(digits.base, digits.lifted, plan.src, plan.digit_ids, key.b, key.a, rows,
                              plan.ext_q, add_b, add_a, plan.p_mod_q, out_b, out_a)
        return RNSPoly(self.ring, b, plan.ext_idx, True), RNSPoly(self.ring, a, plan.ext_idx, True)

    def streamed_product(self, c: RNSPoly, key: SwitchingKey,
                         lift: tuple[RNSPoly, RNSPoly] | None = None) -> tuple[RNSPoly, RNSPoly]:
        """``inner_product(decompose(c), key, lift)`` digit by digit: each digit's extension is converted
        and NTT'd into one block buffer and added to the running sums (reduced mod q after each digit, so
        the result is the same), so one digit is held instead of dnum (250 MB less at N = 2^16).  For a
        single switch; hoisting keeps ``decompose``.  The result is transient (see ``decompose``)."""
        level = self.params.level_of(len(c.idx))
        plan, ring = self.plan(level), self.ring
        rows = plan.ext_rows
        c_coeff = ring.intt(c.data, c.idx, out=self._scratch_rows("coeff", len(c.idx))) if c.is_ntt else c.data
        blocks = self._scratch_rows("block", max(len(pos) for pos in plan.target_pos))
        out_b, out_a = self._scratch_rows("out_b", len(rows)), self._scratch_rows("out_a", len(rows))
        add_b, add_a = (self._no_lift, self._no_lift) if lift is None else (lift[0].data, lift[1].data)
        factor, start = plan.p_mod_q, 0
        for j, (d, pos, conv) in enumerate(zip(plan.digit_idx, plan.target_pos, plan.conversions)):
            block = blocks[:len(pos)]
            conv(c_coeff[d[0]: d[-1] + 1], block)
            ring.ntt(block, plan.lifted_idx[start: start + len(pos)], out=block)
            start += len(pos)
            _inner_product(c.data, _frozen(block), plan.block_src[j], plan.digit_ids[j: j + 1], key.b, key.a,
                           rows, plan.ext_q, add_b, add_a, factor, out_b, out_a)
            add_b, add_a, factor = _frozen(out_b), _frozen(out_a), plan.ones   # the running sums, times 1
        return RNSPoly(self.ring, out_b, plan.ext_idx, True), RNSPoly(self.ring, out_a, plan.ext_idx, True)

    def mod_down(self, x: RNSPoly, extra: int = 0) -> RNSPoly:
        """round(x / P) over Q_ℓ, or with ``extra`` > 0 round(x / (P · the last ``extra`` primes of Q_ℓ))."""
        return self._divider(x, extra)(x)

    def mod_down_galois(self, x: RNSPoly, g: int, add: RNSPoly | None = None) -> RNSPoly:
        """σ_g(round(x / P) + add) over Q_ℓ (NTT form): ModDown, an added part and the automorphism of a
        rotation in one pass; equal to ``(add + mod_down(x)).automorphism(g)``."""
        if add is not None and add.idx != tuple(range(len(x.idx) - len(self.p_idx))):
            raise ParameterError(f"added part over limbs {add.idx} does not match the ModDown basis")
        return self._divider(x, 0).galois(x, g, add, self._no_lift)

    def _divider(self, x: RNSPoly, extra: int) -> Divider:
        limbs = len(x.idx) - len(self.p_idx)
        key = (limbs, extra)
        if key not in self._dividers:
            drop = tuple(range(limbs - extra, limbs)) + self.p_idx
            self._dividers[key] = Divider(self.ring, tuple(range(limbs - extra)), drop)
        return self._dividers[key]

    def switch(self, c: RNSPoly, key: SwitchingKey) -> tuple[RNSPoly, RNSPoly]:
        """(c0', c1') over Q_ℓ with c0' + c1'·s ≈ c·s' (s' the key's source secret)."""
        b, a = self.streamed_product(c, key)
        return self.mod_down(b), self.mod_down(a)


@dataclass(frozen=True, eq=False)
class GaloisKeys:
    """Switching keys from σ_g(s) to s by Galois element g, stored as σ_g^-1(key) (see the module
    docstring); ``steps`` are the rotations they serve."""

    keys: dict = field(repr=False)
    steps: tuple[int, ...]
    conjugation: bool

    def key_for_step(self, step: int, n: int) -> SwitchingKey:
        g = galois_element(step, n)
        if g not in self.keys:
            raise KeyMissingError(f"no Galois key for rotation step {step}; this context has keys for steps "
                                  f"{sorted(self.steps)} (pass rotations=[...] to CKKSContext.keygen)")
        return self.keys[g]

    def conjugation_key(self, n: int) -> SwitchingKey:
        if not self.conjugation:
            raise KeyMissingError("no Galois key for conjugation; pass conjugation=True to CKKSContext.keygen")
        return self.keys[conjugation_element(n)]
