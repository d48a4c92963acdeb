"""Issue 11, item 1: the padding of every tensor of a training or inference proof is constrained.

Tensors are padded to powers of two (widths to at least 8). Each cheat below puts nonzero values in one kind
of padded position and is *consistent*: the trace is the honest one of the padded network (every width and
the batch at their padded sizes) on the dirty tensors, proved by the honest prover code, so every relation
other than the padding checks holds. Before the fix each proof was accepted (checked against the old
modules); the audit's attack (16 -> 10 -> 4 on 5 samples, 6 more hidden units and 3 more samples in the
padding) made the committed W' differ from the declared network's SGD step, and an inference proof accept
an output the declared weights do not produce.
"""
import dataclasses
from unittest import mock

import numpy as np
import pytest

from proofs import ProofRejected
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.layers.common import pad_matrix
from tests.proofs.rejection_helpers import step_rejected

AUDIT = T.TrainingSpec((16, 10, 4), batch=5, act_bits=8, weight_bits=6, shift=3, grad_shift=0, grad_bits=12,
                       lr_shift=6, update_bits=10)
#: every axis padded (13 -> 16 inputs, 10 -> 16 hidden, 4 -> 8 outputs, 5 -> 8 samples); the forward
#: decomposition (11 bits, planes 8 + 4) and W's range bits (7 bits, 8 planes) have a plane past their width
SPEC = T.TrainingSpec((13, 10, 4), batch=5, act_bits=8, weight_bits=7, shift=3, grad_shift=2, grad_bits=12,
                      lr_shift=6, update_bits=10)


def _declared_data(spec, seed):
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-8, 8, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(spec.num_layers)]
    return weights, rng.integers(-16, 16, size=(spec.batch, spec.sizes[0])), \
        rng.integers(-10, 10, size=(spec.batch, spec.sizes[-1]))


def _padded(spec, weights, x, y):
    """The declared tensors zero-padded to the committed shapes."""
    L, B = spec.num_layers, spec.batch_padded
    return ([pad_matrix(weights[i], spec.width(i + 1), spec.width(i)) for i in range(L)],
            pad_matrix(x, B, spec.width(0)), pad_matrix(y, B, spec.width(L)))


def _big(spec):
    """The padded network: every width and the batch at their padded sizes."""
    return dataclasses.replace(spec, sizes=tuple(spec.width(i) for i in range(len(spec.sizes))),
                               batch=spec.batch_padded)


def _cheat(spec, weights, x, y, forward=False):
    """The honest trace of the padded network on (possibly dirty) padded tensors, labelled with ``spec``."""
    big = _big(spec)
    trace = T.forward_trace(weights, x, big) if forward else T.training_trace(weights, x, y, big)
    return dataclasses.replace(trace, spec=spec)


def _assert_forward_rejected(trace, output, public_input=None):
    committed = S.commit_forward(trace, zk=False, private_input=public_input is None)
    proof = S.prove_forward(trace, committed, zk=False)
    with pytest.raises(ProofRejected):
        S.verify_forward(trace.spec, committed, output, proof, public_input=public_input)


@pytest.mark.parametrize("zk", [False, True])
def test_the_audits_attack_is_rejected(zk):
    """16 -> 10 -> 4 on 5 samples, with 6 more hidden units and 3 more samples in the padding."""
    rng = np.random.default_rng(0)
    weights = [rng.integers(-8, 8, size=(16, 16)), pad_matrix(rng.integers(-8, 8, size=(4, 16)), 8, 16)]
    x, y = rng.integers(-16, 16, size=(8, 16)), pad_matrix(rng.integers(-10, 10, size=(8, 4)), 8, 8)
    cheat = _cheat(AUDIT, weights, x, y)
    honest = T.training_step([weights[0][:10], weights[1][:4, :10]], x[:5], y[:5, :4], AUDIT)
    assert not any(np.array_equal(a, b) for a, b in zip(honest, cheat.new_weights_unpadded()))  # a false statement
    step_rejected(cheat, zk=zk)


def test_the_audits_inference_attack_is_rejected():
    rng = np.random.default_rng(1)
    weights = [rng.integers(-8, 8, size=(16, 16)), pad_matrix(rng.integers(-8, 8, size=(4, 16)), 8, 16)]
    x = pad_matrix(rng.integers(-16, 16, size=(5, 16)), 8, 16)
    cheat = _cheat(AUDIT, weights, x, None, forward=True)
    output = S.forward_output(cheat)
    declared = S.forward_output(T.forward_trace([weights[0][:10], weights[1][:4, :10]], x[:5], AUDIT))
    assert not np.array_equal(output, declared)  # an output the declared-shape weights do not produce
    _assert_forward_rejected(cheat, output)
    _assert_forward_rejected(cheat, output, public_input=x[:5])


def _dirty(kind, weights, x, y, rng):
    """Nonzero values (in range) in one kind of padded position of SPEC's padded tensors."""
    def fill(shape):
        values = rng.integers(1, 4, size=shape) * rng.choice([-1, 1], size=shape)
        return values
    w0, w1 = weights
    if kind == "hidden units":  # W0's padded rows feed W1's padded columns
        w0[10:] = fill(w0[10:].shape)
        w1[:4, 10:] = fill(w1[:4, 10:].shape)
    elif kind == "samples":
        x[5:, :13] = fill(x[5:, :13].shape)
        y[5:, :4] = fill(y[5:, :4].shape)
    elif kind == "input features":  # X's and W0's padded columns
        x[:5, 13:] = fill(x[:5, 13:].shape)
        w0[:10, 13:] = fill(w0[:10, 13:].shape)
    elif kind == "output units":  # W1's padded rows and Y's padded columns
        w1[4:, :10] = fill(w1[4:, :10].shape)
        y[:5, 4:] = fill(y[:5, 4:].shape)
    elif kind == "weight rows":
        w0[12, 3] = 2
    elif kind == "weight columns":
        w1[2, 14] = -3
    elif kind == "input padding":
        x[1, 15] = 5
    elif kind == "target padding":
        y[6, 6] = -4
    else:
        raise ValueError(kind)


KINDS = ("hidden units", "samples", "input features", "output units", "weight rows", "weight columns",
         "input padding", "target padding")


@pytest.mark.parametrize("kind", KINDS)
def test_dirty_padding_in_a_training_step_is_rejected(kind):
    weights, x, y = _padded(SPEC, *_declared_data(SPEC, 2))
    _dirty(kind, weights, x, y, np.random.default_rng(3))
    step_rejected(_cheat(SPEC, weights, x, y))


@pytest.mark.parametrize("kind", ["hidden units", "input features", "weight rows", "weight columns",
                                  "input padding"])
def test_dirty_padding_in_an_inference_proof_is_rejected(kind):
    """(Dirty samples were rejected already: their outputs land in the public output's zero padding.)"""
    weights, x, y = _padded(SPEC, *_declared_data(SPEC, 4))
    _dirty(kind, weights, x, y, np.random.default_rng(5))
    cheat = _cheat(SPEC, weights, x, None, forward=True)
    _assert_forward_rejected(cheat, S.forward_output(cheat))


def test_dirty_new_weight_padding_is_rejected_by_the_update_relation():
    """W0's padded column 14 is read by nothing (X's column 14 is zero), so W'0 = W0 there: W' is dirty too,
    and the update relation (before the range checks in protocol order) rejects it."""
    weights, x, y = _padded(SPEC, *_declared_data(SPEC, 6))
    weights[0][3, 14] = 2
    cheat = _cheat(SPEC, weights, x, y)
    assert cheat.new_weights[0][3, 14] == 2
    step_rejected(cheat, where="update0")


def _with_a_set_bit(trace, slot, position, where):
    """Commit the proof's tables with entry ``position`` of ``slot`` set to 1 (a plane past the width)."""
    original = S.proof_tables

    def dirty_tables(*args, **kwargs):
        tables = original(*args, **kwargs)
        table = tables[slot].copy()
        assert table[position] == 0
        table[position] = 1
        tables[slot] = table
        return tables

    with mock.patch.object(S, "proof_tables", dirty_tables):
        step_rejected(trace, where=where)


def test_a_set_bit_in_a_decomposition_plane_past_the_width_is_rejected():
    """Planes past a decomposition's width have zero coefficients: before the fix no relation read them."""
    trace = T.training_trace(*_declared_data(SPEC, 7), SPEC)
    assert SPEC.forward_spec(0).width == 11 and SPEC.forward_spec(0).groups == ((0, 8), (8, 4))
    _with_a_set_bit(trace, "t0.fwd0.g1", 3 * 128 + 3, "forward0")  # plane 11 (= 8 + 3) of 8 x 16 entries


def test_a_set_bit_in_a_range_plane_past_the_width_is_rejected():
    trace = T.training_trace(*_declared_data(SPEC, 8), SPEC)
    _with_a_set_bit(trace, "t0.rngw1", 7 * 128 + 5, "range.w1")  # W1's 7 bits in 8 planes of 8 x 16 entries


@pytest.mark.parametrize("zk", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_honest_padded_steps_and_inference_still_verify(zk):
    trace = T.training_trace(*_declared_data(SPEC, 9), SPEC)
    committed = S.commit_step(trace, zk=zk)
    S.verify_training_step(SPEC, committed, S.prove_training_step(trace, committed, zk=zk))
    forward = T.forward_trace(*_declared_data(SPEC, 9)[:2], SPEC)
    committed = S.commit_forward(forward, zk=zk)
    S.verify_forward(SPEC, committed, S.forward_output(forward), S.prove_forward(forward, committed, zk=zk))
