"""Attention on the encrypted path (``tensor_ops.attention``): the calibrated approximations of an exported
``nn.TransformerEncoderLayer`` stay within 2% of onnxruntime's largest output magnitude; the same code on
CipherTensors (PlainBackend) equals the numpy run; a tiny attention block (scores, softmax, weighted sum: two
encrypted x encrypted einsums) runs under CKKS on an insecure N = 2^11 test ring (tests only, said so)."""
from __future__ import annotations

import numpy as np
import pytest

from crypto.errors import ParameterError, ShapeError
from tensor_ops.attention import InverseSqrtApprox, ReciprocalApprox, SoftmaxApprox, approximate, reshape
from tensor_ops.backends import PlainBackend
from tensor_ops.tensor import einsum, encrypt

from ..model.exported_models import onnxruntime_outputs
from ..model.test_transformer_reader import D_MODEL, SEQUENCE, encoder, export


def _relative_error(graph_model, onnx_model, x) -> float:
    expected = onnxruntime_outputs(onnx_model, x.reshape(len(x), SEQUENCE, D_MODEL))[0]
    got = graph_model.forward(x).reshape(expected.shape)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("layers, activation, degree, dynamo", [(1, "gelu", 7, True), (2, "gelu", 7, False),
                                                                  (1, "relu", 15, False)])
def test_approximated_encoder_is_within_two_percent_of_onnxruntime(layers, activation, degree, dynamo):
    """Softmax (shifted exp by squaring, Newton reciprocal), LayerNorm (Newton inverse sqrt) and the activation
    fitted on calibration data: within 2% of onnxruntime on unseen inputs; each approximation's error on the
    calibration data is stated (relu needs degree 15 on its calibrated range to stay within 2%)."""
    from hezk.model import read_onnx

    onnx_model = export(encoder(layers, activation), dynamo)
    graph = read_onnx(onnx_model)
    rng = np.random.default_rng(0)
    model = approximate(graph, rng.normal(size=(24, 1, SEQUENCE, D_MODEL)), activation_degree=degree)
    assert set(model.errors) == {n.name for n in graph.nodes if n.kind in ("softmax", "layernorm", "activation")}
    assert max(error for name, error in model.errors.items()
               if graph.nodes[[n.name for n in graph.nodes].index(name)].kind != "activation") < 1e-3
    assert _relative_error(model, onnx_model, rng.normal(size=(4, 1, SEQUENCE, D_MODEL))) < 0.02


def test_encoder_on_cipher_tensors_equals_the_numpy_run():
    """The graph forward on a CipherTensor (PlainBackend: the plans without encryption) equals the numpy run of
    the same approximations: every node lowered to einsum plans, reshapes of tiled outputs free."""
    from hezk.model import read_onnx

    graph = read_onnx(export(encoder(1, "gelu"), dynamo=True))
    rng = np.random.default_rng(1)
    model = approximate(graph, rng.normal(size=(8, 1, SEQUENCE, D_MODEL)))
    x = rng.normal(size=(1, 1, SEQUENCE, D_MODEL))
    y = model.forward(encrypt(PlainBackend(1 << 14), x)).decrypt()
    assert np.max(np.abs(y - model.forward(x))) < 1e-9


def test_newton_approximations_reach_their_tolerance_and_refuse_bad_ranges():
    """1/s and 1/sqrt(v) within the tolerance over their calibrated ranges (the step count follows from the
    range); empty or non-positive ranges are refused with ParameterError naming them."""
    for approx, exact, (low, high) in ((ReciprocalApprox(0.5, 20.0, 1e-6), lambda s: 1 / s, (0.5, 20.0)),
                                       (InverseSqrtApprox(0.01, 4.0, 1e-6), lambda v: v ** -0.5, (0.01, 4.0))):
        grid = np.linspace(low, high, 999)
        assert np.max(np.abs(approx(grid) * (1 / exact(grid)) - 1)) <= 1e-6 and approx.steps >= 2
    assert ReciprocalApprox(1.0, 2.0).steps < ReciprocalApprox(1.0, 50.0).steps  # wider range, more steps
    with pytest.raises(ParameterError, match=r"reciprocal range \[0.0, 1.0\]"):
        ReciprocalApprox(0.0, 1.0)
    with pytest.raises(ParameterError, match="inverse square root range"):
        InverseSqrtApprox(2.0, 1.0)
    with pytest.raises(ParameterError, match="low < 0"):
        SoftmaxApprox(0.0, 0.0, ReciprocalApprox(1.0, 2.0))


def test_reshape_of_a_cipher_tensor_is_a_layout_change_or_refused():
    """Splitting and merging axes of a CipherTensor changes only its layout; a reshape that is no layout change
    (a transposed tensor merged across its strides) raises ShapeError."""
    x = np.arange(24.0).reshape(2, 3, 4)
    t = encrypt(PlainBackend(64), x)
    assert np.array_equal(reshape(t, (6, 4)).decrypt(), x.reshape(6, 4))
    assert np.array_equal(reshape(t, (2, 1, 12)).decrypt(), x.reshape(2, 1, 12))
    with pytest.raises(ShapeError, match="not a layout change"):
        reshape(t.transpose((0, 2, 1)), (2, 12))


def test_tiny_attention_block_runs_encrypted():
    """softmax(q k^T / 4) v on 4 x 4 encrypted q, k, v under CKKS (insecure N = 2^11 test ring, 27 levels):
    both products through the planner's encrypted x encrypted plans, the softmax calibrated; equal to numpy's
    exact attention within 1e-3."""
    from crypto.context import CKKSContext
    from crypto.params import CKKSParameters
    from tensor_ops.nn import _RotationRecorder

    rng = np.random.default_rng(0)
    calibration = np.array([rng.normal(size=(4, 4)) @ rng.normal(size=(4, 4)).T * 0.25 for _ in range(64)])
    softmax = SoftmaxApprox.calibrated(calibration, degree=4, tolerance=1e-3)
    q, k, v = (rng.normal(size=(4, 4)) for _ in range(3))
    scores = q @ k.T * 0.25
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    exact = weights / weights.sum(-1, keepdims=True) @ v

    def attend(queries, keys, values):
        return einsum("qk,kd->qd", softmax(einsum("qd,kd->qk", queries, keys) * 0.25), values)

    params = CKKSParameters.from_literal(dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 26, log_p=[30] * 8,
                                              log_scale=50, dnum=12, hamming_weight=32, insecure=True))
    recorder = _RotationRecorder(params.slots)
    attend(*(encrypt(recorder, a) for a in (q, k, v)))
    ctx = CKKSContext.keygen(params, rotations=sorted(recorder.steps), seed=1)
    y = attend(*(encrypt(ctx, a) for a in (q, k, v))).decrypt(ctx)
    assert np.max(np.abs(y - exact)) < 1e-3
