"""The vectorised primality test (``is_prime_u31_array``) against its scalar twin ``is_prime_u31``, and the prime
search built on it (``ntt_primes_of_bits``, blocks of candidates) against the one-candidate-at-a-time search it
replaced: the same primes in the same order, so every parameter set is unchanged (planning enumerates thousands
of candidate primes, many times: 4096 30-bit primes took 0.15 s, now 0.024 s, and a run already walked is kept
for the process; a small model's plan 0.38 -> 0.025 s)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from crypto.modarith import MAX_MODULUS_BITS, is_prime_u31, is_prime_u31_array, ntt_primes_of_bits


def _naive_primes(bits, n, exclude=frozenset()):
    step = 2 * n
    q = ((2**bits - 2) // step) * step + 1
    while q >= 2 ** (bits - 1):
        if q not in exclude and is_prime_u31(q):
            yield q
        q -= step


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**MAX_MODULUS_BITS - 1), min_size=0, max_size=300))
def test_the_array_test_is_the_scalar_one(values):
    assert is_prime_u31_array(values).tolist() == [is_prime_u31(v) for v in values]


def test_small_numbers_and_strong_pseudoprimes():
    values = list(range(2000)) + [2047, 1373653, 25326001, 3215031751 - 2**31, 2**31 - 1, 2**31 - 2, 2**31 - 19]
    assert is_prime_u31_array(values).tolist() == [is_prime_u31(v) for v in values]
    assert is_prime_u31_array(np.zeros((0,), dtype=np.int64)).shape == (0,)
    assert is_prime_u31_array(np.array([[7, 9], [11, 15]])).tolist() == [[True, False], [True, False]]


@pytest.mark.parametrize("bad", [-1, 2**31])
def test_out_of_range_is_refused(bad):
    with pytest.raises(ParameterError, match="2\\^31"):
        is_prime_u31_array([3, bad])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, MAX_MODULUS_BITS), st.integers(0, 14), st.integers(1, 300), st.data())
def test_the_block_search_yields_the_naive_sequence(bits, log_n, count, data):
    n = 1 << log_n
    expected = list(itertools.islice(_naive_primes(bits, n), count))
    exclude = frozenset(data.draw(st.lists(st.sampled_from(expected), max_size=5))) if expected else frozenset()
    got = list(itertools.islice(ntt_primes_of_bits(bits, n, exclude), count))
    assert got == [q for q in itertools.islice(_naive_primes(bits, n, exclude), count)]


def test_threads_sharing_a_run_each_see_the_naive_sequence():
    """The primes found are kept per (bits, n) for the process: threads walking one run at once (a fresh one:
    n = 2^3 is used nowhere else) each get the whole sequence, in order."""
    import threading

    bits, n, count = 27, 8, 3000
    expected = list(itertools.islice(_naive_primes(bits, n), count))
    results = [None] * 4

    def walk(k):
        results[k] = list(itertools.islice(ntt_primes_of_bits(bits, n), count))

    threads = [threading.Thread(target=walk, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == expected for result in results)
