"""numba kernels of the bit-check prover (:class:`proofs.aggregate.BitCheckProver`), imported lazily.

One pass per round over the remaining cube: for X = 0..3, t = low + X (high - low), h = t - t^2, and
out[X] += suffix * h, all mod p (base-field or F_p4 tables, F_p4 = F_p[Y]/(Y^4 - 11)). The numpy twin is
the generic :class:`proofs.sumcheck.SumcheckProver` on the same sum (tests/proofs/test_aggregate.py).
"""
import numba
import numpy as np

P = np.uint64(2013265921)
W = np.uint64(11)


@numba.njit(cache=True)
def bit_round_base(low, high, suffix, out):
    """Base tables low/high (m,), suffix (m, 4); adds sum_i suffix_i h_X(i) into out (4, 4)."""
    for i in range(low.shape[0]):
        lo = low[i]
        d = high[i] + P - lo
        for x in range(4):
            t = (lo + np.uint64(x) * d) % P
            h = (t + P - t * t % P) % P
            if h != 0:
                for c in range(4):
                    out[x, c] = (out[x, c] + suffix[i, c] * h) % P


@numba.njit(cache=True)
def bit_round_ext(low, high, suffix, out):
    """F_p4 tables low/high/suffix (m, 4); adds sum_i suffix_i h_X(i) into out (4, 4)."""
    t = np.zeros(4, dtype=np.uint64)
    h = np.zeros(4, dtype=np.uint64)
    for i in range(low.shape[0]):
        for x in range(4):
            for c in range(4):
                t[c] = (low[i, c] + np.uint64(x) * (high[i, c] + P - low[i, c])) % P
            s0 = (t[0] * t[0] + W * ((np.uint64(2) * t[1] * t[3] % P + t[2] * t[2]) % P)) % P
            s1 = (np.uint64(2) * t[0] * t[1] % P + W * (np.uint64(2) * t[2] * t[3] % P)) % P
            s2 = (np.uint64(2) * t[0] * t[2] % P + t[1] * t[1] + W * (t[3] * t[3] % P)) % P
            s3 = (np.uint64(2) * t[0] * t[3] % P + np.uint64(2) * t[1] * t[2] % P) % P
            h[0] = (t[0] + P - s0) % P
            h[1] = (t[1] + P - s1) % P
            h[2] = (t[2] + P - s2) % P
            h[3] = (t[3] + P - s3) % P
            a0, a1, a2, a3 = suffix[i, 0], suffix[i, 1], suffix[i, 2], suffix[i, 3]
            out[x, 0] = (out[x, 0] + a0 * h[0] + W * ((a1 * h[3] + a2 * h[2] + a3 * h[1]) % P)) % P
            out[x, 1] = (out[x, 1] + a0 * h[1] + a1 * h[0] + W * ((a2 * h[3] + a3 * h[2]) % P)) % P
            out[x, 2] = (out[x, 2] + a0 * h[2] + a1 * h[1] + a2 * h[0] + W * (a3 * h[3] % P)) % P
            out[x, 3] = (out[x, 3] + (a0 * h[3] + a1 * h[2]) % P + (a2 * h[1] + a3 * h[0]) % P) % P
