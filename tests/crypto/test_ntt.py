"""Every NTT backend against the O(n²) definition, and against each other bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from crypto.modarith import find_ntt_primes
from crypto.ntt import BasisConversion, NTTTables, get_backend
from crypto.modarith import crt_compose
from tests.crypto.ckks_helpers import random_residues
from tests.reference.naive_ntt import naive_negacyclic_mul, naive_negacyclic_ntt

BACKENDS = ["numpy", "numba"]


@pytest.mark.parametrize("backend", BACKENDS)
@given(log_n=st.integers(1, 7), bits=st.integers(20, 31), seed=st.integers(0, 2**32))
@settings(max_examples=15)
def test_forward_matches_naive(backend, log_n, bits, seed):
    n = 1 << log_n
    moduli = find_ntt_primes(bits, 2, n)
    a = random_residues(moduli, n, np.random.default_rng(seed))
    tables = NTTTables(n, moduli)
    got = get_backend(backend).forward(a, tables)
    for row, q, out in zip(a, moduli, got):
        assert [int(v) for v in out] == naive_negacyclic_ntt([int(v) for v in row], q)
    assert np.array_equal(get_backend(backend).inverse(got, tables), a)


@pytest.mark.parametrize("log_n", [10, 12, 14])
def test_backends_bit_identical_and_convolve(log_n):
    n = 1 << log_n
    moduli = find_ntt_primes(30, 3, n)
    rng = np.random.default_rng(log_n)
    a, b = random_residues(moduli, n, rng), random_residues(moduli, n, rng)
    tables = NTTTables(n, moduli)
    outs = [get_backend(name).forward(a, tables) for name in BACKENDS]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    # the convolution theorem: pointwise product in NTT form is the negacyclic product
    q = tables.q[:, None]
    prod = get_backend("numba").inverse(outs[0] * get_backend("numba").forward(b, tables) % q, tables)
    if log_n == 10:
        ref = naive_negacyclic_mul([int(x) for x in a[0]], [int(x) for x in b[0]], moduli[0])
        assert [int(x) for x in prod[0]] == ref


@pytest.mark.parametrize("backend", BACKENDS)
@given(seed=st.integers(0, 2**32), k_from=st.integers(1, 6), k_to=st.integers(1, 4))
@settings(max_examples=10)
def test_basis_conversion_matches_big_ints(backend, seed, k_from, k_to):
    n = 16
    primes = find_ntt_primes(31, k_from + k_to, n)
    src, dst = primes[:k_from], primes[k_from:]
    x = random_residues(src, n, np.random.default_rng(seed))
    conv = BasisConversion(src, dst)
    got = get_backend(backend).convert_basis(x, conv)
    big = 1
    for q in src:
        big *= q
    values = crt_compose(x, src)
    for j, p in enumerate(dst):
        for c in range(n):
            diff = (int(got[j, c]) - int(values[c])) % p
            # fast conversion: x + u·Q with 0 <= u < k_from
            assert any(diff == (u * big) % p for u in range(k_from))


def test_unknown_backend_and_bad_modulus():
    with pytest.raises(ParameterError, match="backend"):
        get_backend("gpu")
    with pytest.raises(ParameterError, match="2N"):
        NTTTables(16, [101])  # 101 ≢ 1 mod 32


@pytest.mark.parametrize("backend", ["numpy", "numba", "fourstep", "auto"])
@pytest.mark.parametrize("log_n", [4, 7])
def test_ntt_into_out_and_in_place_equal_naive(backend, log_n):
    """RingContext.ntt/intt with ``out`` (a separate buffer, or the input itself: in place), over a scattered
    basis (two runs), equal the naive transform and the allocating call."""
    from crypto.ring import RingContext
    n = 1 << log_n
    moduli = find_ntt_primes(30, 5, n)
    ring = RingContext(n, moduli, backend)
    idx = (0, 1, 3, 4)
    rng = np.random.default_rng(log_n)
    a = np.stack([rng.integers(0, moduli[i], n, dtype=np.int64) for i in idx]).astype(np.uint64)
    expected = np.array([naive_negacyclic_ntt([int(x) for x in row], moduli[i]) for row, i in zip(a, idx)],
                        dtype=np.uint64)
    assert np.array_equal(ring.ntt(a, idx), expected)
    out = np.full_like(a, 3)
    assert ring.ntt(a, idx, out=out) is out and np.array_equal(out, expected)
    same = a.copy()
    ring.ntt(same, idx, out=same)
    assert np.array_equal(same, expected)
    ring.intt(same, idx, out=same)
    assert np.array_equal(same, a)
    with pytest.raises(ParameterError):
        ring.ntt(a, idx, out=np.empty((len(idx), n + 1), dtype=np.uint64))
