"""The plain network proof over Basefold commitments: the weights and every bits group in one batched opening."""
import dataclasses

import numpy as np
import pytest

from proofs.basefold import BasefoldCommitment, BasefoldParams, BasefoldProof
from proofs import cli
from proofs.commit import CommitParams, OpeningProof
from proofs.errors import ModelError, ProofRejected
from proofs.layers.network import ModelCommitment, Network, NetworkProof, read_proof, verify_network
from proofs.model import save_model
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


@pytest.fixture(scope="module")
def conjectured(setup):
    model, _, x, _ = setup
    network = Network(model, zk=False, params=BasefoldParams(conjectured=True))
    return network, network.prove(x)


def test_conjectured_parameters_are_refused_unless_the_verifier_allows_them(setup, conjectured):
    """The prover chose conjectured=True (it travels in the commitment's bytes): refused by default."""
    _, proven, x, _ = setup
    network, proof = conjectured
    commitment = ModelCommitment.from_bytes(network.commitment.to_bytes())
    for verify in (lambda **kw: verify_network(commitment, x, proof.to_bytes(), **kw),
                   lambda **kw: verify_network(commitment.to_bytes(), x, proof, **kw),
                   lambda **kw: network.verify(x, proof, **kw)):
        with pytest.raises(ProofRejected, match=r"conjectured=True.*did not allow conjectured soundness"):
            verify()
        assert np.array_equal(verify(allow_conjectured=True), proof.output)  # the verifier opted in
    assert commitment.soundness_label == "conjectured" and network.soundness_label == "conjectured"
    assert proven.soundness_label == "proven" and proven.commitment.soundness_label == "proven"
    assert "conjectured" in cli.soundness_text(network.soundness_bits(3), network.soundness_label)
    assert "conjectured" not in cli.soundness_text(proven.soundness_bits(3), proven.soundness_label)
    with pytest.raises(ProofRejected):  # opting in does not switch the checks off
        verify_network(commitment, x, dataclasses.replace(proof, output=proof.output + 1), allow_conjectured=True)


def test_weak_basefold_parameters_are_refused_by_the_verifier(setup, monkeypatch):
    """A prover skipping the constructor's check (here: patched off) still meets the verifier's 100 bits."""
    import proofs.layers.network as network_module
    model, _, x, _ = setup
    monkeypatch.setattr(network_module, "MIN_VERIFY_BITS", 0)
    for params, allow in ((BasefoldParams(num_queries=40), False), (BasefoldParams(num_queries=40), True),
                          (BasefoldParams(num_queries=40, conjectured=True), True)):
        weak = Network(model, zk=False, params=params)
        with pytest.raises(ProofRejected, match="bits"):
            verify_network(weak.commitment, x, weak.prove(x), allow_conjectured=allow)


def test_cli_commit_prove_verify_with_basefold(tmp_path, capsys):
    weights, biases = float_mlp(3, (6, 5, 3))
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    save_model(tmp_path / "m.npz", model)
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (2, 6)))
    paths = {name: str(tmp_path / name) for name in ("m.npz", "x.npy", "c.bin", "p.bin", "bad.bin", "l.bin")}
    with pytest.raises(SystemExit):  # only ligero or basefold
        cli.main(["commit", "--model", paths["m.npz"], "--out", paths["c.bin"], "--public-weights",
                  "--scheme", "fri"])
    # hiding Basefold (issue 17): commit, prove from the saved prover state, verify
    assert cli.main(["commit", "--model", paths["m.npz"], "--out", paths["c.bin"], "--scheme", "basefold",
                     "--max-proofs", "2"]) == 0
    capsys.readouterr()
    hidden = ModelCommitment.from_bytes((tmp_path / "c.bin").read_bytes())
    assert hidden.zk and type(hidden.weights.copies[0]).__name__ == "HidingBasefoldCommitment"
    assert cli.main(["prove", "--model", paths["m.npz"], "--input", paths["x.npy"], "--commitment", paths["c.bin"],
                     "--out", paths["p.bin"], "--quiet"]) == 0
    assert cli.main(["verify", "--commitment", paths["c.bin"], "--input", paths["x.npy"], "--proof",
                     paths["p.bin"]]) == 0
    assert capsys.readouterr().out.endswith("accept\n")
    assert cli.main(["commit", "--model", paths["m.npz"], "--out", paths["c.bin"], "--public-weights",
                     "--scheme", "basefold"]) == 0
    assert "Basefold" in capsys.readouterr().out
    commitment = ModelCommitment.from_bytes((tmp_path / "c.bin").read_bytes())
    assert isinstance(commitment.weights, BasefoldCommitment)
    assert cli.main(["prove", "--model", paths["m.npz"], "--input", paths["x.npy"], "--commitment", paths["c.bin"],
                     "--out", paths["p.bin"], "--public-weights", "--quiet"]) == 0  # the kind read from c.bin
    assert isinstance(read_proof((tmp_path / "p.bin").read_bytes()).weights_opening, BasefoldProof)
    verify = ["verify", "--commitment", paths["c.bin"], "--input", paths["x.npy"], "--proof"]
    assert cli.main(verify + [paths["p.bin"]]) == 0
    captured = capsys.readouterr()
    assert captured.out.endswith("accept\n") and "proven" in captured.err and "conjectured" not in captured.err
    data = bytearray((tmp_path / "p.bin").read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    assert cli.main(verify + [paths["bad.bin"]]) == 1
    assert capsys.readouterr().out == "reject\n"
    assert cli.main(["commit", "--model", paths["m.npz"], "--out", paths["l.bin"], "--public-weights"]) == 0
    assert not isinstance(ModelCommitment.from_bytes((tmp_path / "l.bin").read_bytes()).weights,
                          BasefoldCommitment)  # ligero stays the default


def test_cli_verify_refuses_conjectured_parameters_unless_allowed(setup, conjectured, tmp_path, capsys):
    _, _, x, _ = setup
    network, proof = conjectured
    (tmp_path / "c.bin").write_bytes(network.commitment.to_bytes())
    (tmp_path / "p.bin").write_bytes(proof.to_bytes())
    np.save(tmp_path / "x.npy", x)
    verify = ["verify", "--commitment", str(tmp_path / "c.bin"), "--input", str(tmp_path / "x.npy"),
              "--proof", str(tmp_path / "p.bin")]
    assert cli.main(verify) == 1
    assert "did not allow conjectured soundness" in capsys.readouterr().err
    assert cli.main(verify + ["--allow-conjectured"]) == 0
    assert "conjectured soundness" in capsys.readouterr().err
