"""A training step proved in zero knowledge: the committed W' is one honest SGD step from W (issue 7).

A user commits to W and a batch, runs one integer SGD step, publishes a commitment to W' and a proof; the
verifier learns only that W' is one honest step. Zero knowledge is checked as far as tests can: proof
shapes do not depend on the witness, no witness bytes appear, fresh masks make proofs of the same witness
differ, every stated value is masked, and the sumcheck part is simulated without the witness. Inference
with private weights (and optionally a private input) reveals only the output.
"""
import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proofs
from proofs import ProofRejected
from proofs import field as F
from proofs.layers import step_proof as S
from proofs.layers.requant import decompose
from proofs.relations import mask_rank
from proofs.zk import HidingOpening, ZKSumcheckProof
from tests.proofs.rejection_helpers import step_rejected
from tests.reference.naive_training import naive_step

PUBLIC_ZK = dict(zk=True, api=proofs)  # hiding step proofs through the public API
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def step_data(seed, sizes=(7, 6, 3), batch=4):
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-20, 20, size=(sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    x = rng.integers(0, 60, size=(batch, sizes[0]))
    y = rng.integers(-20, 20, size=(batch, sizes[-1]))
    return weights, x, y, proofs.fit_spec(weights, x, y)


@pytest.fixture(scope="module")
def step():
    weights, x, y, spec = step_data(1)
    trace = proofs.training_trace(weights, x, y, spec)
    committed = proofs.commit_step(trace, zk=True)
    return spec, trace, committed, proofs.prove_training_step(trace, committed, zk=True)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 3))
def test_new_weights_equal_the_numpy_integer_reference_bit_for_bit(seed, layers):
    rng = np.random.default_rng(seed)
    sizes = tuple(int(v) for v in rng.integers(2, 9, size=layers + 1))
    weights, x, y, spec = step_data(seed, sizes, int(rng.integers(1, 6)))
    new = proofs.training_step(weights, x, y, spec)
    expected, _ = naive_step(weights, x, y, spec.shift, spec.grad_shift, spec.lr_shift)
    assert all(np.array_equal(a, np.array(b, dtype=np.int64)) for a, b in zip(new, expected))


def test_verifier_accepts_the_honest_step_from_bytes(step):
    spec, _, committed, proof = step
    proofs.verify_training_step(spec, committed, proofs.TrainingProof.from_bytes(proof.to_bytes()))


def test_a_wrong_update_is_rejected(step):
    spec, trace, _, _ = step
    new = [w.copy() for w in trace.new_weights]
    new[0][1, 2] -= 1
    step_rejected(dataclasses.replace(trace, new_weights=tuple(new)), spec=spec, **PUBLIC_ZK)


def test_a_wrong_gradient_is_rejected(step):
    spec, trace, _, _ = step
    grad_w = trace.grads[1].T @ trace.acts[1]
    grad_w[0, 0] += 1 << spec.lr_shift
    upd = decompose(grad_w.reshape(-1), spec.update_spec())
    new = list(trace.new_weights)
    new[1] = trace.weights[1] - upd.shifted.reshape(grad_w.shape)
    cheat = dataclasses.replace(trace, upd=trace.upd[:1] + (upd,), new_weights=tuple(new))
    step_rejected(cheat, spec=spec, **PUBLIC_ZK)


def test_a_sign_bit_flipped_in_the_backward_pass_is_rejected(step):
    spec, trace, _, _ = step
    quotient = trace.bwd[0].shifted.reshape(trace.masks[0].shape)
    b, o = np.argwhere(quotient != 0)[0]
    masks = trace.masks[0].copy()
    masks[b, o] = 1 - masks[b, o]
    grads = masks * quotient
    grad_w = grads.T @ trace.acts[0]
    upd = decompose(grad_w.reshape(-1), spec.update_spec())
    new = list(trace.new_weights)
    new[0] = trace.weights[0] - upd.shifted.reshape(grad_w.shape)
    cheat = dataclasses.replace(trace, masks=(masks,), grads=(grads,) + trace.grads[1:], upd=(upd,) + trace.upd[1:],
                                new_weights=tuple(new))
    step_rejected(cheat, spec=spec, **PUBLIC_ZK)


def test_a_batch_other_than_the_committed_one_is_rejected(step):
    spec, trace, committed, _ = step
    other_x = trace.x.copy()
    other_x[0, 0] += 1
    weights = [w[:spec.sizes[i + 1], :spec.sizes[i]] for i, w in enumerate(trace.weights)]
    other = proofs.training_trace(weights, other_x[:spec.batch, :spec.sizes[0]],
                                  trace.y[:spec.batch, :spec.sizes[-1]], spec)
    proof = proofs.prove_training_step(other, committed, zk=True)  # proves a step on another batch
    with pytest.raises(ProofRejected):
        proofs.verify_training_step(spec, committed, proof)


def _shape(items):
    out = []
    for item in items:
        if isinstance(item, np.ndarray):
            out.append(item.shape)
        elif isinstance(item, HidingOpening):
            out.append(("opening", item.rows.shape, item.mask_value.shape))
        elif isinstance(item, ZKSumcheckProof):
            out.append(("sumcheck", item.sumcheck.round_messages.shape))
    return out


def test_different_witnesses_of_one_statement_shape_give_proofs_of_the_same_shape(step):
    spec, _, _, proof = step
    weights, x, y, _ = step_data(1)
    rng = np.random.default_rng(9)
    weights = [w // 2 + rng.integers(-3, 3, size=w.shape) for w in weights]  # another witness that fits the spec
    other = proofs.training_trace(weights, x // 2, -y // 2, spec)
    committed = proofs.commit_step(other, zk=True)
    second = proofs.prove_training_step(other, committed, zk=True)
    proofs.verify_training_step(spec, committed, second)
    assert _shape(proof.items) == _shape(second.items)
    assert len(proof.commitments) == len(second.commitments)


def test_no_witness_value_appears_in_the_proof_bytes(step):
    spec, trace, _, proof = step
    data, checked = proof.to_bytes(), 0
    for table in [w[:spec.sizes[i + 1]] for i, w in enumerate(trace.weights)] + [trace.x[:spec.batch]]:
        values = F.to_field(np.asarray(table).reshape(-1))
        raw = values.astype("<u4").tobytes()
        # three consecutive entries, one of them negative (a residue near p: small positive triples could
        # also be the u32 shape headers of the proof's arrays)
        patterns = [raw[4 * k:4 * k + 12] for k in range(len(values) - 2) if values[k:k + 3].max() > F.P // 2]
        assert not any(p in data for p in patterns)
        checked += len(patterns)
    assert checked > 10


def test_the_same_witness_gives_different_proofs(step):
    spec, trace, committed, proof = step
    again = proofs.prove_training_step(trace, committed, zk=True)
    assert again.to_bytes() != proof.to_bytes()
    assert proofs.commit_step(trace, zk=True).weights.root != committed.weights.root


def test_every_stated_value_is_masked_and_the_sumcheck_part_is_simulatable(step):
    from proofs.relations import expected_summand, simulate_relation
    from proofs.sumcheck import SumcheckVerifier
    spec, _, committed, proof = step
    channel = S._verify_training(spec, S.as_steps(committed), proof)
    for key, claims in channel.claims.items():
        assert mask_rank(channel.layouts[key], [v for v, _ in claims]) == len(claims)
    label, relation = channel.relations[0]
    sim, values = simulate_relation(relation, channel.layouts, seed=3)
    verifier = SumcheckVerifier(F.ext_add(relation.claim, F.ext_mul(sim.rho, sim.mask_sum)), relation.num_vars(),
                                relation.degree(channel.layouts))
    for message, challenge in zip(sim.round_messages, sim.challenges):
        verifier.check_round(message)
        verifier.bind(challenge)
    expected = F.ext_sub(verifier.subclaim().expected_value, F.ext_mul(sim.rho, sim.mask_eval))
    assert F.ext_eq(expected, expected_summand(relation, sim.challenges, values))


@pytest.mark.parametrize("private_input", [pytest.param(True, marks=pytest.mark.slow), False])
def test_inference_with_private_weights_reveals_only_the_output(private_input):
    weights, x, y, spec = step_data(3)
    trace = proofs.forward_trace(weights, x, spec)
    committed = proofs.commit_forward(trace, zk=True, private_input=private_input)
    output = proofs.forward_output(trace)
    proof = proofs.prove_forward(trace, committed, zk=True)
    public = None if private_input else x
    proofs.verify_forward(spec, committed, output, proof, public_input=public)
    wrong = output.copy()
    wrong[0, 0] += 1
    with pytest.raises(ProofRejected):
        proofs.verify_forward(spec, committed, wrong, proof, public_input=public)


def test_aggregation_uses_one_commitment_for_all_layers(step):
    spec, trace, committed, proof = step
    layered = proofs.prove_training_step(trace, committed, zk=True, mode="layer")
    proofs.verify_training_step(spec, committed, layered)
    assert len(proof.commitments) == 1 < len(layered.commitments) == spec.num_layers


@pytest.mark.slow
def test_the_training_example_runs():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "prove_training_step.py")],
                            env={**os.environ, "HEZK_QUICK": "1"}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "rejected" in result.stdout and "verified" in result.stdout
