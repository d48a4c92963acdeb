"""Issue 13: a pool's averaging constant is public; a prover cannot prove with another one.

The declared graph says a node is an AveragePool (or GlobalAveragePool): the mean over its window. A cheating
model owner quantizes the declared model honestly, then swaps the pool's kernel for another constant of the
same shape (one pixel of the window, the negated or doubled mean) and proves with the honest prover code under
the declared structure. Before the fix the pool kernels were committed weights like any other, so both graph
proofs (plain and hiding) accepted the other model's output (checked against the old modules). Now the pool
kernels are not committed: both sides derive the quantized constant from the public structure
(:func:`proofs.graph_quantize.public_weight`) and the verifier evaluates its MLE itself, so both reject.
"""
import dataclasses

import numpy as np
import pytest

from proofs import ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph import GraphCommitment, GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, verify_graph_zk
from tests.proofs.cheating import dirty_graph_proof


def _declared():
    """conv 3x3 pad 1 (2 -> 4) + relu, AveragePool 2x2 (4x4 -> 2x2), GlobalAveragePool, flatten, Gemm 4 -> 2."""
    from hezk.model import Activation, Contraction, Graph, Patches, Reshape
    rng = np.random.default_rng(0)
    nodes = (Contraction("conv", "Conv", ("x",), "h", "bgcuvij,gocuv->bgoij", rng.normal(size=(1, 4, 2, 3, 3)),
                         rng.normal(size=(4, 1, 1)) * .1, Patches((3, 3), pads=(1, 1, 1, 1)), (4, 4, 4)),
             Activation("relu", "Relu", ("h",), "r", "relu"),
             Contraction("pool", "AveragePool", ("r",), "p", "bgcuvij,uv->bgcij", np.full((2, 2), .25), None,
                         Patches((2, 2), (2, 2)), (4, 2, 2)),
             Contraction("gap", "GlobalAveragePool", ("p",), "g", "bchw,hw->bc", np.full((2, 2), .25), None, None,
                         (4, 1, 1)),
             Reshape("flat", "Flatten", ("g",), "f", (4,)),
             Contraction("fc", "Gemm", ("f",), "o", "bk,nk->bn", rng.normal(size=(2, 4)), rng.normal(size=2), None,
                         (2,)))
    calibration = rng.normal(size=(16, 2, 4, 4))
    return quantize_graph(Graph("x", (2, 4, 4), nodes, "o"), calibration), calibration


def _pick(w):
    """One pixel of the window at the mean's total gain."""
    out = np.zeros_like(w)
    out.reshape(-1)[0] = w.sum()
    return out


CHEATS = {"pick one pixel": _pick, "negate": lambda w: -w, "double": lambda w: 2 * w}


def _cheat(q, node: str, change):
    ops = tuple(dataclasses.replace(op, weight=change(op.weight)) if op.name == node else op for op in q.ops)
    return dataclasses.replace(q, ops=ops)


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
@pytest.mark.parametrize("node", ["pool", "gap"])
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_pool_with_another_constant_is_rejected(zk, node, cheat):
    q, calibration = _declared()
    x = calibration[1:2] * (.5 if cheat == "double" else 1)  # the doubled pool stays in its proven range
    dirty = _cheat(q, node, CHEATS[cheat])
    commitment, verify, proof = dirty_graph_proof(q, dirty, x, zk)
    with pytest.raises(ProofRejected):
        verify(commitment.to_bytes(), x, proof.to_bytes())
    with pytest.raises(ProofRejected):  # nor with the prover's own objects (whose structure holds the dirty kernel)
        verify((HidingGraphCommitment if zk else GraphCommitment)(dirty, commitment.weights), x, proof)


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
def test_honest_pools_accepted(zk):
    q, calibration = _declared()
    x = calibration[1:3]
    net = HidingGraphNetwork(q, max_proofs=1) if zk else GraphNetwork(q)
    verify = verify_graph_zk if zk else verify_graph
    out = verify(net.commitment.to_bytes(), x, net.prove(x).to_bytes())
    assert np.array_equal(out, q.forward_int(q.quantize_input(x)))
