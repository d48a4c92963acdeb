"""Network verifier checks that the mutation run of proofs/layers/network.py found untested
(tests/mutation/survivors.md).

The Basefold `conjectured=True` refusal is the verifier's first decision on the commitment, taken before any
proof work: a proof that is also wrong elsewhere (a changed output entry, inside the declared range, caught by the
layer sumchecks) is refused *as conjectured*, at the model commitment (kills `_verify` 8: the early check skipped,
so the tampering is found first; 11, 14, 15, 16: the refusal's location changed)."""
import dataclasses

import numpy as np
import pytest

from proofs.basefold import BasefoldParams
from proofs.errors import ProofRejected
from proofs.layers.network import Network, verify_network
from proofs.quantize import quantize_fixed_point, quantize_input
from tests.proofs.test_network import float_mlp


@pytest.fixture(scope="module")
def conjectured():
    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(2).uniform(-1, 1, (2, 16)))
    network = Network(model, zk=False, params=BasefoldParams(conjectured=True))
    return network, x, network.prove(x)


def _tampered(network, proof):
    """The proof with one output entry moved by 1 inside the last layer's declared range."""
    lo, hi = network.commitment.layers[-1].output_range()
    output = proof.output.copy()
    output[0, 0] += 1 if output[0, 0] < hi else -1
    assert lo <= output[0, 0] <= hi
    return dataclasses.replace(proof, output=output)


def test_conjectured_refusal_comes_first_and_names_the_model_commitment(conjectured):
    network, x, proof = conjectured
    bad = _tampered(network, proof)
    with pytest.raises(ProofRejected) as tampered:  # opted in: the tampering itself is caught, in a layer
        verify_network(network.commitment, x, bad, allow_conjectured=True)
    assert tampered.value.where.startswith("layer")
    for candidate in (proof, bad):  # not opted in: refused as conjectured before any proof work
        with pytest.raises(ProofRejected, match="did not allow conjectured soundness") as refused:
            verify_network(network.commitment, x, candidate)
        assert refused.value.where == "model commitment"
