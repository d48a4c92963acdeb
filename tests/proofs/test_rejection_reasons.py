"""Each check of the plain commitment's verifier (proofs/commit.py) says which check rejected, and where.

A user debugging a rejected proof reads ``ProofRejected.reason`` and ``.where``; these tests pin both for every
check of ``verify_batch`` / ``verify_opening`` / the Merkle multi-proof, each driven by an input that only that
check refuses (the forgers re-derive the Fiat-Shamir queries, so the earlier checks pass). The f-string parts
that matter (the shape received, the shape or bound expected, the row or value index) are pinned exactly.
"""
import dataclasses

import numpy as np
import pytest

import proofs.commit as C
from proofs import field as F
from proofs.commit import CommitParams, Commitment, commit, open_batch, verify_batch, verify_opening
from proofs.errors import ProofError, ProofRejected
from proofs.transcript import Transcript

from .cheating import forge_opening
from .rejection_helpers import rejected as _rejected

WHERE = "commitment opening"


def rejected(call, reason, where=WHERE):
    return _rejected(call, reason, where)


@pytest.fixture(scope="module")
def opened():
    """An honest opening of a 256-entry table at two points: (commitment, witness, points, values, proof)."""
    values = F.random_elements(256, seed=41)
    commitment, witness = commit(values, CommitParams())
    points = F.ext_random((2, 8), seed=42)
    stated, proof = open_batch(witness, points, Transcript("t"))
    verify_batch(commitment, points, stated, proof, Transcript("t"))
    return commitment, witness, points, stated, proof


def _verify(commitment, points, values, proof):
    return lambda: verify_batch(commitment, points, values, proof, Transcript("t"))


def test_commitment_type_is_named(opened):
    _, _, points, values, proof = opened
    rejected(_verify("root", points, values, proof), "expected a Commitment, got str")


def test_security_threshold_names_the_bits_and_the_minimum():
    commitment, witness = commit(F.random_elements(64, seed=43), CommitParams(num_queries=20))
    point = F.ext_random((1, 6), seed=44)
    values, proof = open_batch(witness, point, Transcript("t"))
    bits = commitment.security_bits
    rejected(_verify(commitment, point, values, proof), f"commitment parameters give {bits:.1f} bits < 100 required")
    assert f"{bits:.1f}" == "13.6"
    with pytest.raises(ProofRejected) as info:
        verify_batch(commitment, point, values, proof, Transcript("t"), min_security_bits=50)
    assert info.value.reason == "commitment parameters give 13.6 bits < 50 required"


def test_points_shape_is_named(opened):
    commitment, _, points, values, proof = opened
    rejected(_verify(commitment, points[:, :7], values, proof),
             "points of shape (2, 7, 4) and dtype uint64, expected canonical (m, 8, 4) uint64")


def test_values_shape_is_named(opened):
    commitment, _, points, values, proof = opened
    rejected(_verify(commitment, points, values[:, :3], proof), "values of shape (2, 3), expected canonical (2, 4)")
    rejected(_verify(commitment, points, values[:1], proof), "values of shape (1, 4), expected canonical (2, 4)")


def test_proof_type_is_named(opened):
    commitment, _, points, values, _ = opened
    rejected(_verify(commitment, points, values, {"u_rand": None}), "expected an OpeningProof, got dict")


def test_sent_rows_shapes_are_named(opened):
    commitment, _, points, values, proof = opened
    cols = 1 << commitment.log_cols
    rejected(_verify(commitment, points, values, dataclasses.replace(proof, u_rand=proof.u_rand.tolist())),
             f"u_rand of shape None, expected ({cols}, 4)")
    rejected(_verify(commitment, points, values, dataclasses.replace(proof, u_evals=proof.u_evals[:, 1:])),
             f"u_evals of shape (2, {cols - 1}, 4), expected (2, {cols}, 4)")


def test_opened_columns_shape_is_named(opened):
    commitment, _, points, values, proof = opened
    rows, queried = proof.columns.shape
    rejected(_verify(commitment, points, values, dataclasses.replace(proof, columns=proof.columns[:, 1:])),
             f"opened columns of shape ({rows}, {queried - 1}), expected ({rows}, {queried})")
    rejected(_verify(commitment, points, values, dataclasses.replace(proof, columns=proof.columns.tolist())),
             f"opened columns of shape None, expected ({rows}, {queried})")


def test_merkle_digest_type_is_named(opened):
    commitment, _, points, values, proof = opened
    bad = dataclasses.replace(proof, merkle_proof=proof.merkle_proof[:-1] + (b"short",))
    rejected(_verify(commitment, points, values, bad), "Merkle digests must be 32-byte strings")


def test_merkle_multiproof_length_is_named(opened):
    commitment, _, points, values, proof = opened
    short = dataclasses.replace(proof, merkle_proof=proof.merkle_proof[:-1])
    rejected(_verify(commitment, points, values, short), "Merkle multi-proof has too few digests")
    for extra in (1, 3):
        long = dataclasses.replace(proof, merkle_proof=proof.merkle_proof + (bytes(32),) * extra)
        rejected(_verify(commitment, points, values, long), f"Merkle multi-proof has {extra} extra digests")


def test_merkle_root_mismatch_is_named(opened):
    commitment, _, points, values, proof = opened
    columns = proof.columns.copy()
    columns[0, 0] = (int(columns[0, 0]) + 1) % F.P
    rejected(_verify(commitment, points, values, dataclasses.replace(proof, columns=columns)),
             "opened columns do not hash to the committed Merkle root")


def _forge_proximity(witness, points, transcript):
    """An opening whose proximity row (gamma^T M) is off at one column; queries re-derived, honest columns."""
    commitment = witness.commitment
    col_eqs, row_eqs = C._split_points(points, commitment, ProofError)
    gamma = C._begin(transcript, commitment, points)
    combined = C._combine_rows(np.stack([gamma] + row_eqs), witness.matrix)
    u_rand, u_evals = combined[0].copy(), combined[1:]
    u_rand[0] = F.ext_add(u_rand[0], F.ext_one())
    values = np.stack([F.ext_dot(u, c) for u, c in zip(u_evals, col_eqs)])
    indices = C._queries(transcript, commitment, values, u_rand, u_evals)
    return values, C.OpeningProof(u_rand, u_evals, witness.encoded[:, indices].copy(),
                                  tuple(C.merkle_open(witness.levels, indices)))


def _forge_value(witness, points, k, transcript):
    """Honest rows and columns, value ``k`` stated + 1; the queries re-derived over the wrong values."""
    commitment = witness.commitment
    col_eqs, row_eqs = C._split_points(points, commitment, ProofError)
    gamma = C._begin(transcript, commitment, points)
    combined = C._combine_rows(np.stack([gamma] + row_eqs), witness.matrix)
    u_rand, u_evals = combined[0], combined[1:]
    values = np.stack([F.ext_dot(u, c) for u, c in zip(u_evals, col_eqs)])
    values[k] = F.ext_add(values[k], F.ext_one())
    indices = C._queries(transcript, commitment, values, u_rand, u_evals)
    return values, C.OpeningProof(u_rand, u_evals, witness.encoded[:, indices].copy(),
                                  tuple(C.merkle_open(witness.levels, indices)))


def test_proximity_row_inconsistency_is_named(opened):
    commitment, witness, points, _, _ = opened
    values, proof = _forge_proximity(witness, points, Transcript("t"))
    rejected(_verify(commitment, points, values, proof), "proximity row is inconsistent with the opened columns")


@pytest.mark.parametrize("row", [0, 1])
def test_evaluation_row_inconsistency_is_named(opened, row):
    commitment, witness, points, _, _ = opened
    values, proof = forge_opening(witness, points, F.ext_one(), Transcript("t"), row=row, column=1)
    rejected(_verify(commitment, points, values, proof), f"evaluation row {row} is inconsistent with the opened columns")


@pytest.mark.parametrize("k", [0, 1])
def test_claimed_value_mismatch_is_named(opened, k):
    commitment, witness, points, _, _ = opened
    values, proof = _forge_value(witness, points, k, Transcript("t"))
    rejected(_verify(commitment, points, values, proof), f"claimed value {k} differs from the evaluation row")


def test_verify_opening_value_shape_is_named(opened):
    commitment, _, points, values, proof = opened
    rejected(lambda: verify_opening(commitment, points[0], values[0, :3], proof, Transcript("t")),
             "value of shape (3,), expected (4,)")


def test_commitment_parameter_errors_name_the_parameter():
    with pytest.raises(ProofError, match=r"^Commitment: params must be a CommitParams, got dict$"):
        Commitment(bytes(32), 4, {})
    with pytest.raises(ProofError, match=r"^Commitment: num_vars=31 not in \[0, 30\]$"):
        Commitment(bytes(32), 31)
    with pytest.raises(ProofError, match=r"^Commitment: root must be bytes, got str$"):
        Commitment("r", 4)
