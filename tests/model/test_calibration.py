"""Issue 12 item 5 (tensor_ops half): fitted activations take their interval from calibration inputs, the
error against the float model there is reported, and the plain reference warns when an input leaves the
fitted interval (relu fitted on [-4, 4] with inputs x5 was off by hundreds without a word)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

import hezk.model
from crypto.errors import ParameterError
from tensor_ops import cli as tensor_cli
from tensor_ops.nn import ActivationRangeWarning, Sequential, calibrate
from tests.model.onnx_models import mlp


@pytest.fixture()
def relu_model(tmp_path):
    onnx.save(mlp((8, 6, 3), "relu", seed=5), tmp_path / "relu.onnx")
    return tmp_path / "relu.onnx"


def wide_inputs(n=64, scale=5.0, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 8)) * scale


def test_an_uncalibrated_fit_warns_where_inputs_leave_its_interval(relu_model):
    model = Sequential.load(relu_model)
    with pytest.warns(ActivationRangeWarning, match=r"outside the fitted interval \[-4, 4\]"):
        model.forward(wide_inputs())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActivationRangeWarning)
        model.forward(wide_inputs(scale=0.2))  # inside [-4, 4]: no word


def test_calibration_fits_each_activation_on_its_range_and_reports_the_error(relu_model):
    x, graph = wide_inputs(), hezk.model.load(relu_model)
    ranges = calibrate(graph, x)
    hidden = x @ graph.nodes[0].weight.T + graph.nodes[0].bias
    (low, high), = ranges.values()
    assert low < hidden.min() and high > hidden.max() and high - low < 1.2 * np.ptp(hidden)
    calibrated = Sequential.load(relu_model, calibration=x)
    assert calibrated.layers[1].interval == pytest.approx((low, high))
    mean, worst = calibrated.calibration_report
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActivationRangeWarning)
        error = np.abs(calibrated.forward(x) - graph.forward(x))
    assert (mean, worst) == pytest.approx((error.mean(), error.max()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ActivationRangeWarning)
        uncalibrated = np.abs(Sequential.load(relu_model).forward(x) - graph.forward(x)).max()
    assert worst < uncalibrated / 10
    with pytest.warns(ActivationRangeWarning):
        calibrated.forward(x * 3)  # beyond what it was calibrated on


def test_square_is_exact_and_never_warns(tmp_path):
    onnx.save(mlp((8, 6, 3), "square"), tmp_path / "sq.onnx")
    x = wide_inputs(scale=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActivationRangeWarning)
        model = Sequential.load(tmp_path / "sq.onnx", calibration=x)
        np.testing.assert_allclose(model.forward(x), hezk.model.load(tmp_path / "sq.onnx").forward(x), rtol=1e-9)
    assert model.calibration_report[1] < 1e-6 * np.abs(model.forward(x)).max()


def test_calibration_on_the_command_line(relu_model, tmp_path, capsys):
    np.save(tmp_path / "cal.npy", wide_inputs())
    assert tensor_cli.main(["plan", "--model", str(relu_model), "--calibration", str(tmp_path / "cal.npy")]) == 0
    assert "calibration: activations fitted" in capsys.readouterr().out
    np.save(tmp_path / "bad.npy", np.zeros((3, 5)))
    assert tensor_cli.main(["plan", "--model", str(relu_model), "--calibration", str(tmp_path / "bad.npy")]) == 2
    assert "calibration inputs of shape (3, 5)" in capsys.readouterr().err


def test_a_sequential_save_file_keeps_its_fitted_polynomials(tmp_path, relu_model):
    Sequential.load(relu_model).save(tmp_path / "s.npz")
    with pytest.raises(ParameterError, match="calibration applies"):
        Sequential.load(tmp_path / "s.npz", calibration=wide_inputs())


def test_cli_infer_warns_from_the_plain_reference_when_an_input_leaves_the_fitted_interval(relu_model, tmp_path,
                                                                                            capsys):
    """relu fitted on [-4, 4] with inputs x5 decrypted far from the float model without a word: now warned, and
    those samples refused (exit status 3 naming them, nothing written: tests/tensor_ops/test_right_or_refused.py)."""
    for scale, warned in ((5.0, True), (0.2, False)):
        np.save(tmp_path / "x.npy", wide_inputs(n=4, scale=scale))
        assert tensor_cli.main(["infer", "--model", str(relu_model), "--input", str(tmp_path / "x.npy"),
                                "--out", str(tmp_path / "y.npy")]) == (3 if warned else 0)
        err = capsys.readouterr().err
        assert ("warning: activation relu: inputs reach" in err and "outside the fitted interval [-4, 4]" in err
                and "--calibration" in err) == warned, err
        assert ("refused: samples [0, 1, 2, 3]" in err) == warned, err
        assert (tmp_path / "y.npy").exists() != warned
    assert np.load(tmp_path / "y.npy").shape == (4, 3)


def test_the_plan_states_each_fitted_interval_and_a_chosen_degree(relu_model, capsys):
    assert tensor_cli.main(["plan", "--model", str(relu_model)]) == 0
    assert "polynomial relu of degree 7 (effective 6), depth 3" in capsys.readouterr().out
    assert tensor_cli.main(["plan", "--model", str(relu_model), "--degree", "15"]) == 0
    text = capsys.readouterr().out
    assert "polynomial relu of degree 15" in text and "depth 4" in text
    assert "fitted on [-4, 4] (max error" in text
    assert Sequential.load(relu_model, degree=3).layers[1].degree == 3
    for bad in ("0", "x"):
        assert tensor_cli.main(["plan", "--model", str(relu_model), "--degree", bad]) == 2
        assert "degree" in capsys.readouterr().err


def test_a_calibrated_fit_is_weighted_by_where_the_inputs_lie():
    """Most pre-activations sit near 0: the data-weighted least-squares fit (method="least_squares" with samples)
    is closer there than the minimax fit on the same interval, which in turn has the smaller maximum error (the
    default since the plan states that error: tests/tensor_ops/test_minimax_fit.py)."""
    from tensor_ops.activations import fit_activation

    samples = np.random.default_rng(0).laplace(0, 0.5, 20000)
    samples = np.concatenate([samples, [-6.0, 6.0]])
    weighted = fit_activation("relu", 4, (-6, 6), "least_squares", samples=samples)
    plain = fit_activation("relu", 4, (-6, 6))
    near = samples
    error = lambda p: np.mean(np.abs(p(near) - np.maximum(near, 0)))  # noqa: E731
    assert error(weighted) < error(plain)  # 0.088 vs 0.108 (0.166 for the Chebyshev interpolant)
    assert plain.max_error() < weighted.max_error() < 4 * plain.max_error()
    with pytest.raises(ParameterError, match="samples="):
        fit_activation("relu", 4, (-6, 6), "least_squares", samples=[np.nan])
    with pytest.raises(ParameterError, match="samples= weight only the least_squares fit"):
        fit_activation("relu", 4, (-6, 6), samples=samples)
