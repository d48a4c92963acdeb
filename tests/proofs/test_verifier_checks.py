"""Every verifier check is the last line of defence in some test.

Each test here runs a *consistent* cheater (:mod:`tests.proofs.cheating`): every check before the targeted one
passes, and the lie is such that, with the targeted check removed, the verifier would accept. The tests match
the targeted check's message, so a lie caught elsewhere fails them too. (Checked by deleting each check in a
scratch copy: every test below then fails; see tests/mutation/survivors.md.)
"""
import dataclasses
from unittest import mock

import numpy as np
import pytest

from proofs import field as F
from proofs import zk
from proofs.commit import CommitParams, commit, open_batch, verify_batch
from proofs.errors import ProofRejected
from proofs.layers.common import Claim
from proofs.layers.relu import prove_decomposition, verify_decomposition
from proofs.layers.requant import Decomposition, decompose
from proofs.mle import mle_evaluate
from proofs.sumcheck import SumcheckProver, combine_evaluations, prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript

from .cheating import (ConsistentCheater, consistent_cheating, consistent_prove_sumcheck, forge_hiding_opening,
                       forge_opening, lenient_prove_sumcheck)

ONE = F.ext_one()


def _points(count, num_vars, seed):
    return F.ext_random((count, num_vars), seed=seed)


# ------------------------------------------------------------------------------------ plain commitment
@pytest.mark.parametrize("row", [0, 1])
def test_forged_plain_opening_is_caught_by_the_evaluation_row_check(row):
    values = F.random_elements(256, seed=1)
    _, witness = commit(values, CommitParams())
    points = _points(2, 8, seed=2)
    forged, proof = forge_opening(witness, points, ONE, Transcript("t"), row=row, column=3)
    assert F.ext_eq(forged[row], F.ext_add(mle_evaluate(values, points[row]), ONE))  # the lie: true value + 1
    with pytest.raises(ProofRejected, match=f"evaluation row {row} is inconsistent"):
        verify_batch(witness.commitment, points, forged, proof, Transcript("t"))


def test_the_forger_is_honest_with_delta_zero():
    """The forger's only lie is delta: with delta = 0 its opening verifies (so the check above is the one)."""
    values = F.random_elements(256, seed=1)
    commitment, witness = commit(values, CommitParams())
    points = _points(2, 8, seed=2)
    opened, proof = forge_opening(witness, points, F.ext_zero(), Transcript("t"))
    verify_batch(commitment, points, opened, proof, Transcript("t"))


def test_verifier_requires_100_bits_exactly():
    """148 queries at rate 1/4 give 100.35 bits (accepted), 147 give 99.68 (rejected by default)."""
    values = F.random_elements(64, seed=3)
    point = _points(1, 6, seed=4)
    for queries, accepted in ((147, False), (148, True)):
        commitment, witness = commit(values, CommitParams(num_queries=queries))
        opened, proof = open_batch(witness, point, Transcript("t"))
        if accepted:
            verify_batch(commitment, point, opened, proof, Transcript("t"))
        else:
            with pytest.raises(ProofRejected, match="< 100 required"):
                verify_batch(commitment, point, opened, proof, Transcript("t"))


def test_opening_challenges_depend_on_the_points():
    """Fiat-Shamir absorbs the evaluation points before gamma: openings at other points get another u_rand."""
    _, witness = commit(F.random_elements(256, seed=5), CommitParams())
    a, b = _points(1, 8, seed=6), _points(1, 8, seed=7)
    _, first = open_batch(witness, a, Transcript("t"))
    _, second = open_batch(witness, b, Transcript("t"))
    assert not np.array_equal(first.u_rand, second.u_rand)


# ----------------------------------------------------------------------------------- hiding commitment
@pytest.mark.parametrize("params", [zk.HidingParams(), zk.HidingParams(mask_rows=13), zk.HidingParams(hiding=False)],
                         ids=["fresh-masks", "committed-masks", "no-hiding"])
def test_forged_hiding_opening_is_caught_by_the_row_check(params):
    values = F.random_elements(256, seed=8)
    commitment, witness = zk.hiding_commit(values, params, seed=9)
    points = _points(2, 8, seed=10)
    forged, opening = forge_hiding_opening(witness, points, ONE, Transcript("t"), row=1, column=2)
    assert not F.ext_eq(forged[1], mle_evaluate(values, points[1]))  # a lie about the committed table
    with pytest.raises(ProofRejected, match="value row is inconsistent"):
        zk.verify_points(commitment, points, forged, opening, Transcript("t"))


def test_hiding_forger_is_honest_with_delta_zero():
    commitment, witness = zk.hiding_commit(F.random_elements(256, seed=8), zk.HidingParams(), seed=9)
    points = _points(2, 8, seed=10)
    opened, opening = forge_hiding_opening(witness, points, F.ext_zero(), Transcript("t"))
    zk.verify_points(commitment, points, opened, opening, Transcript("t"))


def test_hiding_verifier_requires_100_bits():
    """Without hiding, target 99 gives 99.68 bits (rejected) and target 100 gives 100.35 (accepted)."""
    values = F.random_elements(64, seed=11)
    point = _points(1, 6, seed=12)
    for target, accepted in ((99, False), (100, True)):
        commitment, witness = zk.hiding_commit(values, zk.HidingParams(target_bits=target, hiding=False))
        opened, opening = zk.open_points(witness, point, Transcript("t"))
        if accepted:
            zk.verify_points(commitment, point, opened, opening, Transcript("t"))
        else:
            with pytest.raises(ProofRejected, match="< 100 bits"):
                zk.verify_points(commitment, point, opened, opening, Transcript("t"))


def test_hiding_opening_challenges_depend_on_the_functionals():
    """Two functionals with the same value (they differ only on a zero column): Fiat-Shamir absorbs the
    functionals, so gamma (hence the proximity row gamma^T M) differs."""
    values = F.random_elements(256, seed=13)
    values[63::64] = 0  # the 4 x 64 matrix's last column is zero
    _, witness = zk.hiding_commit(values, zk.HidingParams(hiding=False))
    w, c = zk.mle_functional(witness.commitment, _points(1, 8, seed=14)[0])[0]
    other = c.copy()
    other[63] = F.ext_add(other[63], ONE)
    first_values, first = zk.open_functionals(witness, [[(w, c)]], Transcript("t"))
    second_values, second = zk.open_functionals(witness, [[(w, other)]], Transcript("t"))
    assert np.array_equal(first_values, second_values)
    assert not np.array_equal(first.rows[0], second.rows[0])


# ------------------------------------------------------------------------------------------- sumcheck
def _terms(seed, k=4):
    rng = np.random.default_rng(seed)
    tables = [F.to_field(rng.integers(0, 1000, 1 << k)) for _ in range(3)]
    return [(ONE, [tables[0], tables[1]]), (F.ext_from_base(np.uint64(3)), [tables[0], tables[1], tables[2]])]


def _true_sum(terms):
    return SumcheckProver(terms).claimed_sum()


def test_consistent_cheater_passes_every_round_and_is_caught_by_the_final_value():
    terms = _terms(1)
    false_claim = F.ext_add(_true_sum(terms), ONE)
    proof, point, finals = consistent_prove_sumcheck(terms, false_claim, Transcript("t"))
    sub = verify_sumcheck(proof, false_claim, 4, 3, Transcript("t"))  # every round passes
    value = combine_evaluations([t[0] for t in terms], finals)
    with pytest.raises(ProofRejected, match="final evaluation differs"):
        sub.check(value)


def test_combine_evaluations_refuses_a_missing_term():
    with pytest.raises(ProofRejected, match="1 evaluated terms for 2 coefficients"):
        combine_evaluations([ONE, ONE], [[ONE]])


def test_sumcheck_challenges_depend_on_the_claim():
    """The claim is absorbed before the first challenge: the same first round message under another claim
    gives another first challenge (else a claim could be chosen after the challenges)."""
    terms = _terms(2)
    true = _true_sum(terms)
    proof_a, point_a, _ = prove_sumcheck(terms, true, Transcript("t"))
    proof_b, point_b, _ = lenient_prove_sumcheck(terms, F.ext_add(true, ONE), Transcript("t"))
    assert np.array_equal(proof_a.round_messages[0], proof_b.round_messages[0])
    assert not np.array_equal(point_a[0], point_b[0])


# ------------------------------------------------------------------------------------ zero knowledge
def test_zk_sumcheck_masks_the_first_round_message():
    """Round message 0 is f_0 + rho g_0: with a non-zero mask it differs from the unmasked message in every
    evaluation (the unmasked one would reveal sum_x f(0, x) and sum_x f(1, x))."""
    terms = _terms(3)
    unmasked = SumcheckProver(terms).round_message()
    proof, _, _ = zk.prove_zk_sumcheck(terms, _true_sum(terms), Transcript("t"), seed=1)
    masked = proof.sumcheck.round_messages[0]
    assert all(not F.ext_eq(masked[x], unmasked[x]) for x in range(masked.shape[0]))
    assert proof.mask_commitment.params.hiding and not F.ext_eq(proof.mask_sum, F.ext_zero())


def test_zk_sumcheck_rejects_a_mask_commitment_that_does_not_hide():
    terms = _terms(4)
    real = zk.hiding_commit

    def plain_commit(values, params, *args, **kwargs):
        return real(values, dataclasses.replace(params, hiding=False), *args, **kwargs)

    with mock.patch.object(zk, "hiding_commit", plain_commit):
        proof, _, _ = zk.prove_zk_sumcheck(terms, _true_sum(terms), Transcript("t"), seed=2)
    assert not proof.mask_commitment.params.hiding
    with pytest.raises(ProofRejected, match="does not hide"):
        zk.verify_zk_sumcheck(proof, _true_sum(terms), 4, 3, Transcript("t"))


def test_zk_consistent_cheater_is_caught_by_the_final_value():
    terms = _terms(5)
    false_claim = F.ext_add(_true_sum(terms), ONE)
    cheater = ConsistentCheater(SumcheckProver(terms), false_claim)
    proof, _, finals = zk.prove_zk_sumcheck(cheater, false_claim, Transcript("t"), seed=3)
    sub = zk.verify_zk_sumcheck(proof, false_claim, 4, 3, Transcript("t"))
    with pytest.raises(ProofRejected, match="final evaluation differs"):
        sub.check(combine_evaluations([t[0] for t in terms], finals))


def test_zk_sumcheck_mask_evaluation_is_opened():
    """A prover stating g(sigma) + 1 (moving the sub-claim on f by -rho) and opening that value is caught by the
    mask opening's value check."""
    terms = _terms(6)
    real, calls = zk.poly_at, []

    def last_round_plus_one(coefficients, x):
        calls.append(1)
        value = real(coefficients, x)
        return F.ext_add(value, ONE) if len(calls) == 4 else value  # only g_3(r_3): the messages stay honest

    with mock.patch.object(zk, "poly_at", last_round_plus_one):
        proof, _, _ = zk.prove_zk_sumcheck(terms, _true_sum(terms), Transcript("t"), seed=4)
    with pytest.raises(ProofRejected, match="a stated value differs"):
        zk.verify_zk_sumcheck(proof, _true_sum(terms), 4, 3, Transcript("t"))


# ----------------------------------------------------------------------------------------------- zkReLU
def _relu_case(relu=True, seed=7, shift=4, q_bits=6, log_size=4):
    rng = np.random.default_rng(seed)
    spec = Decomposition(shift, q_bits, relu)
    limit = 1 << (q_bits - 1)
    acc = rng.integers(-limit << shift, limit << shift, 1 << log_size) // 2
    witness = decompose(acc, spec)
    point = F.ext_random((log_size,), seed=seed + 1)
    claim = Claim(point, mle_evaluate(F.to_field(witness.out), point))
    return spec, witness, claim


def _relu_prove_verify(spec, witness, claim, match):
    pairs = [commit(witness.table(g), CommitParams()) for g in range(len(spec.groups))]
    with consistent_cheating("proofs.layers.relu"):
        proof, _ = prove_decomposition(witness, [w for _, w in pairs], claim, Transcript("t"))
    with pytest.raises(ProofRejected, match=match):
        verify_decomposition([c for c, _ in pairs], spec, claim, proof, Transcript("t"), "test")


def _non_boolean(witness, spec):
    """Replace one element's remainder bits (0, 1) at planes (j, j + 1) by (2, 0): same value, not bits."""
    bits = witness.bits.copy()
    for j in range(spec.shift - 1):
        elements = np.flatnonzero((bits[j] == 0) & (bits[j + 1] == 1))
        if elements.size:
            bits[j, elements[0]], bits[j + 1, elements[0]] = 2, 0
            return dataclasses.replace(witness, bits=bits)
    raise AssertionError("no (0, 1) remainder pair")


@pytest.mark.parametrize("relu", [True, False])
def test_zkrelu_non_boolean_bits_are_caught_by_the_bits_final_value(relu):
    """Same rebuilt values, one entry 2: only the booleanity part of the bits sumcheck sees it, at its final value."""
    spec, witness, claim = _relu_case(relu)
    _relu_prove_verify(spec, _non_boolean(witness, spec), claim, "bits sumcheck final value")


def test_zkrelu_false_output_claim_is_caught_by_the_select_final_value():
    spec, witness, claim = _relu_case(True)
    wrong = Claim(claim.point, F.ext_add(claim.value, ONE))
    _relu_prove_verify(spec, witness, wrong, "select sumcheck final value")


def test_zkrelu_wrong_accumulator_is_caught_by_the_group_sum():
    """acc~(rho) stated from a changed accumulator while the bits are honest: the groups' claims (from the
    bits) no longer add up to the claim built from acc~(rho)."""
    spec, witness, claim = _relu_case(True, q_bits=14)  # 18 planes: two groups
    assert len(spec.groups) == 2
    acc = witness.acc.copy()
    acc[0] += 1
    _relu_prove_verify(spec, dataclasses.replace(witness, acc=acc), claim, "do not add up")


# ------------------------------------------------------------------------------------ training and inference
@pytest.mark.parametrize("zk_mode", [False, True], ids=["plain", "zk"])
def test_training_non_boolean_range_bits_are_caught_by_the_bit_relation(monkeypatch, zk_mode):
    """X's range bits with (0, 1) at planes (0, 1) of one element replaced by (2, 0): every rebuild relation
    holds, only the booleanity relation ("bits") sees it; the consistent cheater passes every round, so the
    relation's final check is the one that rejects."""
    from proofs.layers import step_proof as S
    from proofs.layers.step_stores import data_range

    from .test_zk_training import SPEC, _trace

    trace, _ = _trace(10)
    real = S.proof_tables
    planes = data_range(SPEC).groups[0][1]

    def forged(*args, **kwargs):
        tables = real(*args, **kwargs)
        bits = tables["t0.rngx"].reshape(planes, -1).copy()
        element = int(np.flatnonzero((bits[0] == 0) & (bits[1] == 1))[0])
        bits[0, element], bits[1, element] = 2, 0
        tables["t0.rngx"] = bits.reshape(-1)
        return tables

    monkeypatch.setattr(S, "proof_tables", forged)
    committed = S.commit_step(trace, zk=zk_mode)
    with consistent_cheating("proofs.layers.step_relations"):
        proof = S.prove_training_step(trace, committed, zk=zk_mode)
    with pytest.raises(ProofRejected, match="do not satisfy the relation") as caught:
        S.verify_training_step(SPEC, committed, proof)
    assert "bits" in str(caught.value)


# ---------------------------------------------------------------------------------- reusable commitments
def test_reusable_copies_that_disagree_are_caught_by_the_agreement_relation(monkeypatch):
    """Copy 1 commits to weights with one entry changed; the agreement sumcheck is proven by the consistent
    cheater and every opening is honest, so only the agreement relation's final check can reject."""
    from proofs.layers import reusable as R
    from proofs.layers import step_proof as S

    from tests.proofs.test_commitment_reuse_hiding import _forward

    trace = _forward(1)
    real, made = R.commit_store, []

    def second_copy_differs(layout, tables, params, **kwargs):
        made.append(1)
        if len(made) == 2:
            tables = dict(tables)
            key = next(iter(tables))
            tables[key] = tables[key].copy()
            tables[key][0] = (tables[key][0] + np.uint64(1)) % np.uint64(F.P)
        return real(layout, tables, params, **kwargs)

    monkeypatch.setattr(R, "commit_store", second_copy_differs)
    with consistent_cheating("proofs.layers.step_relations"):
        committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=2)
    layout = S.weight_layout(trace.spec, True)
    reusable = committed.weights["w0"] if isinstance(committed.weights, dict) else committed.weights
    params = R.base_params(reusable)
    with pytest.raises(ProofRejected, match="do not satisfy the relation") as caught:
        R.verify_reusable(layout, reusable, params, "test")
    assert "agreement" in str(caught.value)


# ------------------------------------------------------------------------------------------ plain Network
def test_network_non_boolean_bits_are_caught_by_the_zkrelu_final_value():
    """The whole plain Network proof with the hidden layer's bits made non-Boolean (same values): every other
    check passes (rounds consistent, openings honest), the zkReLU bits final value rejects."""
    from proofs.layers.network import Network, verify_network
    from proofs.quantize import quantize_input

    from .test_tamper import BATCH, SIZES, make_model

    model = make_model(0)
    network = Network(model, zk=False)
    x = quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (BATCH, SIZES[0])))
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    layer = dataclasses.replace(witness.layers[0], decomposition=_non_boolean(hidden, hidden.spec))
    tampered = dataclasses.replace(witness, layers=(layer,) + witness.layers[1:])
    with consistent_cheating("proofs.layers.relu"):
        proof = network.prove_witness(tampered)
    with pytest.raises(ProofRejected, match="bits sumcheck final value"):
        verify_network(network.commitment, x, proof)


# ------------------------------------------------------------------------- opening shape checks (mutation)
def test_plain_opening_shape_checks_each_reject_on_their_own():
    """Each malformed part is refused by its own shape/canonicity check (not by a later failure)."""
    values = F.random_elements(256, seed=21)
    commitment, witness = commit(values, CommitParams())
    points = _points(1, 8, seed=22)
    opened, proof = open_batch(witness, points, Transcript("t"))
    p = np.uint64(F.P)
    cases = [("values of shape", opened + p, proof),  # same residues, not canonical
             ("u_rand of shape", opened, dataclasses.replace(proof, u_rand=proof.u_rand + p)),
             ("u_evals of shape", opened, dataclasses.replace(proof, u_evals=proof.u_evals[:, :-1])),
             ("u_evals of shape", opened, dataclasses.replace(proof, u_evals=proof.u_evals + p)),
             ("32-byte", opened, dataclasses.replace(proof, merkle_proof=proof.merkle_proof[:1] + (b"x" * 31,))),
             ("32-byte", opened, dataclasses.replace(proof, merkle_proof=list(proof.merkle_proof[:1]) + [None]))]
    for match, stated, bad in cases:
        with pytest.raises(ProofRejected, match=match):
            verify_batch(commitment, points, stated, bad, Transcript("t"))


def test_verify_opening_passes_its_security_threshold_on():
    """verify_opening(min_security_bits=10) accepts a 20-query (13.6-bit) commitment; the default refuses it."""
    from proofs.commit import Commitment, open_commitment, verify_opening

    values = F.random_elements(64, seed=23)
    commitment, witness = commit(values, CommitParams(num_queries=20))
    point = _points(1, 6, seed=24)[0]
    value, proof = open_commitment(witness, point, Transcript("t"))
    verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=10)
    with pytest.raises(ProofRejected, match="required"):
        verify_opening(commitment, point, value, proof, Transcript("t"))
    assert Commitment(bytes(32), 30).num_vars == 30  # MAX_NUM_VARS itself is allowed
