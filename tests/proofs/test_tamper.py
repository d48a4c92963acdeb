"""Negative tests: every tampered statement, witness or proof is rejected with ProofRejected, nothing else.

``setup`` is the plain protocol (``zk=False``: its witness and proof internals are tampered with); ``both``
runs the statement-level and byte-level tampering against the plain and the default hiding proofs."""
import dataclasses

import numpy as np
import pytest

from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.layers.network import LayerWitness, ModelCommitment, Network, NetworkProof, read_proof, verify_network
from proofs.layers.requant import decompose
from proofs.commit import OpeningProof
from proofs.sumcheck import SumcheckProof
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input

from .cheating import cheating_sumcheck, walk

SIZES = (12, 8, 3)
BATCH = 3


def make_model(seed):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, 0.4, (SIZES[i + 1], SIZES[i])) for i in range(len(SIZES) - 1)]
    biases = [rng.normal(0, 0.1, SIZES[i + 1]) for i in range(len(SIZES) - 1)]
    return quantize_fixed_point(weights, biases, frac_bits=6)


def _setup(zk):
    model = make_model(0)
    network = Network(model, zk=zk, max_proofs=3) if zk else Network(model, zk=False)
    x = quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (BATCH, SIZES[0])))
    proof = network.prove(x)
    return network, x, proof, proof.to_bytes()


@pytest.fixture(scope="module")
def setup():
    return _setup(False)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "zk"])
def both(request):
    return _setup(request.param)


def other_network(model, like):
    return Network(model, zk=like.zk, max_proofs=1) if like.zk else Network(model, zk=False)


def verify_bytes(commitment_bytes, x, proof_bytes):
    return verify_network(ModelCommitment.from_bytes(commitment_bytes), x, read_proof(proof_bytes))


def test_honest_proof_is_accepted(both):
    network, x, proof, data = both
    assert np.array_equal(verify_bytes(network.commitment.to_bytes(), x, data), forward_int(network.model, x))


@pytest.mark.parametrize("delta", [1, -1, 1000])
def test_wrong_output_is_rejected(both, delta):
    network, x, proof, _ = both
    output = proof.output.copy()
    output[BATCH - 1, 2] += delta
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, dataclasses.replace(proof, output=output))


def test_output_outside_the_declared_range_or_shape_is_rejected(both):
    network, x, proof, _ = both
    for output in (proof.output + F.P, proof.output[:1], proof.output[:, :2]):
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, dataclasses.replace(proof, output=output))


def test_wrong_input_is_rejected(both):
    network, x, proof, _ = both
    for changed in (x + np.eye(*x.shape, dtype=np.int64), x[:1], x[::-1], np.zeros_like(x)):
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, changed, proof)
    with pytest.raises(ProofRejected, match="input_bound"):
        verify_network(network.commitment, x * 1000, proof)
    with pytest.raises(ProofRejected, match="dtype"):
        verify_network(network.commitment, x.astype(complex), proof)
    with pytest.raises(ProofRejected):  # floats are real values, quantized at the input scale
        verify_network(network.commitment, x.astype(float), proof)
    real = x * 2.0 ** -network.model.input_frac
    assert np.array_equal(verify_network(network.commitment, real, proof), proof.output)


def test_different_weight_commitment_is_rejected(both):
    network, x, proof, _ = both
    other = other_network(make_model(5), network).commitment
    with pytest.raises(ProofRejected):
        verify_network(other, x, proof)
    with pytest.raises(ProofRejected):
        verify_network(dataclasses.replace(network.commitment, weights=other.weights), x, proof)
    # a model that differs in a single weight by one unit
    model = network.model
    weight = model.layers[1].weight.copy()
    weight[0, 0] += 1
    layers = (model.layers[0], dataclasses.replace(model.layers[1], weight=weight))
    nearly = other_network(dataclasses.replace(model, layers=layers), network).commitment
    with pytest.raises(ProofRejected):
        verify_network(nearly, x, proof)


def prove_tampered(network, witness):
    with cheating_sumcheck():  # a cheater echoing every claim
        cheat = network.prove_witness(witness, strict=True)
    with pytest.raises(ProofError, match="claim does not equal"):  # the honest prover refuses when strict
        network.prove_witness(witness, strict=True)
    with pytest.raises(ProofRejected):  # by default it proves the tampered witness anyway
        verify_network(network.commitment, witness.input, network.prove_witness(witness))
    return cheat


def test_flipped_relu_sign_bit_in_the_witness_is_rejected(setup):
    network, x, _, _ = setup
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    for element in (0, 1, SIZES[1] + 2):  # real elements of rows 0 and 1
        bits = hidden.bits.copy()
        bits[hidden.spec.sign_index, element] ^= np.uint64(1)
        tampered_layer = dataclasses.replace(witness.layers[0], decomposition=dataclasses.replace(hidden, bits=bits))
        tampered = dataclasses.replace(witness, layers=(tampered_layer,) + witness.layers[1:])
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, prove_tampered(network, tampered))


def test_cheating_remainder_is_rejected(setup):
    """The prover rounds one value up by one and hides the remainder rem - 2^R (out of range) in a 'bit'."""
    network, x, _, _ = setup
    model = network.model
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    spec = hidden.spec
    element = int(np.flatnonzero((hidden.shifted[:SIZES[1]] >= 0))[0])
    shifted = hidden.shifted.copy()
    shifted[element] += 1
    honest = decompose(hidden.acc, spec)
    bits = honest.bits.copy()
    bits[spec.shift:spec.width] = decompose(shifted << spec.shift, spec).bits[spec.shift:spec.width]
    bits[:spec.shift, element] = 0
    bits[0, element] = F.to_field(np.int64(hidden.remainder[element] - (1 << spec.shift)))
    out = np.maximum(shifted, 0)
    cheat = dataclasses.replace(hidden, bits=bits, shifted=shifted, out=out)
    # the rest of the network is recomputed honestly from the manipulated activation
    a = out.reshape(witness.layers[0].out.shape)
    last = model.layers[1]
    acc = a[:, :SIZES[1]] @ last.weight.T + last.bias
    acc[BATCH:] = 0
    acc_padded = np.zeros_like(witness.layers[1].acc)
    acc_padded[:, :SIZES[2]] = acc
    layers = (dataclasses.replace(witness.layers[0], decomposition=cheat, out=a),
              LayerWitness(a, acc_padded, None, acc_padded))
    tampered = dataclasses.replace(witness, layers=layers, output=acc[:BATCH])
    assert not np.array_equal(tampered.output, witness.output)
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, prove_tampered(network, tampered))


def test_every_sumcheck_round_message_perturbed_is_rejected(setup):
    network, x, proof, _ = setup
    count = 0
    for sumcheck, rebuild in walk(proof, lambda new: new, SumcheckProof):
        messages = sumcheck.round_messages
        for j in range(messages.shape[0]):
            perturbed = messages.copy()
            k = j % messages.shape[1]
            perturbed[j, k, j % 4] = (perturbed[j, k, j % 4] + 1) % F.P
            with pytest.raises(ProofRejected, match="sumcheck"):
                verify_network(network.commitment, x, rebuild(SumcheckProof(perturbed)))
            count += 1
    assert count >= 20


@pytest.mark.parametrize("field_name", ["sign_eval", "shifted_eval", "acc_eval", "groups"])
def test_perturbed_zkrelu_evaluations_are_rejected(setup, field_name):
    network, x, proof, _ = setup
    decomposition, linear = proof.layer_proofs[0]
    if field_name == "groups":
        group = decomposition.groups[0]
        changed = (dataclasses.replace(group, bits_eval=F.ext_add(group.bits_eval, F.ext_one())),)
        changed += decomposition.groups[1:]
    else:
        changed = F.ext_add(getattr(decomposition, field_name), F.ext_one())
    new_layer = (dataclasses.replace(decomposition, **{field_name: changed}), linear)
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x,
                       dataclasses.replace(proof, layer_proofs=(new_layer,) + proof.layer_proofs[1:]))


def test_altered_merkle_path_is_rejected(setup):
    network, x, proof, _ = setup
    altered_paths = 0
    for opening, rebuild in walk(proof, lambda new: new, OpeningProof):
        columns = opening.columns.copy()
        columns[0, 0] = (columns[0, 0] + 1) % F.P  # an opened leaf
        with pytest.raises(ProofRejected, match="Merkle"):
            verify_network(network.commitment, x, rebuild(dataclasses.replace(opening, columns=columns)))
        for position in sorted({0, len(opening.merkle_proof) - 1} if opening.merkle_proof else set()):
            altered_paths += 1
            digests = list(opening.merkle_proof)
            digests[position] = bytes([digests[position][0] ^ 1]) + digests[position][1:]
            with pytest.raises(ProofRejected, match="Merkle"):
                altered = dataclasses.replace(opening, merkle_proof=tuple(digests))
                verify_network(network.commitment, x, rebuild(altered))
    assert altered_paths >= 2  # the larger openings carry sibling digests


def test_truncated_proof_is_rejected(both):
    network, x, _, data = both
    commitment = network.commitment.to_bytes()
    cuts = sorted(set(np.linspace(0, len(data) - 1, 60).astype(int)) | {len(data) - 1, len(data) - 4, 10})
    for cut in cuts:
        with pytest.raises(ProofRejected):
            verify_bytes(commitment, x, data[:cut])
    with pytest.raises(ProofRejected, match="trailing|padded"):  # the record's length is in its header
        verify_bytes(commitment, x, data + b"\x00")


def test_random_byte_corruption_is_rejected(both):
    network, x, _, data = both
    commitment = network.commitment.to_bytes()
    rng = np.random.default_rng(7)
    count = 24 if network.zk else 200  # a hiding proof takes ~0.4 s to verify
    positions = np.concatenate([np.arange(0, 64, 4 if network.zk else 1), rng.choice(len(data), count, replace=False)])
    for position in positions:
        corrupted = bytearray(data)
        corrupted[position] ^= int(rng.integers(1, 256))
        with pytest.raises(ProofRejected):
            verify_bytes(commitment, x, bytes(corrupted))


def test_corrupted_commitment_bytes_are_rejected(both):
    network, x, _, data = both
    commitment = network.commitment.to_bytes()
    rng = np.random.default_rng(8)
    for position in rng.choice(len(commitment), 20 if network.zk else 60, replace=False):
        corrupted = bytearray(commitment)
        corrupted[position] ^= int(rng.integers(1, 256))
        with pytest.raises(ProofRejected):
            verify_bytes(bytes(corrupted), x, data)


def test_non_proof_objects_are_rejected(setup):
    network, x, proof, _ = setup
    for bad in (None, b"bytes", proof.layer_proofs):
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, bad)
    with pytest.raises(ProofRejected):
        verify_network("not a commitment", x, proof)
    with pytest.raises(ProofRejected):
        NetworkProof.from_bytes("not bytes")


def test_inconsistent_commitment_objects_and_other_batches_are_rejected(both):
    network, x, proof, _ = both
    layers = network.commitment.layers
    bad_layers = (dataclasses.replace(layers[0], q_bits=40),) + layers[1:]
    with pytest.raises(ProofRejected, match="q_bits"):
        verify_network(dataclasses.replace(network.commitment, layers=bad_layers), x, proof)
    other_batch = network.prove(x[:2])
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, other_batch)
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x[:2], proof)
