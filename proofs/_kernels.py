"""numba kernels for long BabyBear / F_p4 vectors (imported lazily by :mod:`proofs.field`, compiled on first call,
cached on disk). Each one is a single pass of the numpy formula in :mod:`proofs.field`, its tested twin.

All arithmetic stays in uint64: products of residues are < 2^62 and ``% P`` by the constant compiles to a
multiply-high; mixing in a signed integer would turn numba's arithmetic into float64, so every constant is uint64.
"""
import numba
import numpy as np

from hezk.progress import announce_compilation
from hezk.threads import parallel as threads_parallel

announce_compilation(__file__)  # one line on stderr when numba must compile these kernels (a cold cache)

P = np.uint64(2013265921)
W = np.uint64(11)
#: Smallest piece (table entries) of a kernel here handed to a thread of ``hezk.threads``
PARALLEL_MIN_ENTRIES = 1 << 14
#: A round's sums split from PARALLEL_MIN_ENTRIES / 2^ROUND_PIECE_SHIFT pairs (2^11: ~0.1 us a pair with two or three
#: F_p4 factors, ~0.2 ms a piece against a hand-off of tens of us; the MLP proof's unsplit rounds were 2% of its time)
ROUND_PIECE_SHIFT = 3
#: ... of a one-operation element-wise kernel (add, sub, mul: memory-bound, so pieces must be large to pay)
PARALLEL_MIN_ELEMENTS = 1 << 18


def parallel(function, count: int, min_work: int = 1, work_per_item: int = 1, align: int = 1) -> list:
    """:func:`hezk.threads.parallel`, with a call too small to split for any thread count (count * work_per_item <
    2 min_work: one piece) run at once, without the chunking (a proof's many short rounds and products)."""
    if count * work_per_item < 2 * min_work:
        return [function(0, count)]
    return threads_parallel(function, count, min_work, work_per_item, align)


def _flat(kernel, a, b, out):
    """kernel(a, b, out, lo, hi) over pieces of the flat arrays on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: kernel(a, b, out, lo, hi), a.size, PARALLEL_MIN_ELEMENTS)


def mul(a, b, out):
    _flat(_mul_range, a, b, out)


def add(a, b, out):
    _flat(_add_range, a, b, out)


def sub(a, b, out):
    _flat(_sub_range, a, b, out)


@numba.njit(cache=True, nogil=True)
def _mul_range(a, b, out, lo, hi):
    av, bv, ov = a[lo:hi], b[lo:hi], out[lo:hi]     # views indexed from 0: no negative-index checks in the loop
    for i in range(hi - lo):
        ov[i] = av[i] * bv[i] % P


@numba.njit(cache=True, nogil=True)
def _add_range(a, b, out, lo, hi):
    av, bv, ov = a[lo:hi], b[lo:hi], out[lo:hi]
    for i in range(hi - lo):
        s = av[i] + bv[i]
        ov[i] = s - P if s >= P else s


@numba.njit(cache=True, nogil=True)
def _sub_range(a, b, out, lo, hi):
    av, bv, ov = a[lo:hi], b[lo:hi], out[lo:hi]
    for i in range(hi - lo):
        ov[i] = av[i] - bv[i] if av[i] >= bv[i] else av[i] + P - bv[i]


@numba.njit(cache=True, inline="always")
def ext_mul_into(a0, a1, a2, a3, b0, b1, b2, b3, out, i):
    out[i, 0] = (a0 * b0 + W * ((a1 * b3 + a2 * b2 + a3 * b1) % P)) % P
    out[i, 1] = (a0 * b1 + a1 * b0 + W * ((a2 * b3 + a3 * b2) % P)) % P
    out[i, 2] = (a0 * b2 + a1 * b1 + a2 * b0 + W * (a3 * b3 % P)) % P
    out[i, 3] = (a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0) % P


def ext_mul(a, b, out):
    """Row-wise F_p4 products of (n, 4) arrays, in pieces of the rows on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _ext_mul_range(a, b, out, lo, hi), a.shape[0], PARALLEL_MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _ext_mul_range(a, b, out, lo, hi):
    av, bv, ov = a[lo:hi], b[lo:hi], out[lo:hi]
    for i in range(hi - lo):
        ext_mul_into(av[i, 0], av[i, 1], av[i, 2], av[i, 3], bv[i, 0], bv[i, 1], bv[i, 2], bv[i, 3], ov, i)


def ext_mul_scalar(a, b, out):
    """(n, 4) array times one F_p4 element b (4,), in pieces of the rows on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _ext_mul_scalar_range(a, b, out, lo, hi), a.shape[0], PARALLEL_MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _ext_mul_scalar_range(a, b, out, lo, hi):
    b0, b1, b2, b3 = b[0], b[1], b[2], b[3]
    av, ov = a[lo:hi], out[lo:hi]           # views indexed from 0: no negative-index checks in the loop
    for i in range(hi - lo):
        ext_mul_into(av[i, 0], av[i, 1], av[i, 2], av[i, 3], b0, b1, b2, b3, ov, i)


@numba.njit(cache=True)
def keep_below_p(draw, out, found):
    """Rejection sampling: append each candidate of ``draw`` (u32) masked to 31 bits that is below p to
    ``out`` from position ``found`` until it is full; return the new count (twin: the numpy path of
    :func:`proofs.field.random_elements`)."""
    mask = np.uint32(0x7FFFFFFF)
    bound = np.uint32(2013265921)
    for i in range(draw.shape[0]):
        if found >= out.shape[0]:
            break
        v = draw[i] & mask
        if v < bound:
            out[found] = v
            found += 1
    return found


#: The NTT's first log2(NTT_RADIX) stages run as one radix-NTT_RADIX transform across whole vectors (rs_encode)
NTT_RADIX = 16
_P32 = np.uint32(2013265921)


def rs_encode(rows, out, twiddles, quotients, bitrev_radix, bitrev_rest):
    """out[r] = the NTT (natural order) of row r of ``rows`` (R, w) zero-padded to out's n = 2^k >= w columns;
    ``out`` may be ``rows`` itself (w = n: in place). Pieces of the rows on the threads of ``hezk.threads``.

    Radix-2 decimation in time with a stage's twiddles contiguous: ``twiddles`` holds, for half = 1, 2, ..., n/2,
    omega^(j n / (2 half)) for j < half at offset half - 1 (uint32; :func:`proofs.pcs.reed_solomon.stage_twiddles`),
    ``quotients`` floor(twiddle 2^32 / p) for Shoup's product (v t - floor(v t' / 2^32) p lies in [0, 2p) for any
    v < 2^32: 32-bit lanes that vectorize). The first log2(radix) stages act within blocks of ``radix`` = min(16, n)
    entries, block b holding x[m + M bitrev_radix(t)] (t < radix, m = bitrev_M(b), M = n / radix): they are one
    radix-point transform of the rows x[k M : (k + 1) M] of the (radix, M) matrix, done on whole rows of M entries
    (the zero padding's rows are zero), then scattered to the blocks. Entries must be reduced (< p).
    Twin: :func:`proofs.pcs.reed_solomon.ntt_numpy` of the zero-padded rows."""
    parallel(lambda lo, hi: _rs_encode_range(rows, out, twiddles, quotients, bitrev_radix, bitrev_rest, lo, hi),
             rows.shape[0], PARALLEL_MIN_ENTRIES, work_per_item=out.shape[1])


@numba.njit(cache=True, nogil=True, inline="always")
def _shoup(v, t, tq):
    """v t mod p for v < 2^32 (uint32 lanes; tq = floor(t 2^32 / p))."""
    q = np.uint32((np.uint64(v) * np.uint64(tq)) >> np.uint64(32))
    r = np.uint32(np.uint32(v * t) - np.uint32(q * _P32))   # in [0, 2p): exact mod 2^32
    return min(r, np.uint32(r - _P32))                       # unsigned: r - p wraps above r when r < p


@numba.njit(cache=True, nogil=True)
def _butterflies(a, c, tw, tq):
    """(a, c) <- (a + t c, a - t c) entry-wise for uint32 vectors, twiddles tw (quotients tq) per entry."""
    for j in range(a.shape[0]):
        u = a[j]
        t = _shoup(c[j], tw[j], tq[j])
        x = np.uint32(u + t)
        y = np.uint32(u - t + _P32)
        a[j] = min(x, np.uint32(x - _P32))
        c[j] = min(y, np.uint32(y - _P32))


@numba.njit(cache=True, nogil=True)
def _butterflies_by(a, c, tw, tq):
    """_butterflies with one twiddle tw (quotient tq) for every entry."""
    for j in range(a.shape[0]):
        u = a[j]
        t = _shoup(c[j], tw, tq)
        x = np.uint32(u + t)
        y = np.uint32(u - t + _P32)
        a[j] = min(x, np.uint32(x - _P32))
        c[j] = min(y, np.uint32(y - _P32))


@numba.njit(cache=True, nogil=True)
def _rs_encode_range(rows, out, twiddles, quotients, bitrev_radix, bitrev_rest, lo, hi):
    """Rows lo <= r < hi of ``rs_encode``."""
    w, n = rows.shape[1], out.shape[1]
    radix = bitrev_radix.shape[0]
    m = n // radix
    z = np.empty((radix, m), dtype=np.uint32)
    s = np.empty(n, dtype=np.uint32)
    for r in range(lo, hi):
        row = rows[r]
        for i in range(radix):                  # z[i] = x[k M : (k + 1) M], k = bitrev_radix(i), zero-padded
            zi = z[i]
            base = bitrev_radix[i] * m
            count = min(max(w - base, 0), m)
            for j in range(count):
                zi[j] = np.uint32(row[base + j])
            for j in range(count, m):
                zi[j] = np.uint32(0)
        half = 1
        while half < radix:                    # the first stages on whole rows of z
            for start in range(0, radix, 2 * half):
                for j in range(half):
                    _butterflies_by(z[start + j], z[start + j + half], twiddles[half - 1 + j],
                                    quotients[half - 1 + j])
            half *= 2
        for k in range(m):                      # block bitrev_M(k) holds column k of z
            block = s[bitrev_rest[k] * radix:(bitrev_rest[k] + 1) * radix]
            for t in range(radix):
                block[t] = z[t, k]
        while half < n:                         # the remaining stages: contiguous halves, contiguous twiddles
            tw, tq = twiddles[half - 1:2 * half - 1], quotients[half - 1:2 * half - 1]
            for start in range(0, n, 2 * half):
                _butterflies(s[start:start + half], s[start + half:start + 2 * half], tw, tq)
            half *= 2
        o = out[r]
        for j in range(n):
            o[j] = s[j]


def columns_u32(a, out, start=0):
    """out[j, i] = a[i, start + j] as uint32 (entries < 2^32) for a (R, m) uint64 array and a (c, R) uint32 one: c
    columns of an encoded matrix as Merkle leaves hash them, in tiles of 64 x 64 (twin:
    ``np.ascontiguousarray(a[:, start:start + c].T, dtype="<u4")``); pieces of the columns on the threads of
    ``hezk.threads``."""
    parallel(lambda lo, hi: _columns_u32_range(a, out, start, lo, hi), out.shape[0], PARALLEL_MIN_ENTRIES,
             work_per_item=a.shape[0])


@numba.njit(cache=True, nogil=True)
def _columns_u32_range(a, out, start, lo, hi):
    rows = a.shape[0]
    for j0 in range(lo, hi, 64):
        j1 = min(j0 + 64, hi)
        for i0 in range(0, rows, 64):
            i1 = min(i0 + 64, rows)
            for i in range(i0, i1):
                row = a[i, start:]
                for j in range(j0, j1):
                    out[j, i] = np.uint32(row[j])


@numba.njit(cache=True)
def batch_inv(a, out):
    """Montgomery's trick: prefix products, one Fermat inversion, then a backward sweep (3 products per element).

    Every a[i] must be nonzero (the caller checks)."""
    n = a.size
    if n == 0:
        return
    out[0] = a[0]
    for i in range(1, n):
        out[i] = out[i - 1] * a[i] % P
    inverse = np.uint64(1)  # (prod a)^(p-2) by square-and-multiply
    base = out[n - 1]
    exponent = np.uint64(2013265919)
    while exponent > 0:
        if exponent & np.uint64(1):
            inverse = inverse * base % P
        base = base * base % P
        exponent >>= np.uint64(1)
    for i in range(n - 1, 0, -1):
        out[i] = inverse * out[i - 1] % P  # 1 / a[i] = (a[0] ... a[i-1]) / (a[0] ... a[i])
        inverse = inverse * a[i] % P
    out[0] = inverse


def ext_outer(u, v, out):
    """out[j * E + e] = u[j] v[e] for F_p4 vectors u (J, 4), v (E, 4); out is (J * E, 4); pieces of the rows j on
    the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _ext_outer_range(u, v, out, lo, hi), u.shape[0], PARALLEL_MIN_ENTRIES,
             work_per_item=v.shape[0])


@numba.njit(cache=True, nogil=True)
def _ext_outer_range(u, v, out, lo, hi):
    count = v.shape[0]
    uv, ov = u[lo:hi], out[lo * count:hi * count]
    for j in range(hi - lo):
        for e in range(count):
            ext_mul_into(uv[j, 0], uv[j, 1], uv[j, 2], uv[j, 3], v[e, 0], v[e, 1], v[e, 2], v[e, 3], ov, j * count + e)


@numba.njit(cache=True, inline="always")
def ext_mul4(a0, a1, a2, a3, b0, b1, b2, b3):
    """The F_p4 product (a b mod x^4 - W) as a tuple of four residues."""
    return ((a0 * b0 + W * ((a1 * b3 + a2 * b2 + a3 * b1) % P)) % P,
            (a0 * b1 + a1 * b0 + W * ((a2 * b3 + a3 * b2) % P)) % P,
            (a0 * b2 + a1 * b1 + a2 * b0 + W * (a3 * b3 % P)) % P,
            (a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0) % P)


@numba.njit(cache=True, inline="always")
def subp(high, low):
    return high - low if high >= low else high + P - low


@numba.njit(cache=True, inline="always")
def addp(a, b):
    s = a + b
    return s - P if s >= P else s


@numba.njit(cache=True, inline="always")
def _line(t, j):
    """The line through an F_p4 table's pair (t[2j], t[2j + 1]): its value at 0 and its step, eight residues."""
    v0, v1, v2, v3 = t[2 * j, 0], t[2 * j, 1], t[2 * j, 2], t[2 * j, 3]
    return (v0, v1, v2, v3, subp(t[2 * j + 1, 0], v0), subp(t[2 * j + 1, 1], v1), subp(t[2 * j + 1, 2], v2),
            subp(t[2 * j + 1, 3], v3))


@numba.njit(cache=True, inline="always")
def _acc_line(lines, v0, v1, v2, v3, d0, d1, d2, d3):
    """lines[0] += a line's value (v0..v3), lines[1] += its step (d0..d3): unreduced uint64 sums."""
    lines[0, 0] += v0
    lines[0, 1] += v1
    lines[0, 2] += v2
    lines[0, 3] += v3
    lines[1, 0] += d0
    lines[1, 1] += d1
    lines[1, 2] += d2
    lines[1, 3] += d3


@numba.njit(cache=True, inline="always")
def _add4(a0, a1, a2, a3, b0, b1, b2, b3):
    return addp(a0, b0), addp(a1, b1), addp(a2, b2), addp(a3, b3)


def _round_pieces(kernel, half, out):
    """out = (the sum of kernel(lo, hi)'s unreduced accumulators over pieces of the pairs) mod p: pieces on the
    threads of ``hezk.threads``, their accumulators added in piece order (uint64 sums of residues, exact: the
    one-thread accumulator itself)."""
    accs = parallel(kernel, half, max(1, PARALLEL_MIN_ENTRIES >> ROUND_PIECE_SHIFT))
    total = accs[0]
    for acc in accs[1:]:
        total = total + acc
    out[:total.shape[0]] = total % P     # rows 0..degree (a caller's ``out`` may have more)


def product_round_sums(a, b, c, three, degree, out):
    """out[x] = sum_j A_x(j) B_x(j) [C_x(j) if ``three``], F_x(j) = f[2j] + x (f[2j+1] - f[2j]), x = 0..degree, for
    F_p4 tables (2L, 4): the round of a product term of two or three F_p4 factors in scalar registers (twin:
    :func:`masked_round_sums` without masks or base factors; ``c`` is ignored unless ``three``)."""
    _round_pieces(lambda lo, hi: _product_round_range(a, b, c, three, degree, lo, hi), a.shape[0] // 2, out)


@numba.njit(cache=True, nogil=True)
def _product_round_range(a, b, c, three, degree, lo, hi):
    """The unreduced accumulator of ``product_round_sums`` over the pairs lo <= j < hi."""
    acc = np.zeros((degree + 1, 4), dtype=np.uint64)
    c0 = c1 = c2 = c3 = dc0 = dc1 = dc2 = dc3 = np.uint64(0)
    av, bv = a[2 * lo:2 * hi], b[2 * lo:2 * hi]          # views indexed from 0
    cv = c[2 * lo:2 * hi] if three else c
    for j in range(hi - lo):
        a0, a1, a2, a3, da0, da1, da2, da3 = _line(av, j)
        b0, b1, b2, b3, db0, db1, db2, db3 = _line(bv, j)
        if three:
            c0, c1, c2, c3, dc0, dc1, dc2, dc3 = _line(cv, j)
        for x in range(degree + 1):
            if x:
                a0, a1, a2, a3 = _add4(a0, a1, a2, a3, da0, da1, da2, da3)
                b0, b1, b2, b3 = _add4(b0, b1, b2, b3, db0, db1, db2, db3)
                if three:
                    c0, c1, c2, c3 = _add4(c0, c1, c2, c3, dc0, dc1, dc2, dc3)
            if three:
                p0, p1, p2, p3 = ext_mul4(a0, a1, a2, a3, b0, b1, b2, b3)
                acc_product(acc, x, p0, p1, p2, p3, c0, c1, c2, c3)
            else:
                acc_product(acc, x, a0, a1, a2, a3, b0, b1, b2, b3)
    return acc


@numba.njit(cache=True, inline="always")
def _masked(v, z, mask, plane, c, block):
    """v + z mask[plane, c] mod p, or v for an unmasked factor (block 0)."""
    return addp(v, z * mask[plane, c] % P) if block else v


def masked_product_round_sums(a, b, mask_a, block_a, mask_b, block_b, zs, degree, out):
    """out[x] = sum_j A_x(j) B_x(j), F_x(j) = f[2j] + x (f[2j+1] - f[2j]) + zs[x] mask_f[j // block_f] (block_f =
    0: no mask), x = 0..degree, for F_p4 tables (2L, 4) and masks (P_f, 4): a two-factor term in scalar
    registers, the plane advanced by a counter (twin: :func:`masked_round_sums` with two F_p4 factors)."""
    _round_pieces(lambda lo, hi: _masked_product_round_range(a, b, mask_a, block_a, mask_b, block_b, zs, degree, lo,
                                                             hi), a.shape[0] // 2, out)


@numba.njit(cache=True, nogil=True)
def _masked_product_round_range(a, b, mask_a, block_a, mask_b, block_b, zs, degree, lo, hi):
    """The accumulator of ``masked_product_round_sums`` over the pairs lo <= j < hi (reduced).

    With A = La(x) + z_x m_a (La = a_j + x da_j linear, m_a the pair's plane's mask) and B likewise,
    A B = La Lb + z_x (m_a Lb + m_b La) + z_x^2 m_a m_b, and La Lb = (1 - x) a b + x (a + da)(b + db) + (x^2 - x)
    da db: three F_p4 products per pair for every x, the masks' parts from per-plane sums of the lines (one product
    per plane and line coefficient) and per-plane-pair counts."""
    return _masked_product_round_run(a[2 * lo:2 * hi], b[2 * lo:2 * hi], mask_a, block_a, mask_b, block_b, zs, degree,
                                     lo, hi)


@numba.njit(cache=True, nogil=True)
def _masked_product_round_run(av, bv, mask_a, block_a, mask_b, block_b, zs, degree, lo, hi):
    """``_masked_product_round_range`` on views av, bv of its tables from pair lo on (a loop in a function of its
    own: ``_fold_add_run``)."""
    acc = np.zeros((degree + 1, 4), dtype=np.uint64)
    sums = np.zeros((3, 4), dtype=np.uint64)     # sum a b, sum (a + da)(b + db), sum da db (unreduced)
    lines_a = np.zeros((2, 4), dtype=np.uint64)   # this plane of a's: sum b, sum db (the partner's line)
    lines_b = np.zeros((2, 4), dtype=np.uint64)   # this plane of b's: sum a, sum da
    masked = np.zeros((5, 4), dtype=np.uint64)    # m.(line at 0), m.(line's step) for a then b; sum m_a m_b
    run = np.uint64(0)                            # pairs since the last change of either plane
    plane_a = lo // block_a if block_a else 0
    plane_b = lo // block_b if block_b else 0
    for j in range(hi - lo + 1):
        last = j == hi - lo
        next_a = block_a and (last or lo + j == (plane_a + 1) * block_a)
        next_b = block_b and (last or lo + j == (plane_b + 1) * block_b)
        if j and block_a and block_b and (next_a or next_b):
            p0, p1, p2, p3 = ext_mul4(mask_a[plane_a, 0], mask_a[plane_a, 1], mask_a[plane_a, 2], mask_a[plane_a, 3],
                                      mask_b[plane_b, 0], mask_b[plane_b, 1], mask_b[plane_b, 2], mask_b[plane_b, 3])
            count = run % P
            masked[4, 0] += p0 * count % P
            masked[4, 1] += p1 * count % P
            masked[4, 2] += p2 * count % P
            masked[4, 3] += p3 * count % P
            run = np.uint64(0)
        if j and next_a:
            _flush_plane(mask_a, plane_a, lines_a, masked, 0)
            plane_a += 1
        if j and next_b:
            _flush_plane(mask_b, plane_b, lines_b, masked, 2)
            plane_b += 1
        if last:
            break
        a0, a1, a2, a3, da0, da1, da2, da3 = _line(av, j)
        b0, b1, b2, b3, db0, db1, db2, db3 = _line(bv, j)
        acc_product(sums, 0, a0, a1, a2, a3, b0, b1, b2, b3)
        acc_product(sums, 2, da0, da1, da2, da3, db0, db1, db2, db3)
        e0, e1, e2, e3 = _add4(a0, a1, a2, a3, da0, da1, da2, da3)
        f0, f1, f2, f3 = _add4(b0, b1, b2, b3, db0, db1, db2, db3)
        acc_product(sums, 1, e0, e1, e2, e3, f0, f1, f2, f3)
        if block_a:
            _acc_line(lines_a, b0, b1, b2, b3, db0, db1, db2, db3)
        if block_b:
            _acc_line(lines_b, a0, a1, a2, a3, da0, da1, da2, da3)
        run += np.uint64(1)
    one = np.uint64(1)
    for x in range(degree + 1):
        ux = np.uint64(x)
        at_0 = (one + P - ux) % P                 # 1 - x
        at_dd = (ux * ux - ux) % P                # x^2 - x
        z = zs[x]
        z2 = z * z % P
        for c in range(4):
            plain = (at_0 * (sums[0, c] % P) + ux * (sums[1, c] % P) + at_dd * (sums[2, c] % P)) % P
            linear = ((masked[0, c] + masked[2, c]) % P + ux * ((masked[1, c] + masked[3, c]) % P)) % P
            acc[x, c] = (plain + z * linear % P + z2 * (masked[4, c] % P)) % P
    return acc


@numba.njit(cache=True, inline="always")
def _flush_plane(mask, plane, lines, masked, row):
    """masked[row] += m lines[0], masked[row + 1] += m lines[1] for the plane's mask m; lines reset."""
    m0, m1, m2, m3 = mask[plane, 0], mask[plane, 1], mask[plane, 2], mask[plane, 3]
    for k in range(2):
        p0, p1, p2, p3 = ext_mul4(m0, m1, m2, m3, lines[k, 0] % P, lines[k, 1] % P, lines[k, 2] % P,
                                  lines[k, 3] % P)
        masked[row + k, 0] += p0
        masked[row + k, 1] += p1
        masked[row + k, 2] += p2
        masked[row + k, 3] += p3
        lines[k, 0] = lines[k, 1] = lines[k, 2] = lines[k, 3] = np.uint64(0)


def masked_triple_round_sums(factors, masks, blocks, zs, degree, out):
    """``masked_round_sums`` of three F_p4 factors (3, 2L, 4) and no base factor, in fewer products: with
    F_f = L_f + z_x m_f (L_f linear in x, m_f the pair's plane's mask of factor f, 0 for blocks[f] = 0),
    F_a F_b F_c = L_a L_b L_c + z_x sum_f m_f L_g L_h + z_x^2 sum_(f<g) m_f m_g L_h + z_x^3 m_a m_b m_c. The cubic
    is summed at x = 0, 1, -1 and infinity (seven products a pair: L_a L_b from three, then one per point) and
    interpolated once; each masked factor's quadratic L_g L_h (three products a pair, those of L_a L_b reused for c)
    is summed per plane of f and multiplied by its mask once; the linear and constant parts by runs of equal
    planes. Twin: ``masked_round_sums`` (and :meth:`proofs.relations.RelationProver._numpy_sums`)."""
    _round_pieces(lambda lo, hi: _masked_triple_round_range(factors, masks, blocks, zs, degree, lo, hi),
                  factors.shape[1] // 2, out)


@numba.njit(cache=True, inline="always")
def _quadratic(u0, u1, u2, u3, du0, du1, du2, du3, v0, v1, v2, v3, dv0, dv1, dv2, dv3, q):
    """q[0] = u v, q[1] = (u + du)(v + dv), q[2] = du dv: (U V)(x) = (1 - x) q0 + x q1 + (x^2 - x) q2."""
    q[0, 0], q[0, 1], q[0, 2], q[0, 3] = ext_mul4(u0, u1, u2, u3, v0, v1, v2, v3)
    e0, e1, e2, e3 = _add4(u0, u1, u2, u3, du0, du1, du2, du3)
    f0, f1, f2, f3 = _add4(v0, v1, v2, v3, dv0, dv1, dv2, dv3)
    q[1, 0], q[1, 1], q[1, 2], q[1, 3] = ext_mul4(e0, e1, e2, e3, f0, f1, f2, f3)
    q[2, 0], q[2, 1], q[2, 2], q[2, 3] = ext_mul4(du0, du1, du2, du3, dv0, dv1, dv2, dv3)


@numba.njit(cache=True, nogil=True)
def _masked_triple_round_range(factors, masks, blocks, zs, degree, lo, hi):
    """The (reduced) accumulator of ``masked_triple_round_sums`` over the pairs lo <= j < hi."""
    acc = np.zeros((degree + 1, 4), dtype=np.uint64)
    line = np.zeros((3, 2, 4), dtype=np.uint64)       # this pair's L_f: value at 0, step
    q = np.zeros((3, 4), dtype=np.uint64)
    points = np.zeros((4, 4), dtype=np.uint64)        # sum of the cubic at 0, 1, -1, infinity
    quad = np.zeros((3, 3, 4), dtype=np.uint64)       # per factor f: its plane's sums of L_g L_h's q
    lin = np.zeros((3, 2, 4), dtype=np.uint64)        # per pair (f, g) = (1, 2), (0, 2), (0, 1): run sums of L_h
    masked = np.zeros((6, 4), dtype=np.uint64)        # z: q0, q1, q2 parts; z^2: constant, step; z^3
    planes = np.zeros(3, dtype=np.int64)
    moved = np.zeros(3, dtype=np.bool_)
    for f in range(3):
        planes[f] = lo // blocks[f] if blocks[f] else 0
    run = np.uint64(0)
    views = factors[:, 2 * lo:2 * hi]
    for j in range(hi - lo + 1):
        last = j == hi - lo
        change = False
        for f in range(3):
            moved[f] = j > 0 and blocks[f] > 0 and (last or lo + j == (planes[f] + 1) * blocks[f])
            change = change or moved[f]
        if change:
            for h in range(3):                          # the pairs (f, g) without h, then all three
                f, g = (1, 2) if h == 0 else ((0, 2) if h == 1 else (0, 1))
                if blocks[f] and blocks[g] and (moved[f] or moved[g]):
                    mf, mg = masks[f, planes[f]], masks[g, planes[g]]
                    p0, p1, p2, p3 = ext_mul4(mf[0], mf[1], mf[2], mf[3], mg[0], mg[1], mg[2], mg[3])
                    for k in range(2):
                        r0, r1, r2, r3 = ext_mul4(p0, p1, p2, p3, lin[h, k, 0] % P, lin[h, k, 1] % P,
                                                  lin[h, k, 2] % P, lin[h, k, 3] % P)
                        masked[3 + k, 0] += r0
                        masked[3 + k, 1] += r1
                        masked[3 + k, 2] += r2
                        masked[3 + k, 3] += r3
                        lin[h, k, :] = 0
            if blocks[0] and blocks[1] and blocks[2]:
                ma, mb, mc = masks[0, planes[0]], masks[1, planes[1]], masks[2, planes[2]]
                p0, p1, p2, p3 = ext_mul4(ma[0], ma[1], ma[2], ma[3], mb[0], mb[1], mb[2], mb[3])
                p0, p1, p2, p3 = ext_mul4(p0, p1, p2, p3, mc[0], mc[1], mc[2], mc[3])
                count = run % P
                masked[5, 0] += p0 * count % P
                masked[5, 1] += p1 * count % P
                masked[5, 2] += p2 * count % P
                masked[5, 3] += p3 * count % P
            run = np.uint64(0)
            for f in range(3):
                if moved[f]:
                    m = masks[f, planes[f]]
                    for k in range(3):
                        r0, r1, r2, r3 = ext_mul4(m[0], m[1], m[2], m[3], quad[f, k, 0] % P, quad[f, k, 1] % P,
                                                  quad[f, k, 2] % P, quad[f, k, 3] % P)
                        masked[k, 0] += r0
                        masked[k, 1] += r1
                        masked[k, 2] += r2
                        masked[k, 3] += r3
                        quad[f, k, :] = 0
                    planes[f] += 1
        if last:
            break
        for f in range(3):
            v0, v1, v2, v3, d0, d1, d2, d3 = _line(views[f], j)
            line[f, 0, 0], line[f, 0, 1], line[f, 0, 2], line[f, 0, 3] = v0, v1, v2, v3
            line[f, 1, 0], line[f, 1, 1], line[f, 1, 2], line[f, 1, 3] = d0, d1, d2, d3
        a, b, c = line[0], line[1], line[2]
        _quadratic(a[0, 0], a[0, 1], a[0, 2], a[0, 3], a[1, 0], a[1, 1], a[1, 2], a[1, 3],
                   b[0, 0], b[0, 1], b[0, 2], b[0, 3], b[1, 0], b[1, 1], b[1, 2], b[1, 3], q)
        c1 = _add4(c[0, 0], c[0, 1], c[0, 2], c[0, 3], c[1, 0], c[1, 1], c[1, 2], c[1, 3])
        acc_product(points, 0, q[0, 0], q[0, 1], q[0, 2], q[0, 3], c[0, 0], c[0, 1], c[0, 2], c[0, 3])
        acc_product(points, 1, q[1, 0], q[1, 1], q[1, 2], q[1, 3], c1[0], c1[1], c1[2], c1[3])
        acc_product(points, 2, subp(addp(addp(q[0, 0], q[0, 0]), addp(q[2, 0], q[2, 0])), q[1, 0]),
                    subp(addp(addp(q[0, 1], q[0, 1]), addp(q[2, 1], q[2, 1])), q[1, 1]),
                    subp(addp(addp(q[0, 2], q[0, 2]), addp(q[2, 2], q[2, 2])), q[1, 2]),
                    subp(addp(addp(q[0, 3], q[0, 3]), addp(q[2, 3], q[2, 3])), q[1, 3]),
                    subp(c[0, 0], c[1, 0]), subp(c[0, 1], c[1, 1]), subp(c[0, 2], c[1, 2]), subp(c[0, 3], c[1, 3]))
        acc_product(points, 3, q[2, 0], q[2, 1], q[2, 2], q[2, 3], c[1, 0], c[1, 1], c[1, 2], c[1, 3])
        if blocks[2]:
            quad[2] += q
        if blocks[1]:
            _quadratic(a[0, 0], a[0, 1], a[0, 2], a[0, 3], a[1, 0], a[1, 1], a[1, 2], a[1, 3],
                       c[0, 0], c[0, 1], c[0, 2], c[0, 3], c[1, 0], c[1, 1], c[1, 2], c[1, 3], q)
            quad[1] += q
        if blocks[0]:
            _quadratic(b[0, 0], b[0, 1], b[0, 2], b[0, 3], b[1, 0], b[1, 1], b[1, 2], b[1, 3],
                       c[0, 0], c[0, 1], c[0, 2], c[0, 3], c[1, 0], c[1, 1], c[1, 2], c[1, 3], q)
            quad[0] += q
        for h in range(3):
            f, g = (1, 2) if h == 0 else ((0, 2) if h == 1 else (0, 1))
            if blocks[f] and blocks[g]:
                lin[h] += line[h]
        run += np.uint64(1)
    half_p = (P + np.uint64(1)) // np.uint64(2)        # 1/2 mod p
    one = np.uint64(1)
    for x in range(degree + 1):
        ux = np.uint64(x)
        x2 = ux * ux % P
        x3 = x2 * ux % P
        at_0 = (one + P - ux) % P
        at_2 = (x2 + P - ux) % P
        z = zs[x]
        z2 = z * z % P
        z3 = z2 * z % P
        for k in range(4):
            s0, s1, sm, s3 = points[0, k] % P, points[1, k] % P, points[2, k] % P, points[3, k] % P
            even = addp(s1, sm) * half_p % P             # s0 + c2
            odd = subp(s1, sm) * half_p % P              # c1 + s3
            c2 = subp(even, s0)
            c1 = subp(odd, s3)
            cubic = (s0 + c1 * ux % P + c2 * x2 % P + s3 * x3 % P) % P
            quadratic = (at_0 * (masked[0, k] % P) + ux * (masked[1, k] % P) + at_2 * (masked[2, k] % P)) % P
            linear = ((masked[3, k] % P) + ux * (masked[4, k] % P)) % P
            acc[x, k] = (cubic + z * quadratic % P + z2 * linear % P + z3 * (masked[5, k] % P)) % P
    return acc


def masked_round_sums(ext_factors, masks, blocks, base_factors, zs, degree, out):
    """Round sums of one product term whose F_p4 factors may carry a per-plane mask:
    out[x] = sum_j prod_f (f[2j] + x (f[2j+1] - f[2j]) + zs[x] masks[f, j // blocks[f]]), x = 0..degree.

    ext_factors: (me, 2L, 4); masks: (me, P, 4), factor f's planes in blocks of ``blocks[f]`` half-table
    entries (plane-major tables), blocks[f] = 0 for a factor without a mask this round; base_factors: (mb, 2L);
    zs[x] = x (1 - x) mod p. Without masks (all blocks 0) it is the plain sumcheck's round (:mod:`proofs.sumcheck`).
    Accumulators hold sums of residues < p (exact in uint64 up to 2^33 terms) and are reduced at the end.
    The numpy twins are :meth:`proofs.relations.RelationProver._numpy_sums` and the plain prover's numpy rounds.
    """
    n = ext_factors.shape[1] if ext_factors.shape[0] else base_factors.shape[1]
    _round_pieces(lambda lo, hi: _masked_round_range(ext_factors, masks, blocks, base_factors, zs, degree, lo, hi),
                  n // 2, out)


@numba.njit(cache=True, nogil=True)
def _masked_round_range(ext_factors, masks, blocks, base_factors, zs, degree, lo, hi):
    """The unreduced accumulator of ``masked_round_sums`` over the pairs lo <= j < hi."""
    return _masked_round_run(ext_factors[:, 2 * lo:2 * hi], masks, blocks, base_factors[:, 2 * lo:2 * hi], zs, degree,
                             lo, hi)


@numba.njit(cache=True, nogil=True)
def _masked_round_run(ev, masks, blocks, bv, zs, degree, lo, hi):
    """``_masked_round_range`` on views ev, bv of its tables from pair lo on (a loop in a function of its own:
    ``_fold_add_run``)."""
    me, mb = ev.shape[0], bv.shape[0]
    acc = np.zeros((degree + 1, 4), dtype=np.uint64)
    current = np.empty((me, 4), dtype=np.uint64)
    step = np.empty((me, 4), dtype=np.uint64)
    value = np.empty((me, 4), dtype=np.uint64)
    base_current = np.empty(mb, dtype=np.uint64)
    base_step = np.empty(mb, dtype=np.uint64)
    product = np.empty((1, 4), dtype=np.uint64)
    for j in range(hi - lo):
        for f in range(me):
            for c in range(4):
                low, high = ev[f, 2 * j, c], ev[f, 2 * j + 1, c]
                current[f, c] = low
                step[f, c] = high - low if high >= low else high + P - low
        for f in range(mb):
            low, high = bv[f, 2 * j], bv[f, 2 * j + 1]
            base_current[f] = low
            base_step[f] = high - low if high >= low else high + P - low
        for x in range(degree + 1):
            if x:
                for f in range(me):
                    for c in range(4):
                        s = current[f, c] + step[f, c]
                        current[f, c] = s - P if s >= P else s
                for f in range(mb):
                    s = base_current[f] + base_step[f]
                    base_current[f] = s - P if s >= P else s
            scale = np.uint64(1)
            for f in range(mb):
                scale = scale * base_current[f] % P
            if me == 0:
                acc[x, 0] += scale
                continue
            for f in range(me):
                if blocks[f]:
                    plane = (lo + j) // blocks[f]
                    for c in range(4):
                        s = current[f, c] + zs[x] * masks[f, plane, c] % P
                        value[f, c] = s - P if s >= P else s
                else:
                    for c in range(4):
                        value[f, c] = current[f, c]
            for c in range(4):
                product[0, c] = value[0, c]
            for f in range(1, me):
                ext_mul_into(product[0, 0], product[0, 1], product[0, 2], product[0, 3],
                              value[f, 0], value[f, 1], value[f, 2], value[f, 3], product, 0)
            for c in range(4):
                acc[x, c] += product[0, c] * scale % P
    return acc


@numba.njit(cache=True)
def add_plane_constants(table, values, out):
    """out[i] = table[i] + values[i // (n / P)] for a plane-major F_p4 table (n, 4) and values (P, 4)."""
    block = table.shape[0] // values.shape[0]
    for i in range(table.shape[0]):
        plane = i // block
        for c in range(4):
            s = table[i, c] + values[plane, c]
            out[i, c] = s - P if s >= P else s


@numba.njit(cache=True, inline="always")
def _acc_scaled(acc, row, e, k):
    """acc[row] += e * k for an F_p4 e (4,) and a base k (reduced later by the caller)."""
    for c in range(4):
        acc[row, c] += e[c] * k % P


@numba.njit(cache=True, inline="always")
def _flush(part, i, eq_hi, hb, total, k, term):
    """total[k] += eq_hi[hb] * (part[i] mod p) in F_p4 (``term``: (1, 4) scratch)."""
    for c in range(4):
        part[i, c] %= P
    ext_mul_into(eq_hi[hb, 0], eq_hi[hb, 1], eq_hi[hb, 2], eq_hi[hb, 3],
                  part[i, 0], part[i, 1], part[i, 2], part[i, 3], term, 0)
    for c in range(4):
        total[k, c] = (total[k, c] + term[0, c]) % P


@numba.njit(cache=True, inline="always")
def acc_product(acc, row, a0, a1, a2, a3, b0, b1, b2, b3):
    """acc[row] += a b (F_p4, unreduced sums of residues; the caller reduces)."""
    p0, p1, p2, p3 = ext_mul4(a0, a1, a2, a3, b0, b1, b2, b3)
    acc[row, 0] += p0
    acc[row, 1] += p1
    acc[row, 2] += p2
    acc[row, 3] += p3


@numba.njit(cache=True)
def bit_round_sums(table, block, eq_lo, eq_hi, plain, buckets):
    """One bit-check round by the split eq, with the mask handled in closed form.

    For entries j of the half table, u_j(x) = T[2j] + x (T[2j+1] - T[2j]) and w_j = eq_lo[j_lo] eq_hi[j_hi]:
    plain[x] = sum_j w_j (u_j(x) - u_j(x)^2) for x = 0, 1, 2 (a degree-2 polynomial in x), and per plane p
    (entries j // block = p; block = 0: no planes) buckets[0, p] = sum w_j (1 - 2 T[2j]),
    buckets[1, p] = sum w_j (T[2j+1] - T[2j]), buckets[2, p] = sum w_j. With t = u + z(x) m_p the masked
    h(t) = t - t^2 is then (u - u^2) + z m_p (1 - 2u) - z^2 m_p^2 (:meth:`RelationProver._bit_sums`).
    ``table``: (2L,) base or (2L, 4) F_p4; outputs overwritten (plain (3, 4), buckets (3, P, 4)).
    """
    ext = table.ndim == 2
    lo_size = eq_lo.shape[0]
    planes = buckets.shape[1]
    zero, one, two, four = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(4)
    acc = np.zeros((3, 4), dtype=np.uint64)
    part = np.zeros((3, 4), dtype=np.uint64)
    sums = np.zeros((3, 4), dtype=np.uint64)  # sum e A, sum e B, sum e C of h = A + B x + C x^2
    totals = np.zeros((3 * planes, 4), dtype=np.uint64)
    pb = np.zeros((3 * planes, 4), dtype=np.uint64)
    term = np.zeros((1, 4), dtype=np.uint64)
    for hb in range(eq_hi.shape[0]):
        sums[:] = 0
        pb[:] = 0
        touched_lo, touched_hi = planes, -1
        for lb in range(lo_size):  # u(x) = l + x d: u - u^2 = l (1 - l) + x d (1 - 2 l) - x^2 d^2
            j = hb * lo_size + lb
            e0, e1, e2, e3 = eq_lo[lb, 0], eq_lo[lb, 1], eq_lo[lb, 2], eq_lo[lb, 3]
            if ext:
                l0, l1, l2, l3, d0, d1, d2, d3 = _line(table, j)
                o0, o1, o2, o3 = subp(one, (l0 + l0) % P), subp(zero, (l1 + l1) % P), subp(zero, (l2 + l2) % P), \
                    subp(zero, (l3 + l3) % P)  # 1 - 2 l
                a0, a1, a2, a3 = ext_mul4(l0, l1, l2, l3, subp(one, l0), subp(zero, l1), subp(zero, l2),
                                           subp(zero, l3))  # l (1 - l)
                b0, b1, b2, b3 = ext_mul4(d0, d1, d2, d3, o0, o1, o2, o3)
                c0, c1, c2, c3 = ext_mul4(d0, d1, d2, d3, d0, d1, d2, d3)
                c0, c1, c2, c3 = subp(zero, c0), subp(zero, c1), subp(zero, c2), subp(zero, c3)
                acc_product(sums, 0, e0, e1, e2, e3, a0, a1, a2, a3)
                acc_product(sums, 1, e0, e1, e2, e3, b0, b1, b2, b3)
                acc_product(sums, 2, e0, e1, e2, e3, c0, c1, c2, c3)
            else:
                low = table[2 * j]
                d = subp(table[2 * j + 1], low)
                o0 = subp(one, (low + low) % P)
                a = low * subp(one, low) % P
                b = d * o0 % P
                cc = subp(zero, d * d % P)
                acc_product(sums, 0, e0, e1, e2, e3, a, zero, zero, zero)
                acc_product(sums, 1, e0, e1, e2, e3, b, zero, zero, zero)
                acc_product(sums, 2, e0, e1, e2, e3, cc, zero, zero, zero)
                o1 = o2 = o3 = zero
                d0, d1, d2, d3 = d, zero, zero, zero
            if block:
                plane = j // block
                touched_lo = min(touched_lo, plane)
                touched_hi = max(touched_hi, plane)
                acc_product(pb, plane, e0, e1, e2, e3, o0, o1, o2, o3)  # e (1 - 2 l)
                acc_product(pb, planes + plane, e0, e1, e2, e3, d0, d1, d2, d3)  # e d
                pb[2 * planes + plane, 0] += e0
                pb[2 * planes + plane, 1] += e1
                pb[2 * planes + plane, 2] += e2
                pb[2 * planes + plane, 3] += e3
        for c in range(4):  # h(0) = A, h(1) = A + B + C, h(2) = A + 2 B + 4 C (sums of < 2^33 residues)
            sa, sb, sc = sums[0, c] % P, sums[1, c] % P, sums[2, c] % P
            part[0, c] = sa
            part[1, c] = (sa + sb + sc) % P
            part[2, c] = (sa + two * sb + four * sc) % P
        for x in range(3):
            _flush(part, x, eq_hi, hb, acc, x, term)
        for plane in range(touched_lo, touched_hi + 1):
            for kind in range(3):
                _flush(pb, kind * planes + plane, eq_hi, hb, totals, kind * planes + plane, term)
    for x in range(3):
        for c in range(4):
            plain[x, c] = acc[x, c]
    for kind in range(3):
        for plane in range(planes):
            for c in range(4):
                buckets[kind, plane, c] = totals[kind * planes + plane, c]


def fold_add_planes(table, r, values, out):
    """out[j] = t[2j] + r (t[2j+1] - t[2j]) + values[j // (L / P)]: binds the lowest variable of a plane-major
    table ((2L,) base or (2L, 4) F_p4), adding one F_p4 constant per plane (values (P, 4); one zero plane for a
    plain fold, :func:`proofs.mle.fold`, whose numpy twin is ``_fold_numpy``). Entries 2j and 2j + 1 are read
    before entry j is written: ``out`` may be the table's own first half. Pieces of the entries run on the threads
    of ``hezk.threads``, each writing where :class:`FoldTarget` says (a fold in place: a piece after the first
    writes over its own consumed inputs, moved once every piece is done)."""
    if out.shape[0] < values.shape[0]:          # no whole entry per plane: nothing to write
        return
    kernel = _fold_add_planes_range if table.ndim == 2 else _fold_add_planes_base_range
    target = FoldTarget(out, table)
    parallel(lambda lo, hi: kernel(table, r, values, out.shape[0] // values.shape[0], target.piece(lo, hi), lo, hi),
             out.shape[0], PARALLEL_MIN_ENTRIES)
    target.finish()


def own_first_half(out, table) -> bool:
    """Whether ``out`` is ``table``'s own first rows (a fold in place: out = table[:n], both C-contiguous with the
    same row shape and dtype)."""
    return (out.ndim == table.ndim and out.shape[1:] == table.shape[1:] and out.dtype == table.dtype
            and out.flags.c_contiguous and table.flags.c_contiguous and out.ctypes.data == table.ctypes.data
            and out.shape[0] <= table.shape[0])


class FoldTarget:
    """Where the piece lo <= j < hi of a fold (entry j of ``out`` computed from entries 2j, 2j + 1 of ``table``,
    read before entry j is written) writes its entries, and ``finish`` moving them where they belong once every
    piece is done. ``out`` apart from the table: out[lo:hi]. ``out`` the table's own first half (a fold in place):
    the first piece writes out[:hi] (its own inputs), a later one over its own consumed inputs
    table[2 lo:2 lo + hi - lo] (entry j lands at j + lo <= 2j, after entries 2j, 2j + 1 are read, and inside the
    piece's inputs: no other piece reads it), moved to out[lo:hi] in piece order (out[lo:hi] lies below every
    later piece's inputs), each move split on the threads (unless a rounded piece boundary makes it overlap its
    source: then one overlap-safe numpy copy). A fresh buffer instead would cost a page fault per
    4 KiB on first touch, in the piece (~10 us a page measured here: a 2^20-entry fold's second piece took three
    times its first's time). Any other overlap (``copy``, or out sharing the table's memory otherwise): a fresh
    buffer per later piece. With one piece (one thread) it writes out itself, as before: the same values at any
    thread count."""

    def __init__(self, out, table, copy: bool = False):
        self.out, self.table, self.copy, self.moves = out, table, copy, []
        self._kind = None   # (own, buffered), found at the first later piece: one piece (one thread) never needs it

    @property
    def own(self) -> bool:
        return self._overlap()[0]

    @property
    def buffered(self) -> bool:
        return self._overlap()[1]

    def _overlap(self):
        if self._kind is None:
            own = not self.copy and own_first_half(self.out, self.table)
            self._kind = (own, self.copy or (not own and np.may_share_memory(self.out, self.table)))
        return self._kind

    def piece(self, lo, hi):
        if lo == 0 or not any(self._overlap()):
            return self.out[lo:hi]
        if self.own:
            dst = self.table[2 * lo:2 * lo + (hi - lo)]
        else:
            dst = np.empty((hi - lo,) + self.out.shape[1:], dtype=self.out.dtype)
        self.moves.append((lo, dst))     # list.append: atomic under the GIL
        return dst

    def finish(self):
        for lo, src in sorted(self.moves, key=lambda move: move[0]):
            dst = self.out[lo:lo + src.shape[0]]
            if self.own and 2 * lo < lo + src.shape[0]:   # uneven pieces (3 or more): src overlaps dst's end
                dst[...] = src                             # numpy copies overlapping arrays as if through a buffer
            else:
                copy_rows(src, dst)
        self.moves = []


def transpose_u32(matrix, out):
    """out[j, i] = matrix[i, j] for residues matrix (n, m) uint64 and out (m, n) uint32 (a Merkle tree's columns as
    rows of little-endian words), in pieces of the output rows on the threads of ``hezk.threads``; twin:
    ``np.ascontiguousarray(matrix.T, dtype="<u4")``."""
    parallel(lambda lo, hi: _transpose_u32_range(matrix, out, lo, hi), out.shape[0], PARALLEL_MIN_ELEMENTS,
             work_per_item=out.shape[1], align=TRANSPOSE_TILE)


#: output rows a tile of :func:`transpose_u32` writes together (it reads 16 adjacent words of each input row)
TRANSPOSE_TILE = 16


@numba.njit(cache=True, nogil=True)
def _transpose_u32_range(matrix, out, lo, hi):
    for first in range(lo, hi, TRANSPOSE_TILE):
        last = min(first + TRANSPOSE_TILE, hi)
        for i in range(matrix.shape[0]):
            for j in range(first, last):
                out[j, i] = np.uint32(matrix[i, j])


def copy_rows(src, dst):
    """dst[:] = src for arrays of one shape that do not overlap, in pieces of the rows on the threads of
    ``hezk.threads``."""
    rows = src.shape[0]
    width = max(1, src.size // max(1, rows))
    flat_src, flat_dst = src.reshape(-1), dst.reshape(-1)
    parallel(lambda lo, hi: _copy_range(flat_src, flat_dst, lo * width, hi * width), rows,
             max(1, PARALLEL_MIN_ELEMENTS >> 1), work_per_item=width)   # a copy: 1 MB pieces at least


@numba.njit(cache=True, nogil=True)
def _copy_range(src, dst, lo, hi):
    for i in range(lo, hi):
        dst[i] = src[i]


@numba.njit(cache=True, nogil=True)
def _fold_add_planes_range(table, r, values, block, dst, lo, hi):
    """Entries lo <= j < hi of ``fold_add_planes`` into dst[j - lo] (an F_p4 table), plane by plane."""
    for plane in range(lo // block, (hi - 1) // block + 1):
        first, stop = max(lo, plane * block), min(hi, (plane + 1) * block)
        _fold_add_run(table[2 * first:2 * stop], r, values[plane], dst[first - lo:stop - lo])


@numba.njit(cache=True, nogil=True)
def _fold_add_run(t, r, v, o):
    """o[j] = t[2j] + r (t[2j+1] - t[2j]) + v (F_p4). The loop of a kernel lives in a function of its own whose
    arrays are its arguments, indexed from 0: the same loop over views sliced at a runtime offset inside the
    kernel ran 2.5-3x slower (F_p4 tables; measured on 2^22-entry folds)."""
    r0, r1, r2, r3 = r[0], r[1], r[2], r[3]
    v0, v1, v2, v3 = v[0], v[1], v[2], v[3]
    for j in range(o.shape[0]):
        l0, l1, l2, l3 = t[2 * j, 0], t[2 * j, 1], t[2 * j, 2], t[2 * j, 3]
        p0, p1, p2, p3 = ext_mul4(subp(t[2 * j + 1, 0], l0), subp(t[2 * j + 1, 1], l1),
                                   subp(t[2 * j + 1, 2], l2), subp(t[2 * j + 1, 3], l3), r0, r1, r2, r3)
        o[j, 0] = addp(addp(l0, p0), v0)
        o[j, 1] = addp(addp(l1, p1), v1)
        o[j, 2] = addp(addp(l2, p2), v2)
        o[j, 3] = addp(addp(l3, p3), v3)


@numba.njit(cache=True, nogil=True)
def _fold_add_planes_base_range(table, r, values, block, dst, lo, hi):
    """``_fold_add_planes_range`` for a base table."""
    r0, r1, r2, r3 = r[0], r[1], r[2], r[3]
    for plane in range(lo // block, (hi - 1) // block + 1):
        v0, v1, v2, v3 = values[plane, 0], values[plane, 1], values[plane, 2], values[plane, 3]
        first, stop = max(lo, plane * block), min(hi, (plane + 1) * block)
        t, o = table[2 * first:2 * stop], dst[first - lo:stop - lo]
        for j in range(stop - first):
            low = t[2 * j]
            d = subp(t[2 * j + 1], low)
            o[j, 0] = (r0 * d % P + v0 + low) % P
            o[j, 1] = (r1 * d % P + v1) % P
            o[j, 2] = (r2 * d % P + v2) % P
            o[j, 3] = (r3 * d % P + v3) % P


#: eq tables from this many variables on build their later variables' doublings in pieces on the threads (each
#: doubling's pairs are independent); below it, one compiled pass (LeNet-5's batch proof: 109 tables, 0.16 s serial)
EQ_SPLIT_VARS = 14


def eq_table_split(point, out):
    """:func:`eq_table_into` with each doubling from 2^EQ_SPLIT_VARS entries on in pieces of its pairs on the
    threads of ``hezk.threads``: the same products in the same order per entry, so the same table."""
    first = min(point.shape[0], EQ_SPLIT_VARS)
    eq_table_into(point[:first], out[:1 << first])
    for b in range(first, point.shape[0]):
        size = 1 << b
        parallel(lambda lo, hi: _eq_double_range(point[b], out, size, lo, hi), size, PARALLEL_MIN_ENTRIES)


@numba.njit(cache=True, nogil=True)
def _eq_double_range(r, out, size, lo, hi):
    """One doubling of :func:`eq_table_into` by r for the pairs lo <= i < hi: out[i + size] = out[i] r,
    out[i] -= out[i + size]."""
    r0, r1, r2, r3 = r[0], r[1], r[2], r[3]
    for i in range(lo, hi):
        ext_mul_into(out[i, 0], out[i, 1], out[i, 2], out[i, 3], r0, r1, r2, r3, out, i + size)
        for c in range(4):
            a, h = out[i, c], out[i + size, c]
            out[i, c] = a - h if a >= h else a + P - h


@numba.njit(cache=True)
def eq_table_into(point, out):
    """out[i] = eq(point, bits(i)) for a (k, 4) point, out (2^k, 4): one variable at a time in place (x_b the
    high bit of the table so far: the x_b = 1 half is table r_b, the x_b = 0 half table - table r_b).
    The twin is :func:`proofs.mle._eq_table_numpy`."""
    out[0, 0], out[0, 1], out[0, 2], out[0, 3] = 1, 0, 0, 0
    size = 1
    for b in range(point.shape[0]):
        r0, r1, r2, r3 = point[b, 0], point[b, 1], point[b, 2], point[b, 3]
        for i in range(size):
            ext_mul_into(out[i, 0], out[i, 1], out[i, 2], out[i, 3], r0, r1, r2, r3, out, i + size)
            for c in range(4):
                a, h = out[i, c], out[i + size, c]
                out[i, c] = a - h if a >= h else a + P - h
        size *= 2


def transposed_matmul(a, b, out):
    """out[j, k] = sum_i a[i, k] b[i, j] mod p for canonical a (n, K), b (n, m), out (m, K): a^T b transposed, each
    product reduced as it is added (sums of < 2^33 residues fit a uint64). The twin is the float-limb
    :func:`proofs.field.matmul`. Pieces of the output rows j on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _transposed_matmul_rows(a, b, out, lo, hi), b.shape[1], PARALLEL_MIN_ENTRIES,
             work_per_item=a.shape[0] * a.shape[1])


_TWO_32 = np.uint64((1 << 32) % 2013265921)   #: 2^32 mod p
_LOW_32 = np.uint64(0xFFFFFFFF)
#: Rows of ``transposed_matmul`` added between reductions: each partly reduced product (p >> 32) (2^32 mod p) +
#: (p mod 2^32) of residues p < 2^62 is below 2.54e17, so 64 of them and a residue stay below 2^64
MATMUL_ROWS_PER_REDUCTION = 64


@numba.njit(cache=True, nogil=True)
def _transposed_matmul_rows(a, b, out, lo, hi):
    """Rows lo <= j < hi of ``transposed_matmul``: products partly reduced (shift, multiply, mask: no division)
    and the accumulators reduced every MATMUL_ROWS_PER_REDUCTION rows i."""
    n, k_count = a.shape[0], a.shape[1]
    acc = np.zeros((hi - lo, k_count), dtype=np.uint64)
    pending = 0
    for i in range(n):
        bi = b[i, lo:hi]
        ai = a[i]
        for j in range(hi - lo):
            v = bi[j]
            if v == 0:
                continue
            row = acc[j]
            for k in range(k_count):
                p = ai[k] * v
                row[k] += (p >> np.uint64(32)) * _TWO_32 + (p & _LOW_32)
        pending += 1
        if pending == MATMUL_ROWS_PER_REDUCTION:
            for j in range(hi - lo):
                row = acc[j]
                for k in range(k_count):
                    row[k] %= P
            pending = 0
    ov = out[lo:hi]
    for j in range(hi - lo):
        for k in range(k_count):
            ov[j, k] = acc[j, k] % P


#: Products a[b, i] w[o, i] in one piece of :func:`int_affine` at least (below: one thread)
PARALLEL_MIN_PRODUCTS = 1 << 18


def int_affine(a, weight, bias, out):
    """out[b, o] = sum_i a[b, i] weight[o, i] + bias[o] in int64 ((B, I), (O, I), (O,) -> (B, O)): an integer
    layer of the prover's forward pass (twin: ``a @ weight.T + bias`` in numpy, :func:`proofs.quantize.forward_trace`;
    the caller bounds every accumulator below 2^62, and integer sums are exact in any order). Pieces of the output
    columns o on the threads of ``hezk.threads``."""
    parallel(lambda lo, hi: _int_affine_range(a, weight, bias, out, lo, hi), weight.shape[0], PARALLEL_MIN_PRODUCTS,
             work_per_item=a.shape[0] * a.shape[1])


@numba.njit(cache=True, nogil=True)
def _int_affine_range(a, weight, bias, out, lo, hi):
    """Columns lo <= o < hi of ``int_affine``: four weight rows at a time against each input row (each row of
    ``a`` read once per four outputs, from cache)."""
    rows, width = a.shape[0], a.shape[1]
    o = lo
    while o < hi:
        count = min(4, hi - o)
        for b in range(rows):
            x = a[b]
            s0 = s1 = s2 = s3 = np.int64(0)
            if count == 4:
                w0, w1, w2, w3 = weight[o], weight[o + 1], weight[o + 2], weight[o + 3]
                for i in range(width):
                    v = x[i]
                    s0 += v * w0[i]
                    s1 += v * w1[i]
                    s2 += v * w2[i]
                    s3 += v * w3[i]
                out[b, o] = s0 + bias[o]
                out[b, o + 1] = s1 + bias[o + 1]
                out[b, o + 2] = s2 + bias[o + 2]
                out[b, o + 3] = s3 + bias[o + 3]
            else:
                for k in range(count):
                    w = weight[o + k]
                    s = np.int64(0)
                    for i in range(width):
                        s += x[i] * w[i]
                    out[b, o + k] = s + bias[o + k]
        o += count


def all_canonical(flat) -> bool:
    """Whether every entry of a contiguous flat uint64 array is < p (twin: ``np.all(a < p)``, field.is_canonical),
    pieces on the threads of ``hezk.threads``."""
    return all(parallel(lambda lo, hi: _max_range(flat, lo, hi) < P, flat.shape[0], PARALLEL_MIN_ELEMENTS))


@numba.njit(cache=True, nogil=True)
def _max_range(flat, lo, hi):
    top = np.uint64(0)
    for i in range(lo, hi):
        v = flat[i]
        top = v if v > top else top
    return top


def stack_into(arrays, out):
    """out[k] = arrays[k] for a list of same-shape contiguous arrays (twin: ``np.stack``), in pieces of each
    array's rows on the threads of ``hezk.threads`` (one copy each, not a serial numpy pass)."""
    for k, array in enumerate(arrays):
        copy_rows(array, out[k])
