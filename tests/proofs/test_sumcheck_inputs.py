"""Sumcheck prover inputs and state: each test kills surviving mutants of proofs/sumcheck.py (issue 19,
tests/mutation/survivors.md): integer tables reduced mod p, malformed tables and terms refused, shared tables
folded once, the round counter, the running sum after a bind, the fused kernel on a single table."""
import numpy as np
import pytest

from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.sumcheck import SumcheckProver, combine_evaluations, lagrange_eval, prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript
from tests.reference.sumcheck_naive import naive_sum


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32, np.int8])
def test_integer_tables_are_reduced_mod_p(dtype):
    values = np.array([-1, 2, 3, -4, 5, 0, 7, -8], dtype=np.int64)
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    table = values.astype(dtype)
    prover = SumcheckProver([(1, [table])])
    expected = F.ext_from_base(np.uint64(int(values.sum()) % F.P))
    assert np.array_equal(prover.claimed_sum(), expected)
    proof, _, evals = prove_sumcheck([(1, [table])], expected, Transcript("t"))
    sub = verify_sumcheck(proof, expected, 3, 1, Transcript("t"))
    sub.check(evals[0][0])


@pytest.mark.parametrize("shape", [(8, 3), (8, 5), (8, 1, 4), (2, 4, 4)])
def test_uint64_tables_of_other_shapes_are_refused(shape):
    with pytest.raises(ProofError, match="must be a uint64"):
        SumcheckProver([(1, [np.zeros(shape, dtype=np.uint64)])])


def test_a_term_of_non_tables_is_refused():
    with pytest.raises(ProofError, match="term 0"):
        SumcheckProver([[[1, 2, 3, 4]]])  # a list holding a Python list, not a table
    with pytest.raises(ProofError, match="term 1"):
        SumcheckProver([F.random_elements(4, seed=1), [F.random_elements(4, seed=2), 7]])


def test_a_table_shared_between_terms_is_stored_and_folded_once():
    a, b = F.random_elements(8, seed=1), F.ext_random(8, seed=2)
    prover = SumcheckProver([(1, [a, a]), (2, [a, b]), (3, [b])])
    assert len(prover._tables) == 2  # the documented sharing by identity: one fold per distinct table
    assert [indices for _, indices in prover._terms] == [[0, 0], [0, 1], [1]]


def test_round_message_after_the_last_round_raises():
    prover = SumcheckProver([(1, [F.random_elements(4, seed=3)])])
    for j in range(2):
        prover.round_message()
        prover.bind(F.ext_random((), seed=10 + j))
    with pytest.raises(ProofError, match="already bound"):
        prover.round_message()


def test_claimed_sum_after_a_bind_is_the_message_at_the_challenge():
    a, b = F.random_elements(16, seed=4), F.ext_random(16, seed=5)
    terms = [(F.ext_random((), seed=6), [a, b]), (F.ext_from_base(np.uint64(3)), [a])]
    prover = SumcheckProver(terms)
    assert np.array_equal(prover.claimed_sum(), naive_sum(terms))
    for j in range(3):
        message = prover.round_message()
        r = F.ext_random((), seed=20 + j)
        prover.bind(r)
        assert np.array_equal(prover.claimed_sum(), lagrange_eval(message, r))  # g_j(r) = sum of the folded tables


@pytest.mark.parametrize("ext", [False, True])
def test_fused_round_kernel_on_a_single_table(ext, monkeypatch):
    pytest.importorskip("numba")
    table = F.ext_random(64, seed=7) if ext else F.random_elements(64, seed=7)
    terms = [(5, [table])]
    numpy_prover = SumcheckProver(terms)
    expected = numpy_prover._round_message_numpy()
    monkeypatch.setattr(F, "NUMBA_MIN_SIZE", 4)  # the fused kernel for this short table
    fused = SumcheckProver(terms)._round_message_fused()
    assert fused is not None and np.array_equal(fused, expected)


@pytest.mark.parametrize("value", [np.array([1, 2, 3], dtype=np.uint64), np.array([F.P, 0, 0, 0], dtype=np.uint64),
                                   np.uint64(5), np.array([1, 2, 3, 4], dtype=np.int64)])
def test_combine_evaluations_refuses_each_malformed_factor_value(value):
    """Shape and canonicity are checked apart: a canonical value of the wrong shape, or a (4,) one with an
    entry >= p, is each a ProofRejected (never a numpy error, never accepted)."""
    good = F.ext_random((), seed=8)
    with pytest.raises(ProofRejected, match="canonical"):
        combine_evaluations([1], [[good, value]])
