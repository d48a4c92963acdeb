"""The Ligero/Basefold encoding's compiled kernels against their numpy twins: the radix-16-first NTT of zero-padded
rows with Shoup's 32-bit products (proofs._kernels.rs_encode), its stage twiddles, and the tiled column gather
that feeds the Merkle leaves (proofs._kernels.columns_u32, proofs.zk's leaves)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.errors import ProofError
from proofs.pcs.merkle import column_leaves
from proofs.pcs.reed_solomon import ntt_numpy, powers, rs_encode_rows, stage_twiddles

K = pytest.importorskip("proofs._kernels")


def _numpy_encoding(rows, n):
    padded = np.zeros(rows.shape[:-1] + (n,), dtype=np.uint64)
    padded[..., :rows.shape[-1]] = rows
    return ntt_numpy(padded, powers(pow(F.GENERATOR, (F.P - 1) // n, F.P), max(n // 2, 1)))


@settings(max_examples=40, deadline=None)
@given(log_n=st.integers(0, 10), fill=st.floats(0.0, 1.0), count=st.integers(1, 4), seed=st.integers(0, 999))
def test_rs_encode_kernel_equals_the_numpy_ntt_of_the_padded_rows(log_n, fill, count, seed):
    """Every length (below, at and above the radix), every width w <= n, several rows, extreme entries too."""
    from proofs.pcs.reed_solomon import _kernel_tables
    n = 1 << log_n
    w = max(1, min(n, int(round(fill * n))))
    rows = F.random_elements((count, w), seed=seed)
    rows[0, :min(w, 2)] = F.P - 1                      # the largest residue: Shoup's bound at its edge
    out = np.empty((count, n), dtype=np.uint64)
    K.rs_encode(rows, out, *_kernel_tables(n))
    assert np.array_equal(out, _numpy_encoding(rows, n))


def test_rs_encode_rows_uses_the_kernel_for_large_inputs_and_matches():
    """rs_encode_rows above the kernel threshold (no padded copy) equals the numpy twin; a bad length is refused."""
    rows = F.random_elements((3, 3, 700), seed=5)      # 3 x 3 x 8192 >= NTT_NUMBA_MIN_SIZE: the kernel path
    got = rs_encode_rows(rows, 8192)
    assert got.shape == (3, 3, 8192)
    assert np.array_equal(got, _numpy_encoding(rows, 8192))
    with pytest.raises(ProofError, match="length 600"):
        rs_encode_rows(rows, 600)


@pytest.mark.parametrize("n", [1, 2, 16, 1024])
def test_stage_twiddles_are_each_stages_roots_with_shoup_quotients(n):
    twiddles, quotients = stage_twiddles(n)
    assert twiddles.shape == quotients.shape == (n - 1,) and twiddles.dtype == np.uint32
    omega = pow(F.GENERATOR, (F.P - 1) // n, F.P)
    half = 1
    while half < n:
        expected = [pow(omega, j * n // (2 * half), F.P) for j in range(half)]
        assert twiddles[half - 1:2 * half - 1].tolist() == expected
        half *= 2
    assert all(int(q) == (int(t) << 32) // F.P for t, q in zip(twiddles, quotients))
    assert not twiddles.flags.writeable


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 150), cols=st.integers(1, 150), start=st.integers(0, 149), seed=st.integers(0, 999))
def test_columns_u32_equals_numpys_transposing_copy(rows, cols, start, seed):
    a = F.random_elements((rows, cols), seed=seed)
    start = start % cols
    out = np.empty((cols - start, rows), dtype=np.uint32)
    K.columns_u32(a, out, start)
    assert np.array_equal(out, np.ascontiguousarray(a[:, start:].T, dtype="<u4"))


def test_zk_column_leaves_equal_the_merkle_modules(monkeypatch):
    """The hiding commitment's leaves through the tiled gather are the same digests as merkle.column_leaves."""
    import proofs.zk as Z
    monkeypatch.setattr(Z, "COLUMNS_KERNEL_MIN_SIZE", 1)
    for rows, length in [(37, 64), (5000, 64), (1, 8)]:        # 5000 rows: blocks of 52 columns, a short last one
        encoded = F.random_elements((rows, length), seed=rows)
        salts = tuple(bytes([i]) * 16 for i in range(length))
        assert Z._column_leaves(encoded, salts) == column_leaves(encoded, salts)


@settings(max_examples=30, deadline=None)
@given(log_half=st.integers(0, 7), log_planes_a=st.integers(-1, 3), log_planes_b=st.integers(-1, 3),
       degree=st.integers(1, 6), pieces=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_masked_product_round_sums_by_plane_sums_equal_the_numpy_rounds(log_half, log_planes_a, log_planes_b, degree,
                                                                       pieces, seed):
    """The two-factor masked round (three products a pair, the masks' parts per plane) against the whole-table
    numpy round (:meth:`proofs.relations.RelationProver._numpy_sums`), split into 1..5 uneven pieces (plane and
    plane-pair runs cut at piece ends); -1 planes: that factor has no mask."""
    import hezk.threads as T
    from proofs.relations import RelationProver
    half = 1 << log_half
    a, b = F.ext_random((2 * half,), seed=seed % 1000), F.ext_random((2 * half,), seed=seed % 1000 + 1)
    a[::3] = F.P - 1
    factors, masks, blocks = [], np.zeros((2, 8, 4), dtype=np.uint64), [0, 0]
    for k, (table, log_planes) in enumerate([(a, log_planes_a), (b, log_planes_b)]):
        mask = None
        if log_planes >= 0:
            count = min(1 << log_planes, half)
            mask = F.ext_random((count,), seed=seed % 1000 + 2 + k)
            masks[k, :count], blocks[k] = mask, half // count
        factors.append((table, mask))
    zs = F.to_field(np.array([x * (1 - x) for x in range(degree + 1)], dtype=np.int64))
    out = np.empty((degree + 1, 4), dtype=np.uint64)
    before = (K.PARALLEL_MIN_ENTRIES, T.get_threads())
    try:
        K.PARALLEL_MIN_ENTRIES = 1 << K.ROUND_PIECE_SHIFT      # pieces of one pair
        T.set_threads(pieces)
        K.masked_product_round_sums(a, b, masks[0], blocks[0], masks[1], blocks[1], zs, degree, out)
    finally:
        K.PARALLEL_MIN_ENTRIES = before[0]
        T.set_threads(before[1])
    assert np.array_equal(out, RelationProver._numpy_sums(factors, degree))


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 200])
def test_transposed_matmul_partial_reductions_hold_at_the_largest_residues(rows):
    """a^T b with every entry p - 1 (the largest partly reduced products, MATMUL_ROWS_PER_REDUCTION of them between
    reductions and a residue left over) and with random entries equals the exact Python-int product mod p."""
    rng = np.random.default_rng(rows)
    for a, b in [(np.full((rows, 3), F.P - 1, dtype=np.uint64), np.full((rows, 70), F.P - 1, dtype=np.uint64)),
                 (F.random_elements((rows, 5), seed=rows), F.random_elements((rows, 9), seed=rows + 1))]:
        b[rng.integers(0, rows), 0] = 0                    # a skipped zero entry
        out = np.empty((b.shape[1], a.shape[1]), dtype=np.uint64)
        K.transposed_matmul(a, b, out)
        exact = (a.astype(object).T @ b.astype(object)) % F.P
        assert np.array_equal(out, exact.T.astype(np.uint64))


@settings(max_examples=30, deadline=None)
@given(log_half=st.integers(0, 6), log_planes=st.tuples(*[st.integers(-1, 3)] * 3), degree=st.integers(1, 6),
       pieces=st.integers(1, 5), seed=st.integers(0, 999))
def test_masked_triple_round_sums_equal_the_general_kernel_and_numpy(log_half, log_planes, degree, pieces, seed):
    """Three F_p4 factors, any subset masked with its own plane count (-1: no mask), split into 1..5 pieces: the
    interpolated cubic and per-plane mask parts equal the general kernel and the whole-table numpy round."""
    import hezk.threads as T
    from proofs.relations import RelationProver
    half = 1 << log_half
    factors = np.stack([F.ext_random((2 * half,), seed=seed + k) for k in range(3)])
    factors[seed % 3, ::3] = F.P - 1
    masks, blocks, pairs = np.zeros((3, 8, 4), dtype=np.uint64), np.zeros(3, dtype=np.int64), []
    for f, log in enumerate(log_planes):
        mask = None
        if log >= 0:
            count = min(1 << log, half)
            mask = F.ext_random((count,), seed=seed + 10 + f)
            masks[f, :count], blocks[f] = mask, half // count
        pairs.append((factors[f], mask))
    zs = F.to_field(np.array([x * (1 - x) for x in range(degree + 1)], dtype=np.int64))
    general, out = np.empty((degree + 1, 4), dtype=np.uint64), np.empty((degree + 1, 4), dtype=np.uint64)
    K.masked_round_sums(factors, masks, blocks, np.empty((0, 2 * half), dtype=np.uint64), zs, degree, general)
    before = (K.PARALLEL_MIN_ENTRIES, T.get_threads())
    try:
        K.PARALLEL_MIN_ENTRIES = 1 << K.ROUND_PIECE_SHIFT
        T.set_threads(pieces)
        K.masked_triple_round_sums(factors, masks, blocks, zs, degree, out)
    finally:
        K.PARALLEL_MIN_ENTRIES = before[0]
        T.set_threads(before[1])
    assert np.array_equal(out, general)
    assert np.array_equal(out, RelationProver._numpy_sums(pairs, degree))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 40), form=st.sampled_from(["same", "row left", "row right"]), seed=st.integers(0, 999))
def test_ext_mul_short_and_row_broadcast_paths_equal_python_ints(rows, form, seed):
    """ext_mul of equal (k, 4) shapes (k <= SMALL_EXT_ROWS on Python ints) and of (k, 4) by a (1, 4) row (the scalar
    kernel) against row-by-row Python-int products, largest residues included."""
    a = F.ext_random((rows,), seed=seed)
    b = F.ext_random((rows,), seed=seed + 1) if form == "same" else F.ext_random((1,), seed=seed + 1)
    if rows:
        a[0] = F.P - 1
    left, right = (b, a) if form == "row left" else (a, b)
    got = F.ext_mul(left, right)
    rows_b = b if form == "same" else np.repeat(b, rows, axis=0)
    expected = np.array([F.ext_mul_ints(x, y) for x, y in zip(a.tolist(), rows_b.tolist())],
                        dtype=np.uint64).reshape(rows, 4)
    assert got.shape == (rows, 4) and got.dtype == np.uint64
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("count,min_work,work", [(0, 4, 1), (1, 4, 1), (7, 4, 1), (8, 4, 1), (9, 4, 1), (3, 4, 3),
                                                 (100, 1, 1), (5, 0, 1)])
def test_kernel_parallel_short_cut_splits_as_hezk_threads(count, min_work, work):
    """The kernels' parallel runs a call at once exactly when hezk.threads would make one piece of it (any thread
    count), and otherwise returns hezk.threads' pieces."""
    import hezk.threads as T
    before = T.get_threads()
    try:
        for threads in (1, 2, 4):
            T.set_threads(threads)
            expected = T.chunks(count, min_work, work)
            assert K.parallel(lambda lo, hi: (lo, hi), count, min_work, work) == expected
    finally:
        T.set_threads(before)
