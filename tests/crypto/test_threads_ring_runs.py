"""A scattered basis's NTT (runs of consecutive moduli, as a key-switching digit's extension: Q_ℓ less the digit,
then P) is split over the threads as one range of limbs: balanced pieces, each doing its share of every run, bit for
bit the per-limb transforms at any thread count."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.threads as T
from crypto.modarith import find_ntt_primes
from crypto.ring import RingContext

N = 256
MODULI = find_ntt_primes(30, 12, N)


@pytest.fixture
def splits(monkeypatch):
    """Kernels split down to single limbs; returns the piece lists of the calls run in several pieces."""
    import crypto.cross
    import crypto.ring
    monkeypatch.setattr(crypto.cross, "PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(crypto.ring, "PARALLEL_MIN_WORK", 1)
    seen, run = [], T.run_chunks

    def counting(function, chunks):
        if len(chunks) > 1:
            seen.append(list(chunks))
        return run(function, chunks)

    monkeypatch.setattr(T, "run_chunks", counting)
    before = T.get_threads()
    yield seen
    T.set_threads(before)


def per_limb(ring, method, data, idx):
    """The naive twin: each limb transformed on its own (a one-limb basis is one run)."""
    return np.concatenate([getattr(ring, method)(np.ascontiguousarray(data[r:r + 1]), (i,))
                           for r, i in enumerate(idx)])


@settings(max_examples=15, deadline=None)
@given(st.lists(st.booleans(), min_size=len(MODULI), max_size=len(MODULI)).filter(lambda m: sum(m) >= 2),
       st.integers(0, 2**32 - 1))
def test_scattered_basis_ntt_matches_per_limb_transforms_at_any_thread_count(mask, seed):
    ring = RingContext(N, MODULI, backend="fourstep")
    idx = tuple(i for i, keep in enumerate(mask) if keep)
    rng = np.random.default_rng(seed)
    data = np.array([rng.integers(0, MODULI[i], N) for i in idx], dtype=np.uint64)
    want_f, want_i = per_limb(ring, "ntt", data, idx), per_limb(ring, "intt", data, idx)
    for threads in (1, 2, 3):
        with T.using(threads):
            assert np.array_equal(ring.ntt(data, idx), want_f)
            assert np.array_equal(ring.intt(data, idx), want_i)
            out = np.empty_like(data)
            assert ring.ntt(data, idx, out=out) is out and np.array_equal(out, want_f)
            copy = data.copy()                                   # in place (out = data) too
            assert np.array_equal(ring.intt(copy, idx, out=copy), want_i)


def test_runs_are_split_as_one_balanced_range(splits):
    ring = RingContext(N, MODULI, backend="fourstep")
    idx = (0, 1, 2, 3, 5, 6, 7, 8, 11)              # runs of 4, 4 and 1 limbs: 9 limbs
    data = np.array([np.arange(N) % MODULI[i] for i in idx], dtype=np.uint64)
    T.set_threads(2)
    ring.ntt(data, idx, out=np.empty_like(data))
    assert_one_split(splits, [(0, 4), (4, 9)])       # one split call over the 9 limbs (not 2 + 2, 2 + 2 and 1)
    splits.clear()
    ring.intt(data, idx)
    assert_one_split(splits, [(0, 4), (4, 9)])
    splits.clear()
    ring.ntt(data[:4], idx[:4])                      # one run: the backend splits it, as before
    assert_one_split(splits, [(0, 2), (2, 4)])


def assert_one_split(splits, top):
    """``top`` is the first split; any later one is a piece's own call cut again for a thread that had finished
    its piece (hezk.threads' help queue: timing decides whether it happens), within that piece's limbs."""
    assert splits[0] == top
    longest = max(b - a for a, b in top)
    assert all(chunks[0][0] == 0 and chunks[-1][1] <= longest for chunks in splits[1:]), splits
