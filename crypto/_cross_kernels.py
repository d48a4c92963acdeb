"""numba kernels of ``crypto.cross.FourStepBackend`` (4-step NTT, basis conversion); compiled lazily, cached on disk.

The MAT layout of ``crypto.cross`` (N = R·C, twist and bit reversal folded into the constants) with
the two sub-transforms run as radix-2 butterflies over whole rows: every butterfly of the R-point
transform combines two rows of length C, so the innermost loop is contiguous and SIMD-vectorized;
the C-point transform runs the same way on the transposed matrix (the 4-step FFT of Bailey, "FFTs
in external or hierarchical memory", 1990, in the layout of CROSS's MAT). Two radix-2 stages share
each pass over the rows. Products use Shoup's method (x·w − ⌊x·w'/2^32⌋·q ∈ [0, 2q) for
w' = ⌊w·2^32/q⌋ and x < 2^32; Harvey, "Faster arithmetic for number-theoretic transforms", 2014).
"""
import numba
import numpy as np

from hezk.progress import announce_compilation

announce_compilation(__file__)  # one line on stderr when numba must compile these kernels (a cold cache)

_U32 = np.uint64(32)
_TILE = 16      # transpose tile (fixed, so the inner loops unroll)
CONVERT_TILE = 2048   # coefficients per tile of the basis conversion


@numba.njit(cache=True, inline="always")
def _shoup(x, w, ws, q):
    r = x * w - ((x * ws) >> _U32) * q
    return min(r, r - q)   # r − q wraps above r exactly when r < q


@numba.njit(cache=True, inline="always")
def _ct(u, v, w, ws, q, q2):
    """Lazy Cooley–Tukey butterfly (u + w·v, u − w·v) mod q for u, v in [0, 2q), outputs in [0, 2q)
    (Harvey 2014; 2q < 2^32 keeps every Shoup input in range). q2 = 2q."""
    v = v * w - ((v * ws) >> _U32) * q      # w·v mod q, in [0, 2q)
    s = u + v
    d = u + q2 - v
    return min(s, s - q2), min(d, d - q2)


@numba.njit(cache=True, inline="always")
def _gs(u, v, w, ws, q):
    """Gentleman–Sande butterfly (u + v, w·(u − v)) mod q."""
    s = u + v
    return min(s, s - q), _shoup(u + q - v, w, ws, q)


@numba.njit(cache=True)
def _ct_rows(x, w, ws, q):
    """In-place negacyclic Cooley–Tukey NTT along axis 0 of x (m, k): output rows in bit-reversed order,
    values in [0, 2q) (inputs in [0, 2q) too).

    Two radix-2 stages per pass over the data (radix-4 blocks of rows j, j+t/2, j+t, j+3t/2), so the
    rows are loaded and stored half as often; a last single stage when log2(m) is odd.
    """
    size, width = x.shape
    q2 = q + q
    m, t = 1, size
    while 2 * m < size:
        half = t >> 2
        for i in range(m):
            w1, ws1 = w[m + i], ws[m + i]
            w2, ws2 = w[2 * m + 2 * i], ws[2 * m + 2 * i]
            w3, ws3 = w[2 * m + 2 * i + 1], ws[2 * m + 2 * i + 1]
            for j in range(i * t, i * t + half):
                r0, r1, r2, r3 = x[j], x[j + half], x[j + 2 * half], x[j + 3 * half]
                for c in range(width):
                    a0, a2 = _ct(r0[c], r2[c], w1, ws1, q, q2)
                    a1, a3 = _ct(r1[c], r3[c], w1, ws1, q, q2)
                    r0[c], r1[c] = _ct(a0, a1, w2, ws2, q, q2)
                    r2[c], r3[c] = _ct(a2, a3, w3, ws3, q, q2)
        m <<= 2
        t >>= 2
    if m < size:
        t >>= 1
        for i in range(m):
            wi, wsi = w[m + i], ws[m + i]
            top, bottom = x[2 * i], x[2 * i + 1]
            for c in range(width):
                top[c], bottom[c] = _ct(top[c], bottom[c], wi, wsi, q, q2)


@numba.njit(cache=True)
def _gs_rows(x, w, ws, q):
    """In-place Gentleman–Sande inverse of ``_ct_rows`` without the factor 1/size (folded elsewhere)."""
    size, width = x.shape
    m, t = size, 1
    stages = 0
    while (1 << stages) < size:
        stages += 1
    if stages % 2:                           # odd number of stages: one radix-2 stage first
        h = m >> 1
        for i in range(h):
            wi, wsi = w[h + i], ws[h + i]
            top, bottom = x[2 * i], x[2 * i + 1]
            for c in range(width):
                top[c], bottom[c] = _gs(top[c], bottom[c], wi, wsi, q)
        t, m = 2, h
    while m > 1:
        h = m >> 1
        for i in range(h >> 1):
            w1, ws1 = w[h + 2 * i], ws[h + 2 * i]
            w2, ws2 = w[h + 2 * i + 1], ws[h + 2 * i + 1]
            w3, ws3 = w[(h >> 1) + i], ws[(h >> 1) + i]
            for j in range(4 * i * t, 4 * i * t + t):
                r0, r1, r2, r3 = x[j], x[j + t], x[j + 2 * t], x[j + 3 * t]
                for c in range(width):
                    a0, a1 = _gs(r0[c], r1[c], w1, ws1, q)
                    a2, a3 = _gs(r2[c], r3[c], w2, ws2, q)
                    r0[c], r2[c] = _gs(a0, a2, w3, ws3, q)
                    r1[c], r3[c] = _gs(a1, a3, w3, ws3, q)
        t <<= 2
        m >>= 2


@numba.njit(cache=True, inline="always")
def _reduced(v, q):
    """v mod q for v in [0, 2q)."""
    return min(v, v - q)


@numba.njit(cache=True)
def _transpose(src, dst, q):
    """dst = src^T reduced from [0, 2q) to [0, q), in fixed 16x16 tiles (contiguous writes) when the
    shape allows; returns the largest value of src."""
    rows, cols = src.shape
    top = np.uint64(0)
    if rows % _TILE or cols % _TILE:
        for r in range(rows):
            for c in range(cols):
                v = src[r, c]
                top = max(top, v)
                dst[c, r] = _reduced(v, q)
        return top
    for r0 in range(0, rows, _TILE):
        for c0 in range(0, cols, _TILE):
            for c in range(_TILE):
                for r in range(_TILE):
                    v = src[r0 + r, c0 + c]
                    top = max(top, v)
                    dst[c0 + c, r0 + r] = _reduced(v, q)
    return top


@numba.njit(cache=True)
def _copy(src, dst):
    """dst[:] = src (flat, same size); returns the largest value."""
    top = np.uint64(0)
    for i in range(src.size):
        v = src[i]
        top = max(top, v)
        dst[i] = v
    return top


@numba.njit(cache=True)
def _twiddle(x, tw, tws, q):
    """x ∘ tw mod q in place for x < 2^32 (contiguous, vectorized); results in [0, q)."""
    flat, w, ws = x.reshape(-1), tw.reshape(-1), tws.reshape(-1)
    for i in range(flat.size):
        flat[i] = _shoup(flat[i], w[i], ws[i], q)


@numba.njit(cache=True, nogil=True)
def four_step_forward(a, rows, cols, idx, w_r, ws_r, tw, tws, w_c, ws_c, q_arr, out):
    """Per limb l (tables at row idx[l]): X = a[l].reshape(R, C); R-point NTT down the columns,
    twiddles, C-point NTT along the rows, into out[l] (``out`` may be ``a``: limb l is read before
    out[l] is written). Returns (out, -1), or (out, l) for the first limb l holding a value >= q_l
    (its result is then not computed)."""
    work = np.empty((cols, rows), dtype=np.uint64)
    x = np.empty((rows, cols), dtype=np.uint64)
    for l in range(a.shape[0]):
        k = idx[l]
        q = q_arr[k]
        if _copy(a[l], x.reshape(-1)) >= q:
            return out, l
        _ct_rows(x, w_r[k], ws_r[k], q)
        _twiddle(x, tw[k], tws[k], q)
        _transpose(x, work, q)
        _ct_rows(work, w_c[k], ws_c[k], q)
        _transpose(work, out[l].reshape(rows, cols), q)
    return out, -1


@numba.njit(cache=True, nogil=True)
def four_step_inverse(a, rows, cols, idx, w_r, ws_r, tw, tws, w_c, ws_c, q_arr, out):
    """Exact inverse of ``four_step_forward`` (tw holds the inverse twiddles with 1/N folded in); the
    same ``out`` (``a`` allowed) and (out, first unreduced limb or -1) result."""
    work = np.empty((cols, rows), dtype=np.uint64)
    for l in range(a.shape[0]):
        k = idx[l]
        q = q_arr[k]
        if _transpose(a[l].reshape(rows, cols), work, q) >= q:
            return out, l
        _gs_rows(work, w_c[k], ws_c[k], q)
        x = out[l].reshape(rows, cols)
        _transpose(work, x, q)
        _twiddle(x, tw[k], tws[k], q)
        _gs_rows(x, w_r[k], ws_r[k], q)
    return out, -1


@numba.njit(cache=True, nogil=True)
def basis_convert(x, q_from, qhat_inv, qhat_inv_shoup, q_to, qhat_mod_p, qhat_mod_p_shoup, out, start, stop):
    """out[j, c] = Σ_i [x_i·(Q/q_i)^-1]_{q_i}·[Q/q_i]_{p_j} mod p_j for the coefficients start <= c < stop: a
    modular matmul (k' x k) · (k x n) (columns are independent: disjoint ranges may run in parallel).

    Tiles of ``CONVERT_TILE`` coefficients keep the scaled inputs and the accumulators in cache. The
    products are lazy Shoup products in [0, 2p_j), summed unreduced (below 2k·p_j < 2^53 for k < 2^21)
    and reduced once: the float64 quotient estimate ⌊acc·(1/p)⌋ is off by at most one, which the two
    corrections fix.
    """
    k = x.shape[0]
    kp = q_to.shape[0]
    scaled = np.empty((k, CONVERT_TILE), dtype=np.uint64)
    acc = np.empty(CONVERT_TILE, dtype=np.uint64)
    for c0 in range(start, stop, CONVERT_TILE):
        width = min(CONVERT_TILE, stop - c0)
        for i in range(k):
            q, w, ws = q_from[i], qhat_inv[i], qhat_inv_shoup[i]
            src, dst = x[i, c0:c0 + width], scaled[i]
            for c in range(width):
                dst[c] = _shoup(src[c], w, ws, q)
        for j in range(kp):
            p = q_to[j]
            p_inv = 1.0 / float(p)
            acc[:width] = 0
            for i in range(k):
                w, ws, src = qhat_mod_p[i, j], qhat_mod_p_shoup[i, j], scaled[i]
                for c in range(width):
                    v = src[c]
                    acc[c] += v * w - ((v * ws) >> _U32) * p     # in [0, 2p)
            dst = out[j, c0:c0 + width]
            for c in range(width):
                a = acc[c]
                r = np.int64(a) - np.int64(float(a) * p_inv) * np.int64(p)
                if r < 0:
                    r += p
                if r >= p:
                    r -= p
                dst[c] = r
    return out
