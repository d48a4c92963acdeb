"""Libra-masked tables: the masked extension, the product sumcheck over committed tables, what it reveals."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import ProofError, ProofRejected
from proofs import field as F
from proofs import masked as M
from proofs.mle import mle_evaluate
from proofs.sumcheck import SumcheckVerifier
from proofs.transcript import Transcript
from proofs.zk import HidingParams, hiding_commit, open_functionals, verify_functionals
from tests.reference.naive_masked import naive_masked_value, naive_round_message


def _pair(size, seed):
    left, right = F.random_elements(size, seed=seed), F.random_elements(size, seed=seed + 1)
    return left, right, F.ext_from_base(F.sum_(F.mul(left, right)))


def _prove(left, right, claim, seed=None):
    (ca, wa) = M.masked_commit(left, seed=seed)
    (cb, wb) = M.masked_commit(right, seed=None if seed is None else seed + 7)
    return ca, cb, wa, wb, M.prove_zk_product(wa, wb, claim, Transcript("t"), seed=seed)


@settings(max_examples=6, deadline=None)
@given(st.integers(4, 6), st.integers(0, 2 ** 30))
def test_masked_value_matches_its_definition_and_the_table_on_the_cube(n, seed):
    table = F.random_elements(1 << n, seed=seed)
    commitment, witness = M.masked_commit(table, seed=seed)
    point = F.ext_random((n,), seed=seed + 1)
    value = M.masked_evaluate(witness, point)
    assert np.array_equal(value, naive_masked_value(table, witness.masks, point))
    opened, opening = open_functionals(witness.commitment_witness, [M.masked_functional(commitment, point)],
                                       Transcript("o"))
    assert F.ext_eq(opened[0], value)
    verify_functionals(commitment, [M.masked_functional(commitment, point)], opened, opening, Transcript("o"))
    index = seed % (1 << n)  # on the hypercube the mask vanishes: f^ = f
    corner = np.array([[(index >> b) & 1, 0, 0, 0] for b in range(n)], dtype=np.uint64)
    assert F.ext_eq(M.masked_evaluate(witness, corner), F.ext_from_base(table[index]))


@settings(max_examples=2, deadline=None)
@given(st.just(4), st.integers(0, 2 ** 30))
def test_round_messages_match_the_naive_twin(n, seed):
    left, right, _ = _pair(1 << n, seed)
    _, wa = M.masked_commit(left, seed=seed)
    _, wb = M.masked_commit(right, seed=seed + 3)
    prover = M.MaskedProductProver(wa, wb)
    challenges = F.ext_random((n,), seed=seed + 5)
    for j in range(n):
        expected = naive_round_message((left, wa.masks), (right, wb.masks), challenges[:j])
        assert np.array_equal(prover.round_message(), expected)
        prover.bind(challenges[j])
    final = prover.final_evaluations()[0]
    assert np.array_equal(final[0], naive_masked_value(left, wa.masks, challenges))


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2 ** 30))
def test_products_of_random_tables_prove_and_verify(size, seed):
    left, right, claim = _pair(size, seed)
    ca, cb, _, _, proof = _prove(left, right, claim)
    M.verify_zk_product(ca, cb, claim, proof, Transcript("t"))
    M.verify_zk_product(ca, cb, claim, M.ZKProductProof.from_bytes(proof.to_bytes()), Transcript("t"))


def test_false_claims_swapped_tables_and_tampering_are_rejected():
    left, right, claim = _pair(64, 1)
    ca, cb, wa, wb, proof = _prove(left, right, claim)
    with pytest.raises(ProofRejected):
        M.verify_zk_product(ca, cb, F.ext_add(claim, F.ext_one()), proof, Transcript("t"))
    other, _ = M.masked_commit(F.random_elements(64, seed=99))
    with pytest.raises(ProofRejected):
        M.verify_zk_product(other, cb, claim, proof, Transcript("t"))
    bad = proof.values.copy()
    bad[0, 0] = (bad[0, 0] + 1) % F.P
    with pytest.raises(ProofRejected):
        M.verify_zk_product(ca, cb, claim, M.ZKProductProof(proof.sumcheck, bad, proof.openings), Transcript("t"))
    with pytest.raises(ProofRejected):  # the openings of the two tables swapped
        M.verify_zk_product(ca, cb, claim, M.ZKProductProof(proof.sumcheck, proof.values, proof.openings[::-1]),
                            Transcript("t"))
    data = bytearray(proof.to_bytes())
    for position in (10, len(data) // 2, len(data) - 40):
        corrupted = bytearray(data)
        corrupted[position] ^= 1
        with pytest.raises(ProofRejected):
            M.verify_zk_product(ca, cb, claim, M.ZKProductProof.from_bytes(bytes(corrupted)), Transcript("t"))
    with pytest.raises(ProofRejected):
        M.ZKProductProof.from_bytes(bytes(data[:-1]))


def test_a_prover_whose_tables_do_not_have_the_claimed_sum_is_rejected():
    left, right, claim = _pair(32, 4)
    wrong_right = right.copy()
    wrong_right[5] = (wrong_right[5] + 1) % F.P
    ca, cb, _, _, proof = _prove(left, wrong_right, claim)  # prover runs on a product that sums to claim + a[5]
    with pytest.raises(ProofRejected):
        M.verify_zk_product(ca, cb, claim, proof, Transcript("t"))


def test_final_values_are_not_the_tables_evaluations_and_no_witness_bytes_appear():
    left, right, claim = _pair(256, 5)
    ca, cb, _, _, proof = _prove(left, right, claim)
    data = proof.to_bytes()
    windows = [left[i:i + 8].astype("<u4").tobytes() for i in range(0, 248, 8)]
    windows += [right[i:i + 8].astype("<u4").tobytes() for i in range(0, 248, 8)]
    assert not any(w in data for w in windows)
    sigma = M.verify_zk_product(ca, cb, claim, proof, Transcript("t"))
    for table, value in ((left, proof.values[0]), (right, proof.values[1])):  # f^(sigma) is stated, never f~(sigma)
        plain = mle_evaluate(table, sigma)
        assert not F.ext_eq(plain, value)
        assert plain.astype("<u4").tobytes() not in data


def test_same_witness_twice_gives_different_proofs_of_the_same_shape():
    left, right, claim = _pair(128, 6)
    first, second = _prove(left, right, claim), _prove(left, right, claim)
    assert first[0].root != second[0].root
    assert not np.array_equal(first[4].values, second[4].values)
    assert first[4].to_bytes() != second[4].to_bytes()
    other_left, other_right, other_claim = _pair(128, 60)
    third = _prove(other_left, other_right, other_claim)
    for a, b in ((first[4], third[4]),):
        assert a.values.shape == b.values.shape
        assert a.sumcheck.sumcheck.round_messages.shape == b.sumcheck.sumcheck.round_messages.shape
        assert [o.rows.shape for o in a.openings] == [o.rows.shape for o in b.openings]
        assert abs(a.num_bytes - b.num_bytes) <= 2 * 64 * (4 * 8 + 16 + 32 * 12)  # only query collisions differ


def test_masked_values_are_uniform_whatever_the_witness():
    """At a fixed point, f^ over fresh masks: a low bit of each coordinate is balanced for two witnesses."""
    point = F.ext_random((4,), seed=11)
    for table in (np.zeros(16, dtype=np.uint64), F.random_elements(16, seed=12)):
        bits = []
        for seed in range(400):
            _, witness = M.masked_commit(table, seed=seed)
            bits.append(M.masked_evaluate(witness, point) & 1)
        share = np.mean(bits, axis=0)
        assert np.all(np.abs(share - 0.5) < 0.1), share


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2 ** 30))
def test_simulated_product_transcripts_verify_without_the_witness(n, seed):
    claim = F.ext_random((), seed=seed)
    sim = M.simulate_zk_product(claim, n, seed=seed)
    s = sim.sumcheck
    verifier = SumcheckVerifier(F.ext_add(claim, F.ext_mul(s.rho, s.mask_sum)), n, M.DEGREE)
    for message, challenge in zip(s.round_messages, s.challenges):
        verifier.check_round(message)
        verifier.bind(challenge)
    sub = verifier.subclaim()  # the verifier's final check, with the simulated f^, g^
    assert F.ext_eq(F.ext_sub(sub.expected_value, F.ext_mul(s.rho, s.mask_eval)),
                    F.ext_mul(sim.values[0], sim.values[1]))


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ProofError, match="values"):
        M.masked_commit(np.arange(4))
    with pytest.raises(ProofError, match="params must be HidingParams"):
        M.masked_commit(F.random_elements(4, seed=1), {"hiding": True})
    with pytest.raises(ProofError, match="hiding"):
        M.masked_commit(F.random_elements(4, seed=1), HidingParams(hiding=False))
    _, a = M.masked_commit(F.random_elements(4, seed=1))
    _, b = M.masked_commit(F.random_elements(8, seed=1))
    _, b = M.masked_commit(F.random_elements(32, seed=1))
    with pytest.raises(ProofError, match="tables of 16 and 32"):
        M.prove_zk_product(a, b, 0, Transcript("t"))
    with pytest.raises(ProofRejected):
        M.verify_zk_product(a, b, 0, "not a proof", Transcript("t"))
    small, _ = hiding_commit(F.random_elements(8, seed=2))  # n = 2: no room for masks
    with pytest.raises(ProofRejected, match="n >= 4"):
        M.verify_zk_product(small, small, 0, _prove(*_pair(16, 3))[4], Transcript("t"))


def test_commit_does_not_mutate_inputs():
    table = F.random_elements(32, seed=3)
    before = table.copy()
    M.masked_commit(table)
    assert np.array_equal(table, before)
