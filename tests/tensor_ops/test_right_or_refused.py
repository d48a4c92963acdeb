"""Right or refused: nothing wrong leaves encrypted inference with success.

A polynomial activation is right only on the interval it was fitted on; far outside it the polynomial blows up
(relu fitted on [-4, 4] at x = 20 gave about 5e4 where the model gives 10) and, packed beside other samples, can
overflow the ciphertext's modulus and spoil all of them. The plan states the calibrated input range and the output
bound every sample meets while its activation inputs stay in their intervals (interval arithmetic, +- a stated
margin): ``Client.encrypt`` refuses inputs outside the range (or clips them, warning), ``Client.decrypt`` refuses
outputs outside the bound naming the samples and their whole ciphertext, the CLI exits 3 naming them, and local
``infer`` encrypts the in-range samples apart from the others.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from tensor_ops import cli as tensor_cli
from tensor_ops.inference import Client, InputRangeError, InputRangeWarning, OutputRangeError, Server
from tensor_ops.model_plan import ModelPlan, value_bounds
from tensor_ops.nn import ActivationRangeWarning, Linear, Poly, Sequential
from tests.model.onnx_models import mlp


def relu_model() -> Sequential:
    """1 -> 3 -> 1 with relu fitted on [-4, 4] (the default interval, no calibration): x = 20 leaves it."""
    return Sequential([Linear(np.array([[1.0], [-1.0], [0.5]]), np.zeros(3)), Poly("relu", 7, (-4, 4)),
                       Linear(np.array([[0.5, 0.25, 0.5]]), np.zeros(1))], input_shape=(1,))


@pytest.fixture(scope="module")
def relu_pair():
    model = relu_model()
    client = Client(model=model, seed=7)
    return model, client, Server(model, client.public_context())


def quiet_forward(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ActivationRangeWarning)
        return model.forward(x)


def test_client_server_refuses_the_sample_whose_activation_leaves_its_interval(relu_pair):
    """x = 20 came back as garbage with no word; now OutputRangeError names it, its ciphertext, and the samples
    sharing that ciphertext (untrusted too). Positive control: the in-range samples alone decrypt right."""
    model, client, server = relu_pair
    x = np.array([[0.5], [20.0], [1.0]])
    with pytest.raises(OutputRangeError, match=r"samples \[1\] decrypt to values .* outside the plan's output "
                                               r"range.*whole ciphertext \[0\].*samples \[0, 2\] share") as caught:
        client.decrypt(server.evaluate(client.encrypt(x)))
    error = caught.value
    assert (error.invalid, error.ciphertexts, error.untrusted) == ((1,), (0,), (0, 1, 2))
    assert abs(error.outputs[1, 0] - 10.0) > 1e3  # the garbage it would have returned (the float model: 10)
    unchecked = client.decrypt(server.evaluate(client.encrypt(x)), check=False)  # asked for explicitly
    assert unchecked.shape == (3, 1)
    good = x[[0, 2]]
    np.testing.assert_allclose(client.decrypt(server.evaluate(client.encrypt(good))), model.forward(good),
                               atol=1e-6)


def test_the_output_bound_holds_for_every_input_keeping_its_activations_inside():
    """value_bounds is sound: random inputs whose pre-activations stay in the interval give outputs inside it."""
    rng = np.random.default_rng(3)
    model = Sequential([Linear(rng.normal(size=(6, 4)), rng.normal(size=6)), Poly("silu", 5, (-3, 3)),
                        Linear(rng.normal(size=(5, 6)), rng.normal(size=5)), Poly("sigmoid", 4, (-6, 6)),
                        Linear(rng.normal(size=(2, 5)), rng.normal(size=2))], input_shape=(4,))
    x = rng.uniform(-1, 1, (4000, 4))
    keep = np.setdiff1d(np.arange(len(x)), model.samples_outside(x))
    assert 100 < keep.size < len(x)
    low, high = value_bounds(model.stages(), 4)
    y = model.forward(x[keep])
    assert np.all(y >= low - 1e-9) and np.all(y <= high + 1e-9)
    plan = model.plan()
    assert plan.output_range == (tuple(low), tuple(high)) and plan.output_margin >= 0.05
    assert not plan.outputs_outside(y).size and plan.outputs_outside(np.array([[1e6, 0.0]])).tolist() == [0]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibrated")
    onnx.save(mlp((8, 6, 3), "relu", seed=5), folder / "relu.onnx")
    calibration = np.random.default_rng(0).uniform(-1, 1, (64, 8))
    model = Sequential.load(folder / "relu.onnx", calibration=calibration)
    return folder, model, calibration


def test_the_plan_carries_the_calibrated_ranges_and_each_activation_error(calibrated):
    _, model, calibration = calibrated
    plan = model.plan()
    low, high = plan.input_range
    assert low < calibration.min() < -0.9 and 0.9 < calibration.max() < high < 1.2
    fit, = plan.activation_fits
    assert fit.name == "relu" and fit.interval == model.layers[1].interval
    assert 0 < fit.calibration_error <= fit.max_error * (1 + 1e-9)
    text = plan.explain()
    assert "calibrated input range" in text and "on the calibration data" in text and "output range" in text
    again = ModelPlan.from_dict(plan.to_dict())
    assert again == plan and again.activation_fits == plan.activation_fits


def test_an_old_plan_without_the_ranges_still_loads_and_is_not_checked(calibrated):
    data = calibrated[1].plan().to_dict()
    for key in ("input_range", "output_range", "activation_fits"):
        del data[key]
    plan = ModelPlan.from_dict(data)
    assert plan.input_range is None and plan.output_range is None and plan.activation_fits == ()
    assert not plan.outputs_outside(np.array([[1e9, 0, 0]])).size


@pytest.mark.parametrize("key, value, word", [
    ("input_range", [1.0, 0.0], "input_range"),
    ("input_range", [0.0, float("nan")], "input_range"),
    ("input_range", [True, 2.0], "input_range"),
    ("input_range", "0,1", "input_range"),
    ("output_range", {"low": [0.0], "high": [1.0], "margin": 0.1}, "output_range.low"),
    ("output_range", {"low": [0.0] * 3, "high": [1.0] * 3}, "output_range"),
    ("output_range", {"low": [2.0] * 3, "high": [1.0] * 3, "margin": 0.1}, "low <= high"),
    ("output_range", {"low": [0.0] * 3, "high": [1.0] * 3, "margin": -1.0}, "margin"),
    ("activation_fits", [{"stage": 99, "name": "relu", "degree": 7, "interval": [-1, 1], "max_error": 0.1}],
     "stage"),
    ("activation_fits", [{"stage": 1, "name": "relu", "degree": 7, "interval": [-1, 1]}], "activation_fits"),
])
def test_crafted_ranges_are_refused_naming_the_field(calibrated, key, value, word):
    data = dict(calibrated[1].plan().to_dict(), **{key: value})
    with pytest.raises(ParameterError, match=word):
        ModelPlan.from_dict(data)


def test_encrypt_refuses_inputs_outside_the_calibrated_range_or_clips_them(calibrated):
    _, model, calibration = calibrated
    client = Client(model=model, seed=2)
    x = calibration[:4].copy()
    x[2, 5] = 20.0
    with pytest.raises(InputRangeError, match=r"samples \[2\] have values in .* outside the plan's calibrated input "
                                              r"range .*clip=True") as caught:
        client.encrypt(x)
    assert caught.value.samples == (2,)
    with pytest.warns(InputRangeWarning, match=r"samples \[2\] .* clipped"):
        request = client.encrypt(x, clip=True)
    server = Server(model, client.public_context())
    clipped = np.clip(x, *client.plan.input_range)
    np.testing.assert_allclose(client.decrypt(server.evaluate(request)), model.forward(clipped), atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.encrypt(calibration[:4])  # positive control: inside, no word


def _cli(*args):
    return tensor_cli.main([str(a) for a in args])


def test_cli_decrypt_exits_3_naming_the_sample(tmp_path, capsys):
    """keygen, encrypt, infer --context, decrypt: every step exited 0 on garbage; decrypt now exits 3."""
    onnx.save(mlp((8, 6, 3), "relu", seed=5), tmp_path / "relu.onnx")
    x = np.random.default_rng(1).uniform(-1, 1, (3, 8))
    x[1] *= 40.0
    np.save(tmp_path / "x.npy", x)
    files = {name: tmp_path / name for name in ("client.key", "public.ctx", "req.bin", "reply.bin", "y.npy")}
    assert _cli("keygen", "--model", tmp_path / "relu.onnx", "--client", files["client.key"],
                "--context", files["public.ctx"]) == 0
    assert _cli("encrypt", "--client", files["client.key"], "--input", tmp_path / "x.npy", "--out",
                files["req.bin"]) == 0
    assert _cli("infer", "--model", tmp_path / "relu.onnx", "--context", files["public.ctx"], "--request",
                files["req.bin"], "--out", files["reply.bin"]) == 0
    capsys.readouterr()
    assert _cli("decrypt", "--client", files["client.key"], "--reply", files["reply.bin"], "--out",
                files["y.npy"]) == 3
    err = capsys.readouterr().err
    assert "invalid result: samples [1]" in err and "whole ciphertext [0]" in err, err
    assert not files["y.npy"].exists()
    np.save(tmp_path / "x.npy", np.delete(x, 1, axis=0))  # positive control: the in-range samples
    assert _cli("encrypt", "--client", files["client.key"], "--input", tmp_path / "x.npy", "--out",
                files["req.bin"]) == 0
    assert _cli("infer", "--model", tmp_path / "relu.onnx", "--context", files["public.ctx"], "--request",
                files["req.bin"], "--out", files["reply.bin"]) == 0
    assert _cli("decrypt", "--client", files["client.key"], "--reply", files["reply.bin"], "--out",
                files["y.npy"]) == 0
    model = Sequential.load(tmp_path / "relu.onnx")
    np.testing.assert_allclose(np.load(files["y.npy"]), model.forward(np.delete(x, 1, axis=0)), atol=1e-5)


def test_cli_encrypt_refuses_or_clips_outside_the_calibrated_range(calibrated, tmp_path, capsys):
    folder, _, calibration = calibrated
    np.save(tmp_path / "cal.npy", calibration)
    key, ctx = tmp_path / "client.key", tmp_path / "public.ctx"
    assert _cli("keygen", "--model", folder / "relu.onnx", "--calibration", tmp_path / "cal.npy", "--client", key,
                "--context", ctx) == 0
    x = calibration[:3].copy()
    x[0, 0] = -9.0
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert _cli("encrypt", "--client", key, "--input", tmp_path / "x.npy", "--out", tmp_path / "r.bin") == 2
    assert "samples [0] have values" in capsys.readouterr().err
    assert _cli("encrypt", "--client", key, "--input", tmp_path / "x.npy", "--out", tmp_path / "r.bin",
                "--clip") == 0
    assert "warning: samples [0] have values" in capsys.readouterr().err


def test_local_infer_splits_out_the_rows_that_leave_the_interval(tmp_path, capsys):
    """Two rows of a batch leave the interval: they are named (exit 3), the others are computed apart and
    right (they were spoiled with them before: one ciphertext), the refused rows NaN."""
    onnx.save(mlp((8, 6, 3), "relu", seed=5), tmp_path / "relu.onnx")
    x = np.random.default_rng(4).uniform(-1, 1, (6, 8))
    x[[2, 4]] *= 60.0
    np.save(tmp_path / "x.npy", x)
    assert _cli("infer", "--model", tmp_path / "relu.onnx", "--input", tmp_path / "x.npy", "--out",
                tmp_path / "y.npy") == 3
    assert "refused: samples [2, 4]" in capsys.readouterr().err
    y, model = np.load(tmp_path / "y.npy"), Sequential.load(tmp_path / "relu.onnx")
    assert np.all(np.isnan(y[[2, 4]]))
    kept = [0, 1, 3, 5]
    np.testing.assert_allclose(y[kept], model.forward(x[kept]), atol=1e-5)


def test_sigmoid_probabilities_stay_in_0_1():
    """A degree-4 sigmoid fitted on a wide interval went outside [0, 1] (46 of 143 test probabilities); the
    minimax fit is shrunk about 1/2, so its values and the plan's output bound stay in [0, 1]."""
    rng = np.random.default_rng(5)
    w = rng.normal(size=(1, 6)) * 3
    model = Sequential([Linear(w, np.zeros(1)), Poly("sigmoid", 4, (-12, 12))], input_shape=(6,))
    x = rng.uniform(-1, 1, (2000, 6))
    x = x[np.abs(x @ w.T).ravel() <= 12]
    y = model.forward(x)
    assert np.all((0 <= y) & (y <= 1))
    low, high = model.plan().output_range
    assert 0 <= low[0] and high[0] <= 1


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.sampled_from(["relu", "gelu", "silu", "sigmoid", "tanh"]), st.integers(0, 2 ** 31))
def test_samples_outside_names_exactly_the_rows_leaving_an_interval(degree, name, seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(3, 2))
    model = Sequential([Linear(w, np.zeros(3)), Poly(name, degree, (-2, 2)), Linear(np.ones((1, 3)), [0.0])],
                       input_shape=(2,))
    x = rng.normal(size=(20, 2))
    expected = np.flatnonzero(np.any(np.abs(x @ w.T) > 2 * (1 + 1e-9), axis=1))
    assert model.samples_outside(x).tolist() == expected.tolist()


def test_a_plan_without_the_output_range_warns_unchecked_and_still_refuses_non_finite(relu_pair):
    """A plan lacking output_range (an old one, or one a server rewrote to drop it) decrypted garbage silently
    and a non-finite output crashed with TypeError; now it warns that the result is unchecked and a non-finite
    sample is an OutputRangeError. Positive control: the plan with its range decrypts without a warning."""
    from tensor_ops.inference import OutputRangeWarning, _checked_outputs

    model, client, server = relu_pair
    x = np.array([[0.5], [1.0]])
    reply = server.evaluate(client.encrypt(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutputRangeWarning)
        np.testing.assert_allclose(client.decrypt(reply), model.forward(x), atol=1e-6)
    data = client.plan.to_dict()
    del data["output_range"]
    stripped = Client(plan=ModelPlan.from_dict(data), seed=7)
    assert stripped.plan.output_range is None
    with pytest.warns(OutputRangeWarning, match="unchecked"):
        y = stripped.decrypt(Server(model, stripped.public_context()).evaluate(stripped.encrypt(x)))
    np.testing.assert_allclose(y, model.forward(x), atol=1e-6)
    with pytest.raises(OutputRangeError, match=r"samples \[1\] .* not finite"):
        _checked_outputs(stripped.plan, np.array([[0.5], [np.nan]]), 4)
