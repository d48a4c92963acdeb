"""Zero-knowledge graph proofs (issue 13, item 3): hidden weights, the same statement as the plain graph proof."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from hezk.model import Activation, Add, Contraction, Graph, Patches, Reshape, read_onnx
from proofs.errors import ModelError, ProofError, ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, HidingGraphProof, verify_graph_zk
from proofs.proof_format import from_record, to_record

onnx = pytest.importorskip("onnx")
from tests.model import onnx_models as M  # noqa: E402


def _small_cnn(seed=0, groups=1, residual=True):
    """conv 3x3 pad 1 (4 -> 4) + relu, (+ x, relu), global average pool, flatten, Gemm 4 -> 3 on 4x5x5."""
    rng = np.random.default_rng(seed)
    nodes = [Contraction("conv", "Conv", ("x",), "h", "bgcuvij,gocuv->bgoij",
                         rng.normal(size=(groups, 4 // groups, 4 // groups, 3, 3)), rng.normal(size=(4, 1, 1)) * .1,
                         Patches((3, 3), pads=(1, 1, 1, 1), groups=groups), (4, 5, 5)),
             Activation("relu1", "Relu", ("h",), "r", "relu")]
    last = "r"
    if residual:
        nodes += [Add("residual", "Add", ("r", "x"), "s"), Activation("relu2", "Relu", ("s",), "t", "relu")]
        last = "t"
    nodes += [Contraction("gap", "GlobalAveragePool", (last,), "g", "bchw,hw->bc", np.full((5, 5), 1 / 25), None,
                          None, (4, 1, 1)),
              Reshape("flat", "Flatten", ("g",), "f", (4,)),
              Contraction("fc", "Gemm", ("f",), "o", "bk,nk->bn", rng.normal(size=(3, 4)), rng.normal(size=3), None,
                          (3,))]
    return Graph("x", (4, 5, 5), tuple(nodes), "o")


def _quantized(graph, seed=0):
    calibration = np.random.default_rng(seed).normal(size=(16, *graph.input_shape))
    return quantize_graph(graph, calibration), calibration


@pytest.fixture(scope="module")
def small():
    q, calibration = _quantized(_small_cnn())
    net = HidingGraphNetwork(q, max_proofs=3)
    x = calibration[:2]
    return q, net, x, net.prove(x)


def test_hidden_weights_proof_equals_the_integer_reference_and_the_plain_proof(small):
    q, net, x, proof = small
    y = verify_graph_zk(net.commitment.to_bytes(), x, proof.to_bytes()).output
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    plain = GraphNetwork(q)
    assert np.array_equal(verify_graph(plain.commitment, x, plain.prove(x)), y)
    assert HidingGraphCommitment.from_bytes(net.commitment.to_bytes()).to_bytes() == net.commitment.to_bytes()
    assert net.commitment.soundness_bits(2) >= 100


def test_no_weight_appears_in_the_commitment_or_the_proof(small):
    """A weak leak check (not a proof of zero knowledge): no run of 3 consecutive weight words in the bytes."""
    q, net, _, proof = small
    blob = net.commitment.to_bytes() + proof.to_bytes()
    weight = np.asarray(q.ops[0].weight.reshape(-1)[:3] % 2013265921, dtype="<u4").tobytes()
    assert weight not in blob


def test_wrong_output_input_and_tampering_rejected(small):
    q, net, x, proof = small
    output = proof.output.copy()
    output[0, 0] += 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, HidingGraphProof(output, proof.relations))
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x[::-1], proof)
    inner = bytearray(from_record(proof.to_bytes(), HidingGraphProof.KIND, "proof"))
    rng = np.random.default_rng(7)
    for position in sorted(set(rng.integers(0, len(inner), 12).tolist()) | {0, len(inner) - 1}):
        damaged = bytearray(inner)
        damaged[position] ^= 1 + int(rng.integers(0, 255))
        with pytest.raises(ProofRejected):
            verify_graph_zk(net.commitment, x, to_record(HidingGraphProof.KIND, bytes(damaged)))
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment.to_bytes()[:-5], x, proof)
    with pytest.raises(ProofRejected):  # a plain graph proof is not a hiding one
        verify_graph_zk(net.commitment, x, GraphNetwork(q).prove(x).to_bytes())


def test_each_proof_spends_a_copy():
    q, calibration = _quantized(_small_cnn(residual=False))
    net = HidingGraphNetwork(q, max_proofs=1)
    proof = net.prove(calibration[:1])
    assert net.proofs_left == 0
    verify_graph_zk(net.commitment, calibration[:1], proof)
    with pytest.raises(ProofError, match="copy|spent|copies"):
        net.prove(calibration[:1])


def test_grouped_convolution_with_hidden_weights():
    """A grouped convolution (G = 2) proves with hidden weights: the group letter is summed with the channel and
    kernel letters, its eq factor shared with the output; the proven output is the integer reference's."""
    q, calibration = _quantized(_small_cnn(groups=2, residual=False))
    net = HidingGraphNetwork(q, max_proofs=1)
    y = verify_graph_zk(net.commitment, calibration[:2], net.prove(calibration[:2])).output
    assert np.array_equal(y, q.forward_int(q.quantize_input(calibration[:2])))


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda: M.lenet("relu"), M.batchnorm_model, M.residual_block])
def test_onnx_models_with_hidden_weights(make, tmp_path):
    onnx.save(make(), str(tmp_path / "m.onnx"))
    q, calibration = _quantized(read_onnx(str(tmp_path / "m.onnx")))
    net = HidingGraphNetwork(q, max_proofs=1)
    y = verify_graph_zk(net.commitment, calibration[:1], net.prove(calibration[:1])).output
    assert np.array_equal(y, q.forward_int(q.quantize_input(calibration[:1])))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.generate))
@given(st.integers(1, 2), st.integers(1, 2), st.integers(0, 1), st.integers(5, 7), st.integers(0, 2 ** 31 - 1))
def test_random_conv_graphs_with_hidden_weights(batch, stride, pad, size, seed):
    rng = np.random.default_rng(seed)
    ho = (size + 2 * pad - 3) // stride + 1
    po = ho - 1
    nodes = [Contraction("conv", "Conv", ("x",), "y", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 3, 2, 3, 3)),
                         rng.normal(size=(3, 1, 1)), Patches((3, 3), (stride, stride), (pad,) * 4), (3, ho, ho)),
             Activation("relu", "Relu", ("y",), "r", "relu"),
             Contraction("pool", "AveragePool", ("r",), "p", "bgcuvij,uv->bgcij", np.full((2, 2), .25), None,
                         Patches((2, 2)), (3, po, po)),
             Reshape("flat", "Flatten", ("p",), "f", (3 * po * po,)),
             Contraction("fc", "Gemm", ("f",), "o", "bk,nk->bn", rng.normal(size=(2, 3 * po * po)), None, None, (2,))]
    q, calibration = _quantized(Graph("x", (2, size, size), tuple(nodes), "o"), seed)
    net = HidingGraphNetwork(q, max_proofs=1)
    x = calibration[:batch]
    assert np.array_equal(verify_graph_zk(net.commitment, x, net.prove(x)), q.forward_int(q.quantize_input(x)))


def test_verifier_from_bytes_whatever_the_tensor_names_order():
    """Equal-sized hidden tensors named against their op order: the verifier's structure, parsed from bytes,
    must lay the proof store out as the prover did (a regression: it followed the parsed names' order)."""
    rng = np.random.default_rng(3)
    conv = Contraction("conv", "Conv", ("x",), "zz", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 4, 4, 3, 3)),
                       None, Patches((3, 3), pads=(1, 1, 1, 1)), (4, 5, 5))
    nodes = [conv, Activation("relu1", "Relu", ("zz",), "yy", "relu"), Add("residual", "Add", ("yy", "x"), "aa"),
             Activation("relu2", "Relu", ("aa",), "mm", "relu"),
             Contraction("gap", "GlobalAveragePool", ("mm",), "g", "bchw,hw->bc", np.full((5, 5), 1 / 25), None,
                         None, (4, 1, 1)),
             Reshape("flat", "Flatten", ("g",), "f", (4,)),
             Contraction("fc", "Gemm", ("f",), "o", "bk,nk->bn", rng.normal(size=(3, 4)), None, None, (3,))]
    q, calibration = _quantized(Graph("x", (4, 5, 5), tuple(nodes), "o"))
    net = HidingGraphNetwork(q, max_proofs=1)
    x = calibration[:1]
    assert np.array_equal(verify_graph_zk(net.commitment.to_bytes(), x, net.prove(x).to_bytes()),
                          q.forward_int(q.quantize_input(x)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 2), st.integers(0, 2), st.integers(4, 7), st.integers(1, 3),
       st.integers(0, 2 ** 31 - 1))
def test_patch_gather_mle_by_factors_equals_the_table(batch, stride, pad, size, kernel, seed):
    """The verifier's G_tau~(sigma) from four small sums equals the MLE of the prover's gather table."""
    from proofs import field as F
    from proofs.layers.graph_zk import Shapes, _layouts, _Run
    from proofs.layers.network_zk import default_params
    from proofs.layers.step_relations import ShapeChannel
    from proofs.mle import mle_evaluate
    rng = np.random.default_rng(seed)
    if (size + 2 * pad - kernel) // stride + 1 < 1 or pad >= kernel:
        return
    ho = (size + 2 * pad - kernel) // stride + 1
    nodes = [Contraction("conv0", "Conv", ("x",), "h", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 2, 2, 1, 1)),
                         None, Patches((1, 1)), (2, size, size)),
             Contraction("conv", "Conv", ("h",), "y", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 3, 2, kernel, kernel)),
                         None, Patches((kernel, kernel), (stride, stride), (pad,) * 4), (3, ho, ho))]
    q, _ = _quantized(Graph("x", (2, size, size), tuple(nodes), "y"), seed)
    shapes = Shapes(q, batch)
    run = _Run(shapes, ShapeChannel(default_params(), _layouts(shapes, q)), None, None)
    index = 1
    letters, _ = shapes.views[index]
    real = shapes.view_shape(index)
    padded = tuple(shapes.pb if l == "b" else 1 << max(n - 1, 0).bit_length() for l, n in zip(letters, real))
    tau = F.to_field(rng.integers(0, F.P, size=(sum(n.bit_length() - 1 for n in padded), 4)))
    sigma = F.to_field(rng.integers(0, F.P, size=(shapes.vars("h"), 4)))
    table = run.patch_gather(index, tau, letters, real, padded)
    assert np.array_equal(run.patch_gather_eval(index, tau, letters, real, sigma), mle_evaluate(table, sigma))


# ------------------------------------------------------------------------ hiding Basefold (issue 17)
@pytest.fixture(scope="module")
def mlp_both(tmp_path_factory):
    """A small Square/Relu MLP graph proved with hidden weights over hiding Ligero and over hiding Basefold."""
    from proofs.layers.network_zk import basefold_params
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(M.mlp((24, 16, 10), "square", seed=6), str(path))
    q, calibration = _quantized(read_onnx(str(path)), seed=3)
    x = calibration[:2]
    ligero = HidingGraphNetwork(q, max_proofs=2)
    basefold = HidingGraphNetwork(q, params=basefold_params(), max_proofs=3)
    return q, x, (ligero, ligero.prove(x)), (basefold, basefold.prove(x))


def test_hiding_basefold_graph_proof_equals_the_ligero_one(mlp_both):
    """One batched opening of the model copy, the proof store and every mask: the same output as the hiding
    Ligero proof (whose openings are one reduced row each, with one commitment for all the relations' masks:
    of the same order of bytes), >= 100 proven bits."""
    q, x, (ligero_net, ligero_proof), (net, proof) = mlp_both
    commitment = HidingGraphCommitment.from_bytes(net.commitment.to_bytes())
    y = verify_graph_zk(commitment, x, proof.to_bytes()).output
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    assert np.array_equal(y, verify_graph_zk(ligero_net.commitment, x, ligero_proof))
    assert len(proof.to_bytes()) < 2 * len(ligero_proof.to_bytes()) and len(ligero_proof.to_bytes()) < 2 * len(
        proof.to_bytes())
    assert commitment.soundness_bits(len(x)) >= 100


def test_hiding_basefold_graph_proof_tampering_rejected(mlp_both):
    q, x, (ligero_net, ligero_proof), (net, proof) = mlp_both
    output = proof.output.copy()
    output[0, 0] += 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, HidingGraphProof(output, proof.relations))
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x + 0.25, proof)
    with pytest.raises(ProofRejected):  # a hiding Ligero proof against a Basefold commitment, and back
        verify_graph_zk(net.commitment, x, ligero_proof)
    with pytest.raises(ProofRejected):
        verify_graph_zk(ligero_net.commitment, x, proof)
    inner = bytearray(from_record(proof.to_bytes(), HidingGraphProof.KIND, "proof"))
    rng = np.random.default_rng(11)
    for position in sorted(set(rng.integers(0, len(inner), 25).tolist()) | {len(inner) - 1}):
        damaged = bytearray(inner)
        damaged[position] ^= 1 + int(rng.integers(0, 255))
        with pytest.raises(ProofRejected):
            verify_graph_zk(net.commitment, x, to_record(HidingGraphProof.KIND, bytes(damaged)))


def test_hiding_basefold_refuses_a_proof_store_too_large_for_its_slot_table(tmp_path):
    from proofs.layers.network_zk import basefold_params
    # the CIFAR net's proof store at batch 1 is 2^20 entries (LeNet-5's, 2^19, fits since the relations' masks
    # share the store's own padding)
    onnx.save(M.cifar("relu"), str(tmp_path / "cifar.onnx"))
    q, _ = _quantized(read_onnx(str(tmp_path / "cifar.onnx")))
    with pytest.raises(ModelError, match="too large for hiding Basefold"):
        HidingGraphNetwork(q, params=basefold_params(), max_proofs=1)
