"""numba kernels of :mod:`proofs.basefold`'s prover (imported lazily, compiled on first call, cached on disk).
Each is one pass of a numpy formula in :mod:`proofs.basefold`, its tested twin. uint64 arithmetic throughout:
products of residues are < 2^62; sums of reduced terms stay below 2^64 for up to 2^33 terms."""
import numba
import numpy as np

from ._kernels import _ext_mul_into

P = np.uint64(2013265921)
INV2 = np.uint64(1006632961)


@numba.njit(cache=True)
def round_sums(f, w, out):
    """out[x] = sum_j f(x, j) w(x, j) for x = 0, 1, 2 (f base (2n,) or F_p4 (2n, 4), w (2n, 4)): the values of a
    degree-2 sumcheck message binding the lowest variable (twin: basefold._round_message)."""
    acc = np.zeros((3, 4), dtype=np.uint64)
    prod = np.empty((1, 4), dtype=np.uint64)
    f_x = np.empty((3, 4), dtype=np.uint64)
    w_x = np.empty((3, 4), dtype=np.uint64)
    ext = f.ndim == 2
    for j in range(w.shape[0] // 2):
        for c in range(4):
            w0, w1 = w[2 * j, c], w[2 * j + 1, c]
            w_x[0, c], w_x[1, c] = w0, w1
            w_x[2, c] = (2 * w1 + P - w0) % P
            if ext:
                f0, f1 = f[2 * j, c], f[2 * j + 1, c]
                f_x[0, c], f_x[1, c] = f0, f1
                f_x[2, c] = (2 * f1 + P - f0) % P
        if ext:
            for x in range(3):
                _ext_mul_into(f_x[x, 0], f_x[x, 1], f_x[x, 2], f_x[x, 3], w_x[x, 0], w_x[x, 1], w_x[x, 2],
                              w_x[x, 3], prod, 0)
                for c in range(4):
                    acc[x, c] += prod[0, c]
        else:
            f0, f1 = f[2 * j], f[2 * j + 1]
            f2 = (2 * f1 + P - f0) % P
            for c in range(4):
                acc[0, c] += f0 * w_x[0, c] % P
                acc[1, c] += f1 * w_x[1, c] % P
                acc[2, c] += f2 * w_x[2, c] % P
    for x in range(3):
        for c in range(4):
            out[x, c] = acc[x, c] % P


@numba.njit(cache=True)
def eq_scaled(point, scale, out):
    """out (2^k, 4) = scale * eq(point, bits(i)) for every i (x_0 the lowest bit; twin: mle.eq_table)."""
    for c in range(4):
        out[0, c] = scale[c]
    size = 1
    high = np.empty((1, 4), dtype=np.uint64)
    for b in range(point.shape[0]):
        r = point[b]
        for i in range(size):
            _ext_mul_into(out[i, 0], out[i, 1], out[i, 2], out[i, 3], r[0], r[1], r[2], r[3], high, 0)
            for c in range(4):
                out[i + size, c] = high[0, c]
                low = out[i, c]
                out[i, c] = low - high[0, c] if low >= high[0, c] else low + P - high[0, c]
        size *= 2


@numba.njit(cache=True)
def combine_rows(codeword, weights, out):
    """out[i] = sum_c codeword[i, c] weights[c] ((N, S) base times (S, 4) F_p4; twin: basefold._combine_rows)."""
    for i in range(codeword.shape[0]):
        for c in range(4):
            s = np.uint64(0)
            for k in range(codeword.shape[1]):
                s += codeword[i, k] * weights[k, c] % P
            out[i, c] = s % P


@numba.njit(cache=True)
def fold_codeword(codeword, scale, r, out):
    """One fold of a codeword (N,) base or (N, 4) F_p4: with a = c[j], b = c[j + N/2], s = (a + b)/2 and
    d = (a - b) scale[j] (scale = (2 w^j)^-1), out[j] = s + r (d - s) (twin: basefold._fold_codeword)."""
    half = out.shape[0]
    diff = np.empty((1, 4), dtype=np.uint64)
    prod = np.empty((1, 4), dtype=np.uint64)
    s_j = np.empty(4, dtype=np.uint64)
    ext = codeword.ndim == 2
    for j in range(half):
        for c in range(4):
            if ext:
                a, b = codeword[j, c], codeword[j + half, c]
            elif c == 0:
                a, b = codeword[j], codeword[j + half]
            else:
                a, b = np.uint64(0), np.uint64(0)
            s = (a + b) % P * INV2 % P
            d = (a + P - b) % P * scale[j] % P
            s_j[c] = s
            diff[0, c] = d - s if d >= s else d + P - s
        _ext_mul_into(diff[0, 0], diff[0, 1], diff[0, 2], diff[0, 3], r[0], r[1], r[2], r[3], prod, 0)
        for c in range(4):
            out[j, c] = (s_j[c] + prod[0, c]) % P


@numba.njit(cache=True)
def dot_base(e, table, out):
    """out = sum_i e[i] table[i] for F_p4 e (n, 4) and base table (n,) (twin: basefold._dot_base's numpy path)."""
    acc = np.zeros(4, dtype=np.uint64)
    for i in range(table.shape[0]):
        for c in range(4):
            acc[c] += e[i, c] * table[i] % P
    for c in range(4):
        out[c] = acc[c] % P


@numba.njit(cache=True)
def add_into(a, out):
    """out += a mod p, in place (flat uint64 arrays)."""
    for i in range(a.size):
        s = a[i] + out[i]
        out[i] = s - P if s >= P else s


@numba.njit(cache=True)
def scale_base(table, factor, out):
    """out[i] = factor * table[i] for a base table (n,) and one F_p4 element (twin: field.ext_mul_base)."""
    for i in range(table.shape[0]):
        for c in range(4):
            out[i, c] = table[i] * factor[c] % P
