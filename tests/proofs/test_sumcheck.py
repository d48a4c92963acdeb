"""Sumcheck: honest proofs verify and their sub-claims match brute force; every tampering is rejected."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.sumcheck import (SumcheckProof, SumcheckProver, SumcheckVerifier, combine_evaluations,
                             prove_sumcheck, verify_sumcheck)
from proofs.transcript import Transcript
from tests.reference.sumcheck_naive import naive_sum, naive_summand_at


def random_instance(seed, k, num_terms, shared=True):
    """Random terms with 1..3 factors, base and extension tables, some tables shared between terms."""
    rng = np.random.default_rng(seed)
    pool = []
    for i in range(4):
        s = int(rng.integers(2 ** 32))
        pool.append(F.ext_random(2 ** k, seed=s) if i % 2 else F.random_elements(2 ** k, seed=s))
    terms = []
    for _ in range(num_terms):
        count = int(rng.integers(1, 4))
        picks = rng.integers(0, len(pool), size=count) if shared else range(count)
        factors = [pool[i] if shared else F.random_elements(2 ** k, seed=int(rng.integers(2 ** 32))) for i in picks]
        terms.append((F.ext_random((), seed=int(rng.integers(2 ** 32))), factors))
    return terms


def prove(terms, claim=None):
    claim = naive_sum(terms) if claim is None else claim
    return prove_sumcheck(terms, claim, Transcript("test")), claim


def degree_of(terms):
    return max(len(f) for _, f in terms)


def verify_and_settle(proof, claim, terms, factor_evals):
    """The verifier's full job in these tests: the rounds, then the sub-claim from the sent factor values."""
    k = proof.round_messages.shape[0]
    sub = verify_sumcheck(proof, claim, k, degree_of(terms), Transcript("test"))
    sub.check(combine_evaluations([c for c, _ in terms], factor_evals))
    return sub


@given(st.integers(0, 2 ** 32), st.integers(0, 5), st.integers(1, 3), st.booleans())
def test_honest_proof_verifies_and_subclaim_is_the_summand(seed, k, num_terms, shared):
    terms = random_instance(seed, k, num_terms, shared)
    (proof, point, evals), claim = prove(terms)
    sub = verify_and_settle(proof, claim, terms, evals)
    assert np.array_equal(sub.point, point) and point.shape == (k, 4)
    assert np.array_equal(sub.expected_value, naive_summand_at(terms, point))


@given(st.integers(0, 2 ** 32), st.integers(1, 4))
def test_every_perturbed_round_message_is_rejected(seed, k):
    terms = random_instance(seed, k, 2)
    (proof, _, evals), claim = prove(terms)
    messages = proof.round_messages
    for j in range(messages.shape[0]):
        for x in range(messages.shape[1]):
            tampered = messages.copy()
            tampered[j, x, seed % 4] = (tampered[j, x, seed % 4] + 1) % F.P
            with pytest.raises(ProofRejected):
                verify_and_settle(SumcheckProof(tampered), claim, terms, evals)


@given(st.integers(0, 2 ** 32), st.integers(0, 4))
def test_wrong_claim_and_wrong_evaluations_are_rejected(seed, k):
    terms = random_instance(seed, k, 2)
    (proof, _, evals), claim = prove(terms)
    wrong = F.ext_add(claim, F.ext_one())
    with pytest.raises(ProofRejected):
        verify_and_settle(proof, wrong, terms, evals)
    bad_evals = [list(values) for values in evals]
    bad_evals[0][0] = F.ext_add(bad_evals[0][0], F.ext_one())
    with pytest.raises(ProofRejected):
        verify_and_settle(proof, claim, terms, bad_evals)
    for malformed in (None, [1, 2], np.full(4, F.P, dtype=np.uint64)):
        bad_evals[0][0] = malformed
        with pytest.raises(ProofRejected):
            verify_and_settle(proof, claim, terms, bad_evals)


def test_prover_refuses_a_false_claim():
    terms = random_instance(1, 3, 2)
    with pytest.raises(ProofError, match="claim does not equal"):
        prove(terms, F.ext_add(naive_sum(terms), F.ext_one()))


def test_malformed_proofs_are_rejected():
    terms = random_instance(2, 3, 2)
    (proof, _, _), claim = prove(terms)
    d = degree_of(terms)
    for messages in (proof.round_messages[:-1], proof.round_messages[:, :-1], proof.round_messages.astype(np.int64),
                     np.full_like(proof.round_messages, F.P)):
        with pytest.raises(ProofRejected):
            verify_sumcheck(SumcheckProof(messages), claim, 3, d, Transcript("test"))
    with pytest.raises(ProofRejected):
        verify_sumcheck(None, claim, 3, d, Transcript("test"))
    with pytest.raises(ProofRejected):
        verify_sumcheck(proof, claim, 3, d, Transcript("other label"))


def test_proof_bytes_round_trip_and_corruption():
    terms = random_instance(3, 4, 3)
    (proof, _, _), _ = prove(terms)
    data = proof.to_bytes()
    assert np.array_equal(SumcheckProof.from_bytes(data).round_messages, proof.round_messages)
    for cut in (0, 1, 5, len(data) - 1):
        with pytest.raises(ProofRejected):
            SumcheckProof.from_bytes(data[:cut])
    with pytest.raises(ProofRejected, match="trailing"):
        SumcheckProof.from_bytes(data + b"\x00")
    with pytest.raises(ProofRejected, match="non-canonical"):
        SumcheckProof.from_bytes(data[:-4] + b"\xff\xff\xff\xff")
    with pytest.raises(ProofRejected, match="magic"):
        SumcheckProof.from_bytes(b"X" + data[1:])
    with pytest.raises(ProofRejected, match="version"):
        SumcheckProof.from_bytes(data[:8] + b"\x07" + data[9:])


@given(st.integers(0, 2 ** 32), st.integers(1, 4))
def test_interactive_core_with_random_challenges(seed, k):
    terms = random_instance(seed, k, 2)
    claim = naive_sum(terms)
    prover, verifier = SumcheckProver(terms), SumcheckVerifier(claim, k, degree_of(terms))
    for j in range(k):
        verifier.check_round(prover.round_message())
        r = F.ext_random((), seed=seed + j)
        prover.bind(r)
        verifier.bind(r)
    sub = verifier.subclaim()
    assert np.array_equal(sub.expected_value, naive_summand_at(terms, sub.point))
    assert np.array_equal(combine_evaluations([c for c, _ in terms], prover.final_evaluations()),
                          sub.expected_value)


def test_bad_terms_raise_clear_errors():
    table = F.random_elements(8, seed=1)
    with pytest.raises(ProofError, match="4 factors"):
        SumcheckProver([(1, [table] * 4)])
    with pytest.raises(ProofError, match="same length"):
        SumcheckProver([(1, [table, F.random_elements(4, seed=2)])])
    with pytest.raises(ProofError, match="dtype=float64"):
        SumcheckProver([(1, [np.ones(8)])])
    with pytest.raises(ProofError, match="not a power of two"):
        SumcheckProver([(1, [F.random_elements(6, seed=2)])])


def test_inputs_are_not_mutated():
    terms = random_instance(5, 3, 2)
    copies = [[f.copy() for f in factors] for _, factors in terms]
    prove(terms)
    for (_, factors), saved in zip(terms, copies):
        assert all(np.array_equal(f, s) for f, s in zip(factors, saved))


def test_terms_without_coefficients_mean_coefficient_one():
    a, b = F.random_elements(8, seed=1), F.ext_random(8, seed=2)
    one = F.ext_one()
    (proof, _, evals), claim = prove([(one, [a, b]), (one, [a])])
    (lenient, _, lenient_evals), _ = prove([[a, b], a], claim)
    assert np.array_equal(proof.round_messages, lenient.round_messages)
    with pytest.raises(ProofError, match="term 0"):
        SumcheckProver([("x", 5)])
    with pytest.raises(ProofError, match="not canonical"):
        SumcheckProver([(1, [np.full(4, F.P, dtype=np.uint64)])])


@pytest.mark.parametrize("seed", [0, 1])
def test_fused_round_kernel_matches_numpy_rounds(seed, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setattr(F, "NUMBA_MIN_SIZE", 4)  # the fused kernel even for short tables
    n = 256
    a, c = F.random_elements(n, seed=seed), F.random_elements(n, seed=seed + 1)
    b = F.ext_random(n, seed=seed + 2)
    a[:2], b[:2] = F.P - 1, F.P - 1  # worst-case residues
    terms = [(F.ext_random((), seed=seed + 3), [a, b, c]), (5, [a]), (F.ext_one(), [b, c]), (2, [a, c])]
    prover = SumcheckProver(terms)
    for j in range(6):  # base tables in round 0, extension tables after binding
        fused = prover._round_message_fused()
        assert fused is not None and np.array_equal(fused, prover._round_message_numpy())
        prover.bind(F.ext_random((), seed=seed + 10 + j))


def test_every_corrupted_byte_is_rejected():
    terms = random_instance(7, 3, 2)
    (proof, _, evals), claim = prove(terms)
    data = proof.to_bytes()
    rng = np.random.default_rng(1)
    for position in range(len(data)):
        corrupted = bytearray(data)
        corrupted[position] ^= 1 << int(rng.integers(8))
        with pytest.raises(ProofRejected):
            verify_and_settle(SumcheckProof.from_bytes(bytes(corrupted)), claim, terms, evals)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 9), st.booleans(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_product_round_kernel_matches_the_general_one(log_half, three, degree, seed):
    """The scalar-register kernel for two or three F_p4 factors against masked_round_sums without masks
    (residues near p included)."""
    kernels = F.numba_kernels()
    if kernels is None:
        pytest.skip("numba not installed")
    n = 2 << log_half
    tables = [F.ext_random((n,), seed=seed + k) for k in range(3)]
    tables[0][::3] = F.P - 1
    factors = np.stack(tables if three else tables[:2])
    expected, out = np.empty((degree + 1, 4), dtype=np.uint64), np.empty((degree + 1, 4), dtype=np.uint64)
    kernels.masked_round_sums(factors, np.zeros((factors.shape[0], 1, 4), dtype=np.uint64),
                              np.zeros(factors.shape[0], dtype=np.int64), np.empty((0, n), dtype=np.uint64),
                              np.zeros(degree + 1, dtype=np.uint64), degree, expected)
    kernels.product_round_sums(tables[0], tables[1], tables[2], three, degree, out)
    assert np.array_equal(out, expected)
