"""The provers' kernels on several threads (hezk.threads): in-place folds write no fresh buffer and equal their
one-thread results for every split; the parallel integer forward pass and small sumcheck rounds equal their twins."""
import contextlib

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


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 9), width=st.integers(1, 40), outputs=st.integers(1, 23), threads=st.integers(1, 4),
       seed=st.integers(0, 2**31))
def test_int_affine_equals_numpy_at_any_split(batch, width, outputs, threads, seed):
    """The compiled integer layer equals numpy's a @ W.T + b exactly (entries up to 2^30, sums below 2^62), in any
    number of pieces (column groups of four and a remainder)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-2**30, 2**30, (batch, width))
    w = rng.integers(-2**25, 2**25, (outputs, width))
    b = rng.integers(-2**40, 2**40, outputs)
    old = (K.PARALLEL_MIN_PRODUCTS, T.get_threads())
    K.PARALLEL_MIN_PRODUCTS = 1
    try:
        T.set_threads(threads)
        out = np.empty((batch, outputs), np.int64)
        K.int_affine(a, w, b, out)
    finally:
        K.PARALLEL_MIN_PRODUCTS = old[0]
        T.set_threads(old[1])
    assert np.array_equal(out, a @ w.T + b)


def test_forward_trace_uses_the_kernel_and_equals_numpy(monkeypatch):
    """The prover's forward pass of a layer above AFFINE_KERNEL_MIN goes through int_affine and equals numpy's."""
    from proofs import quantize as Q
    rng = np.random.default_rng(3)
    a, w, b = rng.integers(-500, 500, (8, 300)), rng.integers(-500, 500, (40, 300)), rng.integers(-9, 9, 40)
    calls = []
    real = K.int_affine
    monkeypatch.setattr(K, "int_affine", lambda *args: (calls.append(1), real(*args)))
    assert np.array_equal(Q._affine(a, w, b), a @ w.T + b)
    assert calls
    small = Q._affine(a[:1, :4], w[:2, :4], b[:2])
    assert np.array_equal(small, a[:1, :4] @ w[:2, :4].T + b[:2]) and len(calls) == 1


def test_small_round_sums_split_from_a_lower_threshold(split_everything, monkeypatch):
    """A sumcheck round of 2^12 pairs splits at the default thresholds (PARALLEL_MIN_ENTRIES >> ROUND_PIECE_SHIFT)
    and equals its one-thread sums."""
    monkeypatch.setattr(K, "PARALLEL_MIN_ENTRIES", 1 << 14)
    a, b = F.ext_random((1 << 13,), seed=1), F.ext_random((1 << 13,), seed=2)
    split = []
    real = T.run_chunks
    monkeypatch.setattr(T, "run_chunks", lambda f, pieces: (split.append(len(pieces)), real(f, pieces))[1])
    outs = []
    for threads in (1, 2):
        T.set_threads(threads)
        out = np.empty((3, 4), np.uint64)
        K.product_round_sums(a, b, a, False, 2, out)
        outs.append(out)
    assert split == [1, 2] and np.array_equal(outs[0], outs[1])


@settings(max_examples=10, deadline=None)
@given(log_rows=st.integers(0, 4), log_cols=st.integers(4, 9), threads=st.integers(1, 3), seed=st.integers(0, 99))
def test_commit_tree_by_the_row_kernels_equals_hashlib(log_rows, log_cols, threads, seed):
    """The Ligero commitment's Merkle tree hashed by the compiled BLAKE2b rows (split on the threads) equals the
    hashlib tree level by level, and opens to the same multi-proof."""
    from proofs import commit as C
    from proofs.pcs.merkle import merkle_levels, merkle_open
    columns = F.random_elements((1 << log_rows) * (1 << log_cols), seed=seed).reshape(1 << log_rows, 1 << log_cols)
    old = (BK.MIN_HASHES, T.get_threads())
    BK.MIN_HASHES = 1
    try:
        T.set_threads(threads)
        levels = C._merkle_tree(columns)
    finally:
        BK.MIN_HASHES = old[0]
        T.set_threads(old[1])
    expected = merkle_levels(C._leaf_digests(columns))
    assert isinstance(levels[0], np.ndarray)
    assert [[bytes(d) for d in level] for level in levels] == expected
    indices = np.unique(np.random.default_rng(seed).integers(0, 1 << log_cols, 5))
    assert merkle_open(levels, indices) == merkle_open(expected, indices)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 3000), bad=st.one_of(st.none(), st.integers(0, 2999)), value=st.integers(0, 2**64 - 1),
       threads=st.integers(1, 3))
def test_canonical_check_in_pieces_equals_numpy(n, bad, value, threads):
    """field.is_canonical through the compiled pieces agrees with np.all(a < p), wherever an entry >= p sits."""
    a = F.random_elements(n, seed=n)
    if bad is not None:
        a[bad % n] = np.uint64(value)
    old = (K.PARALLEL_MIN_ELEMENTS, F.CANONICAL_KERNEL_MIN, T.get_threads())
    K.PARALLEL_MIN_ELEMENTS, F.CANONICAL_KERNEL_MIN = 1, 1
    try:
        T.set_threads(threads)
        assert F.is_canonical(a) == bool(np.all(a < np.uint64(F.P)))
        assert F.is_canonical(a.reshape(-1, 1)) == bool(np.all(a < np.uint64(F.P)))
    finally:
        K.PARALLEL_MIN_ELEMENTS, F.CANONICAL_KERNEL_MIN = old[:2]
        T.set_threads(old[2])


def test_stack_into_equals_np_stack(split_everything):
    tables = [F.ext_random((33,), seed=s) for s in range(3)]
    base = [F.random_elements(33, seed=s) for s in range(2)]
    for threads in (1, 3):
        T.set_threads(threads)
        out, flat = np.empty((3, 33, 4), np.uint64), np.empty((2, 33), np.uint64)
        K.stack_into(tables, out)
        K.stack_into(base, flat)
        assert np.array_equal(out, np.stack(tables)) and np.array_equal(flat, np.stack(base))


@settings(max_examples=15, deadline=None)
@given(k=st.integers(1, 9), threads=st.integers(1, 3), seed=st.integers(0, 99))
def test_fused_eq_add_equals_eq_then_add(k, threads, seed):
    """add_eq_scaled (eq of k - 1 coordinates, the last doubling added into out) equals a full eq_scaled table
    added with add_into, in any split; and mle.eq_table times the scale."""
    from proofs.mle import eq_table
    point, scale = F.ext_random((k,), seed=seed), F.ext_random((), seed=seed + 1)
    start = F.ext_random((1 << k,), seed=seed + 2)
    old = (BK.MIN_ENTRIES, T.get_threads())
    BK.MIN_ENTRIES = 1
    try:
        T.set_threads(threads)
        fused = start.copy()
        BK.add_eq_scaled(point, scale, fused)
        buffer, two_pass = np.empty_like(start), start.copy()
        BK.eq_scaled(point, scale, buffer)
        BK.add_into(buffer.reshape(-1), two_pass.reshape(-1))
    finally:
        BK.MIN_ENTRIES = old[0]
        T.set_threads(old[1])
    assert np.array_equal(fused, two_pass)
    assert np.array_equal(fused, F.ext_add(start, F.ext_mul(eq_table(point), scale)))


@settings(max_examples=12, deadline=None)
@given(log_n=st.integers(2, 9), threads=st.integers(1, 4), seed=st.integers(0, 99))
def test_bits_round_kernels_in_pieces_equal_the_numpy_twin(log_n, threads, seed):
    """The batched bits sumcheck's round kernels (base and F_p4 T, and the fused fold + round), split in pieces
    of the pairs, equal relu_batch.round_sums_numpy (of the folded tables) at every thread count."""
    from proofs import _graph_kernels as G
    from proofs.layers.relu_batch import round_sums_numpy
    from proofs.mle import fold
    n = 1 << log_n
    lin, bits_ext = F.ext_random((n,), seed=seed), F.ext_random((n,), seed=seed + 1)
    bits_base = F.random_elements(n, seed=seed + 2) % np.uint64(2)
    eq, r = F.ext_random((n // 2,), seed=seed + 3), F.ext_random((), seed=seed + 4)
    old = (K.PARALLEL_MIN_ENTRIES, T.get_threads())
    K.PARALLEL_MIN_ENTRIES = 1
    try:
        T.set_threads(threads)
        base, ext, folded = (np.zeros((2, 3, 4), np.uint64) for _ in range(3))
        G.bits_round_base(lin, eq, bits_base, base)
        G.bits_round_ext(lin, eq, bits_ext, ext)
        lin_out, bits_out = np.empty((n // 2, 4), np.uint64), np.empty((n // 2, 4), np.uint64)
        G.bits_fold_round(lin, bits_ext, r, eq[:n // 4], lin_out, bits_out, folded)
    finally:
        K.PARALLEL_MIN_ENTRIES = old[0]
        T.set_threads(old[1])
    for got, (lin_t, eq_t, bits_t) in [(base, (lin, eq, bits_base)), (ext, (lin, eq, bits_ext)),
                                       (folded, (fold(lin, r), eq[:n // 4], fold(bits_ext, r)))]:
        first, second = round_sums_numpy(lin_t, eq_t, bits_t)
        assert np.array_equal(got[0], first) and np.array_equal(got[1], second)
    assert np.array_equal(lin_out, fold(lin, r)) and np.array_equal(bits_out, fold(bits_ext, r))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_ntt_rows_in_pieces_equal_the_numpy_ntt(split_everything, threads):
    """The Ligero encoding's row NTTs (in place, and of zero-padded rows) split over pieces of the rows equal the
    numpy transform."""
    from proofs.pcs.reed_solomon import _kernel_tables, ntt_numpy, powers
    rows = F.random_elements(7 * 64, seed=threads).reshape(7, 64)
    omega = pow(F.GENERATOR, (F.P - 1) // 64, F.P)
    twiddles = powers(omega, 32)
    T.set_threads(threads)
    got = rows.copy()
    K.rs_encode(got, got, *_kernel_tables(64))
    assert np.array_equal(got, ntt_numpy(rows, twiddles))
    padded = np.zeros_like(rows)
    padded[:, :21] = rows[:, :21]
    encoded = np.empty_like(rows)
    K.rs_encode(np.ascontiguousarray(rows[:, :21]), encoded, *_kernel_tables(64))
    assert np.array_equal(encoded, ntt_numpy(padded, twiddles))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_bits_round_message_on_ints_equals_the_numpy_formula(seed):
    """relu_batch's round message on Python ints equals first(x) - factor eq(tau, x) second(x) in numpy F_p4."""
    from proofs.layers.relu_batch import _eq1, _message_ints, _quadratic_at_3
    first, second = F.ext_random((3,), seed=seed), F.ext_random((3,), seed=seed + 1)
    tau, scale, beta = (F.ext_random((), seed=seed + k) for k in (2, 3, 4))
    got = _message_ints(first.tolist(), second.tolist(), tau.tolist(), F.ext_mul_ints(scale.tolist(), beta.tolist()))
    first4 = np.concatenate([first, _quadratic_at_3(first)[None]])
    second4 = np.concatenate([second, _quadratic_at_3(second)[None]])
    factor = F.ext_mul(scale, beta)
    expected = np.stack([F.ext_sub(first4[x], F.ext_mul(F.ext_mul(factor, _eq1(tau, x)), second4[x]))
                         for x in range(4)])
    assert got.dtype == np.uint64 and np.array_equal(got, expected)



@contextlib.contextmanager
def split_to_items(threads: int, **overrides):
    """Every proofs kernel split down to single items on ``threads`` threads, and ``overrides`` of _kernels'
    constants, all restored after (hypothesis tests cannot take the function-scoped fixture)."""
    saved = {name: getattr(K, name) for name in ("PARALLEL_MIN_ENTRIES", "PARALLEL_MIN_ELEMENTS", *overrides)}
    before, min_entries = T.get_threads(), BK.MIN_ENTRIES
    try:
        for name in ("PARALLEL_MIN_ENTRIES", "PARALLEL_MIN_ELEMENTS"):
            setattr(K, name, 1)
        for name, value in overrides.items():
            setattr(K, name, value)
        BK.MIN_ENTRIES = 1
        T.set_threads(threads)
        yield
    finally:
        for name, value in saved.items():
            setattr(K, name, value)
        BK.MIN_ENTRIES = min_entries
        T.set_threads(before)


@settings(max_examples=20, deadline=None)
@given(k=st.integers(0, 9), split_from=st.integers(0, 9), threads=st.integers(1, 4), seed=st.integers(0, 99))
def test_eq_table_with_its_doublings_in_pieces_equals_the_numpy_twin(k, split_from, threads, seed):
    """eq_table_split: the doublings from 2^split_from entries on, in 1..4 pieces, give the numpy twin's table."""
    from proofs.mle import _eq_table_numpy

    point = F.ext_random((k,), seed=seed)
    out = np.empty((1 << k, 4), np.uint64)
    with split_to_items(threads, EQ_SPLIT_VARS=split_from):
        K.eq_table_split(point, out)
    assert np.array_equal(out, _eq_table_numpy(point))


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 40), columns=st.integers(1, 70), threads=st.integers(1, 4), seed=st.integers(0, 99))
def test_transpose_to_words_in_pieces_equals_numpy(rows, columns, threads, seed):
    """transpose_u32 (the Merkle tree's columns as rows of words), in tiles over 1..4 threads, equals numpy's."""
    matrix = F.random_elements(rows * columns, seed=seed).reshape(rows, columns)
    out = np.empty((columns, rows), np.uint32)
    with split_to_items(threads):
        K.transpose_u32(matrix, out)
    assert np.array_equal(out, np.ascontiguousarray(matrix.T, dtype="<u4"))
