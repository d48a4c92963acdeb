"""Each check of the hiding commitment and the zero-knowledge sumcheck (proofs/zk.py) says which check rejected.

``ProofRejected.reason`` and ``.where`` are pinned for every check of ``verify_functionals``, ``verify_points``
and ``verify_zk_sumcheck``, each driven by an input only that check refuses: the row forgers re-derive the
Fiat-Shamir queries over the forged rows (tests/proofs/cheating.py), a wrong value is stated to the honest
prover so its queries follow it, and the consistent cheater passes every round of the sumcheck.
"""
import dataclasses
from unittest import mock

import numpy as np
import pytest

from proofs.sumcheck import ROUND_SUM_REASON
from proofs import field as F
from proofs import zk
from proofs.transcript import Transcript

from .cheating import consistent_prove_zk_sumcheck, forge_hiding_opening
from .rejection_helpers import rejected

WHERE = "hiding opening"


def _setup(openings=1, seed=51, params=zk.HidingParams()):
    """A 64-entry hiding commitment: (commitment, witness, points (2, 6, 4), functionals)."""
    values = F.random_elements(64, seed=seed)
    commitment, witness = zk.hiding_commit(values, params, seed=seed)
    points = F.ext_random((openings, 6), seed=seed + 1)
    return commitment, witness, points, [zk.mle_functional(commitment, z) for z in points]


@pytest.fixture(scope="module")
def separate():
    """An honest opening of two points with fresh (separate) masks: mask root, mask columns and salts present."""
    commitment, witness, points, functionals = _setup(2)
    values, opening = zk.open_points(witness, points, Transcript("o"), seed=1)
    assert len(opening.mask_root) == 32 and opening.mask_columns.shape[0] == zk.mask_rows_needed(2) == 13
    zk.verify_functionals(commitment, functionals, values, opening, Transcript("o"))
    return commitment, witness, points, functionals, values, opening


def _verify(commitment, functionals, values, opening, **options):
    return lambda: zk.verify_functionals(commitment, functionals, values, opening, Transcript("o"), **options)


def test_argument_types_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    reason = "expected a HidingCommitment and a HidingOpening"
    rejected(_verify(commitment.to_bytes(), functionals, values, opening), reason, WHERE)
    rejected(_verify(commitment, functionals, values, None), reason, WHERE)


def test_security_threshold_names_the_bits_and_the_minimum(separate):
    commitment, _, _, functionals, values, opening = separate
    bits = commitment.security_bits
    rejected(_verify(commitment, functionals, values, opening, min_bits=200),
             f"commitment parameters give {bits:.1f} < 200 bits", WHERE)


def test_functional_shapes_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    rows, cols = 1 << commitment.log_rows, 1 << commitment.log_cols
    rejected(_verify(commitment, [functionals[0], []], values, opening), "functional 1 has no pieces", WHERE)
    (w, c), = functionals[1]
    rejected(_verify(commitment, [functionals[0], [(w, c[:-1])]], values, opening),
             f"functional 1: piece shapes ({rows}, 4), ({cols - 1}, 4), expected ({rows}, 4), ({cols}, 4)", WHERE)
    rejected(_verify(commitment, [functionals[0], [(w[1:], c)]], values, opening),
             f"functional 1: piece shapes ({rows - 1}, 4), ({cols}, 4), expected ({rows}, 4), ({cols}, 4)", WHERE)


def test_mask_root_checks_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, mask_root=b"short")),
             "mask root must be empty or a 32-byte digest", WHERE)
    plain, witness, points, plain_functionals = _setup(1, params=zk.HidingParams(hiding=False))
    stated, honest = zk.open_points(witness, points, Transcript("o"))
    rejected(_verify(plain, plain_functionals, stated, dataclasses.replace(honest, mask_root=bytes(32))),
             "a mask root without hiding", WHERE)


def test_too_few_committed_mask_rows_is_named(separate):
    commitment, _, _, functionals, values, opening = separate
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, mask_root=b"")),
             f"2 pieces need 13 committed mask rows, the commitment has {commitment.mask_rows}", WHERE)
    assert commitment.mask_rows == 0


def test_stated_shapes_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    width = commitment.width
    rejected(_verify(commitment, functionals, values[:, :3], opening), "values of shape (2, 3), expected (2, 4)", WHERE)
    rejected(_verify(commitment, functionals, values + np.uint64(F.P), opening), "values of shape (2, 4), expected (2, 4)",
             WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, mask_value=opening.mask_value[:0])),
             "mask value of shape (0, 4), expected (1, 4)", WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, mask_value=None)),
             "mask value of shape None, expected (1, 4)", WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, rows=opening.rows[:, 1:])),
             f"rows of shape (3, {width - 1}, 4), expected (3, {width}, 4)", WHERE)


def test_opened_column_shapes_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    rows, q = opening.columns.shape
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, columns=opening.columns[:, 1:])),
             f"columns of shape ({rows}, {q - 1}), expected ({rows}, {q})", WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, columns=None)),
             f"columns of shape None, expected ({rows}, {q})", WHERE)
    rejected(_verify(commitment, functionals, values,
                     dataclasses.replace(opening, mask_columns=opening.mask_columns[1:])),
             f"mask columns of shape (12, {q}), expected (13, {q})", WHERE)


def test_salt_counts_are_named(separate):
    commitment, _, _, functionals, values, opening = separate
    q = opening.columns.shape[1]
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, salts=opening.salts[1:])),
             f"expected {q} salts of 16 bytes", WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, mask_salts=opening.mask_salts[1:])),
             f"expected {q} salts of 16 bytes", WHERE)


@pytest.mark.parametrize("tree", ["merkle", "mask_merkle"])
def test_merkle_checks_are_named(separate, tree):
    commitment, _, _, functionals, values, opening = separate
    digests = getattr(opening, tree)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, **{tree: digests[:-1] + (b"x",)})),
             "Merkle digests must be 32-byte strings", WHERE)
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, **{tree: digests[:-1]})),
             "Merkle multi-proof has too few digests", "commitment opening")
    flipped = bytes([digests[0][0] ^ 1]) + digests[0][1:]
    rejected(_verify(commitment, functionals, values, dataclasses.replace(opening, **{tree: (flipped,) + digests[1:]})),
             "opened columns do not hash to the committed Merkle root", WHERE)


def test_proximity_row_inconsistency_is_named(separate):
    commitment, witness, points, functionals, _, _ = separate
    real = zk._queries

    def queries(transcript, commitment_, rows):
        rows = rows.copy()
        rows[0, 0] = F.ext_add(rows[0, 0], F.ext_one())
        captured.append(rows)
        return real(transcript, commitment_, rows)

    captured = []
    with mock.patch.object(zk, "_queries", queries):
        values, opening = zk.open_points(witness, points, Transcript("o"), seed=2)
    forged = dataclasses.replace(opening, rows=captured[0])
    rejected(_verify(commitment, functionals, values, forged), "proximity row is inconsistent with the opened columns",
             WHERE)


@pytest.mark.parametrize("row, name", [(0, "proximity row"), (1, "the value row"), (2, "the mask row")])
def test_sent_row_inconsistency_is_named(row, name):
    commitment, witness, points, functionals = _setup(2, seed=61)
    values, opening = forge_hiding_opening(witness, points, F.ext_one(), Transcript("o"), row=row, column=2)
    rejected(_verify(commitment, functionals, values, opening), f"{name} is inconsistent with the opened columns",
             WHERE)


@pytest.mark.parametrize("k", [0, 1])
def test_value_mismatch_is_named(k):
    """Honest rows and columns, value k stated + 1 (the prover's queries follow the stated values): with two
    pieces the reduction's first round refuses it; with one, the final value check."""
    commitment, witness, points, functionals = _setup(2 - k, seed=71)
    honest = np.stack([F.ext_dot(zk._combine(w, witness.rows[:1 << commitment.log_rows, :1 << commitment.log_cols]),
                                 c) for (w, c), in functionals])
    wrong = honest.copy()
    wrong[-1] = F.ext_add(wrong[-1], F.ext_one())
    values, opening = zk.open_points(witness, points, Transcript("o"), values=wrong, seed=3)
    if k == 0:
        rejected(_verify(commitment, functionals, values, opening), ROUND_SUM_REASON,
                 f"{WHERE} round 0")
    else:
        rejected(_verify(commitment, functionals, values, opening), "a stated value differs from the opened rows",
                 WHERE)
    zk.verify_functionals(commitment, functionals, honest, zk.open_points(witness, points, Transcript("o"),
                                                                          seed=3)[1], Transcript("o"))


def test_verify_points_names_the_point_shape(separate):
    commitment, _, points, _, values, opening = separate
    rejected(lambda: zk.verify_points(commitment, points[:, 1:], values, opening, Transcript("o")),
             "points of shape (2, 5, 4), expected (m, 6, 4)", WHERE)
    rejected(lambda: zk.verify_points(commitment, points[0], values, opening, Transcript("o")),
             "points of shape (6, 4), expected (m, 6, 4)", WHERE)


# ------------------------------------------------------------------------------------- ZK sumcheck
LABEL = "zk-sc"


@pytest.fixture(scope="module")
def zk_sumcheck():
    table = F.random_elements(16, seed=81)
    claim = F.sum_(table)
    proof, _, _ = zk.prove_zk_sumcheck([(1, [table])], claim, Transcript("z"), LABEL, seed=5)
    zk.verify_zk_sumcheck(proof, claim, 4, 1, Transcript("z"), LABEL)
    return table, claim, proof


def _check(proof, claim, num_vars=4, degree=1):
    return lambda: zk.verify_zk_sumcheck(proof, claim, num_vars, degree, Transcript("z"), LABEL)


def test_zk_sumcheck_proof_type_is_named(zk_sumcheck):
    _, claim, _ = zk_sumcheck
    rejected(_check({"sumcheck": None}, claim), "expected a ZKSumcheckProof, got dict", LABEL)


def test_zk_sumcheck_message_shape_is_named(zk_sumcheck):
    _, claim, proof = zk_sumcheck
    rejected(_check(proof, claim, num_vars=5), "round messages of shape (4, 2, 4), expected (5, 2, 4)", LABEL)
    rejected(_check(proof, claim, degree=2), "round messages of shape (4, 2, 4), expected (4, 3, 4)", LABEL)
    bad = dataclasses.replace(proof, sumcheck=None)
    rejected(_check(bad, claim), "round messages of shape None, expected (4, 2, 4)", LABEL)


@pytest.mark.parametrize("name", ["mask_sum", "mask_eval"])
def test_zk_sumcheck_mask_values_are_named(zk_sumcheck, name):
    _, claim, proof = zk_sumcheck
    value = getattr(proof, name)
    for bad in (value[:3], value + np.uint64(F.P), list(value)):
        rejected(_check(dataclasses.replace(proof, **{name: bad}), claim), f"{name} is not a canonical F_p4 element",
                 LABEL)


def test_zk_sumcheck_mask_commitment_is_named(zk_sumcheck):
    _, claim, proof = zk_sumcheck
    mask = proof.mask_commitment
    reason = "mask commitment has the wrong shape or does not hide"
    for bad in (None, dataclasses.replace(mask, log_rows=1), dataclasses.replace(mask, num_vars=mask.num_vars + 1),
                dataclasses.replace(mask, params=dataclasses.replace(mask.params, hiding=False))):
        rejected(_check(dataclasses.replace(proof, mask_commitment=bad), claim), reason, LABEL)


def test_zk_sumcheck_claim_error_is_named(zk_sumcheck):
    _, _, proof = zk_sumcheck
    error = rejected(_check(proof, [1, 2, 3]), "sumcheck: claim must be an int or a canonical (4,) uint64 array, got shape (3,)",
                     LABEL)
    assert error.where == LABEL


def test_zk_sumcheck_consistent_cheater_fails_the_final_value_or_the_mask_opening(zk_sumcheck):
    """A consistent cheater passes every round: the verifier's rounds do not reject; the sub-claim is off."""
    table, claim, _ = zk_sumcheck
    wrong = F.ext_add(claim, F.ext_one())
    proof, _, finals = consistent_prove_zk_sumcheck([(1, [table])], wrong, Transcript("z"), LABEL, seed=6)
    sub = zk.verify_zk_sumcheck(proof, wrong, 4, 1, Transcript("z"), LABEL)
    assert not F.ext_eq(sub.expected_value, finals[0][0])


def test_zk_sumcheck_round_check_is_named(zk_sumcheck):
    _, claim, proof = zk_sumcheck
    messages = proof.sumcheck.round_messages.copy()
    messages[1, 0] = F.ext_add(messages[1, 0], F.ext_one())
    bad = dataclasses.replace(proof, sumcheck=dataclasses.replace(proof.sumcheck, round_messages=messages))
    rejected(_check(bad, claim), ROUND_SUM_REASON, LABEL + " round 1")
