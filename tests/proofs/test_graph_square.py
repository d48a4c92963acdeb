"""Square activations (Square, Mul(x, x), Pow(x, 2)) in graph proofs (issue 13: the import issue's models use
them): the square relation against a direct MLE (naive twin), models with squares proved bit for bit against
the integer reference in both modes and within the reported calibration error of onnxruntime, a forged square
rejected, worst cases that would wrap the field refused by node."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hezk.model import Activation, Contraction, Graph, read_onnx
from proofs import field as F
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.common import Claim
from proofs.layers.contraction import GatherProof, square_claim_reduction, verify_square
from proofs.layers.graph import GraphNetwork, GraphProof, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
from proofs.mle import mle_evaluate
from proofs.transcript import Transcript

onnx = pytest.importorskip("onnx")
from tests.model import onnx_models as M  # noqa: E402


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 7), st.integers(0, 2 ** 31 - 1))
def test_square_relation_against_direct_mle(k, seed):
    """Z = X * X: the reduction ends at X~(rho) (checked by direct evaluation); a wrong claimed Z~(r) is rejected."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3000, 3000, size=1 << k)
    x_table, z_table = F.to_field(x), F.to_field(x * x)
    point = F.ext_random((k,), seed=seed)
    claim = Claim(point, mle_evaluate(z_table, point))
    proof, x_claim = square_claim_reduction(x_table, claim, Transcript("sq"))
    assert F.ext_eq(mle_evaluate(x_table, x_claim.point), x_claim.value)
    back = verify_square(claim, proof, Transcript("sq"))
    assert np.array_equal(back.point, x_claim.point) and F.ext_eq(back.value, x_claim.value)
    with pytest.raises(ProofRejected):
        verify_square(Claim(point, F.ext_add(claim.value, F.ext_one())), proof, Transcript("sq"))
    with pytest.raises(ProofRejected):  # the stated X~(rho) off by one: the last round's check fails
        verify_square(claim, GatherProof(proof.sumcheck, F.ext_add(proof.x_eval, F.ext_one())), Transcript("sq"))


def _onnx_graph(model, tmp_path):
    onnx.save(model, str(tmp_path / "m.onnx"))
    return read_onnx(str(tmp_path / "m.onnx"))


def _check_against_onnxruntime(model, graph, q, x, y, calibration):
    """Bit for bit the integer reference, and within the error the quantizer reports on the calibration data
    (x is part of it) of onnxruntime's float32 output."""
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    reference = M.run_onnx(model, x.astype(np.float32)).reshape(y.shape)
    report = q.error_report(graph, calibration)
    assert np.abs(q.dequantize(y) - reference).max() <= report["max_error"] + 1e-4 * report["output_magnitude"]


@pytest.mark.parametrize("make", [lambda: M.mlp((24, 16, 10), "square", seed=4), lambda: M.lenet("square")],
                         ids=["mlp", "lenet"])
def test_square_models_proved_with_public_weights(make, tmp_path):
    model = make()
    graph = _onnx_graph(model, tmp_path)
    calibration = np.random.default_rng(1).normal(size=(16, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    assert "square" in [op.kind for op in q.ops]
    net = GraphNetwork(q)
    x = calibration[:2]
    proof = net.prove(x)
    y = verify_graph(net.commitment.to_bytes(), x, proof.to_bytes()).output
    _check_against_onnxruntime(model, graph, q, x, y, calibration)
    items = list(proof.items)
    at = next(i for i, (tag, _) in enumerate(items) if tag == "square")
    forged = GatherProof(items[at][1].sumcheck, F.ext_add(items[at][1].x_eval, F.ext_one()))
    items[at] = ("square", forged)
    with pytest.raises(ProofRejected, match="square"):
        verify_graph(net.commitment, x, GraphProof(proof.output, proof.bits_commitment, tuple(items),
                                                   proof.bits_opening, proof.weights_opening))
    output = proof.output.copy()
    output[-1, -1] += 1
    with pytest.raises(ProofRejected):
        verify_graph(net.commitment, x, GraphProof(output, proof.bits_commitment, proof.items, proof.bits_opening,
                                                   proof.weights_opening))


def test_square_mlp_proved_with_hidden_weights(tmp_path):
    model = M.mlp((24, 16, 10), "square", seed=5)
    graph = _onnx_graph(model, tmp_path)
    calibration = np.random.default_rng(2).normal(size=(16, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    net = HidingGraphNetwork(q, max_proofs=2)
    x = calibration[:2]
    proof = net.prove(x)
    y = verify_graph_zk(net.commitment.to_bytes(), x, proof.to_bytes()).output
    _check_against_onnxruntime(model, graph, q, x, y, calibration)
    plain = GraphNetwork(q)
    assert np.array_equal(verify_graph(plain.commitment, x, plain.prove(x)), y)
    output = proof.output.copy()
    output[0, 0] -= 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, type(proof)(output, proof.relations))


def test_a_square_of_the_public_input_is_proved_in_both_modes():
    """The square reads the model input (public): its value is the verifier's own, no stated X."""
    rng = np.random.default_rng(3)
    nodes = (Activation("sq", "Mul", ("x",), "s", "square"),
             Contraction("fc", "Gemm", ("s",), "o", "bk,nk->bn", rng.normal(size=(3, 8)), rng.normal(size=3), None,
                         (3,)))
    graph = Graph("x", (8,), nodes, "o")
    calibration = rng.normal(size=(16, 8))
    q = quantize_graph(graph, calibration)
    x = calibration[:3]
    expected = q.forward_int(q.quantize_input(x))
    plain = GraphNetwork(q)
    assert np.array_equal(verify_graph(plain.commitment, x, plain.prove(x)), expected)
    hidden = HidingGraphNetwork(q, max_proofs=1)
    assert np.array_equal(verify_graph_zk(hidden.commitment, x, hidden.prove(x)), expected)
    assert np.abs(q.dequantize(expected) - graph.forward(x)).max() <= q.error_report(graph, calibration)["max_error"]


def test_a_square_that_could_wrap_the_field_is_refused_by_name():
    rng = np.random.default_rng(0)
    nodes = (Activation("big_square", "Mul", ("x",), "s", "square"),
             Contraction("fc", "Gemm", ("s",), "o", "bk,nk->bn", rng.normal(size=(2, 4)), None, None, (2,)))
    with pytest.raises(ModelError, match="big_square"):
        quantize_graph(Graph("x", (4,), nodes, "o"), rng.normal(size=(8, 4)), act_bits=16)


def test_cli_square_mlp_with_hiding_basefold(tmp_path, capsys, monkeypatch):
    """commit --scheme basefold on a graph model (hiding), prove, verify --output: onnxruntime's output within
    the reported error; a graph too large for hiding Basefold, or Basefold with --public-weights, is refused
    (exit 2) before anything is written."""
    from proofs import cli

    monkeypatch.chdir(tmp_path)
    model = M.mlp((20, 12, 10), "square", seed=7)
    onnx.save(model, "sq.onnx")
    rng = np.random.default_rng(8)
    np.save("cal.npy", rng.normal(size=(16, 20)))
    np.save("x.npy", np.load("cal.npy")[:2])
    assert cli.main(["commit", "--model", "sq.onnx", "--out", "c.bin", "--calibration", "cal.npy", "--scheme",
                     "basefold", "--max-proofs", "2"]) == 0
    assert "hiding commitment" in capsys.readouterr().out
    assert cli.main(["prove", "--model", "sq.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
                     "--quiet"]) == 0
    assert cli.main(["verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin", "--output",
                     "y.npy"]) == 0
    graph = read_onnx("sq.onnx")
    q = quantize_graph(graph, np.load("cal.npy"))
    want = M.run_onnx(model, np.load("x.npy").astype(np.float32))
    assert np.abs(np.load("y.npy") - want).max() <= q.error_report(graph, np.load("cal.npy"))["max_error"] + 1e-3
    capsys.readouterr()
    assert cli.main(["commit", "--model", "sq.onnx", "--out", "d.bin", "--scheme", "basefold",
                     "--public-weights"]) == 2
    onnx.save(M.lenet("relu"), "lenet.onnx")  # the tail layout commits it (issue 34); no parameter set: refused
    monkeypatch.setattr("proofs.layers.graph_zk.GRAPH_BASEFOLD_CANDIDATES", ())
    assert cli.main(["commit", "--model", "lenet.onnx", "--out", "l.bin", "--scheme", "basefold"]) == 2
    assert "too large for hiding Basefold" in capsys.readouterr().err
    assert not (tmp_path / "d.bin").exists() and not (tmp_path / "l.bin").exists()
