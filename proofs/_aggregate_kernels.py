"""numba kernels of the bit-check prover (:class:`proofs.aggregate.BitCheckProver`), imported lazily.

Round kernels: one pass over the remaining cube; for X = 0..3, t = low + X (high - low), h = t - t^2, and
out[X] += eq(tau_rest, rest) * h, with the eq weight split as eq_lo[rest_lo] * eq_hi[rest_hi] (the inner
sum over rest_lo is multiplied by eq_hi once per block, so no full eq table exists). Fold kernels bind the
lowest variable: out = low + r (high - low). All mod p, F_p4 = F_p[Y]/(Y^4 - 11). The numpy twin is the
generic :class:`proofs.sumcheck.SumcheckProver` on the same sum (tests/proofs/test_aggregate.py).
"""
import numba
import numpy as np

P = np.uint64(2013265921)
W = np.uint64(11)


@numba.njit(cache=True, inline="always")
def _mul_acc(a0, a1, a2, a3, b0, b1, b2, b3, out, x):
    """out[x] += a * b in F_p4 (all operands < p)."""
    out[x, 0] = (out[x, 0] + a0 * b0 + W * ((a1 * b3 + a2 * b2 + a3 * b1) % P)) % P
    out[x, 1] = (out[x, 1] + a0 * b1 + a1 * b0 + W * ((a2 * b3 + a3 * b2) % P)) % P
    out[x, 2] = (out[x, 2] + a0 * b2 + a1 * b1 + a2 * b0 + W * (a3 * b3 % P)) % P
    out[x, 3] = (out[x, 3] + (a0 * b3 + a1 * b2) % P + (a2 * b1 + a3 * b0) % P) % P


@numba.njit(cache=True, inline="always")
def _add_bit_defect(t, eq_lo, lb, block, x):
    """block[x] += eq_lo[lb] * (t - t^2) for an F_p4 value t (4,)."""
    s0 = (t[0] * t[0] + W * ((np.uint64(2) * t[1] * t[3] % P + t[2] * t[2]) % P)) % P
    s1 = (np.uint64(2) * t[0] * t[1] % P + W * (np.uint64(2) * t[2] * t[3] % P)) % P
    s2 = (np.uint64(2) * t[0] * t[2] % P + t[1] * t[1] + W * (t[3] * t[3] % P)) % P
    s3 = (np.uint64(2) * t[0] * t[3] % P + np.uint64(2) * t[1] * t[2] % P) % P
    _mul_acc(eq_lo[lb, 0], eq_lo[lb, 1], eq_lo[lb, 2], eq_lo[lb, 3],
             (t[0] + P - s0) % P, (t[1] + P - s1) % P, (t[2] + P - s2) % P, (t[3] + P - s3) % P, block, x)


@numba.njit(cache=True, inline="always")
def _flush(eq_hi, hb, block, out):
    """out[X] += eq_hi[hb] * block[X], then clear block."""
    for x in range(4):
        _mul_acc(eq_hi[hb, 0], eq_hi[hb, 1], eq_hi[hb, 2], eq_hi[hb, 3],
                 block[x, 0], block[x, 1], block[x, 2], block[x, 3], out, x)
        for c in range(4):
            block[x, c] = 0


@numba.njit(cache=True)
def bit_round_base(low, high, eq_lo, eq_hi, out):
    """Base tables low/high (n_lo * n_hi,), eq_lo (n_lo, 4), eq_hi (n_hi, 4); adds into out (4, 4)."""
    n_lo = eq_lo.shape[0]
    block = np.zeros((4, 4), dtype=np.uint64)
    for hb in range(eq_hi.shape[0]):
        for lb in range(n_lo):
            i = hb * n_lo + lb
            lo = low[i]
            d = high[i] + P - lo
            for x in range(4):
                t = (lo + np.uint64(x) * d) % P
                h = (t + P - t * t % P) % P
                if h != 0:
                    for c in range(4):
                        block[x, c] = (block[x, c] + eq_lo[lb, c] * h) % P
        _flush(eq_hi, hb, block, out)


@numba.njit(cache=True)
def bit_round_ext(low, high, eq_lo, eq_hi, out):
    """F_p4 tables low/high (n_lo * n_hi, 4), eq_lo (n_lo, 4), eq_hi (n_hi, 4); adds into out (4, 4)."""
    n_lo = eq_lo.shape[0]
    block = np.zeros((4, 4), dtype=np.uint64)
    t = np.zeros(4, dtype=np.uint64)
    for hb in range(eq_hi.shape[0]):
        for lb in range(n_lo):
            i = hb * n_lo + lb
            for x in range(4):
                for c in range(4):
                    t[c] = (low[i, c] + np.uint64(x) * (high[i, c] + P - low[i, c])) % P
                _add_bit_defect(t, eq_lo, lb, block, x)
        _flush(eq_hi, hb, block, out)


@numba.njit(cache=True)
def fold_base(low, high, r, out):
    """out[i] = low[i] + r (high[i] - low[i]) for base low/high (m,) and r in F_p4 -> out (m, 4)."""
    for i in range(low.shape[0]):
        d = high[i] + P - low[i]
        for c in range(4):
            out[i, c] = r[c] * d % P
        out[i, 0] = (out[i, 0] + low[i]) % P


@numba.njit(cache=True)
def fold_ext(low, high, r, out):
    """out[i] = low[i] + r (high[i] - low[i]) for F_p4 low/high (m, 4) and r (4,)."""
    d = np.zeros(4, dtype=np.uint64)
    for i in range(low.shape[0]):
        for c in range(4):
            d[c] = high[i, c] + P - low[i, c]
            out[i, c] = low[i, c]
        out[i, 0] = (out[i, 0] + r[0] * d[0] + W * ((r[1] * d[3] % P + r[2] * d[2] % P + r[3] * d[1] % P) % P)) % P
        out[i, 1] = (out[i, 1] + (r[0] * d[1] + r[1] * d[0]) % P + W * ((r[2] * d[3] + r[3] * d[2]) % P)) % P
        out[i, 2] = (out[i, 2] + (r[0] * d[2] + r[1] * d[1]) % P + (r[2] * d[0] + W * (r[3] * d[3] % P)) % P) % P
        out[i, 3] = (out[i, 3] + (r[0] * d[3] + r[1] * d[2]) % P + (r[2] * d[1] + r[3] * d[0]) % P) % P


@numba.njit(cache=True)
def bit_round_lazy(table, r0, eq_lo, eq_hi, out):
    """Round 1 straight from the base table after x_0 := r0 (no F_p4 table of half the cube is written):
    low/high of entry i are T[4i] + r0 (T[4i+1] - T[4i]) and T[4i+2] + r0 (T[4i+3] - T[4i+2])."""
    n_lo = eq_lo.shape[0]
    block = np.zeros((4, 4), dtype=np.uint64)
    t = np.zeros(4, dtype=np.uint64)
    lo = np.zeros(4, dtype=np.uint64)
    hi = np.zeros(4, dtype=np.uint64)
    for hb in range(eq_hi.shape[0]):
        for lb in range(n_lo):
            i = 4 * (hb * n_lo + lb)
            d_lo = table[i + 1] + P - table[i]
            d_hi = table[i + 3] + P - table[i + 2]
            for c in range(4):
                lo[c] = r0[c] * d_lo % P
                hi[c] = r0[c] * d_hi % P
            lo[0] = (lo[0] + table[i]) % P
            hi[0] = (hi[0] + table[i + 2]) % P
            for x in range(4):
                for c in range(4):
                    t[c] = (lo[c] + np.uint64(x) * (hi[c] + P - lo[c])) % P
                _add_bit_defect(t, eq_lo, lb, block, x)
        _flush(eq_hi, hb, block, out)


@numba.njit(cache=True)
def fold_two_base(table, weights, out):
    """out[i] = sum_b weights[b] T[4i + b] for a base table and F_p4 weights (4, 4): x_0, x_1 bound at once."""
    for i in range(out.shape[0]):
        for c in range(4):
            acc = np.uint64(0)
            for b in range(4):
                acc = (acc + weights[b, c] * table[4 * i + b]) % P
            out[i, c] = acc
