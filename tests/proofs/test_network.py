"""Whole-network proofs: outputs equal the numpy integer reference bit for bit, bytes round-trip.

Both protocols: the default zero-knowledge one (hidden weights, :mod:`proofs.layers.network_zk`) and the plain
one (``zk=False``, which reveals the weights)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs.commit import CommitParams
from proofs.errors import ModelError
from proofs.layers.network import ModelCommitment, Network, NetworkProof, read_proof, verify_network
from proofs.layers import network_zk
from proofs.layers.network_zk import HidingNetworkProof
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


CASES = [(name, batch, False) for name in sorted(MODELS) for batch in (1, 3, 8)]
CASES += [("fixed 16-16-4", 1, True), ("fixed rescaled output", 3, True), ("int8", 8, True)]


@pytest.mark.parametrize("name,batch,zk", CASES)
def test_proof_verifies_and_output_is_the_integer_reference(name, batch, zk):
    weights, biases = float_mlp(1, SIZES[name])
    x_float = np.random.default_rng(2).uniform(-1, 1, (batch, SIZES[name][0]))
    model = MODELS[name](weights, biases, x_float)
    network = Network(model, zk=zk, max_proofs=1)
    x = quantize_input(model, x_float)
    proof = network.prove(x)
    assert isinstance(proof, HidingNetworkProof if zk else NetworkProof)
    expected = forward_int(model, x)
    assert np.array_equal(proof.output, expected)
    assert np.array_equal(verify_network(network.commitment, x, proof), expected)
    # bytes round trip of both the commitment and the proof
    commitment = ModelCommitment.from_bytes(network.commitment.to_bytes())
    assert commitment.zk == zk
    again = read_proof(proof.to_bytes())
    assert np.array_equal(verify_network(commitment, x, again), expected)
    assert again.to_bytes() == proof.to_bytes()
    error = np.max(np.abs(dequantize_output(model, expected) - float_forward(weights, biases, x_float)))
    assert error <= model.error_bound


@pytest.mark.parametrize("zk", [False, True])
def test_single_linear_layer_without_decomposition(zk):
    model = quantize_fixed_point([np.array([[0.5, -1.0, 0.25]])], [np.array([0.125])], frac_bits=4)
    network = Network(model, network_zk.default_params() if zk else None, zk=zk, max_proofs=1)
    x = quantize_input(model, np.array([[1.0, 0.5, -0.75], [0.0, 0.0, 0.0]]))
    proof = network.prove(x)
    if zk:  # no hidden layer and no decomposition: the proof has no store of its own
        assert proof.relations.commitments == ()
    else:
        assert proof.bits_commitments == () and proof.layer_proofs[0][0] is None
    assert np.array_equal(verify_network(network.commitment, x, proof), forward_int(model, x))


def _without_first_shift(model):
    """The first layer keeps its accumulator (no shift, no ReLU): its activation is stored as it is."""
    first = dataclasses.replace(model.layers[0], shift=0, relu=False)
    second = dataclasses.replace(model.layers[1], in_frac=first.out_frac, shift=model.layers[1].shift + 4)
    return type(model)((first, second), model.input_frac, model.input_bound)


@pytest.mark.parametrize("plain_hidden", [False, True])
def test_zk_hidden_layer_without_requantization_and_relu_on_the_output(plain_hidden):
    weights, biases = float_mlp(11, (5, 6, 3))
    model = quantize_fixed_point(weights, biases, frac_bits=4, relus=[True, True], rescale_output=True)
    if plain_hidden:
        model = _without_first_shift(model)
    network = Network(model, max_proofs=1)
    x = quantize_input(model, np.random.default_rng(12).uniform(-1, 1, (2, 5)))
    assert np.array_equal(verify_network(network.commitment, x, network.prove(x)), forward_int(model, x))


@settings(max_examples=10)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 9), min_size=2, max_size=4), st.integers(1, 6),
       st.integers(0, 8))
def test_random_networks_prove_and_verify(seed, sizes, batch, frac_bits):
    weights, biases = float_mlp(seed, sizes)
    model = quantize_fixed_point(weights, biases, frac_bits=frac_bits, input_bound=2.0)
    x = quantize_input(model, np.random.default_rng(seed).uniform(-2, 2, (batch, sizes[0])))
    network = Network(model, zk=False)
    assert np.array_equal(verify_network(network.commitment, x, network.prove(x)), forward_int(model, x))


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 9), min_size=2, max_size=3), st.integers(1, 4),
       st.integers(0, 6))
def test_random_networks_prove_and_verify_with_zero_knowledge(seed, sizes, batch, frac_bits):
    weights, biases = float_mlp(seed, sizes)
    model = quantize_fixed_point(weights, biases, frac_bits=frac_bits, input_bound=2.0)
    x = quantize_input(model, np.random.default_rng(seed).uniform(-2, 2, (batch, sizes[0])))
    network = Network(model, max_proofs=1)
    assert np.array_equal(verify_network(network.commitment, x, network.prove(x)), forward_int(model, x))


def test_witness_keeps_sign_bits_and_remainders():
    weights, biases = float_mlp(3, (6, 5, 2))
    model = quantize_fixed_point(weights, biases, frac_bits=5)
    network = Network(model, zk=False)
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
    Network(model, zk=False).prove(quantize_input(model, np.zeros((1, 4))), progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and calls[-1][0] == calls[-1][1]


@pytest.mark.parametrize("zk", [False, True])
def test_soundness_is_at_least_100_bits(zk):
    weights, biases = float_mlp(6, (16, 16, 4))
    network = Network(quantize_fixed_point(weights, biases, frac_bits=8), zk=zk, max_proofs=1)
    assert network.commitment.soundness_bits(batch=64) >= 100


def test_prover_refuses_bad_models_and_inputs():
    with pytest.raises(ModelError, match="QuantizedMLP"):
        Network("not a model")
    model = quantize_fixed_point(*float_mlp(7, (3, 2)), frac_bits=4)
    network = Network(model, max_proofs=1)
    with pytest.raises(ModelError, match="shape"):
        network.prove(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(ModelError, match="input_bound"):
        network.prove(np.full((1, 3), 10 ** 6))
    with pytest.raises(ModelError, match="params"):
        Network(model, CommitParams())  # the hiding default needs HidingParams
    with pytest.raises(ModelError, match="zk"):
        Network(model, zk="yes")
