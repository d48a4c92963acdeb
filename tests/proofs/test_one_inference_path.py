"""One entry point for proofs of inference (:mod:`proofs.inference`): the commitment's kind picks the strategy
(the MLP proof or the graph proof), one set of statement checks runs before either verifier, and every verifier
path (each strategy's verifier, the entry point, batch verification, ``hezk.verify``, the command line) rejects a
claimed output outside the committed output range, with the honest proof accepted as the positive control.

A ReLU MLP's proofs hide its input through the graph proof: ``commit --private-input`` commits it with the graph
proof, after which ``prove`` / ``verify`` follow the commitment's kind, with or without ``--private-input``."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hezk
import hezk.model
from proofs import inference
from proofs.batch import verify_batch
from proofs.cli import main
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, verify_graph_zk
from proofs.layers.network import Network, verify_network
from proofs.model import load_model, save_float_model, save_model
from proofs.quantize import quantize_fixed_point

SIZES = (6, 5, 3)


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return ([rng.normal(0, 0.4, (b, a)) for a, b in zip(SIZES, SIZES[1:])],
            [rng.normal(0, 0.1, b) for b in SIZES[1:]])


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("one_path")
    weights, biases = _weights()
    save_float_model(folder / "mlp.npz", weights, biases, input_bound=1.0)
    x = np.random.default_rng(1).uniform(-1, 1, (2, SIZES[0]))
    return folder, x


STRATEGIES = ("mlp-plain", "mlp-hiding", "graph-plain", "graph-hiding")


@pytest.fixture(scope="module")
def proven(mlp):
    """Per strategy: (commitment, x as the verifier states it, honest proof object, the strategy's verifier)."""
    folder, x = mlp
    model = load_model(folder / "mlp.npz")
    x_int = np.floor(x * 2.0 ** model.input_frac + 0.5).astype(np.int64)
    q = quantize_graph(hezk.model.load(str(folder / "mlp.npz")), np.random.default_rng(2).uniform(-1, 1, (32, 6)))
    made = {}
    for name, network, x_stated, check in (
            ("mlp-plain", Network(model, zk=False), x_int, verify_network),
            ("mlp-hiding", Network(model, max_proofs=1), x_int, verify_network),
            ("graph-plain", GraphNetwork(q), x, verify_graph),
            ("graph-hiding", HidingGraphNetwork(q, max_proofs=1), x, verify_graph_zk)):
        made[name] = (network.commitment, x_stated, network.prove(x_stated), check)
    return made


def _out_of_range(commitment, proof, side: int):
    low, high = inference.output_range(commitment)
    output = np.array(proof.output, dtype=np.int64)
    output[0, 0] = high + 1 if side > 0 else low - 1
    return dataclasses.replace(proof, output=output)


@pytest.mark.parametrize("side", [1, -1])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_verifier_path_rejects_an_out_of_range_output(proven, strategy, side, tmp_path):
    commitment, x, proof, check = proven[strategy]
    data, commitment_bytes = proof.to_bytes(), commitment.to_bytes()
    assert check(commitment_bytes, x, data)  # positive controls: the honest proof on every path
    assert inference.verify(commitment_bytes, x, data)
    assert verify_batch(commitment_bytes, x, [data], per_proof=len(x))
    forged = _out_of_range(commitment, proof, side).to_bytes()
    paths = {"strategy verifier": lambda: check(commitment_bytes, x, forged),
             "entry point": lambda: inference.verify(commitment_bytes, x, forged),
             "batch": lambda: verify_batch(commitment_bytes, x, [forged], per_proof=len(x)),
             "hezk.verify": lambda: hezk.verify(commitment_bytes, x, forged)}
    for name, path in paths.items():
        with pytest.raises(ProofRejected, match="claimed output") as rejected:
            path()
        assert "outside" in str(rejected.value), name
    (tmp_path / "c.bin").write_bytes(commitment_bytes)
    (tmp_path / "p.bin").write_bytes(forged)
    (tmp_path / "ok.bin").write_bytes(data)
    np.save(tmp_path / "x.npy", x)
    verify = ["verify", "--commitment", str(tmp_path / "c.bin"), "--input", str(tmp_path / "x.npy"), "--proof"]
    assert main([*verify, str(tmp_path / "ok.bin")]) == 0
    assert main([*verify, str(tmp_path / "p.bin")]) == 1


def test_the_entry_point_follows_the_commitment_and_refuses_the_other_kind(proven):
    """An MLP proof checked under a graph commitment (and the reverse) is rejected; a private input (x None)
    is refused for every commitment but a hiding graph one."""
    mlp_commitment, x_int, mlp_proof, _ = proven["mlp-hiding"]
    graph_commitment, x, graph_proof, _ = proven["graph-hiding"]
    with pytest.raises(ProofRejected):
        inference.verify(graph_commitment.to_bytes(), x, mlp_proof.to_bytes())
    with pytest.raises(ProofRejected):
        inference.verify(mlp_commitment.to_bytes(), x_int, graph_proof.to_bytes())
    for name in ("mlp-plain", "mlp-hiding", "graph-plain"):
        commitment, _, proof, _ = proven[name]
        with pytest.raises(ProofRejected, match="states its input"):
            inference.verify(commitment.to_bytes(), None, proof.to_bytes())
    with pytest.raises(ProofRejected, match="commitment"):
        inference.read_commitment(b"not a commitment")


def test_check_statement_bounds_the_input(proven):
    for name in STRATEGIES:
        commitment, x, proof, _ = proven[name]
        assert inference.check_statement(commitment, x, proof.output).shape[0] == len(x)
        with pytest.raises(ProofRejected, match="input"):
            inference.check_statement(commitment, np.asarray(x) * 1e9, proof.output)


def test_mlp_private_input_through_the_graph_proof(mlp, tmp_path, capsys):
    """commit --private-input commits a ReLU MLP with the graph proof; prove/verify --private-input then hide the
    input, and the same commitment also proves a stated input (its kind picks the strategy). Without the flag the
    MLP commitment refuses --private-input (exit 2, naming the fix); a quantized MLP file cannot take the graph
    proof (exit 2)."""
    folder, x = mlp
    np.save(tmp_path / "x.npy", x)
    model, c = str(folder / "mlp.npz"), str(tmp_path / "c.bin")
    assert main(["commit", "--model", model, "--out", c, "--max-proofs", "3", "--private-input", "--quiet"]) == 0
    assert HidingGraphCommitment.from_bytes((tmp_path / "c.bin").read_bytes())  # the graph proof's commitment
    prove = ["prove", "--model", model, "--commitment", c, "--input", str(tmp_path / "x.npy"), "--quiet", "--out"]
    assert main([*prove, str(tmp_path / "hidden.bin"), "--private-input"]) == 0
    assert main([*prove, str(tmp_path / "stated.bin")]) == 0
    verify = ["verify", "--commitment", c, "--proof"]
    assert main([*verify, str(tmp_path / "hidden.bin"), "--private-input"]) == 0
    assert main([*verify, str(tmp_path / "stated.bin"), "--input", str(tmp_path / "x.npy")]) == 0
    assert main([*verify, str(tmp_path / "hidden.bin"), "--input", str(tmp_path / "x.npy")]) == 1
    capsys.readouterr()
    mlp_c = str(tmp_path / "mlp_c.bin")
    assert main(["commit", "--model", model, "--out", mlp_c, "--max-proofs", "2", "--quiet"]) == 0
    assert main(["prove", "--model", model, "--commitment", mlp_c, "--input", str(tmp_path / "x.npy"),
                 "--private-input", "--out", str(tmp_path / "no.bin")]) == 2
    assert "commit --private-input" in capsys.readouterr().err
    assert main(["commit", "--model", model, "--out", str(tmp_path / "pub.bin"), "--private-input",
                 "--public-weights"]) == 2
    weights, biases = _weights()
    save_model(tmp_path / "q.npz", quantize_fixed_point(weights, biases, frac_bits=6))
    assert main(["commit", "--model", str(tmp_path / "q.npz"), "--out", str(tmp_path / "q.bin"),
                 "--private-input"]) == 2
    assert "graph proof" in capsys.readouterr().err


def test_mlp_private_input_batches_through_the_cli(mlp, tmp_path, capsys):
    folder, x = mlp
    np.save(tmp_path / "x.npy", x)
    model, c = str(folder / "mlp.npz"), str(tmp_path / "c.bin")
    assert main(["commit", "--model", model, "--out", c, "--max-proofs", "2", "--private-input", "--quiet"]) == 0
    assert main(["prove", "--model", model, "--commitment", c, "--inputs", str(tmp_path / "x.npy"),
                 "--private-input", "--out", str(tmp_path / "p"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["verify", "--commitment", c, "--private-input", "--proofs", str(tmp_path / "p"), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "accept"


def test_api_private_input_of_an_mlp(mlp):
    """``hezk.commit(private_input=True)`` commits a ReLU MLP for the graph proof (as ``commit --private-input``),
    whose proofs may hide the input; the default MLP proof states its input and says so."""
    folder, x = mlp
    prover = hezk.commit(str(folder / "mlp.npz"), max_proofs=2, private_input=True)
    assert prover.strategy == "graph"
    verified = hezk.verify(prover.commitment, None, hezk.prove(prover, x, private_input=True))
    assert verified.private_input and verified.output.shape == (2, 3)
    stated = hezk.commit(str(folder / "mlp.npz"), max_proofs=1)
    with pytest.raises(ModelError, match="commit with private_input=True"):
        stated.prove(x, private_input=True)


@pytest.mark.parametrize("side", [1, -1])
def test_the_training_modules_forward_proof_rejects_an_out_of_range_output(side):
    """prove_forward stays the training module's own inference relation; its verifier refuses an output outside
    act_bits signed bits too (positive control: the honest output)."""
    from proofs.layers import step_proof as S
    from proofs.layers import training as T

    spec = T.TrainingSpec((8, 8, 4), batch=2, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                          lr_shift=2, update_bits=8)
    rng = np.random.default_rng(4)
    weights = [rng.integers(-8, 8, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(spec.num_layers)]
    trace = T.forward_trace(weights, rng.integers(-16, 16, size=(spec.batch, spec.sizes[0])), spec)
    committed = S.commit_forward(trace, zk=True, private_input=True, max_proofs=1)
    proof = S.prove_forward(trace, committed, zk=True)
    output = np.array(S.forward_output(trace), dtype=np.int64)
    assert S.verify_forward(spec, committed, output, proof)
    limit = 1 << (spec.act_bits - 1)
    output[0, 0] = limit if side > 0 else -limit - 1
    with pytest.raises(ProofRejected, match="outside"):
        S.verify_forward(spec, committed, output, proof)
