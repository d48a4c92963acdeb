"""Memory-bound key-switching kernels are split at the element-wise kernels' piece size: a double-hoisted giant
step's permuted sums (30 rows of N = 2^16 at N16_BOOT's lower levels) no longer stay on one thread."""
import numpy as np

import hezk.threads as T
from crypto._ntt_kernels import PARALLEL_MIN_ELEMENTS, add_permuted_into
from crypto.keyswitch import add_permuted_pair_into


def test_add_permuted_pair_is_split_at_the_element_wise_size(monkeypatch):
    rows, n = 4, PARALLEL_MIN_ELEMENTS          # 2^20 elements: below 2^20 products a piece, split before into 1
    rng = np.random.default_rng(5)
    q = np.array([1073479681, 1073184769, 1072496641, 1071513601], dtype=np.uint64)
    a, b, acc = (np.ascontiguousarray(rng.integers(0, q[:, None], (rows, n), dtype=np.uint64)) for _ in range(3))
    perm = rng.permutation(n).astype(np.int64)
    want = acc.copy()                           # the twin: two permuted additions
    add_permuted_into(want, a, perm, q)
    add_permuted_into(want, b, perm, q)
    split, run = [], T.run_chunks

    def counting(function, pieces):
        split.append(len(pieces))
        return run(function, pieces)

    monkeypatch.setattr(T, "run_chunks", counting)
    with T.using(2):
        add_permuted_pair_into(acc, a, b, perm, q)
    assert split == [2] and np.array_equal(acc, want)
