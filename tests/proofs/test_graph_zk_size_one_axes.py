"""A size-1 axis has no variable in the hiding graph proof's layout, so it never splits the summed letters' block:
a contraction 'bpqr,pqrz->bpqz' on a (p, 1, r) sample (LayerNorm's row broadcast in a sequence-first layer,
whose batch axis of 1 is a sample axis) is proven with hidden weights, equals forward_int, and a tampered proof is
rejected."""
from __future__ import annotations

import numpy as np
import pytest

from proofs.errors import ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph_zk import HidingGraphNetwork, HidingGraphProof, verify_graph_zk
from proofs.proof_format import from_record, to_record


def _graph(p: int, r: int, z: int, equation: str, weight_shape, rng):
    from hezk.model.graph import Contraction, Graph
    node = Contraction("fc", "MatMul", ("x",), "y", equation, rng.normal(size=weight_shape) / 4, None, None,
                       (p, 1, z))
    return Graph("x", (p, 1, r), (node,), "y")


@pytest.mark.parametrize("equation, weight_shape", [
    ("bpqr,pqrz->bpqz", (4, 1, 8, 4)),   # the size-1 q between the summed p and r
    ("bpqr,qrz->bpqz", (1, 8, 4)),       # q first in the weight, summed r only
])
def test_a_size_one_letter_between_summed_letters_is_proven_with_hidden_weights(equation, weight_shape):
    rng = np.random.default_rng(5)
    graph = _graph(4, 8, 4, equation, weight_shape, rng)
    calibration = rng.uniform(-1, 1, size=(8, 4, 1, 8))
    q = quantize_graph(graph, calibration)
    x = q.quantize_input(calibration[:2])
    reference = q.forward_int(x)
    net = HidingGraphNetwork(q, max_proofs=2)
    proof = net.prove(x)
    verified = verify_graph_zk(net.commitment, x, proof)
    assert np.array_equal(verified.output.reshape(reference.shape), reference)
    output = proof.output.copy()
    output.reshape(-1)[0] += 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(net.commitment, x, HidingGraphProof(output, proof.relations))
    inner = bytearray(from_record(proof.to_bytes(), HidingGraphProof.KIND, "proof"))
    for position in (len(inner) // 3, len(inner) // 2, len(inner) - 1):  # the relations' sumcheck messages
        damaged = bytearray(inner)
        damaged[position] ^= 0x5A
        with pytest.raises(ProofRejected):
            verify_graph_zk(net.commitment, x, to_record(HidingGraphProof.KIND, bytes(damaged)))
