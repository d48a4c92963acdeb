"""The four-step NTT backend used from several threads at once (as the HTTP endpoint's thread pool does): its
table pool is filled on first use, and a thread must never see rows that the pool's arrays do not hold yet."""
import threading

import numpy as np

from crypto.cross import FourStepBackend
from crypto.modarith import find_ntt_primes
from crypto.ntt import NTTTables, get_backend

N, THREADS, TRIALS = 1024, 8, 6


def test_concurrent_first_use_of_a_fresh_backend_gives_the_naive_transform():
    tables = NTTTables(N, find_ntt_primes(30, 6, N))
    rng = np.random.default_rng(3)
    a = np.stack([rng.integers(0, q, N, dtype=np.uint64) for q in tables.moduli])
    subsets = [[0, 1, 2], [3, 4], [5], [0, 5], [1, 2, 3, 4]]
    expected = {tuple(s): get_backend("numba").forward(a[s], tables.subset(s)) for s in subsets}
    for _ in range(TRIALS):
        backend, start, wrong = FourStepBackend(), threading.Barrier(THREADS), []

        def work(i):
            subset = subsets[i % len(subsets)]
            start.wait()
            try:
                out = backend.forward(a[subset], tables.subset(subset))
                wrong.extend([] if np.array_equal(out, expected[tuple(subset)]) else [subset])
            except Exception as error:  # a half-filled pool shows as a KeyError or an index out of range
                wrong.append(repr(error))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not wrong
