"""The hiding opening's reduction of many pieces to one (proofs/zk.py), against plain recomputations."""
import numpy as np
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs import zk
from proofs.transcript import Transcript


def _pieces(rng, rows, cols, count):
    """Random pieces on row blocks (as packed tensors give), some sharing column weights, some row weights, some
    with eq or block column weights (kept structured)."""
    pieces, shared = [], F.ext_random((cols,), seed=int(rng.integers(1 << 30)))
    shared_row = None
    for k in range(count):
        lo = int(rng.integers(0, rows))
        hi = int(rng.integers(lo + 1, rows + 1))
        w = F.ext_zero((rows,))
        w[lo:hi] = F.ext_random((hi - lo,), seed=int(rng.integers(1 << 30)))
        if k % 4 == 1 and shared_row is not None:
            w = shared_row
        shared_row = w
        c = shared if k % 3 == 0 else F.ext_random((cols,), seed=int(rng.integers(1 << 30)))
        if k % 3 == 2:
            c = zk.EqWeights(F.ext_random((cols.bit_length() - 1,), seed=int(rng.integers(1 << 30))))
        if k % 5 == 4:
            start = int(rng.integers(0, cols))
            c = zk.BlockWeights(start, F.ext_random((int(rng.integers(1, cols - start + 1)),),
                                                    seed=int(rng.integers(1 << 30))), cols)
        pieces.append((w, c))
    return pieces


@settings(max_examples=10, deadline=None)
@given(log_rows=st.integers(0, 3), count=st.integers(2, 7), seed=st.integers(0, 2 ** 31))
def test_reduced_piece_equals_the_combination_of_the_pieces(log_rows, count, seed):
    """After the reduction at sigma: w*^T M eq(sigma) = sum_p alpha_p c_p~(sigma) (w_p^T M)~(sigma), computed
    naively (every piece's row product, its MLE at sigma)."""
    rng = np.random.default_rng(seed)
    rows, cols = 1 << log_rows, 1 << (6 - log_rows)
    matrix = rng.integers(0, F.P, (rows, cols), dtype=np.uint64)
    pieces = _pieces(rng, rows, cols, count)
    alpha = F.ext_random((count,), seed=seed % 1000)
    sigma = F.ext_random((6 - log_rows,), seed=seed % 1000 + 1)
    groups = zk._row_groups(pieces, alpha)
    row_weights, column = zk._reduced_weights(groups, sigma)
    reduced = F.ext_dot(zk._combine(row_weights, matrix), column)
    eq = zk.eq_table(sigma)
    naive = F.ext_zero()
    for (w, c), a in zip(pieces, alpha):
        row = zk._combine(w, matrix)
        naive = F.ext_add(naive, F.ext_mul(a, F.ext_mul(F.ext_dot(np.asarray(c), eq), F.ext_dot(row, eq))))
    assert F.ext_eq(reduced, naive)


@settings(max_examples=8, deadline=None)
@given(log_rows=st.integers(0, 3), count=st.integers(1, 6), hiding=st.booleans(), seed=st.integers(0, 2 ** 31))
def test_many_pieces_open_and_a_wrong_one_is_refused(log_rows, count, hiding, seed):
    rng = np.random.default_rng(seed)
    rows, cols = 1 << log_rows, 1 << (7 - log_rows)
    values = rng.integers(0, F.P, rows * cols, dtype=np.uint64)
    commitment, witness = zk.hiding_commit(values, zk.HidingParams(hiding=hiding), log_rows=log_rows, seed=seed)
    pieces = _pieces(rng, rows, cols, count)
    functionals = [pieces[:1], pieces[1:]] if count > 1 else [pieces]
    stated, opening = zk.open_functionals(witness, functionals, Transcript("r"))
    zk.verify_functionals(commitment, functionals, stated, opening, Transcript("r"))
    assert opening.rows.shape[0] == 2 + int(hiding and count > 1 and cols > 1)  # one value row, whatever count
    wrong = stated.copy()
    wrong[-1] = F.ext_add(wrong[-1], F.ext_one())
    try:
        zk.verify_functionals(commitment, functionals, wrong, opening, Transcript("r"))
    except zk.ProofRejected:
        return
    raise AssertionError("a wrong value was accepted")


def test_structured_weights_are_checked():
    """A block reaching past the columns, or non-canonical structured weights, is refused by the shape check."""
    commitment, witness = zk.hiding_commit(F.random_elements(64, seed=1), zk.HidingParams(), log_rows=2, seed=2)
    w = F.ext_one((4,))
    good = [[(w, zk.BlockWeights(2, F.ext_one((8,)), 16))]]
    values, opening = zk.open_functionals(witness, good, Transcript("r"))
    zk.verify_functionals(commitment, good, values, opening, Transcript("r"))
    for bad in (zk.BlockWeights(10, F.ext_one((8,)), 16), zk.EqWeights(np.full((4, 4), F.P, dtype=np.uint64))):
        try:
            zk.verify_functionals(commitment, [[(w, bad)]], values, opening, Transcript("r"))
        except zk.ProofRejected as error:
            assert "piece shapes" in str(error)
        else:
            raise AssertionError("malformed structured weights were accepted")


@settings(max_examples=30, deadline=None)
@given(degree=st.integers(0, 8), seed=st.integers(0, 2 ** 31))
def test_lagrange_eval_equals_the_polynomial_through_its_values(degree, seed):
    """The verifier's interpolation (prefix/suffix products, cached inverse denominators) against evaluating a
    random polynomial of that degree directly (Horner over F_p4)."""
    from proofs.sumcheck import lagrange_eval
    rng = np.random.default_rng(seed)
    coefficients = rng.integers(0, F.P, (degree + 1, 4), dtype=np.uint64)
    values = np.stack([zk.poly_at(coefficients, F.ext_from_base(np.uint64(x))) for x in range(degree + 1)])
    r = rng.integers(0, F.P, 4, dtype=np.uint64)
    assert np.array_equal(lagrange_eval(values, r), zk.poly_at(coefficients, r))
