"""MLE evaluation, eq tables and variable binding against brute-force sums in galois."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from proofs import field as F
from proofs import mle
from proofs.errors import ProofError
from tests.reference.mle_naive import naive_eq_table, naive_mle

seeds = st.integers(0, 2 ** 32)


@given(st.integers(0, 6), seeds)
def test_eq_table_matches_product_formula(k, seed):
    point = F.ext_random((k, ), seed=seed)
    assert np.array_equal(mle.eq_table(point), naive_eq_table(point))


@given(st.integers(0, 6), st.booleans(), seeds)
def test_mle_evaluate_matches_brute_force(k, extension, seed):
    table = F.ext_random(2 ** k, seed=seed) if extension else F.random_elements(2 ** k, seed=seed)
    point = F.ext_random(k, seed=seed + 1)
    expected = naive_mle(table, point)
    assert np.array_equal(mle.mle_evaluate(table, point), expected)
    assert np.array_equal(mle.mle_evaluate_by_folding(table, point), expected)


@given(st.integers(0, 5), seeds)
def test_mle_agrees_with_table_on_the_hypercube(k, seed):
    table = F.random_elements(2 ** k, seed=seed)
    i = seed % 2 ** k
    corner = F.ext_from_base(np.array([(i >> b) & 1 for b in range(k)], dtype=np.uint64)).reshape(k, 4)
    assert np.array_equal(mle.mle_evaluate(table, corner), F.ext_from_base(table[i]))


@given(st.integers(1, 6), st.booleans(), seeds)
def test_fix_variable_binds_the_lowest_variable(k, extension, seed):
    table = F.ext_random(2 ** k, seed=seed) if extension else F.random_elements(2 ** k, seed=seed)
    point = F.ext_random(k, seed=seed + 1)
    folded = mle.fix_variable(table, point[0])
    assert folded.shape == (2 ** (k - 1), 4)
    assert np.array_equal(mle.mle_evaluate(folded, point[1:]), naive_mle(table, point))


@given(st.integers(0, 4), st.integers(0, 4), st.booleans(), seeds)
def test_bind_high_is_matrix_row_combination(log_rows, log_cols, extension, seed):
    n = 2 ** (log_rows + log_cols)
    table = F.ext_random(n, seed=seed) if extension else F.random_elements(n, seed=seed)
    point = F.ext_random(log_cols + log_rows, seed=seed + 1)
    partial = mle.bind_high(table, point[log_cols:])
    assert partial.shape == (2 ** log_cols, 4)
    assert np.array_equal(mle.mle_evaluate(partial, point[:log_cols]), naive_mle(table, point))


def test_row_major_matrix_point_convention():
    a = F.random_elements((4, 8), seed=1)  # I = 4 rows, K = 8 columns
    r_k, r_i = F.ext_random(3, seed=2), F.ext_random(2, seed=3)
    row_weights, col_weights = mle.eq_table(r_i), mle.eq_table(r_k)
    expected = np.zeros(4, dtype=np.uint64)
    for i in range(4):
        for k in range(8):
            expected = F.ext_add(expected, F.ext_mul_base(F.ext_mul(row_weights[i], col_weights[k]), a[i, k]))
    assert np.array_equal(mle.mle_evaluate(a.reshape(-1), np.concatenate([r_k, r_i])), expected)


def test_eq_eval_matches_table():
    point, other = F.ext_random(4, seed=5), F.ext_random(4, seed=6)
    corner = F.ext_from_base(np.array([1, 0, 1, 1], dtype=np.uint64))
    assert np.array_equal(mle.eq_eval(point, corner), mle.eq_table(point)[0b1101])
    assert np.array_equal(mle.eq_eval(point, other), mle.mle_evaluate(mle.eq_table(point), other))


def test_pad_to_pow2():
    padded = mle.pad_to_pow2(np.array([1, 2, 3], dtype=np.uint64))
    assert padded.tolist() == [1, 2, 3, 0]
    assert mle.pad_to_pow2(np.ones((5, 4), dtype=np.uint64)).shape == (8, 4)
    assert mle.pad_to_pow2(np.array([7], dtype=np.uint64)).tolist() == [7]


def test_bad_shapes_raise():
    with pytest.raises(ProofError, match=r"\(4, 3\)"):
        mle.mle_evaluate(np.zeros((4, 3), dtype=np.uint64), F.ext_zero(2))
    with pytest.raises(ProofError, match=r"got \(\)"):
        mle.fix_variable(np.uint64(3), F.ext_zero())
    with pytest.raises(ProofError, match="length 3"):
        mle.mle_evaluate(np.zeros(3, dtype=np.uint64), F.ext_zero(2))
    with pytest.raises(ProofError, match=r"\(3, 4\), expected \(2, 4\)"):
        mle.mle_evaluate(np.zeros(4, dtype=np.uint64), F.ext_zero(3))
    with pytest.raises(ProofError, match=r"\(2, 3\)"):
        mle.eq_table(np.zeros((2, 3), dtype=np.uint64))


def test_base_field_points_are_lifted():
    table = np.array([3, -1, 4, 1, -5, 9, 2, 6])
    base = np.array([2, 7, 5])
    lifted = F.ext_from_base(F.to_field(base))
    assert np.array_equal(mle.mle_evaluate(table, base), mle.mle_evaluate(table, lifted))
    assert np.array_equal(mle.eq_table(base), mle.eq_table(lifted))
    assert np.array_equal(mle.eq_eval(base, base[::-1]), mle.eq_eval(lifted, lifted[::-1]))
    # on the Boolean cube the MLE is the table itself
    for index in range(8):
        bits = [(index >> j) & 1 for j in range(3)]
        assert np.array_equal(mle.mle_evaluate(table, bits), F.ext_from_base(F.to_field(table[index])))


def test_integer_tables_are_reduced_and_bad_tables_refused():
    point = F.ext_random(2, seed=4)
    signed = np.array([-1, 2, -3, 4])
    assert np.array_equal(mle.mle_evaluate(signed, point), mle.mle_evaluate(F.to_field(signed), point))
    with pytest.raises(ProofError, match=">= p"):
        mle.mle_evaluate(np.array([F.P, 0, 0, 0], dtype=np.uint64), point)
    with pytest.raises(ProofError, match="dtype=float64"):
        mle.fix_variable(np.ones(4), point[0])


@pytest.mark.parametrize("extension", [False, True])
def test_numba_fold_matches_numpy_fold(extension, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setattr(F, "NUMBA_MIN_SIZE", 4)  # the kernel even for short tables
    table = F.ext_random(64, seed=9) if extension else F.random_elements(64, seed=9)
    table[:3] = F.P - 1
    r = F.ext_random((), seed=10)
    assert np.array_equal(mle.fold(table, r), mle._fold_numpy(table, r))
