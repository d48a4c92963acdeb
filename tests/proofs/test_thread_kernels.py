"""The provers' kernels on several threads (hezk.threads): in-place folds write no fresh buffer and equal their
one-thread results for every split; the parallel integer forward pass and small sumcheck rounds equal their twins."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.threads as T
from proofs import _basefold_kernels as BK
from proofs import _kernels as K
from proofs import field as F
from proofs.mle import _fold_numpy


@pytest.fixture
def split_everything(monkeypatch):
    """Every proofs kernel split down to single items; the thread setting restored after."""
    for module, name in [(BK, "MIN_ENTRIES"), (K, "PARALLEL_MIN_ENTRIES"), (K, "PARALLEL_MIN_ELEMENTS")]:
        monkeypatch.setattr(module, name, 1)
    before = T.get_threads()
    yield
    T.set_threads(before)


def test_fold_target_of_an_in_place_fold_writes_inside_the_table(split_everything):
    """A later piece of a fold in place writes over its own consumed inputs (no fresh buffer: first touches cost a
    page fault each); the first piece writes the output itself; a fold into a fresh array writes the array."""
    table = F.ext_random((64,), seed=1)
    out = table[:32]
    target = K.FoldTarget(out, table)
    assert target.own and not target.buffered
    first, later = target.piece(0, 16), target.piece(16, 32)
    assert first.ctypes.data == out.ctypes.data
    assert later.ctypes.data == table[32:].ctypes.data and later.shape == (16, 4)
    fresh = np.empty((32, 4), np.uint64)
    apart = K.FoldTarget(fresh, table)
    assert not apart.own and not apart.buffered
    assert apart.piece(16, 32).ctypes.data == fresh[16:].ctypes.data


def test_fold_target_buffers_other_overlaps(split_everything):
    """An output sharing the table's memory other than as its first half (or ``copy``) gets a buffer per piece."""
    table = F.ext_random((64,), seed=1)
    shifted = K.FoldTarget(table[1:33], table)
    assert not shifted.own and shifted.buffered
    assert not np.shares_memory(shifted.piece(16, 32), table)
    forced = K.FoldTarget(table[:32], table, copy=True)
    assert not forced.own and not np.shares_memory(forced.piece(16, 32), table)


@settings(max_examples=25, deadline=None)
@given(log_n=st.integers(1, 9), threads=st.integers(2, 5), planes_log=st.integers(0, 2), seed=st.integers(0, 99))
def test_in_place_folds_in_any_split_equal_the_numpy_fold(log_n, threads, planes_log, seed):
    """fold_add_planes and fold_sums in place, split in 2..5 (uneven) pieces, equal the numpy twins."""
    old = (K.PARALLEL_MIN_ENTRIES, BK.MIN_ENTRIES, T.get_threads())
    K.PARALLEL_MIN_ENTRIES = BK.MIN_ENTRIES = 1
    try:
        T.set_threads(threads)
        n = 1 << log_n
        planes = min(1 << planes_log, n // 2) if n >= 2 else 1
        table, r = F.ext_random((n,), seed=seed), F.ext_random((), seed=seed + 1)
        values = F.ext_random((planes,), seed=seed + 2)
        own = table.copy()
        K.fold_add_planes(own, r, values, own[:n // 2])
        expected = F.ext_add(_fold_numpy(table, r), np.repeat(values, (n // 2) // planes, axis=0))
        assert np.array_equal(own[:n // 2], expected)
        if n >= 4:
            w = F.ext_random((n,), seed=seed + 3)
            fc, wc, message = table.copy(), w.copy(), np.empty((3, 4), np.uint64)
            BK.fold_sums(fc, wc, r, fc[:n // 2], wc[:n // 2], message)
            assert np.array_equal(fc[:n // 2], _fold_numpy(table, r))
            assert np.array_equal(wc[:n // 2], _fold_numpy(w, r))
            T.set_threads(1)
            fresh_f, fresh_w = np.empty((n // 2, 4), np.uint64), np.empty((n // 2, 4), np.uint64)
            one = np.empty((3, 4), np.uint64)
            BK.fold_sums(table, w, r, fresh_f, fresh_w, one)
            assert np.array_equal(message, one)
    finally:
        K.PARALLEL_MIN_ENTRIES, BK.MIN_ENTRIES = old[:2]
        T.set_threads(old[2])


def test_copy_rows_in_pieces(split_everything):
    src = F.ext_random((37,), seed=4)
    for threads in (1, 2, 3):
        T.set_threads(threads)
        dst = np.zeros_like(src)
        K.copy_rows(src, dst)
        assert np.array_equal(dst, src)
