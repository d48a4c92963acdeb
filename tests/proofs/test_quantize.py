"""Quantization: integer forward pass against a naive twin, worst-case bounds, field refusal, stated error."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from proofs.errors import ModelError
from proofs.field import P
from proofs.model import load_model, save_float_model, save_model
from proofs.quantize import (FIELD_BITS, FIELD_HALF, QuantizedLayer, QuantizedMLP, check_field,
                             dequantize_output, float_forward, forward_int, forward_trace, layer_bounds,
                             quantize_fixed_point, quantize_input, quantize_int8, round_shift)
from tests.reference.naive_quantized_mlp import naive_forward, naive_round_shift


def random_float_mlp(rng, sizes, scale=0.4):
    weights = [rng.normal(0, scale, (sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    biases = [rng.normal(0, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


@given(st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=20), st.integers(0, 20))
def test_round_shift_matches_python_integers(values, shift):
    got = round_shift(np.array(values, dtype=np.int64), shift)
    assert got.tolist() == [naive_round_shift(v, shift) for v in values]


@given(st.integers(0, 2**32 - 1), st.sampled_from([(5, 7, 3), (3, 4, 4, 2), (8, 1)]),
       st.integers(0, 10), st.integers(1, 4))
def test_forward_int_matches_naive_twin(seed, sizes, frac_bits, batch):
    rng = np.random.default_rng(seed)
    weights, biases = random_float_mlp(rng, sizes)
    model = quantize_fixed_point(weights, biases, frac_bits=frac_bits, input_bound=2.0)
    x = quantize_input(model, rng.uniform(-2, 2, (batch, sizes[0])))
    assert forward_int(model, x).tolist() == naive_forward(model, x.tolist())


@pytest.mark.parametrize("scheme", ["fixed_point", "int8"])
@given(seed=st.integers(0, 2**32 - 1))
def test_dequantized_output_within_stated_error(scheme, seed):
    rng = np.random.default_rng(seed)
    weights, biases = random_float_mlp(rng, (12, 9, 5))
    x = rng.uniform(-1, 1, (40, 12))
    if scheme == "int8":
        model = quantize_int8(weights, biases, x, input_bound=1.0)
    else:
        model = quantize_fixed_point(weights, biases, frac_bits=7, input_bound=1.0)
    got = dequantize_output(model, forward_int(model, quantize_input(model, x)))
    err = np.max(np.abs(got - float_forward(weights, biases, x)))
    assert np.isfinite(model.error_bound) and err <= model.error_bound


def test_int8_scheme_has_int8_weights_and_shifts():
    rng = np.random.default_rng(1)
    weights, biases = random_float_mlp(rng, (10, 8, 3))
    x = rng.uniform(-1, 1, (50, 10))
    model = quantize_int8(weights, biases, x)
    assert model.scheme == "int8"
    for layer in model.layers:
        assert np.max(np.abs(layer.weight)) <= 127 and layer.shift >= 0
    hidden = forward_trace(model, quantize_input(model, x))[0].out
    assert np.max(np.abs(hidden)) <= 127  # calibrated activations fit int8


@given(seed=st.integers(0, 2**32 - 1))
def test_bounds_contain_every_value_and_are_reached_in_layer_one(seed):
    rng = np.random.default_rng(seed)
    weights, biases = random_float_mlp(rng, (6, 5, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=6, input_bound=1.5)
    bounds = layer_bounds(model)
    xs = rng.integers(-model.input_bound, model.input_bound + 1, (30, 6))
    first = model.layers[0]
    # the extreme inputs sign(W_o) * bound reach the interval ends of layer 1 exactly
    xs = np.vstack([xs, np.sign(first.weight) * model.input_bound, -np.sign(first.weight) * model.input_bound])
    trace = forward_trace(model, xs)
    for bound, layer_trace in zip(bounds, trace):
        assert bound.acc_lo <= layer_trace.acc.min() and layer_trace.acc.max() <= bound.acc_hi
        assert -2 ** (bound.q_bits - 1) <= layer_trace.shifted.min()
        assert layer_trace.shifted.max() < 2 ** (bound.q_bits - 1)
    assert trace[0].acc.max() == bounds[0].acc_hi and trace[0].acc.min() == bounds[0].acc_lo


def test_model_that_could_wrap_is_refused_naming_layer_and_bound():
    rng = np.random.default_rng(2)
    weights, biases = random_float_mlp(rng, (64, 64, 4), scale=3.0)
    weights[0], weights[1] = weights[0] / 300.0, weights[1] * 100.0  # only layer 1 overflows
    with pytest.raises(ModelError, match=r"layer 1 \(Linear 64->4.*could wrap around the field.*2\^"):
        quantize_fixed_point(weights, biases, frac_bits=10, input_bound=4.0)
    model = quantize_fixed_point(weights, biases, frac_bits=4, input_bound=1.0)
    assert all(b.decomposition_bits <= FIELD_BITS for b in check_field(model))


def test_accumulator_beyond_half_field_is_refused():
    layer = QuantizedLayer(np.full((1, 4), 2**20), np.zeros(1, dtype=np.int64), 0, 0, 0, False)
    model = QuantizedMLP((layer,), 0, 2**10)
    with pytest.raises(ModelError, match=rf"layer 0 .*{FIELD_HALF}"):
        check_field(model)
    assert forward_int(model, np.full((1, 4), 2**10)).item() == 4 * 2**30  # the int64 reference still runs


def test_reference_refuses_int64_overflow():
    layer = QuantizedLayer(np.full((1, 16), 2**29), np.zeros(1, dtype=np.int64), 0, 0, 0, False)
    model = QuantizedMLP((layer,), 0, 2**29)
    with pytest.raises(ModelError, match=r"layer 0 .*int64"):
        forward_int(model, np.zeros((1, 16), dtype=np.int64))


@pytest.mark.parametrize("make, match", [
    (lambda: QuantizedLayer(np.zeros((2, 3)), np.zeros(2, int), 0, 0, 0, False), "integers"),
    (lambda: QuantizedLayer(np.zeros((2, 3), int), np.zeros(3, int), 0, 0, 0, False), "bias length 3"),
    (lambda: QuantizedLayer(np.zeros((2, 3), int), np.zeros(2, int), 0, 0, 40, False), "shift=40"),
    (lambda: QuantizedLayer(np.full((2, 3), P), np.zeros(2, int), 0, 0, 0, False), "magnitude"),
    (lambda: QuantizedMLP((), 0, 1), "at least one"),
    (lambda: QuantizedMLP((QuantizedLayer(np.zeros((2, 3), int), np.zeros(2, int), 0, 0, 0, False),), 0, 0),
     "input_bound=0"),
    (lambda: quantize_fixed_point([np.ones((2, 3))], [np.ones(3)]), r"biases\[0\]"),
    (lambda: quantize_fixed_point([np.ones((2, 3)), np.ones((2, 4))], [np.ones(2)] * 2), "takes 4"),
    (lambda: quantize_fixed_point([np.ones((2, 3))], [np.ones(2)], frac_bits=-1), "frac_bits=-1"),
    (lambda: quantize_fixed_point([np.ones((2, 3))], [np.ones(2)], input_bound=-1), "input_bound"),
    (lambda: quantize_fixed_point([np.full((2, 3), np.nan)], [np.ones(2)]), "nan"),
])
def test_bad_models_raise_model_error_naming_the_parameter(make, match):
    with pytest.raises(ModelError, match=match):
        make()


def test_inputs_are_checked_against_shape_and_bound():
    model = quantize_fixed_point([np.eye(3)], [np.zeros(3)], frac_bits=4, input_bound=1.0)
    with pytest.raises(ModelError, match="shape"):
        quantize_input(model, np.zeros((2, 4)))
    with pytest.raises(ModelError, match="input_bound=16"):
        quantize_input(model, np.full(3, 1.5))
    with pytest.raises(ModelError, match="dtype"):
        forward_int(model, np.zeros((1, 3), dtype=complex))
    real = np.array([[0.5, -0.25, 1.0]])  # floats are quantized at the input scale
    assert np.array_equal(forward_int(model, real), forward_int(model, quantize_input(model, real)))
    x = np.array([1, -2, 3], dtype=np.int64)
    forward_int(model, x)
    assert x.tolist() == [1, -2, 3]  # inputs are not mutated


def test_model_files_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    weights, biases = random_float_mlp(rng, (7, 5, 2))
    x = rng.uniform(-1, 1, (4, 7))
    model = quantize_int8(weights, biases, x)
    save_model(tmp_path / "q.npz", model)
    loaded = load_model(tmp_path / "q.npz")
    assert loaded.scheme == "int8" and loaded.error_bound == model.error_bound
    assert np.array_equal(forward_int(loaded, quantize_input(loaded, x)), forward_int(model, quantize_input(model, x)))
    save_float_model(tmp_path / "f.npz", weights, biases, frac_bits=6, input_bound=1.0)
    from_float = load_model(tmp_path / "f.npz")
    expected = quantize_fixed_point(weights, biases, frac_bits=6, input_bound=1.0)
    assert all(np.array_equal(a.weight, b.weight) and a.shift == b.shift
               for a, b in zip(from_float.layers, expected.layers))


def test_malformed_model_files_raise_model_error(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip archive")
    with pytest.raises(ModelError, match="not a readable"):
        load_model(tmp_path / "junk.npz")
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "missing.npz")
    np.savez(tmp_path / "empty.npz", something=np.zeros(2))
    with pytest.raises(ModelError, match="neither"):
        load_model(tmp_path / "empty.npz")
    np.savez(tmp_path / "v.npz", format=np.array("hezk.qmlp"), version=np.array(99))
    with pytest.raises(ModelError, match="version=99"):
        load_model(tmp_path / "v.npz")


@pytest.mark.parametrize("names", [("w0", "b0", "w1", "b1"), ("W1", "b1", "W2", "b2"),
                                   ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"),
                                   ("weight_0", "bias_0", "weight_1", "bias_1")])
@pytest.mark.parametrize("transpose", [False, True])
def test_float_model_files_with_common_key_names(tmp_path, names, transpose):
    rng = np.random.default_rng(4)
    weights, biases = random_float_mlp(rng, (4, 5, 3))
    stored = [w.T if transpose else w for w in weights]
    np.savez(tmp_path / "m.npz", activation="relu", **dict(zip(names, (stored[0], biases[0], stored[1], biases[1]))))
    model = load_model(tmp_path / "m.npz")
    expected = quantize_fixed_point(weights, biases)
    assert all(np.array_equal(a.weight, b.weight) for a, b in zip(model.layers, expected.layers))
    np.savez(tmp_path / "bad.npz", w0=np.ones((5, 4)), b0=np.ones(5), w1=np.ones((3, 4)), b1=np.ones(3),
             activation="relu")
    with pytest.raises(ModelError, match="do not chain"):
        load_model(tmp_path / "bad.npz")
