"""Attention on the encrypted path (``tensor_ops.attention``, ``tensor_ops.attention_plan``): the calibrated
approximations of an exported ``nn.TransformerEncoderLayer`` stay within 2% of onnxruntime's largest output
magnitude; the same code on CipherTensors (PlainBackend) equals the numpy run; a tiny attention block and a tiny
whole encoder layer (d_model 8, 2 heads, sequence 4, through ``hezk plan`` / ``hezk infer``) run under CKKS on
insecure N = 2^10 / 2^11 test rings (tests only, said so: a 128-bit ring for the layer's depth needs bootstraps,
placed by tests/tensor_ops/test_attention_bootstrap.py's backend and stated by the plan)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from crypto.errors import ParameterError, ShapeError
from tensor_ops import cli
from tensor_ops.attention import (NEWTON_TOLERANCE, InverseSqrtApprox, ReciprocalApprox, SoftmaxApprox, approximate,
                                  reshape)
from tensor_ops.attention_plan import ScaleKeepingBackend, plan_attention, run_attention, samples_outside
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
    # the default tolerance, NEWTON_TOLERANCE relative (of 1/s, 1/sqrt(var) and the weights' sum), on outputs of
    # size ~1-4
    assert max(error for name, error in model.errors.items()
               if graph.nodes[[n.name for n in graph.nodes].index(name)].kind != "activation") < 4 * NEWTON_TOLERANCE
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
    from tensor_ops.nn import RotationRecorder

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
    recorder = RotationRecorder(params.slots)
    attend(*(encrypt(recorder, a) for a in (q, k, v)))
    ctx = CKKSContext.keygen(params, rotations=sorted(recorder.steps), seed=1)
    y = attend(*(encrypt(ctx, a) for a in (q, k, v))).decrypt(ctx)
    assert np.max(np.abs(y - exact)) < 1e-3


TINY = dict(d_model=8, heads=2, feedforward=16, sequence=4)


def _test_ring(levels: int, log_n: int = 11) -> dict:
    """An INSECURE test ring (tests only) of ``levels`` 30-bit levels at N = 2^log_n: the scale 2^30 and one prime
    per level keep the keys of a 100-level ring at a few hundred MiB."""
    return dict(log_n=log_n, log_q=[[30, 30]] + [[30]] * levels, log_p=[31] * (levels // 4 + 2), log_scale=30,
                dnum=4, insecure=True)


@pytest.fixture(scope="module")
def tiny_layer(tmp_path_factory):
    """A tiny exported encoder layer (GELU, TorchScript exporter), its ONNX file, 64 calibration samples and an
    input inside their range."""
    import onnx

    folder = tmp_path_factory.mktemp("tiny_layer")
    model = export(encoder(1, "gelu", d_model=TINY["d_model"], heads=TINY["heads"], feedforward=TINY["feedforward"]),
                   dynamo=False, sequence=TINY["sequence"], d_model=TINY["d_model"])
    onnx.save(model, folder / "layer.onnx")
    rng = np.random.default_rng(0)
    np.save(folder / "cal.npy", rng.normal(size=(64, 1, TINY["sequence"], TINY["d_model"])))
    np.save(folder / "x.npy", 0.8 * rng.normal(size=(1, TINY["sequence"], TINY["d_model"])))
    return folder


def test_plan_states_the_operators_and_errors_and_bootstraps_at_128_bits(tiny_layer, capsys):
    """``hezk plan`` on the exported layer names the encrypted x encrypted products, Softmax, LayerNorm and GELU
    with each approximation's max error on the calibration data and the measured depth; no 128-bit ring holds
    that depth without bootstraps, so the plan takes N16_BOOT and states its bootstraps (no keys made); with
    --no-bootstrap: exit 2 naming the depth and the fix. Without calibration the refusal names --calibration."""
    model = str(tiny_layer / "layer.onnx")
    assert cli.main(["plan", "--model", model, "--calibration", str(tiny_layer / "cal.npy")]) == 0
    out = capsys.readouterr().out
    assert "2 products of two encrypted tensors" in out and "softmax" in out and "layer norm" in out
    assert out.count("max error") == 4 + 1 and "gelu: degree-7" in out  # 2 layer norms, softmax, gelu; the layer
    depth = int(out.split("depth: ")[1].split(" levels")[0])
    assert depth > 29 and "ciphertext bootstraps at" in out and "N=2^16, 23 levels" in out
    assert cli.main(["plan", "--model", model, "--calibration", str(tiny_layer / "cal.npy"), "--no-bootstrap"]) == 2
    err = capsys.readouterr().err
    assert f"consumes {depth} levels" in err and "--no-bootstrap" in err
    assert cli.main(["plan", "--model", model]) == 2
    assert "--calibration" in capsys.readouterr().err


def test_named_parameters_need_the_depth_and_security_or_the_opt_in(tiny_layer):
    """Named parameters with fewer levels than the measured depth (plus the alignment margin) are refused naming
    both; parameters below 128 bits are refused unless allowed (tests only)."""
    from crypto.params import CKKSParameters
    from hezk.model import read_onnx

    graph, calibration = read_onnx(str(tiny_layer / "layer.onnx")), np.load(tiny_layer / "cal.npy")
    shallow = CKKSParameters.from_literal(_test_ring(8, log_n=10))
    with pytest.raises(ParameterError, match=r"consumes \d+ levels .* hold 8: name parameters with at least"):
        plan_attention(graph, calibration, params=shallow, allow_insecure=True)
    with pytest.raises(ParameterError, match="not 128-bit secure"):
        plan_attention(graph, calibration, params=shallow)


def test_a_shallow_attention_graph_gets_128_bit_parameters_within_the_key_budget_or_a_refusal():
    """softmax(x x^T) on 4 x 4 samples is shallow enough for a 128-bit ring (``choose_parameters``): the plan
    names it when its Galois keys fit the key budget, and refuses naming the key bytes and the budget when not."""
    import hezk.model

    graph = hezk.model.Graph("x", (4, 4), (
        hezk.model.Bilinear("scores", "MatMul", ("x", "x"), "s", "bij,bkj->bik"),
        hezk.model.Softmax("weights", "Softmax", ("s",), "y", 1)), "y")
    calibration = 0.5 * np.random.default_rng(4).normal(size=(32, 4, 4))
    plan, _ = plan_attention(graph, calibration)
    assert plan.params is not None and plan.params.security_bits == 128
    assert plan.params.max_level >= plan.depth + 2 and "security 128-bit" in plan.explain()
    refused, _ = plan_attention(graph, calibration, key_budget=1 << 20)
    assert refused.params is None and "MiB of Galois keys" in refused.refusal
    assert "key budget of 1 MiB" in refused.refusal
    with pytest.raises(ParameterError, match="Galois keys"):
        refused.require_parameters()


@pytest.mark.parametrize("degree, message", [("x", "--degree 'x' must be an integer"),
                                             ("0", r"degree=0 must be an integer in \[1, ")])
def test_a_bad_degree_for_an_attention_model_is_refused_in_one_line(tiny_layer, capsys, degree, message):
    """--degree on the attention path: not an integer, or out of range, exits 2 naming it (no traceback)."""
    import re

    assert cli.main(["plan", "--model", str(tiny_layer / "layer.onnx"), "--calibration",
                     str(tiny_layer / "cal.npy"), "--degree", degree]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err


@pytest.mark.parametrize("bad, message", [("shape", r"input of shape \(1, 4, 7\) is neither"),
                                          ("nan", "NaN or infinite")])
def test_local_infer_refuses_a_bad_input_before_planning(tiny_layer, tmp_path, capsys, bad, message):
    """Local infer on an attention model checks the input's shape and values before the plan (which takes seconds
    to minutes): exit 2 naming the problem, no plan printed, nothing written."""
    x = np.load(tiny_layer / "x.npy")
    x = x[..., :-1] if bad == "shape" else np.where(np.arange(x.size).reshape(x.shape) == 3, np.nan, x)
    np.save(tmp_path / "bad.npy", x)
    command = ["infer", "--model", str(tiny_layer / "layer.onnx"), "--calibration", str(tiny_layer / "cal.npy"),
               "--input", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "y.npy")]
    assert cli.main(command) == 2
    captured = capsys.readouterr()
    assert re.search(message, captured.err) and "Traceback" not in captured.err
    assert "depth" not in captured.out and not (tmp_path / "y.npy").exists()


def test_dask_refuses_an_attention_model_naming_what_runs(tiny_layer, tmp_path, capsys):
    """infer --dask refuses a model with attention in one line naming the flows that run it (local infer, or
    keygen / encrypt / infer --context / decrypt: tests/tensor_ops/test_attention_split.py); nothing is written."""
    command = ["infer", "--model", str(tiny_layer / "layer.onnx"), "--calibration", str(tiny_layer / "cal.npy"),
               "--input", str(tiny_layer / "x.npy"), "--out", str(tmp_path / "y.npy"), "--dask", "local:1"]
    assert cli.main(command) == 2
    err = capsys.readouterr().err
    assert "--dask" in err and "infer --context" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_stated_errors_are_the_approximations_errors_on_the_calibration_data(tiny_layer):
    """Each stated error is max |approximated node - exact node| over the calibration data (recomputed here
    with numpy's softmax and layer norm), and the whole approximated layer is within 2% of the float one."""
    from hezk.model import read_onnx

    graph = read_onnx(str(tiny_layer / "layer.onnx"))
    calibration = np.load(tiny_layer / "cal.npy")
    plan, model = plan_attention(graph, calibration)
    values = {graph.input: calibration}
    for node in graph.nodes:
        inputs = [values[name] for name in node.inputs]
        values[node.output] = node.forward(*inputs)
        if node.kind == "softmax":
            shifted = np.exp(inputs[0] - inputs[0].max(-1, keepdims=True))
            exact = shifted / shifted.sum(-1, keepdims=True)
        elif node.kind == "layernorm":
            x = inputs[0]
            exact = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + node.epsilon)
            exact = exact * node.scale + node.shift
        else:
            continue
        error = np.max(np.abs(model.node_forward(node, *inputs) - exact))
        # within the default tolerance (NEWTON_TOLERANCE relative) of outputs of size ~1
        assert error == pytest.approx(model.errors[node.name], rel=1e-6, abs=1e-12) and error < NEWTON_TOLERANCE
    assert plan.model_error <= 0.02 * plan.output_magnitude


def test_softmax_approximation_is_within_its_tolerance_on_its_calibrated_range():
    """softmax by the calibrated shift, exp by squaring and the Newton reciprocal: within 1e-3 of numpy on
    scores drawn like the calibration ones (inside the calibrated range), wider scores need more squarings."""
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(256, 6))
    approx = SoftmaxApprox.calibrated(scores[:128], tolerance=1e-4)
    fresh = np.clip(scores[128:], scores[:128].min(), scores[:128].max())
    exact = np.exp(fresh - fresh.max(-1, keepdims=True))
    assert np.max(np.abs(approx(fresh) - exact / exact.sum(-1, keepdims=True))) < 1e-3
    assert SoftmaxApprox.calibrated(scores[:128] * 2).squarings > approx.squarings


def test_input_outside_the_calibrated_range_is_refused_before_any_key(tiny_layer):
    """A sample whose plain reference leaves a calibrated range (here the input range itself, and with it the
    softmax's) is refused with InputRangeError naming the sample and the range, before parameters or keys are
    needed. Positive control: the calibrated-like input leaves no range. (The command line's exit 2 on it is
    checked in the slow end-to-end test.)"""
    from hezk.model import read_onnx
    from tensor_ops.inference import InputRangeError

    graph = read_onnx(str(tiny_layer / "layer.onnx"))
    plan, model = plan_attention(graph, np.load(tiny_layer / "cal.npy"))
    x = np.load(tiny_layer / "x.npy")
    assert samples_outside(plan, model, x) == {}
    far = np.stack([x, 10 * x])
    assert sorted(samples_outside(plan, model, far)) == [1]
    with pytest.raises(InputRangeError, match=r"samples \[1\].*calibrated range") as refused:
        run_attention(plan, model, far)
    assert refused.value.samples == (1,)


def test_scale_keeping_backend_carries_softmax_where_the_plain_backend_runs_out_of_scale():
    """A calibrated softmax (34 levels: 4 squarings, 12 Newton steps) on 30-bit levels (insecure N = 2^10 test
    ring): the evaluator's rule (a product by a constant keeps the ciphertext's scale, drift included; s' = s^2/q
    at each squaring) lets the scale fall below the minimum; the ScaleKeepingBackend lands every product on
    Delta and gives the numpy result of the same approximation within 1e-3."""
    from crypto.context import CKKSContext
    from crypto.errors import ScaleError
    from crypto.params import CKKSParameters
    from tensor_ops.backends import CKKSBackend
    from tensor_ops.nn import RotationRecorder

    rng = np.random.default_rng(0)
    scores = rng.normal(size=(64, 4, 4)) * 2
    softmax = SoftmaxApprox.calibrated(scores, tolerance=1e-4)
    params = CKKSParameters.from_literal(_test_ring(softmax.depth + 2, log_n=10))
    recorder = RotationRecorder(params.slots)
    softmax(encrypt(recorder, scores[0]))
    ctx = CKKSContext.keygen(params, rotations=sorted(recorder.steps), seed=1)
    with pytest.raises(ScaleError, match="below the minimum"):
        softmax(encrypt(CKKSBackend(ctx), scores[0]))
    y = softmax(encrypt(ScaleKeepingBackend(ctx), scores[0]))
    assert np.max(np.abs(y.decrypt() - softmax(scores[0]))) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("dynamo, causal", [(False, False), (True, False), (True, True)],
                         ids=["torchscript", "default", "default-causal-mask"])
def test_cli_runs_a_tiny_encoder_layer_encrypted_within_two_percent(tiny_layer, tmp_path, capsys, dynamo, causal):
    """``hezk infer`` on the exported layer (both exporters; and with a constant causal mask, its Softmax
    masked) on an INSECURE N = 2^11 test ring with the plan's depth (--insecure, tests only): the decrypted
    output is within 2% of onnxruntime's largest output magnitude (about 30 s: keys, then every node on CKKS)."""
    import json

    import onnx

    from hezk.model import read_onnx
    from ..model.exported_models import onnxruntime_outputs

    path = tiny_layer / "layer.onnx"
    if dynamo:
        path = tmp_path / "default.onnx"
        onnx.save(export(encoder(1, "gelu", d_model=TINY["d_model"], heads=TINY["heads"],
                                 feedforward=TINY["feedforward"], causal_mask=TINY["sequence"] if causal else 0),
                         dynamo=True, sequence=TINY["sequence"], d_model=TINY["d_model"]), path)
    depth = plan_attention(read_onnx(str(path)), np.load(tiny_layer / "cal.npy"))[0].depth
    (tmp_path / "ring.json").write_text(json.dumps(_test_ring(depth + 2)))
    assert cli.main(["infer", "--model", str(path), "--calibration", str(tiny_layer / "cal.npy"), "--input",
                     str(tiny_layer / "x.npy"), "--out", str(tmp_path / "y.npy"), "--params",
                     str(tmp_path / "ring.json"), "--insecure"]) == 0, capsys.readouterr().err
    assert "max error" in capsys.readouterr().out
    x = np.load(tiny_layer / "x.npy")
    np.save(tmp_path / "far.npy", 10 * x)
    assert cli.main(["infer", "--model", str(path), "--calibration", str(tiny_layer / "cal.npy"), "--input",
                     str(tmp_path / "far.npy"), "--out", str(tmp_path / "far_y.npy"), "--params",
                     str(tmp_path / "ring.json"), "--insecure"]) == 2
    assert "calibrated range" in capsys.readouterr().err and not (tmp_path / "far_y.npy").exists()
    expected = onnxruntime_outputs(onnx.load(str(path)), x)[0]
    got = np.load(tmp_path / "y.npy").reshape(expected.shape)
    assert np.max(np.abs(got - expected)) <= 0.02 * np.max(np.abs(expected))
