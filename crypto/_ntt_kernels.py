"""numba kernels behind ``NumbaRadix2`` (compiled lazily on first call, cached on disk).

Butterflies use Shoup multiplication: for a constant w < q with w' = ⌊w·2^32/q⌋ and x < 2^32,
x·w − ⌊x·w'/2^32⌋·q lies in [0, 2q). Residues stay in [0, q) between stages.
"""
import numba
import numpy as np

from hezk.progress import announce_compilation
from hezk.threads import parallel

announce_compilation(__file__)  # one line on stderr when numba must compile these kernels (a cold cache)

_U32 = np.uint64(32)
#: Smallest piece of a threaded kernel here, in modular products (ntt_base.PARALLEL_MIN_PRODUCTS's value: that module
#: imports this one lazily, so it is not imported back)
PARALLEL_MIN_PRODUCTS = 1 << 20
#: Smallest piece of a threaded element-wise kernel (add, multiply, permute ... row by row), in elements: these
#: kernels are memory-bound (0.3 ns an element), so a piece must be large for a second thread to pay (measured on 2
#: cores: 2^18 elements, 16 limbs of N = 2^14, lose at 2 threads; 2^19 gain 1.35x, 2^21 1.75x)
PARALLEL_MIN_ELEMENTS = 1 << 18


@numba.njit(cache=True, inline="always")
def mulshoup(x, w, ws, q):
    t = (x * ws) >> _U32
    r = x * w - t * q
    return min(r, r - q)  # unsigned wrap-around makes r - q huge when r < q: a branch-free reduction


@numba.njit(cache=True)
def ntt_forward_inplace(a, psi_rev, psi_rev_shoup, q_arr):
    """In-place negacyclic Cooley–Tukey NTT of each row of a (k, n); bit-reversed output."""
    k, n = a.shape
    for l in range(k):
        q = q_arr[l]
        row = a[l]
        w_row = psi_rev[l]
        ws_row = psi_rev_shoup[l]
        m = 1
        t = n
        while m < n:
            t >>= 1
            for i in range(m):
                w = w_row[m + i]
                ws = ws_row[m + i]
                base = 2 * i * t
                x = row[base:base + t]  # slices let numba prove x and y never alias
                y = row[base + t:base + 2 * t]
                for j in range(t):
                    u = x[j]
                    v = mulshoup(y[j], w, ws, q)
                    s = u + v
                    x[j] = min(s, s - q)
                    d = u + q - v
                    y[j] = min(d, d - q)
            m <<= 1


@numba.njit(cache=True)
def ntt_inverse_inplace(a, psi_inv_rev, psi_inv_rev_shoup, q_arr, n_inv, n_inv_shoup):
    """In-place Gentleman–Sande inverse of ``ntt_forward_inplace``, including the factor n^-1."""
    k, n = a.shape
    for l in range(k):
        q = q_arr[l]
        row = a[l]
        w_row = psi_inv_rev[l]
        ws_row = psi_inv_rev_shoup[l]
        t = 1
        m = n
        while m > 1:
            h = m >> 1
            for i in range(h):
                w = w_row[h + i]
                ws = ws_row[h + i]
                base = 2 * i * t
                x = row[base:base + t]
                y = row[base + t:base + 2 * t]
                for j in range(t):
                    u = x[j]
                    v = y[j]
                    s = u + v
                    x[j] = min(s, s - q)
                    y[j] = mulshoup(u + q - v, w, ws, q)
            t <<= 1
            m = h
        ni = n_inv[l]
        nis = n_inv_shoup[l]
        for j in range(n):
            row[j] = mulshoup(row[j], ni, nis, q)


@numba.njit(cache=True)
def fast_basis_convert(x, q_from, qhat_inv, qhat_inv_shoup, q_to, qhat_mod_p, qhat_mod_p_shoup):
    """y_j = Σ_i [x_i·(Q/q_i)^-1]_{q_i} · (Q/q_i) mod p_j for every coefficient (see BasisConversion)."""
    k, n = x.shape
    kp = q_to.shape[0]
    xi = np.empty((k, n), dtype=np.uint64)
    for i in range(k):
        for c in range(n):
            xi[i, c] = mulshoup(x[i, c], qhat_inv[i], qhat_inv_shoup[i], q_from[i])
    out = np.zeros((kp, n), dtype=np.uint64)
    for j in range(kp):
        p = q_to[j]
        for c in range(n):
            acc = np.uint64(0)
            for i in range(k):
                acc += mulshoup(xi[i, c], qhat_mod_p[i, j], qhat_mod_p_shoup[i, j], p)
            out[j, c] = acc % p
    return out


def _elementwise(kernel, shape, *args):
    """kernel(*args, start, stop) over the flat element range of a (k, n) array, in pieces on the threads of
    ``hezk.threads`` (each element's output is its own: any split gives the same bits)."""
    k, n = shape
    if k * n:
        parallel(lambda start, stop: kernel(*args, start, stop), k * n, min_work=PARALLEL_MIN_ELEMENTS, align=64)


def _by_rows(kernel, k, n, *args):
    """kernel(*args, start, stop) over whole rows start <= l < stop, in pieces on the threads."""
    if k * n:
        parallel(lambda start, stop: kernel(*args, start, stop), k, min_work=PARALLEL_MIN_ELEMENTS, work_per_item=n)


@numba.njit(cache=True, inline="always")
def _row_span(l, n, start, stop):
    """The columns [c0, c1) of row l inside the flat element range [start, stop)."""
    return max(start - l * n, 0), min(stop - l * n, n)


def addmod_rows(a, b, q):
    """(a + b) mod q_l row by row, for residues already reduced."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_addmod_range, a.shape, a, b, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _addmod_range(a, b, q, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, ar, br, orow = q[l], a[l, c0:c1], b[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            s = ar[c] + br[c]
            orow[c] = min(s, s - ql)


def submod_rows(a, b, q):
    """(a − b) mod q_l row by row, for residues already reduced."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_submod_range, a.shape, a, b, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _submod_range(a, b, q, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, ar, br, orow = q[l], a[l, c0:c1], b[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            s = ar[c] + ql - br[c]
            orow[c] = min(s, s - ql)


@numba.njit(cache=True, inline="always")
def _barrett_product(a, b, ql, sh1, sh2, m):
    """a·b mod ql by CROSS-form Barrett (two conditional subtractions: the quotient estimate is low by <= 2)."""
    x = a * b
    t = ((x >> sh1) * m) >> sh2
    r = x - t * ql
    r = min(r, r - ql)
    return min(r, r - ql)


@numba.njit(cache=True, inline="always")
def _barrett_row(q, bk, bm, l):
    """(q_l, k - 1, k + 1, m) of row l's Barrett constants (see ``_barrett_product``)."""
    return q[l], np.uint64(bk[l] - 1), np.uint64(bk[l] + 1), bm[l]


def mulmod_rows(a, b, q, bk, bm):
    """a·b mod q_l row by row with CROSS-form Barrett (k = ⌈log2 q⌉, m = ⌊2^2k / q⌋, see modarith.Barrett)."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_mulmod_range, a.shape, a, b, q, bk, bm, out)
    return out


@numba.njit(cache=True, nogil=True)
def _mulmod_range(a, b, q, bk, bm, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, sh1, sh2, m = _barrett_row(q, bk, bm, l)
        ar, br, orow = a[l, c0:c1], b[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            orow[c] = _barrett_product(ar[c], br[c], ql, sh1, sh2, m)


def tensor_rows(a0, a1, b0, b1, q, bk, bm):
    """(a0·b0, a0·b1 + a1·b0, a1·b1) mod q_l row by row (Barrett as ``mulmod_rows``; the tensor product of two
    ciphertexts in NTT form): one pass over the four inputs instead of four products and a sum (15 array passes
    down to 7: these kernels are memory-bound). The same residues as ``mulmod_rows`` and ``addmod_rows``."""
    d0, d1, d2 = (np.empty(a0.shape, dtype=np.uint64) for _ in range(3))
    _elementwise(_tensor_range, a0.shape, a0, a1, b0, b1, q, bk, bm, d0, d1, d2)
    return d0, d1, d2


@numba.njit(cache=True, nogil=True)
def _tensor_range(a0, a1, b0, b1, q, bk, bm, d0, d1, d2, start, stop):
    n = a0.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, sh1, sh2, m = _barrett_row(q, bk, bm, l)
        x0, x1, y0, y1 = a0[l, c0:c1], a1[l, c0:c1], b0[l, c0:c1], b1[l, c0:c1]
        o0, o1, o2 = d0[l, c0:c1], d1[l, c0:c1], d2[l, c0:c1]
        for c in range(c1 - c0):
            o0[c] = _barrett_product(x0[c], y0[c], ql, sh1, sh2, m)
            s = _barrett_product(x0[c], y1[c], ql, sh1, sh2, m) + _barrett_product(x1[c], y0[c], ql, sh1, sh2, m)
            o1[c] = min(s, s - ql)
            o2[c] = _barrett_product(x1[c], y1[c], ql, sh1, sh2, m)


def tensor_add_rows(a0, a1, b0, b1, q, bk, bm, f, fs, x0, x1, g, gs, d0, d1, d2):
    """(d0, d1, d2) ← (f·a0·b0 + g·x0, f·(a0·b1 + a1·b0) + g·x1, f·a1·b1) mod q_l row by row, written into the given
    (k, n) arrays in one pass: the tensor of ``tensor_rows`` with a per-row integer factor f_l (Shoup companion
    fs_l; the residues of ``mulmod_scalar_rows`` on a before the tensor) and an added ciphertext times g_l (x0, x1
    may have no rows: nothing added to that part).  The same residues as those kernels in sequence; no array of
    its own (``Evaluator.mul_add_rescale`` writes into scratch)."""
    _elementwise(_tensor_add_range, a0.shape, a0, a1, b0, b1, q, bk, bm, f, fs, x0, x1, g, gs, d0, d1, d2)
    return d0, d1, d2


@numba.njit(cache=True, nogil=True)
def _tensor_add_range(a0, a1, b0, b1, q, bk, bm, f, fs, x0, x1, g, gs, d0, d1, d2, start, stop):
    n = a0.shape[1]
    add0, add1 = x0.shape[0] > 0, x1.shape[0] > 0
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, sh1, sh2, m = _barrett_row(q, bk, bm, l)
        fl, fsl, gl, gsl = f[l], fs[l], g[l], gs[l]
        u0, u1, y0, y1 = a0[l, c0:c1], a1[l, c0:c1], b0[l, c0:c1], b1[l, c0:c1]
        o0, o1, o2 = d0[l, c0:c1], d1[l, c0:c1], d2[l, c0:c1]
        for c in range(c1 - c0):
            v0 = mulshoup(u0[c], fl, fsl, ql)
            v1 = mulshoup(u1[c], fl, fsl, ql)
            o0[c] = _barrett_product(v0, y0[c], ql, sh1, sh2, m)
            s = _barrett_product(v0, y1[c], ql, sh1, sh2, m) + _barrett_product(v1, y0[c], ql, sh1, sh2, m)
            o1[c] = min(s, s - ql)
            o2[c] = _barrett_product(v1, y1[c], ql, sh1, sh2, m)
        if add0:
            z = x0[l, c0:c1]
            for c in range(c1 - c0):
                s = o0[c] + mulshoup(z[c], gl, gsl, ql)
                o0[c] = min(s, s - ql)
        if add1:
            z = x1[l, c0:c1]
            for c in range(c1 - c0):
                s = o1[c] + mulshoup(z[c], gl, gsl, ql)
                o1[c] = min(s, s - ql)


#: columns summed at a time by ``mul_int_sum_rows``: a whole row at N <= 2^16 (its running sum, 512 kB, stays in
#: L2; 1024-column chunks, held in L1, measured slower: k input streams restarted per chunk defeat the prefetcher)
_SUM_COLUMNS = 65536

#: the most terms one pass of ``mul_int_sum_rows`` or ``keyswitch.muladd_pairs`` sums (their tuples of arrays are
#: padded to it: one compiled kernel); callers with more sum them in batches
SUM_TERMS = 32


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous view of ``a`` (a copy only where it is not contiguous): the one array type a kernel
    taking a tuple of arrays compiles for."""
    v = np.ascontiguousarray(a).view()
    v.setflags(write=False)
    return v


def mul_int_sum_rows(xs, w, ws, init, q, out):
    """out[l] ← (init_l + Σ_t xs[t][l]·w[t, l]) mod q_l in one pass: an integer combination of k arrays, each read
    once and the sum written once, where k ``muladd_scalar_rows`` passes (its twin: the same residues) read and
    write the running sum k times.  xs: k uint64 arrays of at least out's rows (their first rows are used), w/ws:
    (k, rows) constants below q_l and their Shoup companions, init: (rows,) reduced; lazy products (< 2q) summed
    unreduced and reduced once; k <= ``SUM_TERMS``.  Row ranges run on the threads of ``hezk.threads``."""
    rows, n = out.shape
    k = len(xs)
    if not 1 <= k <= SUM_TERMS or w.shape != (k, rows) or ws.shape != (k, rows) or init.shape != (rows,) or \
            q.shape != (rows,):
        raise ValueError(f"mul_int_sum_rows: 1 <= k <= {SUM_TERMS} arrays with (k, rows) constants: k={k}, "
                         f"w {w.shape}, ws {ws.shape}, init {init.shape}, q {q.shape}, out {out.shape}")
    for x in xs:
        if x.dtype != np.uint64 or x.ndim != 2 or x.shape[0] < rows or x.shape[1] != n:
            raise ValueError(f"mul_int_sum_rows: each array must be uint64 of at least {rows} rows of {n}")
    terms = [read_only(x[:rows]) for x in xs]
    terms = tuple(terms + terms[:1] * (SUM_TERMS - k))        # padded (not read): one compiled kernel
    _elementwise(_mul_int_sum_range, out.shape, terms, k, w, ws, init, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _mul_int_sum_range(xs, k, w, ws, init, q, out, start, stop):
    n = out.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql = q[l]
        q_inv = 1.0 / ql
        for a in range(c0, c1, _SUM_COLUMNS):
            b = min(a + _SUM_COLUMNS, c1)
            o = out[l, a:b]
            o[:] = init[l]
            for t in range(k):
                wt, wst, x = w[t, l], ws[t, l], xs[t][l, a:b]
                for c in range(b - a):
                    o[c] += _mulshoup_lazy(x[c], wt, wst, ql)
            for c in range(b - a):
                o[c] = reduce_small(o[c], ql, q_inv)


def wide_residues_rows(c, q, out):
    """out[l] = c mod q_l for int64 coefficients c of any size: a float64 quotient estimate (float64(c) is
    within 2^10 of c, so the estimate is off by at most 1 + 2^10/q) and exact int64 corrections, no
    integer division (np.remainder's)."""
    _elementwise(_wide_residues_range, out.shape, c, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _wide_residues_range(c, q, out, start, stop):
    n = c.shape[0]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql = np.int64(q[l])
        inv = 1.0 / np.float64(q[l])
        orow = out[l, c0:c1]
        cr = c[c0:c1]
        for i in range(c1 - c0):
            x = cr[i]
            r = x - np.int64(np.floor(np.float64(x) * inv)) * ql
            while r < 0:
                r += ql
            while r >= ql:
                r -= ql
            orow[i] = np.uint64(r)


def muladd_rows(acc, a, b, q, bk, bm):
    """acc ← (acc + a·b) mod q_l in place, row by row (Barrett as ``mulmod_rows``; all reduced): one pass
    instead of a product array and a sum array (plaintext-diagonal sums of baby-step giant-step)."""
    _elementwise(_muladd_range, a.shape, acc, a, b, q, bk, bm)


@numba.njit(cache=True, nogil=True)
def _muladd_range(acc, a, b, q, bk, bm, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, sh1, sh2, m = _barrett_row(q, bk, bm, l)
        xr, ar, br = acc[l, c0:c1], a[l, c0:c1], b[l, c0:c1]
        for c in range(c1 - c0):
            s = xr[c] + _barrett_product(ar[c], br[c], ql, sh1, sh2, m)
            xr[c] = min(s, s - ql)


def mulmod_scalar_rows(a, w, ws, q):
    """a·w_l mod q_l for one constant per row (Shoup companions ws)."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_mulmod_scalar_range, a.shape, a, w, ws, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _mulmod_scalar_range(a, w, ws, q, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, wl, wsl, ar, orow = q[l], w[l], ws[l], a[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            orow[c] = mulshoup(ar[c], wl, wsl, ql)


def negmod_rows(a, q):
    """(−a) mod q_l row by row."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_negmod_range, a.shape, a, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _negmod_range(a, q, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, ar, orow = q[l], a[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            r = ql - ar[c]
            orow[c] = min(r, r - ql)


def permute_rows(a, perm):
    """out[l, i] = a[l, perm[i]] (an automorphism in NTT form)."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_permute_range, a.shape, a, perm, out)
    return out


@numba.njit(cache=True, nogil=True)
def _permute_range(a, perm, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ar, orow, pr = a[l], out[l, c0:c1], perm[c0:c1]
        for i in range(c1 - c0):
            orow[i] = ar[pr[i]]


def add_permuted_into(acc, a, perm, q):
    """acc[l, i] = (acc[l, i] + a[l, perm[i]]) mod q_l in place (an automorphism in NTT form added to a running
    sum: ``permute_rows`` then ``addmod_rows`` without the permuted array); acc and a reduced."""
    _elementwise(_add_permuted_range, a.shape, acc, a, perm, q)
    return acc


@numba.njit(cache=True, nogil=True)
def _add_permuted_range(acc, a, perm, q, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, al, ol, pr = q[l], a[l], acc[l, c0:c1], perm[c0:c1]
        for i in range(c1 - c0):
            s = ol[i] + al[pr[i]]
            ol[i] = min(s, s - ql)


@numba.njit(cache=True, inline="always")
def _mulshoup_lazy(x, w, ws, q):
    """x·w mod q up to one extra q: a value in [0, 2q) (x < 2^32, Shoup companion ws of w < q)."""
    return x * w - ((x * ws) >> _U32) * q


@numba.njit(cache=True, inline="always")
def reduce_small(acc, q, q_inv):
    """acc mod q for acc < 2^52 (a float64 quotient estimate, off by at most one, then corrected)."""
    r = acc - np.uint64(acc * q_inv) * q
    r = min(r, r + q)   # the estimate was one too large: r wrapped around
    return min(r, r - q)


#: columns of one tile of ``_divide_round_columns``
_DIVIDE_TILE = 2048


def divide_round_correction(tail, q_tail, half_tail, garner, garner_shoup, radix_inv, radix_inv_shoup,
                            q_head, weight, weight_shoup, half_head, out=None):
    """``_divide_round_columns`` over every coefficient (a new (len(q_head), n) array, or written into ``out``, a
    writable C-contiguous uint64 array of that shape); coefficients are independent, so ranges of them run on the
    threads of ``hezk.threads``."""
    k, n = tail.shape
    if out is None:
        out = np.empty((q_head.shape[0], n), dtype=np.uint64)
    elif out.dtype != np.uint64 or out.shape != (q_head.shape[0], n) or not out.flags.c_contiguous or \
            not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous uint64 array of shape {(q_head.shape[0], n)}")
    parallel(lambda start, stop: _divide_round_columns(tail, q_tail, half_tail, garner, garner_shoup, radix_inv,
                                                       radix_inv_shoup, q_head, weight, weight_shoup, half_head,
                                                       out, start, stop),
             n, min_work=PARALLEL_MIN_PRODUCTS, work_per_item=k * (k + q_head.shape[0]), align=64)
    return out


@numba.njit(cache=True, nogil=True)
def _divide_round_columns(tail, q_tail, half_tail, garner, garner_shoup, radix_inv, radix_inv_shoup,
                          q_head, weight, weight_shoup, half_head, out, start, stop):
    """c_p = (⌊D/2⌋ − t)·D^-1 mod p for every head prime p, t = (x + ⌊D/2⌋) mod D ∈ [0, D) exactly.

    t is found in mixed radix (Garner): t = Σ_j d_j·M_j, M_j = t_0···t_(j−1), d_j ∈ [0, t_j), with
    d_i = (y_i − Σ_(j<i) d_j·M_j)·M_i^-1 mod t_i and y_i = x_i + ⌊D/2⌋ mod t_i: integers only.
    ``garner[i, j]`` = −M_j mod t_i, ``radix_inv[i]`` = M_i^-1 mod t_i, ``weight[p, j]`` =
    −M_j·D^-1 mod p, ``half_head[p]`` = ⌊D/2⌋·D^-1 mod p (Shoup companions alongside).  Digits are
    below 2^31, so Shoup products by constants of any prime are valid; sums of k lazy products
    (< 2k·2^31) are reduced once.  Written into out[:, start:stop] for the coefficients start <= c < stop, a tile of
    ``_DIVIDE_TILE`` columns at a time: the tile's digits stay in cache for every head prime (N16_BOOT's ModDown with
    the rescale, 11 -> 47 primes, one thread: 10.6 ms against 13.0 with whole rows, the same residues)."""
    k = tail.shape[0]
    tile = min(_DIVIDE_TILE, stop - start)
    digits = np.empty((k, tile), dtype=np.uint64)
    acc = np.empty(tile, dtype=np.uint64)
    kh = q_head.shape[0]
    for c0 in range(start, stop, tile):     # a tile of columns at a time: the digits stay in cache for every prime
        n = min(tile, stop - c0)
        for i in range(k):
            ti = q_tail[i]
            ti_inv = 1.0 / ti
            src = tail[i, c0:c0 + n]
            for c in range(n):
                acc[c] = src[c] + half_tail[i]
            for j in range(i):
                g, gs, dj = garner[i, j], garner_shoup[i, j], digits[j]
                for c in range(n):
                    acc[c] += _mulshoup_lazy(dj[c], g, gs, ti)
            w, ws, row = radix_inv[i], radix_inv_shoup[i], digits[i]
            for c in range(n):
                row[c] = mulshoup(reduce_small(acc[c], ti, ti_inv), w, ws, ti)
        for p in range(kh):
            qp = q_head[p]
            qp_inv = 1.0 / qp
            row = out[p, c0:c0 + n]
            row[:] = half_head[p]
            for j in range(k):
                w, ws, dj = weight[p, j], weight_shoup[p, j], digits[j]
                for c in range(n):
                    row[c] += _mulshoup_lazy(dj[c], w, ws, qp)
            for c in range(n):
                row[c] = reduce_small(row[c], qp, qp_inv)


def muladd_permute_rows(a, w, ws, b, c, q, perm):
    """out[l, i] = (a[l, p]·w_l + b[l, p] + c[l, p]) mod q_l with p = perm[i]: the last step of a division
    (``muladd_scalar_rows``), an added part and an automorphism in NTT form (``permute_rows``) in one pass;
    ``c`` with no rows adds nothing.  b, c already reduced.  Whole rows per thread (each row is first formed in
    natural order, vectorized, then gathered)."""
    k, n = a.shape
    out = np.empty((k, n), dtype=np.uint64)
    _by_rows(_muladd_permute_range, k, n, a, w, ws, b, c, q, perm, out)
    return out


@numba.njit(cache=True, nogil=True)
def _muladd_permute_range(a, w, ws, b, c, q, perm, out, start, stop):
    n = a.shape[1]
    row = np.empty(n, dtype=np.uint64)          # one row in natural order (vectorized), then gathered
    for l in range(start, stop):
        ql, wl, wsl = q[l], w[l], ws[l]
        al, bl = a[l], b[l]
        for i in range(n):
            s = mulshoup(al[i], wl, wsl, ql) + bl[i]
            row[i] = min(s, s - ql)
        if c.shape[0] > 0:
            cl = c[l]
            for i in range(n):
                s = row[i] + cl[i]
                row[i] = min(s, s - ql)
        ol = out[l]
        for i in range(n):
            ol[i] = row[perm[i]]


def muladd_scalar_rows(a, w, ws, b, q):
    """(a·w_l + b) mod q_l for one constant per row (Shoup companions ws), b already reduced."""
    out = np.empty(a.shape, dtype=np.uint64)
    _elementwise(_muladd_scalar_range, a.shape, a, w, ws, b, q, out)
    return out


@numba.njit(cache=True, nogil=True)
def _muladd_scalar_range(a, w, ws, b, q, out, start, stop):
    n = a.shape[1]
    for l in range(start // n, (stop - 1) // n + 1):
        c0, c1 = _row_span(l, n, start, stop)
        ql, wl, wsl, ar, br, orow = q[l], w[l], ws[l], a[l, c0:c1], b[l, c0:c1], out[l, c0:c1]
        for c in range(c1 - c0):
            s = mulshoup(ar[c], wl, wsl, ql) + br[c]
            orow[c] = min(s, s - ql)
