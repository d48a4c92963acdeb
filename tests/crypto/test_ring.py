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


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("ntt", [False, True])
def test_rescale_rounds(ring, count, ntt):
    a = _poly(ring, count)
    t = math.prod(MODULI[-count:])
    out = (a.to_ntt() if ntt else a).rescale(count)
    assert out.is_ntt == ntt and out.idx == IDX[:-count]
    for got, x in zip(_ints(out), _ints(a)):
        assert abs(got - (2 * x + t) // (2 * t)) <= count  # fast conversion's u·T term: at most `count` off


def test_extend_and_mod_down(ring):
    q_idx, p_idx = IDX[:3], IDX[3:]
    a = _poly(ring, 9, q_idx)
    ext = a.to_ntt().extend(p_idx)
    assert ext.idx == IDX and ext.is_ntt
    q = math.prod(MODULI[:3])
    for x, y in zip(_ints(a), _ints(ext)):
        assert (y - x) % q == 0 and abs(y - x) // q <= 3  # [x]_Q + u·Q, u < 3, vs centered x
    # mod_down(x·P) == x: multiply by P then divide by P
    p = math.prod(MODULI[3:])
    scaled = ext * (p % BIG)
    back = scaled.mod_down(p_idx)
    assert back.idx == q_idx
    diff = [(u - v) % q for u, v in zip(_ints(back), _ints(a))]
    assert all(d in (0, 1, 2, q - 1, q - 2) for d in diff)


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
