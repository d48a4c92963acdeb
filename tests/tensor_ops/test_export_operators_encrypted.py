"""The encrypted half runs the held-out exports: ReLU6 (a polynomial fitted to the clip on the calibrated
interval), MaxPool (pairwise maxima b + relu(a - b), relu = x (1 + sign x) / 2 with a composite minimax sign,
Lee et al. 2021), ResNet's option-A shortcut (a public 0/1 map), skl2onnx's logistic regression (the affine
scores encrypted; label and probabilities by the client after decryption, said so in the plan). Decrypted
outputs, post-processed by the client, agree with onnxruntime within the stated error and the argmax is
equal. The rings here are INSECURE test rings (N = 2^11, 16 levels) chosen for speed: the same plans at
128-bit parameters only cost more time."""
import numpy as np
import pytest

from hezk.model import Graph, MaxPool, Patches, read_onnx
from tensor_ops.activations import SIGN_DEGREES, SIGN_GAP, CompositeRelu, composite_sign, fit_activation
from tensor_ops.inference import Client, Server
from tensor_ops.nn import Activation, Sequential, from_graph
from tests.model.exported_models import (activation_mlp, iris, onnxruntime_outputs, sklearn_export, sklearn_models,
                                         torch_export, torch_models)

TEST_RING = dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 16, log_p=[30] * 6, log_scale=50, dnum=6, insecure=True)


def encrypted(model, x, params=TEST_RING):
    """(decrypted output, plan) of ``model`` on x, encrypted under the insecure test ring."""
    plan = model.plan(params=params)
    client = Client(plan=plan, seed=0, allow_insecure=True)
    server = Server(model, client.public_context())
    return client.decrypt(server.evaluate(client.encrypt(x))), plan


def test_composite_sign_meets_its_stated_error():
    """SIGN_DEGREES (7, 7, 7): depth 10 for relu; |error| <= 2^-9 radius where |t| >= gap, <= |x| below."""
    relu = CompositeRelu(composite_sign(SIGN_DEGREES), radius=3.0)
    assert relu.depth == 10
    x = np.linspace(-3.0, 3.0, 20001)
    error = np.abs(relu(x) - np.maximum(x, 0.0))
    outside = np.abs(x) >= SIGN_GAP * 3.0
    assert error[outside].max() <= 2.0 ** -9 * 3.0
    assert np.all(error[~outside] <= np.abs(x[~outside]) + 1e-12)
    assert relu.max_error() == pytest.approx(error.max(), rel=0.2)


def test_clip_fit_and_its_bounds_survive_save(tmp_path):
    relu6 = fit_activation("clip", 7, (-2.0, 8.0), bounds=(0.0, 6.0))
    assert relu6.max_error() < 0.15 and relu6.target(np.array([-1.0, 7.0])).tolist() == [0.0, 6.0]
    model = Sequential([Activation(relu6)], input_shape=(3,))
    model.save(tmp_path / "m.npz")
    again = Sequential.load(tmp_path / "m.npz")
    assert again.layers[0].poly.bounds == (0.0, 6.0) and again.activation_fit() == model.activation_fit()


@pytest.mark.parametrize("kernel, stride, pads", [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1))])
def test_maxpool_plain_reference_is_within_the_stated_error(kernel, stride, pads):
    """Each halving level errs by at most radius * gap (pairs closer than the gap) and padding never wins."""
    graph = Graph("x", (2, 6, 6), (MaxPool("pool", "MaxPool", ("x",), "y", Patches(kernel, stride, pads)),), "y")
    rng = np.random.default_rng(0)
    model = from_graph(graph, calibration=rng.normal(size=(64, 2, 6, 6)))
    x = rng.normal(size=(8, 2, 6, 6))
    radii = [layer.layers[1].poly.radius for layer in model.layers if layer.kind == "residual"]
    assert len(radii) == int(np.ceil(np.log2(kernel[0] * kernel[1])))
    assert np.abs(model.forward(x) - graph.forward(x)).max() <= SIGN_GAP * sum(radii)


def test_encrypted_maxpool_1d_agrees_with_its_float_max():
    graph = Graph("x", (2, 1, 8), (MaxPool("pool", "MaxPool", ("x",), "y", Patches((1, 2), (1, 2))),), "y")
    rng = np.random.default_rng(1)
    model = from_graph(graph, calibration=rng.normal(size=(64, 2, 1, 8)))
    x = rng.normal(size=(4, 2, 1, 8))
    y, plan = encrypted(model, x)
    assert plan.depth <= 12  # the window gather folds into the differences: 10 levels of relu, 2 affine
    np.testing.assert_allclose(y, model.forward(x), atol=1e-6)  # the server computes the plain reference
    radius = model.layers[1].layers[1].poly.radius
    assert np.abs(y - graph.forward(x)).max() <= SIGN_GAP * radius


def _encrypted_torch_export(name, seed, batch):
    """Export the torch model `name`, calibrate on 128 normal samples, run `batch` inputs encrypted:
    ``(proto, graph, x, y, plan)``."""
    module, shape = torch_models()[name]
    proto = torch_export(module, shape)
    graph = read_onnx(proto)
    rng = np.random.default_rng(seed)
    model = from_graph(graph, calibration=rng.normal(size=(128, *shape)))
    x = rng.normal(size=(batch, *shape)).astype(np.float32)
    return (proto, graph, x, *encrypted(model, x))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ecg_1d", "mobilenet_relu6", "resnet_option_a"])
def test_encrypted_torch_exports_agree_with_onnxruntime(name):
    proto, graph, x, y, plan = _encrypted_torch_export(name, seed=2, batch=4)
    got = graph.client_outputs(y)["y"] if graph.postprocess else y
    want = onnxruntime_outputs(proto, x)[0]
    assert np.array_equal(np.argmax(got, axis=1), np.argmax(want, axis=1))
    assert np.abs(got - want).max() <= 0.1 * max(1.0, np.abs(want).max())
    if graph.postprocess:
        assert "run by the client after decryption" in plan.explain()


def test_encrypted_relu6_block_agrees_with_onnxruntime():
    """MobileNetV2's ReLU6 (Clip(0, 6)) and a final Softmax the client applies: probabilities within 0.05."""
    proto, graph, x, y, plan = _encrypted_torch_export("mobilenet_relu6", seed=3, batch=3)
    probabilities = graph.client_outputs(y)["y"]
    want = onnxruntime_outputs(proto, x)[0]
    assert np.abs(probabilities - want).max() <= 0.05
    assert np.array_equal(probabilities.argmax(axis=1), want.argmax(axis=1))
    assert "run by the client after decryption (not encrypted, not by the server): y = softmax axis 1" in \
        plan.explain()
    assert type(plan).from_dict(plan.to_dict()).client == plan.client


def test_encrypted_logistic_regression_labels_and_probabilities_match_onnxruntime():
    estimator, options = sklearn_models()["logistic_3_classes"]
    proto = sklearn_export(estimator, options)
    graph = read_onnx(proto)
    x = iris()[::10]
    model = from_graph(graph)
    y, plan = encrypted(model, x)
    np.testing.assert_allclose(y, graph.forward(x), atol=1e-4)  # affine only: the scores are near exact
    label, probabilities = graph.client_outputs(y).values()
    want_label, want_probabilities = onnxruntime_outputs(proto, x)
    assert np.array_equal(label, want_label)
    for got, want in zip(probabilities, want_probabilities):
        assert got.keys() == want.keys() and max(abs(got[k] - want[k]) for k in got) <= 1e-3
    assert "output_label = argmax axis -1 -> labels [0, 1, 2]" in plan.explain()


@pytest.mark.parametrize("module_name, dynamo", [("Softplus", True), ("SELU", False),
                                                 pytest.param("Mish", False, marks=pytest.mark.slow),
                                                 pytest.param("Hardswish", True, marks=pytest.mark.slow)])
def test_encrypted_univariate_activations_agree_with_onnxruntime(module_name, dynamo):
    """Softplus (the default exporter's thresholded form), SELU, Mish and Hardswish are fitted by minimax on
    their calibrated intervals and run encrypted: within the plan's stated activation error of onnxruntime."""
    proto = activation_mlp(module_name, (5, 6, 2), dynamo=dynamo, seed=3)
    rng = np.random.default_rng(5)
    model = from_graph(read_onnx(proto), calibration=rng.normal(size=(256, 5)))
    x = rng.normal(scale=0.5, size=(4, 5)).astype(np.float32)
    y, plan = encrypted(model, x)
    want = onnxruntime_outputs(proto, x)[0]
    assert module_name.lower() in plan.explain().lower()
    assert np.abs(y - want).max() <= 0.02 * max(1.0, np.abs(want).max())
