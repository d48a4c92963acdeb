"""Sumcheck proofs of quantized layers through the scripts and the Python API; tampering refused (issue 6).

A user saves float weights with numpy, runs the three scripts exactly as the issue writes them, and
uses the public Python API: commit once, prove y = model(x) for a public batch, verify; every
tampered statement, witness or proof is refused with ``ProofRejected`` and nothing else.
"""
import dataclasses
import os
import subprocess
import sys

import galois
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proofs
from proofs import ModelError, ProofError
from proofs import field as F
from proofs.commit import OpeningProof
from proofs.layers import Linear, Network, ReLU
from proofs.layers.network import ModelCommitment, NetworkProof, verify_network
from proofs.layers.requant import decompose
from proofs.mle import mle_evaluate
from proofs.model import load_model
from tests.proofs.cheating import walk
from tests.proofs.rejection_helpers import only_rejected
from proofs.quantize import (dequantize_output, float_forward, forward_int, quantize_fixed_point, quantize_input,
                             quantize_int8)
from proofs.sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript

SIZES = (16, 16, 4)  # the issue's benchmark (a)
BATCH = 3
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def float_mlp(seed=0, sizes=SIZES, scale=0.4):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, scale, (sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    biases = [rng.normal(0, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


def save_npz(path, weights, biases, style="w0"):
    """A float model file as a user would write it with numpy."""
    arrays = {}
    for i, (w, b) in enumerate(zip(weights, biases)):
        if style == "w0":
            arrays.update({f"w{i}": w, f"b{i}": b})
        elif style == "W1":
            arrays.update({f"W{i + 1}": w, f"b{i + 1}": b})
        elif style == "torch":
            arrays.update({f"fc{i + 1}.weight": w, f"fc{i + 1}.bias": b})
        elif style == "sequential":
            arrays.update({f"layers.{2 * i}.weight": w, f"layers.{2 * i}.bias": b})
        elif style == "in_out":  # (in, out) matrices, as x @ W + b
            arrays.update({f"weight_{i}": w.T, f"bias_{i}": b})
        elif style == "named":  # no numbers: layers in file order
            arrays.update({f"{'hidden' if i < len(weights) - 1 else 'out'}_w": w,
                           f"{'hidden' if i < len(weights) - 1 else 'out'}_b": b})
    if style == "positional":
        np.savez(path, *[a for pair in zip(weights, biases) for a in pair], activation="relu")
        return
    np.savez(path, activation="relu", **arrays)  # issue 12: a file of weights names its activation


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = tmp_path_factory.mktemp("issue6") / "model.npz"
    weights, biases = float_mlp()
    save_npz(path, weights, biases)
    model = load_model(path)
    network = Network(model, zk=False)  # the plain protocol of issue 6 (issue 11 made hiding the default)
    x_float = np.random.default_rng(1).uniform(-1, 1, (BATCH, SIZES[0]))
    x = quantize_input(model, x_float)
    proof = network.prove(x)
    return network, x, proof, proof.to_bytes(), (weights, biases, x_float)


def verify_bytes(commitment_bytes, x, proof_bytes):
    return verify_network(ModelCommitment.from_bytes(commitment_bytes), x, NetworkProof.from_bytes(proof_bytes))


# ------------------------------------------------------------------------------------------ correctness

def test_proven_output_is_the_integer_reference_and_within_the_stated_error(setup):
    network, x, proof, data, (weights, biases, x_float) = setup
    reference = forward_int(network.model, x)
    assert proof.output.dtype == np.int64 and np.array_equal(proof.output, reference)
    verified = verify_bytes(network.commitment.to_bytes(), x, data)
    assert np.array_equal(verified, reference)
    assert np.array_equal(verify_network(network.commitment.to_bytes(), x, data), reference)  # bytes as they are
    error = np.max(np.abs(dequantize_output(network.model, verified) - float_forward(weights, biases, x_float)))
    assert error <= network.model.error_bound and error < 0.05
    # the stated error of the model quantized for inputs in [-1, 1]
    tight = quantize_fixed_point(weights, biases, frac_bits=8, input_bound=1.0)
    output = dequantize_output(tight, forward_int(tight, quantize_input(tight, x_float)))
    assert 0 < tight.error_bound < 0.5
    assert np.max(np.abs(output - float_forward(weights, biases, x_float))) <= tight.error_bound


@pytest.mark.parametrize("calibrated", [True, False])
def test_symmetric_int8_models_are_proved(calibrated):
    weights, biases = float_mlp(8, (10, 12, 5))
    x_float = np.random.default_rng(9).uniform(-1, 1, (6, 10))
    model = quantize_int8(weights, biases, x_float if calibrated else None)
    assert model.scheme == "int8" and all(np.max(np.abs(layer.weight)) <= 127 for layer in model.layers)
    assert any(layer.shift > 0 for layer in model.layers)  # requantization by a shift
    network = Network(model)
    proof = network.prove(quantize_input(model, x_float))
    output = verify_network(network.commitment, quantize_input(model, x_float), proof).output
    assert np.array_equal(output, forward_int(model, quantize_input(model, x_float)))
    error = np.max(np.abs(dequantize_output(model, output) - float_forward(weights, biases, x_float)))
    assert error <= model.error_bound


@pytest.mark.parametrize("batch", [1, 2, 5, 8])
def test_batch_size_is_a_parameter(setup, batch):
    network, _, _, _, _ = setup
    x = quantize_input(network.model, np.random.default_rng(batch).uniform(-1, 1, (batch, SIZES[0])))
    fixed = Network(network.model, batch_size=batch)
    proof = fixed.prove(x)
    assert proof.output.shape == (batch, SIZES[-1])
    assert np.array_equal(verify_network(fixed.commitment, x, proof), forward_int(network.model, x))
    with pytest.raises(ModelError, match="batch_size"):
        fixed.prove(np.vstack([x, x]))
    with pytest.raises(ModelError, match="batch_size"):
        Network(network.model, batch_size=0)


def test_linear_and_relu_layers_build_a_network():
    weights, biases = float_mlp(2, (6, 5, 3))
    network = Network([Linear(weights[0], biases[0]), ReLU(), Linear(weights[1], biases[1])], frac_bits=6)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 6))
    proof = network.prove(x)  # floats are quantized at the input scale
    assert np.array_equal(network.verify(x, proof), forward_int(network.model, quantize_input(network.model, x)))
    with pytest.raises(ModelError, match="ReLU"):
        Network([ReLU(), Linear(weights[0], biases[0])])
    # two Linear layers without ReLU between them: the hidden one is still rescaled by 2^R and proved
    linear = Network([Linear(weights[0], biases[0]), Linear(weights[1], biases[1])], frac_bits=6)
    assert not linear.model.layers[0].relu and linear.model.layers[0].shift == 6
    output = linear.verify(x, linear.prove(x)).output
    expected = float_forward(weights, biases, x, relus=[False, False])
    assert np.max(np.abs(dequantize_output(linear.model, output) - expected)) <= linear.model.error_bound
    with pytest.raises(ModelError, match="layers\\[1\\]"):
        Network([Linear(weights[0], biases[0]), "relu"])


def test_progress_is_reported_while_proving(setup, capsys):
    network, x, proof, _, _ = setup
    steps = []
    network.prove(x, progress=lambda done, total, label: steps.append((done, total)))
    assert steps and steps[-1][0] == steps[-1][1] and [d for d, _ in steps] == list(range(1, len(steps) + 1))
    assert network.prove(x, progress=True) == proof  # a text bar on stderr; proving is deterministic
    assert "100%" in capsys.readouterr().err


def test_relu_on_the_last_layer_is_proved():
    weights, biases = float_mlp(4, (5, 4))
    network = Network([Linear(weights[0], biases[0]), ReLU()], frac_bits=6)
    x = np.random.default_rng(5).uniform(-1, 1, (3, 5))
    output = network.verify(x, network.prove(x)).output
    assert np.all(output >= 0)
    assert np.array_equal(output, forward_int(network.model, quantize_input(network.model, x)))


def test_soundness_is_at_least_100_bits(setup):
    network, _, _, _, _ = setup
    for batch in (1, 64):
        assert network.commitment.soundness_bits(batch) >= 100
    assert network.soundness_bits() >= 100
    assert network.commitment.weights.security_bits >= 100
    assert F.EXT_BITS >= 100
    with pytest.raises(ModelError, match="100"):  # parameters that would promise less are refused up front
        Network(network.model, proofs.CommitParams(num_queries=20), zk=False)
    other_rate = Network(network.model, proofs.CommitParams(rate_inv=2), zk=False)
    assert other_rate.soundness_bits(64) >= 100


def test_proof_and_commitment_are_versioned_bytes(setup):
    network, x, proof, data, _ = setup
    commitment = network.commitment.to_bytes()
    assert NetworkProof.from_bytes(data).to_bytes() == data == bytes(proof)
    assert ModelCommitment.from_bytes(commitment).to_bytes() == commitment
    assert NetworkProof.from_bytes(data) == proof and ModelCommitment.from_bytes(commitment) == network.commitment
    assert len(commitment) < 1024  # a short commitment
    for blob, parse in ((data, NetworkProof.from_bytes), (commitment, ModelCommitment.from_bytes)):
        newer = bytearray(blob)
        newer[4] ^= 0x7  # the version field follows the record container's 4-byte magic (issue 16)
        assert "version" in str(only_rejected(lambda: parse(bytes(newer))))
        assert "magic" in str(only_rejected(lambda: parse(b"XXXXXXXX" + blob[8:])))


def test_transcript_absorbs_the_statement_before_the_first_challenge(setup, monkeypatch):
    network, x, proof, _, _ = setup
    events = []
    absorb, challenge = Transcript.absorb, Transcript.challenge_ext_vector

    def record_absorb(self, label, value):
        events.append(("absorb", label))
        return absorb(self, label, value)

    def record_challenge(self, label, n):
        events.append(("challenge", label))
        return challenge(self, label, n)

    monkeypatch.setattr(Transcript, "absorb", record_absorb)
    monkeypatch.setattr(Transcript, "challenge_ext_vector", record_challenge)
    for run in (lambda: network.prove(x), lambda: verify_network(network.commitment, x, proof)):
        events.clear()
        run()
        first = next(i for i, (kind, _) in enumerate(events) if kind == "challenge")
        before = {label for _, label in events[:first]}
        assert {"model", "input", "output"} <= before
    # the model statement holds shapes and quantization parameters: changing any of them changes it
    info = network.commitment.layers[0]
    for name in ("shift", "in_frac", "weight_frac", "q_bits"):
        changed = dataclasses.replace(network.commitment, layers=(dataclasses.replace(
            info, **{name: getattr(info, name) + 1}),) + network.commitment.layers[1:])
        assert changed.to_bytes() != network.commitment.to_bytes()


# ------------------------------------------------------------------------------------------ negative tests

def test_wrong_output_is_rejected(setup):
    network, x, proof, _, _ = setup
    for row, col, delta in ((0, 0, 1), (BATCH - 1, SIZES[-1] - 1, -1), (1, 2, 12345)):
        output = proof.output.copy()
        output[row, col] += delta
        only_rejected(lambda: verify_network(network.commitment, x, dataclasses.replace(proof, output=output)))


def test_wrong_input_is_rejected(setup):
    network, x, proof, _, _ = setup
    bumped = x.copy()
    bumped[0, 0] += 1
    for other in (bumped, x[::-1], x[:1], np.zeros_like(x), x[:, :-1], x * 10 ** 6, x.astype(complex)):
        only_rejected(lambda: verify_network(network.commitment, other, proof))


def test_different_weight_commitment_is_rejected(setup):
    network, x, proof, _, (weights, biases, _) = setup
    nudged = [w.copy() for w in weights]
    nudged[1][0, 0] += 2.0 ** -7
    for other in (Network(quantize_fixed_point(nudged, biases, input_bound=8.0), zk=False),
                  Network(quantize_fixed_point(*float_mlp(9), input_bound=8.0), zk=False)):
        assert other.commitment.to_bytes() != network.commitment.to_bytes()
        only_rejected(lambda: verify_network(other.commitment, x, proof))
        swapped = dataclasses.replace(network.commitment, weights=other.commitment.weights)
        only_rejected(lambda: verify_network(swapped, x, proof))


def replace_layer(witness, index, **changes):
    layers = list(witness.layers)
    layers[index] = dataclasses.replace(layers[index], **changes)
    return dataclasses.replace(witness, layers=tuple(layers))


def test_flipped_relu_sign_bit_in_the_witness_is_rejected(setup):
    network, x, _, _, _ = setup
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    for element in (0, 5, SIZES[1] + 3):
        bits = hidden.bits.copy()
        bits[hidden.spec.sign_index, element] ^= np.uint64(1)
        tampered = replace_layer(witness, 0, decomposition=dataclasses.replace(hidden, bits=bits))
        only_rejected(lambda: verify_network(network.commitment, x, network.prove_witness(tampered)))


def test_cheating_remainder_is_rejected(setup):
    """Round one value up: z' + 1 with remainder rem - 2^R, hidden in the remainder 'bits'; the rest of
    the network is recomputed honestly from that activation, so the claimed output is the cheat's."""
    network, x, _, _, _ = setup
    witness = network.witness(x)
    hidden = witness.layers[0].decomposition
    spec = hidden.spec
    element = int(np.flatnonzero(hidden.shifted[:SIZES[1]] >= 0)[0])
    shifted = hidden.shifted.copy()
    shifted[element] += 1
    bits = hidden.bits.copy()
    bits[spec.shift:spec.width] = decompose(shifted << spec.shift, spec).bits[spec.shift:spec.width]
    bits[:spec.shift, element] = 0
    bits[0, element] = F.to_field(np.int64(hidden.remainder[element] - (1 << spec.shift)))
    activation = np.maximum(shifted, 0).reshape(witness.layers[0].out.shape)
    last = network.model.layers[1]
    acc = np.zeros_like(witness.layers[1].acc)
    acc[:BATCH, :SIZES[2]] = activation[:BATCH, :SIZES[1]] @ last.weight.T + last.bias
    tampered = replace_layer(witness, 0, out=activation,
                             decomposition=dataclasses.replace(hidden, bits=bits, shifted=shifted,
                                                               out=activation.reshape(-1)))
    tampered = replace_layer(tampered, 1, input=activation, acc=acc, out=acc)
    tampered = dataclasses.replace(tampered, output=acc[:BATCH, :SIZES[2]])
    assert not np.array_equal(tampered.output, witness.output)
    only_rejected(lambda: verify_network(network.commitment, x, network.prove_witness(tampered)))


def test_every_sumcheck_round_message_perturbed_is_rejected(setup):
    network, x, proof, _, _ = setup
    rounds = 0
    for sumcheck, rebuild in walk(proof, lambda new: new, SumcheckProof):
        for j in range(sumcheck.round_messages.shape[0]):
            for k in range(sumcheck.round_messages.shape[1]):
                perturbed = sumcheck.round_messages.copy()
                perturbed[j, k, (j + k) % 4] = (perturbed[j, k, (j + k) % 4] + 1) % F.P
                only_rejected(lambda: verify_network(network.commitment, x, rebuild(SumcheckProof(perturbed))))
            rounds += 1
    assert rounds >= 10


def test_altered_merkle_path_is_rejected(setup):
    network, x, proof, _, _ = setup
    paths = 0
    for opening, rebuild in walk(proof, lambda new: new, OpeningProof):
        for position in range(len(opening.merkle_proof)):
            digests = list(opening.merkle_proof)
            digests[position] = bytes([digests[position][0] ^ 0x80]) + digests[position][1:]
            altered = rebuild(dataclasses.replace(opening, merkle_proof=tuple(digests)))
            only_rejected(lambda: verify_network(network.commitment, x, altered))
            paths += 1
        columns = opening.columns.copy()
        columns[-1, -1] = (columns[-1, -1] + 1) % F.P
        only_rejected(lambda: verify_network(network.commitment, x,
                                             rebuild(dataclasses.replace(opening, columns=columns))))
    assert paths >= 2


def test_truncated_proof_is_rejected(setup):
    network, x, _, data, _ = setup
    commitment = network.commitment.to_bytes()
    for cut in sorted(set(np.linspace(0, len(data) - 1, 80).astype(int)) | {len(data) - 1}):
        only_rejected(lambda: verify_bytes(commitment, x, data[:cut]))
    only_rejected(lambda: verify_bytes(commitment, x, data + b"\x00"))
    only_rejected(lambda: verify_bytes(commitment[:-1], x, data))


def test_random_byte_corruption_is_rejected_at_many_positions(setup):
    network, x, _, data, _ = setup
    commitment = network.commitment.to_bytes()
    rng = np.random.default_rng(11)
    positions = np.concatenate([np.arange(48), rng.choice(len(data), 400, replace=False)])
    for position in positions:
        corrupted = bytearray(data)
        corrupted[position] ^= int(rng.integers(1, 256))
        only_rejected(lambda: verify_bytes(commitment, x, bytes(corrupted)))
    for position in range(len(commitment)):
        corrupted = bytearray(commitment)
        corrupted[position] ^= 0x41
        only_rejected(lambda: verify_bytes(bytes(corrupted), x, data))


def test_garbage_instead_of_a_proof_is_rejected(setup):
    network, x, proof, _, _ = setup
    for junk in (b"", b"\x00" * 100, os.urandom(2000), "proof", None, 42):
        only_rejected(lambda: NetworkProof.from_bytes(junk))
        only_rejected(lambda: ModelCommitment.from_bytes(junk))
    for junk in (None, proof.layer_proofs, proof.output, b"junk"):
        only_rejected(lambda: verify_network(network.commitment, x, junk))
        only_rejected(lambda: verify_network(junk, x, proof))


# ------------------------------------------------------------------------------------------ field bounds

def test_a_model_that_could_wrap_the_field_is_refused_naming_layer_and_bound():
    weights, biases = float_mlp(1, (64, 64, 8), scale=50.0)
    with pytest.raises(ModelError) as info:
        quantize_fixed_point(weights, biases, frac_bits=12)
    message = str(info.value)
    assert "layer 0" in message and "wrap" in message and str(F.P) in message
    assert any(char.isdigit() for char in message.split("layer 0", 1)[1])
    # the second layer alone overflows: the message names layer 1
    weights, biases = float_mlp(1, (8, 64, 64, 4), scale=0.3)
    weights[1] = weights[1] * 3000
    with pytest.raises(ModelError, match="layer 1"):
        quantize_fixed_point(weights, biases, frac_bits=8)
    assert issubclass(ModelError, ProofError)


# ------------------------------------------------------------------------------------------ the scripts

def run_cli(cwd, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "proofs", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.slow
def test_scripts_as_written_in_the_issue(tmp_path):
    weights, biases = float_mlp()
    save_npz(tmp_path / "model.npz", weights, biases)
    x = np.random.default_rng(2).uniform(-1, 1, (4, SIZES[0]))
    np.save(tmp_path / "x.npy", x)
    help_text = run_cli(tmp_path, "commit", "--help").stdout
    assert "c.bin" in help_text
    committed = run_cli(tmp_path, "commit", "--model", "model.npz")  # issue 16: the secret state needs a name
    assert committed.returncode == 2 and "--state" in committed.stderr and not (tmp_path / "c.bin").exists()
    committed = run_cli(tmp_path, "commit", "--model", "model.npz", "--state", "c.bin.state")
    assert committed.returncode == 0, committed.stderr
    assert (tmp_path / "c.bin").is_file()  # the name the verify script expects
    proved = run_cli(tmp_path, "prove", "--model", "model.npz", "--input", "x.npy", "--out", "proof.bin")
    assert proved.returncode == 0, proved.stderr
    assert "bits" in proved.stdout
    verified = run_cli(tmp_path, "verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "proof.bin")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.strip() == "accept"
    # the accepted output is the integer reference of the committed model
    model = load_model(tmp_path / "model.npz")
    expected = dequantize_output(model, forward_int(model, quantize_input(model, x)))
    assert "soundness" in verified.stderr
    assert f"{expected[0, 0]:.4f}" in verified.stderr or f"{expected[0, 0]:.3f}" in verified.stderr

    np.save(tmp_path / "other.npy", x[::-1])
    data = bytearray((tmp_path / "proof.bin").read_bytes())
    data[len(data) // 3] ^= 0x01
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    (tmp_path / "short.bin").write_bytes(bytes(data[:100]))
    for input_file, proof_file in (("other.npy", "proof.bin"), ("x.npy", "bad.bin"), ("x.npy", "short.bin")):
        rejected = run_cli(tmp_path, "verify", "--commitment", "c.bin", "--input", input_file, "--proof", proof_file)
        assert rejected.returncode == 1, rejected.stderr
        assert rejected.stdout.strip() == "reject" and rejected.stderr.startswith("reject: ")
        assert "Traceback" not in rejected.stderr


@pytest.mark.slow  # 6-9 s: the default run stays under 10 minutes on 2 cores (pytest -m slow runs it)
def test_scripts_with_another_model_and_other_key_styles(tmp_path):
    weights, biases = float_mlp(5, (6, 5, 3))
    x = np.random.default_rng(6).uniform(-1, 1, (2, 6))
    np.save(tmp_path / "x.npy", x)
    reference = None
    for style in ("w0", "W1", "torch", "sequential", "in_out", "named", "positional"):
        save_npz(tmp_path / f"{style}.npz", weights, biases, style)
        model = load_model(tmp_path / f"{style}.npz")
        output = forward_int(model, quantize_input(model, x))
        reference = output if reference is None else reference
        assert np.array_equal(output, reference), style
    assert run_cli(tmp_path, "commit", "--model", "torch.npz", "--out", "mine.bin").returncode == 0
    assert run_cli(tmp_path, "prove", "--model", "in_out.npz", "--input", "x.npy", "--commitment", "mine.bin",
                   "--out", "p.bin").returncode == 0  # the same weights in another file: the same commitment
    assert run_cli(tmp_path, "verify", "--commitment", "mine.bin", "--input", "x.npy",
                   "--proof", "p.bin").returncode == 0
    save_npz(tmp_path / "theirs.npz", *float_mlp(7, (6, 5, 3)))
    assert run_cli(tmp_path, "commit", "--model", "theirs.npz", "--out", "theirs.bin").returncode == 0
    other = run_cli(tmp_path, "verify", "--commitment", "theirs.bin", "--input", "x.npy", "--proof", "p.bin")
    assert other.returncode == 1 and other.stdout.strip() == "reject"


def test_script_refuses_a_model_that_could_wrap_the_field(tmp_path):
    weights, biases = float_mlp(1, (64, 64, 8), scale=50.0)
    np.savez(tmp_path / "huge.npz", w0=weights[0], b0=biases[0], w1=weights[1], b1=biases[1], frac_bits=12,
             activation="relu")
    result = run_cli(tmp_path, "commit", "--model", "huge.npz")
    assert result.returncode == 2
    assert "layer 0" in result.stderr and "wrap" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c.bin").exists()


# ------------------------------------------------------------------------------------------ primitives

def test_commit_is_both_the_module_and_the_function():
    import proofs.commit as commit_module
    from proofs.commit import Commitment, commit
    values = np.arange(16)
    assert commit_module is proofs.commit
    assert proofs.commit(values)[0] == commit(values)[0] == proofs.commit_values(values)[0]
    assert isinstance(commit(values)[0], Commitment)


GF = galois.GF(F.P)
small = st.integers(0, F.P - 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(small, small), min_size=1, max_size=20))
def test_field_against_galois(pairs):
    a = np.array([p[0] for p in pairs], dtype=np.uint64)
    b = np.array([p[1] for p in pairs], dtype=np.uint64)
    ga, gb = GF(a.astype(np.int64)), GF(b.astype(np.int64))
    assert np.array_equal(F.mul(a, b), np.array(ga * gb, dtype=np.uint64))
    assert np.array_equal(F.add(a, b), np.array(ga + gb, dtype=np.uint64))
    assert np.array_equal(F.sub(a, b), np.array(ga - gb, dtype=np.uint64))
    nonzero = np.where(a == 0, 1, a).astype(np.uint64)
    assert np.array_equal(F.inv(nonzero), np.array(GF(nonzero.astype(np.int64)) ** -1, dtype=np.uint64))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 5), st.integers(0, 2 ** 32))
def test_mle_against_brute_force(num_vars, seed):
    rng = np.random.default_rng(seed)
    table = rng.integers(0, F.P, 1 << num_vars).astype(np.uint64)
    point = F.ext_random(num_vars, seed=seed)
    total = F.ext_zero()
    for index in range(1 << num_vars):  # sum_x f(x) prod_j (x_j r_j + (1 - x_j)(1 - r_j)), bit j of x is x_j
        weight = F.ext_one()
        for j in range(num_vars):
            r = point[j]
            factor = r if (index >> j) & 1 else F.ext_sub(F.ext_one(), r)
            weight = F.ext_mul(weight, factor)
        total = F.ext_add(total, F.ext_mul_base(weight, table[index]))
    assert F.ext_eq(mle_evaluate(table, point), total)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(0, 2 ** 32))
def test_sumcheck_on_random_instances(num_vars, degree, seed):
    rng = np.random.default_rng(seed)
    tables = [rng.integers(0, F.P, 1 << num_vars).astype(np.uint64) for _ in range(degree)]
    claim = F.ext_from_base(F.sum_(np.prod(np.stack([t.astype(object) for t in tables]), axis=0) % F.P))
    proof, point, evals = prove_sumcheck([(F.ext_one(), tables)], claim, Transcript("acc"))
    sub = verify_sumcheck(proof, claim, num_vars, degree, Transcript("acc"))
    product = F.ext_one()
    for table in tables:
        product = F.ext_mul(product, mle_evaluate(table, point))
    assert F.ext_eq(sub.value, product)
    wrong = F.ext_add(claim, F.ext_one())
    only_rejected(lambda: verify_sumcheck(proof, wrong, num_vars, degree, Transcript("acc")))


@pytest.mark.slow
def test_every_byte_of_a_proof_corrupted_is_rejected(setup):
    network, x, _, data, _ = setup
    commitment = network.commitment.to_bytes()
    for position in range(len(data)):  # ~8 minutes: one flip per byte, alternating low and high bit
        corrupted = bytearray(data)
        corrupted[position] ^= 0x01 if position % 2 else 0x80
        only_rejected(lambda: verify_bytes(commitment, x, bytes(corrupted)))
