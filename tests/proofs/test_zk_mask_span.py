"""The masks of the hiding opening and of the zero-knowledge sumcheck span F_p4, not a line of it.

A sent row w^T M + beta S with a BASE mask row S leaves (w^T M)[j] modulo the line beta F_p in the clear: three of
its four base coordinates, so with row weights lambda e_i (one committed row) the row M[i] itself is solved for
from lambda and beta (the first test recovers it from an opening made that way). Likewise rho g_j(X) with base
coefficients left three coordinates of every coefficient of f's round polynomial visible. Both masks are F_p4
now: these tests fail on base-field masks.
"""
import numpy as np
import pytest

from proofs import field as F
from proofs import zk
from proofs.sumcheck import SumcheckProver
from proofs.transcript import Transcript


def _in_line(values, direction) -> np.ndarray:
    """For each F_p4 value v (..., 4): whether v / direction is a base-field element."""
    ratio = F.ext_mul(values, F.ext_inv(np.asarray(direction, dtype=np.uint64)[None])[0])
    return np.all(ratio[..., 1:] == 0, axis=-1)


def _single_row_opening(seed):
    """An opening of the functional lambda (row 0 of a 4 x 64 matrix) . c: (witness, lambda, c, opening, beta)."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 1000, size=256, dtype=np.uint64)
    commitment, witness = zk.hiding_commit(table, zk.HidingParams(), log_rows=2, seed=seed)
    lam = F.ext_random((), seed=seed + 1)
    w = F.ext_zero((4,))
    w[0] = lam
    c = F.ext_random((64,), seed=seed + 2)
    values, opening = zk.open_functionals(witness, [[(w, c)]], Transcript("span"), seed=seed + 3)
    transcript = Transcript("span")  # the verifier's replay up to beta
    zk._begin(transcript, commitment, [(w, c)])
    zk._challenges(transcript, witness.rows.shape[0] + opening.mask_columns.shape[0], 1, False, opening.mask_root,
                   values, opening.mask_sum)
    beta = zk._beta(transcript, opening.mask_value)
    return witness, lam, opening, beta


@pytest.mark.parametrize("seed", [3, 17])
def test_value_row_mask_is_not_on_the_line_beta_fp(seed):
    witness, lam, opening, beta = _single_row_opening(seed)
    data_row = witness.rows[0]
    mask = F.ext_sub(opening.rows[1], F.ext_mul_base(np.broadcast_to(lam, (data_row.size, 4)), data_row))
    assert not _in_line(mask, beta).any()


def test_a_sent_row_does_not_give_the_committed_row_back():
    """The attack on base masks: solve Y_j = lambda m_j + beta s_j over F_p (two base unknowns) for each entry."""
    _, lam, opening, beta = _single_row_opening(5)
    import galois
    field = galois.GF(F.P)
    system = field(np.stack([lam, beta], axis=1).astype(np.int64))
    row = opening.rows[1]
    solvable = 0
    for j in range(64):
        guess = np.linalg.solve(system[:2], field(row[j][:2].astype(np.int64)))
        solvable += int(np.array_equal(system @ guess, field(row[j].astype(np.int64))))
    assert solvable == 0  # base masks: all 64 entries solve, and guess[0] is the committed M[0, j]


def test_zero_knowledge_sumcheck_round_mask_is_not_on_the_line_rho_fp():
    rng = np.random.default_rng(9)
    terms = [(F.ext_one(), [rng.integers(0, F.P, 64, dtype=np.uint64), rng.integers(0, F.P, 64, dtype=np.uint64)])]
    prover = SumcheckProver(terms)
    plain = prover.round_message()  # round 0 of f alone (no challenge drawn yet)
    claim = F.ext_from_base(F.sum_(F.mul(terms[0][1][0], terms[0][1][1])))
    transcript = Transcript("span")
    proof, _, _ = zk.prove_zk_sumcheck(terms, claim, transcript, seed=11)
    replay = Transcript("span")
    rho = zk._mask_statement(replay, "sumcheck", claim, 6, 2, proof.mask_commitment, proof.mask_sum)
    masked_part = F.ext_sub(proof.sumcheck.round_messages[0], plain)
    assert not _in_line(masked_part, rho).all()


def test_masks_are_f_p4_coefficients():
    coefficients = zk.random_mask(5, 2)
    assert coefficients.shape == (5, 3, 4)
    assert zk.mask_table(coefficients).size == zk.mask_entries(5, 2) == 5 * 4 * 4
    point = F.ext_random((5,), seed=1)
    weights = zk.powers_table(point, 2)
    direct = F.ext_zero()
    for i in range(5):
        direct = F.ext_add(direct, zk.poly_at(coefficients[i], point[i]))
    table = zk.mask_table(coefficients)
    assert F.ext_eq(F.ext_sum(F.ext_mul_base(weights[:table.size], table), axis=0), direct)
