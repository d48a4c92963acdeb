"""Layers and Sequential in plaintext: fast numpy layers against loop references, folding, npz round trip."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from crypto.errors import ParameterError, ShapeError
from tensor_ops.nn import (AffineStage, AvgPool2d, BatchNorm, Conv2d, Flatten, Linear, Poly, Sequential,
                           Square)
from tests.reference import naive_nn
from tests.reference.naive_nn import horner


@given(st.integers(1, 3), st.integers(1, 3), st.integers(3, 7), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 2), st.integers(0, 2**31))
def test_conv2d_matches_loops(cin, cout, size, kernel, stride, padding, seed):
    rng = np.random.default_rng(seed)
    layer = Conv2d(rng.normal(size=(cout, cin, kernel, kernel)), rng.normal(size=cout), stride, padding)
    x = rng.normal(size=(2, cin, size, size))
    got = layer.forward(x)
    for b in range(2):
        np.testing.assert_allclose(got[b], naive_nn.conv2d(x[b], layer.weight, layer.bias, stride, padding),
                                   atol=1e-12)


@given(st.integers(1, 3), st.integers(2, 8), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**31))
def test_avgpool_matches_loops(channels, size, kernel, stride, seed):
    x = np.random.default_rng(seed).normal(size=(channels, size + kernel, size + kernel))
    layer = AvgPool2d(kernel, stride)
    np.testing.assert_allclose(layer.forward(x), naive_nn.avgpool2d(x, kernel, stride), atol=1e-12)


@given(st.integers(0, 2**31))
def test_affine_matrix_reproduces_forward(seed):
    rng = np.random.default_rng(seed)
    layer = Conv2d(rng.normal(size=(2, 2, 3, 3)), rng.normal(size=2), stride=2, padding=1)
    shape = (2, 5, 5)
    matrix, bias = layer.affine(shape)
    x = rng.normal(size=shape)
    np.testing.assert_allclose(matrix @ x.reshape(-1) + bias, layer.forward(x).reshape(-1), atol=1e-12)


def _cnn(rng, activation):
    return Sequential([
        Conv2d(rng.normal(size=(3, 1, 3, 3)), rng.normal(size=3), stride=1, padding=1),
        BatchNorm(rng.uniform(0.5, 2, 3), rng.normal(size=3), rng.normal(size=3), rng.uniform(0.5, 2, 3)),
        AvgPool2d(2), Flatten(), activation, Linear(rng.normal(size=(4, 27)), rng.normal(size=4)),
    ], input_shape=(1, 6, 6))


@pytest.mark.parametrize("activation", [Square(), Poly("relu", 5, (-3, 5)), Poly("gelu", 3, 4.0)])
def test_folded_forward_equals_layer_by_layer(activation):
    rng = np.random.default_rng(1)
    model = _cnn(rng, activation)
    x = rng.normal(size=(7, 1, 6, 6))
    np.testing.assert_allclose(model.forward(x), model.forward_layers(x), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.forward(x[0]), model.forward(x)[0], atol=1e-12)
    stages = model.stages()
    assert [type(s).__name__ for s in stages] == ["AffineStage", "ActivationStage", "AffineStage"]
    assert model.depth() == 2 + activation.depth


def test_batchnorm_folds_into_linear():
    rng = np.random.default_rng(2)
    model = Sequential([Linear(rng.normal(size=(5, 4))), BatchNorm(np.ones(5) * 2, np.ones(5), np.zeros(5), np.ones(5))])
    (stage,) = model.stages()
    assert isinstance(stage, AffineStage)
    x = rng.normal(size=4)
    np.testing.assert_allclose(model.forward(x), 2 * (model.layers[0].weight @ x) / np.sqrt(1 + 1e-5) + 1)


def test_activation_first_gets_a_normalising_stage():
    model = Sequential([Poly("sigmoid", 3, (-8, 8))], input_shape=(3,))
    x = np.array([-8.0, 0.0, 8.0])
    assert isinstance(model.stages()[0], AffineStage)
    np.testing.assert_allclose(model.forward(x), model.layers[0].poly(x))


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    model = _cnn(rng, Poly("silu", 4, (-5, 5), "least_squares"))
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = Sequential.load(path)
    x = rng.normal(size=(3, 1, 6, 6))
    np.testing.assert_array_equal(loaded.forward(x), model.forward(x))
    assert loaded.input_shape == (1, 6, 6)


def test_inputs_are_not_mutated():
    rng = np.random.default_rng(4)
    model = _cnn(rng, Square())
    x = rng.normal(size=(2, 1, 6, 6))
    before = x.copy()
    model.forward(x)
    np.testing.assert_array_equal(x, before)
    with pytest.raises(ValueError):
        model.layers[0].weight[0, 0, 0, 0] = 1.0


@pytest.mark.parametrize("make, word", [
    (lambda: Linear(np.ones((2, 3)), np.ones(3)), "bias"),
    (lambda: Linear(np.ones(3)), "weight"),
    (lambda: Linear([[1.0, float("nan")]]), "weight"),
    (lambda: Conv2d(np.ones((1, 1, 3, 3)), stride=0), "stride"),
    (lambda: Conv2d(np.ones((1, 1, 3, 3)), padding=-1), "padding"),
    (lambda: AvgPool2d(0), "kernel_size"),
    (lambda: Sequential([Linear(np.ones((2, 3))), Linear(np.ones((2, 4)))]), "input shape"),
    (lambda: Sequential([]), "layers"),
    (lambda: Sequential([Conv2d(np.ones((1, 1, 5, 5)))], input_shape=(1, 3, 3)), "kernel"),
])
def test_bad_layers(make, word):
    with pytest.raises((ParameterError, ShapeError), match=word):
        make()


def test_wrong_input_shape_names_the_shapes():
    model = Sequential([Linear(np.ones((2, 3)))])
    with pytest.raises(ShapeError, match=r"\(3,\)"):
        model.forward(np.ones(4))


def test_load_rejects_foreign_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ParameterError, match="model file"):
        Sequential.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.ones(3))
    with pytest.raises(ParameterError, match="model file"):
        Sequential.load(other)


def test_activation_layer_states_its_fit():
    layer = Poly("sigmoid", 7, (-6, 6), "least_squares")
    assert (layer.degree, layer.depth, layer.interval) == (7, 3, (-6.0, 6.0))
    assert layer.max_error() < 0.05 and len(layer.coefficients) == 8
    x = np.linspace(-6, 6, 9)
    np.testing.assert_allclose(layer.forward(x), horner(layer.coefficients, x / 6.0), atol=1e-12)
