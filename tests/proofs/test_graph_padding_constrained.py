"""Issue 13: the padding of a graph proof's committed tensors cannot change the proven statement.

Every axis of every tensor is padded to a power of two. A cheating model owner commits a *wider* model in the
padding: a 16 -> 5 -> 3 MLP is committed with 3 more hidden units in the padded rows of fc1 (weights and/or
bias) and the padded columns of fc2, and the proof is made by the honest prover code for that wider model
under the declared (narrow) structure. The padded layouts are identical, so every relation other than the
padding checks holds: before the fix both graph proofs (plain and hiding) accepted an output that the
declared model, with the committed weights' real entries, does not produce (checked against the old modules).
Now the plain proof shows the weights' and biases' padding is zero (in the weights' merge sumcheck) and the
hiding proof shows every stored activation's padding is zero (in its select relation), so both reject.
"""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
from tests.proofs.cheating import dirty_graph_proof

onnx = pytest.importorskip("onnx")
from hezk.model import read_onnx  # noqa: E402
from tests.model import onnx_models as M  # noqa: E402

WIDTH = 8  # the hidden width 5 padded


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "mlp.onnx"
    onnx.save(M.mlp((16, 5, 3), activation="relu"), str(path))
    graph = read_onnx(str(path))
    calibration = np.random.default_rng(0).normal(size=(16, 16))
    return quantize_graph(graph, calibration), calibration[:1]


def _widened(q, weights: bool, bias: bool):
    """The declared graph with fc1/fc2 widened to WIDTH hidden units: its real entries are the declared ones,
    the extra ones (the declared padding) copy hidden units 0..2 (fc1 rows, bias) and feed fc2's output."""
    fc1, fc2 = q.ops
    hidden = fc1.output
    w1 = np.zeros((WIDTH, fc1.weight.shape[1]), dtype=np.int64)
    w1[:5] = fc1.weight
    b1 = np.zeros(WIDTH, dtype=np.int64)
    b1[:5] = fc1.bias
    if weights:
        w1[5:] = fc1.weight[:3]
        b1[5:] = fc1.bias[:3]
    if bias:
        b1[5:] = np.abs(fc1.bias).max() * 4 + 64
    w2 = np.zeros((fc2.weight.shape[0], WIDTH), dtype=np.int64)
    w2[:, :5] = fc2.weight
    w2[:, 5:] = np.maximum(np.abs(fc2.weight[:, :3]) // 2, 1)
    fc1 = dataclasses.replace(fc1, weight=w1, bias=b1, weight_shape=w1.shape, bias_shape=b1.shape,
                              einsum_shape=(WIDTH,), shape=(WIDTH,))
    fc2 = dataclasses.replace(fc2, weight=w2, weight_shape=w2.shape)
    return dataclasses.replace(q, ops=(fc1, fc2), shapes={**q.shapes, hidden: (WIDTH,)})


CHEATS = {"weights": (True, False), "bias": (False, True)}


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_graph_proof_rejects_a_wider_model_in_the_padding(declared, cheat, zk):
    q, x = declared
    commitment, verify, proof = dirty_graph_proof(q, _widened(q, *CHEATS[cheat]), x, zk)
    with pytest.raises(ProofRejected):
        verify(commitment.to_bytes(), x, proof.to_bytes())


def _cnn():
    """conv 3x3 pad 1 (2 -> 3 channels, padded to 4) + relu, global average pool, flatten, Gemm 3 -> 2."""
    from hezk.model import Activation, Contraction, Graph, Patches, Reshape
    rng = np.random.default_rng(0)
    nodes = (Contraction("conv", "Conv", ("x",), "h", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 3, 2, 3, 3)),
                         rng.normal(size=(3, 1, 1)) * .1, Patches((3, 3), pads=(1, 1, 1, 1)), (3, 4, 4)),
             Activation("relu", "Relu", ("h",), "r", "relu"),
             Contraction("gap", "GlobalAveragePool", ("r",), "g", "bchw,hw->bc", np.full((4, 4), 1 / 16), None, None,
                         (3, 1, 1)),
             Reshape("flat", "Flatten", ("g",), "f", (3,)),
             Contraction("fc", "Gemm", ("f",), "o", "bk,nk->bn", rng.normal(size=(2, 3)), rng.normal(size=2), None,
                         (2,)))
    graph = Graph("x", (2, 4, 4), nodes, "o")
    calibration = rng.normal(size=(16, 2, 4, 4))
    return quantize_graph(graph, calibration), calibration[:1]


def _widened_cnn(q):
    """A 4th conv output channel in the padding (a copy of channel 0), carried by the pool and the free flatten
    into fc's padded column."""
    conv, gap, flat, fc = q.ops
    w = np.zeros((1, 4, *conv.weight.shape[2:]), dtype=np.int64)
    w[:, :3], w[:, 3] = conv.weight, conv.weight[:, 0]
    b = np.zeros(4, dtype=np.int64)
    b[:3], b[3] = conv.bias, conv.bias[0]
    w2 = np.zeros((fc.weight.shape[0], 4), dtype=np.int64)
    w2[:, :3], w2[:, 3] = fc.weight, np.maximum(np.abs(fc.weight[:, 0]), 1)
    ops = (dataclasses.replace(conv, weight=w, bias=b, weight_shape=w.shape, bias_shape=b.shape,
                               einsum_shape=(1, 4, 4, 4), shape=(4, 4, 4)),
           dataclasses.replace(gap, einsum_shape=(4,), shape=(4, 1, 1)), dataclasses.replace(flat, shape=(4,)),
           dataclasses.replace(fc, weight=w2, weight_shape=w2.shape))
    return dataclasses.replace(q, ops=ops, shapes={**q.shapes, conv.output: (4, 4, 4), gap.output: (4, 1, 1),
                                                  flat.output: (4,)})


@pytest.mark.parametrize("zk", [False, True])
def test_conv_output_channel_in_the_padding_is_rejected(zk):
    """The cheat through a convolution: the patch relations read only real view entries, but the hidden channel
    reaches the output through the pool and a free flatten (same padded layout) into fc's padded column."""
    q, x = _cnn()
    wide = _widened_cnn(q)
    commitment, verify, proof = dirty_graph_proof(q, wide, x, zk)
    with pytest.raises(ProofRejected):
        verify(commitment.to_bytes(), x, proof.to_bytes())


@pytest.mark.parametrize("prefix", ["v.", "a.", "t0.fwd"])
def test_hiding_proof_rejects_dirty_padding_in_its_own_store(prefix):
    """The hiding prover's store: a patch copy (v.), a stored activation (a.) or a requantization's bit planes
    (t0.fwd: zero in the padding, where the layer relation adds h on the real entries only) with a nonzero padded
    entry (the rest honest) is rejected (the patch relation's gather, the select relation, the layer relation);
    the old code rejected the first two too: a lone dirty entry breaks a relation over the whole cube, only a
    consistent wider trace (above) got through. The cheater skips its own check of the boxes' padding."""
    from unittest import mock

    from proofs.layers import graph_zk as Z
    q, x = _cnn()
    honest_tables = Z.proof_tables

    dirtied = []

    def dirty(shapes, values, accs):
        tables = honest_tables(shapes, values, accs)
        for key, table in tables.items():
            if key.startswith(prefix):
                if prefix == "v.":
                    index = int(key[2:])
                    real = shapes.view_shape(index)
                    padded = tuple(shapes.pb if l == "b" else Z.padded_size(n) for l, n in zip(shapes.views[index][0], real))
                elif prefix == "t0.fwd":  # plane 0's padding (the planes follow one another)
                    output = shapes.q.ops[int(key[len(prefix):].split(".")[0])].output
                    real, padded = shapes.real(output), shapes.padded(output)
                    if np.prod(real) == np.prod(padded):
                        continue
                    outside = np.setdiff1d(np.arange(int(np.prod(padded))), Z._positions(real, padded))
                    table[outside[len(outside) // 2]] = 1
                    dirtied.append(key)
                    continue
                else:
                    real, padded = shapes.real(key[2:]), shapes.padded(key[2:])
                outside = np.setdiff1d(np.arange(table.shape[0]), Z._positions(real, padded))
                table[outside[len(outside) // 2]] = 5
                dirtied.append(key)
        return tables

    from proofs import relations
    net = HidingGraphNetwork(q, max_proofs=1)  # the cheater skips its own check of the boxes' padding (check_box)
    with mock.patch.object(Z, "proof_tables", dirty), mock.patch.object(relations, "check_box", lambda *a: None):
        proof = net.prove(x)
    assert dirtied  # a table of this kind with padding was dirtied
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment.to_bytes(), x, proof.to_bytes())


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3), min_size=1, max_size=4), st.integers(0, 2 ** 32))
def test_packed_padding_factor_matches_its_table(shapes, seed):
    """Naive twin: the verifier's O(n) P~(sigma) of the packed weights equals the MLE of the prover's table, and
    the table is zero exactly on every table's declared box (eq(tau, x) elsewhere)."""
    from proofs import field as F
    from proofs.layers import graph as G
    from proofs.layers.contraction import pad_operand
    from proofs.layers.packing import Packing
    from proofs.mle import eq_table, mle_evaluate
    boxes = [(tuple(s[::-1]), tuple((max(n, 1) - 1).bit_length() for n in s[::-1])) for s in shapes]
    packing = Packing(tuple(int(np.prod([1 << b for b in box[1]])) for box in boxes))
    rng = np.random.default_rng(seed)
    tau, sigma = (F.to_field(rng.integers(0, 2 ** 62, size=(packing.num_vars, 4))) for _ in range(2))
    table = G._padding_table(tau, packing, boxes)
    assert F.ext_eq(mle_evaluate(table, sigma), G._padding_eval(tau, sigma, packing, boxes))
    inside = packing.pack([F.to_field(pad_operand(np.ones(s, dtype=np.int64)).reshape(-1)) for s in shapes])
    assert np.array_equal(table, F.ext_mul_base(eq_table(tau), np.uint64(1) - inside))


def test_honest_padded_model_still_accepted(declared):
    """The declared model (zero padding) is proved and accepted by both proofs."""
    q, x = declared
    honest = q.forward_int(q.quantize_input(x))
    net = GraphNetwork(q)
    assert np.array_equal(verify_graph(net.commitment.to_bytes(), x, net.prove(x).to_bytes()), honest)
    hnet = HidingGraphNetwork(q, max_proofs=1)
    assert np.array_equal(verify_graph_zk(hnet.commitment.to_bytes(), x, hnet.prove(x).to_bytes()), honest)
