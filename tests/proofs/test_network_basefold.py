"""The plain network proof over Basefold commitments: the weights and every bits group in one batched opening."""
import dataclasses

import numpy as np
import pytest

from proofs.basefold import BasefoldCommitment, BasefoldParams, BasefoldProof
from proofs.commit import CommitParams, OpeningProof
from proofs.errors import ModelError, ProofRejected
from proofs.layers.network import ModelCommitment, Network, NetworkProof, read_proof, verify_network
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input
from tests.proofs.test_network import float_mlp

PARAMS = BasefoldParams(rate_inv=4, arity=3)


@pytest.fixture(scope="module")
def setup():
    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(2).uniform(-1, 1, (3, 16)))
    network = Network(model, zk=False, params=PARAMS)
    proof = network.prove(x)
    return model, network, x, proof


def test_basefold_network_proof_verifies_and_round_trips(setup):
    model, network, x, proof = setup
    assert isinstance(network.commitment.weights, BasefoldCommitment)
    assert isinstance(proof.weights_opening, BasefoldProof)
    assert all(group.opening is None for pair in proof.layer_proofs if pair[0] for group in pair[0].groups)
    assert len(proof.bits_commitments) == 1  # every bits group packed in one table
    assert np.array_equal(verify_network(network.commitment, x, proof), forward_int(model, x))
    commitment = ModelCommitment.from_bytes(network.commitment.to_bytes())
    assert commitment == network.commitment and not commitment.zk
    again = read_proof(proof.to_bytes())
    assert again.to_bytes() == proof.to_bytes()
    assert np.array_equal(verify_network(commitment, x, again), forward_int(model, x))
    assert network.soundness_bits(3) >= 100


def test_basefold_proof_tampering_is_rejected(setup):
    _, network, x, proof = setup
    opening = proof.weights_opening
    bad_rounds = opening.rounds.copy()
    bad_rounds[0, 0, 0] = (bad_rounds[0, 0, 0] + 1) % 2013265921
    for bad in (dataclasses.replace(proof, weights_opening=dataclasses.replace(opening, rounds=bad_rounds)),
                dataclasses.replace(proof, output=proof.output + 1),
                dataclasses.replace(proof, bits_commitments=proof.bits_commitments * 2),
                dataclasses.replace(proof, bits_commitments=()),
                dataclasses.replace(proof, bits_commitments=tuple(dataclasses.replace(c, root=bytes(32))
                                                                  for c in proof.bits_commitments))):
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, bad)
    with pytest.raises(ProofRejected):  # another input
        verify_network(network.commitment, x[::-1], proof)
    data = bytearray(proof.to_bytes())
    for position in range(0, len(data), max(1, len(data) // 40)):
        mutated = bytearray(data)
        mutated[position] ^= 0x10
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, bytes(mutated))


def test_mixed_commitment_schemes_are_rejected(setup):
    model, network, x, proof = setup
    ligero = Network(model, zk=False, params=CommitParams())
    ligero_proof = ligero.prove(x)
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, ligero_proof)
    with pytest.raises(ProofRejected):
        verify_network(ligero.commitment, x, proof)
    group = ligero_proof.layer_proofs[0][0].groups[0]
    assert isinstance(group.opening, OpeningProof)
    decomposition = proof.layer_proofs[0][0]
    smuggled = dataclasses.replace(decomposition, groups=(dataclasses.replace(decomposition.groups[0],
                                                                              opening=group.opening),))
    bad = dataclasses.replace(proof, layer_proofs=((smuggled, proof.layer_proofs[0][1]),) + proof.layer_proofs[1:])
    with pytest.raises(ProofRejected, match="batch only"):
        verify_network(network.commitment, x, bad)


def test_a_tampered_witness_is_rejected(setup):
    _, network, x, _ = setup
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    bits = hidden.bits.copy()
    bits[hidden.spec.sign_index, 1] ^= np.uint64(1)
    layer = dataclasses.replace(witness.layers[0], decomposition=dataclasses.replace(hidden, bits=bits))
    tampered = dataclasses.replace(witness, layers=(layer,) + witness.layers[1:])
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, network.prove_witness(tampered))


def test_basefold_params_are_checked():
    weights, biases = float_mlp(1, (4, 2))
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    with pytest.raises(ModelError, match="bits"):
        Network(model, zk=False, params=BasefoldParams(num_queries=30))
    network = Network(model, zk=False, params=PARAMS)  # one layer, no bits: the weights alone
    x = quantize_input(model, np.ones((1, 4)) * 0.5)
    proof = network.prove(x)
    assert isinstance(proof, NetworkProof) and proof.bits_commitments == ()
    verify_network(network.commitment, x, proof)
