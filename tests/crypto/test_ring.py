"""RNSPoly operations against big-int arithmetic on the CRT-composed coefficients."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ContextMismatchError, ParameterError
from crypto.modarith import centered, find_ntt_primes
from crypto.ring import RingContext, RNSPoly
from tests.reference.naive_ntt import naive_negacyclic_mul

N = 32
MODULI = find_ntt_primes(30, 3, N) + find_ntt_primes(25, 2, N)
IDX = tuple(range(len(MODULI)))
BIG = math.prod(MODULI)


@pytest.fixture(scope="module", params=["numpy", "numba"])
def ring(request):
    return RingContext(N, MODULI, backend=request.param)


def _poly(ring, seed, idx=IDX):
    rng = np.random.default_rng(seed)
    data = np.array([rng.integers(0, ring.moduli[i], N) for i in idx], dtype=np.uint64)
    return RNSPoly(ring, data, idx, False)


def _ints(p):
    return [int(v) for v in p.to_ints()]


@given(seed=st.integers(0, 2**32))
@settings(max_examples=10)
def test_add_sub_neg_mul(ring, seed):
    a, b = _poly(ring, seed), _poly(ring, seed + 1)
    ai, bi = _ints(a), _ints(b)
    cen = lambda vs: [int(v) for v in centered(np.array(vs, dtype=object), BIG)]
    assert _ints(a + b) == cen([x + y for x, y in zip(ai, bi)])
    assert _ints(a - b) == cen([x - y for x, y in zip(ai, bi)])
    assert _ints(-a) == cen([-x for x in ai])
    prod = (a.to_ntt() * b.to_ntt()).to_coeff()
    assert _ints(prod) == cen(naive_negacyclic_mul([x % BIG for x in ai], [y % BIG for y in bi], BIG))
    assert _ints(a * 7) == cen([7 * x for x in ai])


@pytest.mark.parametrize("g", [3, 5, 25, 2 * N - 1])
def test_automorphism_both_forms(ring, g):
    a = _poly(ring, g)
    ai = _ints(a)
    ref = [0] * N
    for j, c in enumerate(ai):
        e = j * g % (2 * N)
        ref[e % N] += -c if e >= N else c
    assert _ints(a.automorphism(g)) == ref
    assert _ints(a.to_ntt().automorphism(g)) == ref


def _round_div(x: int, t: int) -> int:
    """round(x / t) for odd t (no ties): the big-integer reference of rescale and mod_down."""
    return (2 * x + t) // (2 * t)


def _values(rng, limbs, count):
    """Random centred coefficients over the first ``limbs`` moduli, with the hard cases planted: the
    ends of the range, and x ≡ ±⌊T/2⌋ mod T (the nearest a quotient gets to a tie, T = the dropped primes)."""
    big, t = math.prod(MODULI[:limbs]), math.prod(MODULI[limbs - count:limbs])
    values = [int.from_bytes(rng.bytes(24), "little") % big - big // 2 for _ in range(N)]
    m = int.from_bytes(rng.bytes(16), "little") % (big // t) - big // t // 2
    values[:6] = [big // 2, -(big // 2), m * t + t // 2, m * t - t // 2, t // 2 + 1, 0]
    return values


@given(seed=st.integers(0, 2**32 - 1), limbs=st.integers(2, len(MODULI)), data=st.data())
@settings(max_examples=40, deadline=None)
def test_rescale_is_exact_round(ring, seed, limbs, data):
    """rescale(count) == round(c / T) coefficient by coefficient, c the centred CRT value (exact)."""
    count = data.draw(st.integers(1, limbs - 1), label="count")
    ntt = data.draw(st.booleans(), label="ntt")
    rng = np.random.default_rng(seed)
    values = _values(rng, limbs, count)
    idx = IDX[:limbs]
    a = RNSPoly.from_ints(ring, np.array(values, dtype=object), idx, is_ntt=ntt)
    out = a.rescale(count)
    assert out.is_ntt == ntt and out.idx == idx[:-count]
    t = math.prod(MODULI[limbs - count:limbs])
    assert _ints(out) == [_round_div(x, t) for x in values]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_rescale_near_ties(ring, count):
    """Quotients a hair from x.5 (c ≡ ±(⌊T/2⌋ − j) mod T): one exact rounding by T, for a level of
    one, two or three primes (a float estimate of c mod T cannot tell these apart for T > 2^53)."""
    t = math.prod(MODULI[-count:])
    values = [k * t + s * (t // 2 - j) for k in range(-2, 2) for s in (1, -1) for j in range(4)]
    a = RNSPoly.from_ints(ring, np.array(values, dtype=object), IDX, is_ntt=True)
    assert _ints(a.rescale(count)) == [_round_div(x, t) for x in values]


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10, deadline=None)
def test_extend_and_mod_down_are_exact(ring, seed):
    q_idx, p_idx = IDX[:3], IDX[3:]
    a = _poly(ring, seed, q_idx)
    ext = a.to_ntt().extend(p_idx)
    assert ext.idx == IDX and ext.is_ntt
    q = math.prod(MODULI[:3])
    for x, y in zip(_ints(a), _ints(ext)):
        assert (y - x) % q == 0 and abs(y - x) // q <= 3  # [x]_Q + u·Q, u < 3, vs centered x
    # mod_down(x·P) == x exactly: multiply by P then divide by P
    p = math.prod(MODULI[3:])
    back = (ext * (p % BIG)).mod_down(p_idx)
    assert back.idx == q_idx and _ints(back) == _ints(a)
    # and round(c / P) for any c over Q·P
    values = _values(np.random.default_rng(seed), len(MODULI), len(p_idx))
    c = RNSPoly.from_ints(ring, np.array(values, dtype=object), IDX, is_ntt=True)
    assert _ints(c.mod_down(p_idx)) == [_round_div(x, p) for x in values]


def test_errors(ring):
    a = _poly(ring, 1)
    with pytest.raises(ContextMismatchError, match="bases"):
        a + _poly(ring, 2, IDX[:3])
    with pytest.raises(ContextMismatchError, match="NTT form"):
        a + a.to_ntt()
    with pytest.raises(ParameterError, match="NTT form"):
        a * a
    with pytest.raises(ParameterError, match="odd"):
        a.automorphism(4)
    with pytest.raises(ParameterError, match="shape"):
        RNSPoly(ring, np.zeros((2, N), dtype=np.uint64), IDX, False)
    for count in (0, len(IDX), True):
        with pytest.raises(ParameterError, match="rescale count"):
            a.rescale(count)
    with pytest.raises(ParameterError, match="trailing"):
        a.mod_down(IDX[:2])
    with pytest.raises(ValueError):
        a.data[0, 0] = 1  # immutable


def test_from_ints_big_and_small(ring):
    vals = np.array([(-1) ** i * (3**i) for i in range(N)], dtype=object)
    p = RNSPoly.from_ints(ring, vals, IDX)
    assert _ints(p) == [int(v) for v in vals]
    small = np.arange(-N // 2, N // 2, dtype=np.int64)
    assert _ints(RNSPoly.from_ints(ring, small, IDX, is_ntt=True)) == small.tolist()


def test_backend_per_call_is_bit_identical(ring):
    a = _poly(ring, 5)
    for name in ("numpy", "numba", "cross"):
        assert np.array_equal(ring.ntt(a.data, IDX, backend=name), a.to_ntt().data)
        assert np.array_equal(ring.intt(ring.ntt(a.data, IDX, backend=name), IDX, backend=name), a.data)


# -- issue 19: the overshoot branch of the key switch's lazy modular product ------------------------------------
@pytest.mark.parametrize("bits", [30, 31])
def test_mulmod_lazy_overshoot_matches_big_integers(bits):
    """x*y = k q - s for small s with x*y > 2^53: float64 rounds p up past k q, the quotient estimate is k, r = p - k q
    wraps below zero, and min(r, r + q) must give q - s. Checked against Python integers; the wrapping branch
    is hit (asserted: each s gets a (x, y) pair that overshoots)."""
    from crypto.keyswitch import _mulmod_lazy

    q = find_ntt_primes(bits, 1, 1 << 10)[0]
    rng = np.random.default_rng(bits)
    overshoots = 0
    for s in range(1, 33):
        for _ in range(400):
            y = int(rng.integers(q // 2, q))
            x = (-s * pow(y, -1, q)) % q
            got = int(_mulmod_lazy(np.uint64(x), np.uint64(y), np.uint64(q), 1.0 / q))
            assert got < 2 * q and got % q == (x * y) % q == q - s
            if int(np.uint64(float(x * y) * (1.0 / q))) * q > x * y:  # the estimate overshot
                overshoots += 1
                break
    assert overshoots == 32


def test_small_residues_match_python_mod_and_from_ints_paths_agree():
    """small_residues (c + q where c < 0) equals Python's c mod q; from_ints gives the same polynomial
    through it (small coefficients, in-place NTT) as through the general int64 and big-int paths."""
    from crypto.modarith import find_ntt_primes
    from crypto.ring import RingContext, RNSPoly, small_residues
    n = 64
    moduli = find_ntt_primes(30, 3, n)
    ring = RingContext(n, moduli)
    rng = np.random.default_rng(5)
    c = rng.integers(-40, 41, n)
    c[:3] = [-(min(moduli) - 1), min(moduli) - 1, 0]
    got = small_residues(c, ring.q_column(range(3)))
    assert [[int(v) for v in row] for row in got] == [[int(x) % q for x in c] for q in moduli]
    small = RNSPoly.from_ints(ring, c, range(3), is_ntt=True)
    big = RNSPoly.from_ints(ring, np.array([int(x) for x in c], dtype=object), range(3), is_ntt=True)
    assert np.array_equal(small.data, big.data) and not small.data.flags.writeable
    wide = c * (2**40)           # |c| >= q: the general int64 path
    assert [int(v) for v in RNSPoly.from_ints(ring, wide, (1,)).data[0]] == [int(x) % moduli[1] for x in wide]


def test_wide_residues_match_python_mod():
    """wide_residues_rows (float quotient estimate, int64 corrections) equals Python's c mod q for int64
    coefficients up to the extremes, small and large moduli."""
    from crypto._ntt_kernels import wide_residues_rows
    rng = np.random.default_rng(6)
    c = np.concatenate([rng.integers(-2**63, 2**63 - 1, 500, dtype=np.int64, endpoint=True),
                        rng.integers(-2**40, 2**40, 500, dtype=np.int64),
                        np.array([-2**63, 2**63 - 1, -1, 0, 1, 2**62, -2**62], dtype=np.int64)])
    q = np.array([17, 97, 7681, 2**23 + 2**17 + 1, 2147221513, 2**31 - 1], dtype=np.uint64)
    got = wide_residues_rows(c, q, np.empty((len(q), len(c)), dtype=np.uint64))
    assert [[int(v) for v in row] for row in got] == [[int(x) % int(qi) for x in c] for qi in q]


@given(seed=st.integers(0, 2**32 - 1), log_small=st.integers(1, 5), big=st.booleans())
@settings(max_examples=25, deadline=None)
def test_subring_ntt_is_the_ntt_of_the_spread_polynomial(ring, seed, log_small, big):
    """m'(X^(N/n')) from m''s n' coefficients: the small NTT repeated equals the full NTT of the spread
    coefficients (naive twin: from_ints of the length-N vector with m' at multiples of N/n')."""
    rng = np.random.default_rng(seed)
    n_small = 1 << log_small
    small = rng.integers(-(1 << 62) if big else -1000, (1 << 62) if big else 1000, n_small, dtype=np.int64)
    spread = np.zeros(N, dtype=np.int64)
    spread[::N // n_small] = small
    idx = IDX[1:] if seed % 2 else IDX
    fast = RNSPoly.from_subring_ints(ring, small, idx)
    assert fast.is_ntt and fast.idx == idx
    assert np.array_equal(fast.data, RNSPoly.from_ints(ring, spread, idx, is_ntt=True).data)
    objects = np.array([int(c) * 3**40 for c in small[:n_small]], dtype=object)  # Python ints past int64
    spread_objects = np.zeros(N, dtype=object)
    spread_objects[::N // n_small] = objects
    assert np.array_equal(RNSPoly.from_subring_ints(ring, objects, idx).data,
                          RNSPoly.from_ints(ring, spread_objects, idx, is_ntt=True).data)


@pytest.mark.parametrize("shape", [(len(IDX), 3), (len(IDX), 64), (2, 4), (len(IDX),)])
def test_subring_ntt_refuses_bad_shapes(ring, shape):
    with pytest.raises(ParameterError, match="subring_ntt"):
        ring.subring_ntt(np.zeros(shape, dtype=np.uint64), IDX)
