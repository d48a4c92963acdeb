"""numba kernels of the batched bits sumcheck (:mod:`proofs.layers.relu_batch`), imported lazily by its prover.

One pass per round over the tables (no stacked copies): for pairs j, l(x) = W[2j] + x (W[2j+1] - W[2j]) and
likewise t(x), accumulate sum_j l_j(x) t_j(x) and sum_j E[j] (t_j(x)^2 - t_j(x)) at x = 0, 1, 2 (E: the split-off eq table
of the higher variables, Gruen). Sums of residues < p are exact in uint64 up to 2^33 terms and are reduced at
the end. The twin is :func:`proofs.layers.relu_batch.round_sums_numpy`.
"""
import numba
import numpy as np

from hezk.progress import announce_compilation

from hezk.threads import parallel

from . import _kernels
from ._kernels import P, ext_mul_into

announce_compilation(__file__)  # one line on stderr when numba must compile these kernels (a cold cache)


@numba.njit(cache=True, inline="always")
def _line(a0, a1):
    """(a0, a1 - a0) mod p."""
    return a0, a1 - a0 if a1 >= a0 else a1 + P - a0


@numba.njit(cache=True, inline="always")
def _step(a, d):
    s = a + d
    return s - P if s >= P else s


def _summed(accs, out):
    """out = (the pieces' unreduced (2, 3, 4) accumulators added in piece order) mod p: the one-thread
    accumulator exactly (uint64 sums of residues, below 2^64 for up to 2^33 terms)."""
    total = accs[0].copy()
    for acc in accs[1:]:
        total += acc
    np.remainder(total, P, out=out)


def _pairs(function, count):
    """function(lo, hi) over pieces of ``count`` pairs on the threads of ``hezk.threads``."""
    return parallel(function, count, max(1, _kernels.PARALLEL_MIN_ENTRIES >> _kernels.ROUND_PIECE_SHIFT))


def bits_round_base(lin, eq, bits, out):
    """out[0, x] = sum_j l_j(x) t_j(x), out[1, x] = sum_j eq[j] (t_j(x)^2 - t_j(x)) (x = 0, 1, 2), base-field T;
    pieces of the pairs on the threads of ``hezk.threads``."""
    _summed(_pairs(lambda lo, hi: _bits_round_base_range(lin, eq, bits, lo, hi), bits.shape[0] // 2), out)


@numba.njit(cache=True, nogil=True)
def _bits_round_base_range(lin, eq, bits, lo, hi):
    """The unreduced accumulator of ``bits_round_base`` over the pairs lo <= j < hi."""
    acc = np.zeros((2, 3, 4), dtype=np.uint64)
    for j in range(lo, hi):
        t, dt = _line(bits[2 * j], bits[2 * j + 1])
        l0, dl0 = _line(lin[2 * j, 0], lin[2 * j + 1, 0])
        l1, dl1 = _line(lin[2 * j, 1], lin[2 * j + 1, 1])
        l2, dl2 = _line(lin[2 * j, 2], lin[2 * j + 1, 2])
        l3, dl3 = _line(lin[2 * j, 3], lin[2 * j + 1, 3])
        for x in range(3):
            if x:
                t = _step(t, dt)
                l0, l1, l2, l3 = _step(l0, dl0), _step(l1, dl1), _step(l2, dl2), _step(l3, dl3)
            if t == 0:
                continue
            acc[0, x, 0] += l0 * t % P
            acc[0, x, 1] += l1 * t % P
            acc[0, x, 2] += l2 * t % P
            acc[0, x, 3] += l3 * t % P
            t2 = t * t % P
            t2 = t2 - t if t2 >= t else t2 + P - t  # t^2 - t
            for c in range(4):
                acc[1, x, c] += eq[j, c] * t2 % P
    return acc


def bits_round_ext(lin, eq, bits, out):
    """:func:`bits_round_base` for an F_p4 T (after the first round); pieces of the pairs on the threads."""
    _summed(_pairs(lambda lo, hi: _bits_round_ext_range(lin, eq, bits, lo, hi), bits.shape[0] // 2), out)


@numba.njit(cache=True, nogil=True)
def _bits_round_ext_range(lin, eq, bits, lo, hi):
    """The unreduced accumulator of ``bits_round_ext`` over the pairs lo <= j < hi."""
    acc = np.zeros((2, 3, 4), dtype=np.uint64)
    cur = np.empty((2, 4), dtype=np.uint64)
    dif = np.empty((2, 4), dtype=np.uint64)
    prod = np.empty((3, 4), dtype=np.uint64)
    for j in range(lo, hi):
        for c in range(4):
            cur[0, c], dif[0, c] = _line(lin[2 * j, c], lin[2 * j + 1, c])
            cur[1, c], dif[1, c] = _line(bits[2 * j, c], bits[2 * j + 1, c])
        for x in range(3):
            if x:
                for r in range(2):
                    for c in range(4):
                        cur[r, c] = _step(cur[r, c], dif[r, c])
            ext_mul_into(cur[0, 0], cur[0, 1], cur[0, 2], cur[0, 3], cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3],
                          prod, 0)
            ext_mul_into(cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3], cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3],
                          prod, 1)
            for c in range(4):  # t^2 - t
                prod[1, c] = prod[1, c] - cur[1, c] if prod[1, c] >= cur[1, c] else prod[1, c] + P - cur[1, c]
            ext_mul_into(eq[j, 0], eq[j, 1], eq[j, 2], eq[j, 3], prod[1, 0], prod[1, 1], prod[1, 2], prod[1, 3],
                          prod, 2)
            for c in range(4):
                acc[0, x, c] += prod[0, c]
                acc[1, x, c] += prod[2, c]
    return acc


@numba.njit(cache=True)
def pair_sums(table, out):
    """out[j] = table[2j] + table[2j + 1] for an F_p4 table (the eq table of one variable fewer)."""
    for j in range(out.shape[0]):
        for c in range(4):
            s = table[2 * j, c] + table[2 * j + 1, c]
            out[j, c] = s - P if s >= P else s


@numba.njit(cache=True, inline="always")
def _fold_into(table, i, r, out, k):
    """out[k] = table[2i] + r (table[2i+1] - table[2i]) for an F_p4 table (one row of a fold)."""
    d0 = table[2 * i + 1, 0] - table[2 * i, 0] if table[2 * i + 1, 0] >= table[2 * i, 0] else \
        table[2 * i + 1, 0] + P - table[2 * i, 0]
    d1 = table[2 * i + 1, 1] - table[2 * i, 1] if table[2 * i + 1, 1] >= table[2 * i, 1] else \
        table[2 * i + 1, 1] + P - table[2 * i, 1]
    d2 = table[2 * i + 1, 2] - table[2 * i, 2] if table[2 * i + 1, 2] >= table[2 * i, 2] else \
        table[2 * i + 1, 2] + P - table[2 * i, 2]
    d3 = table[2 * i + 1, 3] - table[2 * i, 3] if table[2 * i + 1, 3] >= table[2 * i, 3] else \
        table[2 * i + 1, 3] + P - table[2 * i, 3]
    ext_mul_into(d0, d1, d2, d3, r[0], r[1], r[2], r[3], out, k)
    for c in range(4):
        s = out[k, c] + table[2 * i, c]
        out[k, c] = s - P if s >= P else s


def bits_fold_round(lin, bits, r, eq, lin_out, bits_out, out):
    """Bind the previous variable to r (lin, bits: F_p4 tables of 2M rows -> lin_out, bits_out of M, arrays apart
    from the inputs) and, in the same pass, the next round's sums of :func:`bits_round_ext` over the folded tables
    (eq: M / 2 rows); pieces of the pairs on the threads of ``hezk.threads``."""
    _summed(_pairs(lambda lo, hi: _bits_fold_round_range(lin, bits, r, eq, lin_out, bits_out, lo, hi),
                   lin_out.shape[0] // 2), out)


@numba.njit(cache=True, nogil=True)
def _bits_fold_round_range(lin, bits, r, eq, lin_out, bits_out, lo, hi):
    """The pairs lo <= j < hi of ``bits_fold_round``: their folded rows written, their unreduced accumulator
    returned."""
    acc = np.zeros((2, 3, 4), dtype=np.uint64)
    cur = np.empty((2, 4), dtype=np.uint64)
    dif = np.empty((2, 4), dtype=np.uint64)
    prod = np.empty((3, 4), dtype=np.uint64)
    for j in range(lo, hi):
        for h in range(2):
            _fold_into(lin, 2 * j + h, r, lin_out, 2 * j + h)
            _fold_into(bits, 2 * j + h, r, bits_out, 2 * j + h)
        for c in range(4):
            cur[0, c], dif[0, c] = _line(lin_out[2 * j, c], lin_out[2 * j + 1, c])
            cur[1, c], dif[1, c] = _line(bits_out[2 * j, c], bits_out[2 * j + 1, c])
        for x in range(3):
            if x:
                for q in range(2):
                    for c in range(4):
                        cur[q, c] = _step(cur[q, c], dif[q, c])
            ext_mul_into(cur[0, 0], cur[0, 1], cur[0, 2], cur[0, 3], cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3],
                          prod, 0)
            ext_mul_into(cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3], cur[1, 0], cur[1, 1], cur[1, 2], cur[1, 3],
                          prod, 1)
            for c in range(4):  # t^2 - t
                prod[1, c] = prod[1, c] - cur[1, c] if prod[1, c] >= cur[1, c] else prod[1, c] + P - cur[1, c]
            ext_mul_into(eq[j, 0], eq[j, 1], eq[j, 2], eq[j, 3], prod[1, 0], prod[1, 1], prod[1, 2], prod[1, 3],
                          prod, 2)
            for c in range(4):
                acc[0, x, c] += prod[0, c]
                acc[1, x, c] += prod[2, c]
    return acc
