"""numba kernels of :mod:`proofs.basefold`'s prover (imported lazily, compiled on first call, cached on disk).
Each is one pass of a numpy formula in :mod:`proofs.basefold`, its tested twin. uint64 arithmetic throughout:
products of residues are < 2^62; sums of reduced terms stay below 2^64 for up to 2^33 terms."""
import numba
import numpy as np

from hezk.progress import announce_compilation
from hezk.threads import parallel

from ._kernels import FoldTarget, acc_product, addp, ext_mul4, ext_mul_into, subp

announce_compilation(__file__)  # one line on stderr when numba must compile these kernels (a cold cache)

P = np.uint64(2013265921)
INV2 = np.uint64(1006632961)
#: Smallest piece of a kernel handed to a thread of ``hezk.threads`` (table entries of a fold or a round's sums,
#: hashes of the Merkle tree): below it the pool's hand-off (tens of microseconds) costs more than it saves. Every
#: piece owns disjoint outputs; round sums are exact integer sums (uint64, wrapping) combined in piece order, so the
#: results are those of one thread bit for bit.
MIN_ENTRIES = 1 << 14
MIN_HASHES = 1 << 9


def _sum_pieces(accs, out):
    """out = (the sum of the pieces' unreduced (3, 4) accumulators) mod p: the one-thread accumulator exactly
    (addition mod 2^64 is associative)."""
    total = accs[0].copy()
    for acc in accs[1:]:
        total += acc
    np.remainder(total, P, out=out)


@numba.njit(cache=True, inline="always")
def _acc_pair(acc, f0, f1, f2, f3, g0, g1, g2, g3, w0, w1, w2, w3, u0, u1, u2, u3):
    """A pair's terms of a degree-2 round: acc[0] += f w, acc[1] += g u, acc[2] += (2g - f)(2u - w) (the product
    at X = 0, 1, 2 of the lines through (f, g) and (w, u); unreduced)."""
    acc_product(acc, 0, f0, f1, f2, f3, w0, w1, w2, w3)
    acc_product(acc, 1, g0, g1, g2, g3, u0, u1, u2, u3)
    acc_product(acc, 2, _twice_minus(g0, f0), _twice_minus(g1, f1), _twice_minus(g2, f2), _twice_minus(g3, f3),
                 _twice_minus(u0, w0), _twice_minus(u1, w1), _twice_minus(u2, w2), _twice_minus(u3, w3))


def round_sums(f, w, out):
    """out[x] = sum_j f(x, j) w(x, j) for x = 0, 1, 2 (f base (2n,) or F_p4 (2n, 4), w (2n, 4)): the values of a
    degree-2 sumcheck message binding the lowest variable, in scalar registers (twin: basefold._round_message);
    pieces of the pairs on the threads of ``hezk.threads``."""
    _sum_pieces(parallel(lambda lo, hi: _round_sums_range(f, w, lo, hi), w.shape[0] // 2, MIN_ENTRIES), out)


@numba.njit(cache=True, nogil=True)
def _round_sums_range(f, w, lo, hi):
    """The unreduced (3, 4) accumulator of ``round_sums`` over the pairs lo <= j < hi."""
    acc = np.zeros((3, 4), dtype=np.uint64)
    ext = f.ndim == 2
    fv, wv = f[2 * lo:2 * hi], w[2 * lo:2 * hi]            # views indexed from 0: no negative-index checks
    for j in range(hi - lo):
        lo, hi = 2 * j, 2 * j + 1
        u0, u1, u2, u3 = wv[lo, 0], wv[lo, 1], wv[lo, 2], wv[lo, 3]
        v0, v1, v2, v3 = wv[hi, 0], wv[hi, 1], wv[hi, 2], wv[hi, 3]
        t0, t1, t2, t3 = _twice_minus(v0, u0), _twice_minus(v1, u1), _twice_minus(v2, u2), _twice_minus(v3, u3)
        if ext:
            _acc_pair(acc, fv[lo, 0], fv[lo, 1], fv[lo, 2], fv[lo, 3], fv[hi, 0], fv[hi, 1], fv[hi, 2], fv[hi, 3],
                      u0, u1, u2, u3, v0, v1, v2, v3)
        else:
            a, b = fv[lo], fv[hi]
            c = _twice_minus(b, a)
            acc[0, 0] += a * u0 % P
            acc[0, 1] += a * u1 % P
            acc[0, 2] += a * u2 % P
            acc[0, 3] += a * u3 % P
            acc[1, 0] += b * v0 % P
            acc[1, 1] += b * v1 % P
            acc[1, 2] += b * v2 % P
            acc[1, 3] += b * v3 % P
            acc[2, 0] += c * t0 % P
            acc[2, 1] += c * t1 % P
            acc[2, 2] += c * t2 % P
            acc[2, 3] += c * t3 % P
    return acc


def eq_scaled(point, scale, out):
    """out (2^k, 4) = scale * eq(point, bits(i)) for every i (x_0 the lowest bit; twin: mle.eq_table): the table
    doubles once per coordinate; a doubling of at least 2 MIN_ENTRIES entries runs in pieces on the threads of
    ``hezk.threads`` (entries i and i + size depend on entry i alone)."""
    bits = point.shape[0]
    serial = 0
    while serial < bits and (1 << serial) < 2 * MIN_ENTRIES:
        serial += 1
    _eq_first_stages(point, scale, out, serial)
    for b in range(serial, bits):
        size = 1 << b
        r = point[b]
        parallel(lambda lo, hi: _eq_stage_range(r, out, size, lo, hi), size, MIN_ENTRIES)


@numba.njit(cache=True)
def _eq_first_stages(point, scale, out, stages):
    """out[:2^stages] = scale * eq(point[:stages], bits(i))."""
    for c in range(4):
        out[0, c] = scale[c]
    size = 1
    for b in range(stages):
        _eq_stage_range(point[b], out, size, 0, size)
        size *= 2


@numba.njit(cache=True, nogil=True)
def _eq_stage_range(r, out, size, lo, hi):
    """One doubling for the entries lo <= i < hi of the first ``size``: out[i + size] = out[i] r, out[i] -= that."""
    high = np.empty((1, 4), dtype=np.uint64)
    src, dst = out[lo:hi], out[lo + size:hi + size]    # views indexed from 0: no negative-index checks in the loop
    for i in range(hi - lo):
        ext_mul_into(src[i, 0], src[i, 1], src[i, 2], src[i, 3], r[0], r[1], r[2], r[3], high, 0)
        for c in range(4):
            dst[i, c] = high[0, c]
            low = src[i, c]
            src[i, c] = low - high[0, c] if low >= high[0, c] else low + P - high[0, c]


def add_eq_scaled(point, scale, out):
    """out += scale * eq(point, bits(i)) in place (out (2^k, 4), k >= 1; twin: eq_scaled into a buffer, then
    add_into): eq of all but the last coordinate is built in a half-size buffer (eq_scaled), and the last doubling
    adds its two halves straight into out (entries i and i + 2^(k-1)): half the fresh pages and one pass over out
    instead of a full-size buffer written, read back and added. Pieces of the entries on the threads of
    ``hezk.threads``."""
    half = out.shape[0] // 2
    buffer = np.empty((half, 4), dtype=np.uint64)
    eq_scaled(point[:-1], scale, buffer)
    r = point[-1]
    parallel(lambda lo, hi: _add_last_stage_range(buffer, r, out, lo, hi), half, MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _add_last_stage_range(buffer, r, out, lo, hi):
    """out[i + half] += buffer[i] r, out[i] += buffer[i] - buffer[i] r for lo <= i < hi (half = buffer rows)."""
    half = buffer.shape[0]
    src, low, high = buffer[lo:hi], out[lo:hi], out[lo + half:hi + half]   # views indexed from 0
    for i in range(hi - lo):
        p0, p1, p2, p3 = ext_mul4(src[i, 0], src[i, 1], src[i, 2], src[i, 3], r[0], r[1], r[2], r[3])
        high[i, 0] = addp(high[i, 0], p0)
        high[i, 1] = addp(high[i, 1], p1)
        high[i, 2] = addp(high[i, 2], p2)
        high[i, 3] = addp(high[i, 3], p3)
        low[i, 0] = addp(low[i, 0], subp(src[i, 0], p0))
        low[i, 1] = addp(low[i, 1], subp(src[i, 1], p1))
        low[i, 2] = addp(low[i, 2], subp(src[i, 2], p2))
        low[i, 3] = addp(low[i, 3], subp(src[i, 3], p3))


def combine_rows(codeword, weights, out):
    """out[i] = sum_c codeword[i, c] weights[c] ((N, S) base times (S, 4) F_p4; twin: basefold._combine_rows), in
    pieces of the rows on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _combine_rows_range(codeword, weights, out, lo, hi), codeword.shape[0], MIN_ENTRIES,
             work_per_item=codeword.shape[1])


@numba.njit(cache=True, nogil=True)
def _combine_rows_range(codeword, weights, out, lo, hi):
    """Rows lo <= i < hi of ``combine_rows``."""
    width = codeword.shape[1]
    for i in range(lo, hi):  # the four coordinates in one pass over the row (each symbol read once)
        s0 = s1 = s2 = s3 = np.uint64(0)
        for k in range(width):
            v = codeword[i, k]
            s0 += v * weights[k, 0]  # each sum < p + 4 (p - 1)^2 < 2^64 before its reduction
            s1 += v * weights[k, 1]
            s2 += v * weights[k, 2]
            s3 += v * weights[k, 3]
            if k % 4 == 3:
                s0 %= P
                s1 %= P
                s2 %= P
                s3 %= P
        out[i, 0] = s0 % P
        out[i, 1] = s1 % P
        out[i, 2] = s2 % P
        out[i, 3] = s3 % P


def fold_codeword(codeword, scale, r, out):
    """One fold of a codeword (N,) base or (N, 4) F_p4: with a = c[j], b = c[j + N/2], s = (a + b)/2 and
    d = (a - b) scale[j] (scale = (2 w^j)^-1), out[j] = s + r (d - s) (twin: basefold._fold_codeword); pieces of
    the entries on the threads of ``hezk.threads`` (``out`` a fresh array)."""
    parallel(lambda lo, hi: _fold_codeword_range(codeword, scale, r, out, lo, hi), out.shape[0], MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _fold_codeword_range(codeword, scale, r, out, lo, hi):
    """Entries lo <= j < hi of ``fold_codeword``."""
    half = out.shape[0]
    diff = np.empty((1, 4), dtype=np.uint64)
    prod = np.empty((1, 4), dtype=np.uint64)
    s_j = np.empty(4, dtype=np.uint64)
    ext = codeword.ndim == 2
    low, high = codeword[lo:hi], codeword[lo + half:hi + half]      # views indexed from 0
    sv, ov = scale[lo:hi], out[lo:hi]
    for j in range(hi - lo):
        for c in range(4):
            if ext:
                a, b = low[j, c], high[j, c]
            elif c == 0:
                a, b = low[j], high[j]
            else:
                a, b = np.uint64(0), np.uint64(0)
            s = (a + b) % P * INV2 % P
            d = (a + P - b) % P * sv[j] % P
            s_j[c] = s
            diff[0, c] = d - s if d >= s else d + P - s
        ext_mul_into(diff[0, 0], diff[0, 1], diff[0, 2], diff[0, 3], r[0], r[1], r[2], r[3], prod, 0)
        for c in range(4):
            ov[j, c] = (s_j[c] + prod[0, c]) % P


def dot_base(e, table, out):
    """out = sum_i e[i] table[i] for F_p4 e (n, 4) and base table (n,) (twin: basefold._dot_base's numpy path); pieces
    of the entries on the threads of ``hezk.threads``, their unreduced sums added in piece order (exact)."""
    accs = parallel(lambda lo, hi: _dot_base_range(e, table, lo, hi), table.shape[0], MIN_ENTRIES)
    total = accs[0]
    for acc in accs[1:]:
        total = total + acc
    out[:] = total % P


@numba.njit(cache=True, nogil=True)
def _dot_base_range(e, table, lo, hi):
    acc = np.zeros(4, dtype=np.uint64)
    ev, tv = e[lo:hi], table[lo:hi]
    for i in range(hi - lo):
        for c in range(4):
            acc[c] += ev[i, c] * tv[i] % P
    return acc


def add_into(a, out):
    """out += a mod p, in place (flat uint64 arrays), in pieces on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _add_into_range(a, out, lo, hi), a.size, 4 * MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _add_into_range(a, out, lo, hi):
    av, ov = a[lo:hi], out[lo:hi]
    for i in range(hi - lo):
        s = av[i] + ov[i]
        ov[i] = s - P if s >= P else s


@numba.njit(cache=True)
def add_outer_into(outer, middle, inner, out, start, step):
    """out[start + ((h M + m) L + l) step] += outer[h] middle[m] inner[l] in F_p4, in place, for outer (H, 4),
    middle (M, 4), inner (L, 4) and out (n, 4): a tensor-product weight added into every ``step``-th row without
    building it (twin: the numpy outer products)."""
    count, width = inner.shape[0], middle.shape[0]
    for h in range(outer.shape[0]):
        for m in range(width):
            o0, o1, o2, o3 = ext_mul4(outer[h, 0], outer[h, 1], outer[h, 2], outer[h, 3],
                                       middle[m, 0], middle[m, 1], middle[m, 2], middle[m, 3])
            base = start + (h * width + m) * count * step
            for l in range(count):
                row = base + l * step
                p0, p1, p2, p3 = ext_mul4(o0, o1, o2, o3, inner[l, 0], inner[l, 1], inner[l, 2], inner[l, 3])
                out[row, 0] = addp(out[row, 0], p0)
                out[row, 1] = addp(out[row, 1], p1)
                out[row, 2] = addp(out[row, 2], p2)
                out[row, 3] = addp(out[row, 3], p3)


@numba.njit(cache=True, inline="always")
def _lerp(t, row, ext, r0, r1, r2, r3):
    """t[2 row] + r (t[2 row + 1] - t[2 row]) as four residues, for a base (2n,) or F_p4 (2n, 4) table t."""
    if ext:
        l0, l1, l2, l3 = t[2 * row, 0], t[2 * row, 1], t[2 * row, 2], t[2 * row, 3]
        p0, p1, p2, p3 = ext_mul4(subp(t[2 * row + 1, 0], l0), subp(t[2 * row + 1, 1], l1),
                                   subp(t[2 * row + 1, 2], l2), subp(t[2 * row + 1, 3], l3), r0, r1, r2, r3)
        return addp(l0, p0), addp(l1, p1), addp(l2, p2), addp(l3, p3)
    low = t[2 * row]
    d = subp(t[2 * row + 1], low)
    return (r0 * d + low) % P, r1 * d % P, r2 * d % P, r3 * d % P


@numba.njit(cache=True, inline="always")
def _twice_minus(a, b):
    """2 a - b mod p."""
    return (a + a + P - b) % P


def fold_sums(f, w, r, f_out, w_out, out):
    """One fused pass: f_out = fold(f, r), w_out = fold(w, r) (f base (2n,) or F_p4 (2n, 4), w (2n, 4); fold
    as proofs.mle.fold) and out = the next round's (h(0), h(1), h(2)) of sum (f_out w_out) (as round_sums on
    f_out, w_out; zero when n < 2). Entries 2j, 2j + 1 are read before entry j is written (the outputs may be
    the inputs' first halves). Twin: mle.fold twice, then round_sums / basefold._round_message.

    Pieces of the entries run on the threads of ``hezk.threads``, each writing where ``_kernels.FoldTarget`` says
    (an output that is its input's own first half: a piece after the first writes over its own consumed inputs,
    moved once every piece is done; an output sharing the other input's memory: a buffer per piece)."""
    cross = np.may_share_memory(f_out, w) or np.may_share_memory(w_out, f)
    _fold_pieces(lambda lo, hi, f_dst, w_dst: _fold_sums_range(f, w, r, f_dst, w_dst, lo, hi),
                 FoldTarget(f_out, f, copy=cross), FoldTarget(w_out, w, copy=cross), out)


def _fold_pieces(kernel, f_target, w_target, out):
    """Runs ``kernel(lo, hi, f_dst, w_dst)`` (entries lo <= j < hi written to f_dst[j - lo], w_dst[j - lo]; returns
    its unreduced accumulator) over pieces of even length, the destinations from the two FoldTargets, then
    out = the accumulators' sum mod p."""
    accs = parallel(lambda lo, hi: kernel(lo, hi, f_target.piece(lo, hi), w_target.piece(lo, hi)),
                    f_target.out.shape[0], MIN_ENTRIES, align=2)
    f_target.finish()
    w_target.finish()
    _sum_pieces(accs, out)


@numba.njit(cache=True, nogil=True)
def _fold_sums_range(f, w, r, f_dst, w_dst, lo, hi):
    """Entries lo <= j < hi of ``fold_sums`` (lo even) into f_dst[j - lo], w_dst[j - lo]; returns the unreduced
    (3, 4) accumulator of their pairs."""
    r0, r1, r2, r3 = r[0], r[1], r[2], r[3]
    acc = np.zeros((3, 4), dtype=np.uint64)
    ext = f.ndim == 2
    f0 = f1 = f2 = f3 = w0 = w1 = w2 = w3 = np.uint64(0)
    fv, wv = f[2 * lo:2 * hi], w[2 * lo:2 * hi]          # views indexed from 0: no negative-index checks
    for j in range(hi - lo):
        g0, g1, g2, g3 = _lerp(fv, j, ext, r0, r1, r2, r3)
        u0, u1, u2, u3 = _lerp(wv, j, True, r0, r1, r2, r3)
        f_dst[j, 0], f_dst[j, 1], f_dst[j, 2], f_dst[j, 3] = g0, g1, g2, g3
        w_dst[j, 0], w_dst[j, 1], w_dst[j, 2], w_dst[j, 3] = u0, u1, u2, u3
        if j % 2 == 1:  # the pair (j - 1, j) (lo even: the same parity as lo + j): h(0), h(1), h(2) terms
            _acc_pair(acc, f0, f1, f2, f3, g0, g1, g2, g3, w0, w1, w2, w3, u0, u1, u2, u3)
        f0, f1, f2, f3, w0, w1, w2, w3 = g0, g1, g2, g3, u0, u1, u2, u3
    return acc


@numba.njit(cache=True, inline="always")
def _lerp_folded(c, row, s0, s1, s2, s3, r0, r1, r2, r3):
    """Entry ``row`` of fold(fold(c, s), r) for a base table c: the line through c' = fold(c, s) at 2 row and
    2 row + 1, at r."""
    a0, a1, a2, a3 = _lerp(c, 2 * row, False, s0, s1, s2, s3)
    b0, b1, b2, b3 = _lerp(c, 2 * row + 1, False, s0, s1, s2, s3)
    p0, p1, p2, p3 = ext_mul4(subp(b0, a0), subp(b1, a1), subp(b2, a2), subp(b3, a3), r0, r1, r2, r3)
    return addp(a0, p0), addp(a1, p1), addp(a2, p2), addp(a3, p3)


@numba.njit(cache=True)
def round_sums_prefolded(c, s, w, out):
    """round_sums(fold(c, s), w, out) for a base table c (4n,) whose fold by the last challenge s is taken on the
    fly (the F_p4 table fold(c, s), twice c's bytes, is never built; twin: round_sums of mle.fold). s factors out
    of the sums: with a = c[4j], d = c[4j + 1] - a (and a', d' from c[4j + 2], c[4j + 3]) the pair is
    (a + s d, a' + s d'), so h(x) = sum A_x + s sum D_x with A_x, D_x sums of base x F_p4 products only (24 base
    products a pair instead of three F_p4 products and two lines)."""
    acc = np.zeros((6, 4), dtype=np.uint64)  # A_0, D_0, A_1, D_1, A_2, D_2 (unreduced)
    _prefolded_sums(c, w, acc)
    for x in range(3):
        p0, p1, p2, p3 = ext_mul4(acc[2 * x + 1, 0] % P, acc[2 * x + 1, 1] % P, acc[2 * x + 1, 2] % P,
                                  acc[2 * x + 1, 3] % P, s[0], s[1], s[2], s[3])
        out[x, 0] = (acc[2 * x, 0] + p0) % P
        out[x, 1] = (acc[2 * x, 1] + p1) % P
        out[x, 2] = (acc[2 * x, 2] + p2) % P
        out[x, 3] = (acc[2 * x, 3] + p3) % P


@numba.njit(cache=True)
def _prefolded_sums(c, w, acc):
    """acc[2x] += A_x, acc[2x + 1] += D_x of ``round_sums_prefolded`` (sums of residues, unreduced)."""
    for j in range(w.shape[0] // 2):
        a, b = c[4 * j], c[4 * j + 2]
        d, e = subp(c[4 * j + 1], a), subp(c[4 * j + 3], b)
        a2, d2 = _twice_minus(b, a), _twice_minus(e, d)  # 2 g - f = (2 a' - a) + s (2 d' - d)
        for k in range(4):
            lo, hi = w[2 * j, k], w[2 * j + 1, k]
            t = _twice_minus(hi, lo)
            acc[0, k] += a * lo % P
            acc[1, k] += d * lo % P
            acc[2, k] += b * hi % P
            acc[3, k] += e * hi % P
            acc[4, k] += a2 * t % P
            acc[5, k] += d2 * t % P


@numba.njit(cache=True)
def fold_sums_prefolded(c, s, w, r, f_out, w_out, out):
    """fold_sums(fold(c, s), w, r, f_out, w_out, out) for a base table c (4n,): f_out = fold(fold(c, s), r)
    straight from c (twin: fold_sums of mle.fold). ``w_out`` may be w's first half."""
    n = f_out.shape[0]
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    r0, r1, r2, r3 = r[0], r[1], r[2], r[3]
    acc = np.zeros((3, 4), dtype=np.uint64)
    f0 = f1 = f2 = f3 = w0 = w1 = w2 = w3 = np.uint64(0)
    for j in range(n):
        g0, g1, g2, g3 = _lerp_folded(c, j, s0, s1, s2, s3, r0, r1, r2, r3)
        u0, u1, u2, u3 = _lerp(w, j, True, r0, r1, r2, r3)
        f_out[j, 0], f_out[j, 1], f_out[j, 2], f_out[j, 3] = g0, g1, g2, g3
        w_out[j, 0], w_out[j, 1], w_out[j, 2], w_out[j, 3] = u0, u1, u2, u3
        if j % 2 == 1:
            _acc_pair(acc, f0, f1, f2, f3, g0, g1, g2, g3, w0, w1, w2, w3, u0, u1, u2, u3)
        f0, f1, f2, f3, w0, w1, w2, w3 = g0, g1, g2, g3, u0, u1, u2, u3
    for x in range(3):
        for k in range(4):
            out[x, k] = acc[x, k] % P


def dot_pairs_split(f, eq_lo, eq_hi, out):
    """out[b] = sum_j f[2j + b] eq_lo[j mod L] eq_hi[j // L], b = 0, 1 (f base (2n,) or F_p4 (2n, 4), n = L H): the
    pairs' dot products with an eq table kept as its two halves (twin: dot_pairs with their outer product). Pieces
    of the pairs run on the threads of ``hezk.threads``; each returns its reduced sums, added mod p in piece order
    (field sums: the same elements whatever the split)."""
    count = eq_lo.shape[0] * eq_hi.shape[0]
    totals = parallel(lambda lo, hi: _dot_pairs_range(f, eq_lo, eq_hi, lo, hi), count, MIN_ENTRIES)
    total = totals[0]
    for other in totals[1:]:
        total = (total + other) % P
    out[:] = total


@numba.njit(cache=True, nogil=True)
def _dot_pairs_range(f, eq_lo, eq_hi, lo, hi):
    """The (2, 4) reduced sums of ``dot_pairs_split`` over the pairs lo <= j < hi: the pairs of one eq_hi entry are
    summed unreduced (at most L terms), reduced, then multiplied by that entry."""
    count = eq_lo.shape[0]
    total = np.zeros((2, 4), dtype=np.uint64)
    part = np.zeros((2, 4), dtype=np.uint64)
    first = lo
    while first < hi:
        h = first // count
        stop = min(hi, (h + 1) * count)
        part[:] = 0
        _dot_pairs_run(f[2 * first:2 * stop], eq_lo[first - h * count:stop - h * count], part)
        first = stop
        for b in range(2):
            p0, p1, p2, p3 = ext_mul4(part[b, 0] % P, part[b, 1] % P, part[b, 2] % P, part[b, 3] % P,
                                       eq_hi[h, 0], eq_hi[h, 1], eq_hi[h, 2], eq_hi[h, 3])
            total[b, 0] = addp(total[b, 0], p0)
            total[b, 1] = addp(total[b, 1], p1)
            total[b, 2] = addp(total[b, 2], p2)
            total[b, 3] = addp(total[b, 3], p3)
    return total


@numba.njit(cache=True, nogil=True)
def _dot_pairs_run(fv, ev, part):
    """part[b] += sum_j fv[2j + b] ev[j] unreduced (a loop in a function of its own: ``_kernels._fold_add_run``)."""
    ext = fv.ndim == 2
    for j in range(ev.shape[0]):
        e0, e1, e2, e3 = ev[j, 0], ev[j, 1], ev[j, 2], ev[j, 3]
        if ext:
            acc_product(part, 0, fv[2 * j, 0], fv[2 * j, 1], fv[2 * j, 2], fv[2 * j, 3], e0, e1, e2, e3)
            acc_product(part, 1, fv[2 * j + 1, 0], fv[2 * j + 1, 1], fv[2 * j + 1, 2], fv[2 * j + 1, 3], e0, e1,
                         e2, e3)
        else:
            a, b = fv[2 * j], fv[2 * j + 1]
            part[0, 0] += a * e0 % P
            part[0, 1] += a * e1 % P
            part[0, 2] += a * e2 % P
            part[0, 3] += a * e3 % P
            part[1, 0] += b * e0 % P
            part[1, 1] += b * e1 % P
            part[1, 2] += b * e2 % P
            part[1, 3] += b * e3 % P


_ONE = np.array([[1, 0, 0, 0]], dtype=np.uint64)  # F_p4's one, a (1, 4) table


def dot_pairs(f, e, out):
    """out[b] = sum_j f[2j + b] e[j], b = 0, 1 (f base (2n,) or F_p4 (2n, 4), e (n, 4)): :func:`dot_pairs_split`
    with a one-entry high half (twin: basefold._dot_pairs_numpy)."""
    dot_pairs_split(f, e, _ONE, out)


def fold_scaled_into(table, r, beta, out, accumulate):
    """``_fold_scaled_range`` over every entry, in pieces on the threads of ``hezk.threads`` (``out`` is not
    ``table``)."""
    parallel(lambda lo, hi: _fold_scaled_range(table, r, beta, out, accumulate, lo, hi), out.shape[0], MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _fold_scaled_range(table, r, beta, out, accumulate, lo, hi):
    """out[j] (+)= beta (t[2j] + r (t[2j + 1] - t[2j])) for a base table t (2n,) (twin: basefold._fold_joined's
    numpy path): beta t[2j] + (beta r) (t[2j + 1] - t[2j]), base times F_p4 only; ``accumulate`` False writes
    ``out`` without reading it (a fresh array: no zero-filled pages first)."""
    br = np.empty((1, 4), dtype=np.uint64)
    ext_mul_into(beta[0], beta[1], beta[2], beta[3], r[0], r[1], r[2], r[3], br, 0)
    for j in range(lo, hi):
        low, high = table[2 * j], table[2 * j + 1]
        d = high - low if high >= low else high + P - low
        for c in range(4):
            s = (beta[c] * low + br[0, c] * d) % P
            if accumulate:
                s += out[j, c]
                s = s - P if s >= P else s
            out[j, c] = s


MASK32 = np.uint64(0xFFFFFFFF)
#: entries of a codeword row whose NTT stages run chunk by chunk (256 KB: within a core's L2); a 2^20-symbol row
#: (8 MB) then streams from memory for its last stages only
ENCODE_CHUNK = 1 << 15
NEG_PINV = np.uint64(2013265919)  # -p^-1 mod 2^32 (Montgomery reduction, R = 2^32)


def encode_interleaved(table, rate_log, twiddles, bitrev, out):
    """``_encode_columns`` over every column, in pieces of whole groups of eight columns on the threads of
    ``hezk.threads`` (each column's encoding is independent). Fewer than 16 columns (a 2^20 table has 8), split
    in pieces of columns: each column's NTT into its own scratch row (pieces of the columns), then the rows of
    ``out`` written from the scratch rows (pieces of the rows): pieces of columns writing ``out`` themselves would
    share every cache line of it (8 uint64 columns a line) between the threads, bouncing it between the cores."""
    n, columns = out.shape
    if columns >= 16:
        parallel(lambda lo, hi: _encode_columns(table, rate_log, twiddles, bitrev, out, lo, hi), columns,
                 MIN_ENTRIES, work_per_item=n, align=8)
        return
    scratch = np.empty((columns, n), dtype=np.uint64)  # the one-thread kernel's scratch rows too (8 at most)
    parallel(lambda lo, hi: _encode_to_scratch(table, rate_log, twiddles, bitrev, scratch, lo, hi), columns,
             MIN_ENTRIES, work_per_item=n)
    parallel(lambda lo, hi: _rows_from_scratch(scratch, out, lo, hi), n, MIN_ENTRIES, work_per_item=columns)


@numba.njit(cache=True, nogil=True)
def _encode_to_scratch(table, rate_log, twiddles, bitrev, scratch, lo, hi):
    """scratch[c] = the encoding of column c (as ``_encode_columns``, its twin) for lo <= c < hi."""
    n = scratch.shape[1]
    k = n >> rate_log
    natural = np.empty((min(8, hi - lo), k), dtype=np.uint64)
    for first in range(lo, hi, 8):
        group = min(8, hi - first)
        for i in range(k):
            for g in range(group):
                natural[g, i] = table[i, first + g]
        for g in range(group):
            _encode_row(natural[g], bitrev, twiddles, 1 << rate_log, scratch[first + g])


@numba.njit(cache=True, inline="always")
def _encode_row(source, bitrev, twiddles, block, row):
    """row = the NTT of ``source`` bit-reversed and spread over blocks of ``block`` (``_encode_columns``'s
    per-column step, in place in ``row``)."""
    n, k = row.shape[0], source.shape[0]
    for j in range(k):  # ... then bit-reversed within each row (cache-resident)
        v = source[bitrev[j]]
        for b in range(block):
            row[j * block + b] = v
    chunk = min(n, ENCODE_CHUNK)
    for first in range(0, n, chunk):  # the stages within a chunk, chunk by chunk (it stays in the core's cache)
        half = block
        while half < chunk:
            stage = twiddles[half:2 * half]
            for start in range(first, first + chunk, 2 * half):
                _butterflies(row[start:start + half], row[start + half:start + 2 * half], stage)
            half *= 2
    half = max(block, chunk)
    while half < n:  # then the stages across chunks, over the whole row
        stage = twiddles[half:2 * half]
        for start in range(0, n, 2 * half):
            _butterflies(row[start:start + half], row[start + half:start + 2 * half], stage)
        half *= 2


@numba.njit(cache=True, nogil=True)
def _butterflies(low, high, stage):
    """One radix-2 DIT stage's butterflies: (low, high)[j] = low[j] +- high[j] stage[j] (stage in Montgomery form, a
    32-bit Montgomery reduction per product; separate views and branch-free selects: the loop vectorises). A
    function of its own, its views its arguments: inlined into the stage loop, whose views start at a runtime
    offset, it ran 2x slower (``_kernels._fold_add_run``)."""
    for j in range(low.shape[0]):
        u = low[j]
        t = (high[j] & MASK32) * (stage[j] & MASK32)  # both < 2^32: a 32 x 32-bit SIMD product
        m = ((t & MASK32) * NEG_PINV) & MASK32
        v = (t + m * P) >> np.uint64(32)
        v = v - P if v >= P else v
        s = u + v
        low[j] = s - P if s >= P else s
        high[j] = u - v if u >= v else u + P - v


@numba.njit(cache=True, nogil=True)
def _rows_from_scratch(scratch, out, lo, hi):
    """out[j, c] = scratch[c, j] for the rows lo <= j < hi."""
    for j in range(lo, hi):
        for c in range(out.shape[1]):
            out[j, c] = scratch[c, j]


@numba.njit(cache=True, nogil=True)
def _encode_columns(table, rate_log, twiddles, bitrev, out, lo, hi):
    """out[:, c] = the RS encoding at rate 2^-rate_log of the column table[:, c] ((k, S); out (N, S), N = k
    2^rate_log): the radix-2 DIT NTT of the zero-padded coefficients, as proofs.commit.ntt. ``twiddles[h + j]``
    = w_2h^j R mod p (Montgomery form, R = 2^32: a twiddle product a w R R^-1 = a w is a 32-bit Montgomery
    reduction, contiguous per stage); ``bitrev``: bit reversal of log2 k bits. After the bit reversal the
    coefficients sit at multiples of 2^rate_log with zeros between, so the first rate_log stages only copy
    each one over its block. Columns go through a scratch row each, eight at a time (one cache line of
    ``out`` per position; twin: basefold._encode_table_numpy). Columns lo <= c < hi (groups of eight from lo)."""
    n = out.shape[0]
    k = n >> rate_log
    block = 1 << rate_log
    scratch = np.empty((min(8, hi - lo), n), dtype=np.uint64)
    natural = np.empty((min(8, hi - lo), k), dtype=np.uint64)
    for first in range(lo, hi, 8):
        group = min(8, hi - first)
        for i in range(k):  # the group's columns in natural order (the table read once, in order), ...
            for g in range(group):
                natural[g, i] = table[i, first + g]
        for g in range(group):
            _encode_row(natural[g], bitrev, twiddles, block, scratch[g])
        for j in range(n):
            for g in range(group):
                out[j, first + g] = scratch[g, j]

_IV = np.array([0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
                0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179], dtype=np.uint64)


@numba.njit(cache=True, inline="always")
def _rotr(x, n):
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@numba.njit(cache=True, inline="always")
def _g(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@numba.njit(cache=True, inline="always")
def _round(v, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15):
    """One BLAKE2b round on the state words v (a 16-tuple): G on the columns, then on the diagonals, with the
    message words w in the round's schedule order."""
    v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15 = v
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, w0, w1)
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, w2, w3)
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, w4, w5)
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, w6, w7)
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, w8, w9)
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, w10, w11)
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, w12, w13)
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, w14, w15)
    return v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15


@numba.njit(cache=True)
def _compress(h, m, iv, counter, last):
    """The BLAKE2b compression function F(h, m, t, f) in place on h (RFC 7693 section 3.2), its 12 rounds written
    out with the message schedule SIGMA[r mod 10] of each (RFC 7693 section 2.7's table): the words in
    registers, no schedule lookups (1.7x the looped rounds' speed: 0.9 GB/s a core, hashlib's C 0.66; tested
    against hashlib)."""
    m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    m8, m9, m10, m11, m12, m13, m14, m15 = m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]
    v = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], iv[0], iv[1], iv[2], iv[3], iv[4] ^ counter, iv[5],
         iv[6] ^ np.uint64(0xFFFFFFFFFFFFFFFF) if last else iv[6], iv[7])
    v = _round(v, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15)  # SIGMA[0]
    v = _round(v, m14, m10, m4, m8, m9, m15, m13, m6, m1, m12, m0, m2, m11, m7, m5, m3)  # SIGMA[1]
    v = _round(v, m11, m8, m12, m0, m5, m2, m15, m13, m10, m14, m3, m6, m7, m1, m9, m4)  # SIGMA[2]
    v = _round(v, m7, m9, m3, m1, m13, m12, m11, m14, m2, m6, m5, m10, m4, m0, m15, m8)  # SIGMA[3]
    v = _round(v, m9, m0, m5, m7, m2, m4, m10, m15, m14, m1, m11, m12, m6, m8, m3, m13)  # SIGMA[4]
    v = _round(v, m2, m12, m6, m10, m0, m11, m8, m3, m4, m13, m7, m5, m15, m14, m1, m9)  # SIGMA[5]
    v = _round(v, m12, m5, m1, m15, m14, m13, m4, m10, m0, m7, m6, m3, m9, m2, m8, m11)  # SIGMA[6]
    v = _round(v, m13, m11, m7, m14, m12, m1, m3, m9, m5, m0, m15, m4, m8, m6, m2, m10)  # SIGMA[7]
    v = _round(v, m6, m15, m14, m9, m11, m3, m0, m8, m12, m2, m13, m7, m1, m4, m10, m5)  # SIGMA[8]
    v = _round(v, m10, m2, m8, m4, m7, m6, m1, m5, m15, m11, m9, m14, m3, m12, m13, m0)  # SIGMA[9]
    v = _round(v, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15)  # SIGMA[0]
    v = _round(v, m14, m10, m4, m8, m9, m15, m13, m6, m1, m12, m0, m2, m11, m7, m5, m3)  # SIGMA[1]
    for k in range(8):
        h[k] ^= v[k] ^ v[k + 8]


@numba.njit(cache=True, inline="always")
def _digest_into(h, start, words, length, blocks, iv, out, i):
    """out[i] = the BLAKE2b-256 digest of the ``length`` message bytes in ``words`` (zero-padded blocks), from the
    initial state ``start`` (the IV xor the parameter block)."""
    for k in range(8):
        h[k] = start[k]
    for blk in range(blocks):
        last = blk == blocks - 1
        _compress(h, words[16 * blk:16 * blk + 16], iv, np.uint64(length if last else 128 * (blk + 1)), last)
    for k in range(4):
        for b in range(8):
            out[i, 8 * k + b] = np.uint8((h[k] >> np.uint64(8 * b)) & np.uint64(0xFF))


def blake2b_rows(prefix, data, iv, out):
    """``_blake2b_rows_range`` over every row, in pieces on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _blake2b_rows_range(prefix, data, iv, out, lo, hi), data.shape[0], MIN_HASHES)


@numba.njit(cache=True, nogil=True)
def _blake2b_rows_range(prefix, data, iv, out, lo, hi):
    """out[i] = BLAKE2b-256(prefix || data[i]) (RFC 7693, unkeyed, 32-byte digest) for each row of data (n, L)
    uint8 (twin: hashlib.blake2b(..., digest_size=32), as proofs.commit._hash); rows lo <= i < hi."""
    length = data.shape[1] + 1
    blocks = max(1, (length + 127) // 128)
    buf = np.zeros(blocks * 128, dtype=np.uint8)
    words = buf.view(np.uint64)  # little-endian words (x86 / ARM hosts)
    h = np.empty(8, dtype=np.uint64)
    start = iv.copy()
    start[0] ^= np.uint64(0x01010020)  # digest length 32, no key, fanout 1, depth 1
    for i in range(lo, hi):
        buf[0] = prefix
        for j in range(length - 1):
            buf[j + 1] = data[i, j]
        _digest_into(h, start, words, length, blocks, iv, out, i)


def blake2b_leaves(start, codeword, block, group, iv, out):
    """``_blake2b_leaves_range`` over every leaf, in pieces on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _blake2b_leaves_range(start, codeword, block, group, iv, out, lo, hi),
             out.shape[0], MIN_HASHES)


@numba.njit(cache=True, nogil=True)
def _blake2b_leaves_range(start, codeword, block, group, iv, out, lo, hi):
    """out[i] = BLAKE2b-256 of leaf i's little-endian u32s from the initial state ``start`` (the leaf hash's
    personalised parameter block, basefold._LEAF_STATE) for the leaves of a codeword (N, w) of residues: leaf i
    holds the cosets j = g i, ..., g i + g - 1 (g = ``group``), coset j the rows j + s N / 2^block
    (s < 2^block), without building the leaves (twin: hashlib.blake2b(..., person=basefold.LEAF_PERSON)); leaves
    lo <= i < hi."""
    n, width = codeword.shape
    stride, per = n >> block, 1 << block
    length = group * per * width * 4
    blocks = max(1, (length + 127) // 128)
    words = np.zeros(blocks * 16, dtype=np.uint64)  # little-endian words (x86 / ARM hosts)
    h = np.empty(8, dtype=np.uint64)
    for i in range(lo, hi):
        u, odd, k = np.uint64(0), False, 0  # value pairs u = v | v' << 32 make one word each
        for g in range(group):
            j = i * group + g
            for s in range(per):
                row = j + s * stride
                for c in range(width):
                    if odd:
                        words[k] = u | (codeword[row, c] << np.uint64(32))
                        k += 1
                    else:
                        u = codeword[row, c]
                    odd = not odd
        if odd:
            words[k] = u
        _digest_into(h, start, words, length, blocks, iv, out, i)
