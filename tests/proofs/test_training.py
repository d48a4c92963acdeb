"""Training-step proofs: the step against a naive twin, honest proofs in every mode, cheating provers rejected."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import ModelError, ProofError, ProofRejected
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.layers.requant import decompose
from proofs.zk import HidingOpening
from tests.proofs.rejection_helpers import step_rejected
from tests.reference.naive_training import naive_step

SPEC = T.TrainingSpec((6, 5, 3), batch=3, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                      lr_shift=2, update_bits=8)


def _data(spec, seed, weight=8, act=16, target=10):
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-weight, weight, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(spec.num_layers)]
    x = rng.integers(-act, act, size=(spec.batch, spec.sizes[0]))
    y = rng.integers(-target, target, size=(spec.batch, spec.sizes[-1]))
    return weights, x, y


@pytest.fixture(scope="module")
def honest():
    weights, x, y = _data(SPEC, 1)
    return T.training_trace(weights, x, y, SPEC), (weights, x, y)


@st.composite
def _steps(draw):
    """Random shapes and data; the smallest fitting shifts, plus a random extra on the backward and update shifts
    (those only shrink what follows them, so the step still fits)."""
    layers = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, 6)) for _ in range(layers + 1))
    batch = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 10 ** 6)))
    weights = [rng.integers(-32, 32, size=(sizes[i + 1], sizes[i])) for i in range(layers)]
    x, y = rng.integers(-120, 120, size=(batch, sizes[0])), rng.integers(-120, 120, size=(batch, sizes[-1]))
    fit = T.fit_spec(weights, x, y, act_bits=8, weight_bits=6, grad_bits=16, update_bits=16)
    spec = dataclasses.replace(fit, grad_shift=fit.grad_shift + draw(st.integers(0, 3)),
                               lr_shift=fit.lr_shift + draw(st.integers(0, 3)))
    return spec, (weights, x, y)


@given(_steps())
def test_step_matches_naive_twin(case):
    spec, (weights, x, y) = case
    new = T.training_step(weights, x, y, spec)
    expected, _ = naive_step(weights, x, y, spec.shift, spec.grad_shift, spec.lr_shift)
    for got, want in zip(new, expected):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.array(want, dtype=np.int64))


@settings(max_examples=6)
@given(_steps())
def test_random_steps_prove_and_verify(case):
    spec, (weights, x, y) = case
    trace = T.training_trace(weights, x, y, spec)
    committed = S.commit_step(trace, zk=False)
    S.verify_training_step(spec, committed, S.prove_training_step(trace, committed, zk=False))


@pytest.mark.parametrize("zk", [False, True])
@pytest.mark.parametrize("mode", ["aggregate", "layer"])
def test_honest_step_verifies(honest, zk, mode):
    trace, _ = honest
    committed = S.commit_step(trace, zk=zk)
    proof = S.prove_training_step(trace, committed, zk=zk, mode=mode)
    S.verify_training_step(SPEC, committed, proof)
    assert proof.num_bytes == len(proof.to_bytes()) > 0


def test_aggregation_makes_fewer_commitments_sumchecks_and_openings(honest):
    trace, _ = honest
    committed = S.commit_step(trace, zk=False)
    aggregated = S.prove_training_step(trace, committed, zk=False, mode="aggregate")
    layered = S.prove_training_step(trace, committed, zk=False, mode="layer")
    assert len(aggregated.commitments) == 1  # every layer's tensors in one store (FAC4DNN)
    assert len(layered.commitments) == SPEC.num_layers  # one store per layer
    kinds = [lambda p: len(p.items), lambda p: sum(isinstance(i, HidingOpening) for i in p.items)]
    for count in kinds:  # one bit check and one opening per store (bytes: see benchmarks/proofs_training.py)
        assert count(aggregated) < count(layered)


@pytest.mark.parametrize("zk", [False, True])
def test_wrong_update_is_rejected(honest, zk):
    trace, _ = honest
    new = [w.copy() for w in trace.new_weights]
    new[1][0, 0] += 1
    step_rejected(dataclasses.replace(trace, new_weights=tuple(new)), zk=zk)


def test_wrong_weight_gradient_is_rejected(honest):
    trace, _ = honest
    grad_w = trace.grads[0].T @ trace.acts[0]
    grad_w[0, 1] += 1 << SPEC.lr_shift  # changes U by one, W' kept consistent with the wrong gradient
    upd = decompose(grad_w.reshape(-1), SPEC.update_spec())
    new = list(trace.new_weights)
    new[0] = trace.weights[0] - upd.shifted.reshape(grad_w.shape)
    step_rejected(dataclasses.replace(trace, upd=(upd,) + trace.upd[1:], new_weights=tuple(new)))


def test_flipped_sign_bit_in_backward_pass_is_rejected(honest):
    trace, _ = honest
    quotient = trace.bwd[0].shifted.reshape(trace.masks[0].shape)
    b, o = np.argwhere(quotient != 0)[0]  # a position where the mask matters
    masks = trace.masks[0].copy()
    masks[b, o] = 1 - masks[b, o]
    grads0 = masks * quotient
    grad_w = grads0.T @ trace.acts[0]
    upd = decompose(grad_w.reshape(-1), SPEC.update_spec())
    new = (trace.weights[0] - upd.shifted.reshape(grad_w.shape),) + trace.new_weights[1:]
    cheat = dataclasses.replace(trace, masks=(masks,), grads=(grads0,) + trace.grads[1:], upd=(upd,) + trace.upd[1:],
                                new_weights=new)
    assert not np.array_equal(new[0], trace.new_weights[0])
    step_rejected(cheat)


def test_batch_other_than_the_committed_one_is_rejected(honest):
    trace, (weights, x, y) = honest
    other_x = x.copy()
    other_x[0, 0] += 1
    other = T.training_trace(weights, other_x, y, SPEC)
    committed = S.commit_step(dataclasses.replace(trace, x=other.x), zk=False)  # batch X', W' from X
    step_rejected(trace, committed)


def test_new_weights_of_another_batch_are_rejected(honest):
    trace, (weights, x, y) = honest
    other_y = y.copy()
    other_y[1, 2] += 3
    other = T.training_trace(weights, x, other_y, SPEC)
    committed = S.commit_step(dataclasses.replace(other, y=trace.y), zk=False)  # batch (X, Y), W' from (X, Y')
    step_rejected(other, committed)


def test_tampered_and_truncated_proofs_are_rejected(honest):
    trace, _ = honest
    committed = S.commit_step(trace, zk=False)
    proof = S.prove_training_step(trace, committed, zk=False)
    arrays = [k for k, item in enumerate(proof.items) if isinstance(item, np.ndarray)]
    for k in (arrays[0], arrays[len(arrays) // 2], arrays[-1]):
        items = list(proof.items)
        items[k] = items[k].copy()
        items[k].flat[0] = (int(items[k].flat[0]) + 1) % 2013265921
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, committed, dataclasses.replace(proof, items=tuple(items)))
    for items in (proof.items[:-1], proof.items + (proof.items[0],), proof.items[1:]):
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, committed, dataclasses.replace(proof, items=items))
    with pytest.raises(ProofRejected):
        S.verify_training_step(SPEC, committed, dataclasses.replace(proof, mode="other"))
    with pytest.raises(ProofRejected):
        S.verify_training_step(SPEC, committed, "not a proof")


def test_proof_does_not_verify_against_other_commitments(honest):
    trace, (weights, x, y) = honest
    committed = S.commit_step(trace, zk=False)
    proof = S.prove_training_step(trace, committed, zk=False)
    other = S.commit_step(T.training_trace([w + 1 for w in weights], x, y, SPEC), zk=False)
    with pytest.raises(ProofRejected):
        S.verify_training_step(SPEC, dataclasses.replace(committed, new_weights=other.new_weights), proof)
    zk_committed = S.commit_step(trace, zk=True)
    with pytest.raises(ProofRejected):  # non-hiding proof against hiding commitments
        S.verify_training_step(SPEC, zk_committed, proof)


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ModelError, match="sizes"):
        T.TrainingSpec((4,), batch=2)
    with pytest.raises(ModelError, match="batch"):
        T.TrainingSpec((4, 2), batch=0)
    with pytest.raises(ModelError, match="lr_shift"):
        T.TrainingSpec((4, 2), batch=2, lr_shift=-1)
    with pytest.raises(ModelError, match="shift \\+ act_bits"):
        T.TrainingSpec((4, 2), batch=2, shift=24, act_bits=8)
    with pytest.raises(ModelError, match="half the field"):
        T.TrainingSpec((1 << 20, 2), batch=1 << 20, act_bits=16, weight_bits=16, shift=12)
    weights, x, y = _data(SPEC, 2)
    with pytest.raises(ModelError, match="x must be an integer array of shape"):
        T.training_trace(weights, x[:, :2], y, SPEC)
    with pytest.raises(ModelError, match="weights\\[0\\] has entries"):
        T.training_trace([weights[0] * 100, weights[1]], x, y, SPEC)
    with pytest.raises(ModelError, match="forward layer 0"):
        T.training_trace([np.full_like(weights[0], 31), weights[1]], np.full_like(x, 31), y, SPEC)
    with pytest.raises(ModelError, match="3 matrices for 2 layers"):
        T.training_trace(weights + weights[:1], x, y, SPEC)
    trace = T.training_trace(weights, x, y, SPEC)
    with pytest.raises(ProofError, match="hiding"):
        S.prove_training_step(trace, S.commit_step(trace, zk=True), zk=False)


def test_step_does_not_mutate_inputs():
    weights, x, y = _data(SPEC, 3)
    copies = [w.copy() for w in weights], x.copy(), y.copy()
    T.training_step(weights, x, y, SPEC)
    for a, b in zip(weights + [x, y], copies[0] + [copies[1], copies[2]]):
        np.testing.assert_array_equal(a, b)


STEPS_SPEC = T.TrainingSpec((6, 5, 3), batch=3, act_bits=8, weight_bits=8, shift=6, grad_shift=5, grad_bits=12,
                            lr_shift=5, update_bits=8)


def _two_steps():
    weights, x, y = _data(STEPS_SPEC, 4, weight=6)
    rng = np.random.default_rng(5)
    first = T.training_trace(weights, x, y, STEPS_SPEC)
    x2, y2 = rng.integers(-16, 16, size=x.shape), rng.integers(-10, 10, size=y.shape)
    second = T.training_trace(first.new_weights_unpadded(), x2, y2, STEPS_SPEC)
    return first, second


def test_two_steps_in_one_proof_share_commitments_and_bit_checks():
    traces = _two_steps()
    committed = S.commit_steps(traces, zk=False)
    assert len(committed.weights) == 3 and len(committed.batches) == 2
    proof = S.prove_training_steps(traces, committed, zk=False)
    S.verify_training_steps(STEPS_SPEC, committed, proof)
    assert len(proof.commitments) == 1  # both steps' tensors in one store
    separate = [S.prove_training_step(t, S.commit_step(t, zk=False), zk=False) for t in traces]
    openings = lambda p: sum(isinstance(i, HidingOpening) for i in p.items)  # noqa: E731
    assert openings(proof) < sum(openings(p) for p in separate)


def test_a_wrong_second_step_is_rejected():
    first, second = _two_steps()
    new = [w.copy() for w in second.new_weights]
    new[0][1, 1] -= 1
    traces = [first, dataclasses.replace(second, new_weights=tuple(new))]
    committed = S.commit_steps(traces, zk=True)
    proof = S.prove_training_steps(traces, committed, zk=True)
    with pytest.raises(ProofRejected):
        S.verify_training_steps(STEPS_SPEC, committed, proof)
    with pytest.raises(ProofRejected):  # an empty proof
        S.verify_training_steps(STEPS_SPEC, committed, S.TrainingProof("aggregate", (), ()))
    with pytest.raises(ProofRejected):  # the steps' weights out of order
        S.verify_training_steps(STEPS_SPEC, dataclasses.replace(committed, weights=committed.weights[::-1]), proof)
    with pytest.raises(ProofError, match="does not start from"):
        S.commit_steps([second, first], zk=False)


@pytest.mark.parametrize("zk", [False, True])
def test_proof_bytes_round_trip_and_every_corruption_is_rejected(honest, zk):
    trace, _ = honest
    committed = S.commit_step(trace, zk=zk)
    proof = S.prove_training_step(trace, committed, zk=zk)
    data = proof.to_bytes()
    parsed = S.TrainingProof.from_bytes(data)
    assert parsed.to_bytes() == data
    S.verify_training_step(SPEC, committed, parsed)
    rng = np.random.default_rng(6)
    for position in rng.integers(0, len(data), size=12):
        corrupted = bytearray(data)
        corrupted[position] ^= 1 << int(rng.integers(8))
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, committed, S.TrainingProof.from_bytes(bytes(corrupted)))
    for cut in (0, 7, len(data) // 2, len(data) - 1):
        with pytest.raises(ProofRejected):
            S.TrainingProof.from_bytes(data[:cut])
    with pytest.raises(ProofRejected):
        S.TrainingProof.from_bytes(data + b"\x00")
    with pytest.raises(ProofRejected):
        S.TrainingProof.from_bytes("not bytes")


@pytest.mark.parametrize("private_input", [pytest.param(True, marks=pytest.mark.slow), False])
def test_forward_proof_with_hidden_weights_and_optional_private_input(private_input):
    weights, x, _ = _data(SPEC, 7)
    trace = T.forward_trace(weights, x, SPEC)
    committed = S.commit_forward(trace, zk=True, private_input=private_input)
    proof = S.prove_forward(trace, committed, zk=True)
    output = S.forward_output(trace)
    public = None if private_input else x
    S.verify_forward(SPEC, committed, output, proof, public_input=public)
    _, expected = naive_step(weights, x, np.zeros_like(output), SPEC.shift, SPEC.grad_shift, SPEC.lr_shift)
    np.testing.assert_array_equal(output, np.array(expected))
    wrong = output.copy()
    wrong[0, 0] += 1
    with pytest.raises(ProofRejected):
        S.verify_forward(SPEC, committed, wrong, proof, public_input=public)
    if not private_input:
        other = x.copy()
        other[1, 1] += 1
        with pytest.raises(ProofRejected):
            S.verify_forward(SPEC, committed, output, proof, public_input=other)
    with pytest.raises(ProofRejected):  # both or neither input given
        S.verify_forward(SPEC, committed, output, proof, public_input=None if public is not None else x)
