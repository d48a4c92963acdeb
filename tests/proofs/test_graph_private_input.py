"""A private input in zero-knowledge graph proofs (issue 13, item 3: "the input optionally private"): the input
is a stored tensor of the proof, its range proven by its bits (as every requantized op's) and its padding zero;
the verifier gets no input. Proofs equal the integer reference; a proof of either kind is rejected as the other;
an input outside the proven range is refused by the prover, and a prover that lies about it is rejected (with
the negative control: without the range relation the same lie is accepted)."""
from __future__ import annotations

import numpy as np
import pytest

from hezk.model import read_onnx
from proofs.errors import ModelError, ProofError, ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers import graph_zk
from proofs.layers.graph_zk import HidingGraphNetwork, HidingGraphProof, input_decomposition, verify_graph_zk
from proofs.proof_format import from_record, to_record

onnx = pytest.importorskip("onnx")
from tests.model import onnx_models as M  # noqa: E402


@pytest.fixture(scope="module")
def square_mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("priv") / "mlp.onnx"
    onnx.save(M.mlp((12, 8, 4), "square", seed=9), str(path))
    calibration = np.random.default_rng(4).uniform(-1, 1, (16, 12))
    q = quantize_graph(read_onnx(str(path)), calibration)
    net = HidingGraphNetwork(q, max_proofs=6)
    x = calibration[:2]
    return q, net, x, net.prove(x, private_input=True)


def test_private_input_proof_verifies_without_the_input(square_mlp):
    q, net, x, proof = square_mlp
    y = verify_graph_zk(net.commitment.to_bytes(), None, proof.to_bytes()).output
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    assert net.commitment.soundness_bits(2, private_input=True) >= 100


def test_private_and_public_input_proofs_are_not_interchangeable(square_mlp):
    q, net, x, proof = square_mlp
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, proof)  # a private-input proof checked against a stated input
    public = net.prove(x)
    assert np.array_equal(verify_graph_zk(net.commitment, x, public), q.forward_int(q.quantize_input(x)))
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, None, public)


def test_private_input_proof_tampering_rejected(square_mlp):
    q, net, x, proof = square_mlp
    output = proof.output.copy()
    output[1, 2] += 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, None, HidingGraphProof(output, proof.relations))
    with pytest.raises(ProofRejected):  # another batch size claimed
        verify_graph_zk(net.commitment, None, HidingGraphProof(proof.output[:1], proof.relations))
    inner = bytearray(from_record(proof.to_bytes(), HidingGraphProof.KIND, "proof"))
    rng = np.random.default_rng(12)
    for position in sorted(set(rng.integers(0, len(inner), 20).tolist())):
        damaged = bytearray(inner)
        damaged[position] ^= 1 + int(rng.integers(0, 255))
        with pytest.raises(ProofRejected):
            verify_graph_zk(net.commitment, None, to_record(HidingGraphProof.KIND, bytes(damaged)))


def _out_of_range_input(q):
    """An integer input inside the model's input_bound but outside the private range [-2^(Q'-1), 2^(Q'-1))."""
    half = 1 << (input_decomposition(q).q_bits - 1)
    assert half <= q.input_bound  # the proven range lies inside the bound the quantizer's field checks assume
    x = np.zeros((1, *q.input_shape), dtype=np.int64)
    x.reshape(-1)[0] = half  # one past the proven range (still <= input_bound)
    return x


def _lying_prover(monkeypatch, q):
    """Decompose the input clipped into the proven range (bits of another value than the stored input)."""
    honest = graph_zk.decompose
    spec = input_decomposition(q)
    half = 1 << (spec.q_bits - 1)

    def clipped(values, decomposition):
        if decomposition == spec:
            values = np.clip(values, -half, half - 1)
        return honest(values, decomposition)

    monkeypatch.setattr(graph_zk, "decompose", clipped)


def test_an_input_outside_the_proven_range_is_refused_and_a_lie_about_it_rejected(square_mlp, monkeypatch):
    q, net, _, _ = square_mlp
    x = _out_of_range_input(q)
    with pytest.raises(ModelError, match="private input must lie in"):
        net.prove(x, private_input=True)
    _lying_prover(monkeypatch, q)
    try:
        proof = net.prove(x, private_input=True)
    except (ProofError, ModelError):
        return  # the prover's own checks caught the inconsistent tables
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, None, proof)


def test_negative_control_without_the_range_relation_the_lie_is_accepted(square_mlp, monkeypatch):
    """The same lie with the input's range relation removed from both sides is accepted: the relation is what
    rejects it above."""
    q, net, _, _ = square_mlp
    x = _out_of_range_input(q)
    _lying_prover(monkeypatch, q)
    monkeypatch.setattr(graph_zk._Run, "input_range", lambda self: None)
    graph_zk._structure_of.cache_clear()  # the memoised structure is of the protocol with the relation
    try:
        proof = net.prove(x, private_input=True)
        y = verify_graph_zk(net.commitment, None, proof).output
    finally:
        graph_zk._structure_of.cache_clear()  # nor may the patched one outlive the test
    assert np.array_equal(y, q.forward_int(x))


def test_private_input_over_hiding_basefold(square_mlp):
    from proofs.layers.network_zk import basefold_params
    q, _, x, _ = square_mlp
    net = HidingGraphNetwork(q, params=basefold_params(), max_proofs=2)
    proof = net.prove(x, private_input=True)
    assert np.array_equal(verify_graph_zk(net.commitment, None, proof), q.forward_int(q.quantize_input(x)))
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, proof)


def test_cli_private_input(tmp_path, capsys, monkeypatch):
    from proofs import cli

    monkeypatch.chdir(tmp_path)
    model = M.mlp((12, 8, 4), "square", seed=10)
    onnx.save(model, "m.onnx")
    rng = np.random.default_rng(5)
    np.save("cal.npy", rng.uniform(-1, 1, (16, 12)))
    np.save("x.npy", np.load("cal.npy")[:2])
    assert cli.main(["commit", "--model", "m.onnx", "--out", "c.bin", "--calibration", "cal.npy",
                     "--max-proofs", "2"]) == 0
    assert cli.main(["prove", "--model", "m.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
                     "--private-input", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["verify", "--commitment", "c.bin", "--private-input", "--proof", "p.bin",
                     "--output", "y.npy"]) == 0
    assert "private input" in capsys.readouterr().err
    want = M.run_onnx(model, np.load("x.npy").astype(np.float32))
    q = quantize_graph(read_onnx("m.onnx"), np.load("cal.npy"))
    assert np.abs(np.load("y.npy") - want).max() <= q.error_report(read_onnx("m.onnx"),
                                                                    np.load("cal.npy"))["max_error"] + 1e-3
    assert cli.main(["verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin"]) == 1
    assert cli.main(["commit", "--model", "m.onnx", "--out", "pub.bin", "--public-weights"]) == 0
    assert cli.main(["prove", "--model", "m.onnx", "--input", "x.npy", "--commitment", "pub.bin", "--out",
                     "q.bin", "--public-weights", "--private-input", "--quiet"]) == 2
