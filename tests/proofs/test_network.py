"""Whole-network proofs: outputs equal the numpy integer reference bit for bit, bytes round-trip."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs.errors import ModelError
from proofs.layers.network import ModelCommitment, Network, NetworkProof, verify_network
from proofs.quantize import (dequantize_output, float_forward, forward_int, quantize_fixed_point, quantize_input,
                             quantize_int8)


def float_mlp(seed, sizes, scale=0.5):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, scale / np.sqrt(sizes[i]), (sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    biases = [rng.normal(0, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


MODELS = {
    "fixed 16-16-4": lambda w, b, x: quantize_fixed_point(w, b, frac_bits=8),
    "fixed rescaled output": lambda w, b, x: quantize_fixed_point(w, b, frac_bits=6, rescale_output=True),
    "int8": lambda w, b, x: quantize_int8(w, b, x),
}
SIZES = {"fixed 16-16-4": (16, 16, 4), "fixed rescaled output": (10, 7, 5, 3), "int8": (12, 9, 6, 2)}


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_proof_verifies_and_output_is_the_integer_reference(name, batch):
    weights, biases = float_mlp(1, SIZES[name])
    x_float = np.random.default_rng(2).uniform(-1, 1, (batch, SIZES[name][0]))
    model = MODELS[name](weights, biases, x_float)
    network = Network(model)
    x = quantize_input(model, x_float)
    proof = network.prove(x)
    expected = forward_int(model, x)
    assert np.array_equal(proof.output, expected)
    assert np.array_equal(verify_network(network.commitment, x, proof), expected)
    # bytes round trip of both the commitment and the proof
    commitment = ModelCommitment.from_bytes(network.commitment.to_bytes())
    again = NetworkProof.from_bytes(proof.to_bytes())
    assert np.array_equal(verify_network(commitment, x, again), expected)
    assert again.to_bytes() == proof.to_bytes()
    error = np.max(np.abs(dequantize_output(model, expected) - float_forward(weights, biases, x_float)))
    assert error <= model.error_bound


def test_single_linear_layer_without_decomposition():
    model = quantize_fixed_point([np.array([[0.5, -1.0, 0.25]])], [np.array([0.125])], frac_bits=4)
    network = Network(model)
    x = quantize_input(model, np.array([[1.0, 0.5, -0.75], [0.0, 0.0, 0.0]]))
    proof = network.prove(x)
    assert proof.bits_commitments == () and proof.layer_proofs[0][0] is None
    assert np.array_equal(verify_network(network.commitment, x, proof), forward_int(model, x))


@settings(max_examples=10)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 9), min_size=2, max_size=4), st.integers(1, 6),
       st.integers(0, 8))
def test_random_networks_prove_and_verify(seed, sizes, batch, frac_bits):
    weights, biases = float_mlp(seed, sizes)
    model = quantize_fixed_point(weights, biases, frac_bits=frac_bits, input_bound=2.0)
    x = quantize_input(model, np.random.default_rng(seed).uniform(-2, 2, (batch, sizes[0])))
    network = Network(model)
    assert np.array_equal(verify_network(network.commitment, x, network.prove(x)), forward_int(model, x))


def test_witness_keeps_sign_bits_and_remainders():
    weights, biases = float_mlp(3, (6, 5, 2))
    model = quantize_fixed_point(weights, biases, frac_bits=5)
    network = Network(model)
    x = quantize_input(model, np.random.default_rng(4).uniform(-1, 1, (3, 6)))
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    assert np.array_equal(hidden.sign, (hidden.shifted < 0).astype(np.uint64))
    assert np.all((hidden.remainder >= 0) & (hidden.remainder < 2 ** 5))
    assert np.array_equal(witness.output, forward_int(model, x))
    assert witness.layers[1].decomposition is None


def test_progress_is_reported_to_the_end():
    weights, biases = float_mlp(5, (4, 4, 2))
    model = quantize_fixed_point(weights, biases, frac_bits=4)
    calls = []
    Network(model).prove(quantize_input(model, np.zeros((1, 4))), progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and calls[-1][0] == calls[-1][1]


def test_soundness_is_at_least_100_bits():
    weights, biases = float_mlp(6, (16, 16, 4))
    network = Network(quantize_fixed_point(weights, biases, frac_bits=8))
    assert network.commitment.soundness_bits(batch=64) >= 100


def test_prover_refuses_bad_models_and_inputs():
    with pytest.raises(ModelError, match="QuantizedMLP"):
        Network("not a model")
    model = quantize_fixed_point(*float_mlp(7, (3, 2)), frac_bits=4)
    network = Network(model)
    with pytest.raises(ModelError, match="shape"):
        network.prove(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(ModelError, match="input_bound"):
        network.prove(np.full((1, 3), 10 ** 6))
