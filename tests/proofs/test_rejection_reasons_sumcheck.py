"""Each check of the sumcheck (proofs/sumcheck.py) says which check failed: the verifier's ProofRejected
(reason and where, the round index included) and the prover's ProofError (the term, the limit)."""
import numpy as np
import pytest

from proofs.sumcheck import ROUND_SUM_REASON
from proofs import field as F
from proofs.sumcheck import (SubClaim, SumcheckProof, SumcheckProver, SumcheckVerifier, combine_evaluations,
                             prove_sumcheck, verify_sumcheck)
from proofs.transcript import Transcript

from .cheating import consistent_prove_sumcheck
from .rejection_helpers import raises_error, rejected


@pytest.fixture(scope="module")
def proved():
    a, b = F.random_elements(16, seed=11), F.random_elements(16, seed=12)
    claim = int(F.dot(a, b))
    proof, point, finals = prove_sumcheck([(1, [a, b])], claim, Transcript("s"), "lbl")
    verify_sumcheck(proof, claim, 4, 2, Transcript("s"), "lbl")
    return a, b, claim, proof, finals


def _verify(proof, claim, num_vars=4, degree=2, label="lbl"):
    return lambda: verify_sumcheck(proof, claim, num_vars, degree, Transcript("s"), label)


def test_message_shape_is_named(proved):
    _, _, claim, proof, _ = proved
    rejected(_verify(proof, claim, num_vars=3), "round messages of shape (4, 3, 4), expected (3, 3, 4)", "lbl")
    rejected(_verify(proof, claim, degree=1), "round messages of shape (4, 3, 4), expected (4, 2, 4)", "lbl")
    rejected(_verify(None, claim), "round messages of shape None, expected (4, 3, 4)", "lbl")
    rejected(_verify(SumcheckProof(proof.round_messages.tolist()), claim),
             "round messages of shape None, expected (4, 3, 4)", "lbl")


def test_claim_error_is_named(proved):
    _, _, _, proof, _ = proved
    rejected(_verify(proof, np.zeros(3, dtype=np.uint64)),
             "sumcheck: claim must be an int or a canonical (4,) uint64 array, got shape (3,)", "lbl")


@pytest.mark.parametrize("j", [0, 2])
def test_round_checks_name_the_round(proved, j):
    _, _, claim, proof, _ = proved
    messages = proof.round_messages.copy()
    messages[j, 1] = F.ext_add(messages[j, 1], F.ext_one())
    rejected(_verify(SumcheckProof(messages), claim), ROUND_SUM_REASON, f"lbl round {j}")
    messages = proof.round_messages.copy()
    messages[j, 2, 0] = np.uint64(F.P)
    rejected(_verify(SumcheckProof(messages), claim),
             "round message of shape (3, 4), expected (3, 4) canonical field elements", f"lbl round {j}")


def test_interactive_verifier_limits_are_named():
    verifier = SumcheckVerifier(0, 1, 1, where="here")
    rejected(lambda: verifier.check_round(np.zeros((3, 4), dtype=np.uint64)),
             "round message of shape (3, 4), expected (2, 4) canonical field elements", "here round 0")
    raises_error(lambda: verifier.bind(F.ext_one()), "sumcheck verifier: bind before check_round")
    rejected(verifier.subclaim, "0 rounds for 1 variables", "here")
    verifier.check_round(np.zeros((2, 4), dtype=np.uint64))
    verifier.bind(F.ext_one())
    rejected(lambda: verifier.check_round(np.zeros((2, 4), dtype=np.uint64)),
             "more round messages than variables", "here round 1")
    rejected(lambda: SumcheckVerifier([1, 2], 1, 1, where="here"),
             "sumcheck: claim must be an int or a canonical (4,) uint64 array, got shape (2,)", "here")


def test_subclaim_check_is_named(proved):
    a, b, claim, _, _ = proved
    wrong = F.ext_add(F.ext_from_base(F.to_field(claim)), F.ext_one())
    messages, _, _ = consistent_prove_sumcheck([(1, [a, b])], wrong, Transcript("s"), "lbl")
    sub = verify_sumcheck(messages, wrong, 4, 2, Transcript("s"), "lbl")
    rejected(lambda: sub.check(F.ext_zero()), "final evaluation differs from the sumcheck's sub-claim", "sumcheck")
    rejected(lambda: sub.check(F.ext_zero(), "layer 3"), "final evaluation differs from the sumcheck's sub-claim",
             "layer 3")
    sub.check(sub.expected_value)
    assert isinstance(sub, SubClaim)


def test_combine_evaluations_names_the_count_and_the_shape():
    one = F.ext_one()
    rejected(lambda: combine_evaluations([1, 2], [[one]]), "1 evaluated terms for 2 coefficients", "sumcheck")
    rejected(lambda: combine_evaluations([1], [[one, one[:3]]]),
             "a factor evaluation of shape (3,) is not a canonical (4,) element", "sumcheck")
    rejected(lambda: combine_evaluations([1], [[one + np.uint64(F.P)]]),
             "a factor evaluation of shape (4,) is not a canonical (4,) element", "sumcheck")
    raises_error(lambda: combine_evaluations([[1, 2]], [[one]]),
                 "sumcheck: coefficient must be an int or a canonical (4,) uint64 array, got shape (2,)")


def test_proof_bytes_errors_are_named(proved):
    proof = proved[3]
    data = proof.to_bytes()
    rejected(lambda: SumcheckProof.from_bytes(b"X" + data[1:]), "bad magic bytes", "sumcheck proof")
    rejected(lambda: SumcheckProof.from_bytes(data[:8] + bytes([2]) + data[9:]), "unsupported version 2 (expected 1)",
             "sumcheck proof")
    assert np.array_equal(SumcheckProof.from_bytes(data).round_messages, proof.round_messages)


def test_prover_errors_name_the_term_and_the_limit():
    a = F.random_elements(8, seed=13)
    raises_error(lambda: SumcheckProver([]), "sumcheck: terms must not be empty")
    raises_error(lambda: SumcheckProver([(1, [a, a[:4]])]), "sumcheck: all tables must have the same length, got [4, 8]")
    raises_error(lambda: SumcheckProver([(1, [a]), (1, [a] * 4)]), "sumcheck: term 1 has 4 factors, allowed 1..3")
    raises_error(lambda: SumcheckProver([(1, [a]), (1, [])]), "sumcheck: term 1 has 0 factors, allowed 1..3")
    raises_error(lambda: SumcheckProver([(1, [a]), (np.zeros(3, dtype=np.uint64), [a])]),
                 "sumcheck: coefficient of term 1 must be an int or a canonical (4,) uint64 array, got shape (3,)")
    raises_error(lambda: SumcheckProver([(1, [a]), (1, [a.astype(np.float64)])]),
                 "sumcheck: factor of term 1 must be a uint64 (n,) or (n, 4) array, got dtype=float64 shape=(8,)")
    raises_error(lambda: SumcheckProver([(1, [a + np.uint64(F.P)])]),
                 "sumcheck: factor of term 0 has entries >= p (not canonical field elements)")
    raises_error(lambda: SumcheckProver([(1, [a]), "x"]),
                 "sumcheck: term 1 must be (coefficient, [tables]), a list of tables or one table")
    prover = SumcheckProver([(1, [a[:2]])])
    raises_error(prover.final_evaluations, "sumcheck: 0 of 1 variables bound")
    prover.round_message()
    prover.bind(F.ext_one())
    raises_error(prover.round_message, "sumcheck: every variable is already bound")
    raises_error(lambda: prove_sumcheck([(1, [a])], int(F.sum_(a)) + 1, Transcript("s")),
                 "prove_sumcheck: the claim does not equal the sum of the terms")
    raises_error(lambda: prove_sumcheck([(1, [a])], [1, 2], Transcript("s")),
                 "sumcheck: claim must be an int or a canonical (4,) uint64 array, got shape (2,)")
