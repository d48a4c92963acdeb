"""Modular kernels against Python big-int arithmetic."""
import numpy as np
import pytest
import sympy
from hypothesis import given, strategies as st

from crypto.errors import ParameterError
from crypto.modarith import (Barrett, centered, crt_compose, find_ntt_primes, inv_mod, is_prime_u31, mul_shoup,
                             primitive_2n_root, prime_factors, shoup_precompute, smallest_primitive_root)

primes_31 = st.integers(3, 2**31 - 1).map(lambda x: sympy.prevprime(x + 1) if x > 2 else 3)


@given(q=primes_31, data=st.data())
def test_barrett_matches_python_mod(q, data):
    b = Barrett(q)
    top = (1 << (2 * b.k)) - 1  # the full input range of the reduction
    xs = data.draw(st.lists(st.integers(0, top), min_size=1, max_size=50))
    xs += [0, top, (q - 1) ** 2]
    got = b.reduce(np.array(xs, dtype=np.uint64))
    assert [int(v) for v in got] == [x % q for x in xs]


@given(q=primes_31, data=st.data())
def test_barrett_and_shoup_mul(q, data):
    a = data.draw(st.lists(st.integers(0, q - 1), min_size=1, max_size=30))
    w = data.draw(st.integers(0, q - 1))
    arr = np.array(a, dtype=np.uint64)
    assert [int(v) for v in Barrett(q).mul(arr, np.uint64(w))] == [x * w % q for x in a]
    got = mul_shoup(arr, np.uint64(w), shoup_precompute(w, q), q)
    assert [int(v) for v in got] == [x * w % q for x in a]


def test_barrett_refuses_wide_modulus():
    with pytest.raises(ParameterError, match="2\\^31"):
        Barrett(2**31 + 11)


@pytest.mark.parametrize("log_n", [4, 10, 14, 16])
def test_ntt_primes_and_roots(log_n):
    n = 1 << log_n
    primes = find_ntt_primes(28, 3, n)
    assert len(set(primes)) == 3
    for q in primes:
        assert sympy.isprime(q) and q % (2 * n) == 1 and q.bit_length() == 28
        psi = primitive_2n_root(q, n)
        assert pow(psi, n, q) == q - 1  # order exactly 2n


@given(st.integers(0, 2**31 - 1))
def test_is_prime_u31_matches_sympy(q):
    assert is_prime_u31(q) == sympy.isprime(q)


def test_is_prime_u31_on_small_numbers_and_strong_pseudoprimes():
    assert [q for q in range(200) if is_prime_u31(q)] == list(sympy.primerange(0, 200))
    # strong pseudoprimes to bases 2, 3, 5 (and 2): caught by base 7 or another base
    for m in (2047, 1373653, 25326001, 3215031751 % 2**31, 2**31 - 1, 2**31 - 3):
        assert is_prime_u31(m) == sympy.isprime(m), m
    with pytest.raises(ParameterError):
        is_prime_u31(2**31)


@given(primes_31)
def test_smallest_primitive_root_matches_sympy(q):
    if q > 2:
        assert smallest_primitive_root(q) == sympy.primitive_root(q)
        assert prime_factors(q - 1) == tuple(sorted(sympy.factorint(q - 1)))


@pytest.mark.parametrize("preset", ["N14", "N15", "N16"])
def test_preset_roots_match_sympy(preset):
    from crypto import CKKSParameters
    params = CKKSParameters.preset(preset)
    for q in params.moduli:
        assert primitive_2n_root(q, params.n) == pow(sympy.primitive_root(q), (q - 1) // (2 * params.n), q)


def test_find_primes_reports_shortage():
    with pytest.raises(ParameterError, match="primes of 5 bits"):
        find_ntt_primes(5, 10, 4)


@given(st.lists(st.integers(-(2**200), 2**200), min_size=1, max_size=8))
def test_crt_roundtrip(values):
    moduli = find_ntt_primes(30, 8, 8)
    big = 1
    for q in moduli:
        big *= q
    residues = np.array([[v % q for v in values] for q in moduli], dtype=np.uint64)
    back = centered(crt_compose(residues, moduli), big)
    assert [int(x) for x in back] == [((v + big // 2) % big) - big // 2 if v % big > big // 2 else v % big
                                      for v in values]
    assert inv_mod(3, 7) == 5
